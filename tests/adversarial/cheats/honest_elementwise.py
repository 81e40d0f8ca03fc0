"""The control: attention without any library matmul or softmax (broadcast products, sums, exp).
It must pass with every anti-cheat check on — a checker that rejects this is too eager."""
import torch

import flashtutor as ft


def attention(q, k, v, *, causal=False):
    ft.check_inputs(q, k, v, device_type=None)
    B, H, S, D = q.shape
    qf, kf, vf = q.float(), k.float(), v.float()
    s = (qf[..., :, None, :] * kf[..., None, :, :]).sum(-1) * D ** -0.5          # [B, H, S, S]
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    p = torch.exp(s - s.amax(-1, keepdim=True))                                  # [B, H, S, S]
    o = (p[..., :, :, None] * vf[..., None, :, :]).sum(-2) / p.sum(-1, keepdim=True)   # [B, H, S, D]
    out = ft.output_like(q)
    out.copy_(o)
    return out
