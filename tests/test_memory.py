"""The judge on a GPU whose memory other processes hold (flashtutor/grading/memory.py): its own step that runs out
of memory is tried again after a wait, and when the GPU stays full the verdict is "not graded here" — never a
failure of the learner's kernel, never "the grader failed". The GPU half is tests/test_gpu.py's full-GPU test."""
from __future__ import annotations

import pytest
import torch

from flashtutor.chapters import Chapter, SpeedRule
from flashtutor.grading import memory
from flashtutor.grading.evidence import Cause, CaseResult, TimingResult, Verdict
from flashtutor.grading.report import Report
from flashtutor.grading.rules import decide

OOM = "CUDA out of memory. Tried to allocate 130.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which 56.50 MiB is free."


class Step:
    """Runs out of memory ``fails`` times, then returns 'done'."""

    def __init__(self, fails: int, error=torch.OutOfMemoryError):
        self.fails, self.calls, self.error = fails, 0, error

    def __call__(self):
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error(OOM)
        return "done"


def test_a_step_that_ran_out_of_memory_is_tried_again_after_each_wait():
    slept = []
    step = Step(2)
    assert memory.retry(step, "checking X", waits=(1.0, 2.0, 4.0), sleep=slept.append) == "done"
    assert step.calls == 3 and slept == [1.0, 2.0]


def test_a_gpu_that_stays_full_says_not_graded_here_with_what_was_asked():
    slept = []
    with pytest.raises(memory.GraderOutOfMemory) as e:
        memory.retry(Step(9), "checking B4 H32 S4096 D128", waits=(1.0, 2.0), sleep=slept.append)
    assert slept == [1.0, 2.0]
    text = str(e.value)
    assert text.startswith("not graded here: the grader ran out of GPU memory checking B4 H32 S4096 D128 "
                           "(CUDA out of memory. Tried to allocate 130.00 MiB;"), text
    assert "grade again when it is free" in text and "\n" not in text


def test_a_library_call_that_reports_out_of_memory_counts_too_but_no_other_error_is_retried():
    slept = []
    assert memory.retry(Step(1, RuntimeError), "x", waits=(1.0,), sleep=slept.append) == "done"
    assert slept == [1.0]
    with pytest.raises(ValueError):
        memory.retry(Step(1, ValueError), "x", waits=(1.0,), sleep=slept.append)
    assert slept == [1.0]                      # a ValueError is not waited for


def test_the_waits_can_be_shortened_for_a_test(monkeypatch):
    assert memory.wait_times() == memory.WAITS_S
    monkeypatch.setenv(memory.WAITS_ENV, "0.2, 0.5")
    assert memory.wait_times() == (0.2, 0.5)


def _decided(checks, timings=()):
    r = Report(chapter="T", title="t", path="x.py", device="cuda", execution="gpu")
    r.checks, r.timings = list(checks), list(timings)
    decide(r, Chapter(key="T", slug="t", title="t", kind="torch", speed=SpeedRule(max_ratio_vs_sdpa=1.5)))
    return r


FULL = "not graded here: the grader ran out of GPU memory checking B4 H32 S4096 D128 (…)"


def test_a_case_the_grader_could_not_check_makes_the_grade_not_run_not_fail():
    r = _decided([CaseResult("B1 H16 S1024 D64", 1, True, err=1e-4, bound=2e-4),
                  CaseResult("B4 H32 S4096 D128", 1, False, Cause.GRADER_MEMORY, FULL)])
    assert r.verdict == Verdict.NOT_RUN and r.summary == FULL
    assert r.scope == "not graded here — 1 of 2 cases checked, all passed, before the GPU ran out of memory", r.scope
    assert r.shared == ""                 # what a case the grader could not check "shares" says nothing
    assert r.exit_code == 3


def test_a_shape_the_grader_could_not_time_makes_the_grade_not_run_not_pass():
    t = TimingResult("B4 H32 S4096 D128", "stream", causes=[Cause.GRADER_MEMORY], messages=[FULL])
    r = _decided([CaseResult("B1 H16 S1024 D64", 1, True, err=1e-4, bound=2e-4)], [t])
    assert r.verdict == Verdict.NOT_RUN and r.summary == FULL and "not graded here" in r.scope


