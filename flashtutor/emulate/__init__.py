"""Run CUDA kernel files on a CPU: the same ``.cu`` source, built with g++ against an emulation of CUDA.

    from flashtutor import emulate
    emulate.activate()                        # from now on, in this process:
    mod = flashtutor.load_cuda("attention.cu")    # an EmuModule: the same kernels, built for the CPU
    mod.naive_attention(grid=(4,), block=(128,), args=(q, k, v, o, ...))   # q, k, v, o: CPU tensors

    softmax = EmuModule("softmax.cu")         # or one file's kernels, without activating anything
    with emulated(module):                    # (tests) a launcher whose _mod and check_inputs are swapped
        out = module.attention(q, k, v)

**Native code.** A kernel file is compiled by g++ into a shared library that is loaded into the calling
process: the learner's source becomes machine code running with that process's rights. The grader loads it
only in its worker process (the one that runs the learner's Python anyway), never in the judge. Builds are
cached by the hash of the source, its quoted includes, the defines and this emulation's headers, under
``$FLASHTUTOR_CACHE/emu`` (default ``~/.cache/flashtutor/emu``).

**Threads.** Every CUDA thread of a block is a fiber (a user-level context with a 256 KB stack) on the
calling OS thread; a block's threads are numbered x + y·Dx + z·Dx·Dy as on a GPU, and warps are 32
consecutive threads. Blocks run one after another (x fastest, then y, then z). A fiber runs until it reaches
a barrier — ``__syncthreads``, ``__syncwarp``, a shuffle, a vote — or returns; the scheduler then runs the
next one, so barrier order, masking, indexing and math run as written, but every write is seen at once by
every thread (no data race can show: the GPU tier's compute-sanitizer racecheck is for those). A thread that
returns no longer holds up a barrier (as PTX's ``exit``). When every running thread of a block waits at a
barrier that can no longer complete, the launch raises a RuntimeError that describes the deadlock; a thread
that loops forever without reaching a barrier hangs the process (the grader's check timeout ends it).
Launches are synchronous and run on the caller's thread: there are no streams.

**What a kernel file may use.**

* Kernels declared ``extern "C" __global__`` (only those are launchable; ``__launch_bounds__`` is ignored),
  ``__device__``/``__forceinline__``/``__noinline__`` functions, ``__restrict__``, templates and
  ``constexpr`` (the file is compiled as C++20). Kernel parameters: pointers (passed CPU tensors, or ints as
  addresses), ``int``, ``unsigned``, ``long``/``long long``/``size_t``/``(u)int32_t``/``(u)int64_t``,
  ``float``, ``double``, ``bool``.
* ``threadIdx``, ``blockIdx``, ``blockDim``, ``gridDim`` (x, y, z), ``warpSize``; ``__syncthreads``,
  ``__syncthreads_count``/``_and``/``_or``, ``__syncwarp(mask)``; ``__shfl_sync``, ``__shfl_xor_sync``,
  ``__shfl_up_sync``, ``__shfl_down_sync`` (with ``width``, on any value of at most 8 bytes),
  ``__ballot_sync``, ``__any_sync``, ``__all_sync``, ``__activemask`` (a mask limits who is waited for to its
  running lanes); ``atomicAdd``, ``atomicSub``, ``atomicMax``, ``atomicMin``, ``atomicExch``, ``atomicCAS``,
  ``atomicAnd``, ``atomicOr``; ``__threadfence``/``__threadfence_block`` (no-ops), ``__ldg``,
  ``printf``, ``assert`` (a failed assert aborts the process: a crash, where a GPU reports a device-side
  assert).
* fp16 (``<cuda_fp16.h>``): ``__half`` (g++'s ``_Float16``, with its operators), ``__half2``,
  ``__half2float``, ``__float2half``, ``__float2half_rn``, ``__floats2half2_rn``, ``__float2half2_rn``,
  ``__half22float2``, ``__halves2half2``, ``__low2float``, ``__high2float``, ``__hadd``, ``__hsub``,
  ``__hmul``, ``__hfma``, ``__hmax``, ``__hmin``, ``__hadd2``, ``__hmul2``; ``float2``, ``float4``,
  ``uint2``, ``uint4`` and their ``make_*``.
* Math: the C library's float functions (``expf``, ``exp2f``, ``fmaxf``, ``fmaf``, ``sqrtf``, ...) and the
  intrinsics ``__expf``, ``__exp2f``, ``__logf``, ``__log2f``, ``__powf``, ``__sinf``, ``__cosf``,
  ``__fdividef``, ``__frcp_rn``, ``__fsqrt_rn``, ``rsqrtf``, ``__saturatef``, ``__fmaf_rn``, ``__fmul_rn``,
  ``__fadd_rn`` — computed exactly, not approximated, so the last bits may differ from a GPU's;
  ``__float_as_int``, ``__float_as_uint``, ``__int_as_float``, ``__uint_as_float``, ``__float2int_rn``,
  ``__float2int_rz``, ``__popc``, ``__clz``, ``__ffs``; ``CUDART_INF_F``, ``CUDART_NAN_F``,
  ``CUDART_PI_F`` (``<math_constants.h>``).
* WMMA (``#include <mma.h>``, ``nvcuda::wmma``; see wmma.h): 16×16×16 fragments only — ``matrix_a`` fp16
  row-major, ``matrix_b`` fp16 col- or row-major, ``accumulator`` float — with ``load_matrix_sync``,
  ``store_matrix_sync`` (``mem_row_major``/``mem_col_major`` for the accumulator), ``fill_fragment`` and
  ``mma_sync``. An accumulator's elements ``x[0..7]`` sit in a scrambled order unlike any GPU's: a kernel
  must go through memory (store/load) to know which element is which. Every pointer must be 32-byte aligned
  and every ``ldm`` a multiple of 16 bytes: a launch that breaks the rule raises (when activated; counted
  in :meth:`EmuModule.errors` otherwise).
* cp.async, only through helper functions of exactly these names, whose PTX bodies are swapped for the
  emulation's (cp_async.h): ``cp_async_16(void* dst, const void* src, bool valid)`` (16 bytes, zeros when not
  ``valid``), ``cp_async_commit()``, ``template <int N> cp_async_wait()``. A copy lands only when a wait that
  covers its group returns, so a wrong wait count reads stale data. ``fast_exp2(float)`` (PTX
  ``ex2.approx``) is swapped for ``exp2`` the same way.
* Shared memory: ``extern __shared__`` arrays are the launch's dynamic shared memory, at most 232448 bytes
  (227 KB, sm_90's limit; a launch that asks for more raises); each such array is a buffer of its own (two
  of one kernel do not alias, unlike a GPU), NaN-filled before every block when activated (``poison_shared``)
  so that a read of an unwritten tile shows. Static ``__shared__`` variables are one instance each (a
  function-level ``static``), neither poisoned nor checked against the 48 KB limit. A read or write past the
  requested size but inside 227 KB is not caught.
* Quoted includes beside the file; ``<cuda_fp16.h>``, ``<math_constants.h>`` and ``<mma.h>`` are the
  emulation's own (include/). ``__CUDA_ARCH__`` is not defined, so ``#ifdef __CUDA_ARCH__`` code is left out.

**Not supported.** Inline PTX (``asm``) other than the helpers named above (g++ cannot assemble it: the build
fails, and the grader reports the chapter as not run here); sm_90 hardware — TMA, mbarriers, wgmma, thread
block clusters, ``setmaxnreg`` (``hopper.cuh``, chapter 7): such a source is not emulated at all
(:func:`unsupported`); bf16, fp8, tf32 and integer tensor cores; cooperative groups, CUTLASS/CuTe and other
device libraries, dynamic parallelism, textures and surfaces, ``__constant__`` beyond a plain global, clocks
and timing. Memory is the CPU process's: an out-of-bounds access may crash the process, corrupt it, or go
unnoticed (compute-sanitizer's memcheck on a GPU finds it). When it faults (SIGSEGV or SIGBUS), a handler installed
with the first library (fault.h) writes ``flashtutor-emulate: fault at address 0x… (a read|a write) in kernel NAME
(block x,y,z thread x,y,z)`` to stderr before the process dies of the signal; the grader's arena ends at a guard
page, so an access just past its last buffer faults there. An abort (a failed assert, or the C library finding its
heap corrupted by a write past a buffer) writes ``flashtutor-emulate: abort in kernel NAME (block … thread …)``,
or ``abort after kernel NAME`` when no kernel runs (the last one that ran). A thread that spins waiting for
another's write hangs, since a fiber yields only at barriers.

**Grading.** On a machine without a GPU the grader's worker calls :func:`activate` before it imports the
submission. Then :func:`flashtutor.load_cuda` returns an :class:`EmuModule` of the same file (defines
included), :func:`flashtutor.check_inputs` accepts CPU tensors, and chapter 5's
:func:`flashtutor.loaders.cutlass.build_gemms` returns CPU reference GEMMs (:mod:`.gemm`), so a learner's
launcher runs unchanged. Each launch is a profiler range (:data:`TRACE_PREFIX` + the kernel's name), which the
worker's tracer reports as that kernel, so a call that runs none of the learner's kernels is seen as on a GPU.
:func:`available` / :func:`unavailable_reason` say whether this machine can do it.
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

from .. import switches

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("FLASHTUTOR_CACHE", Path.home() / ".cache" / "flashtutor")) / "emu"
SMEM_BYTES = 232448          # the most dynamic shared memory a launch may ask for (227 KB on sm_90)
MAX_THREADS = 1024           # threads per block
TRACE_PREFIX = "flashtutor-emulated:"   # activated: each launch is a profiler range named this + the kernel's name
# -fno-finite-loops: a loop that never ends must hang as it does on a GPU, not be assumed to end and dropped.
GXX_FLAGS = ["-std=c++20", "-O1", "-fno-finite-loops", "-shared", "-fPIC", "-fvisibility=hidden", "-w"]

# helper functions whose bodies are PTX: name -> the emulated definition
_CP_ASYNC = '#include "cp_async.h"\n'
REPLACE = {
    "cp_async_16": _CP_ASYNC + "inline void cp_async_16(void* dst, const void* src, bool valid) "
                               "{ emu_cp_async(dst, src, valid); }",
    "cp_async_commit": _CP_ASYNC + "inline void cp_async_commit() { emu_cp_commit(); }",
    "cp_async_wait": _CP_ASYNC + "template <int N> inline void cp_async_wait() { emu_cp_wait(N); }",
    "fast_exp2": "inline float fast_exp2(float x) { return std::exp2(x); }",
}

# What a source may not use (sm_90 hardware the emulation lacks), found in it or in the files it includes.
_SM90 = (("wgmma", re.compile(r"wgmma")), ("mbarrier", re.compile(r"mbarrier")),
         ("TMA", re.compile(r"cp\.async\.bulk|CUtensorMap|cp_async_bulk")),
         ("setmaxnreg", re.compile(r"setmaxnreg")), ("thread block clusters", re.compile(r"__cluster_dims__|%cluster")),
         ("hopper.cuh", re.compile(r'#\s*include\s*"hopper\.cuh"')),
         ("a device library", re.compile(r"#\s*include\s*<(cute|cutlass|cooperative_groups|cuda/)")))


class EmulationUnsupported(RuntimeError):
    """The emulation cannot build or run this source (what it lacks, not what the learner got wrong)."""


# ---------------------------------------------------------------- can this machine do it ------------
_REASON: list = []           # [reason or None], once per process


def unavailable_reason() -> str | None:
    """Why CUDA kernels cannot be emulated here (None when they can): g++ 12 or newer with C++20 and
    ``_Float16`` is needed. Probed once per process by building and running a small program."""
    if not _REASON:
        _REASON.append(_probe())
    return _REASON[0]


def available() -> bool:
    """Whether CUDA kernels can be emulated on this machine (see :func:`unavailable_reason`)."""
    return unavailable_reason() is None


def _probe() -> str | None:
    import tempfile
    need = "the CPU emulation of CUDA kernels needs g++ 12 or newer with C++20 and _Float16"
    gxx = shutil.which("g++")
    if gxx is None:
        return f"{need}: no g++ on PATH (e.g. apt install g++)"
    try:
        with tempfile.TemporaryDirectory() as d:
            src = Path(d, "probe.cpp")
            src.write_text("#include <cmath>\n#include <functional>\n"
                           "int main() { _Float16 h = (_Float16)1.5f; return (int)std::lround((float)h * 2) - 3; }\n")
            r = subprocess.run([gxx, "-std=c++20", str(src), "-o", str(Path(d, "probe"))], capture_output=True,
                               text=True, timeout=120)
            if r.returncode != 0:
                first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
                return f"{need}; {_gxx_version(gxx)} failed on a test program: {first.strip()}"
            if subprocess.run([str(Path(d, "probe"))], timeout=60).returncode != 0:
                return f"{need}; {_gxx_version(gxx)} built a test program that computes wrongly"
    except (OSError, subprocess.SubprocessError) as e:
        return f"{need}; probing g++ failed: {type(e).__name__}: {e}"
    return None


def _gxx_version(gxx: str) -> str:
    try:
        out = subprocess.run([gxx, "--version"], capture_output=True, text=True, timeout=30).stdout
        return out.splitlines()[0].strip() if out else "g++"
    except (OSError, subprocess.SubprocessError):
        return "g++"


# ---------------------------------------------------------------- process-wide switch ---------------
def activate() -> None:
    """From now on in this process, :func:`flashtutor.load_cuda` builds kernels for the CPU, ``check_inputs``
    accepts CPU tensors and the chapter-5 GEMMs are CPU references (the grading worker calls this). The switch
    lives in :mod:`flashtutor.switches`, which the loaders read without importing this package."""
    from .gemm import ReferenceGemms
    switches.set_emulation(True, ReferenceGemms)


def deactivate() -> None:
    switches.set_emulation(False)


def active() -> bool:
    return switches.emulation_active()


# ---------------------------------------------------------------- reading a source -------------------
def _strip_comments(src: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", src, flags=re.S)


def _quoted_includes(path: Path, seen: set) -> list[Path]:
    """The file and, recursively, the quoted includes that exist beside it or among the course's headers."""
    from ..switches import COURSE_HEADERS
    path = Path(path).resolve()
    if path in seen or not path.exists():
        return []
    seen.add(path)
    out = [path]
    for name in re.findall(r'#\s*include\s*"([^"]+)"', _strip_comments(path.read_text(errors="replace"))):
        for d in (path.parent, COURSE_HEADERS):
            if (d / name).exists():
                out += _quoted_includes(d / name, seen)
                break
    return out


