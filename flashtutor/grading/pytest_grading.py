"""Grading a chapter's exercise with pytest: one test per criterion of the grader's verdict.

    pytest chapters/04_triton_online_softmax                          # the exercise beside the tests
    pytest chapters/04_triton_online_softmax --submission my_attn.py  # another file (or FLASHTUTOR_SUBMISSION)
    pytest chapters/04_triton_online_softmax --junitxml=report.xml    # JUnit XML for a class's pipeline
    pytest chapters/04_triton_online_softmax --sanitize               # also compute-sanitizer (or FLASHTUTOR_SANITIZE=1)

Each chapter folder holds a generated ``test_chapterNN.py`` (one template, :data:`flashtutor.exercises.
TEST_TEMPLATE`) with one test function, ``test_criterion(criterion, graded)``; ``chapters/conftest.py``
wires in the hooks and the fixture below. The chapter is graded once per pytest session, with
:func:`flashtutor.grade` in pytest's own process (the judge), the learner's code in the grader's worker
process, exactly as ``flashtutor grade`` does; each collected item then reads one criterion off the report:

* ``correctness-<set>``: the cases of one shape set the grading checks (the sets :func:`~flashtutor.
  grading.judge.plan_checks` plans on this device; a shape in several sets counts in the first, as the
  plan does), ``correctness-large_logits``: the large-logit cases. A setup that failed (compile error,
  import error, an unwritten stub that raises at import) fails every correctness item with its reason;
* ``source``: the static scan (nothing the chapter forbids, no kernel with a reserved name);
* ``sass``: the chapter's rule on the compiled code, where it has one;
* ``speed``: the timed shapes and the chapter's speed rule;
* ``sanitizer``: compute-sanitizer's findings, only with ``--sanitize``.

A failure's message is the grader's own explanation (the report's failure lines for that criterion,
``pytest.fail(..., pytrace=False)``); a criterion that cannot be graded here is skipped with the reason
(speed without a CUDA GPU, correctness of a CUDA chapter that was only compiled, timing disturbed by
another process: re-run). The split agrees with :func:`flashtutor.grading.rules.decide`: a report that
passes passes every item, one that fails fails at least one (see :func:`outcomes`). The course's own
``pytest`` never collects these tests (its ``testpaths`` is ``tests``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..chapters import Chapter, get_chapter
from .evidence import Cause
from .rules import case_failures, clean_log, disturbed_summary

LARGE_LOGITS = "large_logits"
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
MAX_LINES = 8                # failure lines shown per item; the JSON report has every one


@dataclass(frozen=True)
class Criterion:
    """One item of a chapter's grade: ``what`` is correctness, source, sass, speed or sanitizer;
    ``shape_set`` names a correctness item's set (or :data:`LARGE_LOGITS`)."""
    what: str
    shape_set: str = ""

    @property
    def id(self) -> str:
        return f"correctness-{self.shape_set}" if self.what == "correctness" else self.what

    def __str__(self) -> str:
        return self.id


# ---------------------------------------------------------------- what is graded -------------------------
def shape_sets(ch: Chapter, device: str) -> dict[str, str]:
    """Each correctness problem the grading plans on ``device`` (its name, as a CaseResult has it) → the
    item it counts in: the first of the chapter's sets (then any other named set) that holds its shape,
    or :data:`LARGE_LOGITS`. Insertion order is the items' order."""
    from ..problems import SHAPE_SETS
    from .judge import default_check_sets, plan_checks
    own = default_check_sets(ch, device)
    order = list(own) + [s for s in SHAPE_SETS if s not in own]
    out: dict[str, str] = {}
    for p, _ in plan_checks(ch, seeds=1, device=device):
        if p.qk_std != 1.0:
            out.setdefault(p.name, LARGE_LOGITS)
            continue
        plain = p.replace(causal=False)
        out.setdefault(p.name, next((s for s in order if plain in SHAPE_SETS[s]), order[0]))
    return out


def criteria(ch: Chapter, device: str, sanitize: bool = False, sets: dict[str, str] | None = None) -> list[Criterion]:
    """The items of a chapter's grade on ``device``, in the order pytest runs them."""
    sets = shape_sets(ch, device) if sets is None else sets
    names = list(dict.fromkeys(s for s in sets.values() if s != LARGE_LOGITS))
    if LARGE_LOGITS in sets.values():
        names.append(LARGE_LOGITS)
    out = [Criterion("correctness", s) for s in names] or [Criterion("correctness", "all")]
    out.append(Criterion("source"))
    if ch.sass is not None:
        out.append(Criterion("sass"))
    if ch.time_sets:
        out.append(Criterion("speed"))
    if sanitize:
        out.append(Criterion("sanitizer"))
    return out


