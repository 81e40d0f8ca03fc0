"""Chapter 4 teaching reference: FlashAttention-2 in Triton, one program per (query block, batch·head).

This is the chapter's solution itself, loaded from ``solutions/04_triton_online_softmax/attention.py``
so that the kernel exists in one place (the exercise is generated from that file). The tuned Hopper
variant is :mod:`flashtutor.kernels.k04_triton_fa2_hopper`.

Exports ``attention(q, k, v, *, causal=False)``, ``launch(q, k, v, *, causal, BLOCK_M, BLOCK_N,
num_warps, num_stages)`` (an explicit tile configuration, for the sweep), ``flash_attention_kernel``,
``CONFIGS`` (the fixed configuration per head dim) and ``SOURCE`` (the file's path).
"""
from __future__ import annotations

import importlib.util
import sys

from ..chapters import ROOT

SOURCE = ROOT / "solutions" / "04_triton_online_softmax" / "attention.py"
_NAME = "flashtutor.kernels._k04_solution"


def _load():
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    if not SOURCE.exists():
        raise ImportError(f"the chapter 4 solution is missing: {SOURCE} (this kernel lives in the course's "
                          "solutions/ folder; run from a checkout of the course)")
    spec = importlib.util.spec_from_file_location(_NAME, SOURCE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = mod
    spec.loader.exec_module(mod)
    return mod


_mod = _load()
attention = _mod.attention
launch = _mod.launch
flash_attention_kernel = _mod.flash_attention_kernel
CONFIGS = _mod.CONFIGS
INTERPRETER_CONFIG = _mod.INTERPRETER_CONFIG
interpreting = _mod.interpreting
LOG2E = _mod.LOG2E
