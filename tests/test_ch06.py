"""Chapter 6 (small problems): the CPU tier runs the kernels through Triton's interpreter, compiles them
for sm_90 without a GPU, and tests the graph cache, the split rule and the launch-cost bookkeeping; the
GPU tier checks the chapter's targets (graph-replayed, L2 flushed, both sides)."""
from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flashtutor import grade, graphs
from flashtutor.api import set_poisoning
from flashtutor.chapters import get_chapter
from conftest import untouched_exercise

ROOT = Path(__file__).resolve().parent.parent
CH = get_chapter("06")


def causes(report):
    return {str(c.cause) for c in report.checks if not c.ok}


# ---------------------------------------------------------------- CPU tier: the interpreter ------
_KERNELS_ON_CPU = """
import sys, torch
from flashtutor.check import check_output
from flashtutor.problems import SHAPE_SETS, Problem, reference
from flashtutor.kernels import k06_multihead as mh, k06_split_kv as sk
sol = mh.solution
bad, n = [], 0
def check(p, q, k, v, out, what):
    global n
    n += 1
    r = check_output(p, q, k, v, out)
    if not r.ok:
        bad.append(f"{p.name} {what}: {r.message}")
# the CPU set, then S a multiple of every BLOCK_N used here (EVEN_N: no key mask) and one full block of 64
for p0 in SHAPE_SETS["cpu"] + (Problem(2, 2, 64, 64), Problem(1, 2, 128, 64)):
    for causal in (False, True):
        p = p0.replace(causal=causal)
        q, k, v = p.inputs(7)
        check(p, q, k, v, sol.attention(q, k, v, causal=causal), "solution")
        check(p, q, k, v, mh.attention(q, k, v, causal=causal), "multihead")
        for kw in (dict(BLOCK_M=16, BLOCK_N=32, per_prog=3), dict(BLOCK_M=32, BLOCK_N=16, per_sm=2),
                   dict(BLOCK_M=16, BLOCK_N=64),                   # one K/V block when S <= 64
                   dict(BLOCK_M=32, BLOCK_N=16, per_sm=1, tma=True),   # TMA descriptors (emulated)
                   dict(BLOCK_M=16, BLOCK_N=64, tma=True)):
            check(p, q, k, v, mh.launch(q, k, v, causal=causal, **kw), f"multihead {kw}")
        for ns in (2, 3, 5):
            check(p, q, k, v, sk.launch(q, k, v, causal=causal, n_split=ns), f"split-KV n_split={ns}")
        check(p, q, k, v, sk.launch(q, k, v, causal=causal, n_split=3, tma=True), "split-KV n_split=3 TMA")
        check(p, q, k, v, sk.attention(q, k, v, causal=causal), "split-KV heuristic")
# the partials combined in PyTorch give the same answer as the combine kernel
p = Problem(1, 2, 70, 64, causal=True)
q, k, v = p.inputs(3)
acc, m, l, chunk = sk.partials(q, k, v, causal=True, n_split=3)
err = (sk.combine_reference(acc.double(), m.double(), l.double()) - reference(q, k, v, causal=True)).abs().max().item()
if not (chunk % 16 == 0 and err < 2e-3):
    bad.append(f"partials: chunk {chunk}, combined error {err}")
print("\\n".join(bad) or f"ok: {n} checks")
sys.exit(1 if bad else 0)
"""


