"""Run the course's CUDA kernels on the CPU, through the emulation in ``emu.h`` (tests only).

    with emulated(module):                    # module: a launcher (k02a, k03b_cp_async, a solution's attention.py)
        out = module.attention(q, k, v, causal=True)     # q, k, v: CPU fp16 tensors

    softmax = EmuModule(cu)                   # or only the kernels of a .cu file: softmax.softmax_rows(grid=...)

The launcher runs unchanged: its compiled module is replaced by one whose kernels are the same .cu
file compiled for the CPU with g++ (every CUDA thread a fiber; see emu.h), and its input check
accepts CPU tensors. So the grid, block, shared-memory size and arguments are the launcher's own.

The optional parts of the emulation come with what a kernel uses: ``#include <mma.h>`` brings in
wmma.h (nvcuda::wmma), and the helper functions whose bodies are PTX inline assembly (cp.async,
ex2.approx), which g++ cannot compile, are swapped by name for emulated ones (REPLACE; cp_async.h).
``poison_shared=True`` fills shared memory with NaN before each block.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("FLASHTUTOR_CACHE", Path.home() / ".cache" / "flashtutor")) / "emu"
SMEM_BYTES = 232448          # the most dynamic shared memory a launch may ask for (227 KB on sm_90)
GXX_FLAGS = ["-std=c++20", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-w"]

# helper functions whose bodies are PTX: name -> the emulated definition
_CP_ASYNC = '#include "cp_async.h"\n'
REPLACE = {
    "cp_async_16": _CP_ASYNC + "inline void cp_async_16(void* dst, const void* src, bool valid) "
                               "{ emu_cp_async(dst, src, valid); }",
    "cp_async_commit": _CP_ASYNC + "inline void cp_async_commit() { emu_cp_commit(); }",
    "cp_async_wait": _CP_ASYNC + "template <int N> inline void cp_async_wait() { emu_cp_wait(N); }",
    "fast_exp2": "inline float fast_exp2(float x) { return std::exp2(x); }",
}


_AVAILABLE: bool | None = None


def available() -> bool:
    """Whether g++ is here and builds what emu.h needs (C++20 and _Float16: GCC 12 or newer on x86-64)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = False
        if shutil.which("g++"):
            import tempfile
            with tempfile.TemporaryDirectory() as d:
                src = Path(d, "probe.cpp")
                src.write_text("int main() { _Float16 h = (_Float16)1.5f; return (int)(float)h - 1; }\n")
                r = subprocess.run(["g++", "-std=c++20", str(src), "-o", str(Path(d, "probe"))], capture_output=True)
                _AVAILABLE = r.returncode == 0 and subprocess.run([str(Path(d, "probe"))]).returncode == 0
    return _AVAILABLE


def _strip_comments(src: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)


def kernels(src: str) -> list[tuple[str, list[str]]]:
    """(name, [parameter types]) of every ``extern "C" __global__`` kernel in the source."""
    out = []
    for m in re.finditer(r'extern\s+"C"\s+__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?'
                         r'(\w+)\s*\(([^)]*)\)', _strip_comments(src)):
        types = []
        for p in m.group(2).split(","):
            p = re.sub(r"__restrict__", "", p).strip()
            types.append(re.sub(r"\b\w+$", "", p).strip())          # drop the parameter's name
        out.append((m.group(1), types))
    return out


def _replace_function(src: str, name: str, new: str) -> str:
    """Replace the definition of ``name`` (its template line, if any, and its braced body) by ``new``."""
    m = re.search(r"(?m)^(template\s*<[^>]*>[^\n]*\n)?[^\n;{}]*\b" + name + r"\s*\([^)]*\)\s*\{", src)
    if not m:
        return src
    depth, i = 0, m.end() - 1
    while True:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
        if depth == 0:
            break
    return src[:m.start()] + new + "\n" + src[i:]


def transform(src: str) -> str:
    """The kernel source with its PTX helpers (REPLACE) swapped for emulated ones."""
    for name, new in REPLACE.items():
        src = _replace_function(src, name, new)
    return src


def _shared_arrays(src: str) -> list[tuple[str, str]]:
    """(type, name) of every ``extern __shared__ T name[]`` (dynamic shared memory) in the source."""
    decl = r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w\s]*?)\s+(\w+)\s*\[\s*\]"
    return list(dict.fromkeys(re.findall(decl, _strip_comments(src))))


def _harness(body: Path, src: str) -> str:
    """The translation unit g++ builds: the kernel source, its shared memory, a C entry point per kernel."""
    lines = [f'#include "{body}"']
    for i, (t, name) in enumerate(_shared_arrays(src)):
        lines.append(f"alignas(128) {t} {name}[{SMEM_BYTES} / sizeof({t})];")
        if i == 0:        # all the dynamic shared arrays of a kernel start at the same address on a GPU
            lines.append(f"static int emu_init = (emu::shared_base = (unsigned char*){name}, "
                         f"emu::shared_size = sizeof({name}), 0);")
    # Built with -fvisibility=hidden: each library keeps its own emu:: state (inline variables would
    # otherwise be one per process, shared by every library loaded); only these entry points are exported.
    lines.append('#define EMU_EXPORT extern "C" __attribute__((visibility("default")))')
    lines.append("EMU_EXPORT long emu_switches() { return emu::switches; }")
    lines.append("EMU_EXPORT long emu_errors() { return emu::errors; }")
    for name, types in kernels(src):
        args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        lines.append(f'EMU_EXPORT void emu_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned threads, int poison, '
                     f'void** a) {{ emu::poison_shared = poison; '
                     f'emu::run_grid(dim3{{gx, gy, gz}}, threads, [&] {{ {name}({args}); }}); }}')
    return "\n".join(lines) + "\n"


