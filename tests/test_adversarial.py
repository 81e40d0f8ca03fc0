"""The adversarial corpus (tests/adversarial/cases.py): each wrong or cheating submission gets its
verdict, each control passes. The CPU tier runs every case that needs no GPU; on a GPU one test grades the
whole corpus in one run that must survive all of it."""
import json
import os
import time

import pytest

from adversarial.cases import CASES, chapter_for, found
from flashtutor import grade

CPU_CASES = [c for c in CASES if not c.gpu]


def _grade(case, tmp_path, device, **kw):
    gpu = device == "cuda"
    return grade(chapter_for(case), case.path(tmp_path), device=device, progress=False, timing=case.timing,
                 sets=("adversarial",) if gpu else None, seeds=1, check_timeout=20,
                 time_sets=("adversarial",) if case.timing else None, sanitize=case.sanitize, rounds=3, **kw)


def test_every_attack_class_has_a_case_and_there_is_a_control():
    assert {c.attack for c in CASES} >= set(range(1, 9))
    assert sum(c.control for c in CASES) >= 2


@pytest.mark.parametrize("case", CPU_CASES, ids=[c.name for c in CPU_CASES])
def test_case_on_cpu(case, tmp_path):
    r = _grade(case, tmp_path, "cpu")
    ok, said = found(r, case)
    assert ok, (case.name, said, r.failures[:3])


@pytest.mark.gpu
def test_whole_corpus_on_gpu(tmp_path):
    """Every case in one pytest process: each verdict as expected, and the grading survives crashes,
    hangs and cheats. Untimed cases run six at a time, each in a judge process of its own (judges in threads
    of one process hung on the H100, 2026-11-23: not yet understood); timed ones after them (a timed shape has
    the GPU to itself). Writes a table to $FLASHTUTOR_CORPUS_JSON if set, a row as each case ends."""
    import faulthandler
    from concurrent.futures import ThreadPoolExecutor
    faulthandler.dump_traceback_later(420, repeat=True)          # if anything hangs, say where
    os.environ.setdefault("FLASHTUTOR_DEBUG_DUMP_S", "300")

    def one(case):
        t = time.time()
        r = _grade(case, tmp_path, "cuda", separate_judge=True)
        ok, said = found(r, case)
        first = next((f for f in r.failures if case.says and case.says in f), r.failures[0] if r.failures else r.summary)
        return {"case": case.name, "attack": case.attack, "expected": case.cause or "pass", "verdict": str(r.verdict),
                "ok": ok, "said": said, "message": first[:300], "seconds": round(time.time() - t, 1)}

    t0 = time.time()
    out = os.environ.get("FLASHTUTOR_CORPUS_JSON")
    rows = []

    def keep(row):                  # written as each case ends, so a cut-short run still tells
        rows.append(row)
        if out:
            with open(out, "w") as f:
                json.dump({"total_seconds": round(time.time() - t0, 1), "cases": rows}, f, indent=1)
        return row

    with ThreadPoolExecutor(max_workers=6) as pool:
        list(pool.map(lambda c: keep(one(c)), [c for c in CASES if not c.timing]))
    for c in CASES:
        if c.timing:
            keep(one(c))
    faulthandler.cancel_dump_traceback_later()
    bad = [r for r in rows if not r["ok"]]
    assert not bad, bad
