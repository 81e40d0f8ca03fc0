"""The judge's rules: from the evidence in a report to its verdict and its explanation.

Correctness cases, the static scan, the traces, the SASS rule and the timed shapes each contribute
failures; the chapter's speed rule applies to clean timings only. Timing disturbed by another process
never fails a correct submission: its verdict is "disturbed" (re-run), and a speed that passes while
disturbed is not reported as a pass either.
"""
from __future__ import annotations

import re

from ..chapters import Chapter
from .evidence import Cause, TimingResult, Verdict


def describe_speed_rule(speed) -> str:
    """The chapter's speed rule in words ('' when speed is only reported)."""
    parts = []
    basis = " (both replayed from CUDA graphs)" if speed.basis == "graph" else ""
    if speed.max_ratio_vs_sdpa:
        parts.append(f"at most {speed.max_ratio_vs_sdpa:g}× SDPA's GPU time per call{basis} on every timed shape")
    if speed.min_speedup_vs:
        parts.append(f"at least {speed.min_speedup_vs:g}× faster than {speed.baseline} on every timed shape, "
                     "timed in the same rounds")
    if not parts:
        return ""
    return "; ".join(parts) + (f" ({speed.calibration})" if speed.calibration else "")


def speed_violations(speed, t: TimingResult) -> list[str]:
    """Messages for every way the timed shape ``t`` breaks the chapter's speed rule."""
    out = []
    lim = speed.max_ratio_vs_sdpa
    if lim and t.ratio is not None and t.ratio > lim:
        what = "SDPA's graph-replayed time" if t.basis == "graph" else "SDPA's time"
        out.append(f"{t.problem}: {t.ratio:.2f}× {what} > {lim:.2f}×")
    if speed.min_speedup_vs:
        sp = t.speedup_vs_baseline
        if sp is None:
            out.append(f"{t.problem}: the baseline {speed.baseline} was not timed")
        elif sp < speed.min_speedup_vs:
            out.append(f"{t.problem}: {sp:.2f}× faster than {speed.baseline.rsplit('.', 1)[-1]} "
                       f"< {speed.min_speedup_vs:g}× required")
    return out


def sass_violations(rule, resources: dict) -> list[str]:
    """Messages for every way the compiled kernels (``{file: {kernel: usage}}``) break a SassRule."""
    if rule is None or not resources:
        return []
    out = []
    kernels = {(f, k): u for f, ks in resources.items() for k, u in ks.items()}
    for op in rule.require:
        if not any(u.get("opcodes", {}).get(op, 0) for u in kernels.values()):
            out.append(f"no {op} instruction in the compiled SASS of {', '.join(sorted(resources))}: "
                       f"the chapter asks for {op} (tensor-core) math")
    if rule.no_spills:
        for (f, k), u in sorted(kernels.items()):
            if u.get("spill_instructions", 0) or u.get("local_bytes", 0):
                out.append(f"{f}: kernel {k} uses local memory ({u.get('spill_instructions', 0)} LDL/STL "
                           f"instructions, {u.get('local_bytes', 0)} bytes per thread): register spills or a "
                           "stack array; the chapter allows none")
    return out


# ---------------------------------------------------------------- what a verdict covers, in words
# Causes of a case whose output was never compared with the reference (the call did not finish).
NOT_COMPARED = {Cause.ERROR, Cause.COMPILE_ERROR, Cause.IMPORT_ERROR, Cause.UNSUPPORTED_GPU, Cause.ILLEGAL_ADDRESS,
                Cause.DEVICE_ASSERT, Cause.MISALIGNED, Cause.LAUNCH_FAILURE, Cause.ILLEGAL_INSTRUCTION,
                Cause.OUT_OF_MEMORY, Cause.CRASH, Cause.TIMEOUT, Cause.NOT_RUN, Cause.MALFORMED, Cause.UNWRITTEN,
                Cause.GRADER_MEMORY}
