"""Run chapter 3's wmma kernels on the CPU, through the emulation in ``emu03.h`` (tests only).

    with emulated(launcher_module):               # the solution's attention.py, k03b_cp_async, k03c_swizzle
        out = launcher_module.attention(q, k, v, causal=True)      # CPU fp16 tensors

The launcher runs unchanged (its grid, block, shared-memory size and arguments): only its compiled
module is replaced by the same .cu file built for the CPU with g++. The PTX inline assembly of the
kernels (cp.async and ex2.approx) cannot run there, so the helper functions that hold it are swapped
for emulated ones by name before compiling; everything else is the kernel's own source.
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
CACHE = Path(os.environ.get("FLASHTUTOR_CACHE", Path.home() / ".cache" / "flashtutor")) / "emu03"
SMEM_BYTES = 232448          # the most dynamic shared memory a launch may ask for on sm_90 (227 KB)

# helper functions whose bodies are PTX: name -> the emulated definition
REPLACE = {
    "cp_async_16": "inline void cp_async_16(void* dst, const void* src, bool valid) { emu_cp_async(dst, src, valid); }",
    "cp_async_commit": "inline void cp_async_commit() { emu_cp_commit(); }",
    "cp_async_wait": "template <int N> inline void cp_async_wait() { emu_cp_wait(N); }",
    "fast_exp2": "inline float fast_exp2(float x) { return std::exp2(x); }",
}


_AVAILABLE: bool | None = None


def available() -> bool:
    """g++ is here and knows _Float16 (GCC 12 or newer on x86-64), which the emulation's __half is."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = False
        if shutil.which("g++"):
            r = subprocess.run(["g++", "-std=c++20", "-fsyntax-only", "-x", "c++", "-"],
                               input="_Float16 h = 1; int main() { return (int)h; }\n", capture_output=True, text=True)
            _AVAILABLE = r.returncode == 0
    return _AVAILABLE


def kernels(src: str) -> list[tuple[str, list[str]]]:
    """(name, [parameter types]) of every ``extern "C" __global__`` kernel in the source."""
    out = []
    for m in re.finditer(r'extern\s+"C"\s+__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?'
                         r'(\w+)\s*\(([^)]*)\)', src):
        types = []
        for p in m.group(2).split(","):
            p = re.sub(r"__restrict__", "", p).strip()
            types.append(re.sub(r"\b\w+$", "", p).strip())
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
    for name, new in REPLACE.items():
        src = _replace_function(src, name, new)
    return src


def build(cu: Path) -> ctypes.CDLL:
    cu = Path(cu).resolve()
    src = transform(cu.read_text())
    header = (HERE / "emu03.h").read_text()
    key = hashlib.sha256((src + header).encode()).hexdigest()[:24]
    lib = CACHE / f"{cu.stem}-{key}.so"
    if not lib.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        body = CACHE / f"{cu.stem}-{key}.cu.cpp"
        body.write_text(src)
        wrappers = []
        for name, types in kernels(src):
            args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
            wrappers.append(f'extern "C" void emu_{name}(unsigned gx, unsigned gy, unsigned threads, void** a) '
                            f'{{ emu::run_grid(dim3{{gx, gy, 1}}, threads, [&] {{ {name}({args}); }}); }}')
        harness = CACHE / f"{cu.stem}-{key}.cpp"
        harness.write_text(f'#include "{body}"\nalignas(128) unsigned char smem[{SMEM_BYTES}];\n'
                           f'static int emu_init = (emu::shared_base = smem, emu::shared_size = {SMEM_BYTES}, 0);\n'
                           'extern "C" long emu_errors() { return emu::errors; }\n' + "\n".join(wrappers) + "\n")
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-w", "-include", str(HERE / "emu03.h"),
               "-I", str(HERE / "include"), str(harness), "-o", str(tmp)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"g++ could not build {cu.name} for the emulator:\n{r.stderr[-4000:]}")
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


class EmuKernel:
    def __init__(self, lib, name: str, types: list[str]):
        self.fn = getattr(lib, f"emu_{name}")
        self.fn.argtypes = [ctypes.c_uint] * 3 + [ctypes.c_void_p]
        self.name, self.types = name, types
        self.launches: list[dict] = []

    def __call__(self, *, grid, block, args=(), shared_mem: int = 0):
        import torch
        grid = tuple(grid) + (1,) * (2 - len(tuple(grid)))
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
            elif t == "int":
                holders.append(ctypes.c_int(int(a)))
            else:
                raise TypeError(f"{self.name}: argument of type {t} from {type(a).__name__}")
        argv = (ctypes.c_void_p * len(holders))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        self.fn(grid[0], grid[1], block[0], argv)


class EmuModule:
    """Stands in for the :class:`flashtutor.loaders.nvrtc.CudaModule` of the same .cu file."""

    def __init__(self, cu):
        self.path = str(cu)
        self.lib = build(Path(cu))
        self.lib.emu_errors.restype = ctypes.c_long
        self.kernels = {name: EmuKernel(self.lib, name, types) for name, types in kernels(Path(cu).read_text())}

    def errors(self) -> int:
        """How many times a wmma load or store broke the alignment or stride rule."""
        return int(self.lib.emu_errors())

    def kernel(self, name: str) -> EmuKernel:
        return self.kernels[name]

    def __getattr__(self, name):
        if name.startswith("_") or name in ("path", "lib", "kernels"):
            raise AttributeError(name)
        return self.kernel(name)


@contextlib.contextmanager
def emulated(module, cu=None):
    """Within the block, ``module.attention`` runs its kernels in the emulator on CPU tensors."""
    import flashtutor
    from flashtutor import api

    cu = Path(cu or getattr(module, "SOURCE", None) or getattr(module, "_kernel_file"))
    emu_mod = EmuModule(cu)

    def cpu_check_inputs(q, k, v, **kw):
        kw["device_type"] = None
        return api.check_inputs(q, k, v, **kw)

    targets = [(module, "_mod", emu_mod), (flashtutor, "check_inputs", cpu_check_inputs)]
    if hasattr(module, "check_inputs"):
        targets.append((module, "check_inputs", cpu_check_inputs))
    saved = []
    try:
        for obj, attr, new in targets:
            saved.append((obj, attr, getattr(obj, attr, None)))
            setattr(obj, attr, new)
        yield emu_mod
    finally:
        for obj, attr, old in reversed(saved):
            setattr(obj, attr, old)
