"""Benchmark tables: every step of a chapter beside SDPA, on one GPU, in one process.

    from flashtutor import bench
    rows = bench.steps_table({"ch1 reference": "flashtutor.kernels.k01_naive_three_pass",
                              "tiled": "flashtutor.kernels.k02b_smem_tiles"}, bench.problems("seed", "small"))
    bench.save(rows, "results/bench-ch02.json")        # with the GPU's name, versions and the date (runner.save)
    bench.markdown(rows)                               # one line per (shape, step)

A step is a module path (its ``attention`` is called) or any ``attention(q, k, v, *, causal)``
callable. Every step is checked for correctness on the shape before it is timed; a step that is
wrong, or fails, gets its message in the table instead of a time. Times: CUDA events, L2 flushed
before each call, the steps and SDPA (pinned to its default backend) alternately in one loop,
median and p10–p90. A module may define ``bytes_moved(problem) -> int``, the HBM traffic its
algorithm implies; the table then shows it and the bandwidth the step reached with it.
"""
from __future__ import annotations

import importlib
from typing import Callable

from ..docs import keep_shapes
from ..problems import Problem, shape_set


def problems(*sets: str, causal: tuple[bool, ...] = (False,)) -> list[Problem]:
    return [p.replace(causal=c) for s in sets for p in shape_set(s) for c in causal]


def paired_times(*rows: dict) -> tuple[list[float], str]:
    """The times per call of steps-table rows that are to be divided by each other, on one basis: their
    graph-replayed times if every row has one, else their event-timed medians — never a ratio across the two.

    At the seed shape a call lasts tens of microseconds and the event-timed median also holds whatever host
    work outlasts the L2 flush before it (chapter 5's three-kernel pipeline, three launches, on the H100's slow
    host); the graph-replayed time is the GPU's alone."""
    if all(r.get("graph_us") for r in rows):
        return [r["graph_us"] for r in rows], "graph-replayed"
    return [r["median_us"] for r in rows], "event-timed"


def graph_ratios(rows: list[dict]) -> None:
    """Give each row of one shape ``graph_vs_sdpa``, its graph-replayed time over SDPA's, where both were
    replayed: the ratio of the GPU's times, which the event-timed ``time_vs_sdpa`` is not for a short call."""
    sdpa = next((r.get("graph_us") for r in rows if r["step"] == "SDPA"), None)
    for r in rows:
        if sdpa and r.get("graph_us"):
            r["graph_vs_sdpa"] = r["graph_us"] / sdpa


def _resolve(step) -> tuple[Callable, object]:
    if isinstance(step, str):
        mod = importlib.import_module(step)
        return mod.attention, mod
    return step, None


def steps_table(steps: dict, probs, *, reps: int = 30, max_seconds: float = 10.0, graph: bool = False,
                seed: int = 0, peaks=None, progress: bool = True, skip: Callable | None = None) -> list[dict]:
    """One row per (problem, step) plus one per problem for SDPA. ``skip(name, problem)`` returns a
    reason to leave a step out of a shape (e.g. a naive kernel on a shape where it needs seconds).
    ``pct_floor`` is against the roofline floor of ``peaks``, by default the GPU's datasheet figures
    (``roofline.basis_peaks``), the course's one basis."""
    import torch

    from ..check import check_output
    from ..roofline import basis_peaks
    from ..timing import compare, graph_times, pinned_sdpa

    peaks = peaks or basis_peaks()           # floors on the course's one basis: the datasheet
    resolved = {name: _resolve(s) for name, s in steps.items()}
    rows: list[dict] = []
    bar = _bar(len(probs), "benchmark") if progress else None
    for p in probs:
        q, k, v = p.inputs(seed, "cuda")
        backend, sdpa_fn = pinned_sdpa(q, k, v, causal=p.causal)
        fns, info = {}, {}
        for name, (fn, mod) in resolved.items():
            why = skip(name, p) if skip else None
            if why:
                info[name] = {"error": f"skipped: {why}"}
                continue
            try:
                out = fn(q, k, v, causal=p.causal)
                torch.cuda.synchronize()
                res = check_output(p, q, k, v, out, seed=seed)
                if not res.ok:
                    info[name] = {"error": f"wrong: {res.message}"}
                    continue
            except Exception as e:   # a step that fails on this shape is reported, not fatal
                info[name] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
                torch.cuda.synchronize()
                continue
            fns[name] = (lambda f=fn: f(q, k, v, causal=p.causal))
            info[name] = {"bytes": int(mod.bytes_moved(p)) if mod is not None and hasattr(mod, "bytes_moved") else None}
        fns["SDPA"] = sdpa_fn
        stats = compare(fns, reps=reps, max_seconds=max_seconds)
        floor = peaks.floor_us(p)
        sdpa_us = stats["SDPA"].median_us
        for name in list(resolved) + ["SDPA"]:
            row = {"problem": p.name, "problem_dict": p.to_dict(), "step": name, "backend": backend if name == "SDPA" else None}
            row.update(info.get(name, {}))
            if name in stats:
                s = stats[name]
                row.update(s.to_dict())
                row["time_vs_sdpa"] = s.median_us / sdpa_us
                row["pct_floor"] = 100.0 * floor["floor_us"] / s.median_us
                if row.get("bytes"):
                    row["achieved_tbs"] = row["bytes"] / (s.median_us * 1e-6) / 1e12
                if graph:
                    try:
                        row["graph_us"] = graph_times(fns[name]).median_us
                    except Exception as e:
                        row["graph_error"] = f"{type(e).__name__}: {str(e)[:120]}"
            row.pop("samples_us", None)
            rows.append(row)
        graph_ratios([r for r in rows if r["problem"] == p.name])
        if bar:
            bar.advance(None)
    if bar:
        bar.close()
    return rows


