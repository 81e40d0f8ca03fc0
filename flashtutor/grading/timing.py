"""GPU time per call that the worker cannot rewrite and the host does not inflate.

**The gated batch.** The judge queues, on its own stream::

    sleep(T) ─ E0 ─ write the inputs of slots 0…N−1 ─ flush L2 ─ Em ─ A

and tells the worker to run a batch. The worker's stream waits for the interprocess event A, the worker
issues its N calls (they queue up behind A while the judge's GPU still sleeps), joins every stream it
created, and records the interprocess event B. The judge's stream waits for B and records E1. The
window Em→E1 holds the worker's N calls back to back on the GPU — the host's cost of issuing them is
spent during the sleep, not in the window — and both its ends are events only the judge records. The
judge checks that the gate held (Em had not passed when the worker reported its calls queued); when it
did not, the batch is redone with a longer sleep. The sleep covers the time the judge itself saw the
batch take to issue (from before its sleep to the worker's reply: messages, the tracer's start and the
calls), the slowest of the candidate's last three batches of that size whose gate held.

**The slope.** A window also holds constant costs (two interprocess hops, a context switch: about
300 µs on an H100). Timing batches of N1 and N2 calls and taking (W(N2) − W(N1)) / (N2 − N1) removes
them. N2 is as large as lets the batch last about 2.5 ms on the GPU and take the host at most 3 ms to
issue (the GPU sleeps behind the gate for that long: on a slow host, more calls per batch buy
precision no longer, only waiting), but the two sizes always differ by at least 150 µs of GPU time (a
window jitters by a few µs); N1 is a quarter of N2; a call longer than 2.5 ms gets batches of 1 and 2;
calls replayed from CUDA graphs (one launch a batch) are sized by the window alone. Each round times every candidate at both sizes, in a rotating order (yours, SDPA, the chapter's
baseline); the reported time is the median over rounds, with the 10th–90th percentile of the rounds.
SDPA and the course's kernels run in the judge's process in the same gated way, with the same tracer
on, so both sides carry the same tracing cost.

**Cold inputs.** Every call of a batch gets its own slot of fresh random inputs (one seed per batch,
three kernels write them all), and the flush after writing them evicts them from L2: each call reads its q, k, v from device memory, as a flush before
every call would give, without the flush's time or the host's launch cost inside the window.

**Disturbance.** Another process on the GPU time-slices with the worker and the judge. The judge asks
NVML which processes use the GPU, and looks at the spread of the rounds; when either says the GPU was
not ours, it re-times the shape, and after three tries reports "disturbed": the speed verdict is then
"re-run", never a failure.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..timing import _quantile
from .evidence import Cause, Measurement, Trace

L2_FLUSH_BYTES = 256 << 20
SPREAD_LIMIT = 0.10             # rounds whose slopes spread more than this (p90−p10 over median): disturbed
TARGET_WINDOW_US = 2500.0       # the larger batch's length on the GPU, at most …
HOST_BUDGET_US = 3000.0         # … and the host's time to issue it, at most (the GPU waits that long behind the gate)
MAX_CALLS = 64
MIN_CALLS = 2                   # a call longer than the window: batches of 1 and 2 (the slope is one call)
MIN_SPAN_US = 150.0             # the two batches differ by at least this much GPU time, whatever the host's cost:
                                # a window jitters by a few µs (H100, 2026-11-26: 297-309 µs for one 20 µs call)
GATE_FACTOR = 1.25              # the gate's sleep: this times the batch's expected issue time, plus the margin;
GATE_MARGIN_US = 1500.0         # a gate that opened early is redone with twice the factor, which then decays
GATE_FACTOR_MAX = 16.0          # (a call that waits for the GPU never lets a gate hold: its sleeps stay bounded)
GATE_TRIES = 3
POOL_MAX = 128                  # slots a worker's batch draws from (all get fresh inputs before every batch)
# The fixed cost a batch of yours may have beyond the grader's control batch (no call, same gate and hops): a
# batch that costs more than its calls did work once per batch — outputs of other calls computed ahead.
FIXED_MIN_US = 50.0             # at least this much (H100: the control's jitter is a few µs) …
FIXED_JITTER = 4.0              # … or this many times the control's p10-p90 spread …
FIXED_PER_CALL = 0.5            # … or half a call, whichever is largest
_RNG = random.SystemRandom()


# ---------------------------------------------------------------- one GPU, several gradings --------
class GpuLock:
    """Timed sections alone on the GPU: a grading's correctness calls take the lock shared, its timed
    shapes take it exclusive (a turnstile keeps new shared holders from starving a waiting timer).

    The processes that compute only under this lock (judges, their workers, a test process holding it)
    register their pids in the lock's folder: they cannot compute during another's timed section, so
    NVML's note that one of them used the GPU (a sample that straddles the moment the lock changed
    hands) does not make that section "disturbed". Any other process still does."""

    def __init__(self, folder: Path | None = None):
        folder = folder or Path(os.environ.get("FLASHTUTOR_CACHE", Path.home() / ".cache" / "flashtutor"))
        folder.mkdir(parents=True, exist_ok=True)
        self.turnstile = open(folder / "gpu.turnstile", "a+")
        self.main = open(folder / "gpu.lock", "a+")
        self.pids = folder / "gpu.pids"
        self.pids.mkdir(exist_ok=True)

    def register(self, *pids: int | None) -> None:
        for pid in {os.getpid(), *pids} - {None}:
            path = self.pids / str(pid)
            if not path.exists():
                path.touch()
                if pid == os.getpid():
                    import atexit
                    atexit.register(lambda p=path: p.unlink(missing_ok=True))

    def registered(self) -> set[int]:
        """The live processes that compute only under the lock."""
        out = set()
        for f in self.pids.iterdir():
            try:
                pid = int(f.name)
                os.kill(pid, 0)
                out.add(pid)
            except (ValueError, ProcessLookupError):
                f.unlink(missing_ok=True)
            except PermissionError:
                out.add(pid)          # alive, another user's
        return out

    @contextlib.contextmanager
    def shared(self, *pids: int | None):
        self.register(*pids)
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        fcntl.flock(self.main, fcntl.LOCK_SH)
        fcntl.flock(self.turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.main, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self, *pids: int | None):
        self.register(*pids)
        fcntl.flock(self.turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.main, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self.main, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self.turnstile, fcntl.LOCK_UN)


# ---------------------------------------------------------------- who else is on the GPU ------------
class Neighbours:
    """Processes other than ours computing on this GPU, from NVML (absent: we rely on the spread)."""

    def __init__(self, ours: set[int], lock: GpuLock | None = None):
        self.ours = set(ours)
        self.lock = lock                  # its registered processes compute only under the lock: not neighbours
        self.handle = None
        self.last = 0
        try:
            import pynvml
            pynvml.nvmlInit()
            import torch
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:  # noqa: BLE001 — no NVML here
            self.handle = None

    def busy(self) -> str:
        """'' or a description of the other processes that computed on the GPU since the last call.

        Only processes NVML saw using the SMs count (a notebook or another grading's idle worker holds a
        CUDA context without disturbing anything); where the driver gives no per-process use, this says
        nothing and the spread of the rounds decides."""
        if self.handle is None:
            return ""
        nv = self.nvml
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(self.handle, self.last)
        except Exception:  # noqa: BLE001 — not supported here (or no samples yet)
            return ""
        self.last = max([s.timeStamp for s in samples] + [self.last])
        ours = self.ours | (self.lock.registered() if self.lock else set())
        active = sorted({s.pid for s in samples if s.pid not in ours and (s.smUtil or 0) > 0})
        if not active:
            return ""
        return (f"{len(active)} other process{'es' if len(active) > 1 else ''} computed on this GPU "
                f"(pid {', '.join(map(str, active[:4]))})")


# ---------------------------------------------------------------- the batches -----------------------
@dataclass
class BatchRun:
    window_us: float
    held: bool
    host_us: float                       # per call
    trace: Trace | None = None
    snapshots: list = field(default_factory=list)   # (position in the batch, slot, seed, out, inputs unchanged, rows)
    error: dict | None = None            # the worker's error message, if the batch failed
    rows_bad: str = ""                   # the sampled-row check of every output of the batch ("" = all right)
    tampering: list = field(default_factory=list)   # what the worker's audit hook refused during the batch
    issued_us: float = float("nan")      # the judge's wall time from before its sleep to the calls' being queued


def _clock_cycles_per_us() -> float:
    try:
        from cuda.core import Device
        return Device().properties.clock_rate / 1e3       # kHz -> cycles per µs
    except Exception:  # noqa: BLE001
        return 1980.0


class Bench:
    """Gated batches on the shared arena, for local candidates (callables in this process) and the
    worker. ``fill(slot_flat_view, seed)`` writes one slot's q, k, v."""

    def __init__(self, arena, events=None, worker=None, trace_local: bool = True, mode: str = "forward"):
        import torch
        from ..timing import L2Flusher
        self.torch = torch
        self.arena = arena
        self.mode = mode                     # the slots' layout (protocol.py): "backward" for chapter 8
        self.A, self.B = events or (None, None)
        self.worker = worker
        self.flush = L2Flusher(L2_FLUSH_BYTES)
        self.cycles = _clock_cycles_per_us()
        self.gen = torch.Generator(device="cuda")
        self.trace_local = trace_local
        self.judge_enqueue_us = 2000.0
        self.timing_stream = torch.cuda.Stream()
        self.abandoned: list = []
        self.gate: dict[str, float] = {}     # a candidate's gate factor, once its gate opened early
        self.label = ""                      # the candidate being timed (FLASHTUTOR_BATCH_LOG's lines)

    def write_inputs(self, shape, n: int, seed: int, qk_std: float, causal: bool = False) -> None:
        """Fresh random q, k, v in slots 0…n−1 and NaN in their outputs: three kernels for the whole batch (a
        kernel per slot costs the slow host milliseconds that the gate's sleep then multiplies). In the backward
        layout also do, and the judge's own o and lse for each slot (:func:`.gradients.fill_slots`)."""
        if self.mode == "backward":
            from .gradients import fill_slots
            fill_slots(self.arena, shape, n, self.gen, seed, qk_std, causal)
            return
        _fill_slots(self.slots(shape, n), self.gen, seed, qk_std)

    def slots(self, shape, n: int):
        """Slots 0…n−1 of the arena as one [n, 4·B·H·S·D] view (each row: q | k | v | out)."""
        from .protocol import numel
        m = numel(shape)
        return self.arena[: n * 4 * m].view(n, 4 * m)

    def pool(self, shape) -> int:
        """How many slots of ``shape`` a batch of the worker's draws its slots from: every slot the arena holds,
        up to :data:`POOL_MAX`. All of them get fresh inputs before every batch, and the batch's calls go to a
        random subset in a random order: a call cannot know which other slots its batch holds, and work done
        for slots it was not called on is work inside the window."""
        from .protocol import slots_that_fit
        return max(1, min(POOL_MAX, slots_that_fit(self.arena.numel(), shape, self.mode)))

    def regenerate(self, shape, seed: int, n: int, slot: int, qk_std: float):
        """The inputs slot ``slot`` of a block of ``n`` slots was given (for re-checking a timed output): the
        block written again the same way, in fresh memory (q, k, v; in the backward layout q, k, v, do)."""
        from .protocol import numel
        if self.mode == "backward":
            from .gradients import regenerate
            return regenerate(shape, self.gen, seed, n, slot, qk_std, self.arena.device)
        m = numel(shape)
        block = self.torch.empty(n, 4 * m, dtype=self.arena.dtype, device=self.arena.device)
        _fill_slots(block, self.gen, seed, qk_std)
        return tuple(block[slot, j * m:(j + 1) * m].view(*shape) for j in range(3))

    def _outputs(self, shape, slot: int):
        """A copy of a slot's output(s): out, or (dq, dk, dv) in the backward layout."""
        from .protocol import views
        vs = views(self.arena, shape, slot, self.mode)
        return vs[3].clone() if self.mode == "forward" else tuple(t.clone() for t in vs[6:])

    def batch(self, cand, problem, n: int, *, seed: int, sleep_us: float, snapshot=(),
              graph=None, timeout: float = 120.0, trace: bool = True, slots=None) -> BatchRun:
        """One gated batch of ``n`` calls of ``cand`` ("remote" = the worker, or a callable). The worker's calls
        go to ``slots`` (default: ``n`` slots drawn at random from the pool, in a random order); ``snapshot``:
        positions in the batch whose outputs are kept for the full re-check."""
        torch = self.torch
        from .protocol import views
        shape = problem.shape
        remote = cand == "remote"
        if remote:
            pool = self.pool(shape)
            if slots is None:
                slots = _RNG.sample(range(pool), n)
            rows = pool if n else 0                  # the control batch (no call) writes no inputs
        else:
            slots, rows = list(range(n)), n
        E0, Em, E1 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t0 = time.perf_counter()
        torch.cuda._sleep(int(min(sleep_us, 2e6) * self.cycles))
        E0.record()
        if rows:
            self.write_inputs(shape, rows, seed, problem.qk_std, problem.causal)
        self.flush()
        Em.record()
        snaps, err = [], None
        rows_bad = ""
        if remote:
            self.A.record()
            self.judge_enqueue_us = (time.perf_counter() - t0) * 1e6
            msg = self.worker.request(("batch", {"shape": list(shape), "causal": problem.causal, "slots": list(slots),
                                                 "graph": graph is not None, "nonce": f"{random.getrandbits(64):016x}",
                                                 "trace": trace}), timeout=timeout)
            held = not Em.query()
            t_ready = time.perf_counter()
            if msg["op"] != "done":
                torch.cuda.current_stream().synchronize()
                return BatchRun(float("nan"), held, float("nan"), error=msg, tampering=msg.get("tampering") or [])
            host_us = msg["host_ns"] / 1e3 / max(n, 1)
            # Only the timing stream waits for the worker's end event; if the worker dies before its calls
            # finish, that stream is abandoned (no wait on the GPU can be cancelled) and the judge carries on.
            ts = self.timing_stream
            ts.wait_stream(torch.cuda.current_stream())
            ts.wait_event(self.B)
            E1.record(ts)
            with torch.cuda.stream(ts):
                outs = [(i, slots[i], self._outputs(shape, slots[i])) for i in snapshot]
            traced = None
            tampering = list(msg.get("tampering") or [])
            if trace:
                trace_msg = self.worker.receive(timeout=timeout)
                traced = trace_msg.get("trace") if trace_msg["op"] == "trace" else None
                tampering += [t for t in trace_msg.get("tampering") or [] if t not in tampering]
            if not _wait(E1, timeout):
                self.abandoned.append(ts)       # never synchronised again; see Judge._release
                self.timing_stream = torch.cuda.Stream()
                return BatchRun(float("nan"), held, float("nan"), error={
                    "op": "error", "cause": Cause.TIMEOUT, "fatal": True, "where": "", "log": "",
                    "message": f"a timed batch of {n} calls did not finish within {timeout:.0f} s"})
            torch.cuda.current_stream().wait_stream(ts)
            if n and self.mode == "backward":
                from .gradients import sampled_rows_check as grad_rows_check
                rows_bad = grad_rows_check(self.arena, shape, slots, problem.causal)
            elif n:
                rows_bad = sampled_rows_check(self.arena, shape, slots, problem.causal)
            for i, s, out in outs:       # were the inputs left as written? (the next batch overwrites them)
                given = self.regenerate(shape, seed, rows, s, problem.qk_std)
                unchanged = all(torch.equal(a, b) for a, b in zip(given, views(self.arena, shape, s, self.mode)))
                snaps.append((i, s, seed, out, unchanged, rows))
            trace = traced
        else:
            tampering = []
            prof = _profile() if (self.trace_local and trace) else contextlib.nullcontext()
            with prof:
                self.judge_enqueue_us = (time.perf_counter() - t0) * 1e6
                t1 = time.perf_counter()
                if graph is not None:
                    graph.replay()
                else:
                    for i in range(n):
                        if self.mode == "backward":
                            cand(*views(self.arena, shape, i, self.mode), problem.causal)
                        else:
                            q, k, v, _ = views(self.arena, shape, i)
                            cand(q, k, v, problem.causal)
                host_us = (time.perf_counter() - t1) * 1e6 / max(n, 1)
                t_ready = time.perf_counter()
                held = not Em.query()
                E1.record()
                E1.synchronize()
            trace = None
        run = BatchRun(Em.elapsed_time(E1) * 1e3, held, host_us, trace, snapshots=snaps, error=err,
                       issued_us=(t_ready - t0) * 1e6, rows_bad=rows_bad, tampering=tampering)
        if _BATCH_LOG:
            _log_batch(self.label, n, sleep_us, run, t0, t_ready)
        return run


