"""`pytest chapters/NN_slug` grades the learner's files, one test per criterion (flashtutor/grading/pytest_grading.py).

The end-to-end tests run pytest in a subprocess from the course's folder, on chapter 4 (the Triton interpreter on
a CPU): the generator's stub fails its correctness items with the grader's message, the solution passes them, the
JUnit XML has one testcase per criterion. The split of a report into items is checked against the verdict of
flashtutor.grading.rules on made-up reports. The course's own tests compare an exercise with its solution only while
the learner has not changed it, except under CI=true (a copy of the course's files, never the real ones).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from flashtutor import exercises
from flashtutor.chapters import CHAPTERS
from flashtutor.grading import pytest_grading as pg
from flashtutor.grading.evidence import CaseResult, Cause, Measurement, TimingResult, Verdict
from flashtutor.grading.report import Report
from flashtutor.grading.rules import decide

ROOT = Path(__file__).resolve().parent.parent
CH04 = CHAPTERS["04"]
CH04_DIR = f"chapters/{CH04.slug}"
ITEMS_CPU = {"correctness-cpu", "correctness-large_logits", "source", "speed"}


def pytest_run(*args, env=None, timeout=300) -> subprocess.CompletedProcess:
    """`python -m pytest ARGS` from the course's folder, as a learner runs it."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("PYTEST_") and k not in ("FLASHTUTOR_SUBMISSION", "FLASHTUTOR_SANITIZE", "FLASHTUTOR_ROOT")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env={**base, **(env or {})}, capture_output=True, text=True, timeout=timeout)


