"""Chapter 2, step c (the chapter's solution and its reference): tiled attention with the online
softmax, one pass over K and V through shared memory, scalar fp32 math.

This is the solution itself, loaded from ``solutions/02_tiling/attention.py`` (which compiles its
sibling ``attention.cu``), so the kernel exists in one place; the exercise is generated from it.
"""
from __future__ import annotations

from ..chapters import ROOT
from . import solution_module

SOURCE = ROOT / "solutions" / "02_tiling" / "attention.py"
CUDA_SOURCE = SOURCE.with_name("attention.cu")


_mod = solution_module("02_tiling")
attention = _mod.attention
shared_bytes = _mod.shared_bytes
key_tile = _mod.key_tile
Br = _mod.Br
THREADS = _mod.THREADS


def key_rows_read(S: int, causal: bool, block_rows: int = Br) -> int:
    """K (or V) rows one (batch, head) reads: every query block reads keys 0 … kv_end − 1,
    kv_end = S, or with causal min(S, end of the block)."""
    blocks = (S + block_rows - 1) // block_rows
    return sum(min(S, (b + 1) * block_rows) if causal else S for b in range(blocks))


def bytes_moved(p) -> int:
    """Global-memory traffic of the algorithm: Q read and O written once; per query block, K and V
    read once each. (Re-reads of K/V by different blocks are often served by the L2 cache.)"""
    elem = 2                                               # fp16
    qo = 2 * p.S * p.D * elem
    kv = 2 * key_rows_read(p.S, p.causal) * p.D * elem
    return p.B * p.H * (qo + kv)
