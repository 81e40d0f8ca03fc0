"""The judge's rules on synthetic evidence (no GPU needed): a time below the roofline floor, a wrong
timed output and library kernels fail; a disturbed timing is "re-run", never a failure, not even a pass;
the speed rule fails a correct but slow kernel; the report renders what it holds."""
import pytest

from flashtutor.chapters import Chapter, SpeedRule
from flashtutor.grading.evidence import Cause, CaseResult, Measurement, TimingResult, Verdict
from flashtutor.grading.report import Report
from flashtutor.grading.rules import decide

CH = Chapter(key="T", slug="t", title="t", kind="torch")


def m(us):
    return Measurement(us, us * 0.98, us * 1.02, 5, host_us=40.0, batch=(8, 32))


def report(timing: dict | None = None, speed=SpeedRule()):
    r = Report(chapter="T", title="t", path="x.py", device="cuda")
    r.checks = [CaseResult("B1 H16 S1024 D64", 1, True, err=1e-4, bound=2e-4)]
    t = TimingResult("B1 H16 S1024 D64", "stream", "cudnn", {"learner": m(20.0), "sdpa": m(17.0)}, ratio=20 / 17,
                     pct_floor={"learner": 25.0}, rechecked=2)
    for k, v in (timing or {}).items():
        setattr(t, k, v)
    r.timings = [t]
    decide(r, Chapter(key="T", slug="t", title="t", kind="torch", speed=speed))
    return r


def test_plain_result_passes_and_renders():
    r = report()
    assert r.verdict == Verdict.PASS and "SDPA's GPU time" in r.summary and r.exit_code == 0
    text = str(r)
    assert "PASS" in text and "GPU time per call" in text and "40, 40" in text     # host cost beside GPU time
    assert "PASS" in r._repr_html_() and '"verdict": "pass"' in r.to_json()


@pytest.mark.parametrize("cause,text", [
    (Cause.BELOW_FLOOR, "faster than the roofline floor"),
    (Cause.TIMED_OUTPUT_WRONG, "the output of a timed call is wrong"),
    (Cause.LIBRARY_KERNEL, "a library's GEMM kernel ran"),
])
def test_timed_evidence_fails(cause, text):
    r = report({"causes": [cause], "messages": [f"B1 H16 S1024 D64: {text}"]})
    assert r.verdict == Verdict.FAIL and r.exit_code == 1
    assert str(cause) in r.causes and any(text in f for f in r.failures)


def test_every_cause_is_kept():
    r = report({"causes": [Cause.TIMED_OUTPUT_WRONG, Cause.BELOW_FLOOR], "messages": ["a", "b"]})
    assert "timed output wrong" in r.summary and "below floor" in r.summary


def test_speed_rule():
    assert report(speed=SpeedRule(max_ratio_vs_sdpa=1.5)).verdict == Verdict.PASS
    slow = report({"ratio": 3.0}, SpeedRule(max_ratio_vs_sdpa=1.5))
    assert slow.verdict == Verdict.FAIL and "too slow" in slow.summary and "3.00× SDPA's time > 1.50×" in slow.failures[0]


def test_disturbed_timing_is_rerun_never_fail_nor_pass():
    why = "1 other process computed on this GPU (pid 540)"
    slow = report({"ratio": 3.0, "disturbed": why}, SpeedRule(max_ratio_vs_sdpa=1.5))
    assert slow.verdict == Verdict.DISTURBED and slow.exit_code == 3 and "re-run" in slow.summary
    fast = report({"disturbed": why}, SpeedRule(max_ratio_vs_sdpa=1.5))
    assert fast.verdict == Verdict.DISTURBED


def test_a_wrong_case_fails_whatever_the_timing():
    r = report({"disturbed": "noise"})
    r.checks.append(CaseResult("B2 H3 S113 D64", 2, False, Cause.TAIL, "rows s ≥ 64 were never written"))
    decide(r, CH)
    assert r.verdict == Verdict.FAIL and "tail" in r.summary


def test_report_shows_course_paths_relative_and_a_one_line_repr():
    from flashtutor.chapters import ROOT
    r = report()
    r.path = str(ROOT / "chapters/02_tiling/attention.py")
    assert r.shown_path == "chapters/02_tiling/attention.py"
    for text in (str(r), r._repr_html_(), repr(r)):
        assert str(ROOT) not in text
    assert "\n" not in repr(r) and len(repr(r)) < 300 and "PASS" in repr(r)
