"""Chapter 3 exercise: FlashAttention-2 on the tensor cores with ``nvcuda::wmma``.

You write the two tensor-core products and the online softmax in ``attention.cu`` (beside this file);
this launcher and the tile loads are given. Grade it with ``flashtutor grade 03`` or, in the notebook,
``flashtutor.grade("03")``.
"""
from __future__ import annotations

from pathlib import Path

import torch

import flashtutor as ft

Br, Bc = 64, 64             # query rows per block (4 warps × 16 rows) and keys per K/V tile, as in attention.cu
WARPS = Br // 16            # one warp per 16 query rows (a wmma tile is 16 rows tall)
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2 e), and exp2 is one instruction on the GPU
_kernel_file = Path(__file__).with_name("attention.cu")
_mod = None


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block, laid out as ``Layout<D>`` in attention.cu."""
    kv = 2 * Bc * D * 2                                     # K and V tiles        [Bc, D] fp16 each
    q_or_sp = max(Br * D * 2, WARPS * 16 * Bc * (4 + 2))    # the Q tile [Br, D], later each warp's S (fp32) + P (fp16)
    return kv + q_or_sp + 16 * 16 * 4 + WARPS * 16 * 4      # + the row map [16, 16] and 16 alphas per warp (fp32)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics)."""
    global _mod
    ft.check_inputs(q, k, v)
    if _mod is None:
        _mod = ft.load_cuda(_kernel_file)      # compiled once with NVRTC, then cached
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    o = ft.output_like(q)                                          # [B, H, S, D]
    kernel = _mod.kernel(f"wmma_attention_d{D}")                   # one entry point per head dim
    kernel(grid=((S + Br - 1) // Br, B * H), block=(32 * WARPS,), shared_mem=shared_bytes(D),
           args=(q, k, v, o, S, D ** -0.5 * LOG2E, int(causal)))
    return o
