"""Run chapter 2's CUDA kernels on the CPU, through the emulation in ``emu.h`` (tests only).

    with emulated(module):                    # module: a step's launcher (k02a/k02b/solution)
        out = module.attention(q, k, v, causal=True)     # q, k, v: CPU fp16 tensors

The launcher runs unchanged: its ``load_cuda`` module is replaced by one whose kernels are the same
.cu file compiled for the CPU with g++ (every CUDA thread a fiber; see emu.h), and its input check
accepts CPU tensors. So the grid, block, shared-memory size and arguments are the launcher's own.
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


_AVAILABLE: bool | None = None


def available() -> bool:
    """Whether g++ is here and builds what emu.h needs (C++20, _Float16, ucontext)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = False
        if shutil.which("g++"):
            import tempfile
            with tempfile.TemporaryDirectory() as d:
                src = Path(d, "probe.cpp")
                src.write_text("#include <ucontext.h>\nint main() { _Float16 h = (_Float16)1.5f; ucontext_t c; "
                               "getcontext(&c); return (int)(float)h - 1; }\n")
                r = subprocess.run(["g++", "-std=c++20", str(src), "-o", str(Path(d, "probe"))], capture_output=True)
                _AVAILABLE = r.returncode == 0 and subprocess.run([str(Path(d, "probe"))]).returncode == 0
    return _AVAILABLE


def _kernels(src: str) -> list[tuple[str, list[str]]]:
    """(name, [parameter types]) of every ``extern "C" __global__`` kernel in the source."""
    out = []
    for m in re.finditer(r'extern\s+"C"\s+__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?'
                         r'(\w+)\s*\(([^)]*)\)', src):
        types = []
        for p in m.group(2).split(","):
            p = re.sub(r"__restrict__", "", p).strip()
            types.append(re.sub(r"\b\w+$", "", p).strip())          # drop the parameter's name
        out.append((m.group(1), types))
    return out


def build(cu: Path) -> ctypes.CDLL:
    """Compile ``cu`` with g++ against emu.h into a shared library (cached by content)."""
    cu = Path(cu).resolve()
    src = cu.read_text()
    emu_h = (HERE / "emu.h").read_text()
    key = hashlib.sha256((src + emu_h).encode()).hexdigest()[:24]
    lib = CACHE / f"{cu.stem}-{key}.so"
    if not lib.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        wrappers = []
        for name, types in _kernels(src):
            args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
            wrappers.append(f'extern "C" void emu_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned threads, '
                            f'void** a) {{ emu::run_grid(dim3{{gx, gy, gz}}, threads, [&] {{ {name}({args}); }}); }}')
        harness = CACHE / f"{cu.stem}-{key}.cpp"
        harness.write_text(f'#include "{cu}"\nalignas(16) float4 smem[{SMEM_BYTES // 16}];\n'
                           'extern "C" long emu_switches() { return emu::switches; }\n' + "\n".join(wrappers) + "\n")
        tmp = lib.with_suffix(f".{os.getpid()}.tmp")
        cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-w", "-include", str(HERE / "emu.h"),
               "-I", str(HERE / "include"), str(harness), "-o", str(tmp)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"g++ could not build {cu.name} for the emulator:\n{r.stderr[-4000:]}")
        tmp.replace(lib)
    return ctypes.CDLL(str(lib))


class EmuKernel:
    def __init__(self, lib, name: str, types: list[str]):
        self.fn = getattr(lib, f"emu_{name}")
        self.name, self.types = name, types
        self.launches = []

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
        self.fn.argtypes = [ctypes.c_uint] * 4 + [ctypes.c_void_p]
        self.fn(*grid, block[0], argv)


class EmuModule:
    """Stands in for a :class:`flashtutor.loaders.nvrtc.CudaModule` of the same .cu file."""

    def __init__(self, cu):
        self.path = str(cu)
        self.lib = build(Path(cu))
        self.kernels = {name: EmuKernel(self.lib, name, types) for name, types in _kernels(Path(cu).read_text())}

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
    saved = {}

    def cpu_check_inputs(q, k, v, **kw):
        kw["device_type"] = None
        return api.check_inputs(q, k, v, **kw)

    targets = [(module, "_mod", emu_mod), (module, "check_inputs", cpu_check_inputs),
               (flashtutor, "check_inputs", cpu_check_inputs)]
    try:
        for obj, attr, new in targets:
            saved[(id(obj), attr)] = (obj, attr, getattr(obj, attr, None), hasattr(obj, attr))
            setattr(obj, attr, new)
        yield emu_mod
    finally:
        for obj, attr, old, had in saved.values():
            if had:
                setattr(obj, attr, old)
            else:
                delattr(obj, attr)
