"""The messages a wrong submission gets name its real cause, and not a wrong one (issue 27): NaN the kernel
computed is not "wrote nothing"; the large-logit hint only when the ordinary cases pass; what the failing
cases share, in one line above the table; a crash's log without the profiler's and allocator's lines.
Most run the rules on synthetic reports; two grade real wrong kernels on the CPU (chapter 4 through Triton's
interpreter, chapter 1 in the CUDA emulation)."""
import pytest

from flashtutor.chapters import Chapter, SpeedRule
from flashtutor.grading.evidence import Cause, CaseResult, Verdict
from flashtutor.grading.report import Report
from flashtutor.grading.rules import LARGE_LOGITS_HINT, decide, shared_by_failures

TRITON = Chapter(key="T", slug="t", title="t", kind="triton", check_sets=("cpu",), causal=True,
                 speed=SpeedRule(max_ratio_vs_sdpa=2.0))
ORDINARY = ("B2 H2 S1 D64", "B2 H3 S37 D64", "B1 H2 S70 D128")
LARGE = ("B2 H3 S37 D64 logits×36", "B2 H3 S37 D64 causal logits×36",
         "B1 H2 S70 D128 logits×36", "B1 H2 S70 D128 causal logits×36")
NAN = "2000 of 14208 output elements are NaN computed by the kernel (not the grader's never-written pre-fill)"


def graded(fail: dict) -> Report:
    """A CPU report of the ordinary shapes (causal and not) and the large-logit ones; the problems in ``fail``
    fail with (cause, message)."""
    r = Report(chapter="T", title="t", path="x.py", device="cpu", execution="interpreted", env={"gpu": "none"})
    names = [p + c for p in ORDINARY for c in ("", " causal")] + list(LARGE)
    for i, name in enumerate(names):
        if name in fail:
            cause, msg = fail[name]
            err = float("nan") if cause == Cause.CRASH else float("inf")      # a crash compared nothing
            r.checks.append(CaseResult(name, 100 + i, False, cause, msg, err=err, bound=1e-3))
        else:
            r.checks.append(CaseResult(name, 100 + i, True, err=1e-4, bound=2e-4))
    decide(r, TRITON)
    return r


def test_the_large_logit_hint_only_when_the_ordinary_cases_pass():
    only_large = graded({n: (Cause.NAN, NAN) for n in LARGE})
    assert only_large.verdict == Verdict.FAIL
    text = "\n".join(only_large.failures)
    assert text.count(LARGE_LOGITS_HINT) == 1
    assert "running max" in text and "exp2" in text and "65504" in text and "fp16" in text
    assert only_large.shared.startswith("The 4 failing cases of 10 share: large logits"), only_large.shared
    # A kernel that does subtract the max but is wrong elsewhere too: NaN on large logits and on ordinary cases.
    everywhere = graded({**{n: (Cause.NAN, NAN) for n in LARGE}, "B2 H3 S37 D64 causal": (Cause.NAN, NAN)})
    assert LARGE_LOGITS_HINT not in "\n".join(everywhere.failures)
    assert "overflow" not in "\n".join(everywhere.failures)
    # A crash on a large-logit case is not an overflow either: its output was never compared.
    crash = graded({LARGE[0]: (Cause.CRASH, "the process was killed by signal 11 (segmentation fault)")})
    assert LARGE_LOGITS_HINT not in "\n".join(crash.failures)


