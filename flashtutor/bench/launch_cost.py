"""What a call costs, on the host and on the GPU, for the smallest possible work.

A launch has two costs that are easy to mix up:

* **host time**: Python, the framework (PyTorch's dispatcher, Triton's launcher binding and checking
  its arguments), the driver call. Measured with ``time.perf_counter`` around many calls:
  *issue* (no synchronisation: what the host spends per call while the GPU keeps up or queues) and
  *done* (the same loop, then a synchronize: the rate at which a stream of such calls completes);
  *sync each* (a synchronize after every call: one call's round trip).
* **GPU time**: from one kernel's start to the next one's, when the GPU never waits for the host.
  To make sure of that, the stream is first held by a spin kernel (``torch.cuda._sleep``) long
  enough for the host to queue all calls; CUDA events around the calls then see only the GPU's
  time per call (``gpu_hidden`` records that the host really was ahead).
* **one node of a CUDA graph**: N calls captured in a graph and replayed with one host call;
  events give the GPU time per node, ``perf_counter`` the host time of one replay.

    rows = measure()                 # a list of dicts, one per call type (needs a GPU)
    print(table(rows)); plot(rows)

The calls: a PyTorch eager op (``torch.add`` on 1 K floats), empty Triton kernels with 1, 4, 16 and 32
arguments (half tensors, half ints), an empty CUDA kernel launched through ``cuda.core`` (flashtutor's
NVRTC loader, and the bare ``cuda.core.launch`` with everything prepared), the same kernels as
graph nodes, a one-node graph's replay, and SDPA at the seed shape. The functions take ``clock`` and
``sync`` arguments so that the bookkeeping can be tested without a GPU.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import triton
import triton.language as tl


# ---- empty Triton kernels with 1, 4, 16 and 32 arguments --------------------------------------------
@triton.jit
def empty_1(a0):
    pass


@triton.jit
def empty_4(a0, a1, a2, a3):
    pass


@triton.jit
def empty_16(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15):
    pass


@triton.jit
def empty_32(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15,
             a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31):
    pass


EMPTY_TRITON = {1: empty_1, 4: empty_4, 16: empty_16, 32: empty_32}


# ---- the bytes of attention without its math ------------------------------------------------------
@triton.jit
def bytes_only_kernel(Q, K, V, O, n, BLOCK: tl.constexpr):
    """o = q + k + v elementwise: reads Q, K and V once and writes O once, the least traffic any
    attention kernel moves, with no math worth the name. Its time is a practical floor for them."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(O + offs, tl.load(Q + offs, mask=ok) + tl.load(K + offs, mask=ok) + tl.load(V + offs, mask=ok),
             mask=ok)


BYTES_ONLY_BLOCK = 4096     # elements per program: 8 KB of each tensor, 8 warps, enough loads in flight


def bytes_only(q, k, v, out):
    """Launch :func:`bytes_only_kernel` over the whole tensors (out: like q)."""
    n = q.numel()
    bytes_only_kernel[(triton.cdiv(n, BYTES_ONLY_BLOCK),)](q, k, v, out, n, BLOCK=BYTES_ONLY_BLOCK, num_warps=8)
    return out
INT_ARG = 7      # not 1 and not a multiple of 16, so Triton does not specialise the int arguments away


def triton_args(n: int, tensor) -> list:
    """n arguments: tensors at even positions, ints at odd ones."""
    return [tensor if i % 2 == 0 else INT_ARG for i in range(n)]


def empty_triton_call(n: int, tensor) -> Callable[[], object]:
    kernel, args = EMPTY_TRITON[n], triton_args(n, tensor)
    return lambda: kernel[(1,)](*args)


# ---- the measurements --------------------------------------------------------------------------------
def _torch_sync():
    import torch
    torch.cuda.synchronize()


