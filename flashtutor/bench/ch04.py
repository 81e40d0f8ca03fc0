"""Chapter 4's tile sweep: time a Triton attention kernel over BLOCK_M × BLOCK_N × num_warps × num_stages.

    from flashtutor.bench import ch04
    rows = ch04.sweep("teaching", Problem(1, 16, 1024, 64))        # one dict per configuration
    ch04.heatmap(rows)                                               # BLOCK_M×BLOCK_N against warps×stages

Every configuration is compiled first (in parallel worker processes when there are many: Triton's
compiler runs on one CPU core, and its on-disk cache hands the result to this process), checked
against SDPA's output, then timed with :func:`flashtutor.timing.event_times` (CUDA events, the L2
flushed before every call, median). A configuration that does not fit the GPU (shared memory,
registers) is recorded with its error instead of a time.

``flashtutor bench 04 [--out FILE]`` runs the chapter's whole measurement (correctness of both kernels
on every shape set, the sweeps, the table against SDPA) into one results file; ``--dry`` runs it on tiny
shapes through Triton's interpreter (a test of this module, not a measurement).
"""
from __future__ import annotations

import importlib
import itertools
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

from ..chapters import get_chapter

CH = get_chapter("04")
KERNELS = {s.label: s.module for s in CH.steps}      # "teaching" (the solution), "hopper" (the tuned reference)
PARTS = {"precompile": "compile every configuration the sweeps need, in parallel",
         "checks": "correctness of both kernels on every shape set, causal and not",
         "sweeps": "sweeps: every configuration of both kernels at the seed and S 4096 shapes",
         "long": "the longest shapes: the best 6 configurations of the matching shorter sweep",
         "table": "the table against SDPA"}
BUDGET_S = 300.0            # later parts are skipped past this many seconds (--budget-s)
GRID = {"BLOCK_M": (64, 128), "BLOCK_N": (32, 64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4)}


@dataclass(frozen=True)
class Config:
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int

    @property
    def label(self) -> str:
        return f"{self.BLOCK_M}×{self.BLOCK_N} w{self.num_warps} s{self.num_stages}"

    def kwargs(self) -> dict:
        return asdict(self)


def all_configs(grid: dict = GRID) -> list[Config]:
    return [Config(*c) for c in itertools.product(grid["BLOCK_M"], grid["BLOCK_N"], grid["num_warps"],
                                                  grid["num_stages"])]


def launcher(kernel: str):
    """``launch(q, k, v, *, causal, BLOCK_M, BLOCK_N, num_warps, num_stages)`` of a kernel module."""
    return importlib.import_module(KERNELS.get(kernel, kernel)).launch


def inputs(B, H, S, D, seed=0, device=None):
    """Random fp16 q, k, v made on the device (fast at the large shapes)."""
    import torch
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    g = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn((B, H, S, D), generator=g, device=device, dtype=torch.float16) for _ in range(3))


# ---- compiling in parallel -------------------------------------------------------------------
def _compile_job(job):
    """Worker: compile (and run once) one configuration; Triton's cache keeps the binary."""
    kernel, shape, causal, cfg = job
    t0 = time.perf_counter()
    try:
        q, k, v = inputs(*shape)
        launcher(kernel)(q, k, v, causal=causal, **cfg)
        _sync()
        return {"ok": True, "compile_s": time.perf_counter() - t0}
    except Exception as e:  # does not fit, or does not compile
        return {"ok": False, "compile_s": time.perf_counter() - t0, "error": f"{type(e).__name__}: {str(e)[:200]}"}


def precompile(jobs, workers: int | None = None) -> dict:
    """Compile [(kernel, (B, H, S, D), causal, config kwargs)] in spawned worker processes.

    Returns {"wall_s", "sum_compile_s", "workers", "results"}: the sum is what compiling them one
    after the other in this process would have cost (each worker's first job also pays its start-up).
    """
    import concurrent.futures as cf
    import multiprocessing as mp
    jobs = list(jobs)
    workers = workers or max(1, min(len(jobs), (os.cpu_count() or 2) - 2, 14))
    t0 = time.perf_counter()
    if workers <= 1 or len(jobs) <= 2:
        results = [_compile_job(j) for j in jobs]
    else:
        with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as ex:
            results = list(ex.map(_compile_job, jobs))
    return {"wall_s": time.perf_counter() - t0, "sum_compile_s": sum(r["compile_s"] for r in results),
            "workers": workers, "results": results}