def test_grouped_failures_list_cases_and_one_line_says_what_they_share():
    """Five causal cases fail the same way: the entry lists the cases (problem and seed), and the line above
    the table says they are the causal ones; the report shows that line above the correctness table."""
    causal = [n for n in (p + " causal" for p in ORDINARY)] + [LARGE[1], LARGE[3]]
    r = graded({n: (Cause.NAN, NAN) for n in causal})
    (entry,) = r.failures
    assert "(5 cases: B2 H2 S1 D64 causal seed 101, B2 H3 S37 D64 causal seed 103, " in entry, entry
    assert "and 1 more)" in entry
    assert r.shared == "The 5 failing cases of 10 share: causal — every case without it passes.", r.shared
    assert "large logits" not in r.shared and "D = 128" not in r.shared
    text = str(r)
    assert text.index(r.shared) < text.index("┃ problem") and text.count(r.shared) == 1
    html = r._repr_html_()
    assert html.index("share: causal") < html.index("<table>")
    assert LARGE_LOGITS_HINT not in entry


@pytest.mark.parametrize("fail,words", [
    (("B1 H2 S70 D128", "B1 H2 S70 D128 causal", "B1 H2 S70 D128 logits×36", "B1 H2 S70 D128 causal logits×36"),
     "share: D = 128"),
    (("B2 H3 S37 D64", "B2 H3 S37 D64 causal", "B2 H3 S37 D64 logits×36", "B2 H3 S37 D64 causal logits×36"),
     "share: B > 1, D = 64"),
])
def test_the_shared_line_names_the_dimension(fail, words):
    r = graded({n: (Cause.WRONG, "error 0.3 > allowed 0.001") for n in fail})
    assert words in r.shared, r.shared
    assert "causal" not in r.shared and "large logits" not in r.shared


def test_nothing_shared_is_no_line():
    r = graded({"B2 H3 S37 D64": (Cause.WRONG, "x"), "B1 H2 S70 D128 causal": (Cause.WRONG, "y"),
                "B2 H2 S1 D64 causal": (Cause.WRONG, "z")})
    assert r.shared == "" and shared_by_failures(r.checks) == ""
    assert shared_by_failures([CaseResult("B2 H3 S37 D64", 1, False, Cause.WRONG)]) == ""   # nothing passed


def test_shared_s_not_a_multiple_and_the_last_rows():
    checks = [CaseResult("B2 H3 S113 D64", 1, False, Cause.TAIL, "rows s ≥ 64 were never written"),
              CaseResult("B3 H2 S1023 D64", 2, False, Cause.TAIL, "rows s ≥ 1008 were never written"),
              CaseResult("B1 H16 S1024 D64", 3, True), CaseResult("B8 H16 S128 D64", 4, True)]
    line = shared_by_failures(checks)
    assert "S not a multiple of 16" in line and "multiple of 64" not in line, line
    assert "last rows" in line


def test_a_crash_log_loses_the_profilers_and_the_allocators_lines():
    log = ("USDT:2026-11-23 18:32:20 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
           "STAGE:2026-11-23 18:32:20 1:1 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n"
           "[W1123 18:32:21.000 profiler_kineto.cpp:120] Warning: profiler stopped\n"
           "double free or corruption (out)\n"
           "my debug print: row 36\n")
    r = graded({"B2 H3 S37 D64": (Cause.CRASH, "the process was killed by signal 6 (abort)")})
    r.checks[2].log = log
    decide(r, TRITON)
    text = "\n".join(r.failures)
    assert "my debug print: row 36" in text
    for noise in ("USDT", "SyncActivityProfilerHandler", "STAGE:", "profiler_kineto", "double free"):
        assert noise not in text, noise


# ---------------------------------------------------------------- real wrong kernels, graded on the CPU
def _mutated(key: str, edits: dict, folder):
    """The chapter's solution with ``edits`` ({file: [(old, new)]}) in ``folder``: a learner's wrong files."""
    from flashtutor.chapters import get_chapter
    ch = get_chapter(key)
    folder.mkdir(parents=True, exist_ok=True)
    for fname in ch.files:
        text = (ch.solution_dir / fname).read_text()
        for old, new in edits.get(fname, []):
            assert text.count(old) == 1, (fname, old)
            text = text.replace(old, new)
        (folder / fname).write_text(text)
    return folder / ch.entry


