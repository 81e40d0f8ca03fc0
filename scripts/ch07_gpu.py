"""Chapter 7 on a Hopper GPU, in one go (written on a CPU machine; meant to be run on an H100/H200):

    PYTHONPATH=$PWD OUT=/some/dir python scripts/ch07_gpu.py            # everything (< 4 min on an H100)
    PYTHONPATH=$PWD python scripts/ch07_gpu.py --steps 7a --no-time      # one step, correctness only
    PYTHONPATH=$PWD python scripts/ch07_gpu.py --steps 7c 7c-old=path/to/k07c_old.py   # a step against an older file
    PYTHONPATH=$PWD python scripts/ch07_gpu.py --sweep                   # step 7c's tile/grid/exp2 variants

1. probes (flashtutor/kernels/k07_probes.py): the TMA 128-byte swizzle image, wgmma with K-major and
   MN-major descriptors, the accumulator and A-fragment layouts — each alone, so a failure names the
   broken assumption;
2. per step (k07a, k07b, k07c if present): registers/spills per kernel; correctness against the fp32
   reference with NaN-poisoned outputs (flashtutor.check.check_output: per-row error ≤ 2× SDPA's + 1 fp16
   ulp) on B2 H3 S113, B3 H2 S1023, B1 H16 S1024 at D64 and B2 H3 S113, B1 H2 S1023 at D128, causal and
   not, plus large logits (q, k × 6); inputs checked unchanged; then timing with triton's do_bench
   (median, L2 flushed) against SDPA (cuDNN backend pinned where available) at B4 H32 S4096,
   B2 H32 S8192, B2 H32 S16384 for D128 and D64, causal and not, and the seed shape B1 H16 S1024 D64
   (records of kind "time"); and, with --stream, the grader's way (records of kind "stream"): GPU time
   per call of back-to-back calls — batches of n calls between two CUDA events, n chosen so that a batch
   lasts about 20 ms, L2 flushed before each batch, the step and SDPA alternating batch by batch in a
   rotating order, the median over rounds; at S ≤ 1024 graph-replayed (flashtutor.timing.graph_times),
   where the host's launch cost would otherwise be timed;
3. the exercise stub (chapters/07_hopper): it must come back at once with an all-NaN output.
With --sweep, instead of 2-3: each variant of step 7c in VARIANTS (k07c_pingpong.variant: key-tile
width, persistent grid, ring depth, exp2 on the FMA pipe) is checked on small shapes and timed the
grader's way on the shapes it concerns, beside the default 7c, all in one worker process (a variant
that hangs is reported and the worker restarted for the rest).

Every step runs in its own subprocess with a time limit: an illegal address poisons a CUDA context
and a wrong barrier phase hangs, and either must not stop the others. Results go to $OUT/ch07.json
(OUT defaults to the current directory), rewritten after each part; a compact table is printed last.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = {   # step → module (left out when its file is missing)
    "7a": "flashtutor.kernels.k07a_wgmma_tma",
    "7b": "flashtutor.kernels.k07b_warp_specialized",
    "7c": "flashtutor.kernels.k07c_pingpong",
}
CHECK_SHAPES = [(2, 3, 1, 64), (2, 3, 113, 64), (3, 2, 1023, 64), (1, 16, 1024, 64), (2, 3, 113, 128),
                (1, 2, 1023, 128), (1, 3, 4097, 64), (1, 2, 4097, 128),
                (2, 80, 1000, 128), (3, 50, 777, 64),    # more work tiles than SMs: a persistent block does several
                (2, 40, 4000, 64)]                       # D = 64 with three consumer warpgroups (k07c.consumers)
LARGE_LOGITS = [(1, 2, 1023, 64), (1, 2, 1023, 128)]          # q, k × 6: logits ×36
TIME_SHAPES = [(4, 32, 4096, 128), (2, 32, 8192, 128), (2, 32, 16384, 128),
               (4, 32, 4096, 64), (2, 32, 8192, 64), (2, 32, 16384, 64), (1, 16, 1024, 64)]
SWEEP_CHECKS = [(2, 3, 113, 64), (1, 2, 1023, 128), (1, 3, 4097, 64), (2, 80, 1000, 128), (3, 50, 777, 64),
                (1, 133, 1024, 128), (1, 34, 4000, 128), (1, 45, 3000, 64)]   # a partial last round (split_tail)
# Step 7c's variants (k07c_pingpong.variant's arguments) and the (D, causal) pairs each one concerns.
VARIANTS = {
    "d128 Bc128":            (dict(tiles={(128, False): 128}, schedule={(128, False): "grid"}), [(128, False)]),
    "d128 Bc128 persistent": (dict(tiles={(128, False): 128}, schedule={(128, False): "static"}), [(128, False)]),
    "d128 Bc176":            (dict(tiles={(128, False): 176}, schedule={(128, False): "grid"}), [(128, False)]),
    "d128 Bc160 persistent": (dict(tiles={(128, False): 160}, schedule={(128, False): "static"}), [(128, False)]),
    "d128 Bc128 p 2 slots":  (dict(tiles={(128, False): 128}, schedule={(128, False): "static"}, max_stages=2), [(128, False)]),
    "causal static":         (dict(schedule={(128, True): "static", (64, True): "static"}), [(128, True), (64, True)]),
    "causal grid head-major": (dict(schedule={(128, True): "grid"}, grouped=False), [(128, True), (64, True)]),
    "causal grid grouped":   (dict(schedule={(128, True): "grid"}), [(128, True), (64, True)]),
    "causal dynamic head-major": (dict(grouped=False), [(128, True)]),
    "d64 causal dynamic":    (dict(schedule={(64, True): "dynamic"}, consumers_d64=2), [(64, True)]),
    "d64 Bc128 grid":        (dict(schedule={(64, False): "grid"}, consumers_d64=2), [(64, False)]),
    "d64 Bc176":             (dict(tiles={(64, False): 176}, consumers_d64=2), [(64, False)]),
    "d64 Bc192":             (dict(tiles={(64, False): 192}, consumers_d64=2), [(64, False)]),
    "d64 Bc64":              (dict(tiles={(64, False): 64}, consumers_d64=2), [(64, False)]),
    "d64 2 slots":           (dict(max_stages=2), [(64, False)]),
    "exp2 1/4 on FMA":       (dict(exp2_fma_every=4), [(64, False), (64, True), (128, False)]),
    "exp2 1/3 on FMA":       (dict(exp2_fma_every=3), [(64, False), (64, True)]),
    "d64 Bc176 exp2 1/4 FMA": (dict(tiles={(64, False): 176}, exp2_fma_every=4, consumers_d64=2), [(64, False)]),
    "softmax one chain":     (dict(row_split=1), [(128, False), (128, True), (64, False), (64, True)]),
    "causal d128 Bc128":     (dict(tiles={(128, True): 128}), [(128, True)]),
    "causal d128 Bc160":     (dict(tiles={(128, True): 160}), [(128, True)]),
    "causal d128 Bc192":     (dict(tiles={(128, True): 192}), [(128, True)]),
    "desc increments":       (dict(desc_inc=True), [(128, False), (128, True), (64, False), (64, True)]),
    "d64 2 Q buffers":       (dict(q_slots_d64=2), [(64, False), (64, True)]),
    "no end align":          (dict(end_align=False), [(64, True)]),
    "no split tail":         (dict(split_tail={128: False}), [(128, False)]),
    "d64 split tail":        (dict(split_tail={64: True}), [(64, False)]),
    "d64 2 consumers":       (dict(consumers_d64=2), [(64, False), (64, True)]),
    "d64 3 consumers":       (dict(consumers_d64=3), [(64, False), (64, True)]),
    "d64 3 consumers static": (dict(consumers_d64=3, wide_schedule={True: "static"}), [(64, True)]),
    "d64 3 consumers Bc64":  (dict(consumers_d64=3, tiles={(64, False): 64, (64, True): 64}), [(64, False), (64, True)]),
}
LIMITS = {"probes": 120, "step": 150, "stub": 90, "sweep": 400}   # seconds per subprocess
STREAM_ROUNDS = 9                                              # rounds of the grader-style timing per shape
BUDGET_S = 230                                                 # stop starting new timing work after this


# ================================================================ worker side (one subprocess) =====
_last_progress = [time.time()]
WATCHDOG_S = 40          # a worker that emits nothing for this long is stuck (a barrier phase that never completes)


def _emit(**rec):
    _last_progress[0] = time.time()
    print("@@" + json.dumps(rec, default=str), flush=True)


def _start_watchdog() -> None:
    """End this worker (exit code 3) once it has made no progress for WATCHDOG_S: a hung kernel blocks the
    host thread in a synchronize forever, and the parent then restarts what is left without it."""
    import threading

    def watch():
        while True:
            time.sleep(1.0)
            if time.time() - _last_progress[0] > WATCHDOG_S:
                print("@@" + json.dumps({"kind": "fatal", "error": f"no progress for {WATCHDOG_S} s: a hang"}), flush=True)
                os._exit(3)
    threading.Thread(target=watch, daemon=True).start()


def _context_alive() -> bool:
    """False once the CUDA context is lost (an illegal address or instruction poisons it for good)."""
    import torch
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False


def _timing_inputs(p):
    """Random q, k, v made on the GPU (the CPU generator of Problem.inputs takes seconds at S = 16384)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    return tuple(torch.randn(p.shape, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))