def test_kernels_through_the_interpreter():
    """Solution, multi-head kernel (several grids) and split-KV (2, 3, 5 chunks) on the CPU shapes."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _KERNELS_ON_CPU], capture_output=True, text=True, env=env,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ok:" in r.stdout


def test_solution_passes_through_the_interpreter():
    r = grade("06", solution=True, device="cpu", progress=False)
    assert r.verdict == "pass", r.failures[:3]
    assert not r.static, r.static          # nothing the static scan objects to (graphs live in flashtutor)


def test_stub_fails():
    untouched_exercise("06")
    r = grade("06", device="cpu", progress=False)
    assert r.verdict == "fail"
    assert causes(r) == {"unwritten"}, causes(r)           # the TODO raises NotImplementedError: not written yet
    assert "TODO" in " ".join(r.failures)


# ---------------------------------------------------------------- the split rule and the plan ----
@pytest.fixture(scope="module")
def sol():
    from flashtutor.kernels import k06_multihead
    return k06_multihead.solution


def test_split_only_where_the_tiles_cannot_fill_the_gpu(sol):
    cfg = sol.Config(64, 128, 4, 2)
    assert sol.FILL_WAVES == 1                                  # measured: a split did not pay at 256 tiles
    assert sol.choose_split(16, 1024, cfg, 132) == 1            # one sequence, 16 heads: 256 tiles, all SMs busy
    assert sol.choose_split(4, 1024, cfg, 132) == 3             # 4 heads: 64 tiles for 132 SMs
    assert sol.choose_split(32 * 16, 128, cfg, 132) == 1        # the seeds' grid: thousands of tiles
    assert sol.choose_split(16, 4096, cfg, 132) == 1            # 1024 tiles already fill 132 SMs
    assert sol.choose_split(1, 128, cfg, 132) == 1              # one key block: nothing to split
    assert sol.choose_split(1, 1024, cfg, 132) == sol.MAX_SPLIT      # 16 tiles: capped
    assert sol.choose_split(1, 384, cfg, 132) == 3                   # no chunk shorter than a block


def test_table_rows_by_length_and_tiles_per_sm(sol):
    """The table: many heads at S ≤ 128 get one persistent TMA program per SM, few heads chapter 4's
    64×64 tiles; every (D, S, heads) finds a row."""
    big = sol.table_config(32 * 16, 128, 64, 132)               # 512 tiles of 128 rows: ~3.9 per SM
    small = sol.table_config(8 * 16, 128, 64, 132)              # 128 tiles: under one per SM
    assert big.per_sm == 1 and big.tma and big.BLOCK_N >= 128
    assert not small.tma and small.BLOCK_M == 64
    for D in (64, 128):
        for S in (1, 113, 128, 256, 512, 1023, 1024, 16384):
            for BH in (1, 16, 512):
                assert sol.table_config(BH, S, D, 132) is not None


@pytest.mark.parametrize("S", [1, 37, 128, 1000, 1023, 1024, 5000])
@pytest.mark.parametrize("n_split", [1, 2, 3, 8])
def test_plan_covers_every_key_once(sol, S, n_split):
    cfg = sol.Config(64, 128, 4, 2, per_sm=2)
    p = sol.make_plan(2, 3, S, 64, True, torch.device("cpu"), cfg, n_split)
    scale, S_, n_tiles, n_m, ns, chunk = p.args
    assert S_ == S and math.isclose(scale, 64 ** -0.5 / math.log(2))
    assert chunk % 128 == 0 and chunk % 64 == 0                # chunks never cut a block
    assert (ns - 1) * chunk < S <= ns * chunk                  # no empty chunk, every key in one
    assert n_m == math.ceil(S / 64) and n_tiles == 2 * 3 * n_m * ns
    assert p.split == (ns > 1) and p.meta["SPLIT"] == p.split
    assert p.meta["ONE_BLOCK"] == (ns == 1 and S <= 128)
    assert p.meta["EVEN_N"] == (S % 128 == 0)                  # full key blocks only: no key mask
    t = sol.make_plan(2, 3, S, 64, True, torch.device("cpu"), dataclasses.replace(cfg, tma=True), n_split)
    assert t.meta["TMA"] == sol.interpreting()                 # TMA: Hopper, or the interpreter's emulation
    assert p.grid == (min(n_tiles, 2 * sol.num_sms(torch.device("cpu"))),)
    assert p.ws_elems == (ns * 2 * 3 * S * 66 if ns > 1 else 0)


def test_tile_grids(sol):
    cpu = torch.device("cpu")
    one = sol.make_plan(32, 16, 128, 64, False, cpu, sol.Config(128, 128, 8, 2), 1)
    four = sol.make_plan(32, 16, 128, 64, False, cpu, sol.Config(128, 128, 8, 2, per_prog=4), 1)
    assert one.grid == (512,) and four.grid == (128,)          # one tile per program / four per program


# ---------------------------------------------------------------- sm_90 without a GPU -------------
def _table_configs(sol):
    seen = []
    for D, rows in sol.CONFIGS.items():
        for bound, _, cfg in rows:
            one = bound <= cfg.BLOCK_N
            for causal, even in ((False, True), (True, False)):
                seen.append((D, cfg, causal, False, one, even))
    seen.append((64, sol.table_config(4, 1024, 64, 132), False, True, False, True))   # a split (4 heads)
    return seen


def test_table_configurations_compile_for_hopper_without_spills(sol):
    """Every configuration of the table compiles for sm_90: fits shared memory, no spills, the loads
    pipelined (asynchronous copies) where num_stages > 1, and tl.dot on wgmma."""
    from flashtutor.kernels import k06_multihead
    try:
        k06_multihead.compile_info(sol.Config(64, 64, 4, 2))
    except RuntimeError as e:
        if "cuobjdump" in str(e) or "nvdisasm" in str(e):
            pytest.skip(f"no disassembler: {e}")
        raise
    for D, cfg, causal, split, one, even in _table_configs(sol):
        info = k06_multihead.compile_info(cfg, D=D, causal=causal, split=split, one_block=one, even_n=even)
        what = f"D={D} {cfg} causal={causal} split={split}: {info}"
        assert info["shared_bytes"] <= 227 * 1024, what
        assert info["spill_instructions"] == 0, what
        assert info["wgmma"] > 0, what
        if cfg.num_stages > 1:
            assert info["async_copies" if not cfg.tma else "tma_copies"] > 0, what


# ---------------------------------------------------------------- graphs.py (no GPU needed) -------
def test_call_key_names_what_a_graph_bakes_in():
    q, k, v = (torch.zeros(2, 3, 5, 64, dtype=torch.float16) for _ in range(3))
    key = graphs.call_key(q, k, v, causal=False)
    assert key == graphs.call_key(q, k, v, causal=False)
    assert key != graphs.call_key(q, k, v, causal=True)                          # a flag
    assert key != graphs.call_key(q.clone(), k, v, causal=False)                 # another address
    assert key != graphs.call_key(k, q, v, causal=False)                         # the order
    assert key != graphs.call_key(q.view(2, 3, 64, 5), k, v, causal=False)      # a shape
    assert key != graphs.call_key(q.view(torch.int16), k, v, causal=False)       # a dtype
    assert graphs.call_key(q, causal=True, x=1) == graphs.call_key(q, x=1, causal=True)


class FakeGraph:
    def __init__(self, out=None):
        self.out, self.n = out, 0

    def replay(self):
        self.n += 1
        if self.out is not None:
            self.out.fill_(float(self.n))


def test_cache_is_bounded_and_least_recently_used_goes_first():
    c = graphs.GraphCache(maxsize=3)
    outs = {i: torch.zeros(4) for i in range(5)}
    for i in range(3):
        c.put(i, FakeGraph(), outs[i])
    assert c.get(0) is not None                     # 0 is now the most recent
    c.put(3, FakeGraph(), outs[3])                  # evicts 1, the least recently used
    assert len(c) == 3 and 1 not in c and 0 in c and 3 in c
    assert c.get(1) is None
    assert c.stats()["evictions"] == 1 and c.hits == 1 and c.misses == 1
    with pytest.raises(ValueError):
        graphs.GraphCache(maxsize=0)


def test_cache_bounded_by_bytes():
    c = graphs.GraphCache(maxsize=100, max_bytes=3 * 400)
    for i in range(5):
        c.put(i, FakeGraph(), torch.zeros(100))     # 400 bytes each
    assert len(c) == 3 and c.nbytes == 1200 and list(c._d) == [2, 3, 4]
    c.put("big", FakeGraph(), torch.zeros(1000))    # larger than the bound alone: kept, the rest dropped
    assert list(c._d) == ["big"]


def test_replay_returns_the_static_output_and_adds_no_work_under_the_grader():
    """A replay is the graph's launch and nothing else, under the grader too: a fill before it would be a kernel in
    every timed call, and the grader's checked and timed calls are the same calls. An element the graph does not
    write keeps the last replay's value, which the grader's check finds wrong (or never written: the grader fills
    its own output buffers with the never-written pattern before every call)."""
    out = torch.zeros(8)
    e = graphs.Captured(FakeGraph(out), out)
    assert e.replay() is out and e.replay() is out and out[0] == 2 and e.replays == 2
    stale = torch.full((8,), 7.0)
    lazy = graphs.Captured(FakeGraph(None), stale)              # a graph that writes nothing
    set_poisoning(True)
    try:
        assert torch.equal(lazy.replay(), torch.full((8,), 7.0))  # untouched: no fill was added
    finally:
        set_poisoning(False)


def test_graphed_launches_directly_on_cpu_tensors():
    calls = []

    def launch_into(q, k, v, out, causal):
        calls.append(causal)
        out.copy_(q + k + v)

    fn = graphs.graphed(launch_into)
    q = torch.ones(1, 1, 2, 64)
    out = fn(q, q, q, causal=True)
    assert calls == [True] and torch.equal(out, 3 * q) and len(fn.cache) == 0
    assert graphs.capturing() is False


# ---------------------------------------------------------------- launch_cost bookkeeping --------
class FakeClock:
    """A clock that each fake call advances by 5 µs and each synchronize by 100 µs."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def call(self):
        self.t += 5e-6

    def sync(self):
        self.t += 100e-6