def host_us(fn, *, n: int = 2000, warmup: int = 50, n_sync: int = 200, clock=time.perf_counter,
            sync=None) -> dict:
    """Host µs per call: ``issue`` (n calls, no sync), ``done`` (the same n calls and one sync at the
    end), ``sync_each`` (a sync after every call, ``n_sync`` calls)."""
    sync = sync or _torch_sync
    for _ in range(warmup):
        fn()
    sync()
    t0 = clock()
    for _ in range(n):
        fn()
    t1 = clock()
    sync()
    t2 = clock()
    for _ in range(n_sync):
        fn()
        sync()
    t3 = clock()
    return {"issue_us": (t1 - t0) / n * 1e6, "done_us": (t2 - t0) / n * 1e6,
            "sync_each_us": (t3 - t2) / max(n_sync, 1) * 1e6}


_cycles: list = []


def cycles_per_us() -> float:
    """GPU clock cycles per µs of ``torch.cuda._sleep`` (measured once with events)."""
    import torch
    if not _cycles:
        torch.cuda._sleep(1000)
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cyc = 20_000_000
        a.record()
        torch.cuda._sleep(cyc)
        b.record()
        b.synchronize()
        _cycles.append(cyc / (a.elapsed_time(b) * 1e3))
    return _cycles[0]


def gpu_us(fn, *, n: int = 200, rounds: int = 5, host_issue_us: float = 30.0) -> dict:
    """GPU µs per call with the host out of the way: hold the stream with a spin kernel long enough
    for the host to queue all ``n`` calls, then time them with events. Median of ``rounds``."""
    import torch
    has_sleep = hasattr(torch.cuda, "_sleep")
    spin_us = 1.5 * n * host_issue_us + 200.0
    per, hidden = [], []
    for _ in range(rounds):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        if has_sleep:
            torch.cuda._sleep(int(spin_us * cycles_per_us()))
        a.record()
        for _ in range(n):
            fn()
        b.record()
        hidden.append(has_sleep and not a.query())     # the GPU had not reached the start event yet
        b.synchronize()
        per.append(a.elapsed_time(b) * 1e3 / n)
    return {"gpu_us": statistics.median(per), "gpu_hidden": all(hidden)}


def graph_of(fn, n: int):
    """A CUDA graph of ``n`` calls of fn (warmed up first), ready to replay."""
    import torch

    from ..timing import capture_graph
    g = capture_graph(fn, n)
    torch.cuda.synchronize()
    return g


def graph_node_us(fn, *, n: int = 100, reps: int = 20, clock=time.perf_counter) -> dict:
    """GPU µs per node of a graph of ``n`` calls (events around a replay / n) and host µs of one replay."""
    import torch
    g = graph_of(fn, n)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    gpu, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = clock()
        g.replay()
        host.append((clock() - t0) * 1e6)
        b.record()
        b.synchronize()
        gpu.append(a.elapsed_time(b) * 1e3 / n)
    return {"graph_node_us": statistics.median(gpu), "graph_replay_host_us": statistics.median(host), "graph_n": n}


# ---- the calls -----------------------------------------------------------------------------------------
_EMPTY_CU = 'extern "C" __global__ void empty(float* x) {}\n'


def cuda_core_calls(x) -> dict:
    """Two launchers of an empty CUDA kernel compiled with NVRTC: flashtutor's loader (argument
    conversion, a LaunchConfig per call) and the bare ``cuda.core.launch`` with everything prepared."""
    import pathlib
    import tempfile

    import numpy as np
    import torch
    from cuda.core import LaunchConfig
    from cuda.core import launch as cc_launch

    from ..loaders.nvrtc import _stream, load_cuda
    d = pathlib.Path(tempfile.mkdtemp(prefix="ft_empty_"))
    (d / "empty.cu").write_text(_EMPTY_CU)
    kern = load_cuda(d / "empty.cu").empty
    cfg = LaunchConfig(grid=(1,), block=(32,))
    ptr = np.intp(x.data_ptr())
    stream = _stream(torch.cuda.current_stream())
    return {"loader": lambda: kern(grid=(1,), block=(32,), args=(x,)),
            "bare": lambda: cc_launch(stream, cfg, kern.kernel, ptr)}


