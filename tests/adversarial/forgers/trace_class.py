"""Route 1b: no frames at all — re-binds, through sys.modules, everything of the worker's module that could
carry the trace (the tracer's class and its stop, the sealed tracer's factory, the JSON helpers), in the
worker's module under its own name and as __main__ (the worker runs as ``python -m``). The worker's evidence
path was captured before this file was imported: nothing it uses is looked up again, and the verdict is
"library kernel"."""
import sys

from _forge import rename
from _sdpa import attention as sdpa_attention

_mods = getattr(sys, "mod" + "ules")
_pkg = "flash" + "tutor" + "." + "grading" + "."

for modname in ("__main__", _pkg + "worker", _pkg + "sealed", _pkg + "evidence"):
    mod = _mods.get(modname)
    if mod is None:
        continue
    tracer_cls = getattr(mod, "Tracer", None)
    if isinstance(tracer_cls, type):
        stop = tracer_cls.stop
        setattr(tracer_cls, "stop", lambda self, stop=stop: rename(stop(self)))
    fn = getattr(mod, "trace_to_json", None)
    if callable(fn):
        setattr(mod, "trace_to_json", lambda t, fn=fn: fn(rename(t)))
    factory = getattr(mod, "tracer", None)
    if callable(factory):
        def _wrapped(*a, factory=factory, **k):
            start, stop, abandon = factory(*a, **k)
            return start, (lambda: rename(stop())), abandon
        setattr(mod, "tracer", _wrapped)


def attention(q, k, v, *, causal=False):
    return sdpa_attention(q, k, v, causal=causal)
