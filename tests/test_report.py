"""The judge's rules on synthetic evidence (no GPU needed): a time below the roofline floor, a wrong
timed output and library kernels fail; a disturbed timing is "re-run", never a failure, not even a pass;
the speed rule fails a correct but slow kernel; the report renders what it holds."""
import pytest

from flashtutor.chapters import Chapter, SpeedRule
from flashtutor.grading.evidence import Cause, CaseResult, Measurement, TimingResult, Verdict
from flashtutor.grading.report import EXIT_CODES, EXIT_INTERNAL, EXIT_USAGE, PARTIAL_COLOR, VERDICT_STYLE, Report
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
    assert "another process" in slow.summary and "not steady" not in slow.summary


def test_rounds_that_disagree_with_no_process_seen_do_not_blame_another_process():
    """The H100's GPU tier (2026-11-27): chapter 5's solution, alone on the GPU, was 'disturbed by another
    process' — there was none; the rounds had disagreed. The verdict says what was seen."""
    r = report({"ratio": 2.1, "disturbed": "learner's rounds spread 448% (p10 21.2, p90 116.9 µs)"},
               SpeedRule(max_ratio_vs_sdpa=10.6))
    assert r.verdict == Verdict.DISTURBED and r.exit_code == 3
    assert "another process" not in r.summary and "no other process was seen" in r.summary and "re-run" in r.summary


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


# ---------------------------------------------------------------- what a verdict covers, and how it reads
TRITON = Chapter(key="T", slug="t", title="t", kind="triton", check_sets=("seed", "small", "odd"),
                 speed=SpeedRule(max_ratio_vs_sdpa=2.0))
CPU_ENV = {"gpu": "none", "driver": None, "torch": "2.13.0+cpu", "triton": "3.9.0", "cudnn": None,
           "date": "2026-11-23 10:00 UTC"}
CPU_SET = ("B2 H2 S1 D64", "B2 H3 S37 D64", "B1 H2 S70 D128")


def cpu_report(cases=(), execution="interpreted"):
    r = Report(chapter="T", title="t", path="x.py", device="cpu", execution=execution, env=dict(CPU_ENV))
    r.checks = [CaseResult(p, i, True, err=1e-4, bound=2e-4) for i, p in enumerate(CPU_SET)] + list(cases)
    return r


def test_a_cpu_pass_says_correctness_only_and_why_and_never_looks_like_a_pass():
    r = cpu_report()
    r.describe(TRITON)
    decide(r, TRITON)
    assert r.verdict == Verdict.PASS and r.exit_code == 0 and r.partial
    assert r.headline == ("PASS (correctness only, interpreted on the CPU — speed not graded: no GPU) — "
                          "correct on all 3 cases of the cpu set"), r.headline
    assert r._style() != VERDICT_STYLE["pass"] and PARTIAL_COLOR in r._repr_html_()
    text = str(r)
    assert "interpreted on the CPU" in text and "Triton's interpreter on the CPU" in r.env_line()
    assert any(u.startswith("speed: not timed") for u in r.unchecked)
    assert any("seed, small, odd sets are checked on a GPU" in u for u in r.unchecked)
    assert '"headline": "PASS (correctness only' in r.to_json() and '"execution": "interpreted"' in r.to_json()


def test_an_emulated_pass_says_so():
    r = cpu_report(execution="emulated")
    decide(r, TRITON)
    assert r.label == "PASS (correctness only, emulated on the CPU — no timing; grade on a GPU for speed)"


def test_a_gpu_pass_names_the_sets_checked_and_timed_and_is_a_full_pass():
    r = report(speed=SpeedRule(max_ratio_vs_sdpa=1.5))
    r.checks = [CaseResult("B1 H16 S1024 D64", 1, True, err=1e-4, bound=2e-4),
                CaseResult("B1 H16 S1024 D64 causal", 2, True, err=1e-4, bound=2e-4)]
    decide(r, Chapter(key="T", slug="t", title="t", kind="torch", speed=SpeedRule(max_ratio_vs_sdpa=1.5)))
    assert r.verdict == Verdict.PASS and not r.partial and r._style() == VERDICT_STYLE["pass"]
    assert r.scope == "correctness and speed, on the GPU"
    assert "correct on all 2 cases of the seed set; timed on the seed set: 1.18× SDPA's GPU time" in r.summary


