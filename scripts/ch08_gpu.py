"""Chapter 8 (the backward pass) on a GPU, in one go (written on a CPU machine; meant for an H100/H200):

    PYTHONPATH=$PWD python scripts/ch08_gpu.py results/ch08-gpu.json                 # checks, then timings
    PYTHONPATH=$PWD python scripts/ch08_gpu.py out.json --no-time                    # correctness only
    PYTHONPATH=$PWD python scripts/ch08_gpu.py out.json --steps 8a --shapes 4,32,4096,128   # one step, one shape

1. correctness of each step (8a = the solution, 8b = the tuned step with its second dQ pass, 8b-atomic = the tuned
   step with dQ by atomics, 8c = one fused kernel with TMA tiles and dQ by TMA reduce-adds, 8d = the warp-specialized CUDA
   kernel (Hopper only); the checks run fixed configurations,
   not the autotuners: ``fixed_config``) against float64 (flashtutor.backward.reference_grads) under the chapter's rule, once with
   SDPA's cuDNN backend and once with its FLASH backend as the yardstick, on odd S, B and H > 1, both head dims,
   causal and not, and large logits (q, k × 6); beside it, the FA2-precision emulation (the CPU tier's stand-in for
   SDPA) under the same rule against each backend, which says whether that stand-in is as strict as the real thing;
2. timing with CUDA events, the L2 flushed (256 MB written) before every rep, the candidates alternating in the same
   process (flashtutor.timing.compare, median of up to 50 reps): forward+backward (one call of the differentiable
   attention, then torch.autograd.grad) and the backward alone (torch.autograd.grad on a kept graph), for each step
   and for SDPA pinned to cuDNN and to FLASH (torch.nn.attention.sdpa_kernel), at B4 H32 S4096 D128,
   B2 H32 S8192 D128, B4 H32 S4096 D64 and B1 H16 S1024 D64, causal and not. TFLOP/s count the backward as 2.5× the
   forward's 4·B·H·S²·D (forward+backward: 3.5×), half for causal.

Prints a table (µs, TFLOP/s, time / SDPA-cuDNN's and / SDPA-FLASH's for the same mode) with the GPU's name, the
torch, triton and cuDNN versions and the date, and writes everything to the JSON path given (rewritten after each
part). A step that raises is reported and the others go on.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHECK_SHAPES = [(2, 3, 1, 64), (2, 3, 113, 64), (3, 2, 1023, 64), (1, 16, 1024, 64), (2, 3, 113, 128),
                (1, 2, 1023, 128), (1, 3, 4097, 64), (1, 2, 4097, 128)]
LARGE_LOGITS = [(1, 2, 1023, 64), (1, 2, 1023, 128)]           # q, k × 6: logits ×36
TIME_SHAPES = [(4, 32, 4096, 128), (2, 32, 8192, 128), (4, 32, 4096, 64), (1, 16, 1024, 64)]
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION")


def steps(names):
    """name → (forward, backward, attention) of each step asked for."""
    out = {}
    if "8a" in names:
        from flashtutor.kernels import k08a_backward as a
        out["8a"] = (a.forward, a.backward, a.attention)
    if {"8b", "8b-atomic"} & set(names):
        from flashtutor.kernels import k08b_backward_tuned as b
        if "8b" in names:
            out["8b"] = (b.forward, b.backward, b.attention)
        if "8b-atomic" in names:
            out["8b-atomic"] = (b.forward, lambda *x, **kw: b.backward(*x, dq_mode="atomic", **kw),
                                lambda q, k, v, causal=False: b.attention(q, k, v, causal=causal, dq_mode="atomic"))
    if "8c" in names:
        from flashtutor.kernels import k08c_backward_tma as c
        out["8c"] = (c.forward, c.backward, c.attention)
    if "8d" in names:                         # CUDA, warp-specialized: Hopper only
        from flashtutor.kernels import k08d_backward_ws as d
        out["8d"] = (d.forward, d.backward, d.attention)
    return out


# Step 8b's fixed configurations for the checks, per head dim (DKDV's BLOCK_M divides its BLOCK_N): the solution's
# swept forward and dQ tiles, 64 × 64 dK/dV tiles.
FIXED_8B = {D: dict(FWD=dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
                    DKDV=dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
                    DQ=dict(BLOCK_M=128, BLOCK_N=64 if D == 128 else 32, num_warps=8, num_stages=3))
            for D in (64, 128)}


def fixed_config(step_fns):
    """The steps for the correctness part with fixed configurations instead of their autotuners (which would compile
    every configuration for every (S bucket, D, causal) of the checks: ~150 s for 8b's first cases on the H100):
    8c with its first listed configuration per head dim, 8b with FIXED_8B."""
    out = dict(step_fns)
    if "8c" in out:
        from flashtutor.kernels import k08c_backward_tma as c

        def bwd(q, k, v, o, lse, do, *, causal=False):
            m, n, w, st = c.TUNED[q.shape[-1]][0]
            return c.launch_backward(q, k, v, o, lse, do, causal=causal, BLOCK_M=m, BLOCK_N=n, num_warps=w,
                                     num_stages=st)
        out["8c"] = (out["8c"][0], bwd, out["8c"][2])
    for name, mode in (("8b", "pass"), ("8b-atomic", "atomic")):
        if name in out:
            from flashtutor.kernels import k08b_backward_tuned as b
            out[name] = (lambda q, k, v, causal=False: b.forward(q, k, v, causal=causal,
                                                                  config=FIXED_8B[q.shape[-1]]),
                         lambda q, k, v, o, lse, do, causal=False, mode=mode: b.backward(
                             q, k, v, o, lse, do, causal=causal, dq_mode=mode, config=FIXED_8B[q.shape[-1]]),
                         out[name][2])
    return out


def chosen_configs():
    """What 8c's autotuner chose, per key (S bucket, D, causal, TMA, TMA add), if it ran."""
    import sys as _sys
    mod = _sys.modules.get("flashtutor.kernels.k08c_backward_tma")
    if mod is None:
        return {}
    return {str(k): str(v) for k, v in mod.bwd_fused_tuned.cache.items()}


def environment():
    import torch
    import triton
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cudnn": torch.backends.cudnn.version(), "cuda": torch.version.cuda, "python": platform.python_version(),
            "date": datetime.datetime.now().isoformat(timespec="seconds")}