def build(cu: Path) -> ctypes.CDLL:
    """Compile ``cu`` with g++ against emu.h into a shared library (cached by content)."""
    cu = Path(cu).resolve()
    src = transform(cu.read_text())
    headers = "".join(h.read_text() for h in sorted(HERE.glob("*.h")) + sorted(HERE.glob("include/*.h")))
    key = hashlib.sha256("\n".join([src, headers, _harness(Path("BODY"), src), *GXX_FLAGS]).encode()).hexdigest()[:24]
    lib = CACHE / f"{cu.stem}-{key}.so"
    if not lib.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        body = CACHE / f"{cu.stem}-{key}.cu.cpp"
        body.write_text(src)
        harness = CACHE / f"{cu.stem}-{key}.cpp"
        harness.write_text(_harness(body, src))
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = ["g++", *GXX_FLAGS, "-include", str(HERE / "emu.h"), "-I", str(HERE), "-I", str(HERE / "include"),
               "-iquote", str(cu.parent), str(harness), "-o", str(tmp)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"g++ could not build {cu.name} for the emulator:\n{r.stderr[-4000:]}")
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


class EmuKernel:
    def __init__(self, lib, name: str, types: list[str], poison_shared: bool = False):
        self.fn = getattr(lib, f"emu_{name}")
        self.fn.argtypes = [ctypes.c_uint] * 4 + [ctypes.c_int, ctypes.c_void_p]
        self.name, self.types, self.poison_shared = name, types, poison_shared
        self.launches: list[dict] = []

    def __call__(self, *, grid, block, args=(), shared_mem: int = 0):
        import torch
        grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        block = tuple(block) if isinstance(block, (tuple, list)) else (block,)
        if len(args) != len(self.types):
            raise TypeError(f"{self.name} takes {len(self.types)} arguments, {len(args)} given")
        if shared_mem > SMEM_BYTES:
            raise ValueError(f"{self.name}: {shared_mem} bytes of shared memory requested, at most {SMEM_BYTES}")
        self.launches.append({"grid": grid, "block": block, "shared_mem": shared_mem})
        holders = []
        for a, t in zip(args, self.types):
            if isinstance(a, torch.Tensor):
                holders.append(ctypes.c_void_p(a.data_ptr()))
            elif t == "float":
                holders.append(ctypes.c_float(a))
            elif t in ("int", "unsigned", "unsigned int"):
                holders.append(ctypes.c_int(int(a)))
            else:
                raise TypeError(f"{self.name}: argument of type {t} from {type(a).__name__}")
        argv = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        self.fn(*grid, block[0], int(self.poison_shared), argv)


class EmuModule:
    """Stands in for a :class:`flashtutor.loaders.nvrtc.CudaModule` of the same .cu file."""

    def __init__(self, cu, *, poison_shared: bool = False):
        self.path = str(cu)
        self.lib = build(Path(cu))
        self.lib.emu_errors.restype = self.lib.emu_switches.restype = ctypes.c_long
        self.kernels = {name: EmuKernel(self.lib, name, types, poison_shared)
                        for name, types in kernels(Path(cu).read_text())}

    def errors(self) -> int:
        """How many times a wmma load or store broke the alignment or stride rule (wmma.h)."""
        return int(self.lib.emu_errors())

    def switches(self) -> int:
        """How many times a fiber has yielded at a barrier so far."""
        return int(self.lib.emu_switches())

    def kernel(self, name: str) -> EmuKernel:
        return self.kernels[name]

    def __getattr__(self, name):
        if name.startswith("_") or name in ("path", "lib", "kernels"):
            raise AttributeError(name)
        return self.kernel(name)


@contextlib.contextmanager
def emulated(module, cu=None, *, poison_shared: bool = False):
    """Within the block, ``module.attention`` runs its kernels in the emulator on CPU tensors."""
    import flashtutor
    from flashtutor import api

    cu = Path(cu or getattr(module, "SOURCE", None) or getattr(module, "_kernel_file"))
    emu_mod = EmuModule(cu, poison_shared=poison_shared)

    def cpu_check_inputs(q, k, v, **kw):
        kw["device_type"] = None
        return api.check_inputs(q, k, v, **kw)

    targets = [(module, "_mod", emu_mod), (module, "check_inputs", cpu_check_inputs),
               (flashtutor, "check_inputs", cpu_check_inputs)]
    saved = []
    try:
        for obj, attr, new in targets:
            saved.append((obj, attr, getattr(obj, attr, None), hasattr(obj, attr)))
            setattr(obj, attr, new)
        yield emu_mod
    finally:
        for obj, attr, old, had in reversed(saved):
            if had:
                setattr(obj, attr, old)
            else:
                delattr(obj, attr)
