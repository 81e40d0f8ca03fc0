"""Chapter 1 exercise: naive attention in CUDA, one thread per query row.

You write the kernel body in ``attention.cu`` (beside this file); this launcher is given.
Grade it with ``flashtutor grade 01`` or, in the notebook, ``flashtutor.grade("01")``.
"""
from __future__ import annotations

from pathlib import Path

import torch

import flashtutor as ft

ROWS_PER_BLOCK = 128   # threads per block: 4 warps, one query row each
_kernel_file = Path(__file__).with_name("attention.cu")
_mod = None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics)."""
    global _mod
    ft.check_inputs(q, k, v)
    if _mod is None:
        _mod = ft.load_cuda(_kernel_file)      # compiled once with NVRTC, then cached
    B, H, S, D = q.shape
    rows = B * H * S
    o = ft.output_like(q)                                                          # [B, H, S, D]
    scores = torch.empty((rows, S), dtype=torch.float32, device=q.device)         # [B·H·S, S]
    _mod.naive_attention(grid=((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,), block=(ROWS_PER_BLOCK,),
                         args=(q, k, v, o, scores, rows, S, D, D ** -0.5, int(causal)))
    return o
