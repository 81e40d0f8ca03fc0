"""The timed phase of a grading: every timed shape measured with the gated-batch protocol
(:mod:`.timing`), its outputs re-checked, its traces judged, its disturbances caught."""
from __future__ import annotations

import contextlib
import os
import random
import time

from ..problems import Problem
from .evidence import Cause, TimingResult, tampering_message
from . import memory, timing as tm, trace as tr

ATTEMPTS = 3


class GraphError(Exception):
    pass


class TimedPhase:
    def __init__(self, judge):
        import importlib

        import torch
        self.j, self.torch = judge, torch
        self.bench = tm.Bench(judge.arena, judge.events, judge.worker, mode=judge.ch.mode)
        self.backward = judge.ch.mode == "backward"
        self.neighbours = tm.Neighbours({os.getpid()}, judge.lock)
        self.rng = random.Random(random.SystemRandom().randrange(1 << 62))
        self.peaks = None
        ch = judge.ch
        self.graph_basis = ch.speed.basis == "graph" or bool(judge.graph)
        self.local: dict = {}
        if ch.speed.min_speedup_vs and ch.speed.baseline:
            self.local["baseline"] = importlib.import_module(ch.speed.baseline).attention
        if judge.reference and ch.reference:
            self.local["reference"] = importlib.import_module(ch.reference).attention

    # ---------------------------------------------------------- one shape
    def shape(self, p: Problem) -> TimingResult:
        """The shape timed; when the judge runs out of GPU memory (other processes hold it), again after a wait
        with a fresh worker (the batch it was in is abandoned), and "not graded here" when the GPU stays full."""
        for wait in (*memory.wait_times(), None):
            res = TimingResult(p.name, "graph" if self.graph_basis else "stream")
            try:
                return self._shape_locked(p, res)
            except Exception as e:  # noqa: BLE001
                if not memory.is_oom(e):
                    raise
                cause, message = memory.verdict(e, f"timing {p.name}", self.j.worker.pid, self.j._ours())
                self.j.worker.stop()                              # after the verdict: it reads the worker's memory
                memory.trim()
                if cause == Cause.OUT_OF_MEMORY or wait is None:
                    res.causes.append(cause)
                    res.messages.append(f"{p.name} (timing): {message}" if cause == Cause.OUT_OF_MEMORY else message)
                    return res
                time.sleep(wait)

    def _shape_locked(self, p: Problem, res: TimingResult) -> TimingResult:
        if not self.j.worker.alive():          # the last shape's worker died: a fresh one
            from .spawn import WorkerFailed
            try:
                self.j.worker.start(self.j.arena_msg)
            except WorkerFailed as e:
                res.skipped = f"the worker could not restart: {e.message}"
                return res
        lock = self.j.lock.exclusive(self.j.worker.pid) if self.j.lock else contextlib.nullcontext()
        t_lock = time.time()
        with lock:
            t_got = time.time()
            self.j.waited(t_got - t_lock)
            try:
                return self._shape_alone(p, res)
            finally:
                memory.trim()                  # SDPA's graphs and outputs, the re-checks' references: back now
                self.j.memory_peaks.sample(self.j.worker.pid)
                tm.log_line(event="timed shape", chapter=self.j.ch.key, shape=p.name, asked=round(t_lock, 3),
                            got=round(t_got, 3), left=round(time.time(), 3))

    def _shape_alone(self, p: Problem, res: TimingResult) -> TimingResult:
        """The shape's timing, holding the GPU alone; then the evidence from its calls (re-checking timed
        outputs computes references on the GPU: still alone)."""
        if self.peaks is None:
            self.peaks = self._peaks()
        for attempt in range(ATTEMPTS):
            self.neighbours.ours = {os.getpid(), self.j.worker.pid}
            self.neighbours.busy()                       # start NVML's sampling window now
            try:
                run, backend = self._measure(p)
            except GraphError as e:
                res.causes.append(Cause.NOT_CAPTURABLE)
                res.messages.append(f"{p.name}: the call could not be replayed from a CUDA graph, and this chapter "
                                    f"times it that way: {e}")
                return res
            if run.tampering:
                res.causes.append(Cause.TAMPERING)
                res.messages.append(f"{p.name} (timed calls): {tampering_message(run.tampering)}")
                return res
            if run.errors:
                e = run.errors[0]
                if e.get("fatal"):
                    self.j.worker.stop()          # a new worker for the next shape
                cause = e.get("cause", Cause.ERROR)
                res.causes.append(cause if isinstance(cause, Cause) else Cause.ERROR)
                res.messages.append(f"{p.name} (timing): {e.get('message', '')}")
                return res
            why = self.neighbours.busy() or tm.spread_disturbed(run, ["learner", "sdpa"])
            if not why:
                break
            if attempt < ATTEMPTS - 1:
                time.sleep(2.0 * 2 ** attempt)   # whatever disturbed it (another process) may be gone by then
        res.disturbed = why
        if why:
            res.notes.append(f"timing disturbed after {ATTEMPTS} tries: {why}")
        res.backend = backend
        res.times = run.times
        lt, st = run.times["learner"], run.times["sdpa"]
        res.ratio = lt.median_us / st.median_us if st.median_us > 0 else None
        if "baseline" in run.times and lt.median_us > 0:
            res.speedup_vs_baseline = run.times["baseline"].median_us / lt.median_us
        if self.peaks:
            floor = self.peaks.floor_us(p)
            if self.backward:        # 2.5× the forward's FLOPs; q, k, v, o, do read and dq, dk, dv written: 2× its bytes
                floor = dict(floor, floor_us=max(2.0 * floor["memory_us"], 2.5 * floor["compute_us"]))
            res.floor_us = floor["floor_us"]
            from ..roofline import percent_of_floor
            res.pct_floor = {n: percent_of_floor(m.median_us, floor["floor_us"]) for n, m in run.times.items()}
            if lt.median_us < 0.9 * floor["floor_us"] and not res.disturbed:
                res.causes.append(Cause.BELOW_FLOOR)
                res.messages.append(f"{p.name}: {lt.median_us:.2f} µs per call is faster than the roofline floor "
                                    f"({floor['floor_us']:.2f} µs) — implausible; is the work really done in this call?")
        fixed = tm.fixed_cost_excess(lt) if "learner" not in run.host_bound else ""
        if fixed and (not res.disturbed or (lt.fixed_us or 0) > 5 * tm.FIXED_MIN_US):
            res.causes.append(Cause.NOT_INDEPENDENT)
            res.messages.append(f"{p.name}: {fixed}")
        if run.host_bound and "learner" in run.host_bound:
            res.notes.append("your calls could not be queued ahead: each waited for the host (a synchronisation "
                             "inside attention()?), so host time is inside your GPU time")
        self._recheck(p, run, res)
        self._judge_traces(p, run, res)
        return res

    def _measure(self, p: Problem):
        from ..timing import pinned_sdpa
        from .protocol import slots_that_fit, views
        torch = self.torch
        if self.backward:
            from .gradients import pinned_sdpa_backward
            count = min(tm.MAX_CALLS, slots_that_fit(self.j.arena.numel(), p.shape, "backward"))
            self.bench.write_inputs(p.shape, count, self.rng.randrange(1 << 62), p.qk_std, p.causal)
            backend, pinned, sdpa_bwd = pinned_sdpa_backward(self.j.arena, p.shape, p.causal, count)
            with pinned:
                run = tm.measure_shape(self.bench, p, {"learner": "remote", "sdpa": sdpa_bwd}, rounds=self.j.rounds,
                                       rng=self.rng, max_calls=count, timeout=self.j.time_timeout)
            del sdpa_bwd                 # SDPA's graphs: up to half the arena again, back to the device
            torch.cuda.empty_cache()
            return run, backend
        q, k, v, _ = views(self.j.arena, p.shape, 0)
        q.normal_(), k.normal_(), v.normal_()
        backend, pinned = pinned_sdpa(q, k, v, causal=p.causal)
        cands = {"learner": "remote"}
        with pinned.pinned():
            cands["sdpa"] = lambda q, k, v, causal: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            for name, fn in self.local.items():
                cands[name] = lambda q, k, v, causal, fn=fn: fn(q, k, v, causal=causal)
            capture = self._capture(p, cands) if self.graph_basis else None
            run = tm.measure_shape(self.bench, p, cands, rounds=self.j.rounds, capture=capture, rng=self.rng,
                                   max_calls=min(tm.MAX_CALLS, slots_that_fit(self.j.arena.numel(), p.shape)),
                                   timeout=self.j.time_timeout)
        return run, backend

    def _capture(self, p: Problem, cands: dict):
        from .protocol import views
        torch = self.torch

        def capture(n1, n2):
            pool = self.bench.pool(p.shape)
            lists = {n: tm._RNG.sample(range(pool), n) for n in (n1, n2)}     # the graphs' slots, fixed now
            msg = self.j.worker.request(("capture", {"shape": list(p.shape), "causal": p.causal,
                                                     "slot_lists": [lists[n1], lists[n2]]}), self.j.time_timeout)
            if msg["op"] == "error":
                raise GraphError(msg.get("message", ""))
            if msg["op"] != "captured" or not msg.get("ok"):
                raise GraphError(msg.get("message", "no answer"))
            graphs = {"learner": None}
            for name, fn in cands.items():
                if fn == "remote":
                    continue
                graphs[name] = {}
                for n in (n1, n2):
                    vs = [views(self.j.arena, p.shape, i) for i in range(n)]
                    side = torch.cuda.Stream()
                    side.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(side):
                        for q, k, v, _ in vs[:1]:
                            fn(q, k, v, p.causal)                      # warm: plans, workspaces
                    torch.cuda.current_stream().wait_stream(side)
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        keep = [fn(q, k, v, p.causal) for q, k, v, _ in vs]
                    g.keep = keep
                    graphs[name][n] = g
            graphs["learner"] = lists
            return graphs
        return capture

    def _peaks(self):
        """The roofline's peaks: the course's one basis, the GPU's datasheet (book/measuring.ipynb, "one basis"),
        so a report's "% of floor" means what the book's does; a GPU the table does not know gets its measured
        rates (a large GEMM and copy), so that "faster than the floor" still has a floor there."""
        from ..roofline import basis_peaks, measure_peaks
        peaks = basis_peaks(self.torch.cuda.get_device_name())
        if peaks is not None:
            return peaks
        try:
            return measure_peaks()
        except Exception:  # noqa: BLE001
            return None

    # ---------------------------------------------------------- evidence from the timed calls
    def _recheck(self, p: Problem, run, res: TimingResult) -> None:
        from ..check import check_output
        bad = None
        for n, (pos, slot, seed, out, unchanged, rows) in run.snapshots:
            res.rechecked += 1
            if not unchanged:
                bad = bad or f"a timed call modified its inputs (call {pos + 1} of a batch of {n})"
                continue
            if self.backward:
                from .gradients import recheck
                r = recheck(p, self.bench.regenerate(p.shape, seed, rows, slot, p.qk_std), out)
            else:
                q, k, v = self.bench.regenerate(p.shape, seed, rows, slot, p.qk_std)
                r = check_output(p, q, k, v, out, seed=seed)
            if not r.ok:
                where = "the last call" if pos == n - 1 else f"call {pos + 1}"
                bad = bad or f"{where} of a batch of {n} timed calls: {r.message}"
        if run.rows_bad and not bad:            # every output of every batch, on sampled rows
            more = len(run.rows_bad) - 1
            bad = run.rows_bad[0] + (f" (and in {more} more batch{'es' if more > 1 else ''})" if more else "")
        if bad:
            res.recheck_ok, res.recheck_message = False, bad
            res.causes.append(Cause.TIMED_OUTPUT_WRONG)
            res.messages.append(f"{p.name}: the output of a timed call is wrong: {bad}")

    def _judge_traces(self, p: Problem, run, res: TimingResult) -> None:
        if not self.j.ch.anticheat:
            return
        names, seen = set(), set()
        for n, t, window in run.traces:
            if t is None:
                findings = [tr.Finding(Cause.UNTRACED, "a timed batch came back without its trace")]
            else:
                names |= set(t.names)
                findings = tr.judge(t, self.j.policy, calls=n)
                if t.span_us is not None and window == window:
                    over = t.span_us - window
                    res.span_over_window_us = over if res.span_over_window_us is None \
                        else max(res.span_over_window_us, over)
                outside = tm.outside_window(t.span_us, window)
                if outside and Cause.OUTSIDE_WINDOW not in res.causes:
                    findings.append(tr.Finding(Cause.OUTSIDE_WINDOW, outside))
            for f in findings:
                if f.message not in seen:
                    seen.add(f.message)
                    res.causes.append(f.cause)
                    res.messages.append(f"{p.name} (timed calls): {f.message}")
                    self.j.report.add_trace_findings([f])
        res.kernels = sorted(names)
        lt = run.times["learner"]
        n2 = lt.batch[1]
        per_call = [sum(k.total_us for k in t.kernels) / n for n, t, _ in run.traces if n == n2 and t is not None]
        if per_call and lt.median_us > 0:       # traced kernel time per call / GPU time per call
            res.busy_fraction = sorted(per_call)[len(per_call) // 2] / lt.median_us