# Causes that say nothing of the learner's code: this machine could not grade it (not a failure).
NOT_GRADED_HERE = {str(Cause.UNSUPPORTED_GPU), str(Cause.GRADER_MEMORY)}
# Lines of a worker's log that are the tracer's, not the learner's (torch's profiler announces itself) ...
_PROFILER_LINE = r"USDT:|\S*\s*\S*SyncActivityProfilerHandler|STAGE:\d|\[W\d+ .*profiler"
# ... and the C library's allocator finding its heap corrupted as the process ends (a write past a buffer, seen
# late: the message names no kernel and no index, so the verdict says what it means instead), and the list of
# extension modules Python prints after a fatal signal.
_ALLOCATOR_LINE = (r"(double free or corruption|free\(\): |malloc\(\): |realloc\(\): |munmap_chunk\(\): |"
                   r"malloc_consolidate\(\): |corrupted (size vs\. prev_size|double-linked list)|"
                   r"\*\*\* (stack smashing|buffer overflow) detected)")
_LOG_NOISE = re.compile(rf"^\s*({_PROFILER_LINE}|{_ALLOCATOR_LINE}|Extension modules: )")
_ALLOCATOR = re.compile(rf"^\s*{_ALLOCATOR_LINE}", re.M)
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def compared(checks) -> list:
    """The cases whose output was compared with the reference (the others ended before an output existed):
    an error was measured (even ∞: nothing written), or the cause is one only a comparison finds."""
    return [c for c in checks if c.ok or c.cause not in NOT_COMPARED or c.err == c.err]


def has_speed_rule(speed) -> bool:
    get = speed.get if isinstance(speed, dict) else lambda k: getattr(speed, k, None)
    return bool(get("max_ratio_vs_sdpa") or get("min_speedup_vs"))


def _base(name: str) -> str:
    return " ".join(str(name).split()[:4])          # "B2 H3 S37 D64 causal logits×36" -> "B2 H3 S37 D64"


def sets_of(problem_names, prefer: str = "") -> list[str]:
    """The named shape sets whose every shape is among ``problem_names`` (the largest ones: 'small', not
    also 'short', which it contains), in the order the course lists them. Of sets with the same shapes,
    ``prefer`` (the one this kind of run uses, e.g. 'emulated') or else the first."""
    names = {_base(n) for n in problem_names}
    if not names:
        return []
    from ..problems import SHAPE_SETS
    full = {s: frozenset(p.name for p in ps) for s, ps in SHAPE_SETS.items() if {p.name for p in ps} <= names}
    out, seen = [], {}
    for s, ps in full.items():
        if any(ps < other for other in full.values()):
            continue
        if ps in seen:
            if s == prefer:
                out[out.index(seen[ps])] = s
                seen[ps] = s
            continue
        seen[ps] = s
        out.append(s)
    return out


def run_set(execution: str) -> str:
    """The shape set a run of this kind uses by default (the name to prefer among sets of the same shapes)."""
    return {"emulated": "emulated", "interpreted": "cpu", "cpu": "cpu"}.get(execution, "")


def the_sets(sets) -> str:
    """['seed', 'small', 'odd'] -> "the seed, small and odd sets"."""
    sets = list(sets)
    if not sets:
        return ""
    words = sets[0] if len(sets) == 1 else ", ".join(sets[:-1]) + " and " + sets[-1]
    return f"the {words} set" + ("s" if len(sets) > 1 else "")


def _where(r) -> str:
    """Where the learner's code ran, in words ("on the GPU", "interpreted on the CPU", ...)."""
    from ..env import EXECUTION
    ex = r.execution or ("gpu" if r.device == "cuda" else "")
    return EXECUTION.get(ex, ex)


def scope(r, ch: Chapter) -> str:
    """What the verdict covers (shown in brackets after it): where the code ran, and what was not graded."""
    from ..env import needs_arch
    ex = r.execution or ("gpu" if r.device == "cuda" else "")
    where = _where(r)
    timed = [t for t in r.timings if not t.skipped and t.times]
    if r.verdict == Verdict.NOT_RUN:
        arch = needs_arch(ch)
        full = r.error_cause == Cause.GRADER_MEMORY or any(c.cause == Cause.GRADER_MEMORY for c in r.checks) \
            or any(Cause.GRADER_MEMORY in t.causes for t in r.timings)
        if full:
            ok = sum(c.ok for c in r.checks)
            return (f"not graded here — {ok} of {len(r.checks)} cases checked, all passed, before the GPU ran out "
                    "of memory" if ok else "not graded here — the GPU ran out of memory")
        if r.error_cause == Cause.UNSUPPORTED_GPU or (arch and r.device == "cuda"):
            return f"not run — chapter {ch.key} needs {arch or 'sm_90'} (H100/H200)"
        need = f"a Hopper GPU ({arch}: H100/H200)" if arch else "a CUDA GPU"
        return f"compiled only — correctness and speed need {need}"
    if r.verdict == Verdict.DISTURBED:
        return f"correctness {where}; speed not graded: timing disturbed"
    if r.verdict == Verdict.FAIL:
        if r.error and not r.checks:
            return "nothing ran"
        return where
    # a pass
    if ex == "gpu":
        if timed:
            return ("correctness and speed, on the GPU" if has_speed_rule(ch.speed) else
                    "correctness on the GPU; speed measured, no speed rule in this chapter")
        skipped = next((t.skipped for t in r.timings if t.skipped), "")
        why = skipped or "--no-timing"
        if not has_speed_rule(ch.speed):
            return f"correctness on the GPU; speed not measured: {why}"
        return f"correctness only, on the GPU — speed not graded: {why}"
    if ex == "emulated":
        return "correctness only, emulated on the CPU — no timing; grade on a GPU for speed"
    if ex in ("interpreted", "cpu"):
        return f"correctness only, {where} — speed not graded: no GPU"
    return "correctness only" if not timed else ""


