"""Route 4, timed-only garbage: a correctness check is one call alone; a timed batch is calls back to back.
When the previous call returned less than half a millisecond ago (inside a batch), skip the work on every
other call and return the buffer unwritten. The grader checks every output of every timed batch on sampled
rows: "timed output wrong", never "disturbed"."""
import time

import flashtutor as ft
from _into import launch_into

_last = [0.0]
_n = [0]


def attention(q, k, v, *, causal=False):
    now = time.perf_counter()
    out = ft.output_like(q)
    in_batch = now - _last[0] < 5e-4
    _n[0] += 1
    if not (in_batch and _n[0] % 2):
        launch_into(q, k, v, out, causal)
    _last[0] = time.perf_counter()
    return out
