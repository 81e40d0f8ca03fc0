"""Class 2: looks for the grader's reference output instead of computing attention — in the callers'
stack frames (``sys._getframe``) and among all live objects (``gc.get_objects``): a float tensor of q's
shape, or a local named like a reference. In the worker there is no reference to find, so it returns the
buffer it never wrote."""
import gc
import sys

import torch

import flashtutor as ft


def _look(q):
    f = sys._getframe(1)
    while f is not None:
        for name, val in f.f_locals.items():
            if name in ("ref", "reference", "expected") and isinstance(val, torch.Tensor) and val.shape == q.shape:
                return val
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and o.shape == q.shape and o.dtype in (torch.float32, torch.float64):
            return o
    return None


def attention(q, k, v, *, causal=False):
    out = ft.output_like(q)
    found = _look(q)
    if found is not None:
        out.copy_(found)
    return out
