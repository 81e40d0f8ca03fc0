"""Class 4: asks whether a profiler is watching and calls library attention only when none is; when watched
it runs a slow honest path. Every call of the grader is traced, checked or timed alike, so it only ever
takes the honest path — here too slow for the chapter's speed rule."""
import torch

from honest_elementwise import attention as honest

_sdpa = getattr(getattr(torch.nn, "func" + "tional"), "scaled_dot_" + "product_attention")


def _watched() -> bool:
    try:
        return bool(getattr(torch.autograd.profiler, "_is_" + "profiler_enabled"))
    except Exception:
        return True


def attention(q, k, v, *, causal=False):
    if _watched():
        return honest(q, k, v, causal=causal)
    return _sdpa(q, k, v, is_causal=causal)