def work_probes():
    from flashtutor.kernels import k07_probes
    for name, fn in k07_probes.PROBES.items():
        t0 = time.time()
        try:
            res = fn()
        except Exception as e:
            res = f"error: {type(e).__name__}: {str(e)[:300]}"
        _emit(kind="probe", name=name, result=res, s=round(time.time() - t0, 2))


def _load_step(spec: str):
    """A step's launcher: a module name, or a launcher file (``path/to/k07c_old.py``, relative to the repo)."""
    if spec.endswith(".py"):
        path = (ROOT / spec).resolve()
        s = importlib.util.spec_from_file_location(f"ch07_step_{path.stem}", path)
        mod = importlib.util.module_from_spec(s)
        s.loader.exec_module(mod)
        return mod
    return importlib.import_module(spec)


def _check_cases(attention, cases, label: str | None = None) -> bool:
    """Run ``attention`` on each (problem, seed) with NaN-poisoned outputs; emit one record per case.
    False once the CUDA context is lost (the caller stops)."""
    import torch

    from flashtutor.api import set_poisoning
    from flashtutor.check import check_output
    set_poisoning(True)
    try:
        for p, seed in cases:
            t0 = time.time()
            extra = {"variant": label} if label else {}
            try:
                q, k, v = p.inputs(seed, "cuda")
                before = [t.clone() for t in (q, k, v)]
                out = attention(q, k, v, causal=p.causal)
                torch.cuda.synchronize()
                r = check_output(p, q, k, v, out, seed=seed)
                unchanged = all(torch.equal(a, b) for a, b in zip(before, (q, k, v)))
                _emit(kind="check", problem=p.name, ok=bool(r.ok and unchanged), err=r.err, bound=r.bound,
                      sdpa_err=r.sdpa_err, max_err=r.max_err, cause=r.cause if unchanged else "inputs changed",
                      message=r.message[:300], s=round(time.time() - t0, 2), **extra)
            except Exception as e:
                _emit(kind="check", problem=p.name, ok=False, cause="error",
                      message=f"{type(e).__name__}: {str(e)[:300]}", s=round(time.time() - t0, 2), **extra)
                if not _context_alive():
                    _emit(kind="fatal", error="the CUDA context is lost; later cases were not run", **extra)
                    return False
    finally:
        set_poisoning(False)
    return True


