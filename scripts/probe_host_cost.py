"""What one SDPA call costs the host, four ways: why the grade reports' host column (57-161 µs on the
H100's host) is several times the measuring page's launch table (about 17 µs).

    PYTHONPATH=$PWD python scripts/probe_host_cost.py results/host-cost-h100-2026-11-26.json

At the seed shape (B1 H16 S1024 D64, fp16, cuDNN pinned), ``n`` calls are issued in a loop timed with
``time.perf_counter`` and no synchronisation inside (then one), as the judge's "host µs per call" is:

* ``plain``: the same q, k, v every call (the measuring page's and chapter 6's launch tables);
* ``views``: each call's q, k, v sliced from one large arena, a fresh slot per call (the judge's inputs);
* ``traced``: the same tensors, inside ``torch.profiler.profile`` with CPU and CUDA activities (the
  tracer the judge runs around its batches, to see which kernels a call launched);
* ``judge``: views and tracer together, as in the grader.

Each way is run ``rounds`` times in turn (ABCD ABCD ...); the file holds every round and the medians.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path


def main(out: str, n: int = 200, rounds: int = 9) -> None:
    import torch

    from flashtutor.env import describe
    from flashtutor.grading.protocol import views
    from flashtutor.grading.timing import _profile
    from flashtutor.problems import Problem
    from flashtutor.timing import pinned_sdpa

    p = Problem(1, 16, 1024, 64)
    shape = (p.B, p.H, p.S, p.D)
    q, k, v = p.inputs(0, "cuda")
    _, sdpa = pinned_sdpa(q, k, v)
    per_slot = 4 * q.numel()
    arena = torch.randn(n * per_slot, device="cuda", dtype=torch.float16)

    def with_views():
        for i in range(n):
            a, b, c, _ = views(arena, shape, i)
            torch.nn.functional.scaled_dot_product_attention(a, b, c)

    def same_tensors():
        for _ in range(n):
            torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def timed(body, traced):
        torch.cuda.synchronize()
        ctx = _profile() if traced else None
        if ctx:
            ctx.__enter__()
        t0 = time.perf_counter()
        body()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        if ctx:
            ctx.__exit__(None, None, None)
        return (t1 - t0) * 1e6 / n

    ways = {"plain": (same_tensors, False), "views": (with_views, False),
            "traced": (same_tensors, True), "judge": (with_views, True)}
    with sdpa.pinned():
        for body, traced in ways.values():          # warm-up: plans, the profiler's first start
            timed(body, traced)
        samples = {w: [] for w in ways}
        for _ in range(rounds):
            for w, (body, traced) in ways.items():
                samples[w].append(timed(body, traced))
    med = {w: statistics.median(s) for w, s in samples.items()}
    doc = {"environment": describe(), "problem": p.name, "calls_per_sample": n, "rounds": rounds,
           "backend": "CUDNN_ATTENTION (pinned)", "median_host_us_per_call": med, "samples_us": samples,
           "method": __doc__.strip().split("\n\n", 1)[1]}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(doc, indent=1, default=str))
    print(json.dumps({w: round(x, 1) for w, x in med.items()}))


if __name__ == "__main__":
    main(sys.argv[1])
