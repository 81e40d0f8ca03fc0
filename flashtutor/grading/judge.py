"""The judge: plans the cases, feeds the worker, measures, and turns the evidence into a verdict.

It never imports the learner's code. It reads the learner's files (the static scan, the kernel names
they define), compiles their CUDA sources itself (SASS, registers), writes every input, computes every
reference, records every timing event, and decides. The worker (:mod:`.worker`) is a separate process
that only runs the learner's ``attention`` on the inputs the judge wrote and tells what its tracer saw.

Without a GPU, a CUDA chapter's kernels run emulated on the CPU (:mod:`flashtutor.emulate`) where g++ can
build them: the worker builds and loads them (native code from the learner's source: never in this
process), on CPU tensors in a shared-memory arena, on the small "emulated" shape set, untimed.
"""
from __future__ import annotations

import os
import random
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from ..chapters import Chapter, get_chapter
from ..progress import Progress
from .evidence import CUDA_FATAL, Cause, CaseResult, TimingResult, tampering_message
from .report import Report
from .spawn import WorkerFailed, WorkerHandle, _exit, debug
from .submission import Submission
from . import memory, trace as tr

if TYPE_CHECKING:
    from ..problems import Problem

LOSES_WORKER = {Cause.TIMEOUT, Cause.CRASH} | {c for _, c in CUDA_FATAL}
EMULATED_METHOD = ("execution: emulated on the CPU — your .cu files compiled with g++ against flashtutor.emulate and "
                   "run in the worker process, one fiber per CUDA thread, blocks one after another, on CPU tensors; "
                   "barriers, masks, indexing and fp32/fp16 math run as written. q, k, v and out lie one after "
                   "another, followed by a guard page: an access past the end of that memory faults and is reported "
                   "with the kernel, its block and thread and where the address lies; one past q, k or v lands in "
                   "the next of them (a write shows as a modified input, a read as wrong numbers, or as NaN when it "
                   "reads out's never-written pre-fill), and one past a buffer of your own is seen only when it "
                   "crashes the process (reported as a probable out-of-bounds access). Data races and speed are not "
                   "seen here (nothing is timed): grade on a GPU, with --sanitize, for those. Every call is traced: "
                   "one of your kernels must run, and no library matmul, softmax or attention")
CUTLASS_REFERENCE = ("the GEMMs ran as a CPU reference (fp32, the same inputs, outputs and dtypes as the CUTLASS GEMMs "
                     "of your configurations, which need an sm_90a GPU); only your softmax kernel was emulated")
SETUP_TIMEOUT = 300.0
CHECK_TIMEOUT = 120.0
TIME_TIMEOUT = 300.0
ARENA_MAX_BYTES = 4 << 30
_POOL_LOCK = __import__("threading").Lock()     # judges in several threads allocate their arenas one at a time
# Memory a worker may still be waited on by an abandoned stream: freeing it would synchronise the device, and a
# wait on an event a dead process never signalled does not end. Kept for the life of the process.
_NEVER_FREED: list = []


# ---------------------------------------------------------------- the plan --------------------------
EMULATED_KINDS = ("cuda", "cutlass")       # chapters whose kernels are CUDA: on a CPU, emulated or not run


def default_check_sets(ch: Chapter, device: str) -> tuple[str, ...]:
    """The shape sets a grading checks when the caller names none: the chapter's own on a GPU; on a CPU,
    "emulated" for CUDA chapters (one fiber per CUDA thread: small shapes) and "cpu" for the others."""
    if device == "cuda":
        return tuple(ch.check_sets)
    return ("emulated",) if ch.kind in EMULATED_KINDS else ("cpu",)


def emulation(ch: Chapter, device: str, sub: Submission) -> tuple[bool, str]:
    """Whether this grading runs the chapter's CUDA kernels emulated on the CPU, and when it cannot, why
    ('' when the question does not arise: a GPU, or a chapter without CUDA kernels). Asks whether g++ can
    build for the emulation and reads the sources (sm_90 hardware is not emulated); builds nothing of theirs."""
    if device == "cuda" or ch.kind not in EMULATED_KINDS:
        return False, ""
    from .. import emulate
    if not emulate.available():
        return False, emulate.unavailable_reason() or "the CPU emulation of CUDA kernels is not available here"
    why = emulate.unsupported(sub.cuda)
    return why is None, why or ""


def plan_checks(ch: Chapter, *, sets=None, seeds=None, device="cuda") -> list[tuple[Problem, int]]:
    """The correctness cases: every shape of the chapter's sets (default: :func:`default_check_sets`),
    causal and not, ``seeds`` fresh seeds each; large-logit cases at every head dim the sets contain, causal
    and not. Seeds are drawn fresh for every grading run (the report lists them, so a failure can be
    reproduced)."""
    from ..problems import shape_set
    sets = sets or default_check_sets(ch, device)
    seeds = seeds or ch.seeds
    rng = random.SystemRandom()
    out, seen = [], set()
    for s in sets:
        for p in shape_set(s):
            for causal in ((False, True) if ch.causal else (False,)):
                pc = p.replace(causal=causal)
                if pc in seen:
                    continue
                seen.add(pc)
                out += [(pc, rng.randrange(1 << 40)) for _ in range(seeds)]
    if ch.large_logits:
        # exp() overflows fp32 without the max subtraction: q, k scaled by 6 give scores of std 36. At every
        # head dim the chapter supports (its own sets), even when the caller chose sets with fewer dims.
        problems = [p for s in sets for p in shape_set(s)]
        own = default_check_sets(ch, device)
        dims = sorted({p.D for p in problems} | {p.D for s in own for p in shape_set(s)})
        for D in dims:
            base = next((p for p in problems if p.D == D and p.S >= 32), None) \
                or next((p.replace(D=D) for p in problems if p.S >= 32), None)
            if base is None:
                continue
            for causal in ((False, True) if ch.causal else (False,)):
                out.append((base.replace(qk_std=6.0, causal=causal), rng.randrange(1 << 40)))
    return out


