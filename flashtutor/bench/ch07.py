"""Chapter 7's measurements: the three Hopper steps beside SDPA — read from the results files, or
measured here on an sm_90 GPU.

    from flashtutor.bench import ch07
    runs = ch07.stored()                          # every results/ch07-*, grade07-*, bench07-* file (any machine)
    rows = ch07.measure(probs, peaks)             # GPU: each step checked, then timed with SDPA in one loop
    flashtutor bench 07 [--skip large]            # the same on an sm_90 GPU, saved to results/bench07-….json

A *row* is one (step, shape): ``us`` and ``sdpa_us`` (median GPU time per call, the step's and SDPA's
in the same process), ``ratio`` = us / sdpa_us (above 1: slower than SDPA), ``tflops`` (4·B·H·S²·D per
call, half of it with causal masking). A *run* is one results file: its rows, the GPU, the date and
the timing protocol, in words — numbers from different runs are only compared through their ratios to
SDPA, and then said to be so.
"""
from __future__ import annotations

import json
from pathlib import Path

from ..chapters import ROOT, get_chapter
from ..docs import keep_shapes

CH = get_chapter("07")
STEPS = {s.label: s.module for s in CH.steps}     # step → module (its attention(q, k, v, *, causal))
PARTS = {"peaks": "peaks (copy bandwidth, fp16 matmul)", "seed": "the steps at the seed shape, causal and not",
         "large": "the steps on the large set, causal and not"}
LABELS = {"7a": "7a one warpgroup, TMA ring, wgmma", "7b": "7b warp-specialized (the solution)",
          "7c": "7c ping-pong + softmax under P·V", "SDPA": "SDPA"}
PROTOCOLS = {
    "ch07": ("scripts/ch07_gpu.py: triton.testing.do_bench (median, L2 flushed before each call), the step "
             "first, then SDPA (cuDNN, pinned) on the same inputs, in one process"),
    "ch07-stream": ("scripts/ch07_gpu.py --stream, the grader's way without its gate: GPU time per call of "
                    "back-to-back batches between two CUDA events, L2 flushed before each batch, the step and SDPA "
                    "(cuDNN, pinned) alternating batch by batch, median of 5 rounds; graph-replayed at S ≤ 1024"),
    "grade": ("the grader's (`flashtutor grade 07 --solution`): GPU time per call from gated back-to-back "
              "batches, fresh inputs out of L2, alternating with SDPA (cuDNN, pinned) in the judge's process"),
    "bench07": ("flashtutor.bench.ch07.measure: CUDA events, L2 flushed before each call, the steps and "
                "SDPA (pinned) alternately in one loop, medians"),
}


# ---------------------------------------------------------------- the results files --------------
def _problem_flops(name: str) -> float:
    """4·B·H·S²·D (half with causal) from a problem's name, e.g. 'B4 H32 S4096 D128 causal'."""
    parts = dict((w[0], int(w[1:])) for w in name.split() if w[0] in "BHSD" and w[1:].isdigit())
    f = 4.0 * parts["B"] * parts["H"] * parts["S"] ** 2 * parts["D"]
    return f / 2 if name.endswith("causal") else f


def _row(step: str, problem: str, us: float, sdpa_us: float) -> dict:
    return {"step": step, "problem": problem, "us": us, "sdpa_us": sdpa_us, "ratio": us / sdpa_us,
            "tflops": _problem_flops(problem) / us / 1e6, "sdpa_tflops": _problem_flops(problem) / sdpa_us / 1e6}


def _gpu_short(name: str) -> str:
    return "H200" if "H200" in name else "H100" if "H100" in name else name


