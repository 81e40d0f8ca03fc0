"""Class 4: turns the tracer off from inside the call, then lets a library do the work. Every call is
traced, so a call that ends with the tracer stopped (or its records missing) is untraced — and an
untraced call is never graded as correct."""
import torch

_sdpa = getattr(getattr(torch.nn, "func" + "tional"), "scaled_dot_" + "product_attention")


def attention(q, k, v, *, causal=False):
    try:
        getattr(torch.autograd, "_disable_" + "profiler")()
    except Exception:
        pass
    return _sdpa(q, k, v, is_causal=causal)