def plan_timing(ch: Chapter, time_sets=None) -> list[Problem]:
    from ..problems import shape_set
    return [p for s in (time_sets or ch.time_sets) for p in shape_set(s)]


# ---------------------------------------------------------------- grading -----------------------------
class Judge:
    def __init__(self, ch: Chapter, path: Path, *, device: str, sets, seeds, timing: bool, graph, reference: bool,
                 time_sets, setup_timeout: float, check_timeout: float, time_timeout: float, rounds: int,
                 progress: bool, worker: WorkerHandle | None = None):
        self.ch, self.path, self.device = ch, path, device
        self.sets, self.seeds, self.timing, self.graph = sets, seeds, timing, graph
        self.reference, self.time_sets, self.rounds = reference, time_sets, rounds
        self.setup_timeout, self.check_timeout, self.time_timeout = setup_timeout, check_timeout, time_timeout
        self.progress = progress
        self.sub = Submission.at(path)
        self.emulate, self.not_emulated = emulation(ch, device, self.sub)
        self.worker = worker or WorkerHandle(worker_setup(ch, self.sub, device, emulate=self.emulate), _tmpdir(),
                                             setup_timeout)
        self.report = Report(chapter=ch.key, title=ch.title, path=str(path), device=device, excluded=ch.excluded,
                             speed_rule=asdict(ch.speed), sass_rule=ch.sass)
        self.memory_peaks = memory.Peaks()

    # ---------------------------------------------------------- before anything runs
    def read_sources(self) -> bool:
        """Static scan, kernel names, the judge's own compile. False when grading stops here."""
        from .scan import scan
        r = self.report
        if self.ch.anticheat:
            r.static = [f.to_dict() for f in scan(self.sub, self.ch.allowed)]
        self.own = frozenset(self.sub.kernel_names())
        for name in tr.reserved_names(self.own):
            r.static.append({"file": str(self.path), "line": 0, "severity": "forbidden",
                             "what": f"your kernel {name!r} has a name reserved for library kernels: rename it"})
        self.registers: dict[str, set] = {}
        if self.ch.kind in ("cuda", "cutlass"):
            from ..loaders import CompileError
            from ..loaders.nvrtc import CudaModule, compile_cuda, default_arch
            arch = default_arch()
            for cu in self.sub.cuda:
                try:
                    cubin = compile_cuda(cu, arch=arch, disk_cache=False)
                except CompileError as e:
                    r.set_error(Cause.COMPILE_ERROR, str(e))
                    return False
                r.arch = arch
                try:
                    res = CudaModule(cu, cubin, arch).resources()
                    r.resources[cu.name] = res
                    for k, u in res.items():
                        if u.get("registers") is not None:
                            self.registers.setdefault(k, set()).add(u["registers"])
                except Exception as e:  # noqa: BLE001 — the disassembler is optional
                    r.warnings.append(f"could not read the compiled kernels' resources: {e}")
        return True

    def _compile_loaded(self, loaded: list[dict]) -> None:
        """The sources the worker says it loaded with defines: compiled here too (registers to compare)."""
        from ..loaders.nvrtc import CudaModule, compile_cuda, default_arch
        own = {Path(p).resolve() for p in self.sub.cuda}
        for m in loaded:
            if Path(m["path"]).resolve() in own and m["defines"]:
                try:
                    cubin = compile_cuda(m["path"], defines=m["defines"], disk_cache=False)
                    for k, u in CudaModule(m["path"], cubin, default_arch()).resources().items():
                        if u.get("registers") is not None:
                            self.registers.setdefault(k, set()).add(u["registers"])
                except Exception:  # noqa: BLE001
                    pass

    # ---------------------------------------------------------- the run
    def waited(self, seconds: float) -> None:
        """Time spent waiting for the GPU lock (other gradings' timed sections, or their checks while this one
        times): part of the checks and timing phases, kept apart as ``gpu wait`` so a slow run says why."""
        self.report.phases["gpu wait"] = round(self.report.phases.get("gpu wait", 0.0) + seconds, 2)

    def lap(self, phase: str) -> None:
        """Charge the time since the last lap to ``phase`` (the report's ``phases``)."""
        now = time.time()
        self.report.phases[phase] = round(self.report.phases.get(phase, 0.0) + now - self._lap_t, 2)
        self._lap_t = now

    def run(self) -> Report:
        t0 = self._lap_t = time.time()
        r = self.report
        stop = not self.read_sources()
        self.lap("sources")
        if not stop and self.sub.syntax_errors:
            r.set_error(Cause.IMPORT_ERROR, self.sub.syntax_errors[0])
            stop = True
        r.execution = "gpu" if self.device == "cuda" else {"triton": "interpreted", "torch": "cpu"}.get(self.ch.kind, "")
        if not stop and self.ch.kind in EMULATED_KINDS and self.device != "cuda":
            if self.emulate:
                r.execution = "emulated"
            else:
                self._compiled_only(self.not_emulated)
                stop = True
        if not stop and self.device == "cuda":
            why = _gpu_cannot_run(self.ch)
            if why:                       # compiled and its SASS checked above; nothing runs on this GPU
                r.set_error(Cause.UNSUPPORTED_GPU, why)
                r.execution = "compiled only"
                stop = True
        if stop:
            self.worker.stop()
            return self.finish(t0)
        checks = plan_checks(self.ch, sets=self.sets, seeds=self.seeds, device=self.device)
        timed = plan_timing(self.ch, self.time_sets) if (self.timing and self.device == "cuda") else []
        bar = Progress(len(checks) + len(timed), f"grading {self.ch.key} · {self.path.name}") if self.progress else None
        try:
            self._grade(checks, timed, bar)
        except Exception as e:  # noqa: BLE001 — the judge's own memory, the GPU full: not graded here
            if not (isinstance(e, memory.GraderOutOfMemory) or (self.device == "cuda" and memory.is_oom(e))):
                raise
            r.set_error(*memory.verdict(e, "", self.worker.pid, self._ours()))
        finally:
            if self.device == "cuda":
                self.memory_peaks.sample(self.worker.pid)
                r.memory = self.memory_peaks.to_dict()
            if bar:
                bar.close()
            self.worker.stop()
            if getattr(self, "shm", None):
                self.arena = None
                try:
                    self.shm.unlink()
                    self.shm.close()
                except (BufferError, OSError):
                    pass          # a view still holds the mapping: it goes with the process
        return self.finish(t0)

    def _compiled_only(self, why: str) -> None:
        """Nothing of the learner's runs here: the verdict is 'not run', with the reason among the warnings."""
        r = self.report
        r.compile_only, r.execution = True, "compiled only"
        r.checks.clear()
        if why:
            r.warnings.append(f"not run on this CPU: {why}")

    def finish(self, t0: float) -> Report:
        from .rules import decide
        self.report.describe(self.ch)
        if self.report.execution == "emulated" and self.report.checks:
            self.report.method.insert(0, EMULATED_METHOD)
            if self.ch.kind == "cutlass" and CUTLASS_REFERENCE not in self.report.warnings:
                self.report.warnings.append(CUTLASS_REFERENCE)
        native = native_host_code(self.ch, self.sub)
        if native and self.report.checks and native not in self.report.warnings:
            self.report.warnings.append(native)
        decide(self.report, self.ch)
        self.report.seconds = round(time.time() - t0, 1)
        return self.report

    def _setup_device(self, checks, timed) -> tuple:
        import torch
        from .protocol import slot_elems
        need = max(slot_elems(p.shape, self.ch.mode) for p in [p for p, _ in checks] + timed)   # the largest slot
        if self.device == "cuda":
            memory.cap_judge()
            free = torch.cuda.mem_get_info()[0]
            budget = min(ARENA_MAX_BYTES, free // 6)
            slots = min(budget // 2, need * 64) if timed else need     # up to 64 calls of the largest shape
            elems = max(slots, need * (2 if timed else 1))              # a timed shape needs two slots at least
            with _POOL_LOCK:     # a pool of its own: nothing else of the judge's lies in the block the worker maps
                self.pool = torch.cuda.MemPool()
                with torch.cuda.use_mem_pool(self.pool):
                    arena = torch.empty(elems, dtype=torch.float16, device="cuda")
            A = torch.cuda.Event(interprocess=True)
            B = torch.cuda.Event(interprocess=True)
            A.record()
            B.record()
            torch.cuda.current_stream().synchronize()
            return arena, (A, B), ("arena", arena, A.ipc_handle(), B.ipc_handle())
        # On the CPU: shared memory, the arena placed to end at a page boundary and followed by a guard that the
        # worker makes inaccessible, so that an emulated kernel's access past the last out faults (protocol.py).
        import mmap
        from multiprocessing import shared_memory

        from .protocol import GUARD_BYTES, cpu_layout
        size, offset = cpu_layout(need, mmap.PAGESIZE)
        self.shm = shared_memory.SharedMemory(create=True, size=size)
        arena = torch.frombuffer(self.shm.buf, dtype=torch.float16, count=need, offset=offset)
        return arena, None, ("arena_shm", self.shm.name, need, offset, GUARD_BYTES)

    def _grade(self, checks, timed, bar) -> None:
        import contextlib
        import torch
        ctx = contextlib.nullcontext()
        if self.device == "cuda":
            torch.cuda.init()
            self.stream = torch.cuda.Stream()     # this judge's own: judges in other threads keep theirs
            ctx = torch.cuda.stream(self.stream)
        with ctx:
            self._grade_on_stream(checks, timed, bar)

    def _ours(self) -> set[int]:
        return {os.getpid()} | ({self.worker.pid} if self.worker.pid else set())

    def _grade_on_stream(self, checks, timed, bar) -> None:
        r = self.report
        self.arena, self.events, self.arena_msg = memory.retry(lambda: self._setup_device(checks, timed),
                                                               "allocating its arena", self._ours())
        if self.device == "cuda" and timed:
            from .timing import warm_tracer
            self.worker.while_starting = warm_tracer
        try:
            ready = self.worker.attach(self.arena_msg)
            self.lap("worker")
        except WorkerFailed as e:
            if self.emulate and e.cause == Cause.NOT_RUN:      # g++ cannot build what NVRTC compiled
                self._compiled_only(e.message)
            else:
                r.set_error(e.cause, e.message, log=e.log)
            return
        self._compile_loaded(ready.get("loaded", []))
        from ..env import describe
        r.env = describe()
        self.policy = tr.Policy(own=self.own, registers=self.registers,
                                allowed=__import__("re").compile(self.ch.allowed_kernels) if self.ch.allowed_kernels else None,
                                allow_torch_math=self.ch.kind == "torch",
                                need_own=(self.device == "cuda" or self.emulate)
                                and self.ch.kind in ("cuda", "triton", "cutlass") and self.ch.anticheat,
                                need_registers=self.device == "cuda")
        from .timing import GpuLock
        self.lock = GpuLock() if self.device == "cuda" else None
        lost = []                 # cases that cost the worker (a hang, a crash, a lost CUDA context)
        for i, (p, seed) in enumerate(checks):
            if len(lost) >= 2:
                r.checks.append(CaseResult(p.name, seed, False, Cause.NOT_RUN,
                                           f"skipped after two cases ended in {' and '.join(sorted(set(lost)))}: "
                                           "each costs a fresh process, and the next would most likely do the same"))
            else:
                res = self._check_on_shared_gpu(p, seed)
                if self.emulate and res.cause == Cause.NOT_RUN:    # the emulation lacks something the kernel uses
                    self._compiled_only(res.message.removeprefix(f"{Cause.NOT_RUN}: "))
                    return
                r.checks.append(res)
                if res.cause in LOSES_WORKER:
                    lost.append(str(res.cause))
            if bar:
                bar.advance()
        debug(f"{len(r.checks)} checks done, {sum(c.ok for c in r.checks)} ok")
        self.lap("checks")
        correct = all(c.ok for c in r.checks) and not r.forbidden
        if not timed:
            return
        if not correct:
            r.timings = [TimingResult(p.name, self.ch.speed.basis, skipped="correctness failed first") for p in timed]
            return
        if not self.worker.alive():
            try:
                self.worker.start(self.arena_msg)
            except WorkerFailed as e:
                r.timings = [TimingResult(p.name, self.ch.speed.basis, skipped=f"the worker could not restart: "
                                          f"{e.message}") for p in timed]
                return
        from .timed import TimedPhase
        phase = TimedPhase(self)
        try:
            for p in timed:
                debug("timing", p.name)
                t = time.time()
                r.timings.append(phase.shape(p))
                r.timings[-1].seconds = round(time.time() - t, 2)
                if bar:
                    bar.advance()
        finally:
            self.lap("timing")
            if phase.bench.abandoned:
                _NEVER_FREED.append((self.arena, getattr(self, "pool", None), phase.bench))

    # ---------------------------------------------------------- one correctness case
    def _check_on_shared_gpu(self, p: Problem, seed: int) -> CaseResult:
        """check(p, seed), on a GPU that other processes may share: the judge's out-of-memory is retried after a
        wait and then reads "not graded here"; the learner's call that ran out of memory is tried once more after
        a wait, and its failure then says how full the GPU was; the judge's cached blocks go back to the driver
        after the case, so that the other gradings on the GPU have them."""
        if self.device != "cuda":
            return self.check(p, seed)

        def step() -> CaseResult:
            return memory.retry(lambda: self.check(p, seed), f"checking {p.name}", self._ours())
        try:
            res = step()
            if res.cause == Cause.OUT_OF_MEMORY:
                memory.trim()
                time.sleep(memory.wait_times()[0])
                res = step()
                if res.cause == Cause.OUT_OF_MEMORY:
                    res.message += f" (twice; when the grader looked: {memory.describe(self._ours())})"
        except memory.GraderOutOfMemory as e:
            res = CaseResult(p.name, seed, False, *memory.verdict(e, "", self.worker.pid))
        memory.trim()
        self.memory_peaks.sample(self.worker.pid)
        return res

    def _restarted(self, p: Problem, seed: int) -> CaseResult | None:
        """None when a worker is ready for the case; the case's result when a fresh one could not start."""
        if self.worker.alive():
            return None
        try:
            self.worker.start(self.arena_msg)
        except WorkerFailed as e:
            return CaseResult(p.name, seed, False, e.cause, e.message, log=e.log)
        return None

    def _gpu_shared(self):
        """The GPU lock, shared (correctness calls beside other gradings' checks, never beside a timed section),
        with the wait charged to the report's ``gpu wait``."""
        import contextlib

        @contextlib.contextmanager
        def held():
            lock = self.lock.shared(self.worker.pid) if self.lock else contextlib.nullcontext()
            t_lock = time.time()
            with lock:
                self.waited(time.time() - t_lock)
                yield
        return held()

    def _judge_trace(self, case: CaseResult, trace_msg: dict | None, prefix: str = "") -> None:
        """The trace of a case's call judged by the chapter's policy: the kernels it saw go to the case, and the
        first finding fails a case that passed (``prefix`` names the call, where a case makes several)."""
        if trace_msg is None:
            return
        if trace_msg["op"] == "trace":
            t = trace_msg["trace"]
            case.kernels = sorted(set(case.kernels) | set(t.names)) if case.kernels else t.names
            findings = tr.judge(t, self.policy, calls=1)
        else:
            findings = [tr.Finding(Cause.UNTRACED, f"the worker sent no trace ({trace_msg.get('message', '')})")]
        if findings:
            if case.ok:
                case.ok, case.cause, case.message = False, findings[0].cause, prefix + findings[0].message
            self.report.add_trace_findings(findings)

    def _call(self, p: Problem, seed: int, slot: int, read, fn: str | None = None):
        """One correctness call on ``slot`` behind the judge's event: the request, ``read()`` (the judge's copies of
        the outputs) as soon as the worker answers, then the call's trace. Returns (msg, trace_msg, what read()
        returned, None), or a CaseResult in the last place when the worker reported tampering or an error."""
        torch = __import__("torch")
        if self.events:
            self.events[0].record()
        spec = {"shape": list(p.shape), "causal": p.causal, "slots": [slot]}
        if fn:
            spec["fn"] = fn
        spec["nonce"] = f"{random.getrandbits(64):016x}"
        msg = self.worker.request(("call", spec), self.check_timeout)
        # The worker finished the call on its own stream before answering "done" (a fault would have been
        # its error instead): nothing of the judge's waits on an event a dead worker could leave unsignalled.
        try:
            outputs = read()
        except Exception:        # the judge out of memory (retried by its caller): the worker's next message is
            if msg["op"] == "done" and self.ch.anticheat:      # this call's trace, taken now
                self.worker.receive(self.check_timeout)
            raise
        trace_msg = None
        if msg["op"] == "done" and self.ch.anticheat:
            trace_msg = self.worker.receive(self.check_timeout)
        tampered = msg.get("tampering") or (trace_msg or {}).get("tampering")
        if tampered or msg["op"] != "done":
            if self.device == "cuda":
                torch.cuda.current_stream().synchronize()
            failed = CaseResult(p.name, seed, False, Cause.TAMPERING, tampering_message(tampered)) if tampered \
                else self._call_failed(p, seed, msg, slot=slot)
            return msg, trace_msg, outputs, failed
        return msg, trace_msg, outputs, None

    def check(self, p: Problem, seed: int) -> CaseResult:
        from ..check import check_output
        from ..problems import reference, sdpa
        from .protocol import fill_unwritten, inputs_view, slot_elems, slots_that_fit, views
        torch = __import__("torch")
        failed = self._restarted(p, seed)
        if failed:
            return failed
        with self._gpu_shared():
            # A slot of the arena chosen at random, as the timed calls' are: a call cannot tell a check from a
            # timed call by where its inputs lie.
            fit = slots_that_fit(self.arena.numel(), p.shape)
            slot = random.randrange(fit - 1 if fit > 1 else 1)      # a slot with another after it, when there is one
            q, k, v, o = views(self.arena, p.shape, slot)
            # The memory right after the output (the next slot's q, or what the arena has left after its last slot)
            # gets the never-written pattern too: a write past the end of the output changes it, where on a GPU
            # nothing would fault (on a CPU the guard page after the arena faults only further on).
            end = (slot + 1) * slot_elems(p.shape)
            after = self.arena[end: min(end + o.numel(), self.arena.numel())] if end < self.arena.numel() else None
            if after is not None:
                fill_unwritten(after)
            flat = inputs_view(self.arena, p.shape, slot)
            gen = torch.Generator(device=self.arena.device).manual_seed(seed)
            flat.normal_(generator=gen)
            if p.qk_std != 1.0:
                flat[: 2 * q.numel()].mul_(p.qk_std)
            fill_unwritten(o)
            private = tuple(t.clone() for t in (q, k, v))
            msg, trace_msg, out, failed = self._call(p, seed, slot, o.clone)
            if failed:
                return failed
            ref = reference(*private, causal=p.causal)
            sdpa_out = sdpa(*private, causal=p.causal)
            changed = [n for n, a, b in zip("qkv", private, (q, k, v)) if not torch.equal(a, b)]
            if changed:
                return CaseResult(p.name, seed, False, Cause.INPUTS_MODIFIED,
                                  f"the kernel modified its input(s) {', '.join(changed)}: inputs must stay read-only")
            overrun = past_the_output(after)
            if overrun:
                return CaseResult(p.name, seed, False, Cause.MEMORY_ERROR, overrun)
            if msg["returned"].get("problem"):
                return CaseResult(p.name, seed, False, Cause.SHAPE, msg["returned"]["problem"])
            res = check_output(p, *private, out, ref=ref, sdpa_out=sdpa_out, seed=seed)
        case = CaseResult(p.name, seed, res.ok, Cause.of(res.cause) if not res.ok else None, res.message,
                          res.err, res.bound, res.sdpa_err, res.max_err)
        self._judge_trace(case, trace_msg)
        return case

    def _call_failed(self, p: Problem, seed: int, msg: dict, slot: int | None = None) -> CaseResult:
        cause = msg.get("cause", Cause.ERROR)
        text = msg.get("message", "")
        if cause == Cause.CRASH and self.emulate and msg.get("fault") is not None:
            # The emulation's fault line (the worker's log: a hint, parsed strictly) and the arena's address in the
            # worker: where the access went, among this call's q, k, v and out.
            from .spawn import crash_message, fault_place
            place = fault_place(msg["fault"], getattr(self.worker, "info", {}).get("arena"), self.arena.numel(),
                                p.shape, slot)
            text = crash_message(msg.get("exit"), msg.get("log", ""), emulated=True, fault=msg["fault"], place=place)
        if msg.get("where"):
            text += f" (raised at {msg['where']})"
        if msg.get("fatal") and cause not in (Cause.TIMEOUT, Cause.CRASH, Cause.MALFORMED):
            text = f"{cause}: {text}. The CUDA context is lost after this; the remaining cases run in a fresh " \
                   "process. Find the bad access with `flashtutor grade --sanitize` or compute-sanitizer."
        elif cause not in (Cause.TIMEOUT, Cause.CRASH):
            text = f"{cause}: {text}"
        return CaseResult(p.name, seed, False, cause, text, log=msg.get("log", ""))


def past_the_output(after) -> str:
    """'' or what a kernel wrote past the end of its output: ``after`` is the memory right after the output buffer,
    filled with the never-written pattern before the call (None: the output is the last thing in the arena)."""
    if after is None:
        return ""
    from .protocol import unwritten_mask
    written = ~unwritten_mask(after).flatten()
    n = int(written.sum())
    if not n:
        return ""
    first = int(written.nonzero()[0])
    where = "from its very end" if first == 0 else f"from {first} element{'s' if first != 1 else ''} after its end"
    return (f"the kernel wrote past the end of its output: {n} element{'s' if n > 1 else ''} of the memory right after "
            f"it changed, {where} (an index out of bounds: the last, partial tile's rows or columns, or a stride). On a "
            "GPU such a write faults only when it leaves the grader's memory; `flashtutor grade --sanitize` names the "
            "kernel and the index")


def native_host_code(ch: Chapter, sub: Submission) -> str:
    """A note when the submission puts native host code of its own into the worker ('' when it does not): a C++
    extension built from its files, or chapter 5's CUTLASS host code. Native code in the worker can reach past
    what the worker's guards see (the book's grading page says so); the verdict still stands on the judge's own
    evidence, and the note says where the trace's guarantee ends."""
    import re
    text = "\n".join(p.read_text(errors="replace") for p in sub.python if p.exists())
    why = ""
    if ch.kind == "cutlass":
        why = "chapter 5's GEMMs are C++ host code built from your configuration"
    elif re.search(r"cpp_extension|load_inline|\bctypes\b|\bcffi\b", text):
        why = "your files build or load a native library (cpp_extension, ctypes or cffi)"
    if not why:
        return ""
    return (f"native host code in the worker: {why}. It runs in the worker beside the tracer, where native code can "
            "reach past the worker's guards; the verdict's outputs and times are the grader's own measurements, the "
            "list of kernels that ran is the part that rests on the worker")


def _gpu_cannot_run(ch: Chapter) -> str:
    """Why this GPU cannot run the chapter's kernels ('' when it can): chapters 5 and 7 need Hopper."""
    from ..env import needs_arch
    arch = needs_arch(ch)
    if not arch:
        return ""
    import torch
    cc = torch.cuda.get_device_capability()
    if cc == (9, 0):
        return ""
    return (f"chapter {ch.key}'s kernels need {arch} (H100/H200); this GPU, {torch.cuda.get_device_name()}, is "
            f"sm_{cc[0]}{cc[1]}: they were compiled and their SASS checked, nothing was run")


# ---------------------------------------------------------------- entry ---------------------------------
def worker_setup(ch: Chapter, sub: Submission, device: str, *, emulate: bool = False) -> dict:
    """What a worker is told before anything else (no torch needed to say it). ``emulate``: run the CUDA
    kernels emulated on the CPU (:func:`flashtutor.emulate.activate` before the submission is imported)."""
    return {"path": str(sub.entry), "files": [str(f) for f in sub.files], "device": device, "kind": ch.kind,
            "trace": ch.anticheat, "emulate": bool(emulate), "mode": ch.mode}


def _tmpdir() -> str:
    """A folder for the workers' logs, removed when the process exits."""
    import atexit
    import shutil
    d = tempfile.mkdtemp(prefix="flashtutor-")
    atexit.register(shutil.rmtree, d, True)
    _TMPDIRS.append(d)
    return d


_TMPDIRS: list[str] = []        # removed by _main too, which ends without the atexit handlers


def _gpu_present() -> bool:
    """Whether the driver sees a GPU, asked through NVML (no torch, no CUDA context in this process)."""
    import ctypes
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return False
        n = ctypes.c_uint(0)
        ok = nvml.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0 and n.value > 0
        nvml.nvmlShutdown()
        return ok
    except (OSError, AttributeError):
        return False



def run_judge(kwargs: dict) -> Report:
    """Grade in this process (the caller has not run the learner's code: the CLI, pytest, a judge process).

    The worker is launched first, before this process imports torch, so that the two start up side by
    side (importing torch and starting the tracer take seconds each on a slow host)."""
    ch = get_chapter(kwargs.pop("chapter"))
    sanitize = kwargs.pop("sanitize", False)
    device = kwargs.pop("device", None)
    sub = Submission.at(kwargs["path"])
    guess = device or ("cuda" if _gpu_present() else "cpu")
    worker = None
    emulate = emulation(ch, guess, sub)[0]
    if not sub.syntax_errors and (ch.kind not in EMULATED_KINDS or guess == "cuda" or emulate):
        worker = WorkerHandle(worker_setup(ch, sub, guess, emulate=emulate), _tmpdir(), kwargs["setup_timeout"])
        worker.launch()
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if worker is not None and device != guess:      # NVML saw a GPU this torch cannot use: start again
        worker.stop()
        worker = None
    j = (BackwardJudge if ch.mode == "backward" else Judge)(ch, device=device, worker=worker, **kwargs)
    report = j.run()
    if sanitize:
        from .rules import fold_sanitizer
        from .sanitize import sanitize as run_sanitizer
        lock = getattr(j, "lock", None)
        if lock is not None:              # compute-sanitizer's runs are GPU work too: never beside a timing
            with lock.shared():
                found = run_sanitizer(ch, j.path)
        else:
            found = run_sanitizer(ch, j.path)
        fold_sanitizer(report, found)
    return report


def _judge_process(kwargs: dict) -> Report:
    """Grade in a judge process of its own (``flashtutor.grading.judge._main`` on a socket): for callers in which
    the learner's code may have run (a notebook), and for gradings run side by side. The judge is trusted,
    so its report comes back pickled."""
    import socket
    import subprocess
    import sys
    from multiprocessing.connection import Connection
    mine, theirs = socket.socketpair()
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from flashtutor.grading.judge import _main; "
                             "_main(int(sys.argv[1]))", str(theirs.fileno())],
                            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, env=env)
    theirs.close()
    conn = Connection(mine.detach())
    try:
        conn.send(kwargs)
        status, value = conn.recv()
    except (EOFError, OSError):
        proc.wait(30)
        raise RuntimeError(f"the grader's judge process {_exit(proc.returncode)}") from None
    finally:
        conn.close()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if status != "ok":
        raise RuntimeError(f"the grader failed: {value}")
    return value


