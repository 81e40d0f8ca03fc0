"""The grading worker: the one process that runs the learner's code. It judges nothing.

It is spawned by the judge (:mod:`.judge`), receives the shared arena (and, on a GPU, two interprocess
events), imports the submission, and then serves the judge's requests:

* ``call``  — one call on the inputs of a slot (a correctness case);
* ``batch`` — N calls on slots 0…N−1, queued behind the judge's gate event (a timed batch);
* ``capture`` — capture N calls into a CUDA graph, replayed by later batches (graph-basis chapters).

Every call runs under the tracer (CUPTI through ``torch.profiler`` on a GPU, aten ops on a CPU), from the
first call to the last, so no call can tell whether it is watched. After the calls the worker makes its
stream wait for every stream the learner created, records the judge's end event, and answers in JSON:
``done``, then the ``trace``. What it reports about itself (host time, the trace) is evidence the judge
cross-checks, never a verdict on its own: this process is the learner's.

With ``emulate`` in its set-up (a CUDA chapter on a machine without a GPU), it activates
:mod:`flashtutor.emulate` before it imports the submission: ``load_cuda`` then builds the learner's .cu
files with g++ and loads them here (native code from the learner's source lives only in this process), and
chapter 5's GEMMs are CPU references. What the emulation cannot build is answered with cause ``not_run``.
"""
from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from .evidence import CUDA_FATAL, Cause, Trace, KernelRecord, dumps, trace_to_json


# ---------------------------------------------------------------- what the learner's code sees ----
class _Streams:
    """Every CUDA stream the learner's code switches to (``torch.cuda.stream(s)``, ``torch.cuda.set_stream``):
    the worker joins them before it signals the end of a call, so work left on them is counted, not lost."""

    def __init__(self):
        self.seen: dict[int, object] = {}

    def install(self, torch) -> None:
        seen = self.seen
        ctx = torch.cuda.StreamContext
        orig_init = ctx.__init__

        def init(self_, stream, *a, **kw):
            if stream is not None:
                seen.setdefault(int(stream.cuda_stream), stream)
            orig_init(self_, stream, *a, **kw)
        ctx.__init__ = init
        orig_set = torch.cuda.set_stream

        def set_stream(stream):
            if stream is not None:
                seen.setdefault(int(stream.cuda_stream), stream)
            return orig_set(stream)
        torch.cuda.set_stream = set_stream

    def join(self, torch) -> None:
        cur = torch.cuda.current_stream()
        for s in list(self.seen.values()):
            if s.cuda_stream != cur.cuda_stream:
                cur.wait_stream(s)


class _CourseKernelGuard:
    """An early, friendly refusal to import the course's own kernels (``flashtutor.kernels``) from a
    submission. Not the defence: the judge requires the kernels that run to be compiled from the learner's
    own files (a solution loaded by its path is caught there); this only says so sooner."""

    def find_spec(self, name, path=None, target=None):
        if name == "flashtutor.kernels" or name.startswith("flashtutor.kernels."):
            raise ImportError(f"a submission may not import the course's kernels ({name}): write your own")
        return None



