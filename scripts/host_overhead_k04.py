"""Why does the grader time the tuned Triton kernel slower than the notebook does? Time it at the
seed shape under each ingredient of the grader's loop, in one process."""
import importlib, torch
from flashtutor.problems import Problem
from flashtutor.timing import compare, event_times, graph_times, pinned_sdpa

p = Problem(1, 16, 1024, 64)
q, k, v = p.inputs(0, "cuda")
hop = importlib.import_module("flashtutor.kernels.k04_triton_fa2_hopper").attention
f = lambda: hop(q, k, v)
for _ in range(5): f()
torch.cuda.synchronize()
gen = torch.Generator(device="cuda").manual_seed(1)
def refresh(name, r):
    for t in (q, k, v): t.normal_(generator=gen)
name, sd = pinned_sdpa(q, k, v)
rows = {
  "event_times (flush)": event_times(f).median_us,
  "compare tuned+sdpa": compare({"tuned": f, "sdpa": sd})["tuned"].median_us,
  "compare tuned+sdpa, refresh": compare({"tuned": f, "sdpa": sd}, before=refresh)["tuned"].median_us,
  "graph replay (flush)": graph_times(f).median_us,
}
import time
t0 = time.perf_counter(); n = 200
for _ in range(n): f()
host = (time.perf_counter() - t0) / n * 1e6; torch.cuda.synchronize()
rows["host µs to issue one call"] = host
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
    f(); torch.cuda.synchronize()
rows["compare after a profiler session, refresh"] = compare({"tuned": f, "sdpa": sd}, before=refresh)["tuned"].median_us
t0 = time.perf_counter()
for _ in range(n): f()
rows["host µs to issue one call, after profiler"] = (time.perf_counter() - t0) / n * 1e6; torch.cuda.synchronize()
for k_, v_ in rows.items(): print(f"{k_:45} {v_:8.1f}")