def grade(chapter, path=None, *, solution: bool = False, device: str | None = None, sets=None, seeds=None,
          timing: bool = True, graph: bool | None = None, reference: bool = False, progress: bool = True,
          time_sets=None, sanitize: bool = False, setup_timeout: float = SETUP_TIMEOUT,
          check_timeout: float = CHECK_TIMEOUT, time_timeout: float = TIME_TIMEOUT, rounds: int = 5,
          separate_judge: bool | None = None) -> Report:
    """Grade ``path`` (default: the chapter's exercise, or its solution) as chapter ``chapter``.

    The learner's code runs in a worker process; this process (or, from a notebook, a judge process of
    its own) decides. ``separate_judge``: None = only in a notebook, where the learner's code may have
    run in the caller's process.
    """
    ch = get_chapter(chapter)
    if ch.setup_timeout and setup_timeout == SETUP_TIMEOUT:
        setup_timeout = ch.setup_timeout
    if path is None:
        path = ch.solution_path() if solution else ch.exercise_path()
    path = Path(path).resolve()
    if not path.exists():
        raise FileNotFoundError(f"no submission at {path}")
    kwargs = dict(chapter=ch, path=path, device=device, sets=sets, seeds=seeds, timing=timing, graph=graph,
                  reference=reference, time_sets=time_sets, setup_timeout=setup_timeout,
                  check_timeout=check_timeout, time_timeout=time_timeout, rounds=rounds, progress=progress,
                  sanitize=sanitize)
    if separate_judge is None:
        from ..switches import in_notebook
        separate_judge = in_notebook()
    if not separate_judge:
        return run_judge(kwargs)
    kwargs["progress"] = False
    return _judge_process(kwargs)


