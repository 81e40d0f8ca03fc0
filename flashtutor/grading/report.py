"""A grading report: the evidence and the verdict, rendered for a terminal (rich), a notebook (HTML table
and a bar chart of GPU time per call, yours vs SDPA) and machines (JSON). It decides nothing: the rules
that fill ``verdict`` and ``failures`` are in :mod:`.rules`."""
from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from dataclasses import dataclass, field

from .evidence import Cause, CaseResult, TimingResult, Verdict

VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "not run": "bold yellow", "disturbed": "bold yellow"}
PARTIAL_STYLE = "bold cyan"           # a pass of correctness only: never the green of a full pass
HTML_COLOR = {"pass": "#1a7f37", "fail": "#cf222e", "not run": "#9a6700", "disturbed": "#9a6700"}
PARTIAL_COLOR = "#0969da"
# The command's exit codes: 0 pass (of what could be graded here: the verdict's brackets say what), 1 fail (a
# syntax error or a file without attention() included), 2 usage error (unknown chapter, missing file, not a .py
# file, bad option), 3 not graded here (no GPU and no emulation for this chapter, needs sm_90, timing
# disturbed: re-run), 4 the grader itself failed.
EXIT_CODES = {Verdict.PASS: 0, Verdict.FAIL: 1, Verdict.NOT_RUN: 3, Verdict.DISTURBED: 3}
EXIT_USAGE = 2
EXIT_INTERNAL = 4


