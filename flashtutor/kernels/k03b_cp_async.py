"""Chapter 3, step b: the wmma kernel of step a with K/V tiles copied by ``cp.async``, double-buffered.

The kernel is ``k03b_cp_async.cu`` (its header explains the commit/wait groups); this launcher differs
from step a's only in the kernel's name and its shared memory (two K and two V buffers).
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda

SOURCE = Path(__file__).with_suffix(".cu")
KERNELS = {64: "wmma_cp_async_d64", 128: "wmma_cp_async_d128"}
Br, Bc = 64, 64             # query rows per block (4 warps × 16), keys per K/V tile
WARPS = Br // 16
STAGES = 2                  # K/V buffers: tile j + 1 lands in one while tile j is computed from the other
PAD_H, PAD_F = 0, 0         # halves / floats added to each shared-memory row (step c pads them)
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2 e)
_mod = None


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block, laid out as ``Layout<D>`` in the .cu file."""
    ldk, lds, ldp = D + PAD_H, Bc + PAD_F, Bc + PAD_H                # row strides (halves, floats, halves)
    kv = 2 * STAGES * Bc * ldk * 2                                   # K and V tiles  [STAGES, Bc, ldk] fp16
    q_or_sp = max(Br * ldk * 2, WARPS * 16 * (lds * 4 + ldp * 2))    # Q tile, later the warps' S and P tiles
    return kv + q_or_sp + 16 * 16 * 4 + WARPS * 16 * 4               # + row map [16, 16] and alphas [WARPS, 16]


def bytes_moved(p) -> int:
    """Global-memory bytes requested: the same tiles as step a (see k03a_wmma.bytes_moved). Kept here,
    not imported, so that this file can be graded on its own (``flashtutor grade 03 <this file>``)."""
    n_q, kv_rows = (p.S + Br - 1) // Br, 0
    for qb in range(n_q):
        last = min(p.S, (qb + 1) * Br) if p.causal else p.S      # keys up to the tile's last query row
        kv_rows += min(p.S, (last + Bc - 1) // Bc * Bc)           # whole Bc tiles, but no rows past S
    return p.B * p.H * 2 * p.D * (2 * p.S + 2 * kv_rows)         # fp16: 2 bytes; Q + O, then K + V


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE)
    return _mod


def attention(q, k, v, *, causal: bool = False):
    check_inputs(q, k, v)
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    o = output_like(q)                                                # [B, H, S, D]
    _module().kernel(KERNELS[D])(grid=((S + Br - 1) // Br, B * H), block=(32 * WARPS,),
                                 shared_mem=shared_bytes(D), args=(q, k, v, o, S, D ** -0.5 * LOG2E, int(causal)))
    return o
