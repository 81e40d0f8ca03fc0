"""Anti-cheat: what a submission may not do, checked before it runs and while it runs.

The grader is only worth what it cannot be fooled by. A kernel that calls SDPA or a library GEMM,
that works on a side stream the timer does not see, that returns an earlier answer, or that patches
the timer, must not pass. Three layers, each catching what the one before can miss:

* **static** (:func:`scan`): the learner's Python (and the local modules it imports) is parsed and
  searched for library attention/matmul/softmax calls, the ``@`` operator, ``torch.ops.aten``,
  ``torch.backends``, CUDA streams and events, imports of the grader or the reference, and
  assignments to library attributes (monkeypatching). Names hidden in strings count too.
* **run time, trace** (:func:`judge_trace`): one call under ``torch.profiler``. No aten matmul /
  softmax / attention op may run, no library GEMM or attention kernel may appear on the GPU, at least
  one of the learner's own kernels must, and every kernel must run on the caller's stream.
* **run time, integrity** (:class:`Integrity`): the timer, the checker and the reference are
  fingerprinted before the learner's module is imported and verified after every task.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

# Calls that compute attention, a matrix product or a softmax for the learner.
FORBIDDEN_NAMES = {
    "scaled_dot_product_attention": "PyTorch's SDPA",
    "multi_head_attention_forward": "PyTorch's attention",
    "flash_attn_func": "FlashAttention's library", "flash_attn_qkvpacked_func": "FlashAttention's library",
    "memory_efficient_attention": "xformers",
    "matmul": "a library matmul", "mm": "a library matmul", "bmm": "a library matmul",
    "baddbmm": "a library matmul", "addmm": "a library matmul", "addbmm": "a library matmul",
    "einsum": "einsum (a library matmul)", "tensordot": "a library matmul", "linear": "a library matmul",
    "chain_matmul": "a library matmul", "softmax": "a library softmax", "log_softmax": "a library softmax",
    "_softmax": "a library softmax",
}
FORBIDDEN_MODULES = {
    "flash_attn": "FlashAttention's library", "xformers": "xformers",
    "flashtutor.grader": "the grader", "flashtutor.check": "the grader's checker",
    "flashtutor.timing": "the grader's timer", "flashtutor.problems": "the grader's reference",
    "flashtutor.isolate": "the grader", "flashtutor.anticheat": "the grader",
    "flashtutor.kernels": "the course's reference kernels",
}
SUSPICIOUS_ATTRS = {
    "aten": "reaches torch.ops.aten directly",
    "backends": "changes torch.backends settings",
    "Stream": "creates a CUDA stream (work on a side stream escapes the timer)",
    "stream": "switches CUDA streams (work on a side stream escapes the timer)",
    "ExternalStream": "uses a foreign CUDA stream",
    "Event": "touches CUDA events (the grader's timer)",
    "elapsed_time": "touches CUDA event timing",
    "CUDAGraph": "captures CUDA graphs itself",
}
DYNAMIC = {"getattr", "setattr", "__import__", "exec", "eval", "compile", "globals", "vars", "import_module"}
LIBRARY_ROOTS = {"torch", "triton", "flashtutor", "F", "nn", "np", "numpy", "time"}
_IDENT = re.compile(r"^[A-Za-z_][\w.]*$")   # a name as getattr/import_module would take it (not prose)
CUDA_FORBIDDEN = re.compile(r"#\s*include\s*[<\"](cublas|cublasLt|cudnn|cutlass/gemm|cute/)", re.I)


@dataclass
class Finding:
    file: str
    line: int
    what: str
    severity: str = "forbidden"        # forbidden: fails the grade; notice: reported only

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _root(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _local_imports(tree: ast.AST, folder: Path) -> list[Path]:
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for n in names:
            p = folder / (n.replace(".", "/") + ".py")
            if p.exists():
                out.append(p)
    return out


def scan_python(path: Path, allowed: frozenset = frozenset()) -> list[Finding]:
    src = path.read_text()
    try:
        tree = ast.parse(src, filename=str(path))
    except SyntaxError as e:
        return [Finding(str(path), e.lineno or 0, f"syntax error: {e.msg}")]
    found: list[Finding] = []

    def add(node, what, severity="forbidden"):
        found.append(Finding(str(path), getattr(node, "lineno", 0), what, severity))

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_NAMES and node.attr not in allowed:
                add(node, f"calls {node.attr} ({FORBIDDEN_NAMES[node.attr]}): write the computation yourself")
            elif node.attr in SUSPICIOUS_ATTRS and node.attr not in allowed:
                add(node, f"{SUSPICIOUS_ATTRS[node.attr]} ({node.attr})")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES and node.id not in allowed \
                and isinstance(node.ctx, ast.Load):
            add(node, f"calls {node.id} ({FORBIDDEN_NAMES[node.id]}): write the computation yourself")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and "@" not in allowed:
            add(node, "uses the @ operator (a library matmul)")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                mods += [f"{node.module}.{a.name}" for a in node.names]
                for a in node.names:
                    if a.name in FORBIDDEN_NAMES and a.name not in allowed:
                        add(node, f"imports {a.name} ({FORBIDDEN_NAMES[a.name]})")
            for m in mods:
                for bad, what in FORBIDDEN_MODULES.items():
                    if m == bad or m.startswith(bad + "."):
                        add(node, f"imports {m} ({what})")
                        break
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and _root(t) in LIBRARY_ROOTS:
                    add(node, f"assigns to {ast.unparse(t)}: patching a library is not allowed")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name == "setattr" and node.args and _root(node.args[0]) in LIBRARY_ROOTS:
                add(node, f"setattr on {ast.unparse(node.args[0])}: patching a library is not allowed")
            elif name in DYNAMIC:
                add(node, f"dynamic access ({name}): the run-time checks watch what it reaches", "notice")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _IDENT.match(node.value):
            for bad in ("scaled_dot_product", "flash_attn", "matmul", "einsum", "softmax", "aten"):
                if bad in node.value and bad not in allowed:
                    add(node, f"the string {node.value!r} names {bad}: hiding a forbidden call in a string "
                              f"is still a forbidden call")
                    break
    return found


def scan(entry: str | Path, cuda_files=(), allowed: frozenset = frozenset()) -> list[Finding]:
    """Static findings for a submission: its entry module, the local modules it imports, its .cu files."""
    entry = Path(entry)
    seen: set[Path] = set()
    todo = [entry]
    found: list[Finding] = []
    while todo:
        p = todo.pop().resolve()
        if p in seen:
            continue
        seen.add(p)
        found += scan_python(p, allowed)
        try:
            todo += _local_imports(ast.parse(p.read_text()), p.parent)
        except SyntaxError:
            pass
    for cu in cuda_files:
        for n, line in enumerate(Path(cu).read_text().splitlines(), 1):
            if CUDA_FORBIDDEN.search(line):
                found.append(Finding(str(cu), n, f"includes a library ({line.strip()}): write the kernel yourself"))
    return found


# ---------------------------------------------------------------- run time: the profiler trace ----
ATEN_FORBIDDEN = re.compile(
    r"^aten::(_?scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|_cudnn_attention\w*|"
    r"matmul|mm|bmm|baddbmm|addmm|addbmm|einsum|_?softmax|_?log_softmax|linear|tensordot|_addmm_activation)$")
KERNEL_FORBIDDEN = re.compile(r"gemm|cutlass|cublas|cudnn|xmma|fmha|flash|softmax|attention|sm90_|sm80_|cask",
                              re.I)


def judge_trace(aten_ops: list[str], kernels: list[tuple[str, int]], marker_stream: int | None,
                own_kernels: set[str], *, need_own_kernel: bool, allowed_kernels: re.Pattern | None = None) -> list[str]:
    """Problems in one profiled call. ``kernels`` is [(name, stream)]; ``own_kernels`` the learner's."""
    problems = []
    bad_ops = sorted({op for op in aten_ops if ATEN_FORBIDDEN.match(op)})
    if bad_ops:
        problems.append(f"calls {', '.join(bad_ops)} at run time (a library does the work)")

    def own(name: str) -> bool:
        return any(k == name or name.startswith(k + "(") or name.startswith(k + "_") or k in name
                   for k in own_kernels)

    lib = sorted({n for n, _ in kernels if KERNEL_FORBIDDEN.search(n) and not own(n)
                  and not (allowed_kernels and allowed_kernels.search(n))})
    if lib:
        problems.append("library kernels ran on the GPU: " + ", ".join(x[:80] for x in lib[:3]))
    mine = [(n, s) for n, s in kernels if own(n)]
    if need_own_kernel and not mine:
        problems.append("none of your kernels ran during the call (looked for: "
                        f"{', '.join(sorted(own_kernels)) or 'none found'})")
    if marker_stream is not None:
        side = sorted({n for n, s in mine if s != marker_stream})
        if side:
            problems.append(f"your kernel ran on a side stream (stream ≠ the caller's): {', '.join(side)}; "
                            "launch on torch.cuda.current_stream() so the timer sees the work")
    return problems


