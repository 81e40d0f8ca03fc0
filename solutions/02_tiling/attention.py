"""Chapter 2 exercise: tiled attention with the online softmax, in CUDA, scalar fp32 math.

You write parts of the kernel in ``attention.cu`` (beside this file); this launcher is given.
Grade it with ``flashtutor grade 02`` or, in the notebook, ``flashtutor.grade("02")``.
"""
from __future__ import annotations

from pathlib import Path

import torch

import flashtutor as ft

THREADS = 256                  # threads per block: 8 warps, a 16×16 grid of threads over each tile
Br = 64                        # query rows per block (the Q tile); Br = 16 · TM in attention.cu
LOG2E = 1.4426950408889634     # log2(e) = 1/ln 2: the kernel computes e^x as 2^(x · log2 e)
_kernel_file = Path(__file__).with_name("attention.cu")
_mod = None


def key_tile(D: int) -> int:
    """Bc, the keys per K/V tile: the same choice as ``Tile<D>::Bc`` in attention.cu."""
    return 64 if D == 64 else 32


def shared_bytes(D: int) -> int:
    """Dynamic shared memory of one block, as attention.cu carves it up (all fp32):
    Qs [Br][D+4], Ks [Bc][D+4], Vs [Bc][D], Ps [Bc][Br+4]."""
    Bc = key_tile(D)
    return 4 * (Br * (D + 4) + Bc * (D + 4) + Bc * D + Bc * (Br + 4))


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics)."""
    global _mod
    ft.check_inputs(q, k, v)
    if _mod is None:
        _mod = ft.load_cuda(_kernel_file)      # compiled once with NVRTC, then cached
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    if any(t.data_ptr() % 16 for t in (q, k, v)):
        raise ValueError("q, k and v must start on a 16-byte boundary (the kernel loads 16 bytes at a time)")
    o = ft.output_like(q)                                                     # [B, H, S, D]
    kernel = _mod.kernel(f"flash_attention_d{D}")                             # one kernel per head dim
    kernel(grid=((S + Br - 1) // Br, B * H), block=(THREADS,),                # (query blocks, batch·head)
           args=(q, k, v, o, S, D ** -0.5 * LOG2E, int(causal)), shared_mem=shared_bytes(D))
    return o
