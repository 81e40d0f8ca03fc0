"""Step 8d (the warp-specialized CUDA backward) against float32 autograd, case by case, each case in its own process
with a time limit (a wrong barrier phase hangs the kernel; the limit turns it into a line of output):

    PYTHONPATH=$PWD python scripts/ch08d_debug.py [--limit 30] [--json out.json] [--variant FT_NAME=1[,…]]

For each case (B, H, S, D, causal) it prints, per gradient (dQ, dK, dV), the largest error relative to the
reference's largest magnitude, and where the errors sit (which rows and which columns exceed 1 % of that magnitude,
as ranges), so that a layout or masking bug shows its shape: a wrong swizzle touches columns in a pattern, a wrong
mask touches rows past a diagonal, a lost reduce touches whole query tiles. ``--variant``: the kernel built with those
macros (``k08d.variant``), its backward called three times per case (a variant that keeps state between calls, such as
a buffer it leaves zeroed, shows it there); the third call's gradients are checked, and any difference between the
calls is printed.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = [(1, 1, 128, 64, False), (1, 1, 128, 128, False), (1, 1, 64, 64, False), (1, 1, 256, 128, False),
         (1, 1, 256, 128, True), (1, 2, 200, 128, True), (2, 3, 113, 64, False), (2, 3, 113, 64, True),
         (1, 2, 1023, 128, False), (1, 2, 1023, 128, True), (2, 4, 2048, 64, True)]


def ranges(idx):
    """[1, 2, 3, 7, 8] → '1-3, 7-8' (at most six ranges)."""
    idx = sorted(set(int(i) for i in idx))
    out, start = [], None
    for i, x in enumerate(idx):
        if start is None:
            start = x
        if i + 1 == len(idx) or idx[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out[:6]) + (f" … ({len(out)} ranges)" if len(out) > 6 else "")


def run_case(case, queue, defines=None):
    import torch
    from flashtutor.kernels import k08d_backward_ws as d
    B, H, S, D, causal = case
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=g).half() for _ in range(4))
    o, lse = d.forward(q, k, v, causal=causal)
    module = d.variant(**defines) if defines else None
    calls = [d.backward(q, k, v, o, lse, do, causal=causal, module=module) for _ in range(3 if defines else 1)]
    dq, dk, dv = calls[-1]
    torch.cuda.synchronize()
    between = max([(a.float() - b.float()).abs().max().item() for c in calls[:-1] for a, b in zip(c, calls[-1])],
                  default=0.0)                                  # one call: nothing to compare
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    of = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal)
    ref = torch.autograd.grad(of, (qf, kf, vf), do.float())
    res = {}
    for name, got, want in zip(("dQ", "dK", "dV"), (dq, dk, dv), ref):
        err = (got.float() - want).abs()
        mag = want.abs().max().item()
        bad = err > 0.01 * mag
        rows = bad.any(-1).nonzero()[:, 2].tolist() if bad.any() else []
        cols = bad.any(-2).nonzero()[:, 2].tolist() if bad.any() else []
        res[name] = dict(rel=err.max().item() / mag, nan=bool(torch.isnan(got).any()),
                         bad_rows=ranges(rows), bad_cols=ranges(cols), bad_frac=bad.float().mean().item(),
                         between_calls=between)
    queue.put(res)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=float, default=30)
    ap.add_argument("--json")
    ap.add_argument("--variant", help="NAME=VALUE[,NAME=VALUE]: check the kernel built with these macros")
    args = ap.parse_args()
    defines = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in args.variant.split(",")} if args.variant else None
    ctx = mp.get_context("spawn")
    results = []
    for case in CASES:
        queue = ctx.Queue()
        p = ctx.Process(target=run_case, args=(case, queue, defines))
        p.start()
        p.join(args.limit)
        if p.is_alive():
            p.kill()
            p.join()
            res = "timeout (hang?)"
        elif p.exitcode != 0:
            res = f"crashed (exit {p.exitcode})"
        else:
            res = queue.get()
        results.append(dict(case=case, result=res))
        print(f"B{case[0]} H{case[1]} S{case[2]} D{case[3]} {'causal' if case[4] else 'full'}:", flush=True)
        if isinstance(res, str):
            print("   ", res, flush=True)
            continue
        for name, r in res.items():
            print(f"    {name}: max err / max |ref| = {r['rel']:.2e}  nan={r['nan']}  bad={r['bad_frac']:.3f}"
                  f"  rows[{r['bad_rows']}]  cols[{r['bad_cols']}]"
                  + (f"  between calls {r['between_calls']:.1e}" if defines else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
