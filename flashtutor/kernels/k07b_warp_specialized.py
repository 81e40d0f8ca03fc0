"""Chapter 7, step b (the chapter's solution and its reference): warp specialization — a producer
warpgroup issues TMA, two consumer warpgroups compute, setmaxnreg moves registers to the consumers; causal masking
skips whole tiles.

This is the solution itself, loaded from ``solutions/07_hopper/attention.py`` (which compiles its sibling
``attention.cu``), so the kernel exists in one place; the exercise is generated from it.
"""
from __future__ import annotations

from ..chapters import ROOT
from . import solution_module

SOURCE = ROOT / "solutions" / "07_hopper" / "attention.cu"

_sol = solution_module("07_hopper")
attention = _sol.attention
KERNELS = _sol.KERNELS
Br, Bc, STAGES, THREADS, BOX, LOG2E = _sol.Br, _sol.Bc, _sol.STAGES, _sol.THREADS, _sol.BOX, _sol.LOG2E
shared_bytes = _sol.shared_bytes
require_hopper = _sol.require_hopper