# ---------------------------------------------------------------- the tracer ----------------------
class Tracer:
    """CUPTI (kernels, copies, fills: name, stream, duration, registers) on a GPU, and the aten ops of the
    calls on either device. Each session starts and ends with a marker carrying a nonce the judge chose for
    the task: a trace without both markers did not cover the whole call (the learner's code stopped or
    replaced the session), and the judge treats the call as untraced."""

    def __init__(self, cuda: bool, emulated: bool = False, registers: bool = True):
        import warnings
        warnings.filterwarnings("ignore", message=r".*Profiler clears events")   # torch's note on cycles: not ours
        self.cuda, self.emulated = cuda, emulated
        self.registers = registers        # the judge compares the registers of CUDA kernels (chapters of .cu files)
        self.prof = None
        self.nonce = ""

    def start(self, nonce: str = "warm-up") -> None:
        from torch.autograd.profiler import record_function
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.nonce = nonce
        self.prof = profile(activities=acts)
        self.prof.__enter__()
        with record_function(f"flashtutor:{nonce}:begin"):
            pass

    def stop(self) -> Trace:
        from torch.autograd.profiler import record_function
        prof, self.prof = self.prof, None
        if prof is None:
            return Trace(ok=False, error="the tracer was not running")
        try:
            with record_function(f"flashtutor:{self.nonce}:end"):
                pass
            prof.__exit__(None, None, None)
            events = prof.profiler.kineto_results.events()
        except Exception as e:  # noqa: BLE001 — the learner's code may have stopped the profiler
            return Trace(ok=False, error=f"the trace could not be read: {type(e).__name__}: {e}"[:400])
        names = {e.name() for e in events}
        missing = [m for m in ("begin", "end") if f"flashtutor:{self.nonce}:{m}" not in names]
        if missing:
            return Trace(ok=False, error=f"the trace lacks its {' and '.join(missing)} marker: the profiling session "
                                         "was stopped or replaced during the call")
        ops = sorted({e.name() for e in events if str(e.device_type()).endswith("CPU")
                      and e.name().startswith("aten::")})
        if not self.cuda:
            return Trace(kernels=_emulated_launches(events) if self.emulated else [], ops=ops)
        agg: dict[tuple[str, int], KernelRecord] = {}
        device = [e for e in events if str(e.device_type()).endswith("CUDA")]
        meta = {id(e): _resources(e) for e in device}
        # torch 2.11 keeps CUPTI's metadata (registers, bytes) out of the events; the exported trace has it.
        # Exported only when needed (it costs milliseconds): registers for CUDA chapters, bytes of DtoH copies.
        if any((self.registers and meta[id(e)][0] is None and not _is_copy(e.name()))
               or (e.name().startswith("Memcpy DtoH") and meta[id(e)][2] is None) for e in device):
            _from_chrome_trace(prof, device, meta)
        for e in device:
            key = (e.name(), int(e.device_resource_id()))
            r = agg.get(key)
            regs, smem, nbytes = meta[id(e)]
            if r is None:
                r = agg[key] = KernelRecord(key[0], key[1], 0, 0.0, regs, smem, 0 if nbytes is not None else None)
            r.count += 1
            r.total_us += e.duration_ns() / 1e3
            if nbytes is not None:
                r.bytes = (r.bytes or 0) + nbytes
        return Trace(kernels=list(agg.values()), ops=ops)

    def abandon(self) -> None:
        if self.prof is not None:
            try:
                self.prof.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                pass
            self.prof = None


def _emulated_launches(events) -> list[KernelRecord]:
    """The emulated kernels' launches (:mod:`flashtutor.emulate` marks each with a profiler range), as kernels."""
    from ..emulate import TRACE_PREFIX
    agg: dict[str, KernelRecord] = {}
    for e in events:
        if e.name().startswith(TRACE_PREFIX):
            name = e.name()[len(TRACE_PREFIX):]
            r = agg.setdefault(name, KernelRecord(name, 0, 0, 0.0))
            r.count += 1
            r.total_us += e.duration_ns() / 1e3
    return list(agg.values())


def _is_copy(name: str) -> bool:
    return name.startswith(("Memcpy", "Memset"))


def _from_chrome_trace(prof, device: list, meta: dict) -> None:
    """CUPTI's per-activity metadata (registers, shared memory, bytes) as the exported trace carries it,
    matched to the events by correlation id (by name where an event has none)."""
    import json
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        with open(f.name) as g:
            trace = json.load(g)
    by_corr, by_name = {}, {}
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        a = ev.get("args", {})
        got = tuple(int(a[k]) if isinstance(a.get(k), (int, float)) else None
                    for k in ("registers per thread", "shared memory", "bytes"))
        if a.get("correlation") is not None:
            by_corr[int(a["correlation"])] = got
        by_name.setdefault(ev.get("name", ""), got)
    for e in device:
        try:
            corr = int(e.correlation_id())
        except Exception:  # noqa: BLE001
            corr = None
        got = by_corr.get(corr) if corr is not None else None
        meta[id(e)] = got or by_name.get(e.name()) or meta[id(e)]