# ---- the sweep --------------------------------------------------------------------------------
def sweep(kernel: str, problem, configs=None, *, reps: int = 20, seed: int = 0, compile_first: bool = True) -> list[dict]:
    """Time ``kernel`` ("teaching", "hopper" or a module name) at ``problem`` for every configuration.

    Returns one dict per configuration: config fields, ``us`` (median µs, L2 flushed), ``tflops``,
    ``ok`` (output within 2e-2 of SDPA's), ``error`` (when it did not run).
    """
    import torch

    configs = list(configs or all_configs())
    if compile_first and len(configs) > 2:
        precompile([(kernel, problem.shape, problem.causal, c.kwargs()) for c in configs])
    launch = launcher(kernel)
    q, k, v = inputs(*problem.shape, seed=seed)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=problem.causal)
    rows = []
    for c in configs:
        row = {**c.kwargs(), "label": c.label, "us": math.nan, "tflops": math.nan, "ok": False, "error": ""}
        try:
            out = launch(q, k, v, causal=problem.causal, **c.kwargs())
            _sync()
            row["ok"] = bool(torch.isfinite(out).all()) and (out.float() - want.float()).abs().max().item() < 2e-2
            st = _time(lambda: launch(q, k, v, causal=problem.causal, **c.kwargs()), reps=reps)
            row["us"] = st.median_us
            row["tflops"] = problem.flops / (st.median_us * 1e-6) / 1e12
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        rows.append(row)
    return rows


