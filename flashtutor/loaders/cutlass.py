"""Build CUTLASS 3.x GEMMs for Hopper with ``torch.utils.cpp_extension`` and nvcc, and call them on tensors.

    from flashtutor.loaders.cutlass import GemmConfig, build_gemms
    qk = GemmConfig("qk", tile=(128, 128, 64), schedule="coop")       # S = alpha·Q·Kᵀ, fp32 out
    lib = build_gemms([qk])                                             # compiles once, then cached
    lib[qk](q, k, scores, M=S, N=S, K=D, L=B*H, lda=D, batch_a=S*D, ldb=D, batch_b=S*D,
            ldd=S, batch_d=S*S, alpha=D**-0.5)

* The CUTLASS headers come from the ``nvidia-cutlass`` wheel (``cutlass_library/source/include``); its
  Python interface is not used (it fails with cuda-python 13).
* Each configuration is one translation unit: a generated ``.cu`` that sets the ``FT_*`` macros and
  includes ``flashtutor/kernels/k05_gemm.cu``. ninja compiles them in parallel (``jobs`` or MAX_JOBS);
  a progress bar shows them finish. A CUTLASS GEMM needs ~20-50 s of nvcc per configuration.
* The library is cached under ``~/.cache/flashtutor/cutlass/<name>`` (``FLASHTUTOR_CACHE`` moves it),
  keyed by a hash of the configurations, the GEMM source, torch's and nvcc's versions: the second call,
  in this process or another, loads it in milliseconds.
* The GEMMs are exported as plain C functions (no torch headers in the CUDA code, so each unit compiles
  faster) and called through ctypes on torch's current stream.
* Without a GPU, :func:`nvcc_compile_check` compiles a configuration to a cubin with plain nvcc for
  sm_90a and returns ptxas's warnings (C7510: serialized wgmma), registers and the SASS histogram.
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

GEMM_SOURCE = Path(__file__).resolve().parent.parent / "kernels" / "k05_gemm.cu"
CACHE_ROOT = Path(os.environ.get("FLASHTUTOR_CACHE", Path.home() / ".cache" / "flashtutor")) / "cutlass"
ARCH_FLAG = "-gencode=arch=compute_90a,code=sm_90a"   # wgmma and setmaxnreg exist only on sm_90a
BASE_FLAGS = ("-std=c++17", "--expt-relaxed-constexpr", "-O3")
_LOADER_VERSION = "1"     # bump when the generated sources or flags change meaning

SCHEDULES = {"ws": 0, "coop": 1, "pingpong": 2}      # FT_SCHEDULE of k05_gemm.cu
SCHEDULE_NAMES = {"ws": "KernelTmaWarpSpecialized", "coop": "KernelTmaWarpSpecializedCooperative",
                  "pingpong": "KernelTmaWarpSpecializedPingpong"}
EPILOGUES = {"nosmem": 0, "tma": 1}                  # FT_EPILOGUE
OPS = {"qk": 1, "pv": 2}                             # FT_OP


class CutlassError(RuntimeError):
    """CUTLASS headers or nvcc missing, a build that failed, or a GEMM that refused a problem."""


class UnsupportedGPU(CutlassError):
    """The GPU cannot run sm_90a code (wgmma, TMA): chapter 5 needs a Hopper GPU (H100, H200)."""


def require_hopper() -> None:
    """Raise :class:`UnsupportedGPU`, saying what to do instead, when the current GPU is not sm_90.

    Without a GPU nothing is checked: the GEMMs still compile for sm_90a (what CPU CI does)."""
    import torch
    if not torch.cuda.is_available():
        return
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        raise UnsupportedGPU(
            f"chapter 5's CUTLASS GEMMs use Hopper-only instructions (wgmma, TMA; sm_90a), and this GPU "
            f"({torch.cuda.get_device_name()}) is sm_{major}{minor}. Read the chapter, compile its code "
            "without a GPU (`pytest tests/test_ch05.py`), and grade it on an H100 or H200.")


# ---------------------------------------------------------------------------------------- setup ---
def cutlass_source_dir() -> Path:
    """``cutlass_library/source`` of the nvidia-cutlass wheel (found without importing the package)."""
    env = os.environ.get("CUTLASS_PATH")
    if env and Path(env, "include", "cutlass", "cutlass.h").exists():
        return Path(env)
    spec = importlib.util.find_spec("cutlass_library")
    for loc in (spec.submodule_search_locations or []) if spec else []:
        d = Path(loc) / "source"
        if (d / "include" / "cutlass" / "cutlass.h").exists():
            return d
    raise CutlassError("the CUTLASS headers were not found: pip install nvidia-cutlass==4.2.0.0 (its "
                       "cutlass_library/source/include holds them), or set CUTLASS_PATH to a CUTLASS checkout")


def cutlass_include_dirs() -> list[str]:
    """The include folders a CUTLASS 3 GEMM needs: ``include`` and ``tools/util/include``."""
    src = cutlass_source_dir()
    return [str(src / "include"), str(src / "tools" / "util" / "include")]


def find_nvcc() -> str:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home and Path(home, "bin", "nvcc").exists():
            return str(Path(home, "bin", "nvcc"))
    p = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if p is None:
        raise CutlassError("nvcc was not found: CUTLASS is C++ templates that only nvcc compiles (NVRTC cannot). "
                           "Install a CUDA toolkit (12.3 or newer) and put its bin/ on PATH, or set CUDA_HOME.")
    return p


def nvcc_version(nvcc: str | None = None) -> str:
    out = subprocess.run([nvcc or find_nvcc(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"release (\S+?),", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "?"


# -------------------------------------------------------------------------------- configuration ---
@dataclass(frozen=True)
class GemmConfig:
    """One CUTLASS GEMM: which product, the thread block's tile, the cluster, the schedules.

    ``op``: "qk" (S = alpha·A·Bᵀ, fp16 in, fp32 out) or "pv" (O = A·B, fp16 in and out).
    ``tile``: (TILE_M, TILE_N, TILE_K) outputs per thread block and the depth of one pipeline stage.
    ``cluster``: (CLUSTER_M, CLUSTER_N) thread blocks per cluster; blocks in a cluster share their
    A (along N) or B (along M) tiles through TMA multicast.
    ``schedule``: "ws" (KernelTmaWarpSpecialized: a producer warp and one consumer warpgroup per tile),
    "coop" (…Cooperative: two consumer warpgroups share a tile ≥ 128 rows; persistent blocks) or
    "pingpong" (…Pingpong: two consumer warpgroups work on two tiles and take turns, so one's
    epilogue overlaps the other's math; persistent blocks).
    ``epilogue``: "tma" (registers → shared memory → TMA bulk store) or "nosmem" (registers → global).
    ``ndebug``: compile with -DNDEBUG. False keeps CUTLASS's device-side asserts, whose calls make
    ptxas serialize the wgmma pipeline (warning C7510): there to show the pitfall, never to use.
    """
    op: str
    tile: tuple[int, int, int] = (128, 128, 64)
    cluster: tuple[int, int] = (1, 1)
    schedule: str = "coop"
    epilogue: str = "tma"
    ndebug: bool = True

    def __post_init__(self):
        object.__setattr__(self, "tile", tuple(int(x) for x in self.tile))
        object.__setattr__(self, "cluster", tuple(int(x) for x in self.cluster))
        problems = self.problems()
        if problems:
            raise ValueError(f"{self.name}: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """Why CUTLASS would refuse this configuration at compile time (empty list: none)."""
        out = []
        m, n, k = self.tile
        if self.op not in OPS:
            out.append(f"op must be one of {sorted(OPS)}")
        if self.schedule not in SCHEDULES:
            out.append(f"schedule must be one of {sorted(SCHEDULES)}")
        if self.epilogue not in EPILOGUES:
            out.append(f"epilogue must be one of {sorted(EPILOGUES)}")
        if m not in (64, 128, 256):
            out.append("TILE_M must be 64, 128 or 256 (a warpgroup's wgmma covers 64 rows)")
        if self.schedule == "coop" and m < 128:
            out.append("the cooperative schedule splits TILE_M between two warpgroups: TILE_M must be ≥ 128")
        if n % 16 or not 16 <= n <= 256:
            out.append("TILE_N must be a multiple of 16 between 16 and 256 (wgmma's N)")
        if k % 16 or k < 16:
            out.append("TILE_K must be a multiple of 16 (one wgmma is 16 deep for fp16)")
        cm, cn = self.cluster
        if cm * cn > 8 or cm < 1 or cn < 1:
            out.append("a cluster holds 1 to 8 thread blocks (more needs an opt-in)")
        return out

    @property
    def name(self) -> str:
        m, n, k = self.tile
        s = f"{self.op}_{m}x{n}x{k}_c{self.cluster[0]}x{self.cluster[1]}_{self.schedule}_{self.epilogue}"
        return s if self.ndebug else s + "_assert"

    @property
    def symbol(self) -> str:
        return "ft05_" + self.name

    def short(self) -> str:
        """A label for tables: '128×128×64 1×1 coop tma'."""
        m, n, k = self.tile
        s = f"{m}×{n}×{k} {self.cluster[0]}×{self.cluster[1]} {self.schedule} {self.epilogue}"
        return s if self.ndebug else s + " (asserts on)"

    def defines(self) -> dict[str, int | str]:
        m, n, k = self.tile
        return {"FT_NAME": self.symbol, "FT_OP": OPS[self.op], "FT_TILE_M": m, "FT_TILE_N": n, "FT_TILE_K": k,
                "FT_CLUSTER_M": self.cluster[0], "FT_CLUSTER_N": self.cluster[1],
                "FT_SCHEDULE": SCHEDULES[self.schedule], "FT_EPILOGUE": EPILOGUES[self.epilogue]}

    def translation_unit(self, source: Path = GEMM_SOURCE) -> str:
        """The generated .cu: this configuration's macros, then the GEMM template."""
        lines = [f"// generated by flashtutor.loaders.cutlass for {self.short()} — do not edit",
                 "#undef NDEBUG" if not self.ndebug else "#define NDEBUG   // no device asserts: they serialize wgmma (C7510)"]
        lines += [f"#define {k} {v}" for k, v in self.defines().items()]
        lines.append(f'#include "{Path(source).resolve()}"')
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["name"] = self.name
        return d


# ------------------------------------------------------------------------------------- the build ---
@dataclass
class BuildReport:
    name: str
    path: str                               # the shared library
    seconds: float                          # 0.0 when it came from the cache
    cached: bool
    jobs: int | None
    warnings: dict[str, list[str]] = field(default_factory=dict)   # config name -> ptxas/nvcc warnings

    def c7510(self) -> list[str]:
        """Configurations whose wgmma pipeline ptxas serialized."""
        return sorted(n for n, ws in self.warnings.items() if any("C7510" in w for w in ws))


def validate(op: str, a, b, d, *, M: int, N: int, K: int, L: int, lda: int, batch_a: int, ldb: int, batch_b: int,
             ldd: int, batch_d: int, device_type: str | None = "cuda", where: str = "CUTLASS GEMM"):
    """Raise :class:`CutlassError` unless the tensors and strides describe a problem the GEMM can run.

    ``qk``: A[l] is M×K (row stride ``lda``), B[l] is N×K (row stride ``ldb``: Kᵀ is read, never
    formed), D[l] is M×N fp32. ``pv``: A[l] is M×K, B[l] is K×N (row stride ``ldb``), D[l] is M×N
    fp16. Strides count elements of each tensor's dtype. TMA moves 16-byte units, so every row and
    batch stride, and every operand's contiguous extent (K of A; K of B for qk, N for pv; N of D),
    must be a multiple of 16 bytes; the last element each operand reaches must lie inside its tensor.
    """
    import torch
    want_d = torch.float32 if op == "qk" else torch.float16
    for nm, t, dt in (("A", a, torch.float16), ("B", b, torch.float16), ("D", d, want_d)):
        if not isinstance(t, torch.Tensor):
            raise CutlassError(f"{where}: {nm} must be a torch.Tensor, got {type(t).__name__}")
        if device_type and t.device.type != device_type:
            raise CutlassError(f"{where}: {nm} is on {t.device}; the GEMMs run on {device_type} tensors")
        if t.dtype != dt:
            raise CutlassError(f"{where}: {nm} must be {dt}, got {t.dtype}")
        if t.data_ptr() % 16:
            raise CutlassError(f"{where}: {nm} must start on a 16-byte boundary (TMA)")
    per16 = {"A": 8, "B": 8, "D": 4 if op == "qk" else 8}          # elements per 16 bytes
    for nm, vals in (("A", (lda, batch_a)), ("B", (ldb, batch_b)), ("D", (ldd, batch_d))):
        if any(v % per16[nm] for v in vals):
            raise CutlassError(f"{where}: the strides of {nm} {vals} must be multiples of {per16[nm]} elements "
                               "(16 bytes): pad the leading dimension")
    extents = (("A", "K", K), ("B", "K" if op == "qk" else "N", K if op == "qk" else N), ("D", "N", N))
    for nm, axis, n in extents:
        if n % per16[nm]:
            raise CutlassError(f"{where}: {nm}'s contiguous extent {axis}={n} must be a multiple of {per16[nm]} "
                               "elements (16 bytes): pad it with zeros")
    if op == "qk":
        spans = (("A", a, batch_a, lda, M, K), ("B", b, batch_b, ldb, N, K), ("D", d, batch_d, ldd, M, N))
    else:
        spans = (("A", a, batch_a, lda, M, K), ("B", b, batch_b, ldb, K, N), ("D", d, batch_d, ldd, M, N))
    for nm, t, bs, ld, rows, cols in spans:
        if rows < 1 or cols < 1 or L < 1:
            raise CutlassError(f"{where}: empty problem (M={M}, N={N}, K={K}, L={L})")
        if ld < cols:
            raise CutlassError(f"{where}: {nm}'s row stride {ld} is shorter than its rows ({cols} elements)")
        last = (L - 1) * bs + (rows - 1) * ld + cols
        if last > t.numel():
            raise CutlassError(f"{where}: {nm} holds {t.numel()} elements but the problem reaches element {last}")


class Gemm:
    """One compiled configuration, callable on torch tensors (see :meth:`__call__`)."""

    def __init__(self, lib: ctypes.CDLL, config: GemmConfig):
        self.config = config
        self._run = getattr(lib, config.symbol + "_run")
        self._run.restype = ctypes.c_int
        i64, i32 = ctypes.c_int64, ctypes.c_int
        self._run.argtypes = [ctypes.c_void_p] * 3 + [i32] * 4 + [i64] * 6 + [ctypes.c_float] + [ctypes.c_void_p] * 2
        self._ws = getattr(lib, config.symbol + "_workspace")
        self._ws.restype = ctypes.c_size_t
        self._ws.argtypes = [i32] * 4
        self._err = getattr(lib, config.symbol + "_error")
        self._err.restype = ctypes.c_char_p
        self._workspaces: dict[tuple, object] = {}

    def __repr__(self) -> str:
        return f"Gemm({self.config.short()})"

    def __call__(self, a, b, d, *, M: int, N: int, K: int, L: int, lda: int, batch_a: int, ldb: int,
                 batch_b: int, ldd: int, batch_d: int, alpha: float = 1.0):
        """D[l] = alpha · A[l]·op(B[l]) for l < L, on torch's current stream (see :func:`validate`)."""
        import torch
        validate(self.config.op, a, b, d, M=M, N=N, K=K, L=L, lda=lda, batch_a=batch_a, ldb=ldb, batch_b=batch_b,
                 ldd=ldd, batch_d=batch_d, where=str(self))
        key = (M, N, K, L, a.device.index)
        ws = self._workspaces.get(key)
        if ws is None:
            size = int(self._ws(M, N, K, L))
            ws = self._workspaces[key] = torch.empty(max(size, 1), dtype=torch.uint8, device=a.device)
        stream = torch.cuda.current_stream(a.device).cuda_stream
        rc = self._run(a.data_ptr(), b.data_ptr(), d.data_ptr(), M, N, K, L, lda, batch_a, ldb, batch_b,
                       ldd, batch_d, float(alpha), ws.data_ptr(), stream)
        if rc:
            raise CutlassError(f"{self}: {self._err().decode(errors='replace')}")
        return d


class GemmTable:
    """The GEMMs of a set of configurations, looked up by configuration (a built library, or the CPU reference)."""
    configs: list
    _gemms: dict

    def __getitem__(self, config: GemmConfig):
        try:
            return self._gemms[config]
        except KeyError:
            raise KeyError(f"{config.name} is not in this library (built: "
                           f"{', '.join(c.name for c in self.configs)})") from None

    def __contains__(self, config) -> bool:
        return config in self._gemms


class GemmLibrary(GemmTable):
    """The compiled configurations of one shared library: ``lib[config]`` is a :class:`Gemm`."""

    def __init__(self, path: str, configs: list[GemmConfig], report: BuildReport, source_key: str = ""):
        self.path, self.configs, self.report, self.source_key = path, list(configs), report, source_key
        self._lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        self._gemms = {c: Gemm(self._lib, c) for c in self.configs}
        self.announced = False

    def __repr__(self) -> str:
        return f"GemmLibrary({len(self.configs)} configurations, {self.path})"


_LIBS: dict[str, GemmLibrary] = {}


def _source_key(source: Path, extra: tuple[str, ...]) -> str:
    """What every unit of a library shares: loader, torch and CUDA versions, the template, the flags."""
    import torch
    h = hashlib.sha256()
    for part in (_LOADER_VERSION, torch.__version__, str(torch.version.cuda), Path(source).read_text(), repr(extra)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def library_name(configs, *, source: Path = GEMM_SOURCE, extra_flags=()) -> str:
    """The cache name of a library of exactly these configurations."""
    configs = _dedupe(configs)
    h = hashlib.sha256(_source_key(Path(source), tuple(extra_flags)).encode())
    for c in sorted(configs, key=lambda c: c.name):
        h.update(c.translation_unit(source).encode())
    return f"ft05_gemms_{h.hexdigest()[:16]}"


def _dedupe(configs) -> list[GemmConfig]:
    out: list[GemmConfig] = []
    for c in configs:
        if not isinstance(c, GemmConfig):
            raise TypeError(f"expected a GemmConfig, got {type(c).__name__}")
        if c not in out:
            out.append(c)
    if not out:
        raise ValueError("no configurations to build")
    return out


def _cached_superset(configs: list[GemmConfig], source_key: str) -> GemmLibrary | None:
    """A library, loaded in this process or in the cache on disk, that already holds every configuration."""
    want = set(configs)
    for lib in _LIBS.values():
        if lib.source_key == source_key and want <= set(lib.configs):
            return lib
    if not CACHE_ROOT.exists():
        return None
    metas = sorted(CACHE_ROOT.glob("ft05_gemms_*/build.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for meta in metas:
        try:
            info = json.loads(meta.read_text())
            if info.get("source_key") != source_key:
                continue
            have = [GemmConfig(**{k: v for k, v in d.items() if k != "name"}) for d in info["configs"]]
            so = meta.parent / f"{meta.parent.name}.so"
            if want <= set(have) and so.exists():
                report = BuildReport(meta.parent.name, str(so), 0.0, True, info.get("jobs"), info.get("warnings", {}))
                lib = _LIBS[meta.parent.name] = GemmLibrary(str(so), have, report, source_key)
                return lib
        except Exception:      # a half-written or foreign entry: ignore it
            continue
    return None


def build_gemms(configs, *, verbose: bool = True, jobs: int | None = None, source: Path = GEMM_SOURCE,
                extra_flags=(), force: bool = False) -> GemmLibrary:
    """Compile the configurations into one shared library (cached) and load it.

    A library already built with the same template, flags and torch that holds every requested
    configuration (the sweep's, say) is reused instead of building a new one. ``verbose`` shows a
    progress bar while nvcc runs and a one-line summary after; ``jobs`` caps the parallel nvcc
    processes (default: MAX_JOBS, else ninja's default of cores + 2; each CUTLASS unit needs ~1-2 GB
    of memory). ``force`` rebuilds even if the cache has it.
    """
    from ..switches import emulated_gemms, emulation_active
    if emulation_active():      # CUDA kernels emulated on a CPU: the GEMMs are CPU references (flashtutor.emulate.gemm)
        return emulated_gemms(configs)
    require_hopper()
    configs = _dedupe(configs)
    source = Path(source).resolve()
    extra_flags = tuple(extra_flags)
    skey = _source_key(source, extra_flags)
    if not force:
        lib = _cached_superset(configs, skey)
        if lib is not None:
            if verbose and lib.report.cached and not lib.announced:
                lib.announced = True
                print(f"CUTLASS GEMMs: {len(configs)} configuration(s) found in the cache ({lib.path})", flush=True)
            return lib
    name = library_name(configs, source=source, extra_flags=extra_flags)
    build_dir = CACHE_ROOT / name
    so = build_dir / f"{name}.so"
    meta = build_dir / "build.json"

    nvcc = find_nvcc()
    includes = cutlass_include_dirs()
    try:
        from torch.utils import cpp_extension
    except Exception as e:   # pragma: no cover
        raise CutlassError(f"torch.utils.cpp_extension is not usable here: {e}") from None
    if cpp_extension.CUDA_HOME is None:
        raise CutlassError("this torch has no CUDA support (torch.version.cuda is None), so torch.utils.cpp_extension "
                           "cannot build CUDA code here. Build on a machine with a CUDA build of torch; without a "
                           "GPU, flashtutor.loaders.cutlass.nvcc_compile_check compiles a configuration with nvcc.")
    build_dir.mkdir(parents=True, exist_ok=True)
    _clear_stale_lock(build_dir)
    with contextlib.suppress(OSError):
        meta.unlink()                                   # written again only when this build succeeds
    sources = []
    for c in configs:
        p = build_dir / f"{c.symbol}.cu"
        text = c.translation_unit(source)
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
        sources.append(str(p))

    env_jobs = os.environ.get("MAX_JOBS")
    if jobs:
        os.environ["MAX_JOBS"] = str(jobs)
    t0 = time.perf_counter()
    log_lines: list[str] = []
    try:
        with _capture_build_output(len(configs), verbose, log_lines):
            cpp_extension.load(
                name=name, sources=sources, build_directory=str(build_dir),
                extra_cuda_cflags=[ARCH_FLAG, *BASE_FLAGS, *extra_flags],
                extra_include_paths=includes, is_python_module=False, verbose=True)
    except Exception as e:
        (build_dir / "build.log").write_text("\n".join(log_lines))
        errs = [ln for ln in log_lines if re.search(r"error|cannot find|FAILED", ln, re.I)
                and not ln.startswith("[")][:12]
        raise CutlassError(f"building {len(configs)} CUTLASS GEMM(s) failed ({type(e).__name__}); full log: "
                           f"{build_dir / 'build.log'}\n" + ("\n".join(errs) if errs else str(e)[-3000:])) from None
    finally:
        if jobs:
            if env_jobs is None:
                os.environ.pop("MAX_JOBS", None)
            else:
                os.environ["MAX_JOBS"] = env_jobs
    seconds = time.perf_counter() - t0
    (build_dir / "build.log").write_text("\n".join(log_lines))
    warnings = _warnings_by_config(log_lines, configs)
    used_jobs = int(jobs or env_jobs or 0) or None
    meta.write_text(json.dumps({"source_key": skey, "configs": [c.to_dict() for c in configs], "seconds": seconds,
                                "nvcc": nvcc_version(nvcc), "jobs": used_jobs, "warnings": warnings}, indent=1))
    report = BuildReport(name, str(so), seconds, False, used_jobs, warnings)
    lib = _LIBS[name] = GemmLibrary(str(so), configs, report, skey)
    if verbose:
        bad = report.c7510()
        print(f"CUTLASS GEMMs: built {len(configs)} configuration(s) in {seconds:.0f} s → {so}"
              + (f"; ptxas C7510 (serialized wgmma) in: {', '.join(bad)}" if bad else "; no ptxas C7510 warning"),
              flush=True)
    return lib


def _clear_stale_lock(build_dir: Path, max_age_s: float = 3600):
    """cpp_extension waits forever on a 'lock' file left by a build that was killed."""
    lock = build_dir / "lock"
    with contextlib.suppress(OSError):
        if lock.exists() and time.time() - lock.stat().st_mtime > max_age_s:
            lock.unlink()


def _warnings_by_config(lines: list[str], configs: list[GemmConfig]) -> dict[str, list[str]]:
    """ninja prints each finished command's line, then that command's output: attribute warnings."""
    by_symbol = {c.symbol: c.name for c in configs}
    out: dict[str, list[str]] = {c.name: [] for c in configs}
    current = None
    for ln in lines:
        if ln.startswith("["):
            m = re.search(r"(ft05_\w+?)\.cu\b", ln)
            current = by_symbol.get(m.group(1)) if m else None
            continue
        if current and re.search(r"warning|C75\d\d", ln, re.I):
            out[current].append(_shorten(ln.strip()))
    return out


def _shorten(line: str, keep: int = 240) -> str:
    """ptxas quotes the kernel's mangled name, thousands of characters long: cut it."""
    line = re.sub(r"'(_Z\w{60,})'", lambda m: f"'{m.group(1)[:40]}…'", line)
    return line if len(line) <= keep else line[:keep] + "…"


@contextlib.contextmanager
def _capture_build_output(n_units: int, verbose: bool, sink: list[str]):
    """Route ninja's output (cpp_extension writes it to file descriptor 1) into ``sink`` and drive a
    progress bar from its "[i/N]" lines. Python-level prints during the build are captured too."""
    sys.stdout.flush()
    sys.stderr.flush()
    real_out, owned = _real_console_stream()
    r, w = os.pipe()
    saved = os.dup(1)
    os.dup2(w, 1)
    os.close(w)
    bar = _BuildProgress(n_units + 1, real_out) if verbose else None   # units + the link step

    def pump():
        with os.fdopen(r, "r", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                sink.append(line)
                m = re.match(r"\[(\d+)/(\d+)\]", line)
                if m and bar:
                    what = re.search(r"(ft05_\w+?)\.cu\b", line)
                    bar.update(int(m.group(1)), int(m.group(2)),
                               what.group(1).removeprefix("ft05_") if what else "link")

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        t.join(timeout=10)
        sink.extend(buf.getvalue().splitlines())
        if bar:
            bar.close()
        if owned:
            real_out.close()


def _real_console_stream():
    """Where a progress bar can be drawn while fd 1 is redirected: the notebook's stream, or a dup of
    the terminal's stderr."""
    err = sys.stderr
    try:
        fd = err.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return err, False   # a notebook's stream: not file descriptor based, unaffected by dup2
    if fd == 1:
        return err, False
    return os.fdopen(os.dup(fd), "w", buffering=1), True


class _BuildProgress:
    """A rich progress bar (elapsed time, units done, the one that just finished); plain lines without rich."""

    def __init__(self, total: int, stream):
        self.stream, self.total, self.t0, self.p = stream, total, time.perf_counter(), None
        try:
            from ..switches import in_notebook_without_widgets
            live = "ipykernel" in sys.modules or bool(getattr(stream, "isatty", lambda: False)())
            if not live or in_notebook_without_widgets():
                raise RuntimeError("a log file: plain lines read better than a redrawn bar")
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                       TimeElapsedColumn)
            self.p = Progress(SpinnerColumn(), TextColumn("nvcc {task.description}"), BarColumn(),
                              MofNCompleteColumn(), TimeElapsedColumn(),
                              console=Console(file=stream), transient=True)
            self.p.start()
            self.task = self.p.add_task(f"CUTLASS GEMMs ({total - 1} units in parallel)", total=total)
        except Exception:
            self.p = None
            print(f"nvcc: compiling {total - 1} CUTLASS unit(s) (20-60 s each, in parallel) …",
                  file=stream, flush=True)

    def update(self, done: int, total: int, what: str):
        if self.p:
            self.p.update(self.task, completed=done, total=total, description=f"done: {what}")
        else:
            print(f"  [{done}/{total}] {what}  ({time.perf_counter() - self.t0:.0f} s)", file=self.stream, flush=True)

    def close(self):
        if self.p:
            self.p.stop()


# ------------------------------------------------------------------------- compile check (no GPU) ---
@dataclass
class CompileCheck:
    config: str
    seconds: float
    warnings: list[str]
    c7510: bool
    resources: dict            # kernel -> registers, shared/stack bytes, spills (flashtutor.sass)
    histogram: dict            # kernel -> {opcode: count} of the families that matter
    cubin: str                 # path of the cubin (kept in the cache)


_CHECK_OPS = ("HGMMA", "HMMA", "UTMALDG", "UTMASTG", "STG", "STS", "STSM", "LDL", "STL", "WARPGROUP", "SYNCS")


def nvcc_compile_check(config: GemmConfig | str | os.PathLike, defines: dict | None = None, *,
                       source: Path = GEMM_SOURCE, extra_flags=(), cache: bool = True) -> CompileCheck:
    """Compile one configuration (or any .cu with ``defines``) for sm_90a with plain nvcc, no GPU needed.

    Runs ``nvcc -gencode=arch=compute_90a,code=sm_90a -cubin`` (device code only: no torch, no host
    compiler pass) and returns ptxas's warnings — C7510 says the wgmma pipeline was serialized —
    registers, spills and the SASS opcode counts (HGMMA = Hopper's warpgroup MMA). Cached under
    ``~/.cache/flashtutor/cutlass/check`` by content — the source, the flags, nvcc's version and the
    CUTLASS headers' version, not their folders — so a new virtual environment or clone reuses the cubin;
    two processes asking for the same one at once compile it once (a file lock per entry).
    """
    from ..sass import disassemble, histogram, resource_usage
    nvcc = find_nvcc()
    if isinstance(config, GemmConfig):
        label, text = config.name, config.translation_unit(source)
    else:
        path = Path(config).resolve()
        label = path.stem
        text = "".join(f"#define {k} {v}\n" for k, v in (defines or {}).items()) + f'#include "{path}"\n'
    includes = cutlass_include_dirs()
    flags = [ARCH_FLAG, *BASE_FLAGS, *extra_flags, *[f"-I{d}" for d in includes]]
    included_path = Path(source) if isinstance(config, GemmConfig) else Path(config)
    included = included_path.read_text()
    # Keyed by content, not by where it lies: the included file's text (its path cut to its name) and the
    # CUTLASS headers' version instead of their folder, so a new virtual environment or clone finds the cubin.
    key_text = text.replace(str(included_path.resolve()), included_path.name)
    key_flags = [ARCH_FLAG, *BASE_FLAGS, *extra_flags, _headers_id(includes)]
    key = hashlib.sha256("\0".join([key_text, included, repr(key_flags), nvcc_version(nvcc)]).encode()).hexdigest()[:20]
    out_dir = CACHE_ROOT / "check"
    out_dir.mkdir(parents=True, exist_ok=True)
    cubin, meta = out_dir / f"{label}-{key}.cubin", out_dir / f"{label}-{key}.json"
    with _key_lock(out_dir / f"{label}-{key}.lock") if cache else contextlib.nullcontext():
        seconds, warnings = _compile_check_cubin(nvcc, flags, label, text, cubin, meta, cache)
    data = cubin.read_bytes()
    res = resource_usage(data)
    hist = {k: {op: n for op, n in histogram(v).items() if op in _CHECK_OPS} for k, v in disassemble(data).items()}
    return CompileCheck(label, seconds, warnings, any("C7510" in w for w in warnings), res, hist, str(cubin))


def _headers_id(includes: list[str]) -> str:
    """What the CUTLASS headers are, for a cache key: the nvidia-cutlass wheel's version (a wheel's headers
    never change within a version, wherever it is installed), or the folder of a CUTLASS_PATH checkout."""
    if not os.environ.get("CUTLASS_PATH"):
        try:
            from importlib.metadata import version
            return f"nvidia-cutlass=={version('nvidia-cutlass')}"
        except Exception:
            pass
    return repr(includes)


@contextlib.contextmanager
def _key_lock(path: Path):
    """One compile per cache entry at a time, across processes: a second caller of the same configuration
    (another test worker, a notebook) waits for the first and reads its cubin instead of compiling it again."""
    import fcntl
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compile_check_cubin(nvcc, flags, label, text, cubin: Path, meta: Path, cache: bool):
    """The cubin at ``cubin`` (compiled now unless cached) and its (seconds, warnings)."""
    if cache and cubin.exists() and meta.exists():
        info = json.loads(meta.read_text())
        return info["seconds"], info["warnings"]
    with tempfile.TemporaryDirectory() as td:
        tu = Path(td) / f"{label}.cu"
        tu.write_text(text)
        tmp_cubin = Path(td) / "out.cubin"
        with _memory_slot(cubin.parent):
            t0 = time.perf_counter()
            r = subprocess.run([nvcc, *flags, "-cubin", "-o", str(tmp_cubin), str(tu)],
                               capture_output=True, text=True)
            seconds = time.perf_counter() - t0
        log = (r.stdout + r.stderr).splitlines()
        if r.returncode != 0:
            errs = [ln for ln in log if "error" in ln][:10] or log[-20:]
            raise CutlassError(f"nvcc could not compile {label} for sm_90a:\n" + "\n".join(errs))
        warnings = [_shorten(ln.strip()) for ln in log if re.search(r"warning|C75\d\d", ln, re.I)]
        _replace_whole(cubin, tmp_cubin.read_bytes())
    _replace_whole(meta, json.dumps({"seconds": seconds, "warnings": warnings}).encode())
    return seconds, warnings


# nvcc's front end (cicc) holds 3.2-3.5 GB for one of chapter 5's configurations (2-core box, 2026-11-27: pv 128×64×64
# 3.32 GB; without the host code, the kernel alone instantiated, 3.21 GB; -Xcicc -O0 changes nothing): the memory is
# the templates' instantiation. Compiles on one machine (test workers, notebooks, threads) run at most one per this
# many bytes of the memory available, so a learner's 8 GB laptop never runs two at once.
COMPILE_BYTES = 3_600_000_000


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 2 * COMPILE_BYTES


@contextlib.contextmanager
def _memory_slot(folder: Path, poll: float = 0.25):
    """One of ``max(1, available memory // COMPILE_BYTES)`` compile slots on this machine (capped by its
    cores), across processes: file locks on ``folder/.slot-N``, waited for in turn."""
    import fcntl
    slots = max(1, min(os.cpu_count() or 1, _available_bytes() // COMPILE_BYTES))
    files = [open(folder / f".slot-{i}", "a") for i in range(slots)]
    held = None
    try:
        while held is None:
            for f in files:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    held = f
                    break
                except OSError:
                    continue
            else:
                time.sleep(poll)
        yield
    finally:
        if held is not None:
            fcntl.flock(held, fcntl.LOCK_UN)
        for f in files:
            f.close()


def _replace_whole(path: Path, data: bytes):
    """Write ``path`` through a temporary file and a rename: a reader never sees half of it."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def compile_check_many(configs, *, workers: int | None = None, **kw) -> dict[str, CompileCheck | Exception]:
    """:func:`nvcc_compile_check` for several configurations, in parallel (one nvcc per core)."""
    from concurrent.futures import ThreadPoolExecutor
    configs = _dedupe(configs)
    workers = workers or max(1, min(len(configs), os.cpu_count() or 1))

    def one(c):
        try:
            return nvcc_compile_check(c, **kw)
        except Exception as e:   # reported per configuration
            return e

    with ThreadPoolExecutor(workers) as ex:
        return dict(zip([c.name for c in configs], ex.map(one, configs)))
