"""Step 7c beside SDPA's cuDNN forward, from ``scripts/ncu07.py``'s summary files: per shape, each kernel's time,
its tensor-pipe cycles (active % × time × SM clock: the cycles the tensor cores needed for the same FLOPs), the
wgmma instructions it issued, the uniform pipe's share and the "wait" stall (fixed-latency dependencies).

    python scripts/ncu07_compare.py results/ncu07-h100-2026-11-28/*-summary.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
GMMA = "sm__inst_executed_pipe_tensor_op_gmma.sum"


def row(k: dict) -> dict:
    stalls = dict(k["top_stalls_per_issue"])
    return {"time_us": k["time_us"], "clock_mhz": k["sm_clock_mhz"],
            "tensor_mcycles": k["tensor"][TENSOR] / 100 * k["time_us"] * k["sm_clock_mhz"] / 1e6,
            "gmma": k["tensor"][GMMA], "uniform_pct": k["pipes_pct_of_active"]["uniform"],
            "wait": stalls.get("wait", 0.0), "barrier": stalls.get("barrier", 0.0)}


def main(paths: list[str]) -> None:
    print("shape | 7c ÷ cuDNN time | tensor cycles 7c ÷ cuDNN | wgmma instr. 7c ÷ cuDNN | uniform pipe % 7c / cuDNN"
          " | wait stall 7c / cuDNN | barrier stall 7c / cuDNN | SM clock MHz 7c / cuDNN")
    for path in paths:
        doc = json.loads(Path(path).read_text())
        by = {k["target"]: row(k) for k in doc["kernels"]}
        a, b = by["7c"], by["SDPA"]
        B, H, S, D = doc["shape"]
        name = f"B{B} H{H} S{S} D{D}" + (" causal" if doc["causal"] else "")
        print(f"{name} | {a['time_us'] / b['time_us']:.3f} | {a['tensor_mcycles'] / b['tensor_mcycles']:.3f} | "
              f"{a['gmma'] / b['gmma']:.3f} | {a['uniform_pct']:.1f} / {b['uniform_pct']:.1f} | "
              f"{a['wait']:.2f} / {b['wait']:.2f} | {a['barrier']:.2f} / {b['barrier']:.2f} | "
              f"{a['clock_mhz']:.0f} / {b['clock_mhz']:.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
