"""Class 6: submits the course's own tuned Triton kernel (flashtutor.kernels) as its own, imported through a
name the static scan cannot read."""
import importlib

_course = importlib.import_module("flashtutor." + "kern" + "els.k04_triton_fa2_hopper")


def attention(q, k, v, *, causal=False):
    return _course.attention(q, k, v, causal=causal)
