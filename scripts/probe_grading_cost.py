"""Where a grading's time goes on this GPU host: the tracer's cost per batch, and standalone gradings with
their phases and per-shape seconds. Writes JSON to the path given (default: stdout).

    python scripts/probe_grading_cost.py out.json 02 04
"""
from __future__ import annotations

import json
import sys
import time


def tracer_cost(calls: int = 16, reps: int = 10) -> dict:
    """Seconds per profiling session around ``calls`` SDPA calls, without and with the chrome-trace export."""
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile
    q, k, v = (torch.randn(1, 16, 1024, 64, device="cuda", dtype=torch.half) for _ in range(3))
    f = torch.nn.functional.scaled_dot_product_attention
    for _ in range(3):
        f(q, k, v)
    torch.cuda.synchronize()
    out = {}
    for mode in ("none", "session", "session+export"):
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            if mode == "none":
                for _ in range(calls):
                    f(q, k, v)
                torch.cuda.synchronize()
            else:
                with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                    for _ in range(calls):
                        f(q, k, v)
                    torch.cuda.synchronize()
                p.profiler.kineto_results.events()
                if mode.endswith("export"):
                    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                        p.export_chrome_trace(tmp.name)
            ts.append(time.perf_counter() - t)
        ts.sort()
        out[mode] = {"median_s": ts[len(ts) // 2], "min_s": ts[0], "max_s": ts[-1]}
    return out


def main() -> None:
    out_path = sys.argv[1] if len(sys.argv) > 1 else None
    keys = sys.argv[2:] or ["02", "04"]
    from flashtutor import grade
    from flashtutor.env import describe
    res = {"env": describe(), "tracer": tracer_cost(), "gradings": {}}
    t = time.time()
    from flashtutor.roofline import measure_peaks
    measure_peaks()
    res["measure_peaks_s"] = round(time.time() - t, 2)
    for key in keys:
        t = time.time()
        r = grade(key, solution=True, progress=False)
        res["gradings"][key] = {"wall_s": round(time.time() - t, 1), "judge_s": r.seconds, "phases": r.phases,
                                "verdict": str(r.verdict), "headline": r.headline,
                                "shapes": [(x.problem, x.seconds, x.times["learner"].batch if x.times else None)
                                           for x in r.timings]}
        print(key, json.dumps(res["gradings"][key]), flush=True)
    text = json.dumps(res, indent=1, default=str)
    if out_path:
        open(out_path, "w").write(text)
    print(json.dumps(res["tracer"]), res["measure_peaks_s"])


if __name__ == "__main__":
    main()