def stream_times(fns: dict, *, rounds: int = 5, batch_ms: float = 20.0, max_calls: int = 64) -> dict[str, dict]:
    """The grader's way, without its gate: per candidate, batches of n back-to-back calls between two CUDA
    events (n so that a batch lasts about ``batch_ms``), L2 flushed before each batch, the candidates
    alternating batch by batch in a rotating order; GPU time per call = the batch's time / n, median over
    rounds (with the spread, (max - min) / median). The host enqueues ahead of the GPU as long as a call
    lasts longer than its launch (true from S = 4096 on); shorter calls belong to graph_times."""
    import contextlib

    import torch

    from flashtutor.timing import L2Flusher, PinnedSDPA
    flush = L2Flusher()
    names = list(fns)
    with contextlib.ExitStack() as stack:
        for f in fns.values():
            if isinstance(f, PinnedSDPA):
                stack.enter_context(f.pinned())
        per_call = {}
        for n in names:                                          # warm up, then one timed call to size the batches
            fns[n]()
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); fns[n](); b.record(); b.synchronize()
            per_call[n] = a.elapsed_time(b)
        calls = {n: int(max(2, min(max_calls, batch_ms / max(per_call[n], 1e-3)))) for n in names}
        ev = {n: [] for n in names}
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                flush()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(calls[n]):
                    fns[n]()
                b.record()
                ev[n].append((a, b))
        torch.cuda.synchronize()
    out = {}
    for n in names:
        xs = sorted(1e3 * a.elapsed_time(b) / calls[n] for a, b in ev[n])
        med = xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])
        out[n] = {"us": med, "calls_per_batch": calls[n], "rounds": rounds, "spread": (xs[-1] - xs[0]) / med}
    return out


