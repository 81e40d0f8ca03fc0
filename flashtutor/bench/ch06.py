"""Chapter 6's measurements in one GPU run: ``flashtutor bench 06 [--out FILE]``.

1. ``checks``: correctness of ``k06_multihead``, ``k06_split_kv`` (heuristic and forced splits) and the
   solution on the chapter's check sets, causal and not (``flashtutor.check.check_output``);
2. ``launch``: what a call costs (``launch_cost.measure``) -> ``launch06-<gpu>-<date>.json`` beside the
   results file;
3. ``table``: µs per sequence over the manifest's grid (S ∈ {128, 256, 512} × B ∈ {8, 16, 32}, H = 16,
   D = 64, then B = 1, H = 16, S ∈ {1024, 4096, 16384}), for SDPA (pinned), chapter 4's kernels, the
   multi-head kernel, split-KV and the solution: event-timed (L2 flushed), graph-replayed (L2 flushed)
   and graph-replayed with a warm L2, next to the HBM floor (bytes of Q, K, V, O over the measured copy
   bandwidth), the FLOP floor and an L2 "floor" (the same bytes over a measured L2-resident copy) -> the
   results file's ``rows``;
4. ``sweeps``: a configuration sweep of the multi-head kernel at S=128 B=32 and S=512 B=32, and of the
   split at B=1 S=1024 (graph-replayed, L2 flushed), printed best first -> ``sweep06-<gpu>-<date>.json``;
5. ``grader``: the grader on the solution (correctness, static scan and the traced call), without
   timing -> ``grade06-notiming-<gpu>-<date>.json``.

Each part runs on its own (a failure is printed and recorded) and prints as it goes; ``--budget-s``
skips parts that would start after that many seconds. ``--dry`` runs the same code on tiny shapes
through Triton's interpreter on the CPU (no timing is meaningful there): it tests this module, not the GPU.
"""
from __future__ import annotations

import math
import time

from .. import chapters

CH = chapters.get_chapter("06")
STEP_MODULES = {
    "ch4 teaching": chapters.step("4a").module,
    "ch4 tuned": chapters.step("4b").module,
    # the chapter's steps; the solution (solutions/06_batching/attention.py: the graph-captured call) as
    # k06_multihead loads it, so that both use the same kernels
    **{s.label: "solution" if s.solution else s.module for s in CH.steps},
}
PARTS = {"checks": "1. correctness", "launch": "2. what a call costs",
         "table": "3. µs per sequence: events, graph (cold L2), graph (warm L2)",
         "sweeps": "4. configuration sweeps (graph-replayed, L2 flushed)",
         "grader": "5. the grader on the solution (no timing)"}
BUDGET_S = 280.0            # later parts are skipped past this many seconds (--budget-s)


def grid_problems(dry: bool = False):
    """The manifest's grid for this chapter: the seeds' (S × B at H=16, D=64), then one sequence of 16
    heads at growing S."""
    from ..problems import Problem
    if dry:
        return [Problem(2, 2, 16, 64)]
    return [Problem(*shape) for shape in CH.bench.shapes]


def _module(name: str):
    import importlib
    if name == "solution":
        from ..kernels import k06_multihead
        return k06_multihead.solution
    return importlib.import_module(name)


def _sync():
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


# ---- 1. correctness -------------------------------------------------------------------------------
def check_all(sets=CH.bench.check_sets, *, device="cuda", log=print) -> list[dict]:
    from .tables import check_steps
    from ..problems import SHAPE_SETS
    from ..kernels import k06_split_kv
    mods = {n: _module(STEP_MODULES[n]) for n in ("multihead", "split-KV", "solution")}
    fns = {n: m.attention for n, m in mods.items()}
    fns["split-KV n=2"] = lambda q, k, v, causal: k06_split_kv.launch(q, k, v, causal=causal, n_split=2)
    fns["split-KV n=5"] = lambda q, k, v, causal: k06_split_kv.launch(q, k, v, causal=causal, n_split=5)
    probs = [p0.replace(causal=c) for s in sets for p0 in SHAPE_SETS[s] for c in (False, True)]
    return check_steps(fns, probs, lambda p, i: p.inputs(i * len(fns), device), log=log,
                       free_memory=device == "cuda")


