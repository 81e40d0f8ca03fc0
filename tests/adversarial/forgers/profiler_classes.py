"""Route 1c: patches torch's profiler classes — the event's name accessor, the result's events, the Python
profile class — so that whoever reads the events sees SDPA's ops and kernels under the submission's own
kernel name. The worker captured the C accessors before this file was imported: the verdict is "library
kernel"."""
import torch

from _sdpa import OWN, attention as sdpa_attention, looks_banned

_A = getattr(torch._C, "_auto" + "grad")
_KE = getattr(_A, "_Kineto" + "Event")
_name = _KE.name
setattr(_KE, "name", lambda self: OWN if looks_banned(_name(self)) else _name(self))
_PR = getattr(_A, "_Profiler" + "Result")
_events = _PR.events
setattr(_PR, "events", lambda self: [e for e in _events(self) if not looks_banned(_name(e))])
_disable = getattr(_A, "_disable_" + "profiler")
setattr(_A, "_disable_" + "profiler", lambda *a, **k: _disable(*a, **k))


def attention(q, k, v, *, causal=False):
    return sdpa_attention(q, k, v, causal=causal)