def _time_stream(attention, p, label: str | None = None, rounds: int = 5) -> None:
    """One record of kind 'stream': the step's and SDPA's GPU time per call at problem p (graph-replayed
    at S ≤ 1024), both in this process, alternating."""
    from flashtutor.timing import graph_times, pinned_sdpa
    extra = {"variant": label} if label else {}
    q, k, v = _timing_inputs(p)
    backend, sdpa = pinned_sdpa(q, k, v, causal=p.causal)
    mine = attention(q, k, v, causal=p.causal)
    diff = (mine.float() - sdpa().float()).abs().max().item()   # a sanity number, not the rule
    del mine
    fn = lambda: attention(q, k, v, causal=p.causal)            # noqa: E731
    if p.S <= 1024:
        us = graph_times(fn).median_us
        with sdpa.pinned():
            sd = graph_times(sdpa).median_us
        basis, spread = "graph-replayed", None
    else:
        st = stream_times({"mine": fn, "sdpa": sdpa}, rounds=rounds)
        us, sd, basis = st["mine"]["us"], st["sdpa"]["us"], "back-to-back"
        spread = {"mine": st["mine"]["spread"], "sdpa": st["sdpa"]["spread"],
                  "calls_per_batch": st["mine"]["calls_per_batch"]}
    _emit(kind="stream", problem=p.name, us=us, sdpa_us=sd, ratio=us / sd, sdpa_backend=backend,
          tflops=p.flops / (us * 1e-6) / 1e12, sdpa_tflops=p.flops / (sd * 1e-6) / 1e12, basis=basis,
          spread=spread, max_diff_vs_sdpa=diff, **extra)