def test_host_times_with_a_fake_clock():
    from flashtutor.bench.launch_cost import host_us
    clk = FakeClock()
    r = host_us(clk.call, n=1000, warmup=3, n_sync=10, clock=clk, sync=clk.sync)
    assert math.isclose(r["issue_us"], 5.0)
    assert math.isclose(r["done_us"], 5.0 + 100.0 / 1000)
    assert math.isclose(r["sync_each_us"], 105.0)


def test_launch_cost_rows_table_and_plot():
    import matplotlib
    matplotlib.use("Agg")
    from flashtutor.bench import launch_cost
    clk = FakeClock()
    calls = {"fake eager op": ("PyTorch", 2, clk.call, True),
             **{f"fake Triton, {n} args": ("Triton", n, clk.call, True) for n in (1, 4, 16, 32)},
             "broken": ("Triton", 2, lambda: 1 / 0, True)}
    rows = launch_cost.measure(calls, n=100, gpu=False, clock=clk, sync=clk.sync)
    assert [r["call"] for r in rows] == list(calls)
    ok = rows[:-1]
    assert all({"call", "group", "n_args", "issue_us", "done_us", "sync_each_us"} <= set(r) for r in ok)
    assert all(math.isclose(r["issue_us"], 5.0) for r in ok)
    assert "ZeroDivisionError" in rows[-1]["error"]
    text = launch_cost.table(rows)
    assert "fake Triton, 32 args" in text and "ZeroDivisionError" in text
    md = launch_cost.markdown(rows).splitlines()
    assert md[0].count("|") == md[2].count("|") == md[-1].count("|") == len(launch_cost.COLUMNS) + 2
    assert md[2].startswith("| fake eager op | 5.00 | ") and "ZeroDivisionError" in md[-1]
    fig = launch_cost.plot(rows)
    assert len(fig.axes) == 2