def check_steps(fns: dict, probs, make_inputs: Callable, *, log=print, free_memory: bool = False) -> list[dict]:
    """Every callable ``attention(q, k, v, *, causal)`` of ``fns`` on every problem, judged by the grader's
    rule against the high-precision reference; ``make_inputs(problem, i)`` gives the i-th problem's
    q, k, v (made once per problem and shared by the callables). One record per (callable, problem);
    a callable that raises gets its message instead. Logs the count and every failure."""
    import torch

    from ..check import check_output
    from ..problems import reference, sdpa

    res = []
    for i, p in enumerate(probs):
        q, k, v = make_inputs(p, i)
        ref = reference(q, k, v, causal=p.causal)
        sd = sdpa(q, k, v, causal=p.causal)
        for name, fn in fns.items():
            try:
                out = fn(q, k, v, causal=p.causal)
                if torch.cuda.is_available():
                    torch.cuda.synchronize()
                r = check_output(p, q, k, v, out, ref=ref, sdpa_out=sd)
                res.append({"kernel": name, "problem": p.name, "ok": r.ok, "err": r.err, "bound": r.bound,
                            "message": r.message[:200]})
            except Exception as e:
                res.append({"kernel": name, "problem": p.name, "ok": False, "message": f"{type(e).__name__}: {e}"[:300]})
        del ref, sd, q, k, v
        if free_memory and torch.cuda.is_available():
            torch.cuda.empty_cache()
    bad = [r for r in res if not r["ok"]]
    log(f"correctness: {len(res) - len(bad)}/{len(res)} pass" + "".join(f"\n  FAIL {r}" for r in bad))
    return res


HEADERS = {"vs SDPA": "time / SDPA", "graph vs SDPA": "graph time / SDPA"}   # column key → header


def markdown(rows: list[dict], *, columns=("median", "spread", "vs SDPA", "% floor", "bytes", "TB/s")) -> str:
    """A markdown table: one line per (shape, step). ``vs SDPA`` is the step's time / SDPA's time (event-timed
    medians), headed ``time / SDPA``; ``graph vs SDPA`` the same ratio of the graph-replayed times
    (``steps_table(graph=True)``), headed ``graph time / SDPA``. Below 1: faster than SDPA."""
    head = ["shape", "step"] + [HEADERS.get(c, c) for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "median_us" not in r:
            cells = [r.get("error", "—")] + [""] * (len(columns) - 1)
        else:
            val = {"median": _us(r["median_us"]), "spread": f"±{50 * r['spread']:.0f}%",
                   "vs SDPA": f"{r['time_vs_sdpa']:.2f}×" if r["time_vs_sdpa"] < 100 else f"{r['time_vs_sdpa']:.0f}×",
                   "% floor": f"{r['pct_floor']:.1f}%",
                   "bytes": _bytes(r.get("bytes")), "TB/s": f"{r['achieved_tbs']:.2f}" if r.get("achieved_tbs") else "—",
                   "graph": _us(r["graph_us"]) if r.get("graph_us") else "—",
                   "graph vs SDPA": f"{r['graph_vs_sdpa']:.2f}×" if r.get("graph_vs_sdpa") else "—"}
            cells = [val[c] for c in columns]
        lines.append("| " + " | ".join([keep_shapes(r["problem"]), r["step"]] + cells) + " |")
    return "\n".join(lines)


def plot_steps(rows: list[dict], order=None, env: str = "", colors: dict | None = None,
               title: str = "Each step against SDPA: µs per call, per shape"):
    """The steps table as bars: median µs per call (log scale) for each shape, one bar per step, in
    `order` (default: as the rows name them; steps absent from every shape left out). The book's width,
    flashtutor.plots' sizes, the legend outside the axes, `title` (one short line) above the bars and `env`
    (the environment line) in the caption under them. Returns the figure."""
    from .. import plots
    med, probs = {}, []
    for r in rows:
        if r.get("median_us"):
            med[r["problem"], r["step"]] = r["median_us"]
            probs.append(r["problem"])
    probs = list(dict.fromkeys(probs))
    order = list(order or dict.fromkeys(r["step"] for r in rows))
    present = [s for s in order if any((p, s) in med for p in probs)]
    return plots.grouped_bars([p.replace(" D64", "") for p in probs],
                              {s: [med.get((p, s)) for p in probs] for s in present},
                              ylabel="µs per call (median, log)", env=env, title=title, colors=colors)


def _us(x: float) -> str:
    return f"{x / 1000:.2f} ms" if x >= 1000 else f"{x:.1f} µs"


def _bytes(b) -> str:
    if not b:
        return "—"
    for unit, f in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if b >= f:
            return f"{b / f:.1f} {unit}"
    return f"{b} B"


def _bar(total, label):
    from ..progress import Progress
    return Progress(total, label)
