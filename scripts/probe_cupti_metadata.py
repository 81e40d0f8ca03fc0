"""Probe (not part of the course): what CUPTI metadata torch.profiler's events carry on this GPU."""
import json
import torch
from torch.profiler import ProfilerActivity, profile
from flashtutor.grading.worker import Tracer

x = torch.randn(1 << 20, device="cuda")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    y = x * 2
    z = y.cpu()
    torch.cuda.synchronize()
ev = [e for e in prof.profiler.kineto_results.events() if str(e.device_type()).endswith("CUDA")]
for e in ev[:4]:
    try:
        m = e.metadata_json()
    except Exception as err:
        m = f"ERR {err}"
    print("EVENT", e.name()[:60], "corr", getattr(e, "correlation_id", lambda: None)(), "meta", repr(m)[:300])
t = Tracer(True)
t.start("n1")
y = x * 3
z = y.cpu()
torch.cuda.synchronize()
tr = t.stop()
print("TRACER", json.dumps([__import__("dataclasses").asdict(k) for k in tr.kernels], default=str)[:800])
