"""Does the L2 flush itself slow the timed kernel? A write-flush leaves L2 full of dirty lines that
the next kernel must write back; a read-flush leaves clean ones. Graph-replayed times, both ways.

    python scripts/flush_dirty_l2.py OUT.json
"""
import json
import sys

import torch

from flashtutor.env import describe
from flashtutor.problems import Problem
from flashtutor.roofline import measure_peaks
from flashtutor.timing import graph_times, pinned_sdpa


def main(out):
    import importlib
    peaks = measure_peaks()
    kernels = {"SDPA": None, "ch4 teaching": "flashtutor.kernels.k04_triton_fa2",
               "ch6 multihead": "flashtutor.kernels.k06_multihead"}
    rows = []
    for p in (Problem(32, 16, 128, 64), Problem(8, 16, 128, 64), Problem(32, 16, 512, 64), Problem(1, 16, 1024, 64)):
        q, k, v = p.inputs(0, "cuda")
        floor = peaks.floor_us(p)
        for name, modname in kernels.items():
            if modname is None:
                _, f = pinned_sdpa(q, k, v)
            else:
                att = importlib.import_module(modname).attention
                f = (lambda a=att: a(q, k, v))
            row = {"problem": p.name, "kernel": name, "hbm_floor_us": floor["memory_us"]}
            for label, kw in (("write flush", dict(flush_mode="write")), ("read flush", dict(flush_mode="read")),
                              ("no flush", dict(flush_l2=False))):
                row[label] = graph_times(f, **kw).median_us
            rows.append(row)
            print(f"{p.name:<20}{name:<15}" + "".join(f"{lab} {row[lab]:7.2f} µs   " for lab in
                  ("write flush", "read flush", "no flush")) + f"HBM floor {floor['memory_us']:.2f} µs", flush=True)
    json.dump({"env": describe(), "peaks": peaks.__dict__, "rows": rows}, open(out, "w"), indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
