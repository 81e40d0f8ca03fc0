"""Step 7c and SDPA at one shape, timed two ways, with the SM clock read on the GPU beside each call: each call alone
after the GPU has idled (``--idle`` seconds before it: what one profiled call under Nsight Compute sees), and back
to back (what the course's bench and the event-timed loop see). Issue 28 asked for 700 TFLOP/s at B2 H32 S16384
D128; Nsight Compute read 712 for one call while both timed protocols read 610-650. GPU only:

    PYTHONPATH=$PWD python scripts/sustained_clocks.py out.json [--shape 2 32 16384 128] [--causal]

Per build and way: the median time per call (CUDA events around each call, the L2 flushed before it) and TFLOP/s,
and the SM clock right after each call: ``torch.cuda._sleep`` spins a known number of cycles, and cycles over the
spin's event-timed duration is the clock it ran at (``nvidia-smi``'s samples, tried first, were too sparse to
catch calls of a few milliseconds).
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

SPIN_CYCLES = 200_000           # ~0.1 ms at the H100's clocks: short enough not to let the clock recover


def clock_probe(torch) -> tuple:
    """Events around a spin of SPIN_CYCLES cycles, queued now; read with ``mhz`` after a synchronize."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    torch.cuda._sleep(SPIN_CYCLES)
    e1.record()
    return e0, e1


def mhz(probe) -> float:
    return SPIN_CYCLES / (probe[0].elapsed_time(probe[1]) * 1e3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--shape", nargs=4, type=int, default=[2, 32, 16384, 128])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--idle", type=float, default=3.0, help="seconds the GPU idles before each isolated call")
    ap.add_argument("--isolated", type=int, default=8, help="isolated calls per build")
    ap.add_argument("--sustained", type=int, default=40, help="back-to-back calls per build (the first 10 not counted)")
    a = ap.parse_args()

    import torch
    from flashtutor import timing
    from flashtutor.kernels import k07c_pingpong as k07c

    B, H, S, D = a.shape
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g).half() for _ in range(3))
    backend, sdpa = timing.pinned_sdpa(q, k, v, causal=a.causal)
    fns = {f"SDPA ({backend})": sdpa, "7c": lambda: k07c.attention(q, k, v, causal=a.causal)}
    flush = timing.L2Flusher()
    for fn in fns.values():                                    # compile, encode, warm up
        fn()
    torch.cuda.synchronize()
    flops = 4 * B * H * S * S * D / (2 if a.causal else 1)

    def timed(fn) -> tuple:
        flush()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        return e0, e1

    results = {}
    clock_probe(torch)                                         # (the spin kernel's first launch)
    torch.cuda.synchronize()
    print(f"{torch.cuda.get_device_name()} · torch {torch.__version__} · B{B} H{H} S{S} D{D}"
          + (" causal" if a.causal else "") + f" · {time.strftime('%Y-%m-%dT%H:%M:%S')}")
    for name, fn in fns.items():
        for way in ("isolated", "sustained"):
            calls = []
            if way == "isolated":
                for _ in range(a.isolated):
                    time.sleep(a.idle)
                    before = clock_probe(torch)
                    calls.append((before, timed(fn), clock_probe(torch)))
                    torch.cuda.synchronize()
            else:
                calls = [(None, timed(fn), clock_probe(torch)) for _ in range(a.sustained)][10:]
                torch.cuda.synchronize()
            times = [e0.elapsed_time(e1) * 1e3 for _, (e0, e1), _ in calls]
            after = [mhz(p) for _, _, p in calls]
            before = [mhz(p) for p, _, _ in calls if p is not None]
            med = statistics.median(times)
            r = results[f"{name} {way}"] = {"median_us": med, "times_us": times, "tflops": flops / med / 1e6,
                                            "sm_mhz_after": after, "sm_mhz_before": before}
            print(f"  {name + ' ' + way:<28} {med:10.1f} µs  {r['tflops']:6.0f} TFLOP/s   SM clock right after "
                  f"{statistics.median(after):5.0f} MHz" + (f", before {statistics.median(before):5.0f}" if before else ""))
    a.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                 "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "shape": a.shape, "causal": a.causal,
                                 "idle_s": a.idle, "spin_cycles": SPIN_CYCLES, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