# ---------------------------------------------------------------- report → one outcome per criterion -----
# What this machine could not grade, a skip and not a failure: a GPU the chapter cannot run on, a GPU whose memory
# other processes hold (rules.NOT_GRADED_HERE).
HERE = (Cause.UNSUPPORTED_GPU, Cause.GRADER_MEMORY)


def setup_reason(r) -> str:
    """A failed setup in one line: 'compile error: …', 'import error: …', 'unwritten: …'."""
    first = next((ln.strip() for ln in r.error.splitlines() if ln.strip()), "")
    return f"{r.error_cause or 'error'}: {first}"


def _capped(lines: list[str], key: str) -> list[str]:
    if len(lines) <= MAX_LINES:
        return lines
    return lines[:MAX_LINES] + [f"… and {len(lines) - MAX_LINES} more (`flashtutor grade {key} --json FILE` "
                                "lists every one)"]


def _set_label(name: str) -> str:
    if name == LARGE_LOGITS:
        return "the large-logit cases (scores of std 36: exp() overflows without the running max)"
    return f"the '{name}' shape set"


def outcomes(r, ch: Chapter, crits: list[Criterion], sets: dict[str, str]) -> dict[Criterion, tuple[str, str]]:
    """(passed | failed | skipped, message) for each criterion, from a finished report ``r``.

    Every failure :func:`~flashtutor.grading.rules.decide` counts lands in exactly one kind of item: the
    setup error and the cases in the correctness items (a case of no known set in the first of them),
    forbidden source in ``source``, the SASS rule in ``sass``, timed shapes and the speed rule in
    ``speed``, compute-sanitizer's findings in ``sanitizer``. Disturbed timing is a skip ("re-run")."""
    from .rules import sass_violations
    out: dict[Criterion, tuple[str, str]] = {}
    corr = [c for c in crits if c.what == "correctness"]
    where = r.execution or r.device

    # ---- correctness, one item per shape set
    if r.error and r.error_cause in HERE:                        # not graded here (rules: "not run")
        for c in corr:
            out[c] = (SKIPPED, f"correctness ({c.shape_set}): {setup_reason(r)}")
    elif r.error:
        head = setup_reason(r)          # every item: the one-line reason; the first also the rest of the text
        rest = r.error.strip().split("\n", 1)[1:] + [clean_log(r.error_log)]
        more = "\n".join(x.strip("\n") for x in rest if x.strip())
        for i, c in enumerate(corr):
            out[c] = (FAILED, head + (f"\n{more}" if more and i == 0 else ""))
    else:
        by_set: dict[str, list] = {c.shape_set: [] for c in corr}
        for case in r.checks:
            s = sets.get(case.problem)
            by_set[s if s in by_set else corr[0].shape_set].append(case)
        for c in corr:
            cases = by_set[c.shape_set]
            bad = [x for x in cases if not x.ok and x.cause not in HERE]
            unsupported = [x for x in cases if not x.ok and x.cause in HERE]
            if bad:
                causes = ", ".join(dict.fromkeys(str(x.cause or Cause.WRONG) for x in bad))
                head = f"{len(bad)}/{len(cases)} cases of {_set_label(c.shape_set)} fail ({causes}):"
                out[c] = (FAILED, "\n".join([head] + _capped(case_failures(bad), ch.key)))
            elif unsupported:
                out[c] = (SKIPPED, f"correctness ({c.shape_set}): {unsupported[0].message.splitlines()[0]}")
            elif cases:
                out[c] = (PASSED, f"{len(cases)} cases correct")
            elif r.compile_only:
                out[c] = (SKIPPED, f"correctness ({c.shape_set}): no CUDA GPU here, so your CUDA code was only "
                                   f"compiled (for {r.arch or 'sm_90a'}), not run — grade on a GPU")
            else:
                out[c] = (SKIPPED, f"correctness ({c.shape_set}): the grading checked no case of "
                                   f"{_set_label(c.shape_set)} here ({where})")

    # ---- the static scan
    # (a file the scan could not parse fails too, as rules.decide has it: with a syntax error, unless the
    # setup's error already says so)
    def syntax(f):
        return str(f.get("what", "")).startswith("syntax error")
    forbidden = [f"{f['file']}:{f['line']}: {f['what']}" for f in r.static
                 if (f["severity"] == "forbidden" and not syntax(f)) or (syntax(f) and not r.error)]
    for c in crits:
        if c.what == "source":
            out[c] = (FAILED, "\n".join(["the static scan of your source:"] + forbidden)) if forbidden \
                else (PASSED, "")

    # ---- the compiled code
    for c in crits:
        if c.what != "sass":
            continue
        if r.error:
            out[c] = (SKIPPED, f"SASS rule: not checked — {setup_reason(r)}")
        elif not r.resources:
            why = next((w for w in r.warnings if "resources" in w), "the compiled kernels could not be read here")
            out[c] = (SKIPPED, f"SASS rule: not checked — {why}")
        else:
            bad = sass_violations(ch.sass, r.resources)
            out[c] = (FAILED, "\n".join(bad)) if bad else (PASSED, "")

    # ---- speed
    for c in crits:
        if c.what == "speed":
            out[c] = _speed(r, ch)

    # ---- compute-sanitizer
    for c in crits:
        if c.what != "sanitizer":
            continue
        res = r.sanitizer or {}
        found = any(x.get("findings") for x in res.get("tools", {}).values())
        if found:
            from .sanitize import format_findings
            out[c] = (FAILED, format_findings(res))
        elif res.get("verdict") == "clean":
            out[c] = (PASSED, res.get("summary", ""))
        else:
            out[c] = (SKIPPED, f"sanitizer: not run — {res.get('summary') or 'the grading did not run it'}")
    return out


