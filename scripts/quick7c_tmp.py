import torch, time
from flashtutor.kernels import k07c_pingpong as k
from flashtutor.problems import Problem
from flashtutor.check import check_output
for shape in [(2,3,113,64),(1,2,1023,128),(2,80,1000,128),(4,32,4096,128)]:
    for causal in (False, True):
        p = Problem(*shape, causal=causal)
        q, kk, v = p.inputs(0, "cuda")
        for rep in range(3):
            o = k.attention(q, kk, v, causal=causal)
        torch.cuda.synchronize()
        r = check_output(p, q, kk, v, o, seed=0)
        print(p.name, "ok" if r.ok else f"WRONG {r}", flush=True)
print("counter", [t.tolist() for t in k._counters.values()])
