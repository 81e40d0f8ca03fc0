import importlib.util, torch
from flashtutor.kernels import k07c_pingpong as k
from flashtutor.problems import Problem
from flashtutor.timing import compare, pinned_sdpa
spec = importlib.util.spec_from_file_location("old7c", "scripts/k07c_old_tmp.py"); old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
static = k.variant(schedule={(64, True): "static"})
dyn = k.variant(schedule={(64, True): "dynamic"})
for shape in [(4, 32, 4096, 64), (2, 32, 8192, 64), (4, 32, 4096, 128)]:
    for causal in (True, False):
        p = Problem(*shape, causal=causal)
        q, kk, v = p.inputs(0, "cuda")
        _, sd = pinned_sdpa(q, kk, v, causal=causal)
        fns = {"new": lambda: k.attention(q, kk, v, causal=causal), "old": lambda: old.attention(q, kk, v, causal=causal),
               "new static": lambda: static(q, kk, v, causal=causal), "new dynamic": lambda: dyn(q, kk, v, causal=causal), "SDPA": sd}
        st = compare(fns, reps=40)
        print(p.name, "  ".join(f"{n} {s.median_us / st['SDPA'].median_us:.3f}" for n, s in st.items() if n != "SDPA"), flush=True)
