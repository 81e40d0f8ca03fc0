"""Chapter 7, step c: step b plus the two overlaps of FlashAttention-3 — ping-pong between the consumer
warpgroups (named-barrier turns) and, within each, the next Q·Kᵀ issued with the previous P·V and the
softmax run under the P·V. A deeper K/V ring (3 slots at D 128, 4 at D 64).

The kernel is ``k07c_pingpong.cu`` (its header explains the reordering and the turn counting). The
launcher differs from step b's only in the kernel names and the ring depth.
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda, tma

SOURCE = Path(__file__).with_suffix(".cu")
KERNELS = {64: "pingpong_d64", 128: "pingpong_d128"}
CONSUMERS = 2
Br, Bc = 64 * CONSUMERS, 128    # query rows per block, keys per K/V tile
THREADS = 128 * (1 + CONSUMERS)  # a producer warpgroup + two consumers
BOX = 64                        # fp16 columns per TMA box (128 bytes: the swizzle span)
ALIGN = 1024                    # the kernel aligns its tiles to a swizzle atom itself
LOG2E = 1.4426950408889634      # log2(e): exp(x) = exp2(x · log2 e)
_mod = None


def stages(D: int) -> int:
    """K/V ring slots: as many as fit in 227 KB (Layout<D>::STAGES in the .cu file)."""
    return 4 if D == 64 else 3


def shared_bytes(D: int) -> int:
    """Dynamic shared memory per block: ``Layout<D>::BYTES`` of the .cu file + ALIGN bytes of slack."""
    q = Br * D * 2                        # Q tile        [D/64][Br][64] fp16
    kv = 2 * stages(D) * Bc * D * 2       # K and V rings [STAGES][D/64][Bc][64] fp16 each
    bars = 8 * (1 + 2 * stages(D))        # mbarriers: Q full, K/V full and empty per slot
    return q + kv + bars + ALIGN


def require_hopper() -> None:
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
    tq = tma.tensor_map(q.view(rows, D), box_rows=Br, box_cols=BOX)      # boxes [Br, 64] of Q
    tk = tma.tensor_map(k.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of K
    tv = tma.tensor_map(v.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of V
    tma.launch(_module().kernel(KERNELS[D]), grid=((S + Br - 1) // Br, B * H), block=(THREADS,),
               shared_mem=shared_bytes(D), args=(tq, tk, tv, o, S, D ** -0.5 * LOG2E, int(causal)))
    return o
