"""The whole grading pipeline on CPU: plain-PyTorch submissions in a worker process, each with the
verdict it must get. (CUDA kernels get the same treatment on the GPU tier: test_gpu.py.)"""
from pathlib import Path

import pytest

from flashtutor.chapters import Chapter
from flashtutor import grade

HERE = Path(__file__).parent / "adversarial" / "torch"
# These submissions use torch's own matmul to make a right or wrongly-right answer: anti-cheat is off
# here (tests/test_adversarial.py runs the cheats with it on).
TORCH_CH = Chapter(key="T", slug="cpu_selftest", title="plain PyTorch (grader self-test)", kind="torch",
                   check_sets=("cpu",), causal=True, seeds=1, large_logits=True, anticheat=False)


def run(name, **kw):
    kw.setdefault("check_timeout", 30)
    return grade(TORCH_CH, HERE / f"{name}.py", device="cpu", progress=False, **kw)


def causes(report):
    return {str(c.cause) for c in report.checks if not c.ok}


def test_good_submission_passes():
    r = run("good")
    assert r.verdict == "pass", r.failures
    assert len(r.checks) == 3 * 2 + 2 * 2       # 3 shapes × causal/not + large logits at D 64 and 128, causal/not
    assert len({c.seed for c in r.checks}) == len(r.checks)   # fresh inputs for every case
    assert all(c.err <= c.bound for c in r.checks)
    assert any("NaN" in m for m in r.method) and any("worker process" in m for m in r.method)
    assert '"verdict": "pass"' in r.to_json()
    assert "PASS" in str(r) and "PASS" in r._repr_html_()


@pytest.mark.parametrize("name,cause", [
    ("wrong_scale", "scale"),
    ("nan_no_max", "nan"),
    ("ignores_causal", "causal"),
    ("tail", "tail"),
    ("batch0_only", "batch"),
    ("wrong_shape", "shape"),
    ("modifies_inputs", "inputs modified"),
    ("raises", "error"),
])
def test_wrong_submission_gets_its_verdict(name, cause):
    r = run(name)
    assert r.verdict == "fail"
    assert cause in causes(r), (causes(r), r.failures[:2])


def test_nan_without_max_only_fails_on_large_logits():
    r = run("nan_no_max")
    bad = [c for c in r.checks if not c.ok]
    assert bad and all("logits" in c.problem for c in bad)
    assert {"D64", "D128"} <= {c.problem.split()[3] for c in bad}     # at both head dims
    assert "max" in bad[0].message


def test_exception_names_the_learners_line():
    r = run("raises")
    msg = next(m for m in r.failures if "IndexError" in m)   # (at S = 1 the bad index is in range)
    assert "raises.py:3" in msg


def test_segfault_is_a_verdict_and_after_two_the_rest_is_skipped():
    r = run("segfault")
    assert r.verdict == "fail"
    assert [str(c.cause) for c in r.checks[:2]] == ["crash", "crash"]     # each in a fresh process
    assert "signal 11" in r.checks[0].message
    rest = r.checks[2:]
    assert rest and all(str(c.cause) == "not_run" and "two cases ended in crash" in c.message for c in rest)


def test_hang_is_a_timeout_and_the_rest_is_skipped():
    r = run("hang", check_timeout=3)
    cs = [str(c.cause) for c in r.checks]
    assert cs[:2] == ["timeout", "timeout"] and set(cs[2:]) == {"not_run"}


@pytest.mark.parametrize("name,text", [("import_error", "No module named"), ("no_attention", "defines no function attention")])
def test_import_problems_are_verdicts(name, text):
    r = run(name)
    assert r.verdict == "fail" and text in r.summary + " ".join(r.failures)


def test_learner_files_are_not_modified():
    before = {p: p.read_bytes() for p in HERE.glob("*.py")}
    run("good")
    run("modifies_inputs")
    assert before == {p: p.read_bytes() for p in HERE.glob("*.py")}


def test_a_killed_workers_gpu_work_is_waited_for(monkeypatch):
    """A worker killed inside a kernel leaves its context to the driver: the judge waits (holding the GPU
    lock) until NVML no longer lists the process, so no timed section starts beside the dying kernel."""
    import sys
    import types

    from flashtutor.grading import spawn
    polls = []

    class Proc:
        def __init__(self, pid):
            self.pid = pid

    def running(handle):
        polls.append(handle)
        return [Proc(4242)] if len(polls) < 4 else [Proc(7)]      # listed for three polls, then gone

    fake = types.SimpleNamespace(nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
                                 nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
                                 nvmlDeviceGetComputeRunningProcesses=running)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert spawn.gpu_released(4242, timeout=5.0) and len(polls) == 4
    polls.clear()
    monkeypatch.setattr(fake, "nvmlDeviceGetComputeRunningProcesses", lambda h: [Proc(4242)])
    assert not spawn.gpu_released(4242, timeout=0.2)                   # never gone: it says so, bounded
