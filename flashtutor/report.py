"""A grading report: a verdict per shape and overall, rendered for a terminal (rich), a notebook
(HTML table + bar chart learner vs SDPA) and machines (JSON)."""
from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import dataclass, field

from .check import RATIO

VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold red", "not run": "bold yellow"}


@dataclass
class Report:
    chapter: str
    title: str
    path: str
    device: str
    excluded: str = ""
    speed_rule: dict = field(default_factory=dict)
    sass_rule: object = None
    verdict: str = "error"
    summary: str = ""
    env: dict = field(default_factory=dict)
    resources: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)     # one dict per (shape, seed)
    timings: list = field(default_factory=list)    # one dict per timed shape
    failures: list = field(default_factory=list)   # messages, worst first
    warnings: list = field(default_factory=list)   # reported, not failing
    static: list = field(default_factory=list)     # anti-cheat findings from reading the source
    profile: list = field(default_factory=list)    # the profiled call: kernels seen, problems
    sanitizer: dict = field(default_factory=dict)  # compute-sanitizer results (grade --sanitize)
    method: list = field(default_factory=list)     # what was checked, in words

    # ------------------------------------------------------------------ verdict
    def fill(self, info: dict, tasks: list, outcomes: list, *, compile_only: bool, speed, sass=None) -> None:
        self.env = info.get("env", {})
        self.resources = info.get("resources", {})
        self.sass_rule = sass
        sass_failures = sass_violations(sass, self.resources) if "error" not in info else []
        if "error" in info:
            self.verdict = "fail"
            kind = info.get("verdict", "error")
            self.summary = f"{kind}: {info['error'].splitlines()[0]}" if kind != "compile error" else "compile error"
            self.failures.append(info["error"] + (f"\n{info['log']}" if info.get("log") else ""))
            self._describe(tasks, speed)
            return
        if sass_failures:     # what the compiled kernels must show: checked on the cubin, GPU or not
            self.failures.extend(sass_failures)
            if compile_only:
                self.verdict = "fail"
                self.summary = "the compiled kernels break the chapter's SASS rule: " + sass_failures[0]
                self._describe(tasks, speed)
                return
        if compile_only:
            self.verdict = "not run"
            self.summary = ("compiled for {}; no CUDA GPU here, so correctness and speed were not checked"
                            .format(info.get("arch", "?")))
            self._describe(tasks, speed)
            return
        for t, o in zip(tasks, outcomes):
            r = dict(o.result or {})
            if o.verdict != "ok":
                r = {"kind": t["kind"], "ok": False, "cause": o.verdict, "message": o.message,
                     "problem": _name(t["problem"])}
            r.setdefault("seed", t.get("seed"))
            {"check": self.checks, "time": self.timings, "profile": self.profile}[t["kind"]].append(r)
        bad = [c for c in self.checks if not c.get("ok")]
        for f in self.static:
            (self.failures if f["severity"] == "forbidden" else self.warnings).append(
                f"{f['file']}:{f['line']}: {f['what']}")
        if any(f["severity"] == "forbidden" for f in self.static):
            bad.append({"cause": "forbidden"})
        for pr in self.profile:
            if not pr.get("ok"):
                self.failures.append(f"run-time check ({pr.get('problem')}): {pr.get('message')}")
                bad.append(pr)
        for c in bad:
            msg = f"{c.get('problem')} (seed {c.get('seed')}): {c.get('message', '')}"
            if c.get("log"):
                msg += f"\n  child output: {c['log']}"
            self.failures.append(msg)
        slow = []
        skipped = [tm for tm in self.timings if tm.get("skipped")]
        self.timings = [tm for tm in self.timings if not tm.get("skipped")]
        if skipped:
            self.warnings.append(f"{len(skipped)} timed shape(s) not timed: correctness failed first")
        for tm in self.timings:
            if tm.get("kind") == "time" and "stats" in tm:
                if not tm.get("recheck_ok", True):
                    self.failures.append(f"{tm['problem']}: the output of a timed call is wrong: {tm['recheck_message']}")
                    tm.setdefault("causes", []).append("timed output wrong")
                    bad.append(tm)
                if tm.get("escapes_timer"):
                    self.failures.append(f"{tm['problem']}: with a device-wide synchronize before the end event the "
                                         f"call takes {tm['synced_us']:.1f} µs instead of {tm['stats']['learner']['median_us']:.1f}"
                                         " µs: work continues outside the timed stream (a side stream?), or the "
                                         "call behaves differently when it is timed back to back")
                    tm.setdefault("causes", []).append("side stream")
                    bad.append(tm)
                if tm.get("suspicious"):
                    self.warnings.append(f"{tm['problem']}: {tm['suspicious']}")
                if tm.get("below_floor"):
                    self.failures.append(f"{tm['problem']}: faster than the roofline floor — implausible; "
                                         "is the work really done on the GPU in this call?")
                    tm.setdefault("causes", []).append("below floor")
                    bad.append(tm)
                slow.extend(speed_violations(speed, tm))
            elif tm.get("message"):
                self.failures.append(f"{tm.get('problem')} (timing): {tm['message']}")
                bad.append(tm)
        for tm in self.timings:
            if tm.get("causes"):
                tm["cause"] = tm["causes"][0]
        n_ok = sum(1 for c in self.checks if c.get("ok"))
        if sass_failures:
            bad.append({"cause": "SASS rule"})
        if bad:
            self.verdict = "fail"
            causes = sorted({x for c in bad for x in (c.get("causes") or [c.get("cause") or "wrong"])})
            self.summary = f"{n_ok}/{len(self.checks)} correctness cases pass; failures: {', '.join(causes)}"
        elif slow:
            self.verdict = "fail"
            self.summary = f"correct on all {len(self.checks)} cases but too slow: " + "; ".join(slow[:3])
            self.failures.extend(slow)
        else:
            self.verdict = "pass"
            self.summary = f"correct on all {len(self.checks)} cases"
            if self.timings:
                key, what = (("graph_ratio", "SDPA's graph-replayed time") if speed.basis == "graph"
                             else ("ratio", "SDPA's time"))
                rs = [t[key] for t in self.timings if key in t]
                if rs:
                    self.summary += (f"; {min(rs):.2f}–{max(rs):.2f}× {what}" if len(rs) > 1
                                     else f"; {rs[0]:.2f}× {what}")
        self._describe(tasks, speed)

    def _describe(self, tasks, speed):
        self.method = []
        self._describe_rules(tasks, speed)
        if getattr(self, "sass_rule", None):
            r = self.sass_rule
            what = ([f"{', '.join(r.require)} instructions present"] if r.require else []) + \
                   (["no local-memory instructions (LDL/STL: spills or stack arrays)"] if r.no_spills else [])
            self.method.append("compiled code (SASS of the cubin, checked with or without a GPU): " + "; ".join(what))

    def _describe_rules(self, tasks, speed):
        checks = [t for t in tasks if t["kind"] == "check"]
        shapes = sorted({_name(t["problem"]) for t in checks})
        seeds = sorted({t["seed"] for t in checks})
        m = []
        if checks:
            m.append(f"correctness: {len(shapes)} problems × seeds {seeds[:4]}{'…' if len(seeds) > 4 else ''} "
                     f"({len(checks)} cases, fresh random inputs each), outputs pre-filled with NaN, "
                     f"inputs fingerprinted before and after")
            m.append(f"tolerance, per output row: max |out − ref| ≤ {RATIO:g} × SDPA's fp16 error on that row + 1 fp16 "
                     f"ulp of the row's max |ref|; reference in fp32 (TF32 off) on the GPU or fp64 on the CPU; "
                     f"NaN/Inf anywhere fails; the table shows each problem's tightest row")
        if any(t["kind"] == "time" for t in tasks):
            m.append("speed: learner and SDPA alternately in one process, CUDA events, 256 MB L2 flush before "
                     "each call, warm-up, median of ≥ 10 (usually 50) calls with p10–p90; the timed output "
                     "is checked again; SDPA's backend pinned and named")
            rule = describe_speed_rule(speed)
            m.append(f"speed rule: {rule}" if rule else "speed rule: none in this chapter — speed is reported, not graded")
        if any(t["kind"] == "profile" for t in tasks) or self.static:
            m.append("anti-cheat: the source read for library attention/matmul/softmax, @, torch.ops.aten, "
                     "torch.backends, streams, events, imports of the grader, monkeypatching; one call profiled: no "
                     "library op or kernel may run, your own kernel must, on the caller's stream; the timer, checker "
                     "and reference verified unchanged after every case")
        if any(t["kind"] == "time" for t in tasks):
            m.append("timed calls: new random inputs before each call (outside the timing, before the flush), "
                     "three secretly chosen timed outputs re-checked, a second pass with a device-wide synchronize "
                     "before the end event; faster than the roofline floor fails, 10× faster than SDPA is re-verified")
        m.append("isolation: the submission runs in a spawned child process with timeouts; a crash or hang "
                 "is a verdict and grading continues in a fresh process")
        if self.excluded:
            m.append(f"not graded here: {self.excluded}")
        self.method = m

    SANITIZER_CAUSE = {"memcheck": "memory error", "racecheck": "race", "synccheck": "barrier error"}

    def add_sanitizer(self, result: dict) -> None:
        """Fold compute-sanitizer's findings into the verdict: any finding fails the grade."""
        from .sanitize import format_findings
        self.sanitizer = result
        ran = [t for t, r in result.get("tools", {}).items() if r.get("ran")]
        self.method.append(f"compute-sanitizer on small shapes: {', '.join(ran) or 'not run'} — {result.get('summary', '')}")
        found = [(t, f) for t, r in result.get("tools", {}).items() for f in r.get("findings", [])]
        if not found:
            return
        causes = sorted({self.SANITIZER_CAUSE.get(t, t) for t, _ in found})
        self.failures.insert(0, format_findings(result))
        if self.verdict == "pass":
            self.verdict = "fail"
            self.summary = f"correct on the graded cases, but compute-sanitizer found: {', '.join(causes)}"
        else:
            self.summary += f"; compute-sanitizer found: {', '.join(causes)}"
        self.checks.append({"kind": "sanitize", "ok": False, "problem": "compute-sanitizer", "cause": causes[0],
                            "message": format_findings(result)})

    def _timing_columns(self) -> list:
        """(header, cell(tm, fmt)) for the speed table; optional columns only where some row has them."""
        def stat(name):
            return lambda tm, fmt: fmt(tm["stats"][name]) if name in tm["stats"] else ""

        def graph(name):
            return lambda tm, fmt: fmt(tm["graph"][name]) if "median_us" in tm.get("graph", {}).get(name, {}) else "—"

        rows = [tm for tm in self.timings if "stats" in tm]
        cols = [("problem", lambda tm, fmt: tm["problem"]), ("yours", stat("learner"))]
        if any("reference" in tm["stats"] for tm in rows):
            cols.append(("reference", stat("reference")))
        if any("baseline" in tm["stats"] for tm in rows):
            cols.append(("baseline", stat("baseline")))
        cols += [("SDPA", stat("sdpa")), ("backend", lambda tm, fmt: str(tm["backend"])),
                 ("yours / SDPA", lambda tm, fmt: _fmt_ratio(tm["ratio"]))]
        if any(tm.get("graph") for tm in rows):
            cols += [("yours, graph", graph("learner")), ("SDPA, graph", graph("sdpa")),
                     ("graph ratio", lambda tm, fmt: _fmt_ratio(tm["graph_ratio"]) if "graph_ratio" in tm else "—")]
        if any("speedup_vs_baseline" in tm for tm in rows):
            cols.append(("speed-up vs baseline", lambda tm, fmt: f"{tm['speedup_vs_baseline']:.1f}×"
                         if "speedup_vs_baseline" in tm else ""))
        cols.append(("% of floor", lambda tm, fmt: _fmt_pct(tm.get("pct_floor", {}).get("learner", math.nan))))
        return cols

    # ------------------------------------------------------------------ outputs
    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), indent=kw.pop("indent", 1), default=str, **kw)

    def save_json(self, path) -> None:
        with open(path, "w") as f:
            f.write(self.to_json())

    def _check_rows(self):
        """One row per problem: cases passed, and error vs allowed for its tightest case."""
        rows: dict[str, dict] = {}
        for c in self.checks:
            r = rows.setdefault(c.get("problem", "?"), {"cases": 0, "ok": 0, "err": math.nan, "bound": math.nan,
                                                         "margin": -math.inf, "cause": ""})
            r["cases"] += 1
            r["ok"] += bool(c.get("ok"))
            e, b = c.get("err", math.nan), c.get("bound", math.nan)
            m = e / b if (e == e and b == b and b) else (math.inf if e == math.inf else -math.inf)
            if m > r["margin"]:
                r.update(margin=m, err=e, bound=b)
            if not c.get("ok") and not r["cause"]:
                r["cause"] = c.get("cause") or "wrong"
        return rows

    def __rich__(self):
        from rich.console import Group
        from rich.panel import Panel
        from rich.table import Table
        from rich.text import Text

        parts = []
        head = Text.assemble((f"{self.verdict.upper()}", VERDICT_STYLE.get(self.verdict, "bold")),
                             f"  chapter {self.chapter} — {self.title}\n", (self.path, "dim"), "\n",
                             self.summary)
        parts.append(Panel(head, title="flashtutor grade", expand=False))
        if self.env:
            e = self.env
            parts.append(Text(f"{e.get('gpu')} · torch {e.get('torch')} · cuDNN {e.get('cudnn')} · "
                              f"driver {e.get('driver')} · {e.get('date')}", style="dim"))
        if self.checks:
            t = Table(title="correctness", show_lines=False)
            for col in ("problem", "cases", "error", "allowed", "status"):
                t.add_column(col, justify="right" if col in ("cases", "error", "allowed") else "left")
            for name, r in self._check_rows().items():
                ok = r["ok"] == r["cases"]
                t.add_row(name, f"{r['ok']}/{r['cases']}", _fmt_err(r["err"]), _fmt_err(r["bound"]),
                          Text("ok" if ok else r["cause"], style="green" if ok else "red"))
            parts.append(t)
        if self.timings:
            t = Table(title="speed: median µs (± half the p10–p90 spread)")
            cols = self._timing_columns()
            for col, _ in cols:
                t.add_column(col, justify="left" if col in ("problem", "backend") else "right")
            for tm in self.timings:
                if "stats" not in tm:
                    t.add_row(tm.get("problem", "?"), Text(tm.get("cause", "error"), style="red"))
                    continue
                t.add_row(*(f(tm, _fmt_short) for _, f in cols))
            parts.append(t)
            pk = next((tm.get("peaks") for tm in self.timings if tm.get("peaks")), None)
            if pk:
                parts.append(Text(f"floor = max(bytes / {pk['hbm_tbs']:.2f} TB/s, FLOPs / {pk['tensor_tflops']:.0f} "
                                  f"TFLOP/s), peaks {pk['source']} on this GPU", style="dim"))
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
        if self.warnings:
            parts.append(Panel(Text("\n".join(self.warnings[:5])), title="notices", border_style="yellow"))
        parts.append(Text("checked: " + "\n         ".join(self.method), style="dim"))
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
        color = {"pass": "#1a7f37", "fail": "#cf222e", "not run": "#9a6700"}.get(self.verdict, "#cf222e")
        h = [f"<div><b style='color:{color}'>{html.escape(self.verdict.upper())}</b> "
             f"— chapter {html.escape(self.chapter)}: {html.escape(self.title)}<br>"
             f"<code>{html.escape(self.path)}</code><br>{html.escape(self.summary)}</div>"]
        if self.env:
            e = self.env
            h.append(f"<div style='color:#666'>{html.escape(str(e.get('gpu')))} · torch {html.escape(str(e.get('torch')))}"
                     f" · cuDNN {e.get('cudnn')} · driver {html.escape(str(e.get('driver')))} · {html.escape(str(e.get('date')))}</div>")
        if self.checks:
            h.append("<table><tr><th>problem</th><th>cases</th><th>error (tightest row)</th><th>allowed</th><th>status</th></tr>")
            for name, r in self._check_rows().items():
                ok = r["ok"] == r["cases"]
                h.append(f"<tr><td>{html.escape(name)}</td><td>{r['ok']}/{r['cases']}</td><td>{_fmt_err(r['err'])}</td>"
                         f"<td>{_fmt_err(r['bound'])}</td><td style='color:{'#1a7f37' if ok else '#cf222e'}'>"
                         f"{'ok' if ok else html.escape(r['cause'])}</td></tr>")
            h.append("</table>")
        if self.timings:
            cols = self._timing_columns()
            h.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c, _ in cols) + "</tr>")
            for tm in self.timings:
                if "stats" not in tm:
                    h.append(f"<tr><td>{html.escape(str(tm.get('problem')))}</td><td colspan={len(cols) - 1}>"
                             f"{html.escape(str(tm.get('message', '')))}</td></tr>")
                    continue
                h.append("<tr>" + "".join(f"<td>{html.escape(f(tm, _fmt_stats))}</td>" for _, f in cols) + "</tr>")
            h.append("</table>")
            chart = self.chart_png()
            if chart:
                h.append(f"<img src='data:image/png;base64,{chart}' style='max-width:720px'>")
        if self.failures:
            items = "".join(f"<li><pre style='white-space:pre-wrap'>{html.escape(f)}</pre></li>" for f in self.failures[:5])
            h.append(f"<details open><summary>what went wrong ({len(self.failures)})</summary><ul>{items}</ul></details>")
        if self.warnings:
            h.append("<details><summary>notices</summary><ul>" + "".join(
                f"<li>{html.escape(w)}</li>" for w in self.warnings[:5]) + "</ul></details>")
        h.append("<details><summary>what was checked</summary><ul>"
                 + "".join(f"<li>{html.escape(m)}</li>" for m in self.method) + "</ul></details>")
        return "\n".join(h)

    def chart_png(self) -> str | None:
        """A bar chart of median times, learner vs SDPA (and reference), per timed shape; base64 PNG."""
        rows = [tm for tm in self.timings if "stats" in tm]
        if not rows:
            return None
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [tm["problem"] for tm in rows]
        series = [("yours", "learner", "#cf6a2e"), ("reference", "reference", "#888888"), ("SDPA", "sdpa", "#2e6fcf")]
        series = [s for s in series if all(s[1] in tm["stats"] for tm in rows)]
        fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(rows) + 2), 3.4), dpi=110)
        w = 0.8 / len(series)
        for i, (label, key, c) in enumerate(series):
            med = [tm["stats"][key]["median_us"] for tm in rows]
            lo = [m - tm["stats"][key]["p10_us"] for m, tm in zip(med, rows)]
            hi = [tm["stats"][key]["p90_us"] - m for m, tm in zip(med, rows)]
            ax.bar([x + i * w for x in range(len(rows))], med, w, yerr=[lo, hi], label=label, color=c, capsize=2)
        ax.set_yscale("log")
        ax.set_ylabel("µs (median, log scale)")
        ax.set_xticks([x + w * (len(series) - 1) / 2 for x in range(len(rows))])
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=8)
        gpu = self.env.get("gpu", "")
        ax.set_title(f"chapter {self.chapter}: time per call on {gpu} ({self.env.get('date', '')})", fontsize=9)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        return base64.b64encode(buf.getvalue()).decode()