def _speed(r, ch: Chapter) -> tuple[str, str]:
    from .rules import speed_violations
    if r.device != "cuda" or r.compile_only:
        return SKIPPED, "speed: no CUDA GPU here — grade on a GPU for speed"
    if r.error:
        return SKIPPED, f"speed: not timed — {setup_reason(r)}"
    timed = [t for t in r.timings if not t.skipped]
    if not r.timings:
        return SKIPPED, "speed: not timed in this grading"
    if not timed:
        return SKIPPED, f"speed: not timed — {r.timings[0].skipped}"
    pairs = [(cause, msg) for t in timed for cause, msg in zip(t.causes, t.messages + [""] * len(t.causes))]
    if pairs and all(cause in HERE for cause, _ in pairs):
        return SKIPPED, f"speed: {pairs[0][1] or pairs[0][0]}"
    broken = [msg or str(cause) for cause, msg in pairs]
    slow = [v for t in timed if not t.disturbed and not t.causes for v in speed_violations(ch.speed, t)]
    if broken or slow:
        lines = broken + ((["slower than the chapter's speed rule allows:"] + slow) if slow else [])
        return FAILED, "\n".join(_capped(lines, ch.key))
    disturbed = [f"{t.problem}: {t.disturbed}" for t in timed if t.disturbed]
    if disturbed:
        return SKIPPED, f"speed: {disturbed_summary(disturbed)} (" + "; ".join(disturbed[:3]) + ")"
    return PASSED, ""


# ---------------------------------------------------------------- one grading per session ----------------
@dataclass
class Graded:
    """A chapter's grading, as the pytest items read it: the report (or why there is none) and each
    criterion's outcome."""
    chapter: Chapter
    path: Path
    device: str
    sanitize: bool
    report: object = None
    error: str = ""                      # the grader itself raised (no report)
    results: dict = field(default_factory=dict)

    def outcome(self, criterion: Criterion) -> tuple[str, str]:
        if self.error:
            return FAILED, self.error
        return self.results.get(criterion, (SKIPPED, f"{criterion}: not graded on this machine"))

    def check(self, criterion: Criterion) -> None:
        """Pass, or fail / skip with the grader's explanation (never a traceback)."""
        __tracebackhide__ = True         # a skip is reported at the test's line, not here
        status, message = self.outcome(criterion)
        if status == FAILED:
            pytest.fail(message, pytrace=False)
        if status == SKIPPED:
            pytest.skip(message)


_GRADINGS: dict[tuple, Graded] = {}
_DEVICE: list[str] = []