def work_step(module: str, do_check: bool, do_time: bool, deadline: float, do_stream: bool = False):
    import triton.testing

    from flashtutor.loaders import load_cuda
    from flashtutor.problems import Problem

    mod = _load_step(module)
    try:
        res = load_cuda(mod.SOURCE, arch="sm_90a").resources()
        _emit(kind="resources", kernels={k: {f: v.get(f) for f in ("registers", "spill_instructions", "local_bytes",
                                                                   "stack_bytes", "instructions")}
                                         | {"HGMMA": v.get("opcodes", {}).get("HGMMA", 0),
                                            "UTMALDG": v.get("opcodes", {}).get("UTMALDG", 0)}
                                         for k, v in res.items()})
    except Exception as e:
        _emit(kind="resources", error=f"{type(e).__name__}: {str(e)[:300]}")

    if do_check:
        cases = [(Problem(*s, causal=c), 0) for s in CHECK_SHAPES for c in (False, True)]
        cases += [(Problem(*s, causal=c, qk_std=6.0), 0) for s in LARGE_LOGITS for c in (False, True)]
        cases += [(Problem(2, 3, 113, 64, causal=True), 1), (Problem(2, 3, 113, 128), 1)]   # a second seed
        if not _check_cases(mod.attention, cases):
            return

    if do_stream:
        for shape in TIME_SHAPES:
            for causal in (False, True):
                p = Problem(*shape, causal=causal)
                if time.time() > deadline:
                    _emit(kind="stream", problem=p.name, skipped="time budget")
                    continue
                try:
                    _time_stream(mod.attention, p, rounds=STREAM_ROUNDS)
                except Exception as e:
                    _emit(kind="stream", problem=p.name, error=f"{type(e).__name__}: {str(e)[:300]}")
                    if not _context_alive():
                        _emit(kind="fatal", error="the CUDA context is lost; later shapes were not timed")
                        return

    if do_time:
        from flashtutor.timing import graph_times, pinned_sdpa
        for shape in TIME_SHAPES:
            for causal in (False, True):
                p = Problem(*shape, causal=causal)
                if time.time() > deadline:
                    _emit(kind="time", problem=p.name, skipped="time budget")
                    continue
                try:
                    q, k, v = _timing_inputs(p)
                    backend, sdpa = pinned_sdpa(q, k, v, causal=causal)     # cuDNN on torch 2.11 / Hopper
                    mine = mod.attention(q, k, v, causal=causal)
                    diff = (mine.float() - sdpa().float()).abs().max().item()   # a sanity number, not the rule
                    t_me = triton.testing.do_bench(lambda: mod.attention(q, k, v, causal=causal),
                                                   warmup=25, rep=100, return_mode="median")
                    with sdpa.pinned():
                        t_sdpa = triton.testing.do_bench(sdpa, warmup=25, rep=100, return_mode="median")
                    rec = dict(kind="time", problem=p.name, ms=t_me, sdpa_ms=t_sdpa, sdpa_backend=backend,
                               tflops=p.flops / (t_me * 1e-3) / 1e12, sdpa_tflops=p.flops / (t_sdpa * 1e-3) / 1e12,
                               speed_vs_sdpa=t_sdpa / t_me, max_diff_vs_sdpa=diff)
                    if p.S <= 1024:          # small: launch cost matters; time GPU work from CUDA graphs too
                        g_me = graph_times(lambda: mod.attention(q, k, v, causal=causal)).median_us
                        with sdpa.pinned():
                            g_sdpa = graph_times(sdpa).median_us
                        rec.update(graph_us=g_me, sdpa_graph_us=g_sdpa, graph_speed_vs_sdpa=g_sdpa / g_me)
                    _emit(**rec)
                    del q, k, v, mine
                except Exception as e:
                    _emit(kind="time", problem=p.name, error=f"{type(e).__name__}: {str(e)[:300]}")
                    if not _context_alive():
                        _emit(kind="fatal", error="the CUDA context is lost; later shapes were not timed")
                        return


def work_sweep(names: list[str], rounds: int = 5):
    """Each variant of step 7c: compiled, checked on small shapes (stops at the first wrong one), timed
    the grader's way with SDPA on the shapes it concerns. The default 7c first, on the shapes the variants
    concern (every large shape when it is run alone)."""
    from flashtutor.kernels import k07c_pingpong as k07c
    from flashtutor.problems import Problem
    swept = {pair for n in names if n != "default" for pair in VARIANTS[n][1]}
    for name in names:
        if name == "default":       # on the shapes the variants concern (all of them when run alone)
            attention = k07c.attention
            pairs = sorted(swept) or [(D, c) for D in (128, 64) for c in (False, True)]
        else:
            kw, pairs = VARIANTS[name]
            attention = k07c.variant(**kw)
        _emit(kind="variant_start", variant=name)
        t0 = time.time()
        try:
            res = attention.module(2).resources()
            res["pingpong_d64 3 consumers"] = attention.module(3).resources()["pingpong_d64"]
            _emit(kind="variant_resources", variant=name, compile_s=round(time.time() - t0, 1),
                  kernels={k: {f: r.get(f) for f in ("registers", "spill_instructions", "local_bytes")}
                           for k, r in res.items()})
        except Exception as e:
            _emit(kind="variant_done", variant=name, error=f"{type(e).__name__}: {str(e)[:300]}")
            continue
        cases = [(Problem(*s, causal=c), 0) for s in SWEEP_CHECKS for c in (False, True)]
        if not _check_cases(attention, cases, label=name):
            _emit(kind="variant_done", variant=name, error="context lost")
            return
        for shape in TIME_SHAPES:                          # the long shapes and the seed shape (graph-replayed)
            for causal in (False, True):
                if (shape[3], causal) not in pairs:
                    continue
                p = Problem(*shape, causal=causal)
                try:
                    _time_stream(attention, p, label=name, rounds=rounds)
                except Exception as e:
                    _emit(kind="stream", problem=p.name, variant=name, error=f"{type(e).__name__}: {str(e)[:300]}")
                    if not _context_alive():
                        _emit(kind="variant_done", variant=name, error="context lost")
                        return
        _emit(kind="variant_done", variant=name, s=round(time.time() - t0, 1))


