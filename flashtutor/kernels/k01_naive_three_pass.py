"""Chapter 1 reference: naive attention as three kernels (scores, softmax, PV), scores in HBM."""
from __future__ import annotations

from pathlib import Path

import torch

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda

SOURCE = Path(__file__).with_suffix(".cu")
TILE = 16          # scores_kernel: a 16×16 block of scores per thread block (256 threads)
ROWS = 128         # softmax_kernel: rows per block (4 warps)
_mod = None


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE)
    return _mod


def attention(q, k, v, *, causal: bool = False):
    check_inputs(q, k, v)
    B, H, S, D = q.shape
    mod = _module()
    scores = torch.empty((B, H, S, S), dtype=torch.float32, device=q.device)   # fp32 scores, then P
    o = output_like(q)                                                          # [B, H, S, D]
    mod.scores_kernel(grid=((S + TILE - 1) // TILE, (S + TILE - 1) // TILE, B * H), block=(TILE, TILE),
                      args=(q, k, scores, S, D, D ** -0.5, int(causal)))
    mod.softmax_kernel(grid=((B * H * S + ROWS - 1) // ROWS,), block=(ROWS,), args=(scores, B * H * S, S))
    mod.pv_kernel(grid=(1, S, B * H), block=(D,), args=(scores, v, o, S, D, int(causal)))
    return o