def _read_ch07(path: Path) -> dict:
    """scripts/ch07_gpu.py's JSON. Where the file holds records of kind 'stream' (``--stream``: GPU time per call
    the grader's way, graph-replayed at S <= 1024) they are its rows, with do_bench's time of the same call beside
    them (``event_us``); an older file has only 'time' records (do_bench: ms, sdpa_ms), and where the script
    also replayed those calls from CUDA graphs (S <= 1024, where do_bench's time is the host's launch), the
    graph-replayed time is the row's and do_bench's is kept beside it."""
    d = json.loads(path.read_text())
    env = d.get("environment", {})
    records = [(step, r) for step, st in d.get("steps", {}).items() for r in st.get("records", [])]
    timed = {(step, r["problem"]): r for step, r in records if r.get("kind") == "time" and "ms" in r}
    stream = [(step, r) for step, r in records if r.get("kind") == "stream" and "us" in r]
    rows = []
    if stream:
        for step, r in stream:
            row = _row(step, r["problem"], r["us"], r["sdpa_us"])
            row["basis"] = r.get("basis", "back-to-back")
            t = timed.get((step, r["problem"]))
            if t:
                row.update(event_us=1e3 * t["ms"], sdpa_event_us=1e3 * t["sdpa_ms"])
            rows.append(row)
        protocol = PROTOCOLS["ch07-stream"]
    else:
        for (step, problem), r in timed.items():
            if "graph_us" in r:
                row = _row(step, problem, r["graph_us"], r["sdpa_graph_us"])
                row.update(basis="graph-replayed", event_us=1e3 * r["ms"], sdpa_event_us=1e3 * r["sdpa_ms"])
            else:
                row = _row(step, problem, 1e3 * r["ms"], 1e3 * r["sdpa_ms"])
            rows.append(row)
        protocol = PROTOCOLS["ch07"]
    return {"gpu": env.get("gpu", "?"), "date": str(env.get("date", "?"))[:10], "protocol": protocol,
            "kind": "ch07", "rows": rows}


def _read_grade(path: Path) -> dict:
    """A grade report of chapter 7's solution (step 7b): its timings, learner and SDPA per shape."""
    d = json.loads(path.read_text())
    env = d.get("env", {})
    step = "7b" if "solutions/07_hopper" in str(d.get("path", "")) else "exercise"
    rows = [_row(step, t["problem"], t["times"]["learner"]["median_us"], t["times"]["sdpa"]["median_us"])
            for t in d.get("timings", []) if t.get("times", {}).get("learner") and t["times"].get("sdpa")]
    return {"gpu": env.get("gpu", "?"), "date": str(env.get("date", "?"))[:10], "protocol": PROTOCOLS["grade"],
            "kind": "grade", "rows": rows}


def _read_bench07(path: Path) -> dict:
    d = json.loads(path.read_text())
    env = d.get("env", {})
    rows = [r for r in d.get("rows", []) if "us" in r]
    return {"gpu": env.get("gpu", "?"), "date": str(env.get("date", "?"))[:10], "protocol": PROTOCOLS["bench07"],
            "kind": "bench07", "rows": rows, "peaks": d.get("peaks")}


def stored(results_dir: Path | None = None) -> list[dict]:
    """Every chapter-7 results file that holds step timings, oldest name first: {file, gpu, date, protocol,
    kind, rows} (a file of ch07_gpu.py's variant sweeps, say, has none and is left out)."""
    results_dir = Path(results_dir or ROOT / "results")
    readers = (("ch07-*.json", _read_ch07), ("grade07-*.json", _read_grade), ("bench07-*.json", _read_bench07))
    runs = []
    for pattern, read in readers:
        for path in sorted(results_dir.glob(pattern), key=lambda f: f.stem):   # "-26" before "-26-dynamic"
            run = read(path)
            run["file"] = f"results/{path.name}"
            if run["rows"]:
                runs.append(run)
    return runs


def latest(runs: list[dict]) -> list[dict]:
    """The newest run of each (GPU, kind of file), in ``runs``' order: the table a reader needs first."""
    newest = {}
    for run in runs:
        key = (run["gpu"], run["kind"])
        if key not in newest or run["date"] >= newest[key]["date"]:
            newest[key] = run
    return [run for run in runs if newest[(run["gpu"], run["kind"])] is run]


