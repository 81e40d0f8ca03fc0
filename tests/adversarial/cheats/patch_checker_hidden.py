"""Loosens the grader's tolerance from inside the grading process."""
import importlib

from lower_precision import attention  # noqa: F401  (wrong enough to fail honestly)

setattr(importlib.import_module("flashtutor." + "check"), "row_bounds",
        lambda ref, sdpa_out: ((ref - ref).abs().amax(-1), (ref.abs() + 1e9).amax(-1)))