# ---- 3. the µs-per-sequence table ------------------------------------------------------------------
def l2_copy_tbs(nbytes: int = 8 << 20, calls: int = 50) -> float:
    """Bandwidth of a device copy whose source and destination (2 × ``nbytes``) stay in L2: read +
    written bytes per second of a graph of ``calls`` copies, L2 warm. An L2-resident problem cannot go
    faster than its bytes at this rate."""
    import torch

    from ..timing import graph_times
    src = torch.empty(nbytes // 2, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    st = graph_times(lambda: dst.copy_(src), calls=calls, reps=20, flush_l2=False)
    return 2 * nbytes / (st.median_us * 1e-6) / 1e12


def _dry_stats(fn, reps=1):
    from ..timing import Stats
    xs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1e6)
    return Stats.of(xs)


def table_rows(problems, *, peaks, l2_tbs=None, reps: int = 30, dry: bool = False, log=print) -> list[dict]:
    """One row per (problem, step) with event, graph (cold) and graph (warm) times, host µs per call,
    floors and µs per sequence."""
    import torch

    from ..problems import sdpa
    from ..timing import compare, graph_times, pinned_sdpa
    from .launch_cost import host_us

    device = "cpu" if dry else "cuda"
    mods = {name: _module(m) for name, m in STEP_MODULES.items()}
    rows = []
    for p in problems:
        t_p = time.perf_counter()
        q, k, v = p.inputs(0, device)
        want = sdpa(q, k, v, causal=p.causal).float()
        if dry:
            backend, sdpa_fn = "cpu", (lambda: sdpa(q, k, v, causal=p.causal))
        else:
            backend, sdpa_fn = pinned_sdpa(q, k, v, causal=p.causal)
        fns, errors = {}, {}
        for name, mod in mods.items():
            fn = (lambda m=mod: m.attention(q, k, v, causal=p.causal))
            try:
                out = fn()
                _sync()
                diff = (out.float() - want).abs().max().item()
                if not diff < 2e-2:
                    errors[name] = f"wrong: max |out - SDPA| = {diff:.3g}"
                    continue
                fns[name] = fn
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {str(e)[:160]}"
                _sync()
        fns["SDPA"] = sdpa_fn
        big = p.S >= 4096
        if dry:
            ev = {n: _dry_stats(f) for n, f in fns.items()}
        else:
            ev = compare(fns, reps=max(10, reps // 2) if big else reps, max_seconds=10.0)
        floor = peaks.floor_us(p)
        l2_floor = p.min_bytes / (l2_tbs * 1e12) * 1e6 if l2_tbs else math.nan
        gk = dict(calls=5, reps=10) if big else {}
        for name in list(mods) + ["SDPA"]:
            row = {"problem": p.name, "problem_dict": p.to_dict(), "B": p.B, "H": p.H, "S": p.S, "D": p.D,
                   "step": name, "backend": backend if name == "SDPA" else None,
                   "floor": floor, "l2_floor_us": l2_floor}
            if name in errors:
                row["error"] = errors[name]
                rows.append(row)
                continue
            f = fns[name]
            row["event"] = ev[name].to_dict()
            for key, flush in (("graph", True), ("graph_warm", False)):
                try:
                    st = _dry_stats(f) if dry else graph_times(f, flush_l2=flush, **gk)
                    row[key] = st.to_dict()
                except Exception as e:   # e.g. a launcher that cannot be captured
                    row[key] = {"error": f"{type(e).__name__}: {str(e)[:160]}"}
            try:
                n_host = 2 if dry else 20 if big else 200
                row["host_us"] = host_us(f, n=n_host, warmup=1 if dry else 3, n_sync=max(1, n_host // 10),
                                         sync=_sync)["issue_us"]
            except Exception as e:
                row["host_error"] = str(e)[:160]
            for key in ("event", "graph", "graph_warm"):
                if "median_us" in row.get(key, {}):
                    row[key].pop("samples_us", None)
                    row[f"{key}_us_per_seq"] = row[key]["median_us"] / p.B
            rows.append(row)
        _ratios(rows, p.name)
        log(f"{p.name}: {time.perf_counter() - t_p:.1f} s")
        for r in rows:
            if r["problem"] == p.name:
                log("  " + format_row(r))
        fns = q = k = v = want = None                 # free this shape's tensors before the next
        if not dry:
            torch.cuda.empty_cache()
    return rows


def _ratios(rows, problem):
    """Per row of ``problem``: time / SDPA's time on each basis, and the HBM floor / time."""
    mine = [r for r in rows if r["problem"] == problem]
    sd = next((r for r in mine if r["step"] == "SDPA"), None)
    for r in mine:
        for key in ("event", "graph", "graph_warm"):
            t = r.get(key, {}).get("median_us")
            s = (sd or {}).get(key, {}).get("median_us")
            if t and s:
                r[f"{key}_vs_sdpa"] = t / s
            if t:
                r[f"{key}_over_hbm_floor"] = t / r["floor"]["memory_us"]


def _num(x, w=8, d=1):
    return f"{x:{w}.{d}f}" if isinstance(x, (int, float)) and x == x else f"{'—':>{w}}"


def format_row(r) -> str:
    if "error" in r:
        return f"{r['step']:<13} {r['error']}"
    g = r.get("graph", {})
    return (f"{r['step']:<13} events {_num(r['event']['median_us'])} µs  graph {_num(g.get('median_us'))} µs  "
            f"warm {_num(r.get('graph_warm', {}).get('median_us'))} µs  per seq {_num(r.get('graph_us_per_seq'), 7, 2)} µs"
            f"  time/SDPA {_num(r.get('graph_vs_sdpa'), 5, 2)}×  /HBM floor {_num(r.get('graph_over_hbm_floor'), 5, 2)}×"
            f"  host {_num(r.get('host_us'))} µs/call")


def shape_labels(names) -> tuple[str, dict[str, str]]:
    """A shape column's header and each row's label: the tokens every name shares (H16 D64) go into the
    header, the rest stays on one line (non-breaking spaces)."""
    names = list(dict.fromkeys(names))
    common = [t for t in names[0].split() if all(t in n.split() for n in names)] if len(names) > 1 else []
    header = f"shape ({' '.join(common)})" if common else "shape"
    return header, {n: "\u00a0".join(t for t in n.split() if t not in common) for n in names}


def rows_markdown(rows, steps=("SDPA", "multihead", "solution")) -> str:
    """The per-call rows of ``steps`` (what :func:`format_row` prints) as a Markdown table, graph-replayed with
    the L2 flushed; the shape's tokens every row shares go into the column's header."""
    mine = [r for r in rows if r["step"] in steps]
    shape, labels = shape_labels(r["problem"] for r in mine)
    lines = [f"| {shape} | step | events µs | graph µs | warm µs | µs per seq | time / SDPA | / HBM floor | host µs per call |",
             "|---" * 9 + "|"]
    for r in mine:
        label = labels[r["problem"]]
        if "error" in r:
            lines.append(f"| {label} | {r['step']} | {r['error']} |" + " |" * 6)
            continue
        f = lambda x, d=1: _num(x, 0, d).strip()                                # noqa: E731
        lines.append(f"| {label} | {r['step']} | {f(r['event']['median_us'])} | {f(r.get('graph', {}).get('median_us'))} | "
                     f"{f(r.get('graph_warm', {}).get('median_us'))} | {f(r.get('graph_us_per_seq'), 2)} | "
                     f"{f(r.get('graph_vs_sdpa'), 2)}× | {f(r.get('graph_over_hbm_floor'), 2)}× | {f(r.get('host_us'))} |")
    return "\n".join(lines)


def per_seq_markdown(rows, key="graph") -> str:
    """:func:`per_seq_table` as a Markdown table (what the notebook displays: it fits the page's column). The
    shape's tokens every row shares (H16 D64) go into the column's header, the rest stays on one line."""
    steps = list(dict.fromkeys(r["step"] for r in rows))
    probs = list(dict.fromkeys(r["problem"] for r in rows))
    shape, labels = shape_labels(probs)
    lines = [f"| {shape} | " + " | ".join(steps) + " | HBM floor | FLOP floor |", "|---" * (len(steps) + 3) + "|"]
    for pn in probs:
        mine = {r["step"]: r for r in rows if r["problem"] == pn}
        any_r = next(iter(mine.values()))
        B = any_r["B"]
        cells = [_num(mine[s].get(f"{key}_us_per_seq"), 0, 2).strip() if s in mine else "" for s in steps]
        floors = [_num(any_r["floor"][f] / B, 0, 2).strip() for f in ("memory_us", "compute_us")]
        lines.append(f"| {labels[pn]} | " + " | ".join(cells + floors) + " |")
    return "\n".join(lines)


def per_seq_table(rows, key="graph") -> str:
    """µs per sequence on one basis ("event", "graph", "graph_warm"): a line per shape, a column per
    step, then the shape's HBM and FLOP floors per sequence."""
    steps = list(dict.fromkeys(r["step"] for r in rows))
    probs = list(dict.fromkeys(r["problem"] for r in rows))
    head = f"{'shape':<20}" + "".join(f"{s:>14}" for s in steps) + f"{'HBM floor':>11}{'FLOP floor':>11}"
    lines = [head, "-" * len(head)]
    for pn in probs:
        mine = {r["step"]: r for r in rows if r["problem"] == pn}
        any_r = next(iter(mine.values()))
        B = any_r["B"]
        cells = [_num(mine[s].get(f"{key}_us_per_seq"), 14, 2) if s in mine else f"{'':>14}" for s in steps]
        lines.append(f"{pn:<20}" + "".join(cells) + _num(any_r["floor"]["memory_us"] / B, 11, 2)
                     + _num(any_r["floor"]["compute_us"] / B, 11, 2))
    return "\n".join(lines)


# The B32 S128 target, on the datasheet basis of every floor (roofline.basis_peaks): the bar was set as 1.15× the HBM
# floor when floors came from the copy bandwidth measured on the H100 (3.01 TB/s, 2026-11-26); the same time is
# 1.15 × 3.35 / 3.01 = 1.28× the datasheet floor (3.35 TB/s): the bar has not moved.
FLOOR_TARGET = 1.28


def claims(rows, launch_rows=None) -> list[str]:
    """The seeds' claims and the chapter's targets, judged from the rows (a line each)."""
    out = []
    by = {(r["problem"], r["step"]): r for r in rows}

    def t(problem, step, key="graph"):
        return by.get((problem, step), {}).get(key, {}).get("median_us")

    if launch_rows:
        eager = next((r for r in launch_rows if r["group"] == "PyTorch"), {})
        tri = next((r for r in launch_rows if r["group"] == "Triton" and r["n_args"] == 1), {})
        node = [r.get("graph_node_us") for r in launch_rows       # launch cost: the tiny calls, not SDPA's work
                if r.get("graph_node_us") and r.get("group") != "SDPA"]
        out.append(f"'launch overhead ~11 µs': an eager PyTorch op completes every {_num(eager.get('done_us'), 0)} µs "
                   f"in a stream of calls (host issue {_num(eager.get('issue_us'), 0)} µs), a Triton launch "
                   f"{_num(tri.get('done_us'), 0)} µs, the same tiny calls as graph nodes "
                   f"{_num(min(node) if node else None, 0, 2)}–{_num(max(node) if node else None, 0, 2)} µs of GPU time")
    grid = [r for r in rows if r["B"] > 1 and "graph_us_per_seq" in r]
    for step in dict.fromkeys(r["step"] for r in grid):
        mine = [r for r in grid if r["step"] == step]
        under = [r["problem"] for r in mine if r["graph_us_per_seq"] < 5.0]
        best = min(mine, key=lambda r: r["graph_us_per_seq"])
        out.append(f"'< 5 µs per sequence' ({step}, graph-replayed, L2 flushed): {len(under)} of {len(mine)} grid "
                   f"shapes; best {best['graph_us_per_seq']:.2f} µs/seq at {best['problem']}")
    target = "B32 H16 S128 D64"
    sd, sol = t(target, "SDPA"), t(target, "solution")
    floor = next((r["floor"]["memory_us"] for r in rows if r["problem"] == target), None)
    if sd and floor:
        out.append(f"'0.2× SDPA's time' (a fifth of it) at {target}: the HBM floor is {floor / sd:.2f}× SDPA's "
                   f"graph-replayed time, so with a cold L2 no kernel can take less than {floor / sd:.2f}× SDPA's time")
        sdw = t(target, "SDPA", "graph_warm")
        best_w = min((r for r in rows if r["problem"] == target and r.get("graph_warm", {}).get("median_us")),
                     key=lambda r: r["graph_warm"]["median_us"], default=None)
        if sdw and best_w:
            out.append(f"  with the inputs already in L2: SDPA {sdw:.1f} µs, fastest {best_w['step']} "
                       f"{best_w['graph_warm']['median_us']:.1f} µs ({best_w['graph_warm']['median_us'] / sdw:.2f}× SDPA's "
                       f"time); "
                       f"L2 floor {_num(best_w.get('l2_floor_us'), 0, 2)} µs")
    if sol and floor and sd:
        out.append(f"target at {target}: solution {sol:.2f} µs = {sol / floor:.2f}× the HBM floor "
                   f"({'met' if sol <= FLOOR_TARGET * floor else 'not met'}: the target is "
                   f"≤ {FLOOR_TARGET:.2f}× the datasheet floor), SDPA {sd:.2f} µs "
                   f"({sol / sd:.2f}× SDPA's time: {'faster' if sol < sd else 'not faster'})")
    seed = "B1 H16 S1024 D64"
    sd, sol = t(seed, "SDPA"), t(seed, "solution")
    if sd and sol:
        out.append(f"target at {seed}: solution {sol:.2f} µs vs SDPA {sd:.2f} µs graph-replayed "
                   f"({sol / sd:.2f}× SDPA's time: {'faster' if sol < sd else 'not faster'})")
    return out


_BASIS = {"graph": "graph-replayed", "event": "event-timed", "graph_warm": "graph-replayed, warm L2"}


def plot_per_seq(rows, key="graph", env="", *, title=None):
    """µs per sequence against B, one panel per S of the grid (three to a row): every step, and the HBM
    floor; a short title over the panels (with the basis, `key`), one legend under them, and `env` (how
    the times were taken and the environment line) in the caption under that, at flashtutor.plots' sizes
    and the book's width. `title` is the older name of `env` (the line went above the panels then); it
    is still taken, as the caption."""
    from .. import plots

    env = env or title or ""

    grid = [r for r in rows if r["B"] > 1]
    Ss = sorted({r["S"] for r in grid})
    steps = list(dict.fromkeys(r["step"] for r in grid))
    ncols = min(3, max(1, len(Ss)))
    nrows = -(-len(Ss) // ncols) if Ss else 1
    fig, axes = plots.figure(nrows, ncols, height=1.3 + 2.5 * nrows, squeeze=False)
    for ax in axes.flat[len(Ss):]:
        ax.set_visible(False)
    for ax, S in zip(axes.flat, Ss):
        mine = [r for r in grid if r["S"] == S]
        Bs = sorted({r["B"] for r in mine})
        for step in steps:
            pts = [(r["B"], r.get(f"{key}_us_per_seq")) for r in mine if r["step"] == step]
            pts = [(b, y) for b, y in sorted(pts) if y]
            if pts:
                ax.plot([b for b, _ in pts], [y for _, y in pts], "o-", label=step, ms=4,
                        lw=2.2 if step in ("solution", "SDPA") else 1.0)
        floor = sorted((r["B"], r["floor"]["memory_us"] / r["B"]) for r in mine if r["step"] == "SDPA")
        ax.plot([b for b, _ in floor], [y for _, y in floor], "k--", lw=1, label="HBM floor")
        ax.set_xscale("log", base=2)
        ax.set_xticks(Bs, [str(b) for b in Bs])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        plots.title(ax, f"S = {S}")
        ax.set_xlabel("B (sequences per call)", fontsize=plots.NORMAL)
        ax.grid(alpha=0.3)
    for row in axes:
        row[0].set_ylabel("µs per sequence", fontsize=plots.NORMAL)
    plots.legend(fig, where="below", ncol=4)
    basis = _BASIS.get(key, key)
    plots.title(fig, f"Time per sequence as B grows, per S ({basis})")
    plots.caption(fig, env)
    return fig


# ---- 4. sweeps ----------------------------------------------------------------------------------------
def split_configs():
    from ..kernels.k06_multihead import Config
    return [(Config(bm, bn, w, s), ns) for bm in (64, 128) for bn in (64, 128) for w in (4, 8) for s in (2, 3)
            for ns in (1, 2, 3, 4, 6, 8)]


def split_sweep(problem, *, timer, log=print) -> list[dict]:
    import torch

    from ..problems import sdpa
    from ..kernels import k06_split_kv
    q, k, v = problem.inputs(0, "cuda")
    want = sdpa(q, k, v, causal=problem.causal).float()
    rows = []
    for cfg, ns in split_configs():
        kw = dict(BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                  per_sm=0, per_prog=1, n_split=ns)
        row = {"label": f"{cfg.BLOCK_M}×{cfg.BLOCK_N} w{cfg.num_warps} s{cfg.num_stages} split {ns}", **kw,
               "us": float("nan"), "ok": False, "error": ""}
        try:
            out = k06_split_kv.launch(q, k, v, causal=problem.causal, **kw)
            row["ok"] = bool(torch.isfinite(out).all()) and (out.float() - want).abs().max().item() < 2e-2
            row["n_split_used"] = k06_split_kv.plan(q, problem.causal, ns, cfg).args[4]
            if row["ok"]:
                row["us"] = timer(lambda: k06_split_kv.launch(q, k, v, causal=problem.causal, **kw)).median_us
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        rows.append(row)
    return sorted(rows, key=lambda r: (not r["ok"], r["us"] if r["us"] == r["us"] else float("inf")))


def print_sweep(rows, title, current=None, n=12, log=print):
    log(title)
    for i, r in enumerate(rows[:n]):
        log(f"  {i + 1:>3}. {r['label']:<40} {r['us']:8.2f} µs")
    bad = [r for r in rows if not r["ok"]]
    if bad:
        log(f"  {len(bad)} configurations failed, e.g. {bad[0]['label']}: {bad[0]['error'] or 'wrong output'}")
    if current is not None:
        rank = next((i for i, r in enumerate(rows) if r["label"] == current), None)
        if rank is not None:
            log(f"  the table's configuration ({current}): rank {rank + 1} of {len(rows)}, {rows[rank]['us']:.2f} µs")


# ---- the run ------------------------------------------------------------------------------------------
def run(r) -> int:
    """``flashtutor bench 06``: the five parts into ``r`` (a :class:`flashtutor.bench.runner.Run`)."""
    import torch

    from ..roofline import basis_peaks, measure_peaks, reached_line
    from .runner import save, write_json
    dry, device, log = r.dry, r.device, r.log
    # Floors on the course's one basis, the GPU's datasheet figures; what a copy and a GEMM reach here is
    # recorded beside them as "reached", never used as a peak.
    peaks = basis_peaks(torch.cuda.get_device_name() if not dry and torch.cuda.is_available() else "H200")
    log(f"floors from the datasheet: {peaks.name}: {peaks.hbm_tbs:g} TB/s, {peaks.tensor_tflops:g} TFLOP/s")
    r.doc["reached"] = None
    if not dry:
        try:
            reached = measure_peaks()
            r.doc["reached"] = reached.__dict__
            log(reached_line(reached))
        except Exception as e:      # noqa: BLE001 (the floors do not need it)
            log(f"measure_peaks failed ({e})")
    r.doc["rows"] = []
    r.doc["peaks"] = peaks.__dict__ if peaks else None
    r.part("checks", lambda: check_all(("cpu",) if dry else CH.bench.check_sets, device=device, log=log),
           store="checks")

    def launch():
        from . import launch_cost
        if dry:
            calls = {"python no-op": ("PyTorch", 0, lambda: None, False)}
            rows = launch_cost.measure(calls, n=100, gpu=False, sync=lambda: None)
        else:
            rows = launch_cost.measure(log=log)
        print(launch_cost.table(rows), flush=True)
        save(rows, r.side("launch06"))
        return rows
    launch_rows = r.part("launch", launch)

    def table():
        l2 = None
        if not dry:
            try:
                l2 = l2_copy_tbs()
                log(f"L2-resident copy: {l2:.2f} TB/s (read + written)")
            except Exception as e:
                log(f"L2 copy bandwidth not measured: {e}")
        r.doc["l2_copy_tbs"] = l2
        rows = r.doc["rows"] = table_rows(grid_problems(dry), peaks=peaks, l2_tbs=l2, dry=dry, log=log)
        for key, what in (("event", "CUDA events, L2 flushed"), ("graph", "graph-replayed, L2 flushed"),
                          ("graph_warm", "graph-replayed, L2 warm")):
            print(f"\nµs per sequence — {what}\n" + per_seq_table(rows, key), flush=True)
        print("\n" + "\n".join(claims(rows, launch_rows)), flush=True)
    r.part("table", table)

    def sweeps():
        from ..kernels import k06_multihead as mh
        from ..problems import Problem
        from ..timing import graph_times
        from .ch04 import precompile
        found = {}
        timer = _dry_stats if dry else graph_times
        if dry:
            targets = [Problem(2, 2, 32, 64)]
            cfgs = [mh.Config(16, 16, 4, 1), mh.Config(16, 32, 4, 1, per_sm=1), mh.Config(32, 16, 4, 1, per_prog=2)]
        else:
            targets = [Problem(32, 16, 128, 64), Problem(32, 16, 512, 64)]
            cfgs = mh.sweep_configs()
            jobs, seen = [], set()
            for p in targets:
                for c in cfgs:
                    kk = (p.S <= c.BLOCK_N, c.BLOCK_M, c.BLOCK_N, c.num_warps, c.num_stages, c.tma)
                    if kk not in seen:
                        seen.add(kk)
                        jobs.append((STEP_MODULES["multihead"], p.shape, p.causal,
                                     dict(BLOCK_M=c.BLOCK_M, BLOCK_N=c.BLOCK_N, num_warps=c.num_warps,
                                          num_stages=c.num_stages, tma=c.tma)))
            pc = precompile(jobs)
            log(f"precompiled {len(jobs)} configurations in {pc['wall_s']:.0f} s on {pc['workers']} workers")
        for p in targets:
            current = mh.config_for(p.B * p.H, p.S, p.D, torch.device(device))   # the table's (may use TMA)
            rows_s = mh.sweep(p, cfgs if current in cfgs else cfgs + [current], timer=timer)
            found[p.name] = rows_s
            print_sweep(rows_s, f"multihead sweep at {p.name} (graph-replayed, L2 flushed), best first:",
                        current=mh.label(current), log=log)
        if not dry:
            p = Problem(1, 16, 1024, 64)
            rows_s = split_sweep(p, timer=timer, log=log)
            found[p.name + " split"] = rows_s
            print_sweep(rows_s, f"split-KV sweep at {p.name} (graph-replayed, L2 flushed), best first:", log=log)
        write_json(r.side("sweep06"), found)
    r.part("sweeps", sweeps)

    def grader():
        from ..grading import grade
        sets = ("cpu",) if dry else ("seed", "odd")
        rep = grade("06", solution=True, timing=False, progress=False, sets=sets, device="cpu" if dry else None)
        log(f"grade 06 --solution ({', '.join(sets)}; no timing): {rep.verdict.value}: {rep.summary}")
        for f in rep.failures[:8]:
            log(f"  {f}")
        rep.save_json(r.side("grade06-notiming"))
    r.part("grader", grader)
    return 0
