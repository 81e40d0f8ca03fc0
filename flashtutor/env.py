"""What this machine has: GPU, driver, library versions, tools — and which chapters that enables."""
from __future__ import annotations

import datetime
import importlib
import platform
import subprocess


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


def describe_line() -> str:
    d = describe()
    parts = [d["gpu"], f"torch {d['torch']}"]
    if d.get("cudnn"):
        parts.append(f"cuDNN {d['cudnn']}")
    if d.get("triton"):
        parts.append(f"triton {d['triton']}")
    if d.get("driver"):
        parts.append(f"driver {d['driver']}")
    parts.append(d["date"])
    return " · ".join(parts)


def doctor() -> list[tuple[str, bool, str]]:
    """Checks as (what, ok, detail)."""
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
        rows.append(("GPU", False, "no CUDA GPU visible to torch: kernels compile, nothing runs"))
    rows.append(("torch", True, f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})"))
    for mod, what in (("triton", "triton"), ("cuda.core", "cuda-core (cuda-python)")):
        v = _version(mod)
        rows.append((what, v is not None, v or f"missing: pip install {what.split()[0]}"))
    try:
        from .loaders.nvrtc import cuda_include_dir, default_arch
        inc = cuda_include_dir()
        rows.append(("CUDA headers", inc is not None, inc or "missing: pip install nvidia-cuda-runtime nvidia-cuda-crt"))
        from cuda.core import Program, ProgramOptions
        Program('extern "C" __global__ void k() {}', "c++", ProgramOptions(arch=default_arch())).compile("cubin")
        rows.append(("NVRTC", True, f"compiles for {default_arch()}"))
    except Exception as e:
        rows.append(("NVRTC", False, f"{type(e).__name__}: {e}"[:200]))
    from .sass import find_tool
    for tool in ("cuobjdump", "nvdisasm", "nvcc", "compute-sanitizer"):
        p = find_tool(tool)
        detail = p or "not found"
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
        rows.append(("CUTLASS headers", src.exists(), str(src.parent.parent)))
    except Exception as e:
        rows.append(("CUTLASS headers", False, f"pip install nvidia-cutlass ({type(e).__name__})"))
    return rows


def chapters_enabled(rows) -> list[tuple[str, str]]:
    ok = {what: good for what, good, _ in rows}
    gpu = ok.get("GPU", False)
    hopper = False
    try:
        import torch
        hopper = gpu and torch.cuda.get_device_capability() == (9, 0)
    except Exception:
        pass
    out = []
    nvrtc = ok.get("NVRTC", False)
    state = "grade" if gpu and nvrtc else ("compile and inspect only" if nvrtc else "unavailable")
    out.append(("01–03 CUDA C++ (NVRTC)", state))
    out.append(("04 Triton", "grade" if gpu and ok.get("triton") else ("interpreter (correctness only)" if ok.get("triton") else "unavailable")))
    cut = ok.get("CUTLASS headers") and ok.get("nvcc")
    out.append(("05 CUTLASS (sm_90a)", "grade" if cut and hopper else ("compile only" if cut else "unavailable")))
    out.append(("06 batching / CUDA graphs", "grade" if gpu else "unavailable"))
    return out


def in_notebook() -> bool:
    """In a Jupyter kernel (where the learner's code may already have run in this process)."""
    import sys
    if "IPython" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except ImportError:
        return False
    return shell is not None and "IPKernelApp" in shell.config


def in_notebook_without_widgets() -> bool:
    """In a Jupyter kernel where rich cannot draw a live progress bar (it needs ipywidgets there)."""
    if not in_notebook():
        return False
    import importlib.util
    return importlib.util.find_spec("ipywidgets") is None   # rich draws in a notebook through ipywidgets