def sampled_rows_check(arena, shape, slots, causal: bool, rows: int = 16, budget: int = 1 << 24) -> str:
    """Every output of a timed batch, checked on rows chosen at random: for each slot, one or more random
    (batch, head) pairs and ``rows`` random query rows of each, against an fp32 reference computed from the
    slot's own inputs. Loose on purpose (2 % of the row's largest value + 2e-3: twenty-odd fp16 ulps): it is
    not the precision check (the correctness cases are), it finds outputs that are not attention at all — left
    unwritten, stale, garbage on some calls — on every call of every batch, which a few full re-checks cannot.
    Returns '' or what is wrong, for the first bad call."""
    import torch
    from .protocol import numel
    B, H, S, D = shape
    n = len(slots)
    if not n:
        return ""
    m = numel(shape)
    pool = max(slots) + 1
    blk = arena[: pool * 4 * m].view(pool, 4, B, H, S, D)
    groups = max(1, min(4, budget // max(1, n * S * D)))
    dev = arena.device
    g = n * groups
    r = min(rows, S)
    # all on the GPU, a handful of launches (the H100 host pays tens of µs a launch, and this runs every batch)
    gen = torch.Generator(device=dev).manual_seed(_RNG.randrange(1 << 62))   # torch's default seed is fixed
    sl = torch.tensor(slots, device=dev).repeat_interleave(groups)
    bb = torch.randint(B, (g,), device=dev, generator=gen)
    hh = torch.randint(H, (g,), device=dev, generator=gen)
    sel = blk[sl, :, bb, hh]                                            # [g, 4, S, D]: q, k, v, out of one (b, h)
    ri = torch.randint(S, (g, r), device=dev, generator=gen) if S > r else \
        torch.arange(S, device=dev).expand(g, S)                        # [g, r] query rows
    take = ri[..., None].expand(g, r, D)
    qr = sel[:, 0].gather(1, take).float()                              # [g, r, D]
    out = sel[:, 3].gather(1, take).float()                             # [g, r, D]
    k, v = sel[:, 1].float(), sel[:, 2].float()                         # [g, S, D]
    s = torch.bmm(qr, k.transpose(1, 2)) * (D ** -0.5)                  # [g, r, S]
    if causal:
        s = s.masked_fill(torch.arange(S, device=dev)[None, None, :] > ri[..., None], float("-inf"))
    ref = torch.bmm(torch.softmax(s, dim=-1), v)                        # [g, r, D]
    err = (out - ref).abs().amax(dim=-1)                                # [g, r]
    bound = 0.02 * ref.abs().amax(dim=-1) + 2e-3
    bad = ~(err <= bound)                                               # NaN is bad too
    per = bad.any(dim=1).view(n, groups).any(dim=1)                     # [n]: a bad row in that call
    if not bool(per.any()):
        return ""
    i = int(per.nonzero()[0])
    j = int(bad.view(n, groups, r)[i].any(dim=1).nonzero()[0])
    row = int(bad.view(n, groups, r)[i, j].nonzero()[0])
    gi = i * groups + j
    e = float(err[gi, row])
    what = "never written (still the grader's pattern)" if e != e else f"off by {e:.3g} (allowed {float(bound[gi, row]):.3g})"
    return (f"call {i + 1} of a batch of {n}: row [b={int(bb[gi])}, h={int(hh[gi])}, s={int(ri[gi, row])}] is {what}; "
            f"{int(per.sum())} of the batch's {n} calls have such rows")


_BATCH_LOG = os.environ.get("FLASHTUTOR_BATCH_LOG")     # a JSON line per batch: where a timed shape's time goes


def log_line(**what) -> None:
    """One JSON line in FLASHTUTOR_BATCH_LOG (if set), with this process and the wall clock."""
    import json
    if _BATCH_LOG:
        with open(_BATCH_LOG, "a") as f:
            f.write(json.dumps({"pid": os.getpid(), "t": round(time.time(), 3), **what}) + "\n")


def _log_batch(label: str, n: int, sleep_us: float, run: BatchRun, t0: float, t_ready: float) -> None:
    now = time.perf_counter()
    log_line(**{"cand": label, "n": n,
                            "sleep_us": round(sleep_us), "window_us": round(run.window_us, 1), "held": run.held,
                            "host_us": round(run.host_us, 1), "issued_ms": round((t_ready - t0) * 1e3, 2),
                            "total_ms": round((now - t0) * 1e3, 2)})


def _fill_slots(block, gen, seed: int, qk_std: float) -> None:
    """``block``: [n, 4m] rows of q | k | v | out. Random q, k, v (q and k scaled by ``qk_std``), out filled with
    the never-written pattern."""
    from .protocol import fill_unwritten
    m = block.shape[1] // 4
    gen.manual_seed(seed)
    block[:, : 3 * m].normal_(generator=gen)
    if qk_std != 1.0:
        block[:, : 2 * m].mul_(qk_std)
    fill_unwritten(block[:, 3 * m:])


def _wait(event, timeout: float) -> bool:
    """Poll an event from the host, at most ``timeout`` seconds (Event.synchronize could wait forever)."""
    t = time.monotonic()
    while not event.query():
        if time.monotonic() - t > timeout:
            return False
        time.sleep(20e-6 if time.monotonic() - t < 0.01 else 1e-3)
    return True


def warm_tracer() -> None:
    """The profiler's first start costs seconds (CUPTI's set-up): the judge pays it while the worker starts."""
    with _profile():
        pass


def _profile():
    import warnings
    from torch.profiler import ProfilerActivity, profile
    warnings.filterwarnings("ignore", message=r".*Profiler clears events")
    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])   # as the worker's tracer