def inputs(B, H, S, D, std=1.0, seed=0):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=g) for _ in range(4))
    return tuple(t.half().contiguous() for t in (q * std, k * std, v, do))


def pinned(backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([getattr(SDPBackend, backend)])


# ------------------------------------------------------------------------------------------------ correctness ------
def check(step_fns, record):
    from flashtutor import backward as bw
    cases = [(s, c, 1.0) for s in CHECK_SHAPES for c in (False, True)] + \
            [(s, c, 6.0) for s in LARGE_LOGITS for c in (False, True)]
    for (B, H, S, D), causal, std in cases:
        q, k, v, do = inputs(B, H, S, D, std=std)
        ref = bw.reference_grads(q, k, v, do, causal=causal)               # float64 on the GPU
        base = {}
        for backend in BACKENDS:
            try:
                with pinned(backend):
                    base[backend] = bw.sdpa_grads(q, k, v, do, causal=causal)
            except RuntimeError as e:
                print(f"  SDPA {backend} refused B{B} H{H} S{S} D{D}: {str(e).splitlines()[0]}")
        fa2 = bw.fa2_precision_grads(q, k, v, do, causal=causal)
        name = f"B{B} H{H} S{S} D{D}" + (" causal" if causal else "") + (" logits×36" if std != 1 else "")
        candidates = dict(step_fns)
        candidates["FA2-precision"] = None
        for who, fns in candidates.items():
            try:
                if fns is None:
                    got = dict(fa2)
                else:
                    o, lse = fns[0](q, k, v, causal=causal)
                    dq, dk, dv = fns[1](q, k, v, o, lse, do, causal=causal)
                    got = dict(o=o, lse=lse, dq=dq, dk=dk, dv=dv)
                for backend, b in base.items():
                    checks = bw.check_grads(got, ref, b)
                    ok = all(c.ok for c in checks)
                    worst = min(checks, key=lambda c: c.margin)
                    record.append({"kind": "check", "step": who, "shape": name, "yardstick": backend, "ok": ok,
                                   "min_margin": worst.margin, "worst": worst.message,
                                   "margins": {c.name: c.margin for c in checks}})
                    print(f"  {who:13s} {name:32s} vs {backend[:5]:5s}: {'ok  ' if ok else 'FAIL'} min margin "
                          f"{worst.margin:8.3g} ({worst.name})" + ("" if ok else f"  {worst.message}"))
            except Exception as e:                                          # a failing step must not stop the rest
                record.append({"kind": "check", "step": who, "shape": name, "ok": False, "error": repr(e)})
                print(f"  {who:13s} {name:32s} ERROR {e!r}")
                traceback.print_exc()


# ------------------------------------------------------------------------------------------------ timing -----------
def time_all(step_fns, shapes, reps, record):
    import torch
    import torch.nn.functional as F

    from flashtutor import backward as bw
    from flashtutor.timing import compare

    for (B, H, S, D) in shapes:
        for causal in (False, True):
            q0, k0, v0, do = inputs(B, H, S, D)
            leaves = [t.clone().requires_grad_(True) for t in (q0, k0, v0)]
            fwdbwd, bwd = {}, {}
            for backend in BACKENDS:
                label = "SDPA-" + backend.split("_")[0].lower()

                def fb(backend=backend):
                    with pinned(backend):
                        o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
                    return torch.autograd.grad(o, leaves, do)
                try:
                    fb()
                except RuntimeError as e:
                    print(f"  {label} refused B{B} H{H} S{S} D{D}: {str(e).splitlines()[0]}")
                    continue
                with pinned(backend):
                    o_kept = F.scaled_dot_product_attention(*leaves, is_causal=causal)   # backward follows the op
                fwdbwd[label] = fb
                bwd[label] = (lambda o=o_kept: torch.autograd.grad(o, leaves, do, retain_graph=True))
            for who, (_, _, attn) in step_fns.items():
                def fb(attn=attn):
                    return torch.autograd.grad(attn(*leaves, causal=causal), leaves, do)
                try:
                    fb()
                    o_kept = attn(*leaves, causal=causal)
                except Exception as e:
                    print(f"  {who} failed at B{B} H{H} S{S} D{D}: {e!r}")
                    continue
                fwdbwd[who] = fb
                bwd[who] = (lambda o=o_kept: torch.autograd.grad(o, leaves, do, retain_graph=True))
            f_fwd = bw.forward_flops(B, H, S, D, causal)
            for mode, fns, flops in (("fwd+bwd", fwdbwd, 3.5 * f_fwd), ("bwd", bwd, 2.5 * f_fwd)):
                stats = compare(fns, reps=reps, warmup=3, flush_l2=True, max_seconds=20.0)
                for who, st in stats.items():
                    rec = {"kind": "time", "mode": mode, "step": who, "B": B, "H": H, "S": S, "D": D,
                           "causal": causal, **st.to_dict(), "tflops": bw.tflops(flops, st.median_us)}
                    for ref in ("SDPA-cudnn", "SDPA-flash"):
                        if ref in stats:
                            rec[f"ratio_vs_{ref}"] = st.median_us / stats[ref].median_us
                    record.append(rec)
                    print(f"  {mode:7s} B{B} H{H} S{S:5d} D{D:3d} {'causal' if causal else '      '} {who:12s} "
                          f"{st.median_us:9.1f} µs {rec['tflops']:6.1f} TFLOP/s  spread {st.spread:5.1%}  "
                          f"× cuDNN {rec.get('ratio_vs_SDPA-cudnn', float('nan')):5.2f}  "
                          f"× FLASH {rec.get('ratio_vs_SDPA-flash', float('nan')):5.2f}")
            del leaves, fwdbwd, bwd
            torch.cuda.empty_cache()


def table(record):
    rows = [r for r in record if r["kind"] == "time"]
    if not rows:
        return ""
    lines = ["| mode | B H S D | causal | who | µs | TFLOP/s | / SDPA cuDNN | / SDPA FLASH |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['mode']} | {r['B']} {r['H']} {r['S']} {r['D']} | {'yes' if r['causal'] else 'no'} | "
                     f"{r['step']} | {r['median_us']:.1f} | {r['tflops']:.1f} | "
                     f"{r.get('ratio_vs_SDPA-cudnn', float('nan')):.2f} | "
                     f"{r.get('ratio_vs_SDPA-flash', float('nan')):.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the JSON file to write")
    ap.add_argument("--steps", nargs="+", default=["8a", "8b", "8b-atomic", "8c", "8d"],
                    choices=["8a", "8b", "8b-atomic", "8c", "8d"])
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--shapes", nargs="+", default=None, help="B,H,S,D for the timing (default: the chapter's four)")
    a = ap.parse_args(argv)

    import torch
    if not torch.cuda.is_available():
        print("needs a CUDA GPU (the CPU tier is tests/test_ch08.py)")
        return 2
    env = environment()
    print(" · ".join(f"{k} {v}" for k, v in env.items()))
    result = {"env": env, "records": []}

    def save():
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1, default=str) + "\n")

    step_fns = steps(a.steps)
    if not a.no_check:
        print("correctness (float64 reference; the rule against each SDPA backend):")
        check(fixed_config(step_fns), result["records"])
        save()
    if not a.no_time:
        shapes = [tuple(int(x) for x in s.split(",")) for s in a.shapes] if a.shapes else TIME_SHAPES
        print("timing (CUDA events, L2 flushed before each rep, alternating):")
        time_all(step_fns, shapes, a.reps, result["records"])
        result["8c_configs"] = chosen_configs()
        for key, cfg in result["8c_configs"].items():
            print(f"  8c's autotuner chose {cfg} for {key}")
        save()
        print()
        print(" · ".join(f"{k} {v}" for k, v in env.items()))
        print(table(result["records"]))
    bad = [r for r in result["records"] if r["kind"] == "check" and not r["ok"] and r["step"] != "FA2-precision"]
    print(f"\n{len(bad)} failed checks; wrote {a.out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