def work_stub():
    """The untouched exercise must return promptly with every output element NaN (never hang)."""
    import importlib.util

    import torch

    from flashtutor.api import set_poisoning
    from flashtutor.problems import Problem
    set_poisoning(True)
    path = ROOT / "chapters" / "07_hopper" / "attention.py"
    spec = importlib.util.spec_from_file_location("ch07_exercise", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    for shape in [(2, 3, 113, 64), (1, 2, 1023, 128)]:
        for causal in (False, True):
            p = Problem(*shape, causal=causal)
            t0 = time.time()
            try:
                q, k, v = p.inputs(0, "cuda")
                out = ex.attention(q, k, v, causal=causal)
                torch.cuda.synchronize()
                _emit(kind="stub", problem=p.name, all_nan=bool(torch.isnan(out).all().item()),
                      s=round(time.time() - t0, 2))
            except Exception as e:
                _emit(kind="stub", problem=p.name, error=f"{type(e).__name__}: {str(e)[:300]}")


# ================================================================ parent side ======================
def run_child(args: list[str], limit: float) -> tuple[list[dict], str]:
    """Run this script as a worker; return its records and a status ('ok', 'timeout …', 'exit …')."""
    cmd = [sys.executable, str(Path(__file__).resolve())] + args
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=limit)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {err.strip()[-600:]}"
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        status = f"timeout after {limit:.0f} s (a hang: a barrier phase that never completes?)"
    recs = []
    for line in out.splitlines():
        if line.startswith("@@"):
            try:
                recs.append(json.loads(line[2:]))
            except json.JSONDecodeError:
                pass
    return recs, status


def environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        pass
    try:
        import torch
        env.update(torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                   gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                   capability=torch.cuda.get_device_capability() if torch.cuda.is_available() else None)
    except Exception as e:
        env["torch_error"] = str(e)
    for name in ("triton", "cuda.core", "cuda.bindings"):
        try:
            env[name] = importlib.import_module(name).__version__
        except Exception:
            pass
    return env


def present_steps(wanted) -> dict[str, str]:
    """The steps to run: STEPS' (all, or those named), and NAME=path/to/launcher.py for another file."""
    steps = {}
    extra = dict(w.split("=", 1) for w in (wanted or []) if "=" in w)
    names = [w.split("=", 1)[0] for w in wanted] if wanted else list(STEPS)
    for key in names:
        if key in extra:
            steps[key] = extra[key]
        elif key in STEPS and (ROOT / (STEPS[key].replace(".", "/") + ".py")).exists():
            steps[key] = STEPS[key]
    return steps