def unsupported(paths) -> str | None:
    """Why these .cu files cannot be emulated (they use sm_90 hardware: TMA, mbarriers, wgmma, clusters,
    or a device library), read from their text and their quoted includes; None when nothing is in the way.
    Reads only: the judge may call it."""
    for cu in paths:
        for f in _quoted_includes(Path(cu), set()):
            text = _strip_comments(f.read_text(errors="replace"))
            for what, rx in _SM90:
                if rx.search(text):
                    where = Path(cu).name if f == Path(cu).resolve() else f"{Path(cu).name} (through {f.name})"
                    return (f"{where} uses {what}, sm_90 hardware (or a device library) that the CPU emulation does "
                            "not provide")
    return None


def kernels(src: str) -> list[tuple[str, list[str]]]:
    """(name, [parameter types]) of every ``extern "C" __global__`` kernel in the source."""
    out = []
    for m in re.finditer(r'extern\s+"C"\s+__global__\s+(?:void\s+)?(?:__launch_bounds__\([^)]*\)\s+)?(?:void\s+)?'
                         r'(\w+)\s*\(([^)]*)\)', _strip_comments(src)):
        types = []
        for p in m.group(2).split(","):
            p = re.sub(r"__restrict__|__grid_constant__", "", p).strip()
            if not p or p == "void":
                continue
            types.append(re.sub(r"\b\w+$", "", p).strip())          # drop the parameter's name
        out.append((m.group(1), types))
    return out