# What a run's file-name label means (runs of one day that timed different versions of step 7c).
RUN_LABELS = {
    "dynamic": "step 7c with a global tile counter on causal shapes, commit d8e681b",
    "static-counts": "step 7c's static walk counting its tiles from S, the committed kernel, commit 54de549",
    "split": "step 7c with its last partial round split along the keys at D = 128, commit 777e1a8",
    "with-end-align": "step 7c whose three-consumer kernel also ends its query blocks at S under masking, "
                      "commit 5166383",
}


def describe_run(run: dict) -> str:
    steps = sorted({r["step"] for r in run["rows"]})
    stem = run["file"].rsplit("/", 1)[-1].removesuffix(".json")
    label = next((f" ({key}: {text})" for key, text in RUN_LABELS.items() if stem.endswith("-" + key)), "")
    return (f"`{run['file']}`{label}: {run['gpu']}, {run['date']}; steps {', '.join(steps) or 'none'}, "
            f"{len({r['problem'] for r in run['rows']})} shapes; timed with {run['protocol']}")


# ---------------------------------------------------------------- tables -------------------------
def by_problem(rows: list[dict]) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        out.setdefault(r["problem"], {})[r["step"]] = r
    return out


def versus_sdpa_table(runs: list[dict]) -> str:
    """Markdown: a table per run, headed by the run (GPU, date, kind, file), one line per (shape, step): time,
    TFLOP/s, % of peak (the course's one basis, the GPU's datasheet fp16 tensor-core peak, even where the
    results file also holds a measured matmul rate), time / SDPA's. (A run column repeated on every line made
    each row two or three lines tall.)"""
    from ..roofline import peak_tflops
    out = []
    for run in runs:
        pk = peak_tflops(run["gpu"])
        out += [f"**{_gpu_short(run['gpu'])}, {run['date']}** ({run['kind']}, `{run['file']}`):", "",
                "| shape | step | time | TFLOP/s | % of peak | SDPA | SDPA's % of peak | time / SDPA |",
                "|" + "---|" * 8]
        for prob, steps in by_problem(run["rows"]).items():
            for step in sorted(steps):
                r = steps[step]
                pct = f"{100 * r['tflops'] / pk:.0f}%" if pk else "—"
                sd_pct = f"{100 * r['sdpa_tflops'] / pk:.0f}%" if pk else "—"
                basis = " (graph)" if r.get("basis") == "graph-replayed" else ""
                out.append(f"| {keep_shapes(prob)} | {step} | {_t(r['us'])}{basis} | {r['tflops']:.0f} | {pct} | "
                           f"{_t(r['sdpa_us'])} | {sd_pct} | {r['ratio']:.2f}× |")
        out.append("")
    return "\n".join(out).rstrip("\n")