def _resources(e) -> tuple[int | None, int | None, int | None]:
    """Registers per thread and shared memory of a kernel record, bytes of a copy (CUPTI's metadata)."""
    import json
    import re
    try:
        meta = e.metadata_json() or ""
    except Exception:  # noqa: BLE001
        return None, None, None
    try:
        d = json.loads("{" + meta + "}") if not meta.strip().startswith("{") else json.loads(meta)
    except ValueError:
        d = {k: int(v) for k, v in re.findall(r'"([^"]+)":\s*(\d+)', meta)}
    def num(key):
        v = d.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return num("registers per thread"), num("shared memory"), num("bytes")


# ---------------------------------------------------------------- the worker ----------------------
class Worker:
    def __init__(self, conn, setup: dict):
        import torch

        self.torch, self.conn, self.setup = torch, conn, setup
        self.cuda = setup["device"] == "cuda"
        self.emulate = bool(setup.get("emulate")) and not self.cuda
        self.path = Path(setup["path"]).resolve()
        self.files = [str(Path(f).resolve()) for f in setup.get("files", [])]
        self.streams = _Streams()
        self.tracer = Tracer(self.cuda, emulated=self.emulate, registers=setup.get("kind") in ("cuda", "cutlass"))
        self.graphs: dict = {}
        # First what needs no arena, while the judge is still getting ready: CUDA, the tracer's costly first
        # start, the submission's import (and its compiles).
        if self.cuda:
            torch.cuda.init()
            self.streams.install(torch)
        if setup.get("trace", True):
            self.tracer.start()
            self.tracer.stop()
        _debug("tracer warm")
        try:
            self.fn = self._import()
        except BaseException:
            _drain_arena(conn)
            raise
        _debug("imported", self.path)
        msg = conn.recv()                   # ("arena", tensor, A handle, B handle) | ("arena_shm", name, numel)
        if msg[0] == "arena_shm":
            from multiprocessing import resource_tracker, shared_memory
            self.shm = shared_memory.SharedMemory(name=msg[1])
            try:                        # the judge owns it: this process must not unlink it when it exits
                resource_tracker.unregister(self.shm._name, "shared_memory")
            except Exception:  # noqa: BLE001
                pass
            self.arena = torch.frombuffer(self.shm.buf, dtype=torch.float16, count=msg[2])
        else:
            self.arena = msg[1]
        self.A = self.B = None
        if self.cuda:
            dev = torch.cuda.current_device()
            self.A = torch.cuda.Event.from_ipc_handle(dev, msg[2])
            self.B = torch.cuda.Event.from_ipc_handle(dev, msg[3])
        _debug("arena", tuple(self.arena.shape), self.arena.device)

    # ------------------------------------------------------------ setup
    def _import(self):
        from ..loaders import CompileError
        from .submission import load_module
        sys.meta_path.insert(0, _CourseKernelGuard())
        try:
            mod = load_module(self.path)
        except CompileError as e:
            raise _SetupFailure(Cause.COMPILE_ERROR, str(e)) from None
        except SyntaxError as e:
            raise _SetupFailure(Cause.IMPORT_ERROR, f"{Path(e.filename or self.path).name}:{e.lineno}: syntax error: "
                                f"{e.msg}") from None
        except BaseException as e:  # noqa: BLE001
            where = _where(e, self.files)
            raise _SetupFailure(Cause.IMPORT_ERROR, f"importing {self.path.name} raised {type(e).__name__}: {e}"
                                + (f" (at {where})" if where else "")) from None
        fn = getattr(mod, "attention", None)
        if not callable(fn):
            raise _SetupFailure(Cause.ERROR, f"{self.path.name} defines no function attention(q, k, v, *, causal=False)")
        build = getattr(mod, "build", None) if self.setup.get("kind") == "cutlass" else None
        # The library GEMMs compile now, under the setup timeout (emulated, they are CPU references: at once).
        if callable(build) and (self.cuda or self.emulate):
            try:
                build(verbose=False)
            except NotImplementedError as e:
                where = _where(e, self.files)
                raise _SetupFailure(Cause.UNWRITTEN, f"not written yet: build() raises NotImplementedError({e})"
                                    + (f" at {where}" if where else "")) from None
            except Exception as e:  # noqa: BLE001
                if type(e).__name__ == "UnsupportedGPU":
                    raise _SetupFailure(Cause.UNSUPPORTED_GPU, str(e)) from None
                where = _where(e, self.files)
                raise _SetupFailure(Cause.COMPILE_ERROR, f"building the CUTLASS GEMMs of {self.path.name} failed: "
                                    f"{type(e).__name__}: {e}" + (f" (at {where})" if where else "")) from None
        return fn

    def ready(self) -> dict:
        from ..loaders.nvrtc import LOADED
        info = {"torch": self.torch.__version__}
        if self.cuda:
            info["gpu"] = self.torch.cuda.get_device_name()
        if self.emulate:
            info["emulated"] = True
        return {"op": "ready", "loaded": [{"path": p, "defines": d} for p, d in LOADED], "info": info}

    # ------------------------------------------------------------ serving
    def send(self, obj: dict) -> None:
        self.conn.send_bytes(dumps(obj))

    def serve(self) -> None:
        self.send(self.ready())
        while True:
            msg = self.conn.recv()
            op = msg[0]
            _debug("got", op)
            if op == "quit":
                self.release()
                return
            spec = msg[1]
            if op == "call":
                self.calls(spec, [spec["slot"]], poison=spec.get("poison", True))
            elif op == "batch":
                self.calls(spec, list(range(spec["n"])), poison=False, graph=spec.get("graph", False))
            elif op == "capture":
                self.capture(spec)
            elif op == "arena":                      # a larger arena for larger shapes
                self.arena = spec
                self.graphs.clear()
                self.send({"op": "ok"})

    def release(self) -> None:
        """Drop every reference to the judge's arena and events before this process ends. The judge shares them
        through CUDA IPC, and the sharing process counts what its consumers still hold: a block not handed back
        by the time the judge exits is reported on the judge's stderr ("Producer process has been terminated
        before all shared CUDA tensors released"), which a notebook shows under the grading cell."""
        import gc
        self.graphs.clear()
        self.arena = self.A = self.B = None
        tma = sys.modules.get("flashtutor.loaders.tma")
        if tma is not None:                  # the course's tensor maps keep the tensors they map alive
            tma.clear_cache()
        gc.collect()
        if self.cuda:
            self.torch.cuda.synchronize()

    def _views(self, spec, slots):
        from .protocol import views
        shape = tuple(spec["shape"])
        return [views(self.arena, shape, s) for s in slots]

    def calls(self, spec: dict, slots: list[int], *, poison: bool, graph: bool = False) -> None:
        from .. import api
        torch = self.torch
        causal = bool(spec["causal"])
        vs = self._views(spec, slots)
        g = self.graphs.get((tuple(spec["shape"]), causal, len(slots))) if graph else None
        if graph and g is None:
            self.send({"op": "error", "cause": str(Cause.NOT_CAPTURABLE), "message": "no captured graph for this batch"})
            return
        if self.cuda:
            torch.cuda.current_stream().wait_event(self.A)   # the judge's gate: nothing runs before it opens
        api.set_poisoning(poison)
        for q, _, _, o in vs:
            api._grader_outputs[q.data_ptr()] = o
        copied = False
        returned = None
        traced = self.setup.get("trace", True) and spec.get("trace", True)
        if traced:
            self.tracer.start(str(spec.get("nonce", "")))
        t0 = time.perf_counter_ns()
        try:
            if g is not None:
                g.replay()
            else:
                for q, k, v, o in vs:
                    out = self.fn(q, k, v, causal=causal)
                    returned, c = self._deliver(out, o)
                    copied |= c
                    if returned.get("problem"):
                        break
            host = time.perf_counter_ns() - t0
            if self.cuda:
                self.streams.join(torch)
                if poison:        # a correctness call: finish here, so a fault surfaces in this process
                    torch.cuda.current_stream().synchronize()
                else:             # a timed batch: the judge's timing stream waits for this event
                    self.B.record(torch.cuda.current_stream())
        except BaseException as e:  # noqa: BLE001 — anything the learner's code raises is a verdict
            self.tracer.abandon()
            api._grader_outputs.clear()
            api.set_poisoning(False)
            self._fail(e)
            return
        api._grader_outputs.clear()
        api.set_poisoning(False)
        self.send({"op": "done", "host_ns": host, "returned": returned, "copied": copied, "calls": len(slots)})
        if traced:
            self.send(trace_to_json(self.tracer.stop()))

    def _deliver(self, out, o) -> tuple[dict, bool]:
        """Put the learner's output into the slot (nothing to do when output_like handed it the slot)."""
        torch = self.torch
        if not isinstance(out, torch.Tensor):
            return {"problem": f"attention() returned {type(out).__name__}, expected a torch.Tensor shaped like q "
                               f"{tuple(o.shape)}"}, False
        desc = {"shape": str(tuple(out.shape)), "dtype": str(out.dtype), "device": str(out.device)}
        if tuple(out.shape) != tuple(o.shape):
            desc["problem"] = f"output has shape {tuple(out.shape)}, expected {tuple(o.shape)} ([B, H, S, D] like q)"
        elif out.dtype != o.dtype:
            desc["problem"] = f"output dtype is {out.dtype}, expected {o.dtype} (the same as q)"
        elif out.device != o.device:
            desc["problem"] = f"output is on {out.device}, expected {o.device} (the same device as q)"
        if desc.get("problem"):
            return desc, False
        if out.data_ptr() == o.data_ptr() and out.is_contiguous():
            return desc, False
        o.copy_(out)
        return desc, True

    def capture(self, spec: dict) -> None:
        """CUDA graphs of N calls (slots 0…N−1) for each N asked: later batches replay them."""
        torch = self.torch
        from .. import api
        causal = bool(spec["causal"])
        try:
            for n in spec["ns"]:
                vs = self._views(spec, list(range(n)))
                for q, _, _, o in vs:
                    api._grader_outputs[q.data_ptr()] = o
                g = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    g.capture_begin(capture_error_mode="thread_local")
                    try:
                        for q, k, v, o in vs:
                            out = self.fn(q, k, v, causal=causal)
                            desc, _ = self._deliver(out, o)
                            if desc.get("problem"):
                                raise RuntimeError(desc["problem"])
                    finally:
                        g.capture_end()
                torch.cuda.current_stream().wait_stream(side)
                self.graphs[(tuple(spec["shape"]), causal, n)] = g
                api._grader_outputs.clear()
            torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            api._grader_outputs.clear()
            text = f"{type(e).__name__}: {e}".strip().splitlines()[0][:400]
            fatal = any(needle in text for needle, _ in CUDA_FATAL)
            self.send({"op": "captured", "ok": False, "message": text})
            if fatal:
                os._exit(3)
            return
        self.send({"op": "captured", "ok": True})

    def _fail(self, e: BaseException) -> None:
        text = f"{type(e).__name__}: {e}".strip()
        first = text.splitlines()[0] if text else type(e).__name__
        cause, fatal = Cause.ERROR, False
        for needle, c in CUDA_FATAL:
            if needle in text:
                cause, fatal = c, True
                break
        else:
            if "out of memory" in text.lower():
                cause = Cause.OUT_OF_MEMORY
            elif type(e).__name__ == "CompileError":
                cause = Cause.COMPILE_ERROR
            elif self.emulate and type(e).__name__ == "EmulationUnsupported":   # what g++ cannot build for the CPU
                cause, first = Cause.NOT_RUN, str(e)                           # with g++'s first errors
            elif isinstance(e, NotImplementedError):          # the exercise's TODO, as generated
                cause, first = Cause.UNWRITTEN, f"not written yet: {first}"
        self.send({"op": "error", "cause": str(cause), "message": first[:600], "where": _where(e, self.files),
                   "fatal": fatal})
        if fatal:                  # the CUDA context is lost: nothing more can run in this process
            self.conn.close()
            os._exit(3)


