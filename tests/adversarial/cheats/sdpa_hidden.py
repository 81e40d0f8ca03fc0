"""SDPA reached through strings the static scan cannot read: the profiled call must catch it."""
import torch

_fn = getattr(getattr(torch.nn, "func" + "tional"), "scaled_dot_" + "product_attention")


def attention(q, k, v, *, causal=False):
    return _fn(q, k, v, is_causal=causal)