def test_empty_triton_kernels_take_their_argument_counts():
    from flashtutor.bench import launch_cost
    for n, kern in launch_cost.EMPTY_TRITON.items():
        assert len(kern.arg_names) == n
        args = launch_cost.triton_args(n, "T")
        assert args.count("T") == (n + 1) // 2 and all(a in ("T", launch_cost.INT_ARG) for a in args)


# ---------------------------------------------------------------- the bench's verdicts -------------
def _row(problem, B, S, step, graph_us, warm_us=None, floor_mem=7.8):
    r = {"problem": problem, "B": B, "S": S, "step": step, "floor": {"memory_us": floor_mem, "compute_us": 2.7},
         "event": {"median_us": graph_us + 3}, "graph": {"median_us": graph_us},
         "graph_warm": {"median_us": warm_us or graph_us * 0.7}, "l2_floor_us": 2.0}
    r["graph_us_per_seq"] = graph_us / B
    r["event_us_per_seq"] = (graph_us + 3) / B
    r["graph_warm_us_per_seq"] = r["graph_warm"]["median_us"] / B
    return r


def test_bench06_claims_are_read_from_the_numbers():
    from flashtutor.bench.ch06 import claims, per_seq_table
    rows = [_row("B32 H16 S128 D64", 32, 128, "SDPA", 15.5), _row("B32 H16 S128 D64", 32, 128, "solution", 8.5),
            _row("B1 H16 S1024 D64", 1, 1024, "SDPA", 15.8, floor_mem=2.0),
            _row("B1 H16 S1024 D64", 1, 1024, "solution", 16.9, floor_mem=2.0)]
    text = "\n".join(claims(rows))
    assert "no kernel can take less than 0.50× SDPA's time" in text          # 7.8 / 15.5
    assert "1.09× the HBM floor (met" in text and "(0.55× SDPA's time: faster)" in text
    assert "solution 16.90 µs vs SDPA 15.80 µs graph-replayed (1.07× SDPA's time: not faster" in text
    missed = "\n".join(claims([rows[0], _row("B32 H16 S128 D64", 32, 128, "solution", 12.0)]))
    assert "1.54× the HBM floor (not met: the target is ≤ 1.28× the datasheet floor)" in missed   # 12.0 / 7.8
    assert "'< 5 µs per sequence' (solution" in text and "1 of 1 grid shapes" in text
    table = per_seq_table(rows, "graph")
    assert "B32 H16 S128 D64" in table and "0.27" in table                  # 8.5 / 32 µs per sequence
    launch = [{"call": "torch.add", "group": "PyTorch", "n_args": 2, "done_us": 6.4, "issue_us": 6.3,
               "graph_node_us": 1.03},
              {"call": "Triton empty", "group": "Triton", "n_args": 1, "done_us": 10.3, "graph_node_us": 0.99},
              {"call": "SDPA (cudnn)", "group": "SDPA", "n_args": 3, "done_us": 16.8, "graph_node_us": 13.99}]
    launch_line = claims(rows, launch)[0]
    assert "graph nodes 0.99–1.03 µs" in launch_line and "13.99" not in launch_line   # SDPA's work is no launch cost