def test_a_real_failure_beside_a_full_gpu_still_fails():
    r = _decided([CaseResult("B1 H16 S1024 D64", 1, False, Cause.WRONG, "wrong by 0.5"),
                  CaseResult("B4 H32 S4096 D128", 1, False, Cause.GRADER_MEMORY, FULL)])
    assert r.verdict == Verdict.FAIL


# ---------------------------------------------------------------- the judge's case loop, with a stand-in check
class _Worker:
    pid = 4242
    stopped = 0

    def stop(self):
        self.stopped += 1


def _judge(monkeypatch, results):
    """A Judge on 'cuda' whose check() plays ``results`` in turn (an exception is raised, a CaseResult returned)."""
    from flashtutor.grading.judge import Judge
    monkeypatch.setenv(memory.WAITS_ENV, "0,0")
    monkeypatch.setattr("time.sleep", lambda s: None)
    j = object.__new__(Judge)
    j.device, j.worker, j.memory_peaks = "cuda", _Worker(), memory.Peaks()
    monkeypatch.setattr(memory.Peaks, "sample", lambda self, pid: None)
    played = iter(results)

    def check(p, seed):
        r = next(played)
        if isinstance(r, BaseException):
            raise r
        return r
    j.check = check
    return j


class _P:
    name = "B4 H32 S4096 D128"


def test_the_judge_retries_a_case_it_ran_out_of_memory_in_with_the_same_worker(monkeypatch):
    ok = CaseResult(_P.name, 1, True, err=1e-4, bound=2e-4)
    j = _judge(monkeypatch, [torch.OutOfMemoryError(OOM), torch.OutOfMemoryError(OOM), ok])
    assert j._check_on_shared_gpu(_P, 1) is ok
    assert j.worker.stopped == 0


def test_a_case_the_judge_cannot_find_memory_for_reads_not_graded_here(monkeypatch):
    j = _judge(monkeypatch, [torch.OutOfMemoryError(OOM)] * 3)
    r = j._check_on_shared_gpu(_P, 1)
    assert not r.ok and r.cause == Cause.GRADER_MEMORY
    assert r.message.startswith("not graded here: the grader ran out of GPU memory checking B4 H32 S4096 D128")


def test_the_learners_out_of_memory_is_tried_again_and_then_fails_saying_how_full_the_gpu_was(monkeypatch):
    oom = CaseResult(_P.name, 1, False, Cause.OUT_OF_MEMORY, "CUDA out of memory in attention()")
    ok = CaseResult(_P.name, 1, True, err=1e-4, bound=2e-4)
    assert _judge(monkeypatch, [oom, ok])._check_on_shared_gpu(_P, 1) is ok        # the GPU was busy: passes
    again = CaseResult(_P.name, 1, False, Cause.OUT_OF_MEMORY, "CUDA out of memory in attention()")
    r = _judge(monkeypatch, [oom, again])._check_on_shared_gpu(_P, 1)
    assert r.cause == Cause.OUT_OF_MEMORY and "(twice; when the grader looked:" in r.message


def test_a_worker_that_holds_most_of_the_gpu_fails_instead_of_reading_not_graded_here(monkeypatch):
    """A submission that keeps most of the GPU's memory in its own process (to run the grader out of memory and
    turn a failure into "not graded here") gets the out-of-memory as its own failure; a worker holding little
    leaves the verdict "not graded here"."""
    monkeypatch.setattr(memory, "_total_bytes", lambda: 80 << 30)
    monkeypatch.setattr(memory, "processes", lambda: {_Worker.pid: 60 << 30, 99: 10 << 30})
    r = _judge(monkeypatch, [torch.OutOfMemoryError(OOM)] * 3)._check_on_shared_gpu(_P, 1)
    assert r.cause == Cause.OUT_OF_MEMORY, r
    assert "while your code's process held 60.0 of 80.0 GiB" in r.message
    monkeypatch.setattr(memory, "processes", lambda: {_Worker.pid: 1 << 30, 99: 70 << 30})
    r = _judge(monkeypatch, [torch.OutOfMemoryError(OOM)] * 3)._check_on_shared_gpu(_P, 1)
    assert r.cause == Cause.GRADER_MEMORY, r
