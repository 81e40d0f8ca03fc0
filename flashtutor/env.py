"""What this machine has: GPU, driver, library versions, tools — and what each chapter can do with that.

:func:`capability` is the one place that says how a chapter runs here (on the GPU, through Triton's
interpreter, in the CPU emulation of CUDA, or compiled only) and whether its speed can be graded;
``flashtutor doctor`` prints it for every chapter, and the grader's verdicts use the same words
(:data:`EXECUTION`, :func:`needs_arch`).
"""
from __future__ import annotations

import datetime
import importlib
import platform
import subprocess
from typing import NamedTuple


def _version(mod: str) -> str | None:
    try:
        m = importlib.import_module(mod)
        return getattr(m, "__version__", "installed")
    except Exception:
        return None


def describe() -> dict:
    """A short record to print beside every measurement: GPU, driver, versions and the date."""
    import torch
    d = {"gpu": "none", "driver": None, "torch": torch.__version__, "triton": _version("triton"),
         "cuda_core": _version("cuda.core"), "cudnn": None, "python": platform.python_version(),
         "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    if torch.cuda.is_available():
        d["gpu"] = torch.cuda.get_device_name()
        d["cudnn"] = torch.backends.cudnn.version()
        d["cuda_runtime"] = torch.version.cuda
        try:
            d["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                         capture_output=True, text=True, timeout=10).stdout.strip() or None
        except Exception:
            pass
    return d


def _present(x) -> bool:
    return x is not None and str(x).strip() not in ("", "None", "none")


def _cudnn(v) -> str:
    """cuDNN's version number as torch gives it (91900, 8907) in the usual form (9.19.0, 8.9.7)."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return str(v)
    major, rest = (n // 10000, n % 10000) if n >= 10000 else (n // 1000, n % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def format_env(d: dict, execution: str = "", width: int | None = None) -> str:
    """One line for a :func:`describe` record: only what exists ('no GPU' rather than a GPU called
    'none', no 'cuDNN None'), with how the code ran when that was not on the GPU. With ``width``, the line
    breaks between items where it would pass that many characters."""
    parts = [str(d["gpu"]) if _present(d.get("gpu")) else "no GPU"]
    if execution and execution != "gpu" and execution in EXECUTION_HEADER:
        parts.append(EXECUTION_HEADER[execution])
    for key, label in (("torch", "torch"), ("cudnn", "cuDNN"), ("triton", "triton"), ("driver", "driver")):
        if _present(d.get(key)):
            parts.append(f"{label} {_cudnn(d[key]) if key == 'cudnn' else d[key]}")
    if _present(d.get("date")):
        parts.append(str(d["date"]))
    return join_items(parts, width)


def join_items(parts: list[str], width: int | None = None) -> str:
    """``parts`` joined with " · "; with ``width``, a new line starts before an item that would pass it."""
    if width is None or not parts:
        return " · ".join(parts)
    lines = [parts[0]]
    for part in parts[1:]:
        if len(lines[-1]) + 3 + len(part) > width:
            lines[-1] += " ·"
            lines.append(part)
        else:
            lines[-1] += " · " + part
    return "\n".join(lines)


def describe_line(wrap: bool = False) -> str:
    """:func:`format_env` of this machine; ``wrap``: broken to the width the book shows (``docs.WIDTH``)."""
    from .docs import WIDTH
    return format_env(describe(), width=WIDTH if wrap else None)


# ---------------------------------------------------------------- how a chapter runs here -------------
# How the learner's code ran (a report's ``execution``), in the words of a verdict ...
EXECUTION = {
    "gpu": "on the GPU",
    "interpreted": "interpreted on the CPU",          # Triton's interpreter (TRITON_INTERPRET=1)
    "cpu": "plain PyTorch on the CPU",
    "emulated": "emulated on the CPU",                # CUDA kernels built for the CPU with g++
    "compiled only": "compiled only",
    "none": "not here",
}
# ... and of a report's header line.
EXECUTION_HEADER = {
    "interpreted": "Triton's interpreter on the CPU",
    "cpu": "plain PyTorch on the CPU",
    "emulated": "CUDA emulated on the CPU (g++)",
    "compiled only": "compiled only: nothing ran",
}
# Instructions that exist only on Hopper (sm_90): a chapter whose SASS rule asks for one needs an H100/H200.
HOPPER_OPCODES = frozenset({"HGMMA", "UTMALDG", "UTMASTG"})
SANITIZER_HINT = ("compute-sanitizer comes with a CUDA toolkit (/usr/local/cuda/bin) or "
                  "`pip install nvidia-cuda-sanitizer-api`; only `flashtutor grade --sanitize` uses it, on a GPU")


def needs_arch(chapter) -> str | None:
    """The GPU architecture a chapter's kernels need to run ('sm_90a', 'sm_90'), or None (any CUDA GPU)."""
    from .chapters import get_chapter
    ch = get_chapter(chapter)
    if ch.kind == "cutlass":
        return "sm_90a"          # the CUTLASS 3.x GEMMs the loader builds are Hopper's (wgmma, TMA)
    if ch.sass is not None and HOPPER_OPCODES & set(ch.sass.require):
        return "sm_90"
    return None


class Capability(NamedTuple):
    execution: str      # as a report's: "gpu", "interpreted", "cpu", "emulated", "compiled only"; "none": nothing
    speed: bool         # whether speed is graded (or measured) here
    note: str           # what runs and what does not, and what it would take


def emulation_available() -> bool:
    """Whether CUDA kernels can be built for the CPU here (``flashtutor.emulate``: g++ with C++20)."""
    try:
        from . import emulate
    except ImportError:
        return False
    try:
        return bool(emulate.available())
    except Exception:  # noqa: BLE001 — a probe that fails means no emulation
        return False


def machine(rows=None) -> dict:
    """What :func:`capability` needs to know about this machine: from :func:`doctor`'s rows when given,
    otherwise probed (torch, and the presence of the tools; nothing is compiled but the emulation's probe)."""
    info: dict = {}
    try:
        import torch
        info["gpu"] = torch.cuda.is_available()
        info["cc"] = tuple(torch.cuda.get_device_capability()) if info["gpu"] else None
    except Exception:  # noqa: BLE001
        info["gpu"], info["cc"] = False, None
    if rows is not None:
        ok = {what: good for what, good, _ in rows}
        info.update(triton=ok.get("triton", False), nvrtc=ok.get("NVRTC", False), nvcc=ok.get("nvcc", False),
                    cutlass=ok.get("CUTLASS headers", False), emulation=ok.get("CPU emulation (g++)", False))
        return info
    import importlib.util
    from .sass import find_tool
    info.update(triton=importlib.util.find_spec("triton") is not None,
                nvrtc=importlib.util.find_spec("cuda") is not None and _version("cuda.core") is not None,
                nvcc=find_tool("nvcc") is not None,
                cutlass=importlib.util.find_spec("cutlass_library") is not None,
                emulation=emulation_available())
    return info


def capability(chapter, info: dict) -> Capability:
    """How ``chapter`` is graded on a machine described by ``info`` (:func:`machine`): where its code runs,
    whether its speed is graded, and a note that says why not and what it would take."""
    from .chapters import get_chapter
    ch = get_chapter(chapter)
    gpu, cc = bool(info.get("gpu")), tuple(info.get("cc") or ())
    arch = needs_arch(ch)
    rule = bool(ch.speed.max_ratio_vs_sdpa or ch.speed.min_speedup_vs)
    on_gpu = ("correctness and speed on the GPU" if rule else
              "correctness on the GPU; speed is measured, not graded (no speed rule in this chapter)")
    if ch.speed.basis == "graph" and rule:
        on_gpu += ", both sides replayed from CUDA graphs"
    if ch.kind in ("triton", "torch"):
        if ch.kind == "triton" and not info.get("triton"):
            return Capability("none", False, "needs triton: pip install 'triton>=3.6,<4'")
        if gpu:
            return Capability("gpu", True, on_gpu)
        if ch.kind == "triton":
            return Capability("interpreted", False, "correctness through the Triton interpreter; speed needs a GPU")
        return Capability("cpu", False, "correctness in plain PyTorch on the CPU; speed needs a GPU")
    # CUDA C++ through NVRTC, and chapter 5's CUTLASS GEMMs
    if not info.get("nvrtc"):
        return Capability("none", False, "needs NVRTC to compile the kernels: pip install cuda-core "
                                         "nvidia-cuda-nvrtc nvidia-cuda-crt nvidia-cuda-runtime")
    here = (f"this GPU is sm_{cc[0]}{cc[1]}" if len(cc) == 2 else "this GPU") if gpu else "no GPU here"
    if arch and not (gpu and cc == (9, 0)) and not (ch.kind == "cutlass" and not gpu and info.get("emulation")):
        what = "the CUTLASS GEMMs need sm_90a (H100/H200)" if ch.kind == "cutlass" else "needs sm_90 (H100/H200)"
        return Capability("compiled only", False, f"compile + SASS checks only ({here}); {what} for correctness "
                                                  "and speed")
    if ch.kind == "cutlass" and gpu and not (info.get("nvcc") and info.get("cutlass")):
        return Capability("compiled only", False, "compile + SASS checks of softmax.cu only; the CUTLASS GEMMs need "
                                                  "nvcc (a CUDA toolkit with sm_90a) and pip install nvidia-cutlass")
    if gpu:
        return Capability("gpu", True, on_gpu)
    if info.get("emulation") and ch.kind == "cutlass":
        return Capability("emulated", False, "compile + SASS checks; correctness through the CPU emulation (g++) of "
                                             "your softmax, the GEMMs as a CPU reference (the CUTLASS GEMMs need "
                                             "sm_90a); speed needs a GPU")
    if info.get("emulation"):
        return Capability("emulated", False, "compile + SASS checks; correctness through the CPU emulation (g++); "
                                             "speed needs a GPU")
    return Capability("compiled only", False, "compile + SASS checks; correctness needs a GPU or the CPU emulation "
                                              "(g++ 12 or newer, not found), speed needs a GPU")


def doctor() -> list[tuple[str, bool, str]]:
    """Checks as (what, ok, detail); every "no" says what it costs and how to get it."""
    import torch
    rows: list[tuple[str, bool, str]] = []
    gpu = torch.cuda.is_available()
    if gpu:
        cc = torch.cuda.get_device_capability()
        rows.append(("GPU", True, f"{torch.cuda.get_device_name()} (compute capability {cc[0]}.{cc[1]})"))
        try:
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            rows.append(("driver", bool(drv), drv or "nvidia-smi gave nothing"))
        except Exception as e:
            rows.append(("driver", False, f"nvidia-smi failed: {e}"))
    else:
        rows.append(("GPU", False, "no CUDA GPU visible to torch: kernels compile and their SASS is checked; "
                                   "nothing is timed (a CUDA build of torch and an NVIDIA GPU are needed for that)"))
    rows.append(("torch", True, f"{torch.__version__} (CUDA {torch.version.cuda or 'none: a CPU build'})"))
    for mod, what, pkg in (("triton", "triton", "'triton>=3.6,<4'"),
                           ("cuda.core", "cuda-core (cuda-python)", "cuda-core")):
        v = _version(mod)
        rows.append((what, v is not None, v or f"missing: pip install {pkg}"))
    try:
        from .loaders.nvrtc import cuda_include_dir, default_arch
        inc = cuda_include_dir()
        rows.append(("CUDA headers", inc is not None, inc or "missing: pip install nvidia-cuda-runtime nvidia-cuda-crt"))
        from cuda.core import Program, ProgramOptions
        Program('extern "C" __global__ void k() {}', "c++", ProgramOptions(arch=default_arch())).compile("cubin")
        rows.append(("NVRTC", True, f"compiles for {default_arch()}"))
    except Exception as e:
        rows.append(("NVRTC", False, f"{type(e).__name__}: {e}"[:160] + " — pip install cuda-core nvidia-cuda-nvrtc"))
    from .sass import find_tool
    missing = {"cuobjdump": "pip install nvidia-cuda-cuobjdump (reading SASS: registers, spills, HMMA)",
               "nvdisasm": "pip install nvidia-cuda-nvdisasm (reading SASS)",
               "nvcc": "only chapter 5's CUTLASS GEMMs need it: a CUDA toolkit with sm_90a support",
               "compute-sanitizer": SANITIZER_HINT}
    for tool in ("cuobjdump", "nvdisasm", "nvcc", "compute-sanitizer"):
        p = find_tool(tool)
        detail = p or f"not found: {missing[tool]}"
        if p and tool == "nvcc":
            try:
                out = subprocess.run([p, "--version"], capture_output=True, text=True, timeout=30).stdout
                detail = f"{out.strip().splitlines()[-1]} ({p})"
            except Exception:
                pass
        rows.append((tool, p is not None, detail))
    try:
        import cutlass_library
        from pathlib import Path
        src = Path(cutlass_library.source_path) / "include" / "cutlass" / "cutlass.h"
        rows.append(("CUTLASS headers", src.exists(), str(src.parent.parent) if src.exists() else
                     f"{src} missing: pip install nvidia-cutlass"))
    except Exception as e:
        rows.append(("CUTLASS headers", False,
                     f"pip install nvidia-cutlass ({type(e).__name__}); only chapter 5 needs them"))
    emu = emulation_available()
    on_cpu = cpu_chapters()
    rows.append(("CPU emulation (g++)", emu,
                 f"CUDA kernels build for the CPU: correctness of chapters {on_cpu['emulated']} without a GPU "
                 f"(chapters {on_cpu['interpreted']} run through Triton's interpreter)" if emu else
                 "needs g++ 12 or newer (C++20, _Float16): without it, CUDA chapters only compile on a CPU"))
    return rows


def cpu_chapters() -> dict[str, str]:
    """Which chapters run without a GPU, and how, in words ("1–3 and 5"), by :func:`capability` on a machine
    with the emulation and Triton but no GPU: {"emulated": ..., "interpreted": ...} (what the README says)."""
    from .chapters import CHAPTERS
    info = {"gpu": False, "cc": None, "triton": True, "nvrtc": True, "nvcc": False, "cutlass": False,
            "emulation": True}
    out: dict[str, list[int]] = {"emulated": [], "interpreted": [], "cpu": []}
    for key, ch in CHAPTERS.items():
        ex = capability(ch, info).execution
        if ex in out and str(key).isdigit():
            out[ex].append(int(key))
    return {ex: spans(ns) for ex, ns in out.items()}


def spans(numbers) -> str:
    """[1, 2, 3, 5] -> "1–3 and 5"; [4, 6] -> "4 and 6"."""
    ns = sorted(set(numbers))
    parts: list[str] = []
    for n in ns:
        if parts and parts[-1][1] == n - 1:
            parts[-1][1] = n
        else:
            parts.append([n, n])
    words = [f"{a}" if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in parts]
    if len(words) < 2:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def chapters_enabled(rows) -> list[tuple[str, Capability]]:
    """Every chapter of the manifest (its short name) with what it can do here (:func:`capability` on
    :func:`doctor`'s rows)."""
    from .chapters import CHAPTERS
    info = machine(rows)
    return [(ch.short, capability(ch, info)) for ch in CHAPTERS.values()]


from .switches import in_notebook, in_notebook_without_widgets  # noqa: E402,F401 (where they live now)