@dataclass
class Report:
    chapter: str
    title: str
    path: str
    device: str
    excluded: str = ""
    speed_rule: dict = field(default_factory=dict)
    sass_rule: object = None
    verdict: Verdict = Verdict.FAIL
    scope: str = ""                     # what the verdict covers: "correctness only, interpreted on the CPU — …"
    summary: str = ""
    env: dict = field(default_factory=dict)
    arch: str = ""
    resources: dict = field(default_factory=dict)
    checks: list[CaseResult] = field(default_factory=list)
    timings: list[TimingResult] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # What every failing case has and the passing ones lack ("causal", "D = 128", ...): one line above the
    # correctness table (:func:`.rules.shared_by_failures`); "" when they share nothing.
    shared: str = ""
    warnings: list[str] = field(default_factory=list)
    static: list[dict] = field(default_factory=list)
    trace_findings: list[str] = field(default_factory=list)
    method: list[str] = field(default_factory=list)       # what was checked (only what ran)
    unchecked: list[str] = field(default_factory=list)    # what was not, and why
    sanitizer: dict = field(default_factory=dict)
    sanitizer_causes: list[str] = field(default_factory=list)
    error: str = ""                     # grading stopped before any case ran (compile, import, setup)
    error_cause: Cause | None = None
    error_log: str = ""
    compile_only: bool = False
    # How the learner's code ran: "gpu", "interpreted" (Triton's interpreter on the CPU), "cpu" (plain PyTorch
    # on the CPU), "emulated" (CUDA kernels built for the CPU), "compiled only" (nothing ran).
    execution: str = ""
    seconds: float = 0.0
    # Where the time went, in seconds: "sources" (scan, the judge's compile), "worker" (spawn, import, the
    # learner's set-up and compile), "checks", "timing" — what makes a grading slow, in its own report — and
    # "gpu wait", the part of checks and timing spent waiting for other gradings to leave the GPU.
    phases: dict = field(default_factory=dict)
    # The most GPU memory the judge and its worker held, in GiB ({"judge_gib", "worker_gib"}; grading/memory.py).
    memory: dict = field(default_factory=dict)

    # ------------------------------------------------------------------ filled by the judge
    def set_error(self, cause: Cause, message: str, log: str = "") -> None:
        self.error, self.error_cause, self.error_log = message, cause, log

    def add_trace_findings(self, findings) -> None:
        for f in findings:
            if f.message not in self.trace_findings:
                self.trace_findings.append(f.message)

    @property
    def forbidden(self) -> bool:
        return any(f["severity"] == "forbidden" and not str(f.get("what", "")).startswith("syntax error")
                   for f in self.static)

    @property
    def shown_path(self) -> str:
        """The submission's path as a reader should see it: relative to the course's folder when inside it."""
        from pathlib import Path

        from ..chapters import ROOT
        try:
            return str(Path(self.path).resolve().relative_to(ROOT))
        except ValueError:
            return self.path

    def __repr__(self) -> str:          # what a notebook stores beside the HTML: one line, not every field
        return f"<flashtutor report: chapter {self.chapter}, {self.shown_path}: {self.headline}>"

    @property
    def passed(self) -> bool:
        return self.verdict == Verdict.PASS

    @property
    def partial(self) -> bool:
        """A pass of correctness only (the chapter's speed not graded here): shown apart from a full pass."""
        from .rules import partial
        return partial(self)

    @property
    def label(self) -> str:
        """The verdict with what it covers: "PASS (correctness only, interpreted on the CPU — …)"."""
        return str(self.verdict).upper() + (f" ({self.scope})" if self.scope else "")

    @property
    def headline(self) -> str:
        """The one line that says it all: the verdict, what it covers, what happened."""
        return self.label + (f" — {self.summary}" if self.summary else "")

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 1)

    @property
    def causes(self) -> set[str]:
        """Every cause the report names (cases, timed shapes, the scan, the setup, the sanitizer)."""
        out = {str(c.cause) for c in self.checks if not c.ok and c.cause}
        out |= {str(x) for t in self.timings for x in t.causes}
        if self.forbidden:
            out.add(str(Cause.FORBIDDEN))
        if self.error_cause:
            out.add(str(self.error_cause))
        if self.summary.startswith("correct on all") and "too slow" in self.summary:
            out.add(str(Cause.TOO_SLOW))
        out |= set(self.sanitizer_causes)
        if self.verdict == Verdict.DISTURBED:
            out.add(str(Cause.DISTURBED))
        return out

    # ------------------------------------------------------------------ what was checked, in words
    def describe(self, ch) -> None:
        """Fill ``method`` (what was checked: only what ran) and ``unchecked`` (what was not, and why)."""
        from ..env import needs_arch
        from .rules import compared, describe_speed_rule, run_set, sets_of, the_sets
        if not self.env:
            try:
                from ..env import describe as machine
                self.env = machine()
            except Exception:  # noqa: BLE001 — the header is optional
                pass
        m, u = [], []
        ex = self.execution or ("gpu" if self.device == "cuda" else "")
        syntax = any(str(f.get("what", "")).startswith("syntax error") for f in self.static)
        ran = compared(self.checks)
        checked_sets = sets_of((c.problem for c in ran), run_set(ex)) if ran else []
        if ran:
            from ..check import RATIO
            shapes = sorted({c.problem for c in ran})
            on = f" of {the_sets(checked_sets)}" if checked_sets else ""
            short = len(self.checks) - len(ran)
            m.append(f"correctness: {_n(len(ran), 'case')} on {_n(len(shapes), 'problem')}{on}, fresh random inputs "
                     "each (seeds listed in the JSON), outputs pre-filled with NaN, inputs compared before and after"
                     + (f"; {short} more ended before their output could be compared" if short else ""))
            if getattr(ch, "mode", "forward") == "backward":
                base = "SDPA's own fp16 backward" if self.device == "cuda" else \
                    "an fp32 emulation of FlashAttention-2's fp16 roundings (the CPU's stand-in for SDPA's backward)"
                m.append("each case: backward(q, k, v, o, lse, do) on the grader's own o and lse, then forward(q, k, v) "
                         "on the same inputs (in that order: nothing a forward leaves behind serves the backward)")
                m.append(f"tolerance, per row of o, dq (query rows), dk, dv (key rows): max |yours − ref| ≤ {RATIO:g} × "
                         f"{base}'s error on that row + 1 fp16 ulp of the row's max |ref| (+ for dq and dk the most "
                         "that o's fp16 rounding moves delta); lse within 2^-12 + 2^-16·|lse|; reference in fp64; "
                         "NaN/Inf or a never-written element anywhere fails")
            else:
                ref = "fp32 (TF32 off) on the GPU" if self.device == "cuda" else "fp64 on the CPU"
                m.append(f"tolerance, per output row: max |out − ref| ≤ {RATIO:g} × SDPA's fp16 error on that row + 1 "
                         f"fp16 ulp of the row's max |ref|; reference in {ref}; NaN/Inf anywhere fails")
        timed = [t for t in self.timings if not t.skipped]
        if timed:
            basis = "replayed from CUDA graphs" if timed[0].basis == "graph" else "queued back to back"
            tsets = sets_of(t.problem for t in timed)
            m.append(f"speed{' on ' + the_sets(tsets) if tsets else ''}: GPU time per call, {basis} behind a gate only "
                     "the grader opens, timed with the grader's own CUDA events in its own process (slope between two "
                     "batch sizes, median of rounds with p10–p90); inputs fresh and out of L2 for every call; yours and "
                     "SDPA alternately, both traced; SDPA's backend pinned and named; the host's cost per call shown "
                     "beside it")
            rule = describe_speed_rule(ch.speed)
            m.append(f"speed rule: {rule}" if rule else "speed rule: none in this chapter — speed is reported, not graded")
            m.append("timed calls: outputs of secretly chosen calls re-checked, their inputs verified unchanged; "
                     "faster than 0.9× the roofline floor (from the GPU's datasheet peaks) fails")
        if ch.anticheat and not syntax:
            m.append("source: your files (and the local modules they import) read for library attention/matmul/"
                     "softmax calls, imports of the grader or the course's kernels")
        if self.checks and ch.anticheat and ran:
            if self.device == "cuda":
                m.append("every call traced (CUPTI): only kernels compiled from your files (their names and, for "
                         "CUDA, their registers as the grader compiles your source), copies and fills may run")
            else:
                m.append("every call traced (PyTorch's profiler): library attention, matmul and softmax ops may not run")
        if self.checks:
            m.append("isolation: your code runs in a worker process; the inputs, references, timing events and the "
                     "verdict live in the grader's process, which never runs your code")
        if getattr(self, "sass_rule", None) and self.resources:
            r = self.sass_rule
            what = ([f"{', '.join(r.require)} instructions present"] if r.require else []) + \
                   (["no local-memory instructions (LDL/STL: spills or stack arrays)"] if r.no_spills else [])
            m.append("compiled code (SASS of the cubin the grader compiled, with or without a GPU): " + "; ".join(what))
        elif self.resources:
            m.append(f"compiled: your CUDA sources, with NVRTC for {self.arch or 'this GPU'} (registers, shared memory "
                     "and spills listed; this chapter asks nothing of the SASS)")
        # what was not checked
        if self.error and not self.checks:
            u.append(f"correctness and speed: grading stopped before the first case ({self.error_cause or 'error'})")
        elif self.compile_only:
            arch = needs_arch(ch)
            why = next((w.split(": ", 1)[1] for w in self.warnings if w.startswith("not run on this CPU: ")), "")
            u.append("correctness and speed: nothing ran — " + (why or (f"chapter {ch.key} needs {arch} (H100/H200)"
                     if arch else "no CUDA GPU here")) + " (`flashtutor doctor` says what this machine can do)")
        elif self.checks and not ran:
            u.append("correctness: no case got as far as an output to compare")
        if ran and not timed:
            skipped = next((t.skipped for t in self.timings if t.skipped), "")
            if ex != "gpu":
                u.append("speed: not timed — nothing is timed without a GPU")
            elif skipped:
                u.append(f"speed: not timed — {skipped}")
            else:
                u.append("speed: not timed (--no-timing)")
        if ran:
            own = ch.check_sets
            missing = [s for s in own if s not in checked_sets]
            if missing and checked_sets and self.device != "cuda":
                u.append(f"shapes: only {the_sets(checked_sets)} (tiny shapes) runs on a CPU; the chapter's "
                         f"{', '.join(missing)} sets are checked on a GPU")
            elif missing and checked_sets:
                u.append(f"shapes: the chapter's {', '.join(missing)} set{'s' if len(missing) > 1 else ''} "
                         "not checked in this run (--sets)")
        if ch.excluded:
            u.append(f"not graded in this chapter: {ch.excluded}")
        self.method = m + [x for x in self.method if x.startswith("compute-sanitizer")]
        self.unchecked = u

    # ------------------------------------------------------------------ outputs
    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("checks", "timings", "sass_rule")}
        d["verdict"] = str(self.verdict)
        d["headline"] = self.headline
        d["error_cause"] = str(self.error_cause) if self.error_cause else ""
        d["checks"] = [c.to_dict() for c in self.checks]
        d["timings"] = [t.to_dict() for t in self.timings]
        d["sass_rule"] = self.sass_rule.__dict__ if self.sass_rule else None
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), indent=kw.pop("indent", 1), default=str, **kw)

    def save_json(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.to_json())

    def _check_rows(self):
        """One row per problem: cases passed, and error vs allowed for its tightest case."""
        rows: dict[str, dict] = {}
        for c in self.checks:
            r = rows.setdefault(c.problem, {"cases": 0, "ok": 0, "err": math.nan, "bound": math.nan,
                                            "margin": -math.inf, "cause": ""})
            r["cases"] += 1
            r["ok"] += bool(c.ok)
            e, b = c.err, c.bound
            m = e / b if (e == e and b == b and b) else (math.inf if e == math.inf else -math.inf)
            if m > r["margin"]:
                r.update(margin=m, err=e, bound=b)
            if not c.ok and not r["cause"]:
                r["cause"] = str(c.cause or "wrong")
        return rows

    def _timing_columns(self) -> list:
        rows = [t for t in self.timings if t.times]
        names = [n for n in ("learner", "reference", "baseline", "sdpa") if any(n in t.times for t in rows)]
        label = {"learner": "yours", "reference": "reference", "baseline": "baseline", "sdpa": "SDPA"}
        cols = [("problem", lambda t, fmt: t.problem)]
        for n in names:
            cols.append((f"{label[n]} µs", lambda t, fmt, n=n: fmt(t.times[n]) if n in t.times else ""))
        cols.append(("yours / SDPA", lambda t, fmt: _fmt_ratio(t.ratio) if t.ratio is not None else "—"))
        if any(t.speedup_vs_baseline for t in rows):
            cols.append(("speed-up vs baseline", lambda t, fmt: f"{t.speedup_vs_baseline:.1f}×"
                         if t.speedup_vs_baseline else ""))
        cols.append(("host µs/call (yours, SDPA)", lambda t, fmt: _fmt_host(t)))
        cols.append(("% of floor", lambda t, fmt: _fmt_pct(t.pct_floor.get("learner", math.nan))))
        cols.append(("backend", lambda t, fmt: t.backend))
        return cols

    def env_line(self) -> str:
        """The header: the machine (only what exists) and how the code ran when that was not on the GPU."""
        from ..env import format_env
        return format_env(self.env or {}, self.execution)

    def _untimed(self) -> dict[str, list[str]]:
        """Shapes without a time, grouped by why (one line for "correctness failed first", not one per shape)."""
        out: dict[str, list[str]] = {}
        for x in self.timings:
            if not x.times and (x.messages or x.skipped):
                out.setdefault(f"not timed — {x.skipped}" if x.skipped else x.messages[0], []).append(x.problem)
        return out

    def _style(self) -> str:
        return PARTIAL_STYLE if self.partial else VERDICT_STYLE.get(str(self.verdict), "bold")

    def __rich__(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        parts = []
        head = Text.assemble((self.label, self._style()), (f" — {self.summary}" if self.summary else ""), "\n",
                             f"chapter {self.chapter} — {self.title} · ", (self.shown_path, "dim"))
        parts.append(Panel(head, title="flashtutor grade", expand=False))
        if self.env or self.execution:
            parts.append(Text(self.env_line() + (f" · graded in {self.seconds:.0f} s" if self.seconds else ""),
                              style="dim"))
        if self.checks and self.shared:
            parts.append(Text(self.shared, style="red"))
        if self.checks:
            t = Table(title="correctness", show_lines=False)
            for col in ("problem", "cases", "error", "allowed", "status"):
                t.add_column(col, justify="right" if col in ("cases", "error", "allowed") else "left")
            for name, r in self._check_rows().items():
                ok = r["ok"] == r["cases"]
                t.add_row(name, f"{r['ok']}/{r['cases']}", _fmt_err(r["err"]), _fmt_err(r["bound"]),
                          Text("ok" if ok else r["cause"], style="green" if ok else "red"))
            parts.append(t)
        rows = [x for x in self.timings if x.times]
        if rows:
            t = Table(title="speed: GPU time per call, median µs (± half the p10–p90 spread of the rounds)")
            cols = self._timing_columns()
            for col, _ in cols:
                t.add_column(col, justify="left" if col in ("problem", "backend") else "right")
            for x in rows:
                t.add_row(*(f(x, _fmt_short) for _, f in cols))
            parts.append(t)
        for why, names in self._untimed().items():
            parts.append(Text(f"{why}: {', '.join(names)}" if len(names) > 1 else f"{names[0]}: {why}",
                              style="yellow"))
        if self.resources:
            t = Table(title="compiled kernels")
            for col in ("kernel", "registers", "shared B", "stack B", "spill instr."):
                t.add_column(col)
            for _, ks in self.resources.items():
                for k, r in ks.items():
                    t.add_row(k, str(r.get("registers")), str(r.get("shared_bytes")), str(r.get("stack_bytes")),
                              str(r.get("spill_instructions")))
            parts.append(t)
        if self.failures:
            shown = self.failures[:5]
            more = f"\n… and {len(self.failures) - 5} more (see --json)" if len(self.failures) > 5 else ""
            parts.append(Panel(Text("\n\n".join(shown) + more), title="what went wrong", border_style="red"))
        notes = self.warnings + [n for x in self.timings for n in x.notes]
        if notes:
            parts.append(Panel(Text("\n".join(notes[:6])), title="notices", border_style="yellow"))
        if self.method:
            parts.append(Text("checked:     " + "\n             ".join(self.method), style="dim"))
        if self.unchecked:
            parts.append(Text("not checked: " + "\n             ".join(self.unchecked), style="dim"))
        return Group(*parts)

    def print(self) -> None:
        from rich.console import Console
        Console().print(self)

    def __str__(self) -> str:
        from rich.console import Console
        c = Console(width=120, record=True, file=io.StringIO())
        c.print(self)
        return c.export_text()

    def _repr_html_(self) -> str:
        color = PARTIAL_COLOR if self.partial else HTML_COLOR.get(str(self.verdict), "#cf222e")
        h = [f"<div><b style='color:{color}'>{html.escape(self.label)}</b>"
             + (f" — {html.escape(self.summary)}" if self.summary else "") + "<br>"
             f"chapter {html.escape(self.chapter)}: {html.escape(self.title)} · "
             f"<code>{html.escape(self.shown_path)}</code></div>"]
        if self.env or self.execution:
            h.append(f"<div style='color:#666'>{html.escape(self.env_line())}</div>")
        nowrap = "<td style='white-space:nowrap'>"           # a shape or a time: one line (a page's column is narrow)
        if self.checks and self.shared:
            h.append(f"<div style='color:#cf222e'>{html.escape(self.shared)}</div>")
        if self.checks:
            checks = self._check_rows()
            table = ["<table><tr><th>problem</th><th>cases</th><th>error (tightest row)</th><th>allowed</th>"
                     "<th>status</th></tr>"]
            for name, r in checks.items():
                ok = r["ok"] == r["cases"]
                table.append(f"<tr>{nowrap}{html.escape(name)}</td><td>{r['ok']}/{r['cases']}</td>"
                             f"<td>{_fmt_err(r['err'])}</td><td>{_fmt_err(r['bound'])}</td>"
                             f"<td style='color:{'#1a7f37' if ok else '#cf222e'}'>"
                             f"{'ok' if ok else html.escape(r['cause'])}</td></tr>")
            table.append("</table>")
            status = {"ok" if r["ok"] == r["cases"] else r["cause"] for r in checks.values()}
            if len(checks) > 8 and len(status) == 1:     # one status everywhere (a stub: all "unwritten"): one line
                (only,) = status
                h.append(f"<details><summary>all {len(checks)} problems: {html.escape(only)}</summary>"
                         + "\n".join(table) + "</details>")
            else:
                h += table
        rows = [x for x in self.timings if x.times]
        if rows:
            # The page's table: a median with its p10-p90 spread as ±% (the terminal's and the JSON's keep the
            # range in µs); as ranges, seven columns of a chapter's report ran 2-3 lines a row at the book's width.
            cols = self._timing_columns()
            h.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c, _ in cols) + "</tr>")
            for x in rows:
                h.append("<tr>" + "".join(f"{nowrap}{html.escape(f(x, _fmt_page))}</td>" for _, f in cols) + "</tr>")
            h.append("</table><div style='color:#666'>" + TIMING_NOTE + "</div>")
            chart = self.chart_png()
            if chart:
                h.append(f"<img src='data:image/png;base64,{chart}' style='max-width:100%'>")
        if self.failures:
            items = "".join(f"<li><pre style='white-space:pre-wrap'>{html.escape(f)}</pre></li>" for f in self.failures[:5])
            h.append(f"<details open><summary>what went wrong ({len(self.failures)})</summary><ul>{items}</ul></details>")
        notes = self.warnings + [n for x in self.timings for n in x.notes]
        if notes:
            h.append("<details><summary>notices</summary><ul>" + "".join(
                f"<li>{html.escape(w)}</li>" for w in notes[:6]) + "</ul></details>")
        if self.method:
            h.append("<details><summary>what was checked</summary><ul>"
                     + "".join(f"<li>{_code_spans(m)}</li>" for m in self.method) + "</ul></details>")
        if self.unchecked:
            h.append("<details><summary>what was not checked</summary><ul>"
                     + "".join(f"<li>{_code_spans(m)}</li>" for m in self.unchecked) + "</ul></details>")
        return "\n".join(h)

    def chart_png(self) -> str | None:
        """:meth:`chart` as a base64 PNG (what the notebook's HTML report embeds), or None with nothing timed."""
        fig = self.chart()
        if fig is None:
            return None
        import matplotlib.pyplot as plt
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        plt.close(fig)
        return base64.b64encode(buf.getvalue()).decode()

    def chart(self):
        """Bars of GPU time per call, yours vs SDPA (and the reference or baseline), per timed shape, with the
        p10-p90 spread of the rounds; drawn by flashtutor.plots' rules (7.2 in wide, no text below 9 pt on the
        page, legend outside the bars, a one-line title over them, and how the times were taken with the
        machine (:meth:`env_line`) in the caption under them). A log axis only when the times span more than a
        decade: inside one, log bars from an arbitrary floor misstate their ratios."""
        rows = [x for x in self.timings if x.times]
        if not rows:
            return None
        from .. import plots      # no backend switch: in a notebook that would stop its inline figures
        series = [("yours", "learner", "#cf6a2e"), ("reference", "reference", "#888888"),
                  ("baseline", "baseline", "#aaaaaa"), ("SDPA", "sdpa", "#2e6fcf")]
        series = [s for s in series if all(s[1] in x.times for x in rows)]
        fig, ax = plots.figure(height=3.6)
        w = 0.8 / len(series)
        values = []
        for i, (label, key, c) in enumerate(series):
            med = [x.times[key].median_us for x in rows]
            lo = [max(m - x.times[key].p10_us, 0) for m, x in zip(med, rows)]
            hi = [max(x.times[key].p90_us - m, 0) for m, x in zip(med, rows)]
            ax.bar([j + i * w for j in range(len(rows))], med, w, yerr=[lo, hi], label=label, color=c, capsize=2,
                   error_kw={"lw": 0.8})
            values += [m for m in med if m > 0]
        log = bool(values) and max(values) / min(values) > 10
        if log:
            ax.set_yscale("log")
        ax.set_ylabel("GPU µs per call" + (" (log)" if log else ""), fontsize=plots.NORMAL)
        ax.set_xticks([j + w * (len(series) - 1) / 2 for j in range(len(rows))])
        dims = {x.problem.rsplit(" D", 1)[-1] for x in rows}          # one head dim: said once, in the caption
        ax.set_xticklabels([x.problem.rsplit(" D", 1)[0] if len(dims) == 1 else x.problem for x in rows],
                           rotation=30, ha="right", rotation_mode="anchor", fontsize=plots.SMALL)
        ax.grid(axis="y", alpha=0.3, which="major")
        ax.set_axisbelow(True)
        plots.legend(ax, where="right")
        basis = {x.basis for x in rows}
        plots.title(fig, f"Chapter {self.chapter}: your kernel's GPU time per call against SDPA's")
        how = ("median GPU time per call" + (", graph-replayed" if basis == {"graph"} else "")
               + ", whiskers from the 10th to the 90th percentile" + (f", D = {next(iter(dims))}" if len(dims) == 1 else ""))
        plots.caption(fig, f"{how} · {self.env_line()}")
        return fig


