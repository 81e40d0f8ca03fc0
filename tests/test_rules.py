"""The chapter rules beyond correctness: speed against a baseline or on graph-replayed times, and what
the compiled SASS must show. Each rule has a wrong submission it rejects."""
import shutil

import pytest

from flashtutor import grade
from flashtutor.chapters import ROOT, SassRule, SpeedRule, get_chapter
from flashtutor.grading.evidence import TimingResult
from flashtutor.grading.rules import sass_violations, speed_violations


def _row(basis="stream", **kw):
    t = TimingResult("B32 H16 S128 D64", basis, ratio=0.9)
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def test_graph_basis_names_graph_replayed_time():
    rule = SpeedRule(max_ratio_vs_sdpa=1.0, basis="graph")
    assert speed_violations(rule, _row("graph", ratio=0.8)) == []
    (msg,) = speed_violations(rule, _row("graph", ratio=1.3))
    assert "1.30× SDPA's graph-replayed time > 1.00×" in msg


def test_speedup_over_baseline():
    rule = SpeedRule(min_speedup_vs=5.0, baseline="flashtutor.kernels.k01_naive_three_pass")
    assert speed_violations(rule, _row(speedup_vs_baseline=7.5)) == []
    (msg,) = speed_violations(rule, _row(speedup_vs_baseline=3.2))
    assert "3.20× faster than k01_naive_three_pass < 5× required" in msg
    (msg,) = speed_violations(rule, _row())
    assert "was not timed" in msg


def test_sass_rule_on_resource_tables():
    rule = SassRule(require=("HMMA",), no_spills=True)
    ok = {"attention.cu": {"k": {"opcodes": {"HMMA": 64, "LDS": 10}, "spill_instructions": 0, "local_bytes": 0}}}
    assert sass_violations(rule, ok) == []
    scalar = {"attention.cu": {"k": {"opcodes": {"FFMA": 640}, "spill_instructions": 0, "local_bytes": 0}}}
    assert "no HMMA instruction" in sass_violations(rule, scalar)[0]
    spills = {"attention.cu": {"k": {"opcodes": {"HMMA": 8}, "spill_instructions": 12, "local_bytes": 256}}}
    assert "uses local memory (12 LDL/STL" in sass_violations(rule, spills)[0]


def test_chapter3_rejects_a_kernel_without_tensor_cores(tmp_path):
    """Chapter 1's scalar row kernel is correct attention, but chapter 3 asks for HMMA: the SASS rule
    rejects it from the compiled cubin alone (no GPU needed)."""
    for f in ("attention.py", "attention.cu"):
        shutil.copy(ROOT / "solutions/01_naive_cuda" / f, tmp_path / f)
    r = grade("03", tmp_path / "attention.py", device="cpu", progress=False)
    assert r.verdict == "fail"
    assert any("no HMMA instruction" in f for f in r.failures), r.failures
    assert (tmp_path / "attention.cu").read_text() == (ROOT / "solutions/01_naive_cuda/attention.cu").read_text()


SPILLING = r'''
#include <cuda_fp16.h>
// A per-thread array indexed by data: registers cannot be indexed at run time, so it lives in local memory.
extern "C" __global__ void spill(const __half* q, __half* o, const int* idx, int n) {
    float scratch[256];
    for (int i = 0; i < 256; ++i) scratch[i] = __half2float(q[i * n + threadIdx.x]);
    float acc = 0.f;
    for (int i = 0; i < n; ++i) acc += scratch[idx[i] & 255];
    o[threadIdx.x] = __float2half(acc);
}
'''


def test_chapter3_rejects_local_memory(tmp_path):
    (tmp_path / "attention.cu").write_text(SPILLING)
    (tmp_path / "attention.py").write_text("def attention(q, k, v, *, causal=False):\n    raise NotImplementedError\n")
    r = grade("03", tmp_path / "attention.py", device="cpu", progress=False)
    assert r.verdict == "fail"
    assert any("kernel spill uses local memory" in f for f in r.failures), r.failures
    assert any("no HMMA" in f for f in r.failures)