def default_calls() -> dict:
    """name -> (group, number of arguments, fn, graph-capturable). Needs a GPU."""
    import torch

    from ..problems import SHAPE_SETS
    from ..timing import pinned_sdpa
    x = torch.randn(1024, device="cuda")
    calls = {"torch.add, 1K floats (eager)": ("PyTorch", 2, lambda: torch.add(x, x), True)}
    for n in EMPTY_TRITON:
        calls[f"Triton empty kernel, {n} arg{'s' if n > 1 else ''}"] = ("Triton", n, empty_triton_call(n, x), True)
    try:
        cc = cuda_core_calls(x)
        calls["cuda.core, flashtutor loader"] = ("cuda.core", 1, cc["loader"], True)
        calls["cuda.core.launch, prepared"] = ("cuda.core", 1, cc["bare"], False)   # holds a fixed stream
    except Exception as e:   # NVRTC or cuda.core missing: the rest still runs
        print(f"(cuda.core calls left out: {type(e).__name__}: {e})")
    p = SHAPE_SETS["seed"][0]
    q, k, v = p.inputs(0, "cuda")
    backend, _ = pinned_sdpa(q, k, v)          # the backend PyTorch picks by default here, for the label
    sdpa_fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)   # noqa: E731  (as a user calls it)
    calls[f"SDPA ({backend}), {p.name}"] = ("SDPA", 3, sdpa_fn, True)
    return calls


