"""Chapter 8, step d: the backward pass warp-specialized in CUDA, on chapter 7's TMA and wgmma tools.

The kernel is ``k08d_backward_ws.cu`` (its header gives the idea, the roles, the register split and what was
measured). This launcher keeps step 8a's forward (O and lse) and Triton preprocessing (delta = rowsum(dO ∘ O)), views
q, k, v and dO as ``[B·H·S, D]`` matrices with one tensor map each (``flashtutor.loaders.tma``), launches one block
per 128 keys and head, and turns the fp32 dQ buffer the blocks add into into dQ (a small Triton kernel). Hopper only
(sm_90a), like chapter 7's kernels.
What changed since step 8c: warp specialization with register reallocation, which Triton does not give this kernel.
Limitation: on the H100, 1.09–1.13× cuDNN's backward time at D = 128 (the course's target: at most 1.11×); see
the header.
"""
from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl

from ..api import check_inputs
from ..loaders import load_cuda, tma
from . import k08a_backward as base
from .k07a_wgmma_tma import require_hopper
from .k08b_backward_tuned import differentiable, preprocess

SOURCE = Path(__file__).with_suffix(".cu")
KERNELS = {64: "ws_backward_d64", 128: "ws_backward_d128"}
Bc, Br = 128, 64            # keys per block (64 per consumer warpgroup), query rows per streamed tile
STAGES = 2                  # (Q, dO, lse, delta) ring slots
CONSUMERS = 2
THREADS = 128 * (1 + CONSUMERS)
BOX = 64                    # fp16 columns per TMA box: 128 bytes, the swizzle span
ALIGN = 1024                # the kernel aligns its tiles to a swizzle atom itself
DQ_TILE = 64 * 64           # fp32 elements of one dQ tile (64 query rows × 64 columns)
DQ_BUFS = 2                 # dQ tiles in shared memory per consumer
forward = base.forward
_mod = None


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block: ``Layout<D>::BYTES`` of the .cu file + ALIGN bytes of slack."""
    kv = 2 * Bc * D * 2                         # K and V of the block
    tiles = 2 * STAGES * Br * D * 2             # the Q and dO rings
    rows = STAGES * 2 * Br * 4                  # each slot's lse and delta
    ds = 2 * Bc * Br * 2                        # dSᵀ of the block, two buffers
    dq = CONSUMERS * DQ_BUFS * DQ_TILE * 4      # each consumer's fp32 dQ tiles
    bars = 8 * (1 + 2 * STAGES)
    return kv + tiles + ds + dq + rows + bars + ALIGN


def dq_buffer(B: int, H: int, S: int, D: int, device) -> torch.Tensor:
    """The fp32 buffer the blocks add dQ into, zeroed: per head, per 64-row query tile, per 64 columns, one 16 KB
    tile in the order a consumer's wgmma accumulator holds it (so that its warps write shared memory without bank
    conflicts): [n8 (8)][h (2)][warp (4)][lane // 4 (8)][lane % 4 (4)][e (2)] for row 16·warp + 8·h + lane // 4 and
    column 8·n8 + 2·(lane % 4) + e."""
    return torch.zeros(B * H, triton.cdiv(S, 64), D // 64, 8, 2, 4, 8, 4, 2, dtype=torch.float32, device=device)


@triton.jit
def dq_convert_kernel(ACC, DQ, S, D: tl.constexpr, T: tl.constexpr):
    """One 64 × 64 tile of dQ: read from the buffer's accumulator order, cast, written in rows (program: tile,
    64-column block, head)."""
    t, blk = tl.program_id(0), tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)                 # offsets past 2³¹ elements for the largest problems
    rows = tl.arange(0, 64)[:, None]
    cols = tl.arange(0, 64)[None, :]
    # row 16·warp + 8·h + lane // 4, column 8·n8 + 2·(lane % 4) + e  ←  [n8][h][warp][lane // 4][lane % 4][e]
    idx = ((cols // 8) * 512 + ((rows // 8) % 2) * 256 + (rows // 16) * 64 + (rows % 8) * 8
           + ((cols % 8) // 2) * 2 + cols % 2)
    tile = ((bh * T + t) * (D // 64) + blk) * 4096
    x = tl.load(ACC + tile + idx)
    q = t * 64 + rows
    tl.store(DQ + (bh * S + q) * D + blk * 64 + cols, x.to(DQ.dtype.element_ty), mask=q < S)


def dq_from_buffer(acc: torch.Tensor, B: int, H: int, S: int, D: int, dtype) -> torch.Tensor:
    """dQ [B, H, S, D] from :func:`dq_buffer`'s tiles: one kernel that reorders and casts."""
    T = acc.shape[1]
    out = torch.empty(B, H, S, D, dtype=dtype, device=acc.device)
    dq_convert_kernel[(T, D // 64, B * H)](acc, out, S, D=D, T=T, num_warps=4)
    return out


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE, arch="sm_90a")
    return _mod


def variant(**defines):
    """The kernel built with macros defined (``FT_NAME=value``), for an A/B in one process: ``backward(..., module=m)``
    (scripts/ch08d_parts.py). A variant that changes the shared memory it needs must also change :func:`shared_bytes`."""
    return load_cuda(SOURCE, arch="sm_90a", defines=defines)


def backward(q, k, v, o, lse, do, *, causal: bool = False, module=None):
    """(dQ, dK, dV) fp16 from the forward's O and lse and the output's gradient dO (``module``: a :func:`variant`)."""
    check_inputs(q, k, v)
    require_hopper()
    do = do.contiguous()
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    delta = preprocess(o, do)                                                   # [B, H, S]
    dq_acc = dq_buffer(B, H, S, D, q.device)                                     # the blocks add into it
    dk, dv = torch.empty_like(q), torch.empty_like(q)
    rows = B * H * S
    tq, tdo = (tma.tensor_map(t.view(rows, D), box_rows=Br, box_cols=BOX) for t in (q, do))
    tk, tv = (tma.tensor_map(t.view(rows, D), box_rows=Bc, box_cols=BOX) for t in (k, v))
    tma.launch((module or _module()).kernel(KERNELS[D]), grid=(triton.cdiv(S, Bc), B * H), block=(THREADS,),
               shared_mem=shared_bytes(D),
               args=(tq, tk, tv, tdo, lse, delta, dq_acc, dk, dv, S, D ** -0.5, int(causal)))
    return dq_from_buffer(dq_acc, B, H, S, D, q.dtype), dk, dv


FlashAttentionWS, attention = differentiable(forward, backward)   # attention(q, k, v, *, causal=False)