def gains(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Within one run: per shape, what each step bought (time before / time after, > 1 = faster)."""
    out = {}
    for prob, s in by_problem(rows).items():
        g = {}
        for a, b in (("7a", "7b"), ("7b", "7c"), ("7a", "7c")):
            if a in s and b in s:
                g[f"{a}→{b}"] = s[a]["us"] / s[b]["us"]
        for k in ("7a", "7b", "7c"):
            if k in s:
                g[f"{k} / SDPA"] = s[k]["ratio"]
        out[prob] = g
    return out


def _t(us: float) -> str:
    return f"{us / 1000:.2f} ms" if us >= 1000 else f"{us:.1f} µs"


def _span(xs: list[float], fmt: str = "{:.2f}×") -> str:
    if not xs:
        return "—"
    lo, hi = min(xs), max(xs)
    return fmt.format(lo) if abs(hi - lo) < 0.005 else f"{fmt.format(lo)}–{fmt.format(hi)}"


# ---------------------------------------------------------------- the seeds' predictions ---------
CLAIMS = (   # (the seed's prediction, in figures: a speed-up between two of the course's kernels, or against
    #          SDPA a time ratio, the kernel's time / SDPA's; the step or measurement that tests it)
    ("warp specialization: 55 → 40 µs, 1.38× (its phase C.2)", 1.38, "7a→7b"),
    ("XOR swizzling: 1.2× (bank conflicts gone)", 1.2, "swizzle"),
    ("double buffering: 1.1× (load latency hidden)", 1.1, "double buffer"),
    ("the final kernel in half SDPA's time (20 µs against 40 µs)", 0.5, "vs SDPA"),
)


def _ch03_gains(results_dir: Path) -> tuple[str, dict[str, list[float]]]:
    """Chapter 3's measured gains of double buffering (a → b) and padding (b → c), per shape."""
    files = sorted(results_dir.glob("bench03-*.json"))
    if not files:
        return "", {}
    d = json.loads(files[-1].read_text())
    t = {}
    for r in d.get("rows", []):
        if "median_us" in r:
            t.setdefault(r["problem"], {})[r["step"]] = r["median_us"]
    out = {"double buffer": [], "swizzle": []}
    for s in t.values():
        if "a wmma" in s and "b + cp.async" in s:
            out["double buffer"].append(s["a wmma"] / s["b + cp.async"])
        if "b + cp.async" in s and "c + padding" in s:
            out["swizzle"].append(s["b + cp.async"] / s["c + padding"])
    env = d.get("env", {})
    return f"results/{files[-1].name} ({_gpu_short(env.get('gpu', '?'))}, {str(env.get('date', '?'))[:10]})", out


def claims_table(runs: list[dict], live: list[dict] | None = None, results_dir: Path | None = None) -> str:
    """Markdown: each prediction of the seed against what the course measured, with where it comes from.
    ``live``: rows measured in this session (one process, so step-to-step gains are direct)."""
    results_dir = Path(results_dir or ROOT / "results")
    ch03_src, ch03 = _ch03_gains(results_dir)
    lines = ["| the earlier plan predicted | in figures | what the course measured | from |", "|---|---|---|---|"]

    def ratios(step: str):   # (time / SDPA per shape, the runs that gave them)
        xs, srcs = [], []
        for run in runs:
            rs = [r["ratio"] for r in run["rows"] if r["step"] == step]
            if rs:
                xs += rs
                srcs.append(f"{run['file']} ({_gpu_short(run['gpu'])}, {run['date']})")
        return xs, srcs

    for claim, gain, test in CLAIMS:
        if test == "7a→7b":
            measured, src = _a_to_b(runs, live)
        elif test in ("swizzle", "double buffer"):
            step = {"swizzle": "the 128-byte swizzle", "double buffer": "the 2-slot ring"}[test]
            xs = ch03.get(test, [])
            name = {"swizzle": "padding (b → c)", "double buffer": "cp.async double buffering (a → b)"}[test]
            measured = (f"not separable in chapter 7 ({step} is part of step 7a); chapter 3's {name}: "
                        f"{_span(xs)} over {len(xs)} shapes" if xs else f"not separable in chapter 7 ({step} is part of 7a)")
            src = ch03_src or "—"
        else:
            parts, srcs = [], []
            for step in ("7b", "7c"):
                if live and any(r["step"] == step for r in live):
                    xs = [r["ratio"] for r in live if r["step"] == step]
                    s = ["measured above (this session)"]
                else:
                    xs, s = ratios(step)
                if xs:
                    parts.append(f"{step}: {_span(xs)} SDPA's time (the prediction: {gain:.2f}×)")
                    srcs += s
            measured, src = "; ".join(parts) or "—", "; ".join(dict.fromkeys(srcs)) or "—"
        figure = f"{gain:.2f}× SDPA's time" if test == "vs SDPA" else f"{gain:.2f}×"
        lines.append(f"| {claim} | {figure} | {measured} | {src} |")
    return "\n".join(lines)


def _a_to_b(runs: list[dict], live: list[dict] | None) -> tuple[str, str]:
    """7a → 7b: direct from one run when one has both steps, else through each step's ratio to SDPA in
    two runs (indicative only: GPU and protocol may differ)."""
    if live:
        xs = [g["7a→7b"] for g in gains(live).values() if "7a→7b" in g]
        if xs:
            return f"{_span(xs)} (7a's time / 7b's, one process)", "measured above (this session)"
    for run in runs:
        xs = [g["7a→7b"] for g in gains(run["rows"]).values() if "7a→7b" in g]
        if xs:
            return f"{_span(xs)} (7a's time / 7b's, one run)", f"{run['file']} ({_gpu_short(run['gpu'])}, {run['date']})"
    with_a = [run for run in runs if any(r["step"] == "7a" for r in run["rows"])]
    with_b = [run for run in runs if any(r["step"] == "7b" for r in run["rows"])]
    if not with_a or not with_b:
        return "no run has both 7a and 7b", "—"
    ra = with_a[-1]
    rb = next((run for run in reversed(with_b) if run["gpu"] == ra["gpu"]), with_b[-1])   # the same GPU if any
    a = {r["problem"]: r["ratio"] for r in ra["rows"] if r["step"] == "7a"}
    b = {r["problem"]: r["ratio"] for r in rb["rows"] if r["step"] == "7b"}
    shared = sorted(set(a) & set(b))
    if not shared:
        return "no shape timed for both 7a and 7b", "—"
    xs = [a[p] / b[p] for p in shared]
    same = "the same GPU" if ra["gpu"] == rb["gpu"] else f"{_gpu_short(ra['gpu'])} against {_gpu_short(rb['gpu'])}"
    return (f"{_span(xs)} on {len(shared)} shapes, as (7a / SDPA) ÷ (7b / SDPA) from two runs — indicative only: "
            f"{same}, {ra['kind']} timing against {rb['kind']} timing"), f"{ra['file']}; {rb['file']}"


def time_vs_sdpa_needs(runs: list[dict], ratio: float = 0.5, min_s: int = 4096) -> list[str]:
    """Per run: the rate a kernel taking ``ratio`` × SDPA's time would need on the long sequences
    (S ≥ ``min_s``), as a share of peak (the course's one basis: the GPU's datasheet fp16 tensor-core peak,
    ``roofline.peak_tflops``, even where the run also holds a measured matmul rate)."""
    from ..roofline import basis_peaks
    out = []
    for run in runs:
        ds = basis_peaks(run["gpu"])
        pk = ds.tensor_tflops if ds else None
        sd = {r["problem"]: r["sdpa_tflops"] for r in run["rows"] if _problem_S(r["problem"]) >= min_s}
        if not sd or not pk:
            continue
        need = [t / ratio / pk for t in sd.values()]
        out.append(f"{run['file']} ({_gpu_short(run['gpu'])}): SDPA ran at {_span(list(sd.values()), '{:.0f}')} TFLOP/s "
                   f"on {len(sd)} long shapes; at {ratio:.2f}× SDPA's time a kernel would run at "
                   f"{_span([100 * x for x in need], '{:.0f}%')} of peak ({pk:.0f} TFLOP/s, {ds.name} datasheet)")
    return out


# ---------------------------------------------------------------- the chapter's targets ----------
# Set when the chapter was planned: the last step at least as fast as SDPA at D = 128 on the large shapes
# (S ≥ 4096), within 5% of it at D = 64, and no slower at the seed shape. Written as limits on
# time / SDPA's time; checked, not graded (the grader has no speed rule in chapter 7).
TARGETS = (
    ("D 128, S ≥ 4096", lambda name: " D128" in name and _problem_S(name) >= 4096, 1.0),
    ("D 64, S ≥ 4096", lambda name: " D64" in name and _problem_S(name) >= 4096, 1.0 / 0.95),
    ("the seed shape B1 H16 S1024 D64", lambda name: name.startswith("B1 H16 S1024 D64"), 1.0),
)


def _problem_S(name: str) -> int:
    return next(int(w[1:]) for w in name.split() if w.startswith("S") and w[1:].isdigit())


def targets(rows: list[dict], step: str = "7c") -> list[str]:
    """One line per target: met or missed by ``step``'s rows, with the shapes that miss it."""
    out = []
    mine = [r for r in rows if r.get("step") == step and "ratio" in r]
    for what, applies, limit in TARGETS:
        rs = [r for r in mine if applies(r["problem"])]
        if not rs:
            out.append(f"{what}: no {step} timing")
            continue
        miss = [r for r in rs if r["ratio"] > limit + 1e-9]
        worst = max(rs, key=lambda r: r["ratio"])
        verdict = "met" if not miss else f"missed on {len(miss)} of {len(rs)} shape{'s' if len(rs) > 1 else ''}"
        digits = 3 if abs(worst["ratio"] - limit) < 0.01 else 2     # 1.003 is a miss that 2 digits show as 1.00
        out.append(f"{what}: time ≤ {limit:.2f} × SDPA's — {verdict} (worst {worst['ratio']:.{digits}f}× at "
                   f"{worst['problem']})")
    return out


# ---------------------------------------------------------------- measuring (GPU) ----------------
def problems(*, large: bool = True):
    """The chapter's timed sets (the seed shape and, with ``large``, the grader's large set), causal and not."""
    from .tables import problems as _problems
    sets = tuple(s for s in CH.bench.time_sets if large or s != "large")
    return _problems(*sets, causal=(False, True))


def _inputs(p, seed: int = 0):
    """Random q, k, v made on the GPU (the CPU generator of Problem.inputs takes seconds at S = 8192)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(p.shape, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    return q, k, v


def measure(probs, peaks, *, steps: dict | None = None, reps: int = 30, max_seconds: float = 8.0,
            graph_max_s: int = 1024, log=print) -> list[dict]:
    """Check every step on every problem against the fp32 reference, then time the correct ones and
    SDPA (pinned) alternately with CUDA events, L2 flushed before each call. Problems with S up to
    ``graph_max_s`` are also replayed from CUDA graphs, and their rows' times are the graph-replayed ones
    (a call of a few µs is launched more slowly than the GPU runs it, and events around it then time the
    launch; ``event_us`` keeps the events' time). One row per (step, shape); a wrong or failing step gets
    an ``error`` instead of times."""
    import importlib

    import torch

    from ..check import check_output
    from ..problems import reference, sdpa
    from ..timing import compare, graph_times, pinned_sdpa

    steps = steps or STEPS
    fns = {k: importlib.import_module(m).attention for k, m in steps.items()}
    rows = []
    for p in probs:
        q, k, v = _inputs(p)
        ref, sd = reference(q, k, v, causal=p.causal), sdpa(q, k, v, causal=p.causal)
        ok = {}
        for name, fn in fns.items():
            try:
                out = fn(q, k, v, causal=p.causal)
                torch.cuda.synchronize()
                res = check_output(p, q, k, v, out, ref=ref, sdpa_out=sd)
                if res.ok:
                    ok[name] = (lambda f=fn, q=q, k=k, v=v, c=p.causal: f(q, k, v, causal=c))
                else:
                    rows.append({"step": name, "problem": p.name, "error": f"wrong: {res.message[:160]}"})
            except Exception as e:   # noqa: BLE001 — a step that fails here is reported, not fatal
                rows.append({"step": name, "problem": p.name, "error": f"{type(e).__name__}: {str(e)[:160]}"})
        del ref, sd
        backend, sdpa_fn = pinned_sdpa(q, k, v, causal=p.causal)
        stats = compare({**ok, "SDPA": sdpa_fn}, reps=reps, max_seconds=max_seconds)
        floor = peaks.floor_us(p)["floor_us"]
        graph = {}
        if p.S <= graph_max_s:
            with sdpa_fn.pinned():
                graph = {n: graph_times(f).median_us for n, f in {**ok, "SDPA": sdpa_fn}.items()}
        for name in ok:
            ev, sd_ev = stats[name].median_us, stats["SDPA"].median_us
            if graph:   # calls of a few µs: the GPU's time per call is the graph-replayed one (events include
                r = _row(name, p.name, graph[name], graph["SDPA"])    # the host's launch whenever it is slower)
                r.update(basis="graph-replayed")
            else:
                r = _row(name, p.name, ev, sd_ev)
                r.update(basis="events")
            r.update(event_us=ev, sdpa_event_us=sd_ev, event_ratio=ev / sd_ev, spread=stats[name].spread,
                     sdpa_backend=backend, pct_peak=100 * r["tflops"] / peaks.tensor_tflops,
                     pct_floor=100 * floor / r["us"])
            rows.append(r)
        log(f"  {p.name}: " + ", ".join(f"{n} {_t(stats[n].median_us)}" for n in stats))
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def table(rows: list[dict], peaks) -> str:
    """Markdown of :func:`measure`'s rows: time, TFLOP/s, % of peak (``peaks``: the course's basis,
    ``roofline.basis_peaks``), time / SDPA; the event-timed ratio beside it where the time is graph-replayed."""
    head = (f"| shape | step | time | TFLOP/s | % of peak ({peaks.tensor_tflops:.0f}) | SDPA | "
            "time / SDPA | event-timed / SDPA |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['problem']} | {r['step']} | {r['error']} | | | | | |")
            continue
        graph = r.get("basis") == "graph-replayed"
        ev = f"{r['event_ratio']:.2f}×" if graph else "(the same)"
        lines.append(f"| {keep_shapes(r['problem'])} | {r['step']} | {_t(r['us'])}{' (graph)' if graph else ''} | {r['tflops']:.0f} | "
                     f"{r['pct_peak']:.0f}% | {_t(r['sdpa_us'])} | {r['ratio']:.2f}× | {ev} |")
    return "\n".join(lines)


def gains_table(rows: list[dict]) -> str:
    """Markdown: per shape, each step's speed-up over the one before (one process) and the last one's time
    over SDPA's."""
    g_all = gains(rows)
    cols = [c for c in ("7a→7b", "7b→7c", "7a→7c", "7c / SDPA") if any(c in g for g in g_all.values())]
    lines = ["| shape | " + " | ".join(cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for prob, g in g_all.items():
        lines.append(f"| {keep_shapes(prob)} | " + " | ".join(f"{g[c]:.2f}×" if c in g else "—" for c in cols) + " |")
    return "\n".join(lines)


def run(r) -> int:
    """``flashtutor bench 07``: every step at the seed shape, then on the large set, into ``r`` (a
    :class:`flashtutor.bench.runner.Run`)."""
    from ..roofline import basis_peaks, measure_peaks, reached_line
    from .tables import problems as _problems
    reached = r.part("peaks", measure_peaks)      # what a GEMM and a copy reach here: recorded, not the basis
    if reached is None:
        return 1
    r.doc["reached"] = {"tensor_tflops": reached.tensor_tflops, "hbm_tbs": reached.hbm_tbs}
    r.log(reached_line(reached))
    peaks = basis_peaks(reached.name)
    if peaks is None:
        r.log(f"no datasheet figures for {reached.name}: no floors, no % of peak")
        return 1
    r.doc["peaks"] = {"name": peaks.name, "tensor_tflops": peaks.tensor_tflops, "hbm_tbs": peaks.hbm_tbs,
                      "source": peaks.source}
    rows = r.doc.setdefault("rows", [])
    for key in ("seed", "large"):
        if key in CH.bench.time_sets:
            rows += r.part(key, lambda s=key: measure(_problems(s, causal=(False, True)), peaks, log=r.log)) or []
            r.save()
    print(table(rows, peaks))
    print(gains_table(rows))
    return 0
