"""The adversarial corpus (tests/adversarial/cases.py): each wrong or cheating submission gets its
verdict, each control passes. The CPU tier runs every case that needs no GPU; on a GPU one test grades the
whole corpus in one run that must survive all of it."""
import json
import os

import pytest

from adversarial.cases import CASES, found
from flashtutor import grade
from gpu_gradings import corpus_kwargs

CPU_CASES = [c for c in CASES if not c.gpu]


def _grade(case, tmp_path, device):
    kw = corpus_kwargs(case, tmp_path, device)
    return grade(kw.pop("chapter"), kw.pop("path"), **kw)


def test_every_attack_class_has_a_case_and_there_is_a_control():
    assert {c.attack for c in CASES} >= set(range(1, 11))
    assert sum(c.control for c in CASES) >= 2


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.name for c in CPU_CASES])
def test_case_on_cpu(case, tmp_path):
    r = _grade(case, tmp_path, "cpu")
    ok, said = found(r, case)
    assert ok, (case.name, said, r.failures[:3])


@pytest.mark.gpu
def test_whole_corpus_on_gpu(gradings):
    """Every case graded (by the GPU tier's shared pool, tests/gpu_gradings.py): each verdict as expected,
    and the grading survives crashes, hangs and cheats. Writes a table to $FLASHTUTOR_CORPUS_JSON if set."""
    rows = []
    for case in CASES:
        try:
            r = gradings.report("case", case.name)
            ok, said = found(r, case)
            first = next((f for f in r.failures if case.says and any(s in f for s in case.says.split("|"))),
                         r.failures[0] if r.failures else r.summary)
            verdict = str(r.verdict)
        except Exception as e:  # noqa: BLE001 — the grading itself failed: a row that says so
            ok, said, first, verdict = False, f"grading raised {type(e).__name__}", str(e), "error"
        rows.append({"case": case.name, "attack": case.attack, "expected": case.cause or "pass", "verdict": verdict,
                     "ok": ok, "said": said, "message": first[:300], "seconds": gradings.seconds("case", case.name)})
    out = os.environ.get("FLASHTUTOR_CORPUS_JSON")
    if out:
        with open(out, "w") as f:
            json.dump({"cases": rows}, f, indent=1)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