def partial(r) -> bool:
    """A pass that leaves the chapter's speed ungraded (correctness only): never shown as a plain PASS."""
    if r.verdict != Verdict.PASS:
        return False
    ex = r.execution or ("gpu" if r.device == "cuda" else "")
    if ex != "gpu":
        return True
    timed = [t for t in r.timings if not t.skipped and t.times]
    return has_speed_rule(r.speed_rule) and not timed


def clean_log(log: str) -> str:
    """A worker's output without the tracer's own lines and the allocator's."""
    return "\n".join(line for line in (log or "").splitlines() if not _LOG_NOISE.match(line)).strip()


def heap_corrupted(log: str) -> bool:
    """Whether the C library's allocator said that the heap was corrupted (a write past a buffer)."""
    return bool(_ALLOCATOR.search(log or ""))


def _case_name(c) -> str:
    if not c.problem or str(c.problem) == "None":
        return ""
    return f"{c.problem} (seed {c.seed})" if c.seed is not None else str(c.problem)


def _case_short(c) -> str:
    """A case in a list of cases: its problem and its seed ("B2 H3 S37 D64 causal seed 7")."""
    return f"{c.problem} seed {c.seed}" if c.seed is not None else str(c.problem)


# ---------------------------------------------------------------- what the failing cases share
_PROBLEM = re.compile(r"^B(\d+) H(\d+) S(\d+) D(\d+)( causal)?(?: logits×(\S+))?")


def traits(name) -> dict | None:
    """What a case's problem name says about it: B, H, S, D, causal, large logits (None: not a problem name)."""
    m = _PROBLEM.match(str(name or ""))
    if not m:
        return None
    B, H, S, D = (int(m.group(i)) for i in range(1, 5))
    return {"B": B, "H": H, "S": S, "D": D, "causal": bool(m.group(5)), "large logits": bool(m.group(6))}


# (words, test): the properties a set of failing cases can share, most telling first. Of two that both hold,
# the second of a pair marked as implied is left out ("S not a multiple of 16" implies "... of 64").
_SHARED = (
    ("causal", lambda t: t["causal"]),
    ("not causal", lambda t: not t["causal"]),
    ("large logits", lambda t: t["large logits"]),
    ("S not a multiple of 16", lambda t: t["S"] % 16 != 0),
    ("S not a multiple of 64", lambda t: t["S"] % 64 != 0),
    ("B > 1", lambda t: t["B"] > 1),
    ("H > 1", lambda t: t["H"] > 1),
    ("B > 1 or H > 1", lambda t: t["B"] * t["H"] > 1),
    ("D = 128", lambda t: t["D"] == 128),
    ("D = 64", lambda t: t["D"] == 64),
)
_IMPLIED = {"S not a multiple of 64": "S not a multiple of 16", "B > 1 or H > 1": ("B > 1", "H > 1")}