# ---------------------------------------------------------------- GPU tier ------------------------
def _graph_pair(p):
    """Solution and SDPA at problem p, both replayed from CUDA graphs with the L2 flushed, alternately."""
    from flashtutor.kernels import k06_multihead
    from flashtutor.timing import graph_times, pinned_sdpa
    sol_mod = k06_multihead.solution
    q, k, v = p.inputs(0, "cuda")
    backend, sd = pinned_sdpa(q, k, v, causal=p.causal)
    mine = lambda: sol_mod.attention(q, k, v, causal=p.causal)     # noqa: E731
    a, b = [], []
    with sd.pinned():
        for _ in range(3):
            a.append(graph_times(mine).median_us)
            b.append(graph_times(sd).median_us)
    return min(a), min(b), backend


@pytest.mark.usefixtures("gpu_alone")
@pytest.mark.gpu
def test_target_s128_b32_faster_than_sdpa_graph_replayed():
    from flashtutor.problems import Problem
    mine, sdpa_us, backend = _graph_pair(Problem(32, 16, 128, 64))
    assert mine < sdpa_us, f"solution {mine:.2f} µs, SDPA ({backend}) {sdpa_us:.2f} µs"


@pytest.mark.usefixtures("gpu_alone")
@pytest.mark.gpu
def test_s128_b32_distance_to_the_hbm_floor():
    """The chapter's target at B32 S128 (1.28× the datasheet HBM floor) is out of reach with a flushed L2: on an
    H100 a kernel that only reads q, k, v and writes their sum, timed the same way, took 1.35× the floor, and the
    solution 1.56× (chapter 6's notebook, 2026-11-27). This pins the solution under 2× the floor, so a regression
    shows; the notebook states the target as missed."""
    from flashtutor.problems import Problem
    from flashtutor.roofline import basis_peaks
    p = Problem(32, 16, 128, 64)
    floor = basis_peaks().floor_us(p)["memory_us"]
    mine, _, _ = _graph_pair(p)
    assert mine <= 2.0 * floor, f"solution {mine:.2f} µs = {mine / floor:.2f}× the HBM floor {floor:.2f} µs"


