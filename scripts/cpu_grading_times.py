"""Time `flashtutor grade NN --solution --sets cpu --device cpu` for every chapter on this machine, one after another,
and write what each took (wall clock of the command, the report's own seconds, its verdict and execution) with the
machine's CPU, core count and load, to a results file that the chapters' contracts read.

    python scripts/cpu_grading_times.py results/cpu-grading-<machine>-<date>.json [CHAPTER ...]
    HOME=$(mktemp -d) FT_CACHES=empty python scripts/cpu_grading_times.py the-same-file.json
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(out: str, chapters: list[str]) -> None:
    from flashtutor.chapters import CHAPTERS
    import torch
    rows = []
    for key in chapters or list(CHAPTERS):
        with tempfile.TemporaryDirectory() as td:
            rep = Path(td) / "r.json"
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "flashtutor", "grade", key, "--solution", "--sets", "cpu",
                                "--device", "cpu", "--quiet", "--json", str(rep)], cwd=ROOT, capture_output=True,
                               text=True)
            wall = time.perf_counter() - t0
            r = json.loads(rep.read_text()) if rep.is_file() else {}
        rows.append({"chapter": key, "wall_s": round(wall, 1), "report_s": r.get("seconds"), "exit": p.returncode,
                     "verdict": r.get("verdict"), "execution": r.get("execution"), "headline": r.get("headline"),
                     "load_before": round(load, 2)})
        print(f"{key}: {wall:6.1f} s wall, exit {p.returncode}, {r.get('verdict')} ({r.get('execution')})", flush=True)
    run = {"caches": os.environ.get("FT_CACHES", "warm"), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "gradings": rows}
    path = Path(out)
    doc = json.loads(path.read_text()) if path.is_file() else {
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version(),
                    "torch": torch.__version__},
        "command": "flashtutor grade NN --solution --sets cpu --device cpu", "runs": []}
    doc["runs"].append(run)                   # a run per call: e.g. warm, then FT_CACHES="empty" with a new HOME
    path.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