def test_a_triton_kernel_without_the_running_max_gets_the_overflow_hint_not_wrote_nothing(tmp_path):
    """Chapter 4 with the max fixed at 0 (exp2 of the raw scores): right on the ordinary cases, NaN on the
    large-logit ones. Each of those says the kernel computed NaN and the case has large logits; the report
    says only the large-logit cases fail and what overflows — never that the kernel wrote nothing."""
    from flashtutor import grade
    path = _mutated("04", {"attention.py": [(
        "m_new = tl.maximum(m_i, tl.max(scores, axis=1))       # [BLOCK_M] the max including this block",
        "m_new = tl.zeros_like(m_i)                            # no running max: exp2 of the raw scores")]},
        tmp_path / "nomax")
    r = grade("04", path, device="cpu", progress=False)
    bad = [c for c in r.checks if not c.ok]
    assert r.verdict == "fail" and bad and all("logits" in c.problem for c in bad), [(c.problem, c.cause) for c in bad]
    assert {str(c.cause) for c in bad} == {"nan"}, {str(c.cause) for c in bad}
    assert all("large logits" in c.message and "computed by the kernel" in c.message for c in bad), bad[0].message
    text = "\n".join(r.failures)
    assert "wrote nothing" not in text and "never written" not in text and "zero keys" not in text
    assert text.count(LARGE_LOGITS_HINT) == 1 and "share: large logits" in r.shared, (r.shared, text)


def test_a_cuda_causal_off_by_one_is_0_over_0_in_a_row_with_zero_keys(tmp_path):
    """Chapter 1 with n_keys = i under the causal mask (keys j < i): row 0 has no key and its output is 0/0,
    emulated on the CPU. The message names the empty row and the off-by-one, not 'wrote nothing' nor an
    overflow; only the causal cases fail, and the line above the table says so."""
    from flashtutor import grade
    path = _mutated("01", {"attention.cu": [("const int n_keys = causal ? i + 1 : S;",
                                             "const int n_keys = causal ? i : S;")]}, tmp_path / "offbyone")
    r = grade("01", path, device="cpu", progress=False)
    if r.execution != "emulated":
        pytest.skip(f"no CPU emulation of CUDA here ({r.headline})")
    bad = [c for c in r.checks if not c.ok]
    assert bad and all("causal" in c.problem for c in bad) and {str(c.cause) for c in bad} == {"nan"}, \
        [(c.problem, str(c.cause), c.message[:80]) for c in bad]
    text = "\n".join(r.failures)
    assert "s = 0" in text and "zero keys" in text and "0/0" in text and "off-by-one" in text, text
    assert "wrote nothing" not in text and "never written" not in text and "overflow" not in text
    assert "share: causal" in r.shared, r.shared


# ---------------------------------------------------------------- a crash of an emulated kernel
PROFILER_AND_ALLOCATOR = (
    "USDT:2026-11-27 10:02:11 4711:4711 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
    "STAGE:2026-11-27 10:02:11 4711:4711 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n"
    "[W1127 10:02:12.000000000 profiler_python.cpp:1029] Warning: profiler stopped\n"
    "double free or corruption (out)\n")


def test_an_emulated_kernel_killed_by_abort_is_called_an_out_of_bounds_access():
    from flashtutor.grading.spawn import crash_message
    msg = crash_message(-6, PROFILER_AND_ALLOCATOR + "row 36 of 37\n", emulated=True)
    assert msg.startswith("the process was killed by signal 6 (abort): an emulated kernel most likely read or "
                          "wrote past the end of a buffer"), msg
    assert "heap corrupted" in msg and "--sanitize" in msg and "row 36 of 37" in msg
    for noise in ("USDT", "SyncActivityProfilerHandler", "STAGE:", "profiler_python", "double free"):
        assert noise not in msg, noise
    segv = crash_message(-11, "", emulated=True)
    assert "segmentation fault" in segv and "past the end of a buffer" in segv and "last output" not in segv


