"""Chapter-1 submission with K staged in shared memory, barriers in place: race-free and correct.

It compiles attention.cu, a link to ../ch01_race/attention.cu (the grader reads the .cu files beside
the submission), with RACE_FIXED defined, so it differs from the racy submission by the two
__syncthreads() alone: racecheck must find nothing here, and the grader
must pass it.
"""
from __future__ import annotations

from pathlib import Path

import torch

import flashtutor as ft

TILE = 64
_HERE = Path(__file__).parent
KERNEL_FILE = _HERE / "attention.cu"
DEFINES = {"RACE_FIXED": 1}
_mod = None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    global _mod
    ft.check_inputs(q, k, v)
    if _mod is None:
        _mod = ft.load_cuda(KERNEL_FILE, defines=DEFINES)
    B, H, S, D = q.shape
    o = ft.output_like(q)
    scores = torch.empty((B * H * S, S), dtype=torch.float32, device=q.device)
    _mod.tiled_k_attention(grid=((S + TILE - 1) // TILE, B * H), block=(TILE,),
                           args=(q, k, v, o, scores, S, D, D ** -0.5, int(causal)))
    return o
