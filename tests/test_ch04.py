"""Chapter 4 (Triton): the CPU tier runs every kernel through Triton's interpreter on CPU tensors;
the GPU tier grades them for real, with timings."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashtutor import grade
from flashtutor.chapters import get_chapter
from adversarial.ch04_mutations import MUTATIONS, materialize
from conftest import untouched_exercise

ROOT = Path(__file__).resolve().parent.parent
CH = get_chapter("04")


def causes(report):
    return {str(c.cause) for c in report.checks if not c.ok}


# ---------------------------------------------------------------- CPU tier (the interpreter) ----
def test_solution_passes_through_the_interpreter():
    r = grade("04", solution=True, device="cpu", progress=False)
    assert r.verdict == "pass", r.failures[:3]
    assert len(r.checks) >= 3 * 2 + 2
    assert all(c.err <= c.bound for c in r.checks)


def test_stub_fails():
    untouched_exercise("04")
    r = grade("04", device="cpu", progress=False)
    assert r.verdict == "fail"
    # The stub raises at the TODO or leaves the output unwritten: either way, "unwritten".
    assert causes(r) == {"unwritten"}, causes(r)
    text = " ".join(r.failures)
    assert "TODO" in text or "wrote nothing" in text


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_wrong_kernel_fails_with_its_cause(name, tmp_path):
    want, _, what = MUTATIONS[name]
    r = grade("04", materialize(name, tmp_path / name), device="cpu", progress=False)
    assert r.verdict == "fail", f"{name} ({what}) passed"
    assert causes(r) & want, (name, causes(r), r.failures[:2])


def test_wrong_kernels_fail_only_where_their_bug_shows(tmp_path):
    """The tutorial's row offset b + h·S is right for B = 1: only B > 1 shapes fail."""
    r = grade("04", materialize("tutorial_row_offset", tmp_path / "t"), device="cpu", progress=False)
    bad = {c.problem for c in r.checks if not c.ok}
    good = {c.problem for c in r.checks if c.ok}
    assert bad and all(p.startswith("B2") for p in bad)
    assert any(p.startswith("B1") for p in good)
    r = grade("04", materialize("no_key_mask", tmp_path / "m"), device="cpu", progress=False)
    bad = {c.problem for c in r.checks if not c.ok}
    assert bad and not any("causal" in p for p in bad)      # causal masks those keys anyway


_TUNED_ON_CPU = """
import sys, torch
from flashtutor.check import check_output
from flashtutor.problems import SHAPE_SETS
from flashtutor.kernels import k04_triton_fa2_hopper as hop
bad = []
for p0 in SHAPE_SETS["cpu"]:
    for causal in (False, True):
        p = p0.replace(causal=causal)
        q, k, v = p.inputs(5)
        for bm, bn in ((16, 16), (32, 16), (16, 32)):
            r = check_output(p, q, k, v, hop.launch(q, k, v, causal=causal, BLOCK_M=bm, BLOCK_N=bn))
            if not r.ok:
                bad.append(f"{p.name} {bm}x{bn}: {r.message}")
print("\\n".join(bad) or "ok")
sys.exit(1 if bad else 0)
"""


def test_tuned_kernel_through_the_interpreter():
    """The Hopper kernel (TMA descriptors, split loop) on the CPU shapes with several tile shapes."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _TUNED_ON_CPU], capture_output=True, text=True, env=env,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_speed_rule_is_calibrated():
    rule = CH.speed
    assert rule.max_ratio_vs_sdpa and rule.max_ratio_vs_sdpa > 1
    assert "PROVISIONAL" not in rule.calibration and rule.calibration


# ---------------------------------------------------------------- GPU tier ----------------------



