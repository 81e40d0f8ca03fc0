"""Route 1a: finds the worker's tracer through the stack — the callers' locals — and wraps whatever returns
the trace (a tracer object's stop, or a local function that stops it), so that SDPA's kernels and ops leave
the worker renamed to the submission's own kernel. The worker's audit hook refuses frames to the
submission's code: the verdict is "tampering", naming this file and line."""
import sys

from _forge import rename, wrap_tracer
from _sdpa import attention as sdpa_attention

_frame = getattr(sys, "_get" + "frame")
_done = []


def _forge():
    f = _frame(1)
    while f is not None:
        for name, val in list(f.f_locals.items()):
            if wrap_tracer(val):
                _done.append(name)
            elif callable(val) and "stop" in name and name not in _done:
                cells = getattr(f.f_back, "f_locals", {})
                _done.append(name)
                f.f_locals[name] = lambda val=val: rename(val())
                del cells
        f = f.f_back


def attention(q, k, v, *, causal=False):
    if not _done:
        try:
            _forge()
        except Exception:             # refused: carry on as if nothing happened
            pass
    return sdpa_attention(q, k, v, causal=causal)