def measure(calls: dict | None = None, *, n: int = 2000, gpu: bool = True, graph_n: int = 100,
            clock=time.perf_counter, sync=None, log=None) -> list[dict]:
    """One row per call: host µs (issue, done, sync each), GPU µs per call, GPU µs per graph node and
    host µs per graph replay. ``calls`` maps name -> (group, n_args, fn, capturable); default: the
    module's list (GPU). ``gpu=False`` measures host times only (with any ``clock``/``sync``)."""
    if calls is None:
        calls = default_calls()
    rows = []
    for name, (group, n_args, fn, capturable) in calls.items():
        heavy = group == "SDPA"
        row = {"call": name, "group": group, "n_args": n_args}
        try:
            row.update(host_us(fn, n=n // 10 if heavy else n, n_sync=50 if heavy else 200, clock=clock, sync=sync))
            if gpu:
                row.update(gpu_us(fn, n=50 if heavy else 200, host_issue_us=max(row["issue_us"], 1.0)))
                if capturable:
                    row.update(graph_node_us(fn, n=10 if heavy else graph_n, clock=clock))
        except Exception as e:   # one failing call must not lose the others
            row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        rows.append(row)
        if log:
            log(format_row(row))
    if gpu and calls:
        rows.append(_one_node_replay(calls, clock=clock))
    return rows


def _one_node_replay(calls, *, clock) -> dict:
    """Host and GPU cost of replaying a graph that holds a single empty Triton launch."""
    row = {"call": "graph replay, 1 node (Triton empty kernel)", "group": "graph", "n_args": 1}
    try:
        fn = next(f for name, (g, n, f, c) in calls.items() if g == "Triton" and n == 1)
        g1 = graph_of(fn, 1)
        row.update(host_us(g1.replay, clock=clock))
        row.update(gpu_us(g1.replay, host_issue_us=max(row["issue_us"], 1.0)))
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return row


# ---- reporting ----------------------------------------------------------------------------------------
COLUMNS = (("issue_us", "host issue"), ("done_us", "host done"), ("sync_each_us", "sync each"),
           ("gpu_us", "GPU/call"), ("graph_node_us", "graph node"), ("graph_replay_host_us", "replay host"))


def _f(x) -> str:
    return f"{x:10.2f}" if isinstance(x, (int, float)) and x == x else f"{'—':>10}"


def format_row(r: dict) -> str:
    if "error" in r and "issue_us" not in r:
        return f"{r['call']:<44} {r['error']}"
    flag = "" if r.get("gpu_hidden", True) else "  (GPU/call not hidden behind the spin: an upper bound)"
    return f"{r['call']:<44}" + "".join(f" {_f(r.get(k))}" for k, _ in COLUMNS) + flag


def table(rows: list[dict]) -> str:
    head = f"{'call (µs per call)':<44}" + "".join(f" {h:>10}" for _, h in COLUMNS)
    return "\n".join([head, "-" * len(head)] + [format_row(r) for r in rows])


def markdown(rows: list[dict]) -> str:
    """:func:`table` as a Markdown table (what the notebook displays: the printed one ran past the page's column)."""
    lines = ["| call (µs per call) | " + " | ".join(h for _, h in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for r in rows:
        if "error" in r and "issue_us" not in r:
            lines.append(f"| {r['call']} | {r['error']} |" + " |" * (len(COLUMNS) - 1))
            continue
        flag = "" if r.get("gpu_hidden", True) else " (GPU/call not hidden behind the spin: an upper bound)"
        lines.append(f"| {r['call']}{flag} | " + " | ".join(_f(r.get(k)).strip() for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], env: str = "", *, title: str | None = None):
    """Top: host issue time, GPU time per call and per graph node for every call. Bottom: a Triton
    launch's host time against its number of arguments. The book's width, flashtutor.plots' sizes,
    legends outside the axes, a short title over the panels, `env` (the environment line) in the caption
    under them. `title` is the older name of `env` (the line went above the panels then); it is still
    taken, as the caption."""
    env = env or title or ""
    import numpy as np

    from .. import plots

    rows = [r for r in rows if "issue_us" in r]
    tri = sorted((r["n_args"], r) for r in rows if r["group"] == "Triton")
    top_h = 0.9 + 0.36 * max(len(rows), 4)
    fig = plots.new_figure(height=top_h + (2.4 if tri else 0.0) + 0.4)
    figs = fig.subfigures(2, 1, height_ratios=[top_h, 2.4]) if tri else [fig]
    ax = plots.style_axes(figs[0].subplots())
    y = np.arange(len(rows))
    series = (("issue_us", "host: issue", "#2e6fcf"), ("gpu_us", "GPU per call", "#cf6a2e"),
              ("graph_node_us", "GPU per graph node", "#3a9a4a"))
    h = 0.8 / len(series)
    for i, (key, lab, color) in enumerate(series):
        vals = [r.get(key, np.nan) for r in rows]
        ax.barh(y + (i - 1) * h, vals, h, label=lab, color=color)
    ax.set_yticks(y, [r["call"] for r in rows], fontsize=plots.SMALL)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("µs per call (log scale)", fontsize=plots.NORMAL)
    plots.legend(ax, where="above", ncol=3)
    ax.grid(axis="x", alpha=0.3, which="both")
    if tri:
        ax2 = plots.style_axes(figs[1].subplots())
        ax2.plot([n for n, _ in tri], [r["issue_us"] for _, r in tri], "o-", color="#2e6fcf", label="host: issue")
        ax2.plot([n for n, _ in tri], [r.get("gpu_us", np.nan) for _, r in tri], "s--", color="#cf6a2e",
                 label="GPU per call")
        ax2.set_xlabel("arguments of the empty Triton kernel", fontsize=plots.NORMAL)
        ax2.set_ylabel("µs per call", fontsize=plots.NORMAL)
        ax2.set_ylim(bottom=0)
        plots.legend(ax2, where="right")
        ax2.grid(alpha=0.3)
    plots.title(fig, "What a call costs: the host's time to issue it and the GPU's")
    plots.caption(fig, env)
    return fig