def shared_by_failures(checks) -> str:
    """One line: what every failing case has and some passing case lacks (so every case without it passes),
    from the problems' names; the last rows when every failure is a tail. '' when they share nothing, when
    nothing fails, or nothing passes."""
    cases = [(c, traits(c.problem)) for c in checks]
    cases = [(c, t) for c, t in cases if t is not None]
    bad = [t for c, t in cases if not c.ok]
    good = [t for c, t in cases if c.ok]
    if not bad or not good:
        return ""
    found = [w for w, test in _SHARED if all(test(t) for t in bad) and not all(test(t) for t in good)]
    for weaker, stronger in _IMPLIED.items():
        stronger = (stronger,) if isinstance(stronger, str) else stronger
        if weaker in found and any(x in found for x in stronger):
            found.remove(weaker)
    tails = all(str(c.cause) == str(Cause.TAIL) for c, _ in cases if not c.ok)
    if not found and not tails:
        return ""
    line = f"the {len(bad)} failing case{'s' if len(bad) > 1 else ''} of {len(cases)}"
    if found:
        line += (f" share: {', '.join(found)} — every case without "
                 + ("it" if len(found) == 1 else "one of these") + " passes")
    if tails:
        line += ("; " if found else ": ") + "each fails only in its last rows (past the last whole block)"
    return line[0].upper() + line[1:] + "."


LARGE_LOGITS_HINT = (
    "Only the large-logit cases fail, and every ordinary case passes: the exponentials overflow. exp(s) is inf in "
    "fp32 above s ≈ 88.7 (so is Triton's exp2(s·log2 e): 2^128), and a value cast to fp16 is inf above 65504 "
    "(e^s for s > 11.1); inf/inf or inf − inf is then NaN. Subtract the row's running max before exponentiating "
    "(softmax(s) = softmax(s − max s), so every p ≤ 1), and cast to fp16 only what stays in its range "
    "(p after the max is subtracted; the output after dividing by the sum).")


def large_logits_only(checks) -> bool:
    """The same kernel right on the ordinary cases and wrong only on large-logit ones: every failing case has
    large logits and its output was compared (no crash), and at least one ordinary case passed."""
    seen = {id(c) for c in compared(checks)}
    bad = [c for c in checks if not c.ok]
    if not bad or not all(id(c) in seen and (traits(c.problem) or {}).get("large logits") for c in bad):
        return False
    return any(c.ok and traits(c.problem) is not None and not traits(c.problem)["large logits"] for c in checks)


def stub_on_large_logits(checks) -> None:
    """The exercise's stub (a loop over the keys that adds nothing) stores 0/0 everywhere: on the ordinary cases
    check.py can say so (no exp can overflow there: cause unwritten); on a large-logit case an overflow could
    explain the same all-NaN output, and on a causal S = 1 a mask off by one. When every ordinary case is that
    stub's and such a case is all NaN too, the same cause explains it: it is relabelled (in place) as the stub's."""
    from ..check import ALL_NAN
    named = [(c, traits(c.problem)) for c in checks]
    # Ambiguous alone: large logits (an overflow), and a causal S = 1 (row 0 only: a mask off by one empties it).
    plain = [c for c, t in named if t is not None and not t["large logits"] and not (t["causal"] and t["S"] == 1)]
    if not plain or not all(not c.ok and str(c.cause) == str(Cause.UNWRITTEN)
                            and (c.message or "").startswith(ALL_NAN) for c in plain):
        return
    for c, t in named:
        if t is not None and not c.ok and (c.message or "").startswith(ALL_NAN) and str(c.cause) == str(Cause.NAN):
            c.cause = Cause.UNWRITTEN
            c.message = (f"{ALL_NAN}, as on every ordinary case, where nothing else explains it: the same 0/0 — no key "
                         "was ever added. Is the loop over the keys still the TODO stub (or does it never run)?")


def case_failures(checks) -> list[str]:
    """One message per distinct failure: cases that failed the same way (the same message, or one that
    differs only in its numbers) are one entry, with how many and which (problem and seed each). When only
    the large-logit cases fail and every ordinary one passes, the entry of those failures says what that means."""
    groups: dict[tuple, list] = {}
    for c in checks:
        if c.ok:
            continue
        msg = (c.message or "").strip() or str(c.cause or Cause.WRONG)
        groups.setdefault((str(c.cause), _NUMBER.sub("#", msg)), []).append(c)
    hint = large_logits_only(checks)
    out = []
    for cs in groups.values():
        first = cs[0]
        msg = (first.message or "").strip() or str(first.cause or Cause.WRONG)
        if len(cs) == 1:
            name = _case_name(first)
            text = f"{name}: {msg}" if name else msg
        else:
            names = list(dict.fromkeys(_case_short(c) for c in cs if c.problem and str(c.problem) != "None"))
            shown = ", ".join(names[:4]) + (f", and {len(names) - 4} more" if len(names) > 4 else "")
            same = all((c.message or "").strip() == (first.message or "").strip() for c in cs)
            text = f"{msg} ({len(cs)} cases" + (f": {shown}" if shown else "")
            if not same:
                text += "; the numbers are from the first" + (f", {_case_short(first)}" if first.problem else "")
            text += ")"
        if hint:
            text += "\n  " + LARGE_LOGITS_HINT
            hint = False
        log = clean_log(first.log)
        if log and log not in text:
            text += f"\n  worker output: {log}"
        out.append(text)
    return out