def test_identical_failures_are_one_entry_with_a_count():
    nan = "3 of 12 output elements are NaN (first at [b=0, h=0, s=1, d=0])"
    bad = [CaseResult(p, 10 + i, False, Cause.NAN, nan) for i, p in enumerate(
        ("B2 H3 S37 D64", "B2 H3 S37 D64 causal", "B1 H2 S70 D128", "B1 H2 S70 D128 causal", "B2 H2 S1 D64"))]
    other = CaseResult("B2 H3 S37 D64", 99, False, Cause.TAIL, "rows s ≥ 32 were never written")
    r = cpu_report(bad + [other])
    decide(r, TRITON)
    assert r.verdict == Verdict.FAIL and len(r.failures) == 2, r.failures
    assert r.failures[0] == (f"{nan} (5 cases: B2 H3 S37 D64 seed 10, B2 H3 S37 D64 causal seed 11, "
                             "B1 H2 S70 D128 seed 12, B1 H2 S70 D128 causal seed 13, and 1 more)")
    assert r.failures[1] == "B2 H3 S37 D64 (seed 99): rows s ≥ 32 were never written"
    assert str(r).count("output elements are NaN") == 1


def test_failures_that_differ_only_in_numbers_are_grouped_too():
    bad = [CaseResult("B2 H3 S37 D64", 7, False, Cause.NAN, "3 of 12 output elements are NaN"),
           CaseResult("B1 H2 S70 D128", 8, False, Cause.NAN, "9 of 40 output elements are NaN")]
    r = cpu_report(bad)
    decide(r, TRITON)
    assert r.failures == ["3 of 12 output elements are NaN (2 cases: B2 H3 S37 D64 seed 7, B1 H2 S70 D128 seed 8; "
                          "the numbers are from the first, B2 H3 S37 D64 seed 7)"]


def test_no_empty_entries():
    r = cpu_report([CaseResult(None, None, False, Cause.ERROR, ""),
                    CaseResult("B2 H3 S37 D64", 3, False, Cause.CRASH, "the worker died (signal 11)",
                               log="USDT:2026-11-23 18:32:20 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start")])
    decide(r, TRITON)
    text = str(r) + "\n".join(r.failures)
    assert "None" not in text and "seed None" not in text and "USDT" not in text and "worker output" not in text
    assert r.failures == ["error", "B2 H3 S37 D64 (seed 3): the worker died (signal 11)"]


def test_the_header_shows_only_what_exists():
    r = cpu_report()
    line = r.env_line()
    assert line.startswith("no GPU · ") and "None" not in line and "none" not in line, line
    assert "torch 2.13.0+cpu" in line and "cuDNN" not in line and "driver" not in line
    r.env.update(gpu="NVIDIA H100 80GB HBM3", cudnn=91900, driver="580.1")
    r.execution = "gpu"
    assert r.env_line().startswith("NVIDIA H100 80GB HBM3 · torch 2.13.0+cpu · cuDNN 9.19.0 · triton")


def test_only_checks_that_ran_are_listed():
    """An import failure at every case: no correctness, tolerance or tracing claimed; what did not run is said."""
    r = cpu_report()
    r.checks = [CaseResult(p, i, False, Cause.IMPORT_ERROR, "import error: No module named 'nope'")
                for i, p in enumerate(CPU_SET)]
    r.describe(TRITON)
    decide(r, TRITON)
    joined = " ".join(r.method)
    assert "correctness:" not in joined and "tolerance" not in joined and "traced" not in joined
    assert any("no case got as far as an output" in u for u in r.unchecked)
    assert len(r.failures) == 1 and "(3 cases:" in r.failures[0]

    stopped = Report(chapter="T", title="t", path="x.py", device="cpu", env=dict(CPU_ENV))
    stopped.set_error(Cause.IMPORT_ERROR, "x.py:3: syntax error: expected ':'")
    stopped.static = [{"file": "x.py", "line": 3, "severity": "forbidden", "what": "syntax error: expected ':'"}]
    stopped.describe(TRITON)
    decide(stopped, TRITON)
    assert stopped.method == [] and not stopped.forbidden and "forbidden" not in stopped.causes
    assert stopped.label == "FAIL (nothing ran)" and stopped.failures == ["x.py:3: syntax error: expected ':'"]


