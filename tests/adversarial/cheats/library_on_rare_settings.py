"""Class 5: honest on the settings a single profiled call would use (non-causal, D = 64, short S), library
attention on the others (causal, D = 128, long sequences). Every call is traced, so the causal ones show it."""
import torch

from honest_elementwise import attention as honest

_sdpa = getattr(getattr(torch.nn, "func" + "tional"), "scaled_dot_" + "product_attention")


def attention(q, k, v, *, causal=False):
    if causal or q.shape[-1] == 128 or q.shape[-2] >= 2048:
        return _sdpa(q, k, v, is_causal=causal)
    return honest(q, k, v, causal=causal)