# ---------------------------------------------------------------- run time: integrity -------------
def _watched() -> dict[str, object]:
    import time

    import torch
    import torch.nn.functional as F

    from . import check, problems, timing
    objs = {
        "torch.cuda.Event": torch.cuda.Event, "torch.cuda.Event.record": torch.cuda.Event.record,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.synchronize": torch.cuda.Event.synchronize,
        "torch.cuda.synchronize": torch.cuda.synchronize, "torch.cuda.current_stream": torch.cuda.current_stream,
        "time.perf_counter": time.perf_counter,
        "F.scaled_dot_product_attention": F.scaled_dot_product_attention, "torch.softmax": torch.softmax,
        "torch.matmul": torch.matmul, "torch.isfinite": torch.isfinite, "torch.Tensor.abs": torch.Tensor.abs,
        "torch.Tensor.amax": torch.Tensor.amax, "torch.Tensor.clone": torch.Tensor.clone,
        "flashtutor.check.check_output": check.check_output, "flashtutor.check.row_bounds": check.row_bounds,
        "flashtutor.check.RATIO": check.RATIO, "flashtutor.problems.reference": problems.reference,
        "flashtutor.problems.sdpa": problems.sdpa, "flashtutor.problems.Problem.inputs": problems.Problem.inputs,
        "flashtutor.timing.compare": timing.compare, "flashtutor.timing._compare": timing._compare,
        "flashtutor.timing.Stats.of": timing.Stats.__dict__["of"],
    }
    return objs


class Integrity:
    """Fingerprints of what the grader trusts, taken before the learner's code is imported."""

    def __init__(self):
        self.before = _watched()

    def changed(self) -> list[str]:
        now = _watched()
        return [k for k, v in self.before.items() if now.get(k) is not v]
