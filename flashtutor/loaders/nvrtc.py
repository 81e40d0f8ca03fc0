"""Compile CUDA C++ at run time with NVRTC (through ``cuda.core``) and launch it on torch tensors.

    mod = load_cuda("chapters/01_naive_cuda/attention.cu")
    mod.attention_kernel(grid=(blocks,), block=(128,), args=(q, k, v, o, S, scale))

* Without a GPU the source still compiles (for ``sm_90a`` by default), so a CPU machine can
  check that a kernel builds and read its registers, spills and SASS.
* A compile error raises :class:`CompileError` naming the learner's file and line.
* Launches go on torch's current stream, so they order correctly with torch ops, CUDA events
  and graph capture.
* Compiled code is cached by the hash of (source, headers it includes from its folder, options, NVRTC's
  version, the CUDA headers' folder).
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("FLASHTUTOR_CACHE", Path.home() / ".cache" / "flashtutor")) / "cubin"
_memory_cache: dict[str, bytes] = {}


class CompileError(Exception):
    """NVRTC rejected the source. ``errors`` holds (file, line, message) for each error."""

    def __init__(self, path: str, log: str):
        self.path, self.log = path, log
        self.errors = [(m.group(1), int(m.group(2)), m.group(3).strip())
                       for m in re.finditer(r"^(.*?)\((\d+)\): (?:catastrophic )?error: (.*)$", log, re.M)]
        if self.errors:
            head = "\n".join(f"{f}:{ln}: error: {msg}" for f, ln, msg in self.errors[:5])
            more = f"\n… and {len(self.errors) - 5} more" if len(self.errors) > 5 else ""
        else:
            head, more = log.strip()[-2000:], ""
        super().__init__(f"{path} does not compile:\n{head}{more}")


def default_arch() -> str:
    """The architecture of the current GPU (``sm_90a`` on Hopper, to enable wgmma/setmaxnreg);
    ``sm_90a`` when there is no GPU, so CPU machines build what an H100 would run."""
    try:
        import torch
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return f"sm_{major}{minor}" + ("a" if (major, minor) == (9, 0) else "")
    except Exception:
        pass
    return "sm_90a"


def cuda_include_dir() -> str | None:
    """Where the CUDA headers (cuda_fp16.h, mma.h, crt/…) are: pip wheels first, then a toolkit."""
    try:
        import cuda.pathfinder as pf
        d = pf.find_nvidia_header_directory("cudart")
        if d and Path(d, "crt", "mma.h").exists():
            return str(d)
    except Exception:
        pass
    for d in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if d and Path(d, "include", "cuda_fp16.h").exists():
            return str(Path(d, "include"))
    return None


from ..switches import COURSE_HEADERS   # flashtutor/cuda: headers every kernel may include


def course_include_dir() -> str:
    """The course's own CUDA headers (``#include "hopper.cuh"``), on NVRTC's include path for every compile."""
    return str(COURSE_HEADERS)


def _local_headers(src: str, folder: Path) -> list[Path]:
    """The quoted includes of a source that exist beside it or among the course's headers (they go into the
    cache key: a changed header recompiles)."""
    found = set()
    for m in re.findall(r'#\s*include\s*"([^"]+)"', src):
        for d in (folder, COURSE_HEADERS):
            if (d / m).exists():
                found.add(d / m)
                break
    return sorted(found)


_nvrtc_version: str | None = None


def nvrtc_version() -> str:
    """NVRTC's version, e.g. "13.0" (part of the compile cache's key: ptxas differs between versions)."""
    global _nvrtc_version
    if _nvrtc_version is None:
        try:
            from cuda.bindings import nvrtc
            _, major, minor = nvrtc.nvrtcVersion()
            _nvrtc_version = f"{major}.{minor}"
        except Exception as e:                        # no NVRTC: compile_cuda says so when it gets there
            _nvrtc_version = f"unavailable ({type(e).__name__})"
    return _nvrtc_version


def compile_cuda(path: str | os.PathLike, *, arch: str | None = None, defines: dict | None = None,
                 extra_options: dict | None = None, disk_cache: bool = True) -> bytes:
    """Compile a .cu file to a cubin with NVRTC; cached by content hash. Raises CompileError.

    ``disk_cache=False``: neither read nor write ``~/.cache/flashtutor`` (the grader's judge compiles
    that way: a cubin left there by someone else's process is not evidence)."""
    path = Path(path).resolve()
    src = path.read_text()
    arch = arch or default_arch()
    defines = dict(defines or {})
    inc = cuda_include_dir()
    key_parts = [src, arch, repr(sorted(defines.items())), repr(sorted((extra_options or {}).items())),
                 nvrtc_version(), str(inc)]            # another compiler or other CUDA headers: another cubin
    key_parts += [h.read_text() for h in _local_headers(src, path.parent)]
    key = hashlib.sha256("\0".join(key_parts).encode()).hexdigest()[:32]
    if key in _memory_cache:
        return _memory_cache[key]
    cached = CACHE_DIR / f"{key}.cubin"
    if disk_cache and cached.exists():
        _memory_cache[key] = cached.read_bytes()
        return _memory_cache[key]

    from cuda.core import Program, ProgramOptions
    from cuda.core._utils.cuda_utils import NVRTCError

    if inc is None:
        raise CompileError(str(path), "error: CUDA headers not found (cuda_fp16.h, mma.h). "
                           "pip install nvidia-cuda-runtime nvidia-cuda-crt, or set CUDA_HOME to a toolkit.")
    opts = ProgramOptions(
        name=str(path), arch=arch, std="c++17", include_path=[str(path.parent), course_include_dir(), inc], lineinfo=True,
        define_macro=[(k, str(v)) for k, v in defines.items()] or None, **(extra_options or {}))
    try:
        obj = Program(src, "c++", opts).compile("cubin")
    except NVRTCError as e:
        log = str(e).split("compilation log:", 1)[-1].replace("\x00", "")
        raise CompileError(str(path), log) from None
    code = bytes(obj.code)
    _memory_cache[key] = code
    if not disk_cache:
        return code
    try:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(code)
        tmp.replace(cached)
    except OSError:
        pass
    return code


@dataclass
class CudaKernel:
    name: str
    kernel: object  # cuda.core Kernel
    path: str
    _param_sizes: tuple | None = None   # bytes of each parameter, asked of the driver once
    _smem_opt_in: int = 0               # dynamic shared memory this kernel has been allowed so far

    @property
    def param_sizes(self) -> tuple:
        if self._param_sizes is None:
            self._param_sizes = tuple(size for _, size in self.kernel.arguments_info)
        return self._param_sizes

    @property
    def num_regs(self) -> int:
        return self.kernel.attributes.num_regs

    @property
    def local_bytes(self) -> int:
        return self.kernel.attributes.local_size_bytes

    def __call__(self, *, grid, block, args=(), shared_mem: int = 0):
        launch(self, grid=grid, block=block, args=args, shared_mem=shared_mem)


class CudaModule:
    """A compiled .cu file. Its ``extern "C"`` kernels are attributes: ``mod.my_kernel(...)``."""

    def __init__(self, path: str | os.PathLike, cubin: bytes, arch: str):
        self.path, self.cubin, self.arch = str(path), cubin, arch
        self._obj = None
        self._kernels: dict[str, CudaKernel] = {}

    def kernel(self, name: str) -> CudaKernel:
        if name not in self._kernels:
            from cuda.core import Device, ObjectCode
            Device().set_current()   # the primary context, shared with torch
            if self._obj is None:
                self._obj = ObjectCode.from_cubin(self.cubin, name=Path(self.path).name)
            try:
                k = self._obj.get_kernel(name)
            except Exception as e:
                raise AttributeError(f"{self.path} has no kernel named {name!r} (is it declared "
                                     f'`extern "C" __global__`?): {e}') from None
            self._kernels[name] = CudaKernel(name, k, self.path)
        return self._kernels[name]

    def __getattr__(self, name: str) -> CudaKernel:
        if name.startswith("_"):
            raise AttributeError(name)
        return self.kernel(name)

    def resources(self) -> dict:
        """Registers, shared memory, stack and spill instructions per kernel (no GPU needed)."""
        from ..sass import resource_usage
        return resource_usage(self.cubin)


# Every (.cu path, defines) loaded in this process: the grading worker tells the judge, which compiles
# the same sources itself to know the learner's kernels (registers, SASS) without trusting the worker.
LOADED: list[tuple[str, dict]] = []


def load_cuda(path: str | os.PathLike, *, arch: str | None = None, defines: dict | None = None) -> CudaModule:
    """Compile ``path`` (NVRTC, cached) and load its kernels. When the CPU emulation is active
    (:func:`flashtutor.emulate.activate`: the grading worker on a machine without a GPU), the same file is
    built for the CPU with g++ instead and an :class:`flashtutor.emulate.EmuModule` is returned, whose
    kernels take the same launches on CPU tensors; ``arch`` is then ignored."""
    from ..switches import emulation_active
    if emulation_active():
        from .. import emulate                  # the loader uses the emulation; the emulation never the loader
        mod = emulate.load(path, defines=defines)
    else:
        arch = arch or default_arch()
        mod = CudaModule(path, compile_cuda(path, arch=arch, defines=defines), arch)
    entry = (str(Path(path).resolve()), dict(defines or {}))
    if entry not in LOADED:
        LOADED.append(entry)
    return mod


def _as_param(kernel: CudaKernel, i: int, a, size: int):
    import numpy as np
    import torch
    if isinstance(a, torch.Tensor):
        if a.device.type != "cuda":
            raise ValueError(f"argument {i} of {kernel.name} is a tensor on {a.device}; kernels need CUDA tensors")
        if not a.is_contiguous():
            raise ValueError(f"argument {i} of {kernel.name} is not contiguous; call .contiguous() first")
        return np.intp(a.data_ptr())
    if isinstance(a, bool):
        return np.bool_(a)
    if isinstance(a, int):
        return np.int32(a) if size == 4 else np.int64(a)
    if isinstance(a, float):
        return np.float32(a) if size == 4 else np.float64(a)
    return a  # numpy scalars, ctypes values: passed as they are


def launch(kernel: CudaKernel, *, grid, block, args=(), shared_mem: int = 0):
    """Launch on torch's current stream. Python ints/floats take the width of the kernel's parameter."""
    import torch
    from cuda.core import LaunchConfig, launch as cc_launch

    sizes = kernel.param_sizes
    if len(sizes) != len(args):
        raise TypeError(f"{kernel.name} takes {len(sizes)} arguments, {len(args)} given")
    params = [_as_param(kernel, i, a, size) for i, (a, size) in enumerate(zip(args, sizes))]
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    block = tuple(block) if isinstance(block, (tuple, list)) else (block,)
    if shared_mem > max(48 * 1024, kernel._smem_opt_in):
        _allow_dynamic_shared(kernel, shared_mem)
    cfg = LaunchConfig(grid=grid, block=block, shmem_size=shared_mem)
    cc_launch(_stream(torch.cuda.current_stream()), cfg, kernel.kernel, *params)


def _allow_dynamic_shared(kernel: CudaKernel, nbytes: int) -> None:
    """Above 48 KB of dynamic shared memory a kernel must opt in (once per kernel and size).

    cuda.core loads modules as libraries, so its kernel handle is a CUkernel (set per device with
    cuKernelSetAttribute); an older cuda.core hands out a CUfunction (cuFuncSetAttribute)."""
    from cuda.core import Device
    from cuda.core._utils.cuda_utils import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    h = kernel.kernel._handle
    if isinstance(h, driver.CUkernel):
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, h, driver.CUdevice(Device().device_id))
    else:
        (err,) = driver.cuFuncSetAttribute(h, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{kernel.name}: asking for {nbytes} bytes of dynamic shared memory failed ({err.name}); "
                           f"this GPU allows at most {Device().properties.max_shared_memory_per_block_optin} per block")
    kernel._smem_opt_in = nbytes


_streams: dict[int, object] = {}


def _stream(torch_stream):
    """cuda.core's view of a torch stream (same CUstream handle), made once per stream."""
    handle = torch_stream.cuda_stream
    s = _streams.get(handle)
    if s is None:
        from cuda.core import Device
        s = _streams[handle] = Device().create_stream(torch_stream)
    return s
