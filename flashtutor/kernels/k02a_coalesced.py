"""Chapter 2, step a: one warp per query row, its lanes split D so K/V rows load coalesced; the
scores still go through a global scratch matrix. The kernel is ``k02a_coalesced.cu``."""
from __future__ import annotations

from pathlib import Path

import torch

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda

SOURCE = Path(__file__).with_suffix(".cu")
WARPS_PER_BLOCK = 4            # 128 threads per block: 4 warps, one query row each
_mod = None


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE)
    return _mod


def attention(q, k, v, *, causal: bool = False):
    check_inputs(q, k, v)
    B, H, S, D = q.shape
    rows = B * H * S
    o = output_like(q)                                                          # [B, H, S, D]
    scores = torch.empty((rows, S), dtype=torch.float32, device=q.device)      # [B·H·S, S] scratch
    _module().kernel(f"coalesced_d{D}")(grid=((rows + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK,),
                                        block=(32 * WARPS_PER_BLOCK,),
                                        args=(q, k, v, o, scores, rows, S, D ** -0.5, int(causal)))
    return o


def visible_pairs(S: int, causal: bool) -> int:
    """(query, key) pairs of one (batch, head) that are computed: S², or S(S+1)/2 with causal."""
    return S * (S + 1) // 2 if causal else S * S


def bytes_moved(p) -> int:
    """Global-memory traffic of the algorithm: q_i read and o_i written once per row; for every
    visible (i, j) the rows k_j and v_j are read (D fp16 each) and the score makes 4 trips of 4 bytes
    through the scratch matrix (written in loop 1, read and rewritten in loop 2, read in loop 3).
    Most of the K/V re-reads are served by the L2 cache, so the rate this implies can exceed HBM's."""
    elem = 2                                               # fp16
    per_head = 2 * p.S * p.D * elem + visible_pairs(p.S, p.causal) * (2 * p.D * elem + 4 * 4)
    return p.B * p.H * per_head
