"""Reference kernels, one file per step, numbered like their chapter (k01_… is chapter 1)."""
from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from ..chapters import ROOT


def solution_module(slug: str, filename: str = "attention.py") -> ModuleType:
    """The solution file ``solutions/<slug>/<filename>``, imported once as a module.

    A step that *is* a chapter's solution loads it from there instead of keeping a copy, so the
    kernel exists in one place and the exercise is generated from that same file."""
    path = ROOT / "solutions" / slug / filename
    name = f"flashtutor.kernels._solution_{slug}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    if not path.exists():
        raise ImportError(f"the solution {path} is missing (the chapter's kernel lives in the course's "
                          "solutions/ folder; run from a checkout of the course)")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
