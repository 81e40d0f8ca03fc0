"""Class 7: the two matrix products done by a convolution (cuDNN on a GPU) instead of a matmul — Q·Kᵀ as a
1-D convolution of the queries with the keys as filters, P·V likewise — with the softmax in plain
elementwise ops; and a decoy Triton kernel named ``conv`` (a substring of the library kernels' names)."""
import torch
import triton
import triton.language as tl

import flashtutor as ft

_conv1d = getattr(getattr(torch.nn, "func" + "tional"), "con" + "v1d")


@triton.jit
def conv(x_ptr):            # the decoy: never launched for real work
    pass


def attention(q, k, v, *, causal=False):
    B, H, S, D = q.shape
    out = ft.output_like(q)
    for b in range(B):
        for h in range(H):
            qs, ks, vs = q[b, h].float(), k[b, h].float(), v[b, h].float()               # [S, D]
            s = _conv1d(qs.t()[None], ks[:, :, None]).squeeze(0).t() * D ** -0.5        # [S, S]
            if causal:
                s = s.masked_fill(torch.ones(S, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
            p = torch.exp(s - s.amax(-1, keepdim=True))
            p = p / p.sum(-1, keepdim=True)
            o = _conv1d(p.t()[None], vs.t()[:, :, None]).squeeze(0).t()                  # [S, D]
            out[b, h].copy_(o)
    return out
