"""Chapter 7 exercise: attention on Hopper's own machinery — TMA, mbarriers, wgmma, warp specialization.

You write two parts of the consumer warpgroups in ``attention.cu`` (beside this file): the pipeline's
wait and release (the kv_full / kv_empty mbarrier phases), and the online softmax with the rescale of
the output accumulator, in registers. The producer, the tensor maps, the wgmma calls and this
launcher are given. Grade it with ``flashtutor grade 07`` or, in the notebook, ``flashtutor.grade("07")``.
Needs an sm_90 GPU (H100/H200); on a CPU machine the .cu file still compiles (``flashtutor sass 07``).
"""
from __future__ import annotations

from pathlib import Path

import flashtutor as ft
from flashtutor.loaders import tma

CONSUMERS = 2               # consumer warpgroups per block, 64 query rows each
Br, Bc = 64 * CONSUMERS, 128    # query rows per block, keys per K/V tile (as in attention.cu)
STAGES = 2                  # K/V ring slots
THREADS = 128 * (1 + CONSUMERS)  # a producer warpgroup + the consumers
BOX = 64                    # fp16 columns per TMA box: 128 bytes, the 128-byte swizzle's span
ALIGN = 1024                # the kernel aligns its tiles to a swizzle atom (8 rows × 128 bytes) itself
LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x · log2 e)
KERNELS = {64: "ws_attention_d64", 128: "ws_attention_d128"}
_kernel_file = Path(__file__).with_name("attention.cu")
_mod = None


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block: ``Layout<D>::BYTES`` of attention.cu + ALIGN bytes of slack."""
    q = Br * D * 2                        # Q tile        [D/64][Br][64] fp16
    kv = 2 * STAGES * Bc * D * 2          # K and V rings [STAGES][D/64][Bc][64] fp16 each
    bars = 8 * (1 + 2 * STAGES) + 8       # mbarriers (Q full, K/V full and empty per slot) + the abort flag
    return q + kv + bars + ALIGN


def require_hopper() -> None:
    """A clear error on anything but an sm_90 GPU (wgmma and setmaxnreg exist only on sm_90a)."""
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("chapter 7's kernels need an NVIDIA Hopper GPU (sm_90: H100/H200); no CUDA GPU here")
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0):
        raise RuntimeError(f"chapter 7's kernels need sm_90 (H100/H200): wgmma and setmaxnreg exist only on "
                           f"sm_90a; this GPU, {torch.cuda.get_device_name()}, is sm_{cc[0]}{cc[1]}")


def attention(q, k, v, *, causal: bool = False):
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics)."""
    global _mod
    ft.check_inputs(q, k, v)
    require_hopper()
    if _mod is None:
        _mod = ft.load_cuda(_kernel_file, arch="sm_90a")     # compiled once with NVRTC, then cached
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    o = ft.output_like(q)                                                # [B, H, S, D]
    rows = B * H * S                                                     # every head's rows, one matrix
    tq = tma.tensor_map(q.view(rows, D), box_rows=Br, box_cols=BOX)      # boxes [Br, 64] of Q
    tk = tma.tensor_map(k.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of K
    tv = tma.tensor_map(v.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of V
    tma.launch(_mod.kernel(KERNELS[D]), grid=((S + Br - 1) // Br, B * H), block=(THREADS,),
               shared_mem=shared_bytes(D), args=(tq, tk, tv, o, S, D ** -0.5 * LOG2E, int(causal)))
    return o
