"""Chapter 4 teaching reference: FlashAttention-2 in Triton, one program per (query block, batch·head).

This is the chapter's solution itself, loaded from ``solutions/04_triton_online_softmax/attention.py``
so that the kernel exists in one place (the exercise is generated from that file). The tuned Hopper
variant is :mod:`flashtutor.kernels.k04_triton_fa2_hopper`.

Exports ``attention(q, k, v, *, causal=False)``, ``launch(q, k, v, *, causal, BLOCK_M, BLOCK_N,
num_warps, num_stages)`` (an explicit tile configuration, for the sweep), ``flash_attention_kernel``,
``CONFIGS`` (the fixed configuration per head dim) and ``SOURCE`` (the file's path).
"""
from __future__ import annotations

from ..chapters import ROOT
from . import solution_module

SOURCE = ROOT / "solutions" / "04_triton_online_softmax" / "attention.py"


_mod = solution_module("04_triton_online_softmax")
attention = _mod.attention
launch = _mod.launch
flash_attention_kernel = _mod.flash_attention_kernel
CONFIGS = _mod.CONFIGS
INTERPRETER_CONFIG = _mod.INTERPRETER_CONFIG
interpreting = _mod.interpreting
LOG2E = _mod.LOG2E