def describe_speed_rule(speed) -> str:
    """The chapter's speed rule in words ('' when speed is only reported)."""
    parts = []
    basis = " (both replayed from a CUDA graph, L2 flushed)" if speed.basis == "graph" else ""
    if speed.max_ratio_vs_sdpa:
        parts.append(f"at most {speed.max_ratio_vs_sdpa:g}× SDPA's time{basis} on every timed shape")
    if speed.min_speedup_vs:
        parts.append(f"at least {speed.min_speedup_vs:g}× faster than {speed.baseline} on every timed shape, "
                     "timed in the same loop")
    if not parts:
        return ""
    return "; ".join(parts) + (f" ({speed.calibration})" if speed.calibration else "")


def speed_violations(speed, tm: dict) -> list[str]:
    """Messages for every way the timed row ``tm`` breaks the chapter's speed rule."""
    out = []
    lim = speed.max_ratio_vs_sdpa
    if lim:
        if speed.basis == "graph":
            ratio = tm.get("graph_ratio")
            if ratio is None:
                err = (tm.get("graph") or {}).get("learner", {}).get("error", "no graph-replayed time")
                out.append(f"{tm['problem']}: the call could not be replayed from a CUDA graph, and this chapter "
                           f"times it that way: {err}")
            elif ratio > lim:
                out.append(f"{tm['problem']}: {ratio:.2f}× SDPA's graph-replayed time > {lim:.2f}×")
        elif tm["ratio"] > lim:
            out.append(f"{tm['problem']}: {tm['ratio']:.2f}× SDPA's time > {lim:.2f}×")
    if speed.min_speedup_vs:
        sp = tm.get("speedup_vs_baseline")
        if sp is None:
            out.append(f"{tm['problem']}: the baseline {speed.baseline} was not timed")
        elif sp < speed.min_speedup_vs:
            out.append(f"{tm['problem']}: {sp:.2f}× faster than {speed.baseline.rsplit('.', 1)[-1]} "
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


def _name(pd: dict) -> str:
    return pd.get("name") or "B{B} H{H} S{S} D{D}".format(**pd)


def _fmt_err(x) -> str:
    if x is None or (isinstance(x, float) and (math.isnan(x))):
        return "–"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    return f"{x:.2e}"


def _fmt_stats(s: dict) -> str:
    return f"{s['median_us']:.1f} [{s['p10_us']:.1f}–{s['p90_us']:.1f}]"


def _fmt_short(s: dict) -> str:
    half = 50 * (s["p90_us"] - s["p10_us"]) / s["median_us"] if s["median_us"] else math.nan
    return f"{s['median_us']:.4g} ±{half:.1f}%"


def _fmt_pct(x: float) -> str:
    return "–" if x != x else f"{x:.2g}%" if x < 10 else f"{x:.0f}%"


def _fmt_ratio(x: float) -> str:
    return f"{x:.0f}×" if x >= 100 else f"{x:.3g}×"
