"""Chapter 8 (the backward pass), CPU tier: tests/ch08_interpreted.py — the solution and the tuned step through
Triton's interpreter against the float64 reference, the autograd Function, the wrong backwards the rule must catch,
the training demo's CPU path — run in a process of its own with TRITON_INTERPRET=1 set before Triton is imported
(a pytest worker that collected chapter 4's tests has imported triton.language without it, and the interpreter then
fails on Triton's own @jit helpers)."""
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_chapter8_through_the_interpreter():
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(HERE.parent))
    r = subprocess.run([sys.executable, "-m", "pytest", str(HERE / "ch08_interpreted.py"), "-q", "-p", "no:cacheprovider",
                        "-p", "no:randomly"], capture_output=True, text=True, env=env, cwd=HERE.parent, timeout=900)
    out = r.stdout + r.stderr
    summary = out.strip().splitlines()[-1] if out.strip() else ""
    assert r.returncode == 0, out[-4000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed and int(passed.group(1)) >= 25 and "failed" not in summary and "error" not in summary, summary
