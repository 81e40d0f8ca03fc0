"""Chapter 7, step a: one warpgroup per block, Q and the K/V ring loaded by TMA, both GEMMs on wgmma.

The kernel is ``k07a_wgmma_tma.cu`` (its header explains TMA, the mbarrier phases, the 128-byte
swizzle and the wgmma descriptor). This launcher views q, k, v as ``[B·H·S, D]`` matrices, encodes one
tensor map per matrix (``flashtutor.loaders.tma``) and launches one block per 64 query rows and head.
Hopper only (sm_90a: wgmma); elsewhere it says so before compiling anything.
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda
from flashtutor.loaders import tma

SOURCE = Path(__file__).with_suffix(".cu")
KERNELS = {64: "wgmma_tma_d64", 128: "wgmma_tma_d128"}
Br, Bc = 64, 64             # query rows per block (wgmma's M: one warpgroup), keys per K/V tile
STAGES = 2                  # K/V ring slots
THREADS = 128               # one warpgroup
BOX = 64                    # fp16 columns per TMA box: 128 bytes, the 128-byte swizzle's span
ALIGN = 1024                # the kernel aligns its tiles to a swizzle atom (8 rows × 128 bytes) itself
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2 e)
_mod = None


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block: ``Layout<D>::BYTES`` of the .cu file + ALIGN bytes of slack."""
    q = Br * D * 2                        # Q tile        [D/64][Br][64] fp16
    kv = 2 * STAGES * Bc * D * 2          # K and V rings [STAGES][D/64][Bc][64] fp16 each
    bars = 8 * (1 + STAGES)               # mbarriers: Q full, K/V full per slot
    return q + kv + bars + ALIGN


def bytes_moved(p) -> int:
    """Global-memory bytes requested: whole Br-row Q boxes, whole Bc-row K/V tiles (TMA fetches
    complete boxes; past the head they are the next head's rows), O written once."""
    n_q = (p.S + Br - 1) // Br
    kv_rows = 0
    for qb in range(n_q):
        last = min(p.S, (qb + 1) * Br) if p.causal else p.S        # the block's last row + 1 (causal)
        kv_rows += (last + Bc - 1) // Bc * Bc
    return p.B * p.H * 2 * p.D * (n_q * Br + p.S + 2 * kv_rows)


def require_hopper() -> None:
    """Raise a clear error on anything but an sm_90 GPU (wgmma and this TMA use are sm_90a)."""
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("chapter 7's kernels need an NVIDIA Hopper GPU (sm_90: H100/H200); no CUDA GPU here")
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0):
        raise RuntimeError(f"chapter 7's kernels need sm_90 (H100/H200): wgmma and setmaxnreg exist only on "
                           f"sm_90a; this GPU, {torch.cuda.get_device_name()}, is sm_{cc[0]}{cc[1]}")


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE, arch="sm_90a")
    return _mod


def attention(q, k, v, *, causal: bool = False):
    check_inputs(q, k, v)
    require_hopper()
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    o = output_like(q)                                                   # [B, H, S, D]
    rows = B * H * S
    tq = tma.tensor_map(q.view(rows, D), box_rows=Br, box_cols=BOX)      # boxes [64, 64] of Q
    tk = tma.tensor_map(k.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of K
    tv = tma.tensor_map(v.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of V
    tma.launch(_module().kernel(KERNELS[D]), grid=((S + Br - 1) // Br, B * H), block=(THREADS,),
               shared_mem=shared_bytes(D), args=(tq, tk, tv, o, S, D ** -0.5 * LOG2E, int(causal)))
    return o
