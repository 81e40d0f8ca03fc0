"""Chapter 3, step a: FlashAttention-2 on the tensor cores with ``nvcuda::wmma``, plain tile loads.

This step is the chapter's solution itself, loaded from ``solutions/03_wmma/attention.py`` (which
compiles its sibling ``attention.cu``), so that the kernel exists in one place: the exercise is
generated from that file. Steps b (:mod:`flashtutor.kernels.k03b_cp_async`) and c
(:mod:`flashtutor.kernels.k03c_swizzle`) change one idea each.

Exports ``attention(q, k, v, *, causal=False)``, ``shared_bytes(D)``, ``bytes_moved(problem)``,
``SOURCE`` (the .cu file) and ``KERNELS`` (its entry points per head dim).
"""
from __future__ import annotations

from ..chapters import ROOT
from . import solution_module

SOURCE_PY = ROOT / "solutions" / "03_wmma" / "attention.py"
SOURCE = SOURCE_PY.with_suffix(".cu")
KERNELS = {64: "wmma_attention_d64", 128: "wmma_attention_d128"}


_mod = solution_module("03_wmma")
attention = _mod.attention
shared_bytes = _mod.shared_bytes
Br, Bc = _mod.Br, _mod.Bc


def bytes_moved(p) -> int:
    """Global-memory bytes the algorithm requests: Q read and O written once, and every query tile of
    Br rows reading the K and V rows it needs (all S of them, or up to its diagonal with causal=True).
    The K/V traffic is ⌈S/Br⌉ times the minimum; L2 serves part of it, so this is an upper bound on
    the HBM traffic, shared by all three steps (they move the same tiles)."""
    n_q = (p.S + Br - 1) // Br
    kv_rows = 0
    for qb in range(n_q):
        last = min(p.S, (qb + 1) * Br) if p.causal else p.S      # keys up to the tile's last query row
        kv_rows += min(p.S, (last + Bc - 1) // Bc * Bc)           # whole Bc tiles, but no rows past S
    elem = 2                                                      # bytes per fp16 value
    return p.B * p.H * elem * p.D * (2 * p.S + 2 * kv_rows)
