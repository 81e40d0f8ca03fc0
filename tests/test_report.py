"""The verdict rules of the timed phase, on synthetic results (no GPU needed): a time below the
roofline floor fails, work escaping the timer fails, a wrong timed output fails, a suspicious
speed-up is re-verified and reported, a too-slow kernel fails the chapter's speed rule."""
import pytest

from flashtutor.chapters import SpeedRule
from flashtutor.isolate import Outcome
from flashtutor.problems import Problem
from flashtutor.report import Report

P = Problem(1, 16, 1024, 64).to_dict()


def stats(us):
    return {"median_us": us, "p10_us": us * 0.98, "p90_us": us * 1.02, "n": 50, "spread": 0.04}


def fill(timing: dict, speed=SpeedRule()):
    check = {"kind": "check", "ok": True, "problem": "B1 H16 S1024 D64", "err": 1e-4, "bound": 2e-4}
    row = {"kind": "time", "problem": "B1 H16 S1024 D64", "backend": "cudnn", "recheck_ok": True,
           "recheck_message": "", "stats": {"learner": stats(20.0), "sdpa": stats(17.0)}, "ratio": 20 / 17,
           "pct_floor": {"learner": 25.0}, "synced_us": 25.0, "escapes_timer": False, "below_floor": False}
    row.update(timing)
    tasks = [{"kind": "check", "problem": P, "seed": 1}, {"kind": "time", "problem": P, "seed": 2}]
    r = Report(chapter="T", title="t", path="x.py", device="cuda")
    r.fill({}, tasks, [Outcome(0, check), Outcome(1, row)], compile_only=False, speed=speed)
    return r


def test_plain_result_passes():
    r = fill({})
    assert r.verdict == "pass" and "SDPA's time" in r.summary


@pytest.mark.parametrize("timing,cause,text", [
    ({"below_floor": True}, "below floor", "faster than the roofline floor"),
    ({"escapes_timer": True, "synced_us": 90.0}, "side stream", "outside the timed stream"),
    ({"recheck_ok": False, "recheck_message": "error 0.4 > allowed 1e-4"}, "timed output wrong", "timed call is wrong"),
])
def test_timed_rules_fail(timing, cause, text):
    r = fill(timing)
    assert r.verdict == "fail"
    assert cause in r.timings[0]["causes"] and any(text in f for f in r.failures)


def test_every_cause_is_kept():
    r = fill({"below_floor": True, "escapes_timer": True})
    assert r.timings[0]["causes"] == ["side stream", "below floor"]
    assert "side stream" in r.summary and "below floor" in r.summary


def test_suspicious_speed_is_a_notice_not_a_failure():
    r = fill({"suspicious": "12× faster than SDPA; re-verified on fresh inputs: correct"})
    assert r.verdict == "pass" and any("re-verified" in w for w in r.warnings)


def test_speed_rule():
    assert fill({}, SpeedRule(max_ratio_vs_sdpa=1.5)).verdict == "pass"
    slow = fill({"ratio": 3.0}, SpeedRule(max_ratio_vs_sdpa=1.5))
    assert slow.verdict == "fail" and "too slow" in slow.summary
