"""What every forger computes with: PyTorch's SDPA, its name assembled at run time (the static scan reads
names, not values), and the name of a Triton kernel the forger defines, to rename library kernels to."""
import torch
import triton
import triton.language as tl

import flashtutor as ft

_F = getattr(torch.nn, "func" + "tional")
SDPA = getattr(_F, "scaled_dot" + "_product_attention")


@triton.jit
def decoy(x_ptr):                 # never launched: a name of "your own" kernel to put in a forged trace
    tl.store(x_ptr, tl.load(x_ptr))


OWN = "decoy"
BANNED = ("scaled_dot", "attention", "flash", "cudnn", "fmha", "gemm", "soft" + "max", "bmm", "mat" + "mul", "mm")


def looks_banned(name: str) -> bool:
    return any(b in name for b in BANNED)


def attention(q, k, v, *, causal=False):
    out = ft.output_like(q)
    out.copy_(SDPA(q, k, v, is_causal=causal))
    return out
