"""flashtutor: reference kernels, loaders and an autograder for the fast-attention course.

The names below are imported on first use, so ``import flashtutor`` (and the ``flashtutor`` command) does
not pay for torch before it needs it: the grader starts its worker process first.
"""
from __future__ import annotations

import importlib
import importlib.util

__version__ = "0.1.0"

_WHERE = {"check_inputs": "api", "output_like": "api", "grade": "grading", "CompileError": "loaders",
          "load_cuda": "loaders", "SHAPE_SETS": "problems", "Problem": "problems", "reference": "problems",
          "sdpa": "problems", "shape_set": "problems"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)     # a submodule, e.g. ft.api, as after `import`
    raise AttributeError(f"module 'flashtutor' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_WHERE))
