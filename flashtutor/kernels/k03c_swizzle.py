"""Chapter 3, step c (the chapter's reference): step b with shared-memory rows padded against bank conflicts.

The kernel is ``k03c_swizzle.cu`` (its header does the bank arithmetic, and says why wmma allows padding
but no XOR swizzle); this launcher differs from step b's only in the kernel's name and PAD_H, PAD_F.
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda

SOURCE = Path(__file__).with_suffix(".cu")
KERNELS = {64: "wmma_padded_d64", 128: "wmma_padded_d128"}
Br, Bc = 64, 64             # query rows per block (4 warps × 16), keys per K/V tile
WARPS = Br // 16
STAGES = 2                  # K/V buffers: tile j + 1 lands in one while tile j is computed from the other
PAD_H, PAD_F = 8, 8         # halves / floats added to each shared-memory row: 16 and 32 bytes
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


# ---- the bank arithmetic of the header, as code (the notebook and the tests use it) --------------
BANKS, BANK_BYTES = 32, 4   # shared memory: 32 banks, each serving one 4-byte word per cycle


def passes(byte_addresses) -> int:
    """Passes ("wavefronts") one phase of a shared-memory request needs: the largest number of
    distinct 4-byte words that any one bank is asked for (the same word twice is a broadcast, free).

    A phase is what the hardware serves at once, at most 128 bytes: 16-byte accesses are served 8
    threads at a time, 8-byte accesses 16 at a time, 4-byte accesses a whole warp."""
    words: dict[int, set] = {}
    for a in byte_addresses:
        w = a // BANK_BYTES
        words.setdefault(w % BANKS, set()).add(w)
    return max(len(s) for s in words.values())


def ldmatrix_phase(row_stride_bytes: int) -> list[int]:
    """Bytes one ldmatrix phase reads (what load_matrix_sync compiles to): 8 rows of 16 bytes."""
    return [r * row_stride_bytes + b for r in range(8) for b in range(0, 16, 4)]


def softmax_read_phase(lds_floats: int) -> list[int]:
    """The softmax's 16-byte reads of the score tile, first phase: lanes 0-7 = rows 0-3 × the lane
    pair's two chunks (floats 4h .. 4h + 3 of the row, k = 0)."""
    return [(r * lds_floats + 4 * h) * 4 + b for r in range(4) for h in range(2) for b in range(0, 16, 4)]


def p_store_phase(ldp_halves: int) -> list[int]:
    """The softmax's 8-byte stores of P (fp16), first phase: lanes 0-15 = rows 0-7 × the pair's chunks."""
    return [(r * ldp_halves + 4 * h) * 2 + b for r in range(8) for h in range(2) for b in range(0, 8, 4)]


def conflict_table(D: int = 64) -> list[tuple[str, int, int]]:
    """(access, passes with unpadded rows, passes with rows padded as in this step) for one phase each."""
    return [
        (f"K, V, Q fragments: ldmatrix, row stride {D} vs {D + PAD_H} halves",
         passes(ldmatrix_phase(D * 2)), passes(ldmatrix_phase((D + PAD_H) * 2))),
        (f"P fragments: ldmatrix, row stride {Bc} vs {Bc + PAD_H} halves",
         passes(ldmatrix_phase(Bc * 2)), passes(ldmatrix_phase((Bc + PAD_H) * 2))),
        (f"softmax reads S (16 B), row stride {Bc} vs {Bc + PAD_F} floats",
         passes(softmax_read_phase(Bc)), passes(softmax_read_phase(Bc + PAD_F))),
        (f"softmax writes P (8 B), row stride {Bc} vs {Bc + PAD_H} halves",
         passes(p_store_phase(Bc)), passes(p_store_phase(Bc + PAD_H))),
    ]