@pytest.mark.parametrize("key", ["01", "02"])
def test_chapters_without_sass_rule_ignore_it(key, tmp_path):
    """Chapters 1 and 2 ask nothing of the SASS: the scalar kernel compiles, and on a CPU it passes in the
    emulation (correctness only) or, where g++ cannot build it, is 'not run' — never a failure."""
    for f in ("attention.py", "attention.cu"):
        shutil.copy(ROOT / "solutions/01_naive_cuda" / f, tmp_path / f)
    r = grade(key, tmp_path / "attention.py", device="cpu", progress=False)
    assert r.verdict == ("pass" if r.execution == "emulated" else "not run"), (r.headline, r.failures)
    assert "SASS rule" not in r.causes


# ---------------------------------------------------------------- GPU tier: the speed rules on real kernels
@pytest.mark.gpu
def test_chapter2_rejects_a_kernel_not_enough_faster_than_chapter1(tmp_path):
    """Chapter 2's step a (coalesced rows, scores still in global memory) is correct, and a few times
    faster than chapter 1's reference, far from the 12× the chapter asks: the speed rule rejects it."""
    shutil.copy(ROOT / "flashtutor/kernels/k02a_coalesced.py", tmp_path / "attention.py")
    shutil.copy(ROOT / "flashtutor/kernels/k02a_coalesced.cu", tmp_path / "attention.cu")
    r = grade("02", tmp_path / "attention.py", progress=False, time_sets=("seed",))
    assert all(c.ok for c in r.checks), r.failures[:2]
    assert r.verdict == "fail", r.summary
    need = get_chapter("02").speed.min_speedup_vs
    assert any("faster than k01_naive_three_pass" in f and f"< {need:g}× required" in f for f in r.failures), r.failures


SPIN = ("\n    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {   // test only: one thread idles ~1 ms\n"
        "        long long t0 = clock64();\n        while (clock64() - t0 < 2000000) { }\n    }\n")


def slowed_solution(key: str, cu: str, tmp_path):
    """The chapter's solution with one thread of each of its kernels spinning for 2M cycles (~1 ms): correct,
    but far slower than the chapter asks."""
    import re
    sol = ROOT / "solutions" / get_chapter(key).slug
    shutil.copy(sol / "attention.py", tmp_path / "attention.py")
    src, n = re.subn(r'(extern "C" __global__[^{;]*\{)', lambda m: m.group(1) + SPIN, (sol / cu).read_text())
    assert n >= 1, f"no kernel found in {cu}"
    (tmp_path / cu).write_text(src)
    return tmp_path / "attention.py"


@pytest.mark.parametrize("key, cu", [("03", "attention.cu"), ("05", "softmax.cu"), ("07", "attention.cu")])
@pytest.mark.gpu
def test_a_correct_but_slow_kernel_fails_the_speed_rule(key, cu, tmp_path):
    """Chapters 3, 5 and 7 bound the time per call against SDPA's: the solution with a 1-ms idle thread
    passes every correctness case and fails on speed alone."""
    r = grade(key, slowed_solution(key, cu, tmp_path), progress=False, sets=("seed",), time_sets=("seed",))
    assert all(c.ok for c in r.checks), r.failures[:2]
    assert r.verdict == "fail" and r.causes == {"too slow"}, (r.causes, r.failures[:3])


HOST_CHECK = '''
import math

_solution_attention = attention


def attention(q, k, v, *, causal=False):
    out = _solution_attention(q, k, v, causal=causal)
    if not math.isfinite(float(out[0, 0, 0, 0])):    # one value read on the host: waits for the GPU at every call
        raise RuntimeError("non-finite output")
    return out
'''


