"""Route 1f: walks the garbage collector's objects for the worker's tracer (an object with start and stop, or
one holding a .tracer) and wraps its stop. The worker's audit hook refuses gc's object lists to the
submission's code: the verdict is "tampering"."""
import gc

from _forge import wrap_tracer
from _sdpa import attention as sdpa_attention

_objects = getattr(gc, "get_" + "objects")
_done = []


def attention(q, k, v, *, causal=False):
    if not _done:
        try:
            for o in _objects():
                if type(o).__name__ in ("Tracer", "Worker") and wrap_tracer(o):
                    _done.append(o)
        except Exception:
            pass
    return sdpa_attention(q, k, v, causal=causal)
