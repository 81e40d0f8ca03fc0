"""Where a grading's time goes on this GPU host: the tracer's cost per batch, and standalone gradings with
their phases and per-shape seconds. Writes JSON to the path given (default: stdout).

    python scripts/probe_grading_cost.py out.json 02 04
    python scripts/probe_grading_cost.py out.json 02 --cprofile DIR    # also: where the judge's and the worker's
                                                                       # time goes (cProfile; text summaries in DIR)
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
    for mode in ("none", "session", "session+export", "cuda-only session"):
        ts = []
        for _ in range(reps):
            t = time.perf_counter()
            if mode == "none":
                for _ in range(calls):
                    f(q, k, v)
                torch.cuda.synchronize()
            else:
                acts = [ProfilerActivity.CUDA] if mode.startswith("cuda-only") else [ProfilerActivity.CPU,
                                                                                       ProfilerActivity.CUDA]
                with profile(activities=acts) as p:
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


STARTUP = r"""
import json, sys, time
t = {"start": time.perf_counter()}
import torch
t["import torch"] = time.perf_counter()
torch.cuda.init(); torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t["CUDA context"] = time.perf_counter()
from torch.profiler import ProfilerActivity, profile
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    torch.zeros(1, device="cuda").add_(1); torch.cuda.synchronize()
t["first profiler session"] = time.perf_counter()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    torch.zeros(1, device="cuda").add_(1); torch.cuda.synchronize()
t["second profiler session"] = time.perf_counter()
keys = list(t)
print(json.dumps({k: round(t[k] - t[p], 3) for p, k in zip(keys, keys[1:])}))
"""


def startup_cost() -> dict:
    """Seconds a fresh process spends before it can grade (a worker's and a judge's start), step by step,
    with the interpreter's own start measured from outside."""
    import subprocess
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", STARTUP], capture_output=True, text=True, timeout=300)
    total = time.perf_counter() - t
    steps = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"error": out.stderr[-400:]}
    return {"steps_s": steps, "process_total_s": round(total, 3)}


def summarise(prof_dir: str) -> None:
    """Each .prof in ``prof_dir`` as text: the 40 costliest functions by cumulative and by own time."""
    import io
    import pstats
    from pathlib import Path
    for f in sorted(Path(prof_dir).glob("*.prof")):
        buf = io.StringIO()
        st = pstats.Stats(str(f), stream=buf).strip_dirs()
        st.sort_stats("cumulative").print_stats(40)
        st.sort_stats("tottime").print_stats(40)
        f.with_suffix(".txt").write_text(buf.getvalue())


def main() -> None:
    import os
    args = sys.argv[1:]
    prof_dir = None
    if "--cprofile" in args:
        i = args.index("--cprofile")
        prof_dir = args[i + 1]
        del args[i:i + 2]
        os.makedirs(prof_dir, exist_ok=True)
        os.environ["FLASHTUTOR_CPROFILE"] = prof_dir       # the workers profile themselves
    out_path = args[0] if args else None
    keys = args[1:] or ["02", "04"]
    from flashtutor import grade
    from flashtutor.env import describe
    res = {"env": describe(), "startup": startup_cost(), "tracer": tracer_cost(), "gradings": {}}
    print("startup", json.dumps(res["startup"]), flush=True)
    t = time.time()
    from flashtutor.roofline import measure_peaks
    measure_peaks()
    res["measure_peaks_s"] = round(time.time() - t, 2)
    for key in keys:
        t = time.time()
        if prof_dir:           # the judge in this process, so that its time is profiled too
            import cProfile
            prof = cProfile.Profile()
            r = prof.runcall(grade, key, solution=True, progress=False, separate_judge=False)
            prof.dump_stats(os.path.join(prof_dir, f"judge-{key}.prof"))
        else:
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
    if prof_dir:
        summarise(prof_dir)


if __name__ == "__main__":
    main()