def _time(fn, reps):
    """Median time of fn: CUDA events with the L2 flushed on a GPU; wall clock (a dry run) elsewhere."""
    import torch
    if torch.cuda.is_available():
        from ..timing import event_times
        return event_times(fn, reps=reps, warmup=2)
    from ..timing import Stats
    xs = []
    for _ in range(max(2, reps // 5)):
        t0 = time.perf_counter()
        fn()
        xs.append((time.perf_counter() - t0) * 1e6)
    return Stats.of(xs)


def best(rows: list[dict], n: int = 1) -> list[dict]:
    good = [r for r in rows if r["ok"] and r["us"] == r["us"]]
    return sorted(good, key=lambda r: r["us"])[:n]


def heatmap(rows: list[dict], ax=None, title: str = ""):
    """Rows BLOCK_M×BLOCK_N, columns num_warps×num_stages; each cell the median µs (blank: did not run).
    Drawn into `ax`, or into a figure of its own (the book's width, flashtutor.plots' sizes)."""
    import numpy as np

    from .. import plots

    tiles = sorted({(r["BLOCK_M"], r["BLOCK_N"]) for r in rows})
    launches = sorted({(r["num_warps"], r["num_stages"]) for r in rows})
    grid = np.full((len(tiles), len(launches)), np.nan)
    for r in rows:
        if r["ok"] and r["us"] == r["us"]:
            grid[tiles.index((r["BLOCK_M"], r["BLOCK_N"])), launches.index((r["num_warps"], r["num_stages"]))] = r["us"]
    if ax is None:
        _, ax = plots.figure(height=1.3 + 0.36 * len(tiles), width=min(plots.WIDTH_IN, 2.4 + 0.75 * len(launches)))
    plots.style_axes(ax)
    finite = grid[np.isfinite(grid)]
    lo = finite.min() if finite.size else 1.0
    im = ax.imshow(grid / lo, cmap="viridis_r", vmin=1.0, vmax=max(2.0, 1.0), aspect="auto")
    for i, j in itertools.product(range(len(tiles)), range(len(launches))):
        val = grid[i, j]
        txt = "—" if not np.isfinite(val) else (f"{val:.0f}" if val >= 100 else f"{val:.1f}")
        ax.text(j, i, txt, ha="center", va="center", fontsize=plots.SMALL,
                color="white" if np.isfinite(val) and val / lo > 1.5 else "black",
                fontweight="bold" if np.isfinite(val) and val == lo else "normal")
    ax.set_xticks(range(len(launches)), [f"w{w} s{s}" for w, s in launches], fontsize=plots.SMALL)
    ax.set_yticks(range(len(tiles)), [f"{m}×{n}" for m, n in tiles], fontsize=plots.SMALL)
    ax.set_xlabel("num_warps, num_stages", fontsize=plots.NORMAL)
    ax.set_ylabel("BLOCK_M × BLOCK_N", fontsize=plots.NORMAL)
    if title:
        plots.title(ax, title)
    cb = ax.figure.colorbar(im, ax=ax, shrink=0.9)
    cb.set_label("time / best (capped at 2)", fontsize=plots.SMALL)
    cb.ax.tick_params(labelsize=plots.SMALL)
    return ax


def heatmaps(sweeps: dict, env: str = "", kernel: str = "teaching kernel"):
    """One :func:`heatmap` per sweep (`sweeps`: shape name -> rows), stacked, the book's width, under a
    short title; the environment line `env` in the caption under them. Returns the figure."""
    from .. import plots

    tiles = max((len({(r["BLOCK_M"], r["BLOCK_N"]) for r in rows}) for rows in sweeps.values()), default=1)
    fig, axes = plots.figure(len(sweeps), 1, height=len(sweeps) * (1.25 + 0.36 * tiles) + 0.4, squeeze=False)
    for ax, (name, rows) in zip(axes[:, 0], sweeps.items()):
        top = best(rows)
        heatmap(rows, ax=ax, title=name + (f" (best {top[0]['label']})" if top else ""))
    plots.title(fig, f"The {kernel}'s tile and launch configurations: median µs")
    plots.caption(fig, env)
    return fig


# The chapter's target for the tuned kernel, as a time: planned as 0.9 of SDPA's speed, i.e. at most
# 1 / 0.9 = 1.11× SDPA's time (the course's one direction: your time / SDPA's, below 1 is faster).
TARGET_TIME_VS_SDPA = 1 / 0.9


def plot_vs_sdpa(table: list[dict], env: str = ""):
    """The table against SDPA (:func:`table_vs_sdpa`) as bars: each kernel's time over SDPA's per shape
    (below 1: faster than SDPA), with the lines at 1 (SDPA's time) and at the target
    (:data:`TARGET_TIME_VS_SDPA`); `env`, the environment line, in the caption. Returns the figure."""
    from .. import plots

    names = [r["problem"].replace("B1 H16 ", "").replace("B4 H32 ", "").replace("B2 H32 ", "") for r in table]
    keys = ("teaching", "tuned, one config", "tuned")
    return plots.grouped_bars(names, {k: [r["time_vs_sdpa"][k] for r in table] for k in keys},
                              ylabel="time / SDPA's time", log=False, env=env,
                              title="Chapter 4's kernels: time over SDPA's per shape, below 1 is faster",
                              hlines=((1.0, {}), (TARGET_TIME_VS_SDPA, {"ls": "--"})))


# ---- tl.dot and the loop it replaces -----------------------------------------------------------
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def score_tile(Q, K, S_loop, S_dot, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    """One [BM, BN] tile of scores q·kᵀ, twice: as the plain loop, and with tl.dot."""
    rm, rn, rd = tl.arange(0, BM), tl.arange(0, BN), tl.arange(0, D)
    # The plain loop: D rank-one updates of the [BM, BN] tile, fp32 multiply-adds on the CUDA cores.
    s = tl.zeros([BM, BN], tl.float32)
    for d in range(D):
        qd = tl.load(Q + rm * D + d).to(tl.float32)                # [BM] column d of the q tile
        kd = tl.load(K + rn * D + d).to(tl.float32)                # [BN] column d of the k tile
        s += qd[:, None] * kd[None, :]                             # [BM, BN]
    tl.store(S_loop + rm[:, None] * BN + rn[None, :], s)
    # What replaces it: one tile product on the tensor cores (fp16 in, fp32 accumulated).
    q = tl.load(Q + rm[:, None] * D + rd[None, :])                 # [BM, D]
    k = tl.load(K + rn[:, None] * D + rd[None, :])                 # [BN, D]
    tl.store(S_dot + rm[:, None] * BN + rn[None, :], tl.dot(q, tl.trans(k)))


def score_tile_demo(device, BM: int = 64, BN: int = 32, D: int = 64):
    """Run :func:`score_tile` on random fp16 tiles; returns (loop result, tl.dot result, q·kᵀ in fp64)."""
    import torch
    g = torch.Generator().manual_seed(0)
    q = torch.randn(BM, D, generator=g).half().to(device)
    k = torch.randn(BN, D, generator=g).half().to(device)
    s_loop, s_dot = (torch.empty(BM, BN, device=device) for _ in range(2))
    score_tile[(1,)](q, k, s_loop, s_dot, D=D, BM=BM, BN=BN)
    return s_loop, s_dot, q.double() @ k.double().T


# ---- what the compiler makes of it -------------------------------------------------------------
_PTX_CHILD = """
import sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from flashtutor.kernels import k04_triton_fa2 as tk
D, causal, arch = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
cfg = tk.CONFIGS[D]
sig = {n: "*fp16" for n in ("Q", "K", "V", "O")}
sig.update(qk_scale="fp32", H="i32", S="i32", stride_b="i32", stride_h="i32", stride_s="i32",
           D="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", CAUSAL="constexpr")
src = ASTSource(fn=tk.flash_attention_kernel, signature=sig,
                constexprs=dict(D=D, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], CAUSAL=causal))
k = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                   options=dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"]))
sys.stdout.write(k.asm["ptx"])
"""


def teaching_ptx(D: int = 64, causal: bool = False, arch: int = 90) -> str:
    """The PTX Triton makes of the teaching kernel (its fixed configuration) for ``sm_<arch>``.

    No GPU is needed: Triton compiles for a named target, and ships ``ptxas``. It runs in a child
    process, since under ``TRITON_INTERPRET=1`` this process's ``tl`` is the interpreter's.
    """
    import subprocess
    from pathlib import Path
    env = dict(os.environ, TRITON_INTERPRET="0")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _PTX_CHILD, str(D), str(int(causal)), str(arch)],
                       capture_output=True, text=True, env=env, timeout=300)
    if r.returncode:
        raise RuntimeError(f"compiling for sm_{arch} failed:\n{r.stderr[-2000:]}")
    return r.stdout


# ---- the chapter's whole measurement (one GPU call) ------------------------------------------
def target_problems():
    """The shapes the chapter's targets name (its timed sets): the seed shape, and S 4096/8192 with D 64
    and 128, causal and not."""
    from ..problems import SHAPE_SETS
    base = [p for s in CH.bench.time_sets for p in SHAPE_SETS[s]]
    return [p.replace(causal=c) for p in base for c in (False, True)]


def _sync():
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def check_all(sets=CH.bench.check_sets, log=print) -> list[dict]:
    """Correctness of both kernels on every shape of ``sets``, causal and not (one seed each)."""
    from .tables import check_steps
    from ..problems import SHAPE_SETS
    fns = {name: importlib.import_module(m).attention for name, m in KERNELS.items()}
    probs = list(dict.fromkeys(p0.replace(causal=c) for s in sets for p0 in SHAPE_SETS[s] for c in (False, True)))
    return check_steps(fns, probs, lambda p, i: inputs(*p.shape, seed=i + 1), log=log)


GRAPH_UP_TO = 1024     # sequences this short are also timed replayed from CUDA graphs (see table_vs_sdpa)


def table_vs_sdpa(problems, *, best_fixed=None, reps=30, peaks=None) -> list[dict]:
    """Teaching kernel, tuned Hopper kernel (autotuned; and ``best_fixed[p.name]`` config if given)
    and SDPA, timed alternately; per kernel: µs, spread, TFLOP/s, % of floor (``peaks``: the course's basis,
    ``roofline.basis_peaks``), ``time_vs_sdpa`` (the kernel's time / SDPA's: below 1, faster than SDPA).

    At S ≤ ``GRAPH_UP_TO`` a call lasts microseconds and the tuned launcher's host work (the autotuner's
    dispatch, three TMA descriptors built in Python) can outlast the L2 flush that hides it elsewhere: there
    the row's times are replayed from CUDA graphs (``basis`` "graph"; the event-timed ones stay in
    ``event_us``), so every row is the GPU's time. A kernel whose capture fails stays event-timed."""
    import torch

    from ..problems import sdpa
    from ..timing import compare, graph_times, pinned_sdpa
    teach = importlib.import_module(KERNELS["teaching"])
    hop = importlib.import_module(KERNELS["hopper"])
    rows = []
    for p in problems:
        q, k, v = inputs(*p.shape, seed=1)
        fns = {"teaching": lambda: teach.attention(q, k, v, causal=p.causal),
               "tuned": lambda: hop.attention(q, k, v, causal=p.causal)}
        cfg = (best_fixed or {}).get(p.name)
        if cfg:
            fns["tuned, one config"] = lambda: hop.launch(q, k, v, causal=p.causal, **cfg)
        t0 = time.perf_counter()
        hop.attention(q, k, v, causal=p.causal)              # the autotuner runs here, outside the timing
        _sync()
        tune_s = time.perf_counter() - t0
        if q.device.type == "cuda":
            backend, fns["sdpa"] = pinned_sdpa(q, k, v, causal=p.causal)
            st = compare(fns, reps=reps)
        else:   # a dry run on the CPU
            backend, fns["sdpa"] = "cpu", lambda: sdpa(q, k, v, causal=p.causal)
            st = {n: _time(f, reps) for n, f in fns.items()}
        basis = {n: "events" for n in st}
        event_us = {n: s.median_us for n, s in st.items()}
        if q.device.type == "cuda" and p.S <= GRAPH_UP_TO:
            for n, f in fns.items():
                try:
                    st[n], basis[n] = graph_times(f, calls=5, reps=reps), "graph"
                except Exception:                  # noqa: BLE001 (a launcher that cannot be captured)
                    torch.cuda.synchronize()
        floor = peaks.floor_us(p)["floor_us"] if peaks else math.nan
        best_cfg = getattr(getattr(hop, "fa2_tma_tuned", None), "best_config", None)
        rows.append({"problem": p.name, "backend": backend, "tune_s": tune_s, "autotuned": str(best_cfg),
                     "basis": basis, "event_us": event_us,
                     "us": {n: s.median_us for n, s in st.items()}, "spread": {n: s.spread for n, s in st.items()},
                     "tflops": {n: p.flops / (s.median_us * 1e-6) / 1e12 for n, s in st.items()},
                     "pct_floor": {n: 100 * floor / s.median_us for n, s in st.items()},
                     "time_vs_sdpa": {n: s.median_us / st["sdpa"].median_us for n, s in st.items()}})
    return rows


def run(r) -> int:
    """``flashtutor bench 04``: the parts into ``r`` (a :class:`flashtutor.bench.runner.Run`); with
    ``r.dry``, tiny shapes and three configurations through the interpreter."""
    from ..problems import SHAPE_SETS, Problem

    results = r.doc
    if r.dry:
        seed, big64, big128 = Problem(1, 2, 64, 64), Problem(1, 2, 96, 64), Problem(1, 2, 96, 128)
        long64, long128 = Problem(1, 1, 128, 64), Problem(1, 1, 128, 128)
        cfgs = [Config(16, 16, 4, 1), Config(32, 16, 4, 1), Config(16, 32, 4, 1)]
        sets = ("cpu",)
        targets = [p.replace(causal=c) for p in (seed, long64) for c in (False, True)]
    else:
        seed, big64, big128 = Problem(1, 16, 1024, 64), Problem(4, 32, 4096, 64), Problem(4, 32, 4096, 128)
        long64, long128 = Problem(2, 32, 8192, 64), Problem(2, 32, 8192, 128)
        cfgs = all_configs()
        sets = CH.bench.check_sets
        targets = target_problems()
    teach_probs = [seed, big64, big128, big128.replace(causal=True)]
    hop_probs = [seed, seed.replace(causal=True), big64, big64.replace(causal=True), big128, big128.replace(causal=True)]

    def compile_all():          # 1. compile everything the sweeps need, in parallel
        jobs, seen = [], set()
        for kernel, probs in (("teaching", teach_probs), ("hopper", hop_probs)):
            for p in probs:
                for c in cfgs:
                    key = (kernel, p.D, p.causal, c)
                    if key not in seen:
                        seen.add(key)
                        jobs.append((kernel, p.shape, p.causal, c.kwargs()))
        # the teaching kernel's fixed configuration at the checked shapes (S = 1 and odd S compile apart)
        teach_cfg = importlib.import_module(KERNELS["teaching"]).CONFIGS
        for set_name in sets:
            for p in SHAPE_SETS[set_name]:
                for c in (False, True):
                    key = ("teaching", p.D, c, "fixed", p.S == 1, p.S % 16 == 0)
                    if key not in seen and not r.dry:
                        seen.add(key)
                        jobs.append(("teaching", p.shape, c, teach_cfg[p.D]))
        pc = precompile(jobs, workers=1 if r.dry else None)
        n_bad = sum(1 for x in pc["results"] if not x["ok"])
        r.log(f"precompiled {len(jobs)} configurations in {pc['wall_s']:.0f} s on {pc['workers']} workers "
              f"(sum of compile times {pc['sum_compile_s']:.0f} s), {n_bad} failed")
        return {"jobs": len(jobs), "wall_s": pc["wall_s"], "sum_compile_s": pc["sum_compile_s"],
                "workers": pc["workers"], "per_job": [(j[0], j[1][3], j[2], j[3], x["compile_s"], x.get("error"))
                                                      for j, x in zip(jobs, pc["results"])]}
    r.part("precompile", compile_all, store="precompile")
    r.part("checks", lambda: check_all(sets, r.log), store="checks")
    results["sweeps"] = []

    def sweeps():               # 2. the sweeps
        for kernel, probs in (("teaching", teach_probs), ("hopper", hop_probs)):
            for p in probs:
                rows = sweep(kernel, p, cfgs, compile_first=False, reps=15)
                results["sweeps"].append({"kernel": kernel, "problem": p.name, "shape": p.shape, "causal": p.causal,
                                          "rows": rows})
                r.log(f"sweep {kernel:8s} {p.name:28s} best "
                      + ", ".join(f"{x['label']} {x['us']:.1f}µs" for x in best(rows, 3)))
                r.save()
    r.part("sweeps", sweeps)

    def longest():              # 3. the longest shapes: the best 6 configurations of the matching shorter sweep
        for p, src_p in ((long64, big64), (long128, big128)):
            for c in (False, True):
                p2 = p.replace(causal=c)
                src = next(s for s in results["sweeps"]
                           if s["kernel"] == "hopper" and s["problem"] == src_p.replace(causal=c).name)
                top = [Config(x["BLOCK_M"], x["BLOCK_N"], x["num_warps"], x["num_stages"])
                       for x in best(src["rows"], 6)]
                rows = sweep("hopper", p2, top, compile_first=False, reps=10)
                results["sweeps"].append({"kernel": "hopper", "problem": p2.name, "shape": p2.shape, "causal": c,
                                          "rows": rows})
                r.log(f"sweep hopper   {p2.name:28s} best "
                      + ", ".join(f"{x['label']} {x['us']:.1f}µs" for x in best(rows, 3)))
                r.save()
    r.part("long", longest)

    def table():                # 4. the table against SDPA
        peaks = None
        if not r.dry:
            import torch

            from ..roofline import basis_peaks, measure_peaks, reached_line
            reached = measure_peaks()          # what a GEMM and a copy reach here: recorded, not the basis
            results["reached"] = asdict(reached)
            r.log(reached_line(reached))
            peaks = basis_peaks(torch.cuda.get_device_name())
            results["peaks"] = asdict(peaks) if peaks else None
        best_fixed = {}
        for s in results["sweeps"]:
            if s["kernel"] == "hopper" and best(s["rows"]):
                b = best(s["rows"])[0]
                best_fixed[s["problem"]] = {kk: b[kk] for kk in ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages")}
        results["table"] = []
        for p in targets:
            if r.budget_s is not None and r.elapsed() > r.budget_s:
                r.log("budget spent: table cut short")
                break
            results["table"] += table_vs_sdpa([p], best_fixed=best_fixed, reps=5 if r.dry else 30, peaks=peaks)
            r.save()
        r.log(f"table: the kernel's time / SDPA's time (below 1: faster than SDPA; the target for 'tuned' is "
              f"≤ {TARGET_TIME_VS_SDPA:.2f}× SDPA's time)")
        print(f"{'problem':30s} {'SDPA µs':>9s} {'teach':>7s} {'tuned':>7s} {'1cfg':>7s}  "
              "TFLOP/s sdpa/teach/tuned  autotuned")
        for x in results["table"]:
            s, tf = x["time_vs_sdpa"], x["tflops"]
            print(f"{x['problem']:30s} {x['us']['sdpa']:9.1f} {s['teaching']:7.3f} {s['tuned']:7.3f} "
                  f"{s.get('tuned, one config', math.nan):7.3f}  {tf['sdpa']:.0f}/{tf['teaching']:.0f}/{tf['tuned']:.0f}"
                  f"  {x['autotuned']}", flush=True)
    r.part("table", table)
    return 0
