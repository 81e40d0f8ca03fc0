"""Adversarial chapter-1 submission: K staged in shared memory with the barriers left out (a race).

Same interface as the chapter-1 launcher. ``flashtutor grade 01 --sanitize`` must report the race
(racecheck, with attention.cu and the line); the same source with its barriers is
../ch01_tiled_ok/attention.py.
"""
from __future__ import annotations

from pathlib import Path

import torch

import flashtutor as ft

TILE = 64                                   # threads per block = query rows per block (attention.cu)
KERNEL_FILE = Path(__file__).with_name("attention.cu")
DEFINES: dict = {}                          # {"RACE_FIXED": 1} puts the two barriers back
_mod = None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    global _mod
    ft.check_inputs(q, k, v)
    if _mod is None:
        _mod = ft.load_cuda(KERNEL_FILE, defines=DEFINES or None)
    B, H, S, D = q.shape
    o = ft.output_like(q)
    scores = torch.empty((B * H * S, S), dtype=torch.float32, device=q.device)
    _mod.tiled_k_attention(grid=((S + TILE - 1) // TILE, B * H), block=(TILE,),
                           args=(q, k, v, o, scores, S, D, D ** -0.5, int(causal)))
    return o