def _pass_summary(r, ch: Chapter) -> str:
    checked = list(r.checks)
    s = f"correct on all {len(checked)} case{'' if len(checked) == 1 else 's'}"
    sets = sets_of((c.problem for c in checked), run_set(r.execution)) if checked else []
    if sets:
        s += f" of {the_sets(sets)}"
    timed = [t for t in r.timings if not t.skipped and t.times]
    rs = [t.ratio for t in timed if t.ratio is not None]
    if rs:
        what = "SDPA's graph-replayed GPU time" if ch.speed.basis == "graph" else "SDPA's GPU time"
        tsets = sets_of(t.problem for t in timed)
        s += f"; timed on {the_sets(tsets)}" if tsets else f"; {len(timed)} shape{'s' if len(timed) > 1 else ''} timed"
        s += ": " + (f"{min(rs):.2f}–{max(rs):.2f}× {what}" if len(rs) > 1 else f"{rs[0]:.2f}× {what}")
        if ch.speed.max_ratio_vs_sdpa:
            s += f" (at most {ch.speed.max_ratio_vs_sdpa:g}× allowed)"
    sp = [t.speedup_vs_baseline for t in timed if t.speedup_vs_baseline]
    if sp and ch.speed.min_speedup_vs:
        base = (ch.speed.baseline or "the baseline").rsplit(".", 1)[-1]
        s += (f"; {min(sp):.1f}–{max(sp):.1f}×" if len(sp) > 1 else f"; {sp[0]:.1f}×") + \
             f" faster than {base} (at least {ch.speed.min_speedup_vs:g}× required)"
    return s


def _is_syntax_finding(f: dict) -> bool:
    return str(f.get("what", "")).startswith("syntax error")


