"""Process-wide facts that modules on several levels read and none of them owns: whether CUDA kernels run
emulated on the CPU in this process, what then stands in for chapter 5's CUTLASS GEMMs, where the course's
CUDA headers are, and whether this process is a notebook's kernel. A leaf module (it imports nothing of the package), so the loaders, ``api`` and the emulation
read it without importing one another (:mod:`flashtutor.emulate` turns the switch on; the loaders look)."""
from __future__ import annotations

from pathlib import Path

COURSE_HEADERS = Path(__file__).resolve().parent / "cuda"   # flashtutor/cuda: headers every kernel may include

_EMULATION = {"active": False, "gemms": None}


def emulation_active() -> bool:
    """Whether :func:`flashtutor.emulate.activate` has been called in this process (the grading worker on a
    machine without a GPU)."""
    return _EMULATION["active"]


def set_emulation(active: bool, gemms=None) -> None:
    """Turn the emulation on or off; ``gemms(configs)`` builds the CPU stand-ins of chapter 5's GEMMs."""
    _EMULATION["active"], _EMULATION["gemms"] = bool(active), gemms if active else None


def emulated_gemms(configs):
    """The CPU stand-ins of chapter 5's GEMMs for ``configs`` (only while the emulation is active)."""
    if not _EMULATION["active"] or _EMULATION["gemms"] is None:
        raise RuntimeError("the CPU emulation is not active")
    return _EMULATION["gemms"](configs)


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