def junit(path: Path) -> dict[str, tuple[str, str]]:
    """{criterion id: (passed | failed | skipped, message)} from a JUnit XML file."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name")
        criterion = name[name.index("[") + 1:-1]
        assert criterion not in out, f"two testcases for {criterion}"
        status, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                status, msg = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag], \
                    (el.text or "") + "\n" + el.get("message", "")
        out[criterion] = status, msg
    return out


# ---------------------------------------------------------------- end to end, chapter 4 on the CPU -------
@pytest.mark.skipif(pg.device() != "cpu", reason="the CPU run of chapter 4 (on a GPU, the GPU tier grades it)")
def test_the_stub_fails_its_correctness_items_with_the_graders_message(tmp_path):
    """The file beside the tests, graded by default, while it is the generator's stub; once the learner has
    changed it, a copy of the stub, named by FLASHTUTOR_SUBMISSION."""
    stub_text = exercises.generated(CH04)[CH04.exercise_path()]
    if CH04.exercise_path().read_text() == stub_text:
        graded, env = f"{CH04_DIR}/attention.py", {}
    else:
        stub = tmp_path / "attention.py"
        stub.write_text(stub_text)
        graded, env = str(stub), {"FLASHTUTOR_SUBMISSION": str(stub)}
    xml = tmp_path / "report.xml"
    r = pytest_run(CH04_DIR, f"--junitxml={xml}", env=env)
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert f"chapter 04 · {graded}: FAIL" in r.stdout, out
    items = junit(xml)
    assert set(items) == ITEMS_CPU, out
    for item in ("correctness-cpu", "correctness-large_logits"):
        status, msg = items[item]
        assert status == "failed" and "unwritten" in msg and "every output element is NaN" in msg, (item, msg)
        assert "Traceback" not in msg and "pytest_grading.py" not in msg
    assert items["source"][0] == "passed"
    assert items["speed"][0] == "skipped" and "speed: no CUDA GPU here" in items["speed"][1]
    assert "every output element is NaN" in r.stdout                  # the terminal shows the grader's words too


@pytest.mark.skipif(pg.device() != "cpu", reason="the CPU run of chapter 4 (on a GPU, the GPU tier grades it)")
def test_the_solution_passes_every_correctness_item():
    r = pytest_run(CH04_DIR, "-v", "--submission", f"solutions/{CH04.slug}/attention.py")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for item in ("correctness-cpu", "correctness-large_logits", "source"):
        assert f"test_criterion[{item}] PASSED" in r.stdout, out
    assert "test_criterion[speed] SKIPPED" in r.stdout
    assert f"solutions/{CH04.slug}/attention.py: PASS" in r.stdout


def test_one_submission_for_several_chapters_is_a_usage_error():
    r = pytest_run(CH04_DIR, "chapters/06_batching", env={"FLASHTUTOR_SUBMISSION": "solutions/06_batching/attention.py"})
    assert r.returncode == 4 and "grade one chapter at a time" in r.stdout + r.stderr, r.stdout + r.stderr


def test_the_courses_own_pytest_never_collects_the_chapters():
    r = pytest_run("--collect-only", "-q")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    assert ids and not [i for i in ids if i.startswith("chapters/")], ids[:5]
    assert any(i.startswith("tests/test_pytest_grading.py::") for i in ids)


# ---------------------------------------------------------------- the items agree with the verdict -------
def _case(problem: str, ok=True, cause=None, message="") -> CaseResult:
    return CaseResult(problem, 1234, ok, cause, message)


def _timed(problem: str, ratio: float, **kw) -> TimingResult:
    m = Measurement(10.0, 9.0, 11.0, 5)
    return TimingResult(problem, "stream", times={"learner": m, "sdpa": m}, ratio=ratio, **kw)


def _report(ch, device="cuda", checks=(), timings=(), **kw) -> Report:
    r = Report(chapter=ch.key, title=ch.title, path=str(ch.exercise_path()), device=device, sass_rule=ch.sass,
               execution="gpu" if device == "cuda" else "interpreted")
    r.checks, r.timings = list(checks), list(timings)
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def _all_cases(ch, device, bad=None):
    """One passing case per planned problem; the problem named ``bad`` fails as unwritten."""
    return [_case(name, ok=name != bad, cause=None if name != bad else Cause.UNWRITTEN,
                  message="" if name != bad else "every output element is NaN")
            for name in pg.shape_sets(ch, device)]


def _scenarios():
    ch3, ch4 = CHAPTERS["03"], CHAPTERS["04"]
    odd = "B2 H3 S113 D64 causal"
    hmma = {"attention.cu": {"k": {"opcodes": {"HMMA": 4}, "registers": 40}}}
    return {
        "pass": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), timings=[_timed("B1 H16 S1024 D64", 1.1)])),
        "wrong odd case": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda", bad=odd))),
        "too slow": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), timings=[_timed("B1 H16 S1024 D64", 3.0)])),
        "timed output wrong": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), timings=[
            _timed("B1 H16 S1024 D64", 1.0, causes=[Cause.TIMED_OUTPUT_WRONG], messages=["a timed call was wrong"])])),
        "disturbed": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), timings=[
            _timed("B1 H16 S1024 D64", 1.0, disturbed="another process computed")])),
        "forbidden": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), static=[
            {"file": "attention.py", "line": 3, "severity": "forbidden", "what": "calls torch.matmul"}])),
        "compile error": (ch3, _report(ch3, error_cause=Cause.COMPILE_ERROR,
                                       error="attention.cu does not compile:\nattention.cu:9: error: expected a ';'")),
        "unwritten at import": (ch4, _report(ch4, error_cause=Cause.UNWRITTEN, error="attention.py: TODO")),
        "compiled only, no HMMA": (ch3, _report(ch3, device="cpu", compile_only=True, arch="sm_90a",
                                                 resources={"attention.cu": {"k": {"opcodes": {"FFMA": 9}}}})),
        "compiled only, HMMA": (ch3, _report(ch3, device="cpu", compile_only=True, arch="sm_90a", resources=hmma)),
        "interpreted, correct": (ch4, _report(ch4, device="cpu", checks=_all_cases(ch4, "cpu"))),
        # the GPU's memory taken by other processes: "not graded here", every item skipped or passed, none failed
        "grader out of memory, a case": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda")[:-1] + [
            _case(list(pg.shape_sets(ch4, "cuda"))[-1], ok=False, cause=Cause.GRADER_MEMORY,
                  message="not graded here: the grader ran out of GPU memory checking it")])),
        "grader out of memory, timing": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), timings=[
            _timed("B1 H16 S1024 D64", 1.0, causes=[Cause.GRADER_MEMORY],
                   messages=["not graded here: the grader ran out of GPU memory timing B1 H16 S1024 D64"])])),
        "grader out of memory, setup": (ch4, _report(ch4, error_cause=Cause.GRADER_MEMORY,
                                                     error="not graded here: the grader ran out of GPU memory")),
        "a case of no set": (ch4, _report(ch4, device="cpu", checks=_all_cases(ch4, "cpu") + [
            _case("B7 H7 S7 D64", ok=False, cause=Cause.TAIL, message="the last rows are wrong")])),
        "sanitizer findings": (ch4, _report(ch4, checks=_all_cases(ch4, "cuda"), sanitizer={
            "verdict": "findings", "summary": "compute-sanitizer found 1 memcheck finding",
            "tools": {"memcheck": {"ran": True, "findings": [
                {"kind": "Invalid __global__ read", "kernel": "k", "location": "", "detail": "x"}], "error": None}}})),
    }


@pytest.mark.parametrize("name", list(_scenarios()))
def test_items_agree_with_the_verdict(name):
    """A report the grader passes passes every item; one it fails fails at least one; a disturbed timing is
    a skipped speed item ("re-run"), never a failure; nothing that cannot be judged here fails."""
    from flashtutor.grading.rules import fold_sanitizer
    ch, r = _scenarios()[name]
    decide(r, ch)
    if r.sanitizer:
        fold_sanitizer(r, r.sanitizer)
    device = r.device
    sets = pg.shape_sets(ch, device)
    crits = pg.criteria(ch, device, sanitize=bool(r.sanitizer), sets=sets)
    got = pg.outcomes(r, ch, crits, sets)
    assert set(got) == set(crits)
    status = {c.id: s for c, (s, _) in got.items()}
    failed = [c for c, s in status.items() if s == pg.FAILED]
    if r.verdict == Verdict.FAIL:
        assert failed, (name, r.failures, got)
    else:
        assert not failed, (name, r.verdict, got)
    expect = {"wrong odd case": {"correctness-odd"}, "too slow": {"speed"}, "timed output wrong": {"speed"},
              "forbidden": {"source"}, "compiled only, no HMMA": {"sass"}, "a case of no set": {"correctness-cpu"},
              "sanitizer findings": {"sanitizer"},
              "compile error": {c.id for c in crits if c.what == "correctness"},
              "unwritten at import": {c.id for c in crits if c.what == "correctness"}}.get(name, set())
    assert set(failed) == expect, (name, got)
    msgs = {c.id: m for c, (_, m) in got.items()}
    if name == "wrong odd case":
        assert "B2 H3 S113 D64 causal" in msgs["correctness-odd"] and "every output element is NaN" in msgs["correctness-odd"]
    if name == "too slow":
        assert "3.00× SDPA's time > 2.20×" in msgs["speed"]
    if name == "disturbed":
        assert r.verdict == Verdict.DISTURBED and status["speed"] == pg.SKIPPED and "re-run" in msgs["speed"]
    if name in ("compile error", "unwritten at import"):
        heads = {msgs[c].splitlines()[0] for c in expect}
        assert heads == {pg.setup_reason(r)} and len(pg.setup_reason(r).splitlines()) == 1
    if name == "compile error":
        assert "attention.cu:9: error: expected a ';'" in msgs["correctness-seed"]       # the first item: all of it
        assert status["sass"] == pg.SKIPPED
    if name.startswith("compiled only"):
        assert all(status[c.id] == pg.SKIPPED for c in crits if c.what in ("correctness", "speed"))
        assert "no CUDA GPU here — grade on a GPU for speed" in msgs["speed"]
    if name == "interpreted, correct":
        assert status["speed"] == pg.SKIPPED and status["correctness-cpu"] == pg.PASSED


def test_every_planned_case_belongs_to_one_item():
    for ch in CHAPTERS.values():
        for device in ("cpu", "cuda"):
            sets = pg.shape_sets(ch, device)
            ids = {c.id for c in pg.criteria(ch, device, sets=sets)}
            assert {f"correctness-{s}" for s in sets.values()} <= ids
            assert ("sass" in ids) == (ch.sass is not None) and "speed" in ids and "source" in ids
            if device == "cuda":
                assert {s for s in sets.values() if s != pg.LARGE_LOGITS} == set(ch.check_sets), ch.key


# ---------------------------------------------------------------- the course's tests leave the learner's work alone
def test_an_edited_exercise_is_compared_only_under_ci(tmp_path):
    """A copy of the course's solutions, its exercises generated there; one exercise edited in the copy."""
    for ch in CHAPTERS.values():
        shutil.copytree(ch.solution_dir, tmp_path / "solutions" / ch.slug)
    env = {"FLASHTUTOR_ROOT": str(tmp_path)}
    base = {k: v for k, v in os.environ.items() if k != "CI"}
    gen = subprocess.run([sys.executable, "-m", "flashtutor", "exercises", "--write"], cwd=ROOT,
                         env={**base, **env}, capture_output=True, text=True, timeout=120)
    assert gen.returncode == 0, gen.stdout + gen.stderr
    edited = tmp_path / "chapters" / "01_naive_cuda" / "attention.py"
    real = CHAPTERS["01"].exercise_path().read_bytes()
    edited.write_text(edited.read_text() + "\n# my work in progress\n")
    test = ["tests/test_exercises.py", "-k", "match_their_solutions", "-rs"]

    r = pytest_run(*test, env=env | {"CI": "false"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "chapters/01_naive_cuda/attention.py was changed since it was generated (your work): not compared" \
        in r.stdout, r.stdout
    assert f"{len(CHAPTERS) - 1} passed, 1 skipped" in r.stdout

    r = pytest_run(*test, env=env | {"CI": "true"})
    assert r.returncode == 1 and "out of date: chapters/01_naive_cuda/attention.py" in r.stdout, r.stdout
    assert CHAPTERS["01"].exercise_path().read_bytes() == real              # the real exercise untouched
