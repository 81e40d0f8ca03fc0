"""Where step 8d's backward spends its time, and A/B of its kernel's variants, in one process (meant for an H100):

    PYTHONPATH=$PWD python scripts/ch08d_parts.py out.json [--shape 4 32 4096 128] [--causal] [--variant FT_DEFER_DQ=1]

1. Parts, each timed alone with CUDA events, the L2 flushed before every rep, all alternating
   (flashtutor.timing.compare): the whole backward (``k08d.backward``), the warp-specialized kernel alone (launched
   with ready-made arguments), delta's preprocessing, zeroing the dQ buffer and the dQ conversion; SDPA's cuDNN
   backward (torch.autograd.grad on a kept graph) beside them as the yardstick. The host time of one
   ``k08d.backward`` call (perf_counter around the call, the GPU left busy behind it) says whether the host, rather
   than the GPU, sets the pace.
2. Variants: the whole backward built with other values of the kernel's FT_* macros, alternating with the default
   build and SDPA's cuDNN backward.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", nargs=4, type=int, default=[4, 32, 4096, 128])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--variant", action="append", default=[], help="NAME=VALUE[,NAME=VALUE]: one build to compare")
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()

    import torch
    import triton
    from flashtutor import timing
    from flashtutor.kernels import k08d_backward_ws as d
    from flashtutor.kernels.k08b_backward_tuned import preprocess
    from flashtutor.loaders import tma

    B, H, S, D = args.shape
    causal = args.causal
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(B, H, S, D, device="cuda", generator=g).half() for _ in range(4))
    o, lse = d.forward(q, k, v, causal=causal)
    flops = 2.5 * 4 * B * H * S * S * D / (2 if causal else 1)

    # SDPA's cuDNN backward on a kept graph
    from torch.nn.attention import SDPBackend, sdpa_kernel
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=causal)

    def sdpa_bwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            torch.autograd.grad(out, (qs, ks, vs), do, retain_graph=True)

    # the parts, with ready-made arguments
    delta = preprocess(o, do)
    acc = d.dq_buffer(B, H, S, D, q.device)
    dk, dv = torch.empty_like(q), torch.empty_like(q)
    rows = B * H * S
    tq, tdo = (tma.tensor_map(t.view(rows, D), box_rows=d.Br, box_cols=d.BOX) for t in (q, do))
    tk, tv = (tma.tensor_map(t.view(rows, D), box_rows=d.Bc, box_cols=d.BOX) for t in (k, v))
    kern = d._module().kernel(d.KERNELS[D])

    def kernel_alone():
        tma.launch(kern, grid=(triton.cdiv(S, d.Bc), B * H), block=(d.THREADS,), shared_mem=d.shared_bytes(D),
                   args=(tq, tk, tv, tdo, lse, delta, acc, dk, dv, S, D ** -0.5, int(causal)))

    parts = {
        "SDPA-cudnn bwd": sdpa_bwd,
        "8d backward()": lambda: d.backward(q, k, v, o, lse, do, causal=causal),
        "kernel alone": kernel_alone,
        "delta (preprocess)": lambda: preprocess(o, do),
        "zero dQ buffer": lambda: d.dq_buffer(B, H, S, D, q.device),
        "dQ convert": lambda: d.dq_from_buffer(acc, B, H, S, D, q.dtype),
    }
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cudnn": torch.backends.cudnn.version(), "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(f"{env['gpu']} · torch {env['torch']} · triton {env['triton']} · cuDNN {env['cudnn']} · {env['date']}")
    print(f"B{B} H{H} S{S} D{D} {'causal' if causal else 'not causal'}; events, L2 flushed, alternating, "
          f"median of {args.reps}")
    res = {"env": env, "shape": [B, H, S, D], "causal": causal, "parts": {}, "variants": {}}
    stats = timing.compare(parts, reps=args.reps)
    ref = stats["SDPA-cudnn bwd"].median_us
    for name, st in stats.items():
        res["parts"][name] = st.to_dict()
        print(f"  {name:<20} {st.median_us:10.1f} µs  (p10–p90 {st.p10_us:.1f}–{st.p90_us:.1f})  ÷ cuDNN {st.median_us / ref:.3f}"
              + (f"  {flops / st.median_us / 1e6:.0f} TFLOP/s" if name in ("8d backward()", "kernel alone",
                                                                       "SDPA-cudnn bwd") else ""))

    # host time of one backward() call, the GPU kept busy behind it (no sync inside the timed region)
    host = []
    for _ in range(30):
        torch.cuda.synchronize()
        kernel_alone(); kernel_alone()                      # work queued ahead, so the call below never waits
        t0 = time.perf_counter()
        d.backward(q, k, v, o, lse, do, causal=causal)
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    res["host_us_per_backward_call"] = {"median": statistics.median(host), "min": min(host), "max": max(host)}
    print(f"  host time of one backward() call: median {statistics.median(host):.0f} µs (min {min(host):.0f}, "
          f"max {max(host):.0f})")

    if args.variant:
        fns = {"SDPA-cudnn bwd": sdpa_bwd, "default": lambda: d.backward(q, k, v, o, lse, do, causal=causal)}
        want = d.backward(q, k, v, o, lse, do, causal=causal)
        for spec in args.variant:
            defines = dict(kv.split("=") for kv in spec.split(","))
            m = d.variant(**{key: int(val) for key, val in defines.items()})
            got = d.backward(q, k, v, o, lse, do, causal=causal, module=m)
            err = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want))
            fns[spec] = (lambda m=m: d.backward(q, k, v, o, lse, do, causal=causal, module=m))
            res["variants"][spec] = {"max_abs_diff_vs_default": err}
            print(f"  variant {spec}: largest difference from the default build's gradients {err:.3g}")
        stats = timing.compare(fns, reps=args.reps)
        ref = stats["SDPA-cudnn bwd"].median_us
        for name, st in stats.items():
            res["variants"].setdefault(name, {}).update(st.to_dict())
            print(f"  {name:<28} {st.median_us:10.1f} µs  (p10–p90 {st.p10_us:.1f}–{st.p90_us:.1f})  ÷ cuDNN "
                  f"{st.median_us / ref:.3f}")
    args.out.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
