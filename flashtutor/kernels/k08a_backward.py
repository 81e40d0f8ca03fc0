"""Chapter 8 teaching reference: the backward pass in Triton, recomputing P from the saved log-sum-exp.

This is the chapter's solution itself, loaded from ``solutions/08_backward/attention.py`` so that the kernels exist
in one place (the exercise is generated from that file): a forward that also stores lse, delta = rowsum(dO ∘ O), dK
and dV with the key blocks outer, and dQ by a second pass with the query blocks outer.
What changed since chapter 4: gradients; the forward saves lse, and three backward kernels use it.
Limitation: one tile configuration per head dim (swept at one shape), the causal mask computed on every tile, and QKᵀ recomputed
in both backward kernels; :mod:`flashtutor.kernels.k08b_backward_tuned` autotunes, masks only the diagonal tiles and
can fold dQ into the dK/dV kernel with atomics.

Exports ``attention(q, k, v, *, causal=False)`` (differentiable: a ``torch.autograd.Function``), ``forward`` (→ o,
lse), ``backward`` (→ dq, dk, dv), the kernels, ``CONFIGS``, ``INTERPRETER_CONFIG`` and ``SOURCE`` (the file's path).
"""
from __future__ import annotations

from ..chapters import ROOT
from . import solution_module

SOURCE = ROOT / "solutions" / "08_backward" / "attention.py"

_mod = solution_module("08_backward")
attention = _mod.attention
forward = _mod.forward
backward = _mod.backward
FlashAttention = _mod.FlashAttention
fwd_kernel = _mod.fwd_kernel
bwd_preprocess_kernel = _mod.bwd_preprocess_kernel
bwd_dkdv_kernel = _mod.bwd_dkdv_kernel
bwd_dq_kernel = _mod.bwd_dq_kernel
CONFIGS = _mod.CONFIGS
INTERPRETER_CONFIG = _mod.INTERPRETER_CONFIG
interpreting = _mod.interpreting
LOG2E = _mod.LOG2E