def _replace_function(src: str, name: str, new: str) -> str:
    """Replace the definition of ``name`` (its template line, if any, and its braced body) by ``new``."""
    m = re.search(r"(?m)^(template\s*<[^>]*>[^\n]*\n)?[^\n;{}]*\b" + name + r"\s*\([^)]*\)\s*\{", src)
    if not m:
        return src
    depth, i = 0, m.end() - 1
    while i < len(src):
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        i += 1
        if depth == 0:
            break
    return src[:m.start()] + new + "\n" + src[i:]


def transform(src: str) -> str:
    """The kernel source as g++ builds it: its PTX helpers (REPLACE) swapped for emulated ones, and
    ``extern __shared__`` (dynamic shared memory, defined by the harness) told apart from static
    ``__shared__`` (which emu.h makes a ``static``)."""
    for name, new in REPLACE.items():
        src = _replace_function(src, name, new)
    src = re.sub(r"\bextern\s+__shared__\b", "extern", src)
    return re.sub(r"\bstatic\s+__shared__\b", "__shared__", src)


def _shared_arrays(src: str) -> list[tuple[str, str]]:
    """(type, name) of every ``extern __shared__ T name[]`` (dynamic shared memory) in the source."""
    decl = r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?([A-Za-z_][\w\s:]*?)\s+(\w+)\s*\[\s*\]"
    return list(dict.fromkeys(re.findall(decl, _strip_comments(src))))


