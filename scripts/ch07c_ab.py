"""Step 7c against its variants and SDPA, timed call by call with CUDA events (an independent check of
``scripts/ch07_gpu.py --sweep``, which times the grader's way: batches of back-to-back calls). Meant for an H100:

    PYTHONPATH=$PWD python scripts/ch07c_ab.py out.json --variant desc_inc=1 [--variant tiles=128] \\
        [--shape 4 32 4096 128 ...] [--reps 50]

Per shape, causal and not: every build checked against SDPA on the shape's inputs (largest difference printed; a
variant more than 2e-2 off is dropped), then SDPA (cuDNN pinned), the default 7c and each variant timed in one
process by ``flashtutor.timing.compare`` — one call between two events, the L2 flushed before each, the candidates
alternating in a rotating order — median and p10–p90 of ``--reps`` calls; time ÷ SDPA's per build.

With ``--seed`` instead: the issue's third target, at the seed shape B1 H16 S1024 D64 (causal and not), SDPA,
step 7c and chapter 6's solution (``solutions/06_batching/attention.py``, its best kernel for small problems)
each replayed from a CUDA graph with the L2 flushed before every call (``flashtutor.timing.graph_times``), the
three taking turns for ``--rounds`` rounds; the median of the rounds' per-call times.

A variant is ``NAME=VALUE[,NAME=VALUE]`` over ``k07c_pingpong.variant``'s keywords: ``desc_inc=1``,
``tiles=128`` (the key-tile width at this shape's head dim and masking), ``max_stages=2``, ``exp2_fma_every=4``,
``row_split=1``, ``q_slots_d64=2``, ``end_align=0``, ``split_tail=0`` (at this shape's head dim), ``consumers_d64=3``, ``schedule=dynamic`` (this shape's head dim and masking).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = [(4, 32, 4096, 128), (2, 32, 8192, 128), (2, 32, 16384, 128), (4, 32, 4096, 64), (2, 32, 8192, 64)]


def build(spec: str, D: int, causal: bool):
    """``k07c.variant(...)`` from ``NAME=VALUE[,…]`` (``tiles`` applies to this head dim and masking)."""
    from flashtutor.kernels import k07c_pingpong as k07c
    kw = {}
    for item in spec.split(","):
        name, value = item.split("=")
        if name == "tiles":
            kw["tiles"] = {(D, causal): int(value)}
        elif name == "schedule":
            kw["schedule"] = {(D, causal): value}
        elif name == "split_tail":
            kw["split_tail"] = {D: bool(int(value))}
        elif name == "desc_inc":
            kw["desc_inc"] = bool(int(value))
        else:
            kw[name] = int(value)
    return k07c.variant(**kw)


def chapter6():
    """Chapter 6's solution as a module."""
    from flashtutor.kernels import solution_module
    return solution_module("06_batching")


def seed(out: Path, rounds: int, env: dict) -> None:
    """Graph-replayed times of SDPA, step 7c and chapter 6's solution at the seed shape, in turns."""
    import statistics

    import torch

    from flashtutor import timing
    from flashtutor.kernels import k07c_pingpong as k07c
    ch06 = chapter6()
    B, H, S, D = 1, 16, 1024, 64
    res = {"env": env, "rounds": rounds, "shape": [B, H, S, D], "cases": []}
    print(f"graph-replayed, L2 flushed, {rounds} rounds in turns; median per-call µs")
    for causal in (False, True):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g).half() for _ in range(3))
        backend, sdpa = timing.pinned_sdpa(q, k, v, causal=causal)
        want = sdpa().float()
        fns = {"7c": lambda: k07c.attention(q, k, v, causal=causal),
               "6c": lambda: ch06.attention(q, k, v, causal=causal)}
        diffs = {n: (f().float() - want).abs().max().item() for n, f in fns.items()}
        times = {n: [] for n in (f"SDPA ({backend})", *fns)}
        for _ in range(rounds):
            with sdpa.pinned():
                times[f"SDPA ({backend})"].append(timing.graph_times(sdpa).median_us)
            for n, f in fns.items():
                times[n].append(timing.graph_times(f).median_us)
        med = {n: statistics.median(t) for n, t in times.items()}
        name = f"B{B} H{H} S{S} D{D}" + (" causal" if causal else "")
        print(name + "  " + "  ".join(f"{n} {m:.2f} ({min(times[n]):.2f}–{max(times[n]):.2f})" for n, m in med.items())
              + f"  |Δ| {max(diffs.values()):.2g}")
        res["cases"].append({"causal": causal, "median_us": med, "rounds_us": times, "max_abs_diff_vs_sdpa": diffs})
        out.write_text(json.dumps(res, indent=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--variant", action="append", default=[])
    ap.add_argument("--shape", nargs=4, type=int, action="append")
    ap.add_argument("--causal", choices=["both", "no", "yes"], default="both")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--seed", action="store_true", help="the seed shape: SDPA, 7c and chapter 6's solution, graph-replayed")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    import torch
    import triton

    from flashtutor import timing
    from flashtutor.kernels import k07c_pingpong as k07c
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(f"{env['gpu']} · torch {env['torch']} · triton {env['triton']} · cuDNN {env['cudnn']} · {env['date']}")
    if args.seed:
        return seed(args.out, args.rounds, env)
    print(f"events, one call each, L2 flushed, alternating, median of {args.reps}; time ÷ SDPA's")
    res = {"env": env, "reps": args.reps, "cases": []}
    causals = {"both": (False, True), "no": (False,), "yes": (True,)}[args.causal]
    for B, H, S, D in (args.shape or SHAPES):
        for causal in causals:
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g).half() for _ in range(3))
            backend, sdpa = timing.pinned_sdpa(q, k, v, causal=causal)
            want = sdpa().float()
            fns = {f"SDPA ({backend})": sdpa, "7c": lambda: k07c.attention(q, k, v, causal=causal)}
            diffs = {"7c": (k07c.attention(q, k, v, causal=causal).float() - want).abs().max().item()}
            for spec in args.variant:
                att = build(spec, D, causal)
                diffs[spec] = (att(q, k, v, causal=causal).float() - want).abs().max().item()
                if diffs[spec] > 2e-2:
                    print(f"  {spec}: largest difference from SDPA {diffs[spec]:.3g}: dropped")
                    continue
                fns[spec] = (lambda att=att: att(q, k, v, causal=causal))
            stats = timing.compare(fns, reps=args.reps)
            ref = stats[f"SDPA ({backend})"].median_us
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            name = f"B{B} H{H} S{S} D{D}" + (" causal" if causal else "")
            print(name)
            case = {"shape": [B, H, S, D], "causal": causal, "max_abs_diff_vs_sdpa": diffs, "builds": {}}
            for n, st in stats.items():
                case["builds"][n] = {**st.to_dict(), "ratio_vs_sdpa": st.median_us / ref}
                print(f"  {n:<28} {st.median_us:10.1f} µs  (p10–p90 {st.p10_us:.1f}–{st.p90_us:.1f})  "
                      f"÷ SDPA {st.median_us / ref:.3f}  {flops / st.median_us / 1e6:.0f} TFLOP/s")
            res["cases"].append(case)
            args.out.write_text(json.dumps(res, indent=1))
            del q, k, v, want
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