@pytest.mark.gpu
def test_chapter6_rejects_a_call_that_cannot_be_replayed_from_a_graph(tmp_path):
    """The chapter-6 solution plus a NaN check that reads a result back to the host: correct, but a
    host synchronisation cannot be captured, and chapter 6 times both sides as graph replays."""
    (tmp_path / "attention.py").write_text((ROOT / "solutions/06_batching/attention.py").read_text() + HOST_CHECK)
    r = grade("06", tmp_path / "attention.py", progress=False, time_sets=("seed",))
    assert all(c.ok for c in r.checks), r.failures[:2]
    assert r.verdict == "fail", r.summary
    assert any("could not be replayed from a CUDA graph" in f for f in r.failures), r.failures


def test_a_gpu_that_is_not_hopper_does_not_run_chapters_5_and_7(monkeypatch):
    """On an A100 (sm_80), chapters 5 and 7 are compiled and SASS-checked but not run: a one-line reason,
    verdict 'not run' (exit 3), never a failure; other chapters run anywhere."""
    import torch

    from flashtutor.chapters import get_chapter
    from flashtutor.grading.evidence import Cause, Verdict
    from flashtutor.grading.judge import _gpu_cannot_run
    from flashtutor.grading.report import Report
    from flashtutor.grading.rules import decide
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    assert _gpu_cannot_run(get_chapter("04")) == ""
    for key in ("05", "07"):
        why = _gpu_cannot_run(get_chapter(key))
        assert "sm_80" in why and "A100" in why and "\n" not in why
        r = Report(chapter=key, title="", path="attention.py", device="cuda")
        r.set_error(Cause.UNSUPPORTED_GPU, why)
        decide(r, get_chapter(key))
        assert r.verdict == Verdict.NOT_RUN, r.verdict
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert _gpu_cannot_run(get_chapter("07")) == ""


# ---------------------------------------------------------------- a wrong timed output is never "re-run"
def _timed_report(**timing):
    from flashtutor.chapters import Chapter
    from flashtutor.grading.evidence import CaseResult, Measurement
    from flashtutor.grading.report import Report
    from flashtutor.grading.rules import decide
    m = Measurement(20.0, 19.6, 20.4, 5, host_us=40.0, batch=(8, 32))
    r = Report(chapter="T", title="t", path="x.py", device="cuda", execution="gpu")
    r.checks = [CaseResult("B1 H16 S1024 D64", 1, True, err=1e-4, bound=2e-4)]
    t = TimingResult("B1 H16 S1024 D64", "stream", "cudnn", {"learner": m, "sdpa": m}, ratio=1.0, rechecked=2)
    for k, v in timing.items():
        setattr(t, k, v)
    r.timings = [t]
    decide(r, Chapter(key="T", slug="t", title="t", kind="torch", speed=SpeedRule(max_ratio_vs_sdpa=1.5)))
    return r


@pytest.mark.parametrize("as_cause", [True, False])
def test_a_wrong_timed_output_fails_even_when_the_timing_is_disturbed(as_cause):
    """Correct on the checked cases, a wrong output among the timed calls, and another process on the GPU: the
    verdict is FAIL (not DISTURBED, which would invite re-running a cheat until the timing is clean) — whether
    the timed phase recorded the cause or only the failed re-check."""
    from flashtutor.grading.evidence import Cause, Verdict
    why = "the last call of a batch of 32 timed calls: 1024 of 65536 output elements are NaN"
    kw = dict(disturbed="1 other process computed on this GPU (pid 540)", recheck_ok=False, recheck_message=why)
    if as_cause:
        kw.update(causes=[Cause.TIMED_OUTPUT_WRONG],
                  messages=[f"B1 H16 S1024 D64: the output of a timed call is wrong: {why}"])
    r = _timed_report(**kw)
    assert r.verdict == Verdict.FAIL and r.exit_code == 1, (r.verdict, r.summary)
    assert "timed output wrong" in r.summary and "re-run" not in r.summary
    assert any("the output of a timed call is wrong" in f and "1024 of 65536" in f for f in r.failures), r.failures
    assert str(Cause.DISTURBED) not in r.causes
    clean = _timed_report(disturbed="1 other process computed on this GPU (pid 540)")
    assert clean.verdict == Verdict.DISTURBED          # a right timed output with a disturbance: still "re-run"