def _debug(*what) -> None:
    if os.environ.get("FLASHTUTOR_DEBUG", "") not in ("", "0"):
        print(f"[worker {time.strftime('%H:%M:%S')}]", *what, flush=True)


def _drain_arena(conn) -> None:
    """The submission failed to import: take the arena the judge sends next and let it go at once, so that the
    judge's count of shared CUDA blocks goes back to zero (see :meth:`Worker.release`). The judge sends the
    arena, or "quit", before it reads this worker's answer; a judge that is gone sends nothing."""
    import gc
    try:
        if conn.poll(60):
            conn.recv()
    except (EOFError, OSError):
        pass
    gc.collect()


def _leave() -> None:
    """End the worker without the interpreter's slow teardown (the tracer, CUDA modules): everything the
    judge shared is handed back by then, the log is unbuffered, and the judge waits only 2 s before a kill."""
    import ctypes
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        ctypes.CDLL(None).fflush(None)         # C stdio too: printf of an emulated kernel, a library's messages
    except (OSError, AttributeError):
        pass
    os._exit(0)


class _SetupFailure(Exception):
    def __init__(self, cause: Cause, message: str):
        super().__init__(message)
        self.cause, self.message = cause, message


def _prebuild(files: list[str]) -> str | None:
    """Build the submission's .cu files for the emulation at set-up, before torch is imported (under the setup
    timeout rather than a call's; cached by content, so the launcher's own load_cuda finds them built). What
    g++ cannot build is returned as the reason the kernels cannot run here."""
    from .. import emulate
    for f in files:
        if f.endswith(".cu"):
            try:
                emulate.build(f)
            except emulate.EmulationUnsupported as e:
                return str(e)
            _debug("built for the emulation", f)
    return None


