"""The adversarial corpus (tests/adversarial/cases.py): each wrong or cheating submission gets its
verdict. The CPU tier runs every case that needs no GPU; on a GPU one test grades the whole corpus
in one run that must survive all of it."""
import json
import os
import time

import pytest

from adversarial.cases import CASES, CHEAT_CH, CONTROL, HERE, chapter_for, found
from flashtutor import grade

CPU_CASES = [c for c in CASES if not c.gpu]


def _grade(case, tmp_path, device):
    return grade(chapter_for(case), case.path(tmp_path), device=device, progress=False, timing=case.timing,
                 sets=("adversarial",) if device == "cuda" else None, seeds=1, check_timeout=20,
                 time_sets=("seed",) if case.timing else None, sanitize=case.sanitize)


def test_control_passes_with_anticheat_on():
    r = grade(CHEAT_CH, HERE / CONTROL, device="cpu", progress=False)
    assert r.verdict == "pass", r.failures[:3]
    assert r.profile and all(p["ok"] for p in r.profile)
    assert not [f for f in r.static if f["severity"] == "forbidden"]


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.name for c in CPU_CASES])
def test_case_on_cpu(case, tmp_path):
    if case.mutation:              # CUDA sources: without a GPU only the compile error can be judged
        r = grade("01", case.path(tmp_path), progress=False, device="cpu")
    else:
        r = _grade(case, tmp_path, "cpu")
    ok, said = found(r, case)
    assert ok, (case.name, said, r.failures[:3])


@pytest.mark.gpu
def test_whole_corpus_on_gpu(tmp_path):
    """Every case in one pytest process: each verdict as expected, and the grading survives crashes,
    hangs and tampering. Cases without timing run four at a time (each in its own child process);
    timed ones run alone afterwards. Writes a table to $FLASHTUTOR_CORPUS_JSON if set."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case):
        t = time.time()
        if case is None:   # the control, graded like the cheats
            r = grade(CHEAT_CH, HERE / CONTROL, device="cuda", progress=False, sets=("adversarial",), seeds=1)
            return {"case": "control (honest, no library ops)", "expected": "pass", "verdict": r.verdict,
                    "ok": r.verdict == "pass", "said": r.summary, "seconds": round(time.time() - t, 1)}
        r = _grade(case, tmp_path, "cuda")
        ok, said = found(r, case)
        first = next((f for f in r.failures if case.says in f), r.failures[0] if r.failures else r.summary)
        return {"case": case.name, "expected": case.cause, "verdict": r.verdict, "ok": ok, "said": said,
                "message": first[:300], "seconds": round(time.time() - t, 1)}

    t0 = time.time()
    untimed = [c for c in CASES if not c.timing] + [None]
    with ThreadPoolExecutor(max_workers=4) as pool:
        rows = list(pool.map(one, untimed))
    rows += [one(c) for c in CASES if c.timing]
    out = os.environ.get("FLASHTUTOR_CORPUS_JSON")
    if out:
        with open(out, "w") as f:
            json.dump({"total_seconds": round(time.time() - t0, 1), "cases": rows}, f, indent=1)
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