def decide(r, ch: Chapter) -> None:
    """Fill ``r.verdict``, ``r.scope``, ``r.summary``, ``r.failures`` from the evidence already in the report."""
    r.failures, causes = [], []
    r.shared = shared_by_failures([c for c in r.checks if str(c.cause) not in NOT_GRADED_HERE])

    def fail(cause, message):
        causes.append(cause)
        if message and message not in r.failures:
            r.failures.append(message)

    if r.error:
        log = clean_log(r.error_log)
        fail(r.error_cause, r.error + (f"\n{log}" if log else ""))
    for f in r.static:
        text = f"{f['file']}:{f['line']}: {f['what']}"
        if _is_syntax_finding(f):          # the scan could not read the file: the error says so already
            if not r.error:
                fail(Cause.IMPORT_ERROR, text)
        elif f["severity"] == "forbidden":
            fail(Cause.FORBIDDEN, text)
        elif text not in r.warnings:
            r.warnings.append(text)
    for msg in sass_violations(ch.sass, r.resources) if not r.error else []:
        fail(Cause.SASS, msg)
    stub_on_large_logits(r.checks)
    for c in r.checks:
        if not c.ok:
            causes.append(c.cause or Cause.WRONG)
    for msg in case_failures(r.checks):
        if msg not in r.failures:
            r.failures.append(msg)
    slow, disturbed = [], []
    for t in r.timings:
        if t.skipped:
            continue
        for cause, msg in zip(t.causes, t.messages + [""] * len(t.causes)):
            fail(cause, msg)
        # A timed output that re-checks wrong fails whatever the timing: a disturbance never turns it into
        # "re-run" (which would invite running a cheat again until the timing is clean).
        if not t.recheck_ok and Cause.TIMED_OUTPUT_WRONG not in t.causes:
            fail(Cause.TIMED_OUTPUT_WRONG, f"{t.problem}: the output of a timed call is wrong"
                 + (f": {t.recheck_message}" if t.recheck_message else ""))
        if t.disturbed:
            disturbed.append(f"{t.problem}: {t.disturbed}")
        elif not t.causes:
            slow += speed_violations(ch.speed, t)
    n_ok = sum(c.ok for c in r.checks)
    if causes and set(map(str, causes)) <= NOT_GRADED_HERE:
        # the GPU cannot run this chapter, or the grader found its memory taken: not graded here, not a failure
        first = r.error or next((c.message for c in r.checks if c.message and not c.ok), "") \
            or next((m for t in r.timings for m in t.messages), "")
        r.summary = first.splitlines()[0] if first else "this GPU cannot run the chapter's kernels"
        r.verdict = Verdict.NOT_RUN
        r.scope = scope(r, ch)
        return
    if causes:
        r.verdict = Verdict.FAIL
        uniq = []
        for c in causes:
            if str(c) not in uniq:
                uniq.append(str(c))
        if r.error and not r.checks:
            r.summary = f"{r.error_cause}: {r.error.splitlines()[0]}" if r.error_cause != Cause.COMPILE_ERROR \
                else "compile error"
        elif not r.checks:           # found before anything ran (the scan, the SASS): say what, not "0/0 cases"
            more = len(r.failures) - 1
            r.summary = f"{uniq[0]}: {r.failures[0].splitlines()[0]}" + (f" (and {more} more)" if more > 0 else "")
        else:
            r.summary = f"{n_ok}/{len(r.checks)} correctness cases pass; failures: {', '.join(uniq)}"
        r.scope = scope(r, ch)
        return
    if r.compile_only:
        r.verdict = Verdict.NOT_RUN
        name = __import__("pathlib").Path(r.path).name
        if r.arch and ch.sass is not None and r.resources:
            r.summary = f"compiled for {r.arch}; the SASS rule is met"
        elif r.arch:
            r.summary = f"compiled for {r.arch}; registers and spills listed below"
        else:
            r.summary = f"no CUDA source (.cu) found for {name}: nothing to compile"
        r.scope = scope(r, ch)
        return
    if slow:
        causes.append(Cause.TOO_SLOW)
        r.verdict = Verdict.FAIL
        r.summary = f"correct on all {len(r.checks)} cases but too slow: " + "; ".join(slow[:3])
        r.failures.extend(slow)
        r.scope = scope(r, ch)
        return
    if disturbed:
        r.verdict = Verdict.DISTURBED
        r.summary = f"correct on all {len(r.checks)} cases; {disturbed_summary(disturbed)}"
        r.warnings.extend(disturbed)
        r.scope = scope(r, ch)
        return
    r.verdict = Verdict.PASS
    r.summary = _pass_summary(r, ch)
    r.scope = scope(r, ch)


def disturbed_summary(whys: list[str]) -> str:
    """What a disturbed timing says, by what disturbed it: another process NVML saw on the GPU, or rounds that
    disagreed with no other process seen (then the cause may be this machine's host or the calls themselves)."""
    if any("other process" in w for w in whys):
        return "timing disturbed by another process on this GPU: re-run when the GPU is free"
    return ("timing not steady: the timed rounds disagreed after three tries, and no other process was seen on the "
            "GPU: re-run; if it recurs, look for work in attention() whose GPU time varies from call to call "
            "(allocations, host synchronisation, a first-use setup repeated)")


SANITIZER_CAUSE = {"memcheck": Cause.MEMORY_ERROR, "racecheck": Cause.RACE, "synccheck": Cause.BARRIER}


def fold_sanitizer(r, result: dict) -> None:
    """compute-sanitizer's findings into the verdict: any finding fails the grade."""
    from .sanitize import format_findings
    r.sanitizer = result
    ran = [t for t, x in result.get("tools", {}).items() if x.get("ran")]
    r.method.append(f"compute-sanitizer on small shapes: {', '.join(ran) or 'not run'} — {result.get('summary', '')}")
    found = [(t, f) for t, x in result.get("tools", {}).items() for f in x.get("findings", [])]
    if not found:
        return
    causes = sorted({str(SANITIZER_CAUSE.get(t, t)) for t, _ in found})
    r.failures.insert(0, format_findings(result))
    if r.verdict == Verdict.PASS:
        r.summary = f"correct on the graded cases, but compute-sanitizer found: {', '.join(causes)}"
    else:
        r.summary += f"; compute-sanitizer found: {', '.join(causes)}"
    r.verdict = Verdict.FAIL
    r.scope = _where(r)
    r.sanitizer_causes = causes