@pytest.mark.usefixtures("gpu_alone")
@pytest.mark.gpu
def test_target_seed_shape_faster_than_sdpa_graph_replayed():
    from flashtutor.problems import Problem
    mine, sdpa_us, backend = _graph_pair(Problem(1, 16, 1024, 64))
    assert mine < sdpa_us, f"solution {mine:.2f} µs, SDPA ({backend}) {sdpa_us:.2f} µs"


@pytest.mark.usefixtures("gpu_shared")
@pytest.mark.gpu
def test_solution_is_capturable_and_reads_its_inputs_at_replay():
    """Inside someone else's capture the solution launches directly; replaying that graph after
    refreshing the inputs in place gives the new answer; the solution's own graph does too."""
    from flashtutor.check import check_output
    from flashtutor.kernels import k06_multihead
    from flashtutor.problems import Problem
    sol_mod = k06_multihead.solution
    for p in (Problem(4, 16, 128, 64), Problem(1, 16, 1024, 64, causal=True)):
        q, k, v = p.inputs(0, "cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            sol_mod.attention(q, k, v, causal=p.causal)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = sol_mod.attention(q, k, v, causal=p.causal)
        for seed in (1, 2):
            for t, new in zip((q, k, v), p.inputs(seed, "cuda")):
                t.copy_(new)
            g.replay()
            torch.cuda.synchronize()
            assert check_output(p, q, k, v, out).ok
            own = sol_mod.attention(q, k, v, causal=p.causal)      # the solution's own cached graph
            torch.cuda.synchronize()
            assert check_output(p, q, k, v, own).ok
        assert sol_mod.attention(q, k, v, causal=p.causal) is own  # same key: the same static output





def test_per_seq_markdown_is_the_table_as_markdown():
    from flashtutor.bench.ch06 import per_seq_markdown
    rows = [_row("B32 H16 S128 D64", 32, 128, "SDPA", 15.5), _row("B32 H16 S128 D64", 32, 128, "solution", 8.5)]
    md = per_seq_markdown(rows, "graph").splitlines()
    assert md[0] == "| shape | SDPA | solution | HBM floor | FLOP floor |" and md[1] == "|---|---|---|---|---|"
    assert md[2].startswith("| B32\u00a0H16\u00a0S128\u00a0D64 | 0.48 | 0.27 | ")   # 15.5 / 32, 8.5 / 32 µs per sequence
    two = per_seq_markdown(rows + [_row("B8 H16 S256 D64", 8, 256, "SDPA", 4.0)], "graph").splitlines()
    assert two[0].startswith("| shape (H16 D64) | ") and two[3].startswith("| B8\u00a0S256 | 0.50 | ")


def test_rows_markdown_shows_the_per_call_rows():
    from flashtutor.bench.ch06 import rows_markdown
    r = lambda pn, step, ev: {"problem": pn, "step": step, "event": {"median_us": ev}, "graph": {"median_us": 7.0},   # noqa: E731
                              "graph_warm": {"median_us": 4.8}, "graph_us_per_seq": 0.87, "graph_vs_sdpa": 0.74,
                              "graph_over_hbm_floor": 2.49, "host_us": 71.2}
    md = rows_markdown([r("B8 H16 S128 D64", "multihead", 10.1), r("B16 H16 S256 D64", "SDPA", 41.0),
                        r("B16 H16 S128 D64", "split-KV", 1.0)]).splitlines()
    assert md[0].startswith("| shape (H16 D64) | step | events µs | graph µs |") and len(md) == 4   # split-KV left out
    assert md[2] == "| B8\u00a0S128 | multihead | 10.1 | 7.0 | 4.8 | 0.87 | 0.74× | 2.49× | 71.2 |"
