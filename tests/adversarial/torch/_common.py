"""A plain PyTorch attention in fp32, the base of the CPU test submissions."""
import math

import torch

import flashtutor as ft


def attention_fp32(q, k, v, *, causal=False, scale=None, subtract_max=True, out=None):
    B, H, S, D = q.shape
    scale = 1 / math.sqrt(D) if scale is None else scale
    s = q.float() @ k.float().transpose(-1, -2) * scale                       # [B, H, S, S]
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    if subtract_max:
        s = s - s.amax(dim=-1, keepdim=True)
    p = torch.exp(s)
    o = (p @ v.float()) / p.sum(dim=-1, keepdim=True)                          # [B, H, S, D]
    if out is None:
        out = ft.output_like(q)
    out.copy_(o)
    return out
