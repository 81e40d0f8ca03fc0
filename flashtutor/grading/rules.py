"""The judge's rules: from the evidence in a report to its verdict and its explanation.

Correctness cases, the static scan, the traces, the SASS rule and the timed shapes each contribute
failures; the chapter's speed rule applies to clean timings only. Timing disturbed by another process
never fails a correct submission: its verdict is "disturbed" (re-run), and a speed that passes while
disturbed is not reported as a pass either.
"""
from __future__ import annotations

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


def decide(r, ch: Chapter) -> None:
    """Fill ``r.verdict``, ``r.summary``, ``r.failures`` from the evidence already in the report."""
    r.failures, causes = [], []

    def fail(cause, message):
        causes.append(cause)
        if message and message not in r.failures:
            r.failures.append(message)

    if r.error:
        fail(r.error_cause, r.error + (f"\n{r.error_log}" if r.error_log else ""))
    for f in r.static:
        if f["severity"] == "forbidden":
            fail(Cause.FORBIDDEN, f"{f['file']}:{f['line']}: {f['what']}")
        else:
            r.warnings.append(f"{f['file']}:{f['line']}: {f['what']}") if f"{f['file']}:{f['line']}: {f['what']}" \
                not in r.warnings else None
    for msg in sass_violations(ch.sass, r.resources) if not r.error else []:
        fail(Cause.SASS, msg)
    for c in r.checks:
        if not c.ok:
            fail(c.cause or Cause.WRONG, f"{c.problem} (seed {c.seed}): {c.message}"
                 + (f"\n  worker output: {c.log}" if c.log else ""))
    slow, disturbed = [], []
    for t in r.timings:
        if t.skipped:
            continue
        for cause, msg in zip(t.causes, t.messages + [""] * len(t.causes)):
            fail(cause, msg)
        if t.disturbed:
            disturbed.append(f"{t.problem}: {t.disturbed}")
        elif not t.causes:
            slow += speed_violations(ch.speed, t)
    n_ok = sum(c.ok for c in r.checks)
    if causes:
        r.verdict = Verdict.FAIL
        uniq = []
        for c in causes:
            if str(c) not in uniq:
                uniq.append(str(c))
        if r.error and not r.checks:
            r.summary = f"{r.error_cause}: {r.error.splitlines()[0]}" if r.error_cause != Cause.COMPILE_ERROR \
                else "compile error"
        else:
            r.summary = f"{n_ok}/{len(r.checks)} correctness cases pass; failures: {', '.join(uniq)}"
        return
    if r.compile_only:
        r.verdict = Verdict.NOT_RUN
        r.summary = f"compiled for {r.arch or '?'}; no CUDA GPU here, so correctness and speed were not checked"
        return
    if slow:
        causes.append(Cause.TOO_SLOW)
        r.verdict = Verdict.FAIL
        r.summary = f"correct on all {len(r.checks)} cases but too slow: " + "; ".join(slow[:3])
        r.failures.extend(slow)
        return
    if disturbed:
        r.verdict = Verdict.DISTURBED
        r.summary = (f"correct on all {len(r.checks)} cases; timing disturbed by another process on this GPU: "
                     "re-run when the GPU is free")
        r.warnings.extend(disturbed)
        return
    r.verdict = Verdict.PASS
    r.summary = f"correct on all {len(r.checks)} cases"
    rs = [t.ratio for t in r.timings if t.ratio is not None]
    if rs:
        what = "SDPA's graph-replayed GPU time" if ch.speed.basis == "graph" else "SDPA's GPU time"
        r.summary += f"; {min(rs):.2f}–{max(rs):.2f}× {what}" if len(rs) > 1 else f"; {rs[0]:.2f}× {what}"


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
        r.verdict = Verdict.FAIL
        r.summary = f"correct on the graded cases, but compute-sanitizer found: {', '.join(causes)}"
    else:
        r.verdict = Verdict.FAIL
        r.summary += f"; compute-sanitizer found: {', '.join(causes)}"
    r.sanitizer_causes = causes
