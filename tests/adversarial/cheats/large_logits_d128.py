"""Class 8: a numerical shortcut that shows only with large logits at D = 128: the D = 128 path skips the
row-max subtraction (exp() overflows fp32 above 88.7), the D = 64 path does it right. Large-logit cases at
every head dim, causal and not, catch it."""
import torch

import flashtutor as ft


def attention(q, k, v, *, causal=False):
    B, H, S, D = q.shape
    qf, kf, vf = q.float(), k.float(), v.float()
    s = (qf[..., :, None, :] * kf[..., None, :, :]).sum(-1) * D ** -0.5
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if D == 64:
        s = s - s.amax(-1, keepdim=True)
    p = torch.exp(s)
    o = (p[..., :, :, None] * vf[..., None, :, :]).sum(-2) / p.sum(-1, keepdim=True)
    out = ft.output_like(q)
    out.copy_(o)
    return out