# ---------------------------------------------------------------- a shape, all candidates -----------
@dataclass
class ShapeRun:
    times: dict[str, Measurement]
    windows: dict[str, dict[int, list[float]]]
    traces: list                          # (calls, Trace) per batch of yours
    snapshots: list                       # (n, (position, slot, seed, output, inputs unchanged, rows))
    disturbed: str = ""
    errors: list[dict] = field(default_factory=list)
    host_bound: list[str] = field(default_factory=list)
    rows_bad: list[str] = field(default_factory=list)   # the sampled-row check's findings, one per bad batch
    tampering: list = field(default_factory=list)       # what the worker's audit hook refused


class Gate:
    """How long a candidate's batch of ``n`` takes to issue, from what the judge saw of its batches whose gate
    held: the slowest of the last three of that size; for a size not seen yet, the largest fixed part seen
    (the issue time beyond the calls' own host time: messages, the tracer's start) plus ``n`` calls. A batch
    whose gate opened early says nothing (its issue time may include waiting for the GPU); a candidate whose
    gate opened early on every try of a batch is ``hopeless`` (its calls wait for the GPU: no sleep helps) and
    gets one try per batch until a gate of its holds again."""

    def __init__(self, bench: Bench, host: dict[str, float]):
        self.bench, self.host = bench, host
        self.issued: dict[tuple[str, int], list[float]] = {}
        self.fixed: dict[str, float] = {}
        self.hopeless: set[str] = set()

    def saw(self, name: str, n: int, run: BatchRun) -> None:
        if run.error:
            return
        if not run.held:
            self.hopeless.add(name)
            return
        self.hopeless.discard(name)
        if run.issued_us != run.issued_us:
            return
        self.issued.setdefault((name, n), []).append(run.issued_us)
        per_call = run.host_us if run.host_us == run.host_us else 0.0
        self.fixed[name] = max(self.fixed.get(name, 0.0), run.issued_us - n * per_call)

    def expected(self, name: str, n: int) -> float:
        seen = self.issued.get((name, n))
        if seen:
            return max(seen[-3:])
        return max(self.bench.judge_enqueue_us, self.fixed.get(name, 0.0)) + n * self.host[name]

    @staticmethod
    def sleep_us(expect_us: float, factor: float) -> float:
        """The gate's sleep for a batch expected to take ``expect_us`` to issue."""
        return factor * expect_us + GATE_MARGIN_US