def _n(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _fmt_err(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.2e}"


def _fmt_stats(m) -> str:
    return f"{m.median_us:.2f} [{m.p10_us:.2f}–{m.p90_us:.2f}]"


TIMING_NOTE = ("µs: median GPU time per call ± half its 10th-90th percentile spread. host µs/call: what issuing "
               "one call cost the host (with graph-replayed timing, one replay), measured on separate batches; it "
               "follows the host's load, so it differs between runs and chapters where the GPU time does not.")


def _code_spans(text: str) -> str:
    """``text`` escaped for HTML, its `backticked` names as <code> (the method lines are written for the terminal
    and the JSON, where the backticks read as code)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _fmt_page(m) -> str:
    """A time for the notebook's table: the median (two decimals below 100 µs, one below 10 ms, none above)
    and half its p10-p90 spread in percent."""
    v = m.median_us
    half = 50 * (m.p90_us - m.p10_us) / v if v else math.nan
    return f"{v:.2f} ±{half:.1f}%" if v < 100 else f"{v:.1f} ±{half:.1f}%" if v < 10000 else f"{v:.0f} ±{half:.1f}%"


def _fmt_short(m) -> str:
    half = 50 * (m.p90_us - m.p10_us) / m.median_us if m.median_us else math.nan
    return f"{m.median_us:.4g} ±{half:.1f}%"


def _fmt_host(t: TimingResult) -> str:
    a, b = t.times.get("learner"), t.times.get("sdpa")
    f = lambda m: "—" if m is None or m.host_us is None else f"{m.host_us:.0f}"   # noqa: E731
    return f"{f(a)}, {f(b)}"


def _fmt_pct(x: float) -> str:
    return "–" if x != x else f"{x:.2g}%" if x < 10 else f"{x:.0f}%"


def _fmt_ratio(x: float) -> str:
    return f"{x:.0f}×" if x >= 100 else f"{x:.1f}×" if x >= 10 else f"{x:.2f}×"    # 1.10×, not 1.1×