def _where(exc: BaseException, files: list[str]) -> str:
    """The innermost traceback frame inside the learner's files, as 'file:line'."""
    best = ""
    for fr in traceback.extract_tb(exc.__traceback__):
        try:
            if str(Path(fr.filename).resolve()) in files:
                best = f"{fr.filename}:{fr.lineno}"
        except OSError:
            pass
    return best


def main(fd: int) -> None:
    """Entry point of the worker process (``python -m flashtutor.grading.worker FD``): its output goes to the
    log the judge quotes; ``FD`` is its end of the socket to the judge."""
    from multiprocessing.connection import Connection
    if os.environ.get("FLASHTUTOR_DEBUG", "") not in ("", "0"):
        import faulthandler
        faulthandler.enable()
        faulthandler.dump_traceback_later(float(os.environ.get("FLASHTUTOR_DEBUG_DUMP_S", "120")), repeat=True)
    conn = Connection(fd)
    setup = conn.recv()
    if setup.get("kind") == "triton" and setup["device"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"           # before triton is imported
    os.environ["FLASHTUTOR_GRADING_WORKER"] = "1"
    if setup.get("emulate") and setup["device"] != "cuda":
        from .. import emulate
        emulate.activate()                             # before the submission's import: load_cuda builds for the CPU
        why = _prebuild(setup.get("files", []))
        if why:
            conn.send_bytes(dumps({"op": "setup_error", "cause": str(Cause.NOT_RUN), "message": why}))
            return
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    from .. import api
    api.set_poisoning(False)
    try:
        w = Worker(conn, setup)
    except _SetupFailure as e:
        conn.send_bytes(dumps({"op": "setup_error", "cause": str(e.cause), "message": e.message}))
        return
    except BaseException as e:  # noqa: BLE001
        conn.send_bytes(dumps({"op": "setup_error", "cause": "error",
                               "message": f"{type(e).__name__}: {e}"[:600]}))
        return
    prof_dir = os.environ.get("FLASHTUTOR_CPROFILE")    # where a grading's time goes (scripts/probe_grading_cost.py)
    if not prof_dir:
        w.serve()
        _leave()
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    try:
        w.serve()
    finally:
        prof.disable()
        prof.dump_stats(os.path.join(prof_dir, f"worker-{os.getpid()}.prof"))
    _leave()


if __name__ == "__main__":
    main(int(sys.argv[1]))