def batch_sizes(per_call_us: float, host_us: float, max_calls: int) -> tuple[int, int]:
    """The two batch sizes of a candidate: the larger lasts about :data:`TARGET_WINDOW_US` on the GPU and takes
    the host at most :data:`HOST_BUDGET_US` to issue, but never so few calls that the two sizes differ by less
    than :data:`MIN_SPAN_US` of GPU time (precision before the host's budget: on the H100's slow host, a traced
    Triton call costs ~3 ms to issue, and batches of 1 and 2 calls of 20 µs gave slopes spread over 50%); at
    least :data:`MIN_CALLS`, at most ``max_calls``. The smaller is a quarter of the larger; their difference
    is what the slope divides by. ``host_us`` 0: the calls are replayed from a graph (one launch)."""
    per_call = max(per_call_us, 0.5)
    n2 = TARGET_WINDOW_US / per_call
    if host_us > 0:
        n2 = min(n2, HOST_BUDGET_US / max(host_us, 1.0))
    n2 = max(n2, 4 / 3 * MIN_SPAN_US / per_call)
    n2 = max(2, int(min(max(n2, MIN_CALLS), max_calls)))
    return min(max(1, n2 // 4), n2 - 1), n2


def measure_shape(bench: Bench, problem, cands: dict, *, rounds: int = 5, capture=None,
                  rng: random.Random | None = None, rechecks: int = 4, max_calls: int = MAX_CALLS,
                  timeout: float = 120.0, sizes: tuple[int, int] | None = None) -> ShapeRun:
    """Time every candidate on ``problem``. ``cands``: name -> "remote" or a callable (q, k, v, causal).
    ``capture(n1, n2)`` -> {name: {n: graph}} for graph-basis timing (None: calls issued one by one);
    it may raise GraphError. ``sizes``: the two batch sizes (default: :func:`batch_sizes` from a first
    estimate of each candidate's GPU and host time per call)."""
    graphs = None
    rng = rng or random.Random()
    seed = lambda: rng.randrange(1 << 62)   # noqa: E731
    host = {name: 300.0 for name in cands}
    errors: list[dict] = []

    gate = Gate(bench, host)

    def gated(name, n, label="", **kw) -> BatchRun:
        """One batch whose gate held, or the batch that failed (see :class:`Gate`). A gate that opened early is
        redone with a sleep that covers the issue time just seen, twice the factor."""
        bench.label = label or name
        factor = bench.gate.get(name, GATE_FACTOR)
        expect = gate.expected(name, n)
        run = None
        for _ in range(1 if name in gate.hopeless else GATE_TRIES):
            run = bench.batch(cands[name], problem, n, seed=seed(), sleep_us=gate.sleep_us(expect, factor),
                              timeout=timeout, **kw)
            if run.error or run.held:
                break
            if run.issued_us == run.issued_us:
                expect = max(expect, run.issued_us)
            factor = min(2 * factor, GATE_FACTOR_MAX)
        gate.saw(name, n, run)
        if not run.error:
            bench.gate[name] = max(GATE_FACTOR, 0.8 * factor) if run.held else factor
        return run

    # warm-up (compilation, autotuning, plans) and a first estimate of each candidate's time per call: a batch
    # of one (the first call compiles, tunes, plans), then batches of one and three.
    est = {}
    for name in cands:
        for i, n in enumerate((1, 1, 3) if sizes is None else (1,)):
            if i == 0:              # the first call compiles and plans: not an issue time to expect, nor to gate
                bench.label = f"{name} (warm-up)"
                r = bench.batch(cands[name], problem, n, seed=seed(), timeout=max(timeout, 600.0),
                                sleep_us=gate.sleep_us(gate.expected(name, n),
                                                       bench.gate.get(name, GATE_FACTOR)))
            else:
                r = gated(name, n, label=f"{name} (warm-up)")
            if r.error:
                errors.append(r.error)
                return ShapeRun({}, {}, [], [], errors=errors)
            if i:
                host[name] = r.host_us
                est.setdefault(name, {})[n] = r.window_us
    if sizes is not None:
        per = {name: sizes for name in cands}
    else:
        per = {name: batch_sizes((est[name][3] - est[name][1]) / 2, 0.0 if capture else host[name], max_calls)
               for name in cands}
    if capture is not None:          # graphs are captured for one pair of sizes: the learner's
        per = {name: per["learner"] for name in cands}
        graphs = capture(*per["learner"])
    host_traced = dict(host)     # the host's cost per call with the tracer on: what sized the batches
    tampering: list = []
    for attempt in range(2):
        windows = {name: {per[name][0]: [], per[name][1]: []} for name in cands}
        held = {name: [] for name in cands}
        traces: list = []
        snaps = []
        remote = [name for name, c in cands.items() if c == "remote"]
        check_batches = set()
        if remote:
            total = rounds * 2
            check_batches = set(rng.sample(range(total), k=min(max(1, rechecks // 2), total)))
        batch_no = 0
        names = list(cands)
        control = {name: [] for name in remote}
        rows_bad: list[str] = []
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            # the two sizes in a random order each round: a batch cannot tell from the last one how large it is
            for which in rng.sample((0, 1), 2):
                for name in order:
                    n = per[name][which]
                    g = (graphs or {}).get(name)
                    snapshot = ()
                    kw = {"graph": g.get(n) if g else None}
                    if cands[name] == "remote":
                        if batch_no in check_batches:
                            snapshot = tuple(sorted({n - 1, *rng.sample(range(n), k=min(1, n))}))
                        batch_no += 1
                        if g:                       # a captured graph: its calls' slots were fixed at capture
                            kw = {"graph": True, "slots": g[n]}
                    run = gated(name, n, snapshot=snapshot, **kw)
                    tampering += [t for t in run.tampering if t not in tampering]
                    if run.error:
                        errors.append(run.error)
                        return ShapeRun({}, windows, traces, snaps, errors=errors, tampering=tampering)
                    windows[name][n].append(run.window_us)
                    held[name].append(run.held)
                    if cands[name] == "remote":
                        traces.append((n, run.trace, run.window_us))
                        if run.rows_bad and run.rows_bad not in rows_bad:
                            rows_bad.append(run.rows_bad)
                    snaps.extend((n, s) for s in run.snapshots)
            for name in remote:                 # the control: a batch of no call, through the same gate and hops
                run = gated(name, 0, label=f"{name} (control)")
                tampering += [t for t in run.tampering if t not in tampering]
                if run.error:
                    errors.append(run.error)
                    return ShapeRun({}, windows, traces, snaps, errors=errors, tampering=tampering)
                control[name].append(run.window_us)
        # The host's cost of issuing a call, on one more batch with no tracer on either side (tracing multiplies
        # the host time of each call several times over).
        for name, c in cands.items():
            g = (graphs or {}).get(name)
            n2 = per[name][1]
            kw = {"graph": g.get(n2) if g else None}
            if c == "remote" and g:
                kw = {"graph": True, "slots": g[n2]}
            run = gated(name, n2, trace=False, **kw)
            if not run.error and run.host_us == run.host_us:
                host[name] = run.host_us
        times = {}
        for name in cands:
            n1, n2 = per[name]
            w1, w2 = windows[name][n1], windows[name][n2]
            slopes = [(b - a) / (n2 - n1) for a, b in zip(w1, w2)]
            fixed = ctl = ctl_spread = None
            if control.get(name):
                # The batch's fixed cost, each round: the window of the smaller batch less its calls at that round's
                # slope; against the control's window (no call) it is what the calls cost beyond their count.
                ctl = statistics.median(control[name])
                ctl_spread = _quantile(sorted(control[name]), 0.9) - _quantile(sorted(control[name]), 0.1)
                fixed = statistics.median(a - n1 * sl for a, sl in zip(w1, slopes)) - ctl
            slopes.sort()
            med = statistics.median(slopes)
            times[name] = Measurement(med, _quantile(slopes, 0.1), _quantile(slopes, 0.9), len(slopes), host_us=host[name],
                                      batch=(n1, n2), gate_held=sum(held[name]) / len(held[name]), fixed_us=fixed,
                                      control_us=ctl, control_spread_us=ctl_spread)
        # A slope over too little GPU time is noise: a warm-up estimate inflated by a slow first batch (H100,
        # 2026-11-27: chapter 5's solution at B8 S128, ~21 µs a call estimated at ~125, got batches of 1 and 2 calls
        # and rounds spread 448 % three times over, "disturbed") is corrected once from the measured time per call.
        resize = {}
        if sizes is None and capture is None and attempt == 0:
            for name in cands:
                m, (n1, n2) = times[name], per[name]
                if 0 < m.median_us and m.median_us * (n2 - n1) < MIN_SPAN_US / 2:
                    new = batch_sizes(m.median_us, host_traced[name], max_calls)
                    if new != per[name]:
                        resize[name] = new
        if not resize:
            break
        per.update(resize)
        host.update(host_traced)
    host_bound = [n for n in cands if times[n].gate_held < 0.5]
    return ShapeRun(times, windows, traces, snaps, host_bound=host_bound, rows_bad=rows_bad, tampering=tampering)


OUTSIDE_MIN_US = 500.0           # a batch's kernels may span this much more GPU time than its window …
OUTSIDE_FRACTION = 0.25          # … or this fraction of the window, whichever is larger (CUPTI's and the events'
                                 # clocks agree to a few µs; work started before the gate opened precedes it by
                                 # the gate's sleep, 1.5 ms and more)


def outside_window(span_us: float | None, window_us: float) -> str:
    """Why a timed batch's traced work does not fit the window that timed it ('' when it does): every kernel of
    the batch runs after the judge's gate opens and before the worker's end event, so the GPU time from the first
    kernel's start to the last one's end cannot exceed the window. Work queued on a stream the worker neither
    gated nor joined (one it never saw switched to) runs during the gate's sleep or after the end: the window
    does not time it."""
    if span_us is None or window_us != window_us or window_us <= 0:
        return ""
    if span_us <= window_us + max(OUTSIDE_MIN_US, OUTSIDE_FRACTION * window_us):
        return ""
    return (f"your kernels of one timed batch spanned {span_us:.0f} µs on the GPU, but the window that timed the batch "
            f"(from the grader's gate to the end of your last call) was {window_us:.0f} µs: work ran before the gate "
            "opened or after your calls ended — on a stream the grader's worker neither waited for nor joined? Launch "
            "on the current stream, or switch streams with torch.cuda.stream(...)")


def fixed_cost_excess(m: Measurement) -> str:
    """Why a candidate's batches are not just their calls ('' when they are): its fixed cost per batch beyond
    the control's exceeds :data:`FIXED_MIN_US`, :data:`FIXED_JITTER` × the control's spread and
    :data:`FIXED_PER_CALL` × a call. Work moved out of the calls into something done once per batch — the
    outputs of other calls computed on the first — shows here, where a slope alone would drop it."""
    if m.fixed_us is None or m.control_us is None:
        return ""
    limit = max(FIXED_MIN_US, FIXED_JITTER * (m.control_spread_us or 0.0), FIXED_PER_CALL * max(m.median_us, 0.0))
    if m.fixed_us <= limit:
        return ""
    return (f"the calls are not independent: each batch of yours has a fixed cost of {m.fixed_us:.0f} µs beyond the "
            f"grader's control batch ({m.control_us:.0f} µs, no call), more than the {limit:.0f} µs allowed — work done "
            f"once per batch (other calls' outputs computed ahead, results carried between calls) is not allowed")


def spread_disturbed(run: ShapeRun, names) -> str:
    """Why the rounds cannot be trusted ('' when they can): slopes spread over SPREAD_LIMIT, or a time per call
    of zero or less — no kernel runs in negative time, so the batches did not time what they should (seen once
    on the H100's host, for a correct 1-ms-per-call kernel: -330 µs), and it must not read as 'faster than the
    roofline floor', an accusation."""
    bad = []
    for n in names:
        m = run.times.get(n)
        if m and m.median_us <= 0:
            bad.append(f"{n}'s time per call came out at {m.median_us:.1f} µs (batches of {m.batch[0]} and "
                       f"{m.batch[1]} calls): not a measurement")
        elif m and m.spread > SPREAD_LIMIT:
            bad.append(f"{n}'s rounds spread {100 * m.spread:.0f}% (p10 {m.p10_us:.1f}, p90 {m.p90_us:.1f} µs)")
    return "; ".join(bad)