def _harness(body: Path, src: str) -> str:
    """The translation unit g++ builds: the kernel source, its shared memory, a C entry point per kernel."""
    lines = [f'#include "{body}"']
    for i, (t, name) in enumerate(_shared_arrays(src)):
        lines.append(f"alignas(128) {t} {name}[{SMEM_BYTES} / sizeof({t})];")
        lines.append(f"static int emu_shared_{i} = emu::add_shared({name}, sizeof({name}));")
    # Built with -fvisibility=hidden: each library keeps its own emu:: state (inline variables would
    # otherwise be one per process, shared by every library loaded); only these entry points are exported.
    lines.append('#define EMU_EXPORT extern "C" __attribute__((visibility("default")))')
    lines.append("EMU_EXPORT long emu_switches() { return emu::switches; }")
    lines.append("EMU_EXPORT long emu_errors() { return emu::errors; }")
    lines.append("EMU_EXPORT const char* emu_failure() { return emu::failure; }")
    lines.append('#include "fault.h"')
    lines.append("EMU_EXPORT void emu_fault_setup(void* ctx, int install) { emu::fault_ctx = (emu::FaultContext*)ctx; "
                 "if (install) emu_fault::install(); }")
    for name, types in kernels(src):
        args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        lines.append(f"EMU_EXPORT int emu_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, "
                     f"unsigned bz, int poison, void** a) {{ emu::poison_shared = poison; "
                     f"return emu::run_grid(dim3{{gx, gy, gz}}, dim3{{bx, by, bz}}, [&] {{ {name}({args}); }}, "
                     f"\"{name}\"); }}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- building ------------------------------
_FAILED: dict[str, str] = {}       # cache key -> why g++ could not build it (in this process)


def build(cu, *, defines: dict | None = None) -> ctypes.CDLL:
    """Compile ``cu`` with g++ against emu.h into a shared library (cached by content) and load it into this
    process. Raises :class:`EmulationUnsupported` when g++ cannot build it."""
    from ..switches import COURSE_HEADERS
    cu = Path(cu).resolve()
    text = cu.read_text()
    src = transform(text)
    defines = {str(k): str(v) for k, v in (defines or {}).items()}
    headers = "".join(h.read_text() for h in sorted(HERE.glob("*.h")) + sorted(HERE.glob("include/*.h")))
    local = "".join(f.read_text(errors="replace") for f in _quoted_includes(cu, set())[1:])
    key_text = "\n\0".join([src, local, headers, _harness(Path("BODY"), text), repr(sorted(defines.items())), *GXX_FLAGS])
    key = hashlib.sha256(key_text.encode()).hexdigest()[:24]
    if key in _FAILED:
        raise EmulationUnsupported(_FAILED[key])
    lib = CACHE / f"{cu.stem}-{key}.so"
    if not lib.exists():
        import tempfile
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=CACHE, prefix=f"{cu.stem}-{key}-") as d:   # one per build: builds
            body = Path(d, f"{cu.stem}.cu.cpp")                                          # side by side never meet
            body.write_text(src)
            harness = Path(d, "harness.cpp")
            harness.write_text(_harness(body, text))
            tmp = Path(d, "lib.so")
            cmd = ["g++", *GXX_FLAGS, *(f"-D{k}={v}" for k, v in defines.items()), "-include", str(HERE / "emu.h"),
                   "-I", str(HERE), "-I", str(HERE / "include"), "-iquote", str(cu.parent),
                   "-iquote", str(COURSE_HEADERS), str(harness), "-o", str(tmp)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                _FAILED[key] = (f"the CPU emulation cannot build {cu.name} with g++ (it compiles for the GPU, so this "
                                f"is something the emulation lacks):\n{_first_errors(r.stderr, body, cu)}")
                raise EmulationUnsupported(_FAILED[key])
            tmp.replace(lib)
    return ctypes.CDLL(str(lib))


def _first_errors(stderr: str, body: Path, cu: Path) -> str:
    """g++'s first errors, with the cached copy's path replaced by the learner's file."""
    lines = [ln.replace(str(body), str(cu)) for ln in stderr.splitlines()
             if "error" in ln or "Error" in ln or "no such instruction" in ln]
    return "\n".join(lines[:6]) or stderr.strip()[-1500:]


# ---------------------------------------------------------------- launching -----------------------------
_INT32 = {"int", "signed", "signed int", "int32_t", "const int", "const int32_t"}
_UINT32 = {"unsigned", "unsigned int", "uint32_t", "const unsigned", "const unsigned int", "const uint32_t"}
_INT64 = {"long", "long long", "long int", "long long int", "int64_t", "ptrdiff_t", "size_t", "uint64_t",
          "unsigned long", "unsigned long long", "intptr_t", "uintptr_t"}


def _ctype(t: str):
    base = re.sub(r"\bconst\b", "", t).strip()
    base = re.sub(r"\s+", " ", base)
    if "*" in base:
        return ctypes.c_void_p
    if base in ("float",):
        return ctypes.c_float
    if base in ("double",):
        return ctypes.c_double
    if base == "bool":
        return ctypes.c_bool
    if base in _INT32:
        return ctypes.c_int32
    if base in _UINT32:
        return ctypes.c_uint32
    if base in _INT64:
        return ctypes.c_uint64 if base.startswith(("u", "size")) else ctypes.c_int64
    return None


def _dims(what: str, name: str, v) -> tuple[int, int, int]:
    v = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not 1 <= len(v) <= 3 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ValueError(f"{name}: {what} must be 1 to 3 ints, got {v!r}")
    v = v + (1,) * (3 - len(v))
    if min(v) < 1:
        raise ValueError(f"{name}: {what} {v} has a dimension < 1 (invalid configuration argument on a GPU)")
    return v


class EmuKernel:
    """One kernel of an :class:`EmuModule`, launched as a :class:`flashtutor.loaders.nvrtc.CudaKernel` is:
    ``kernel(grid=..., block=..., args=..., shared_mem=...)``, on CPU tensors."""

    def __init__(self, module: "EmuModule", name: str, types: list[str]):
        self.module, self.name, self.types = module, name, types
        self.fn = getattr(module.lib, f"emu_{name}")
        self.fn.restype = ctypes.c_int
        self.fn.argtypes = [ctypes.c_uint] * 6 + [ctypes.c_int, ctypes.c_void_p]
        self.launches: list[dict] = []

    def _arg(self, i: int, a, t: str):
        import torch
        ct = _ctype(t)
        if ct is None:
            raise TypeError(f"{self.name}: parameter {i} has type {t!r}, which the CPU emulation cannot pass "
                            "(pointers, integers, float, double and bool can be)")
        if isinstance(a, torch.Tensor):
            if ct is not ctypes.c_void_p:
                raise TypeError(f"argument {i} of {self.name} is a tensor, but the parameter is a {t}")
            if a.device.type != "cpu":
                raise ValueError(f"argument {i} of {self.name} is a tensor on {a.device}; emulated kernels need CPU "
                                 "tensors")
            if not a.is_contiguous():
                raise ValueError(f"argument {i} of {self.name} is not contiguous; call .contiguous() first")
            return ctypes.c_void_p(a.data_ptr())
        if ct is ctypes.c_void_p:
            if isinstance(a, int) and not isinstance(a, bool):
                return ctypes.c_void_p(a)
            raise TypeError(f"argument {i} of {self.name} is a {type(a).__name__}, but the parameter is a pointer ({t})")
        if ct in (ctypes.c_float, ctypes.c_double):
            return ct(float(a))
        if ct is ctypes.c_bool:
            return ct(bool(a))
        if isinstance(a, float) or not hasattr(a, "__index__"):
            raise TypeError(f"argument {i} of {self.name} is a {type(a).__name__}, but the parameter is a {t}")
        return ct(int(a))

    def __call__(self, *, grid, block, args=(), shared_mem: int = 0):
        asked = {"grid": tuple(grid) if isinstance(grid, (tuple, list)) else (grid,),
                 "block": tuple(block) if isinstance(block, (tuple, list)) else (block,), "shared_mem": shared_mem}
        grid, block = _dims("grid", self.name, grid), _dims("block", self.name, block)
        if block[0] * block[1] * block[2] > MAX_THREADS:
            raise ValueError(f"{self.name}: a block of {block} is {block[0] * block[1] * block[2]} threads, at most "
                             f"{MAX_THREADS} (invalid configuration argument on a GPU)")
        if grid[1] > 65535 or grid[2] > 65535 or grid[0] > 2**31 - 1:
            raise ValueError(f"{self.name}: grid {grid} exceeds the limits (2^31-1, 65535, 65535)")
        if len(args) != len(self.types):
            raise TypeError(f"{self.name} takes {len(self.types)} arguments, {len(args)} given")
        if shared_mem > SMEM_BYTES:
            raise ValueError(f"{self.name}: {shared_mem} bytes of shared memory requested, at most {SMEM_BYTES}")
        holders = [self._arg(i, a, t) for i, (a, t) in enumerate(zip(args, self.types))]
        self.launches.append(asked)
        argv = (ctypes.c_void_p * max(len(holders), 1))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        errors = self.module.errors()
        ctx = contextlib.nullcontext()
        if self.module.strict:          # grading: the launch shows in the worker's trace, as a GPU kernel would
            from torch.autograd.profiler import record_function
            ctx = record_function(TRACE_PREFIX + self.name)
        with ctx:
            ok = self.fn(*grid, *block, int(self.module.poison_shared), argv)
        if not ok:
            raise RuntimeError(f"{self.name}: {self.module.lib.emu_failure().decode(errors='replace')}")
        if self.module.strict and self.module.errors() > errors:
            raise RuntimeError(f"{self.name}: a wmma load or store used a pointer that is not 32-byte aligned or a "
                               "leading dimension that is not a multiple of 16 bytes (a misaligned address on a GPU)")


class _FaultContext(ctypes.Structure):
    """emu.h's FaultContext: the running kernel's name, its blockIdx and threadIdx, and the last kernel's name."""
    _fields_ = [("kernel", ctypes.c_void_p), ("block", ctypes.c_void_p), ("thread", ctypes.c_void_p),
                ("last", ctypes.c_void_p)]


_FAULT: list = []            # [the process's FaultContext], once the first library has installed the handler


def _fault_setup(lib) -> None:
    """Give a loaded library the process's fault context; the first one also installs the SIGSEGV/SIGBUS/SIGABRT
    handler (fault.h), which then reports a fault of any library's kernel: its name, block and thread (an abort
    between launches: the last kernel that ran)."""
    first = not _FAULT
    if first:
        _FAULT.append(_FaultContext())
    lib.emu_fault_setup.restype = None
    lib.emu_fault_setup.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.emu_fault_setup(ctypes.addressof(_FAULT[0]), int(first))


class EmuModule:
    """Stands in for a :class:`flashtutor.loaders.nvrtc.CudaModule` of the same .cu file: its ``extern "C"``
    kernels are attributes (``mod.my_kernel(...)``) or ``mod.kernel(name)``. ``poison_shared``: NaN-fill
    shared memory before every block; ``strict``: a broken wmma rule raises instead of being counted."""

    def __init__(self, cu, *, defines: dict | None = None, poison_shared: bool = False, strict: bool = False):
        self.path = str(cu)
        self.poison_shared, self.strict = poison_shared, strict
        self.lib = build(Path(cu), defines=defines)
        self.lib.emu_errors.restype = self.lib.emu_switches.restype = ctypes.c_long
        self.lib.emu_failure.restype = ctypes.c_char_p
        _fault_setup(self.lib)
        self.kernels = {name: EmuKernel(self, name, types) for name, types in kernels(Path(cu).read_text())}

    def errors(self) -> int:
        """How many times a wmma load or store broke the alignment or stride rule (wmma.h)."""
        return int(self.lib.emu_errors())

    def switches(self) -> int:
        """How many times a fiber has yielded at a barrier so far."""
        return int(self.lib.emu_switches())

    def kernel(self, name: str) -> EmuKernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise AttributeError(f"{self.path} has no kernel named {name!r} (is it declared "
                                 f'`extern "C" __global__`?)') from None

    def __getattr__(self, name):
        if name.startswith("_") or name in ("path", "lib", "kernels", "poison_shared", "strict"):
            raise AttributeError(name)
        return self.kernel(name)


def load(path, *, defines: dict | None = None) -> EmuModule:
    """What :func:`flashtutor.load_cuda` returns when the emulation is active: shared memory poisoned, the
    wmma rules enforced."""
    return EmuModule(path, defines=defines, poison_shared=True, strict=True)


@contextlib.contextmanager
def emulated(module, cu=None, *, poison_shared: bool = False):
    """Within the block, ``module.attention`` runs its kernels in the emulator on CPU tensors (for tests:
    the launcher's ``_mod`` and ``check_inputs`` are swapped; nothing else in the process changes)."""
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