def device() -> str:
    """Where the grading runs: cuda when this torch sees a GPU (as ``flashtutor grade`` decides)."""
    if not _DEVICE:
        import torch
        _DEVICE.append("cuda" if torch.cuda.is_available() else "cpu")
    return _DEVICE[0]


def grade_once(ch: Chapter, path: Path, dev: str, sanitize: bool) -> Graded:
    key = (ch.key, str(path), dev, sanitize)
    if key not in _GRADINGS:
        from . import grade
        g = Graded(ch, path, dev, sanitize)
        try:
            g.report = grade(ch.key, path, device=dev, progress=False, sanitize=sanitize)
        except Exception as e:  # noqa: BLE001 — the items say it, each of them
            g.error = f"the grader could not grade {path}: {type(e).__name__}: {e}"
        else:
            sets = shape_sets(ch, dev)
            g.results = outcomes(g.report, ch, criteria(ch, dev, sanitize, sets), sets)
        _GRADINGS[key] = g
    return _GRADINGS[key]


# ---------------------------------------------------------------- pytest hooks (chapters/conftest.py) -----
def pytest_addoption(parser):
    g = parser.getgroup("flashtutor", "grading a chapter's exercise (flashtutor)")
    g.addoption("--submission", metavar="FILE", default=None,
                help="grade FILE (a module with attention(q, k, v, *, causal=False)) instead of the chapter's "
                     "exercise; one chapter at a time. Also: FLASHTUTOR_SUBMISSION=FILE")
    g.addoption("--sanitize", action="store_true", default=False,
                help="also run the submission under compute-sanitizer (memcheck, racecheck, synccheck; needs a "
                     "GPU): a 'sanitizer' test. Also: FLASHTUTOR_SANITIZE=1")


def options(config) -> tuple[Path | None, bool]:
    """(--submission as a path from where pytest was started, or None; --sanitize)."""
    sub = config.getoption("submission", None) or os.environ.get("FLASHTUTOR_SUBMISSION") or None
    sanitize = bool(config.getoption("sanitize", False)) or \
        os.environ.get("FLASHTUTOR_SANITIZE", "").strip().lower() not in ("", "0", "false", "no")
    path = None
    if sub:
        path = Path(sub).expanduser()
        if not path.is_absolute():
            path = Path(config.invocation_params.dir) / path
    return path, sanitize


def pytest_generate_tests(metafunc):
    """One item per criterion for a test that asks for ``criterion`` in a module naming its ``CHAPTER``."""
    key = getattr(metafunc.module, "CHAPTER", None)
    if "criterion" not in metafunc.fixturenames or key is None:
        return
    _, sanitize = options(metafunc.config)
    crits = criteria(get_chapter(key), device(), sanitize)
    metafunc.parametrize("criterion", crits, ids=[c.id for c in crits])


def pytest_collection_modifyitems(config, items):
    mine = [it for it in items if "criterion" in getattr(it, "fixturenames", ()) and
            getattr(getattr(it, "module", None), "CHAPTER", None) is not None]
    chapters = {it.module.CHAPTER for it in mine}
    if options(config)[0] is not None and len(chapters) > 1:
        raise pytest.UsageError(f"--submission names one file, but this run collects chapters "
                                f"{', '.join(sorted(chapters))}: grade one chapter at a time, e.g. "
                                f"pytest chapters/NN_slug --submission FILE")
    if config.pluginmanager.hasplugin("timeout"):
        for it in mine:                 # the grader has its own timeouts (setup, each case, each timed shape)
            it.add_marker(pytest.mark.timeout(0))


@pytest.fixture(scope="module")
def graded(request) -> Graded:
    """The grading of the module's chapter (once per session): its exercise beside the test file, or
    --submission."""
    ch = get_chapter(request.module.CHAPTER)
    sub, sanitize = options(request.config)
    path = sub or Path(request.module.__file__).resolve().parent / ch.entry
    return grade_once(ch, path, device(), sanitize)


def pytest_terminal_summary(terminalreporter):
    """The grader's verdict of each chapter graded, in the words of ``flashtutor grade``."""
    if not _GRADINGS:
        return
    tr = terminalreporter
    tr.section("flashtutor")
    for g in _GRADINGS.values():
        r = g.report
        if r is None:
            tr.write_line(f"chapter {g.chapter.key}: not graded — {g.error}")
            continue
        line = r.headline
        tr.write_line(f"chapter {g.chapter.key} · {r.shown_path}: {line}")