def table(results: dict) -> str:
    lines = []
    pr = results.get("probes", {})
    if pr:
        lines.append("probes: " + (pr.get("status", "") if pr.get("status") != "ok" else "")
                     + ", ".join(f"{r['name']} {'ok' if r['result'] == 'ok' else 'FAIL'}" for r in pr.get("records", [])))
        for r in pr.get("records", []):
            if r["result"] != "ok":
                lines.append(f"  {r['name']}: {r['result']}")
    for key, st in results.get("steps", {}).items():
        recs = st.get("records", [])
        res = next((r for r in recs if r["kind"] == "resources"), {})
        regs = ", ".join(f"{k}: {v['registers']} regs, {v['spill_instructions']} spills, HGMMA {v['HGMMA']}, "
                         f"UTMALDG {v['UTMALDG']}" for k, v in res.get("kernels", {}).items())
        checks = [r for r in recs if r["kind"] == "check"]
        ok = sum(r["ok"] for r in checks)
        lines.append(f"\n== {key} ({st['module']}) — {st['status']}")
        lines.append(f"  {regs or res.get('error', 'no resources')}")
        for r in recs:
            if r["kind"] == "fatal":
                lines.append(f"  FATAL: {r.get('error')}")
        lines.append(f"  correctness: {ok}/{len(checks)} cases pass")
        for r in checks:
            if not r["ok"]:
                lines.append(f"    FAIL {r['problem']}: {r.get('cause')} — {r.get('message', '')[:200]}")
            else:
                lines.append(f"    ok   {r['problem']}: err {r['err']:.3g} ≤ bound {r['bound']:.3g}")
        times = [r for r in recs if r["kind"] == "time"]
        if times:
            lines.append(f"  {'shape':<32} {'ms':>8} {'TFLOP/s':>8} {'SDPA ms':>8} {'SDPA TF':>8} {'speed':>6} {'|Δ|':>8}")
            for r in times:
                if "ms" in r:
                    lines.append(f"  {r['problem']:<32} {r['ms']:8.3f} {r['tflops']:8.1f} {r['sdpa_ms']:8.3f} "
                                 f"{r['sdpa_tflops']:8.1f} {r['speed_vs_sdpa']:6.2f} {r['max_diff_vs_sdpa']:8.1e}"
                                 + (f"   graph-replayed: {r['graph_us']:.1f} µs vs SDPA {r['sdpa_graph_us']:.1f} µs "
                                    f"({r['graph_speed_vs_sdpa']:.2f})" if "graph_us" in r else ""))
                else:
                    lines.append(f"  {r['problem']:<32} {r.get('error') or r.get('skipped')}")
        streams = [r for r in recs if r["kind"] == "stream"]
        if streams:
            lines.append("  the grader's way (back-to-back calls; graph-replayed at S ≤ 1024), GPU time per call:")
            lines.append(f"  {'shape':<32} {'µs':>9} {'TFLOP/s':>8} {'SDPA µs':>9} {'SDPA TF':>8} {'time/SDPA':>9}")
            for r in streams:
                lines.append(_stream_line(r))
    sw = results.get("sweep")
    if sw:
        lines.append(f"\n== sweep of step 7c's variants — {sw.get('status')}")
        by = {}
        for r in sw.get("records", []):
            by.setdefault(r.get("variant"), []).append(r)
        for name, recs in by.items():
            bad = [r for r in recs if r["kind"] == "check" and not r["ok"]]
            res = next((r for r in recs if r["kind"] == "variant_resources"), {})
            done = next((r for r in recs if r["kind"] == "variant_done"), {})
            regs = "; ".join(f"{k} {v['spill_instructions']} spills" for k, v in res.get("kernels", {}).items())
            lines.append(f"  [{name}] {done.get('error') or 'done'}; {regs}; "
                         f"checks {sum(r['ok'] for r in recs if r['kind'] == 'check')}/"
                         f"{sum(r['kind'] == 'check' for r in recs)}")
            for r in bad[:3]:
                lines.append(f"    FAIL {r['problem']}: {r.get('cause')} — {r.get('message', '')[:160]}")
            for r in recs:
                if r["kind"] == "stream":
                    lines.append(_stream_line(r))
    stub = results.get("stub")
    if stub:
        recs = stub.get("records", [])
        good = sum(bool(r.get("all_nan")) for r in recs)
        lines.append(f"\n== exercise stub — {stub['status']}: {good}/{len(recs)} calls came back all-NaN "
                     f"(max {max((r.get('s', 0) for r in recs), default=0):.1f} s)")
        for r in recs:
            if not r.get("all_nan"):
                lines.append(f"    {r['problem']}: {r.get('error', 'some outputs written')}")
    return "\n".join(lines)