def test_a_gpu_the_chapter_cannot_use_is_not_graded_here():
    r = Report(chapter="05", title="t", path="x.py", device="cuda", execution="gpu")
    r.set_error(Cause.UNSUPPORTED_GPU, "the CUTLASS GEMMs need sm_90a (H100/H200); this GPU is sm_80")
    from flashtutor.chapters import get_chapter
    decide(r, get_chapter("05"))
    assert r.verdict == Verdict.NOT_RUN and r.exit_code == 3 and "sm_90a" in r.headline


def test_exit_codes():
    assert [EXIT_CODES[v] for v in (Verdict.PASS, Verdict.FAIL, Verdict.NOT_RUN, Verdict.DISTURBED)] == [0, 1, 3, 3]
    assert (EXIT_USAGE, EXIT_INTERNAL) == (2, 4)


def test_scan_findings_name_a_call_once(tmp_path):
    from flashtutor.grading.scan import scan_python
    f = tmp_path / "a.py"
    f.write_text("import torch\nfrom torch import einsum\n\ndef attention(q, k, v, *, causal=False):\n"
                 "    return torch.einsum('bhsd,bhtd->bhst', q, k)\n")
    whats = [x.what for x in scan_python(f)]
    assert "calls einsum (a library matmul): write the computation yourself" in whats, whats
    assert "imports einsum (a library matmul)" in whats
    assert not any("einsum (einsum" in w for w in whats)


def test_an_output_left_unwritten_was_still_compared():
    """'unwritten' is found by comparing an all-NaN output (error ∞) or by a NotImplementedError (no output)."""
    stub = cpu_report()
    stub.checks = [CaseResult(p, i, False, Cause.UNWRITTEN, "every output element is NaN", err=float("inf"))
                   for i, p in enumerate(CPU_SET)]
    stub.describe(TRITON)
    assert any(m.startswith("correctness: 3 cases on 3 problems of the cpu set") for m in stub.method), stub.method
    raised = cpu_report()
    raised.checks = [CaseResult(p, i, False, Cause.UNWRITTEN, "not written yet: NotImplementedError")
                     for i, p in enumerate(CPU_SET)]
    raised.describe(TRITON)
    assert not any(m.startswith("correctness") for m in raised.method)


def test_page_table_keeps_a_time_and_a_shape_on_one_line():
    """The notebook's HTML report: each timing cell is one short line (median ± half the p10-p90 spread),
    never a range that wraps or a number in scientific notation; the shape is not broken either."""
    import re
    r = report()
    r.timings[0].times = {"learner": Measurement(18236.73, 18219.17, 18242.53, 5, host_us=40.0, batch=(1, 2)),
                          "sdpa": m(17.0)}
    h = r._repr_html_()
    timing = h[h.index("<th>yours µs</th>"):]
    row = re.search(r"<tr><td style='white-space:nowrap'>B1 H16 S1024 D64</td>(.*?)</tr>", timing).group(1)
    cells = re.findall(r"<td style='white-space:nowrap'>(.*?)</td>", row)
    assert cells[0] == "18237 ±0.1%" and cells[1] == "17.00 ±2.0%", cells
    table = timing[:timing.index("</table>")]
    assert "e+" not in table and "[" not in row
    assert "host µs/call: what issuing one call cost the host" in timing      # the column says what it is


def test_page_report_folds_a_table_of_one_status_and_shows_method_code_as_code():
    """A stub's report (every problem "unwritten") is one line that opens onto its table, where the whole
    screen of red rows was; a mixed table stays open; the method's `names` are <code>, not backticks."""
    r = report()
    r.checks = [CaseResult(f"B{b} H16 S128 D64", 1, False, Cause.UNWRITTEN, "output never written")
                for b in range(1, 11)]
    r.method = ["graded by `flashtutor grade T` in a worker <process>"]
    h = r._repr_html_()
    assert "<details><summary>all 10 problems: unwritten</summary><table>" in h
    assert "<code>flashtutor grade T</code>" in h and "&lt;process&gt;" in h and "`" not in h
    r.checks[0] = CaseResult("B1 H16 S128 D64", 1, True, err=1e-4, bound=2e-4)
    mixed = r._repr_html_()
    assert "all 10 problems" not in mixed and mixed.count("<tr>") >= 11