def _main(fd: int) -> None:
    from multiprocessing.connection import Connection
    if os.environ.get("FLASHTUTOR_DEBUG_DUMP_S"):
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["FLASHTUTOR_DEBUG_DUMP_S"]), repeat=True)
    conn = Connection(fd)
    memory.OWN_PROCESS = True            # nothing but this grading here: the judge may hand memory back
    kwargs = conn.recv()
    try:
        conn.send(("ok", run_judge(kwargs)))
    except BaseException as e:  # noqa: BLE001
        conn.send(("error", f"{type(e).__name__}: {e}"))
    import shutil
    import sys
    for d in _TMPDIRS:
        shutil.rmtree(d, True)
    # The report is sent; end without C++ static destructors. Shared CUDA blocks a learner's worker still held
    # when it ended (a cache of its own that keeps the inputs) make torch's IPC bookkeeping print a warning
    # then, on this process's stderr, which is the notebook's: noise under the grading cell, and no news for
    # the learner (the worker is gone, the memory goes with this process).
    sys.stderr.flush()
    os._exit(0)


# ---------------------------------------------------------------- a backward-pass chapter --------------------------
class BackwardJudge(Judge):
    """The judge of a backward-pass chapter (``Chapter.mode == "backward"``, chapter 8): the same plan, worker,
    trace, rules and timing as every chapter, on slots of the backward layout (:mod:`.protocol`).

    One correctness case is two calls on the same slot: first the learner's ``backward`` on the judge's q, k, v, do
    and the judge's own o and lse (float64 reference, rounded as the forward must store them), its dq, dk, dv judged
    against float64 by :mod:`flashtutor.backward`'s rule (2 × SDPA's own fp16 backward error per row, + 1 fp16 ulp,
    + the allowance for o's fp16 rounding); then its ``forward`` on the same q, k, v, its o and lse judged the same
    way. Backward first: a backward that leans on what the last forward left behind (its lse, kept in a global)
    computes from another case's numbers."""

    def check(self, p: Problem, seed: int) -> CaseResult:
        from .. import backward as bw
        from . import gradients as gr
        from .protocol import fill_unwritten, slot_elems, slots_that_fit, unwritten_mask, views
        torch = __import__("torch")
        failed = self._restarted(p, seed)
        if failed:
            return failed
        with self._gpu_shared():
            size = slot_elems(p.shape, "backward")
            fit = slots_that_fit(self.arena.numel(), p.shape, "backward")
            slot = random.randrange(fit - 1 if fit > 1 else 1)
            tensors = dict(zip(("q", "k", "v", "do", "o", "lse", "dq", "dk", "dv"),
                               views(self.arena, p.shape, slot, "backward")))
            end = (slot + 1) * size
            n = tensors["q"].numel()
            after = self.arena[end: min(end + n, self.arena.numel())] if end < self.arena.numel() else None
            gen = torch.Generator(device=self.arena.device)
            gr.fill_inputs(self.arena[slot * size: end].view(1, size), p.shape, gen, seed, p.qk_std)
            q, k, v, do = (tensors[x].clone() for x in ("q", "k", "v", "do"))
            ref = bw.reference_grads(q, k, v, do, causal=p.causal)
            _, baseline = bw.baseline_grads(q, k, v, do, causal=p.causal)
            results = []
            for fn in ("backward", "forward"):
                if fn == "backward":
                    tensors["o"].copy_(ref["o"])
                    tensors["lse"].copy_(ref["lse"])
                    outs = ("dq", "dk", "dv")
                else:
                    outs = ("o", "lse")
                for name in outs:
                    fill_unwritten(tensors[name])
                if after is not None:
                    fill_unwritten(after)
                given = {x: tensors[x].clone() for x in ("q", "k", "v", "do", "o", "lse") if x not in outs}
                msg, trace_msg, got, failed = self._call(
                    p, seed, slot, lambda: {name: tensors[name].clone() for name in outs}, fn=fn)
                if failed:
                    if failed.cause != Cause.TAMPERING:
                        failed.message = f"{fn}(): {failed.message}"
                    return failed
                changed = [x for x, t in given.items() if not torch.equal(t, tensors[x])]
                if changed:
                    return CaseResult(p.name, seed, False, Cause.INPUTS_MODIFIED,
                                      f"{fn}() modified its input(s) {', '.join(changed)}: inputs must stay read-only")
                overrun = past_the_output(after)
                if overrun:
                    return CaseResult(p.name, seed, False, Cause.MEMORY_ERROR, f"{fn}(): {overrun}")
                if msg["returned"].get("problem"):
                    return CaseResult(p.name, seed, False, Cause.SHAPE, msg["returned"]["problem"])
                for name in outs:
                    never = unwritten_mask(got[name])
                    if bool(never.any()):
                        first = [int(x) for x in never.nonzero()[0]]
                        return CaseResult(p.name, seed, False, Cause.UNWRITTEN,
                                          f"{fn}(): {name} has {int(never.sum())} of {never.numel()} elements never "
                                          f"written (first at {first}; the grader's pattern is still there)")
                empty = gr.nothing_computed(got, ref)
                if empty:
                    return CaseResult(p.name, seed, False, Cause.UNWRITTEN, f"{fn}(): {empty}")
                checks = bw.check_grads(got, ref, baseline, names=tuple(x for x in outs if x != "lse"))
                results.append((fn, checks, trace_msg))
        del ref, baseline, q, k, v, do
        if self.device == "cuda":        # the float64 reference's blocks, back to the device for the other gradings
            torch.cuda.empty_cache()
        failed = [c for _, cs, _ in results for c in cs if not c.ok]
        passed = [c for _, cs, _ in results for c in cs if c.ok]
        w = gr.worst(failed or passed)
        if failed:
            nonfinite = any(c.err == float("inf") for c in failed)
            hint = gr.explain(failed, passed, p.causal)
            msg = "; ".join(c.message for c in failed) + (f" — {hint}" if hint else "")
            case = CaseResult(p.name, seed, False, Cause.NAN if nonfinite else Cause.WRONG, msg,
                              w.err, w.bound, w.sdpa_err, w.max_err)
        else:
            case = CaseResult(p.name, seed, True, None, f"worst margin {w.margin:.3g} ({w.name})",
                              w.err, w.bound, w.sdpa_err, w.max_err)
        for fn, _, trace_msg in results:
            self._judge_trace(case, trace_msg, prefix=f"{fn}(): ")
        return case