def test_a_crash_that_is_not_an_emulated_kernel_is_not_called_out_of_bounds():
    from flashtutor.grading.spawn import crash_message
    gpu = crash_message(-6, "terminate called after throwing an instance of 'c10::Error'\n", emulated=False)
    assert "past the end of a buffer" not in gpu and "c10::Error" in gpu
    killed = crash_message(-9, PROFILER_AND_ALLOCATOR.replace("double free or corruption (out)\n", ""),
                           emulated=True)
    assert "out of bounds" not in killed and "USDT" not in killed
    assert killed == "the process was killed by signal 9 (killed)"
    exited = crash_message(1, "Traceback (most recent call last):\nKeyError: 'x'\n", emulated=True)
    assert "out of bounds" not in exited and "KeyError" in exited


def test_the_emulated_method_line_does_not_contradict_an_out_of_bounds_verdict():
    from flashtutor.grading.judge import EMULATED_METHOD
    assert "memory faults past your buffers" not in EMULATED_METHOD
    assert "crashes the process" in EMULATED_METHOD and "--sanitize" in EMULATED_METHOD


def test_a_real_emulated_write_past_the_output_reads_as_an_out_of_bounds_access(tmp_path):
    """Chapter 1 with a row stride of S·D for O (tests/adversarial/ch01_mutations.py's oob_write), emulated on the
    CPU: the worker dies; the verdict says it is probably an access past a buffer, points at --sanitize, and
    shows none of the profiler's lines."""
    from adversarial.ch01_mutations import materialize

    from flashtutor import grade
    r = grade("01", materialize("oob_write", tmp_path / "oob"), device="cpu", progress=False)
    if r.execution != "emulated":
        pytest.skip(f"no CPU emulation of CUDA here ({r.headline})")
    assert r.verdict == "fail" and "crash" in r.causes, r.headline
    text = "\n".join(r.failures)
    assert "past the end of a buffer" in text and "--sanitize" in text, text
    assert "USDT" not in text and "SyncActivityProfilerHandler" not in text and "STAGE:" not in text
    assert "wrote nothing" not in text


def test_the_stub_is_the_stub_on_large_logits_too_but_a_kernel_without_the_max_is_not():
    """All-NaN on a large-logit case is 0/0 (the stub) or an overflow: the ordinary cases decide. Every ordinary
    case the stub's → the large-logit ones are the stub's too; ordinary cases right → the overflow hint."""
    from flashtutor.check import ALL_NAN
    stub = ALL_NAN + " (not the grader's …), with ordinary logits that cannot overflow: 0/0 … TODO stub?"
    big = ALL_NAN + " (not the grader's never-written pre-fill). This case has large logits …"
    names = [p + c for p in ORDINARY for c in ("", " causal")]
    r = graded({**{n: (Cause.UNWRITTEN, stub) for n in names}, **{n: (Cause.NAN, big) for n in LARGE}})
    assert r.causes == {"unwritten"} and all("TODO" in c.message for c in r.checks), r.causes
    assert LARGE_LOGITS_HINT not in "\n".join(r.failures)
    nomax = graded({n: (Cause.NAN, big) for n in LARGE})
    assert nomax.causes == {"nan"} and LARGE_LOGITS_HINT in "\n".join(nomax.failures)
    # A causal S = 1 (row 0 alone) all NaN: the stub's when the others are, a zero-key row when they pass.
    zero = ALL_NAN + " (not the grader's …). Row s = 0 has it; … zero keys …"
    r = graded({**{n: (Cause.UNWRITTEN, stub) for n in names if n != "B2 H2 S1 D64 causal"},
                "B2 H2 S1 D64 causal": (Cause.NAN, zero)})
    assert r.causes == {"unwritten"}, r.causes
    offbyone = graded({"B2 H2 S1 D64 causal": (Cause.NAN, zero)})
    assert offbyone.causes == {"nan"} and "zero keys" in offbyone.failures[0]
