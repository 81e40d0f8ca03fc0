"""Chapter 5 reference: attention as three kernels — CUTLASS QKᵀ GEMM, a warp-per-row softmax, CUTLASS PV GEMM.

This is the chapter's solution itself, loaded from ``solutions/05_cutlass_three_kernel/attention.py``
(which loads its ``softmax.cu``), so that the pipeline and the kernel exist in one place; the exercise
is generated from those files. The GEMMs are ``flashtutor/kernels/k05_gemm.cu``, one CUTLASS 3
CollectiveBuilder configuration per translation unit, built by :mod:`flashtutor.loaders.cutlass`.

Exports ``attention(q, k, v, *, causal=False)``, ``three_kernel(q, k, v, *, causal, qk, pv, lib=None)``
(explicit GEMM configurations, for the sweep), ``gemm_configs(D)`` (the chosen pair per head dim),
``build()`` (compile both head dims' GEMMs now), ``bytes_moved(problem)`` and ``score_bytes(problem)``.
"""
from __future__ import annotations

from ..chapters import ROOT
from . import solution_module

SOURCE = ROOT / "solutions" / "05_cutlass_three_kernel" / "attention.py"
SOFTMAX_SOURCE = SOURCE.with_name("softmax.cu")
ROW_ALIGN = 8


_mod = solution_module("05_cutlass_three_kernel")
attention = _mod.attention
three_kernel = _mod.three_kernel
gemm_configs = _mod.gemm_configs
build = _mod.build


def padded(S: int) -> int:
    """ld: the score matrix's row stride (S rounded up to a multiple of 8)."""
    return -(-S // ROW_ALIGN) * ROW_ALIGN


def score_bytes(p) -> int:
    """Bytes of the fp32 score matrix [B·H, S, ld] that the QKᵀ GEMM writes (P reuses them)."""
    return 4 * p.B * p.H * p.S * padded(p.S)


def bytes_moved(p) -> int:
    """HBM traffic the pipeline implies, if nothing stayed in L2: Q, K, V read and O written, plus per
    score 4 bytes written (QKᵀ), 4 read (softmax; only the kept half for causal), 2 written (P) and
    2 read (PV)."""
    n = p.B * p.H * p.S * padded(p.S)              # score elements
    kept = n // 2 if p.causal else n               # the softmax reads only unmasked scores
    return int(p.min_bytes + 4 * n + 4 * kept + 2 * n + 2 * n)
