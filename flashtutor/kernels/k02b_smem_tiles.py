"""Chapter 2, step b: a block shares Q, K and V tiles through shared memory; two passes over K
(the row max first, then the sums), no score stored. The kernel is ``k02b_smem_tiles.cu``."""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda

SOURCE = Path(__file__).with_suffix(".cu")
THREADS = 256                  # 8 warps per block: a 16×16 grid of threads over each tile
Br = 64                        # query rows per block
LOG2E = 1.4426950408889634     # log2(e) = 1/ln 2: the kernel computes e^x as 2^(x · log2 e)
_mod = None


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE)
    return _mod


def key_tile(D: int) -> int:
    """Bc, the keys per K/V tile (``Tile<D>::Bc`` in the .cu)."""
    return 64 if D == 64 else 32


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block (fp32): Qs [Br][D+4], Ks [Bc][D+4], Vs [Bc][D], Ps [Bc][Br+4]."""
    Bc = key_tile(D)
    return 4 * (Br * (D + 4) + Bc * (D + 4) + Bc * D + Bc * (Br + 4))


def attention(q, k, v, *, causal: bool = False):
    check_inputs(q, k, v)
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    if any(t.data_ptr() % 16 for t in (q, k, v)):
        raise ValueError("q, k and v must start on a 16-byte boundary (the kernel loads 16 bytes at a time)")
    o = output_like(q)                                                         # [B, H, S, D]
    _module().kernel(f"smem_tiles_d{D}")(grid=((S + Br - 1) // Br, B * H), block=(THREADS,),
                                         args=(q, k, v, o, S, D ** -0.5 * LOG2E, int(causal)),
                                         shared_mem=shared_bytes(D))
    return o


def key_rows_read(S: int, causal: bool, block_rows: int = Br) -> int:
    """K (or V) rows one (batch, head) reads in one pass: every query block reads keys 0 … kv_end − 1,
    kv_end = S, or with causal min(S, end of the block)."""
    blocks = (S + block_rows - 1) // block_rows
    return sum(min(S, (b + 1) * block_rows) if causal else S for b in range(blocks))


def bytes_moved(p) -> int:
    """Global-memory traffic of the algorithm: Q read and O written once; per query block, K read
    twice (pass 1 and pass 2) and V once. Repeated reads of K/V are often served by the L2 cache."""
    elem = 2                                               # fp16
    qo = 2 * p.S * p.D * elem
    kv = 3 * key_rows_read(p.S, p.causal) * p.D * elem
    return p.B * p.H * (qo + kv)
