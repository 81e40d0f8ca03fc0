"""Read what the compiler made: registers, shared memory, stack, spills, and the SASS itself.

Works without a GPU: ``cuobjdump`` (from the pip wheel ``nvidia-cuda-cuobjdump`` or a CUDA
toolkit) reads the cubin that NVRTC built for sm_90a.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter


def find_tool(name: str) -> str | None:
    try:
        import cuda.pathfinder as pf
        p = pf.find_nvidia_binary_utility(name)
        if p:
            return str(p)
    except Exception:
        pass
    return shutil.which(name) or (f"/usr/local/cuda/bin/{name}" if os.path.exists(f"/usr/local/cuda/bin/{name}") else None)


def _cuobjdump(cubin: bytes, flag: str) -> str:
    tool = find_tool("cuobjdump")
    if tool is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump (or install a CUDA toolkit)")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        r = subprocess.run([tool, flag, f.name], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"cuobjdump {flag} failed: {r.stderr.strip()}")
    return r.stdout


def disassemble(cubin: bytes) -> dict[str, list[str]]:
    """SASS per kernel: {kernel name: [instruction lines]}."""
    out: dict[str, list[str]] = {}
    current = None
    for line in _cuobjdump(cubin, "-sass").splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            current = m.group(1)
            out[current] = []
            continue
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if current and m:
            out[current].append(m.group(1).strip())
    return out


def opcode(instr: str) -> str:
    """'@!P0 LDG.E.128 R4, desc[UR6][R2.64]' -> 'LDG'."""
    tokens = instr.split()
    if tokens and tokens[0].startswith("@"):
        tokens = tokens[1:]
    return tokens[0].split(".")[0] if tokens else ""


def histogram(instrs: list[str]) -> Counter:
    return Counter(opcode(i) for i in instrs)


# Instruction classes worth counting when reading an attention kernel, in the order of the report.
CLASSES: dict[str, tuple[str, ...]] = {
    "tensor cores": ("HGMMA", "HMMA", "QGMMA", "IMMA", "WGMMA"),
    "fp32 math": ("FFMA", "FADD", "FMUL", "FMNMX", "MUFU", "FSETP", "FSEL"),
    "global loads": ("LDG", "LDGSTS", "UBLKCP", "UTMALDG"),
    "global stores": ("STG", "UTMASTG"),
    "shared memory": ("LDS", "STS", "LDSM", "STSM"),
    "local memory (spills, stack arrays)": ("LDL", "STL"),
    "branches": ("BRA", "BRX", "JMP", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "WARPSYNC"),
    "barriers": ("BAR", "MEMBAR", "SYNCS", "DEPBAR", "WARPGROUP"),
}


def classify(instrs: list[str]) -> dict[str, int]:
    """Counts per class of :data:`CLASSES` (an instruction in no class is not counted)."""
    h = histogram(instrs)
    return {name: sum(h[op] for op in ops) for name, ops in CLASSES.items()}


def predication(instrs: list[str]) -> dict[str, int]:
    """How many instructions carry a guard predicate (``@P0``/``@!P1``), and how many of them are branches.

    A predicated instruction executes only in threads whose predicate is true: the compiler's way
    to handle short if-statements without branching. The count describes control flow; it says
    nothing about whether the guarded accesses are in bounds.
    """
    pred = [i for i in instrs if i.startswith("@")]
    return {"instructions": len(instrs), "predicated": len(pred),
            "predicated branches": sum(1 for i in pred if opcode(i) in ("BRA", "BRX", "EXIT", "RET"))}


def resource_usage(cubin: bytes) -> dict[str, dict]:
    """{kernel: {registers, shared_bytes, stack_bytes, local_bytes, spill_instructions, instructions}}."""
    usage: dict[str, dict] = {}
    current = None
    for line in _cuobjdump(cubin, "-res-usage").splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            current = m.group(1)
            continue
        if current and "REG:" in line:
            vals = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            usage[current] = {"registers": int(vals.get("REG", 0)), "shared_bytes": int(vals.get("SHARED", 0)),
                              "stack_bytes": int(vals.get("STACK", 0)), "local_bytes": int(vals.get("LOCAL", 0))}
    for name, instrs in disassemble(cubin).items():
        h = histogram(instrs)
        usage.setdefault(name, {}).update(spill_instructions=h["LDL"] + h["STL"], instructions=len(instrs),
                                          opcodes=dict(sorted(h.items())))
    return usage