def _stream_line(r: dict) -> str:
    if "us" not in r:
        return f"  {r['problem']:<32} {r.get('error')}"
    return (f"  {r['problem']:<32} {r['us']:9.1f} {r['tflops']:8.1f} {r['sdpa_us']:9.1f} {r['sdpa_tflops']:8.1f} "
            f"{r['ratio']:9.3f}" + ("  (graph)" if r.get("basis") == "graph-replayed" else
                                   f"  spread {r['spread']['mine']:.3f}/{r['spread']['sdpa']:.3f}"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", nargs="*", help="e.g. 7a 7b, or NAME=path/to/launcher.py (default: every step file present)")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-time", action="store_true", help="no do_bench timing (records of kind 'time')")
    ap.add_argument("--stream", action="store_true", help="also time the grader's way (records of kind 'stream')")
    ap.add_argument("--no-stub", action="store_true")
    ap.add_argument("--sweep", nargs="*", help="time step 7c's variants (default: all of VARIANTS) instead of the steps")
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="seconds of timing before no new shape is started")
    ap.add_argument("--out-name", default="ch07.json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--variants", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:                                   # inside a subprocess
        _start_watchdog()
        try:
            if a.worker == "probes":
                work_probes()
            elif a.worker == "stub":
                work_stub()
            elif a.worker == "sweep":
                work_sweep(a.variants)
            else:
                work_step(a.worker, not a.no_check, not a.no_time, a.deadline or time.time() + 1e9, a.stream)
        except Exception as e:
            _emit(kind="fatal", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc()[-1500:])
        return

    t_start = time.time()
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / a.out_name
    results: dict = {"environment": environment(), "steps": {}}
    if a.stream:
        results["protocols"] = {
            "time": "triton.testing.do_bench (median, L2 flushed before each call), the step first, then SDPA",
            "stream": ("GPU time per call of back-to-back calls (batches of n calls, ~20 ms, between two CUDA "
                       "events; L2 flushed before each batch; the step and SDPA alternating batch by batch, "
                       "rotating; median of 5 rounds), graph-replayed at S <= 1024 — the grader's way without "
                       "its gate (flashtutor/grading/timing.py)")}

    def save():
        results["wall_s"] = round(time.time() - t_start, 1)
        out_file.write_text(json.dumps(results, indent=1, default=str))

    cap = results["environment"].get("capability")
    if not cap or tuple(cap) != (9, 0):
        print(f"chapter 7 needs an sm_90 GPU (H100/H200); this machine has {results['environment'].get('gpu')}")
        save()
        return 1

    if a.sweep is not None:                        # step 7c's variants, then nothing else
        names = ["default"] + (a.sweep or list(VARIANTS))
        records, statuses = [], []
        while names:
            recs, status = run_child(["--worker", "sweep", "--variants", *names], LIMITS["sweep"])
            records += recs
            statuses.append(status)
            done = {r["variant"] for r in recs if r["kind"] == "variant_done"}
            started = [r["variant"] for r in recs if r["kind"] == "variant_start"]
            if all(n in done for n in names):
                break
            # The worker stopped early (a hang, a lost context): skip the variant it was on, restart for the rest.
            bad = started[-1] if started else names[0]
            if bad not in done:
                records.append({"kind": "variant_done", "variant": bad, "error": status})
            names = names[names.index(bad) + 1:]
            if names and time.time() - t_start > a.budget:
                records.append({"kind": "variant_done", "variant": "(rest)", "error": f"time budget: {names} not run"})
                break
        results["sweep"] = {"status": "; ".join(statuses), "records": records, "variants": {
            k: {"kwargs": repr(v[0]), "pairs": v[1]} for k, v in VARIANTS.items()}}
        save()
        print(table(results))
        return 0

    if not a.no_probes:
        recs, status = run_child(["--worker", "probes"], LIMITS["probes"])
        results["probes"] = {"status": status, "records": recs}
        save()
        print(table({"probes": results["probes"]}), flush=True)

    steps = present_steps(a.steps)
    for i, (key, module) in enumerate(steps.items()):
        # share the remaining time budget among the remaining steps' timing
        left = a.budget - (time.time() - t_start)
        deadline = time.time() + max(30.0, (left - 15) / (len(steps) - i))   # 15 s kept for the stub
        args = ["--worker", module, "--deadline", str(deadline)]
        args += ["--no-check"] if a.no_check else []
        args += ["--no-time"] if a.no_time else []
        args += ["--stream"] if a.stream else []
        recs, status = run_child(args, min(LIMITS["step"] * (2 if a.stream else 1), deadline - time.time() + 90))
        results["steps"][key] = {"module": module, "status": status, "records": recs}
        save()
        print(table({"steps": {key: results["steps"][key]}}), flush=True)

    if not a.no_stub:
        recs, status = run_child(["--worker", "stub"], LIMITS["stub"])
        results["stub"] = {"status": status, "records": recs}
        save()

    print("\n" + "=" * 100)
    print(f"chapter 7 on {results['environment'].get('gpu')} — {results['environment'].get('date')}, "
          f"{time.time() - t_start:.0f} s; JSON: {out_file}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
