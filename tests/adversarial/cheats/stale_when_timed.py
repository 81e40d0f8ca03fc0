"""Right whenever it is checked, stale whenever it is timed: calls that come faster than 0.5 ms
apart (a benchmark loop) get the previous answer back. Only a re-check of timed outputs, on inputs
that change between calls, catches it."""
import time

from honest_elementwise import attention as honest

_last, _t = None, 0.0


def attention(q, k, v, *, causal=False):
    global _last, _t
    now = time.perf_counter()
    fast = now - _t < 5e-4
    _t = now
    if fast and _last is not None and _last.shape == q.shape:
        return _last
    _last = honest(q, k, v, causal=causal).clone()
    _t = time.perf_counter()
    return _last
