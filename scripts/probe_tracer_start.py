"""Where a grading worker's start-up goes on the GPU host: torch import, CUDA init, and the first start of
each tracer variant (torch.profiler CPU+CUDA, CUDA only), each in a fresh process."""
import subprocess
import sys

CODE = r'''
import time, sys
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.init(); torch.zeros(1, device="cuda")
t2 = time.perf_counter()
from torch.profiler import profile, ProfilerActivity
acts = {"cpu+cuda": [ProfilerActivity.CPU, ProfilerActivity.CUDA], "cuda": [ProfilerActivity.CUDA]}[sys.argv[1]]
t3 = time.perf_counter()
p = profile(activities=acts); p.__enter__()
t4 = time.perf_counter()
torch.zeros(1, device="cuda").add_(1); torch.cuda.synchronize()
p.__exit__(None, None, None)
t5 = time.perf_counter()
p = profile(activities=acts); p.__enter__(); torch.zeros(1, device="cuda").add_(1); p.__exit__(None, None, None)
t6 = time.perf_counter()
print(f"{sys.argv[1]:9s} import {t1-t0:.2f}  cuda init {t2-t1:.2f}  first start {t4-t3:.2f}  first stop {t5-t4:.2f}  "
      f"second start+stop {t6-t5:.3f} s")
'''
for variant in ("cpu+cuda", "cuda"):
    subprocess.run([sys.executable, "-c", CODE, variant])
subprocess.run([sys.executable, "-c", "import os; print({k: v for k, v in os.environ.items() if 'CUDA' in k or 'KINETO' in k})"])
