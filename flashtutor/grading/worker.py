"""The grading worker: the one process that runs the learner's code. It judges nothing.

It is spawned by the judge (:mod:`.judge`), receives the shared arena (and, on a GPU, two interprocess
events), imports the submission, and then serves the judge's requests:

* ``call``  — one call on the inputs of a slot (a correctness case);
* ``batch`` — N calls on slots 0…N−1, queued behind the judge's gate event (a timed batch);
* ``capture`` — capture N calls into a CUDA graph, replayed by later batches (graph-basis chapters).

In a backward-pass chapter (set-up ``mode`` "backward") a call is the learner's ``backward(q, k, v, o, lse, do,
causal=)`` on a slot of the backward layout (:mod:`.protocol`), or, when the request says ``"fn": "forward"``, its
``forward(q, k, v, causal=)``; their outputs land in the slot's dq, dk, dv (or o and lse).

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
from pathlib import Path

from . import sealed
from .evidence import CUDA_FATAL, Cause, Trace, dumps, parse_trace


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



# ---------------------------------------------------------------- the tracer (for the course's tests) --
class Tracer:
    """The worker's tracer (:func:`.sealed.tracer`) with :class:`~.evidence.Trace` results: for tests and
    tools that trace in their own process. The worker itself uses the sealed closures directly."""

    def __init__(self, cuda: bool, emulated: bool = False, registers: bool = True):
        import torch
        self._start, self._stop, self._abandon = sealed.tracer(torch, cuda=cuda, emulated=emulated,
                                                               registers=registers)

    def start(self, nonce: str = "warm-up") -> None:
        self._start(nonce)

    def stop(self) -> Trace:
        return parse_trace(self._stop())

    def abandon(self) -> None:
        self._abandon()


# ---------------------------------------------------------------- the submission --------------------
def _import(setup: dict, files: list[str]):
    """Import the submission (the learner's code runs from here on) and, for a CUTLASS chapter, build its GEMMs.
    Returns its ``attention``; raises :class:`_SetupFailure` with the cause."""
    from ..loaders import CompileError
    from .submission import load_module
    path = Path(setup["path"]).resolve()
    cuda = setup["device"] == "cuda"
    emulate = bool(setup.get("emulate")) and not cuda
    sys.meta_path.insert(0, _CourseKernelGuard())
    try:
        mod = load_module(path)
    except CompileError as e:
        raise _SetupFailure(Cause.COMPILE_ERROR, str(e)) from None
    except SyntaxError as e:
        raise _SetupFailure(Cause.IMPORT_ERROR, f"{Path(e.filename or path).name}:{e.lineno}: syntax error: "
                            f"{e.msg}") from None
    except BaseException as e:  # noqa: BLE001
        where = _where(e, files)
        raise _SetupFailure(Cause.IMPORT_ERROR, f"importing {path.name} raised {type(e).__name__}: {e}"
                            + (f" (at {where})" if where else "")) from None
    if setup.get("mode") == "backward":
        fns = {name: getattr(mod, name, None) for name in ("forward", "backward")}
        missing = [sig for name, sig in (("forward", "forward(q, k, v, *, causal=False) -> (o, lse)"),
                                         ("backward", "backward(q, k, v, o, lse, do, *, causal=False) -> (dq, dk, dv)"))
                   if not callable(fns[name])]
        if missing:
            raise _SetupFailure(Cause.ERROR, f"{path.name} defines no function {' and no function '.join(missing)}")
        return fns
    fn = getattr(mod, "attention", None)
    if not callable(fn):
        raise _SetupFailure(Cause.ERROR, f"{path.name} defines no function attention(q, k, v, *, causal=False)")
    build = getattr(mod, "build", None) if setup.get("kind") == "cutlass" else None
    # The library GEMMs compile now, under the setup timeout (emulated, they are CPU references: at once).
    if callable(build) and (cuda or emulate):
        try:
            build(verbose=False)
        except NotImplementedError as e:
            where = _where(e, files)
            raise _SetupFailure(Cause.UNWRITTEN, f"not written yet: build() raises NotImplementedError({e})"
                                + (f" at {where}" if where else "")) from None
        except Exception as e:  # noqa: BLE001
            if type(e).__name__ == "UnsupportedGPU":
                raise _SetupFailure(Cause.UNSUPPORTED_GPU, str(e)) from None
            where = _where(e, files)
            raise _SetupFailure(Cause.COMPILE_ERROR, f"building the CUTLASS GEMMs of {path.name} failed: "
                                f"{type(e).__name__}: {e}" + (f" (at {where})" if where else "")) from None
    return fn


# ---------------------------------------------------------------- serving, sealed -------------------
def _server(torch, setup: dict, files: list[str], *, send, recv, tstart, tstop, tabandon, cuda_gates, seen):
    """The worker's request loop, built before the submission is imported: every name it uses afterwards is a
    local captured here, so re-binding a module or class attribute (this module's included) changes nothing
    in it. Returns ``serve(fn, arena_msg)``, which answers the judge until it says "quit"."""
    from .. import api
    from .protocol import LSE_ALIGN as lse_align, numel
    f32 = torch.float32
    cuda = setup["device"] == "cuda"
    traced_chapter = bool(setup.get("trace", True))
    TB = torch._C.TensorBase
    tb_getitem, tb_view, tb_ptr, tb_copy = TB.__getitem__, TB.view, TB.data_ptr, TB.copy_
    tb_contig, tb_numel, tb_clone = TB.is_contiguous, TB.numel, TB.clone
    Tensor = torch.Tensor
    outputs = api._grader_outputs                # the dict output_like() reads: one entry per call, set here
    outputs_clear, outputs_pop = dict.clear, dict.pop
    perf_ns = time.perf_counter_ns
    len_, int_, str_, tuple_, list_, range_, dict_, type_ = len, int, str, tuple, list, range, dict, type
    isinstance_, bool_, slice_ = isinstance, bool, slice
    BaseException_ = BaseException
    fatal_needles = tuple((n, str(c)) for n, c in CUDA_FATAL)
    C = {c.name: str(c) for c in Cause}
    from .diagnose import error_location as where_of, error_summary
    exit_ = os._exit
    dict_values = dict.values
    if cuda:
        set_stream, gate, end, sync, open_event = cuda_gates
        Graph = torch._C._CUDAGraph
        graph_replay = Graph.replay
        device = torch.cuda.current_device()
    st = {"arena": None, "A": None, "B": None, "fn": None, "graphs": {}, "shm": None, "base": None}
    guard = None if cuda else _guard()

    backward_mode = setup.get("mode") == "backward"

    def views(shape, slot: int):
        """protocol.views, through TensorBase's C methods captured above (the judge's copy looks torch.Tensor's
        methods and protocol's globals up at call time, which the learner's code could re-bind here)."""
        arena = st["arena"]
        if not backward_mode:
            n = 1
            for x in shape:
                n *= x
            base = slot * 4 * n
            if base + 4 * n > tb_numel(arena):
                raise IndexError(f"slot {slot} of shape {tuple_(shape)} does not fit the arena")
            return tuple_(tb_view(tb_getitem(arena, slice_(base + j * n, base + (j + 1) * n)), shape)
                          for j in range_(4))
        # protocol.parts(shape, "backward"), computed here with nothing looked up at call time:
        # q k v do o (n each) | lse (2·rows fp16 units, padded to lse_align) | dq dk dv (n each)
        rows = 1
        for x in shape[:-1]:
            rows *= x
        n = rows * shape[-1]
        lse_units = -(-2 * rows // lse_align) * lse_align
        size = 8 * n + lse_units
        base = slot * size
        if base + size > tb_numel(arena):
            raise IndexError(f"slot {slot} of shape {tuple_(shape)} does not fit the arena")
        out = [tb_view(tb_getitem(arena, slice_(base + j * n, base + (j + 1) * n)), shape) for j in range_(5)]
        at = base + 5 * n
        out.append(tb_view(tb_view(tb_getitem(arena, slice_(at, at + 2 * rows)), f32), shape[:-1]))
        at += lse_units
        out += [tb_view(tb_getitem(arena, slice_(at + j * n, at + (j + 1) * n)), shape) for j in range_(3)]
        return tuple_(out)

    def deliver(out, o):
        """Put the learner's output into the slot (nothing to do when output_like handed it the slot)."""
        if not isinstance_(out, Tensor):
            return {"problem": f"attention() returned {type_(out).__name__}, expected a torch.Tensor shaped like q "
                               f"{tuple_(o.shape)}"}, False
        desc = {"shape": str_(tuple_(out.shape)), "dtype": str_(out.dtype), "device": str_(out.device)}
        if tuple_(out.shape) != tuple_(o.shape):
            desc["problem"] = f"output has shape {tuple_(out.shape)}, expected {tuple_(o.shape)} ([B, H, S, D] like q)"
        elif out.dtype != o.dtype:
            desc["problem"] = f"output dtype is {out.dtype}, expected {o.dtype} (the same as q)"
        elif out.device != o.device:
            desc["problem"] = f"output is on {out.device}, expected {o.device} (the same device as q)"
        if "problem" in desc:
            return desc, False
        if tb_ptr(out) == tb_ptr(o) and tb_contig(out):
            return desc, False
        tb_copy(o, out)
        return desc, True

    def deliver_many(got, targets, what: str):
        """Put a backward's (dq, dk, dv) or a forward's (o, lse) into the slot's buffers ``targets`` (name, buffer):
        nothing to copy for a tensor that already is its buffer; a tensor that is another of the buffers is read
        before any is written (so that returning them in another order is a copy, not a corruption)."""
        names = [nm for nm, _ in targets]
        if not isinstance_(got, (tuple_, list_)) or len_(got) != len_(targets):
            kind = type_(got).__name__
            return {"problem": f"{what} returned {kind}" + (f" of {len_(got)}" if isinstance_(got, (tuple_, list_))
                                                            else "")
                    + f", expected a tuple ({', '.join(names)})"}, False
        desc = {}
        for (nm, buf), t in zip(targets, got):
            if not isinstance_(t, Tensor):
                return {"problem": f"{what} returned {type_(t).__name__} as {nm}, expected a torch.Tensor"}, False
            if tuple_(t.shape) != tuple_(buf.shape):
                return {"problem": f"{what}'s {nm} has shape {tuple_(t.shape)}, expected {tuple_(buf.shape)}"}, False
            if t.dtype != buf.dtype:
                return {"problem": f"{what}'s {nm} is {t.dtype}, expected {buf.dtype}"}, False
            if t.device != buf.device:
                return {"problem": f"{what}'s {nm} is on {t.device}, expected {buf.device} (where q is)"}, False
            desc[nm] = str_(tuple_(t.shape))
        own = [tb_ptr(t) == tb_ptr(buf) and tb_contig(t) for (_, buf), t in zip(targets, got)]
        ptrs = {tb_ptr(buf) for _, buf in targets}
        sources = [t if ok or tb_ptr(t) not in ptrs else tb_clone(t) for ok, t in zip(own, got)]
        copied = False
        for ok, (_, buf), t in zip(own, targets, sources):
            if not ok:
                tb_copy(buf, t)
                copied = True
        return desc, copied

    def fail(e) -> None:
        text = f"{type_(e).__name__}: {e}".strip()
        first = error_summary(e)
        cause, fatal = C["ERROR"], False
        for needle, c in fatal_needles:
            if needle in text:
                cause, fatal = c, True
                break
        else:
            if "out of memory" in text.lower():
                cause = C["OUT_OF_MEMORY"]
            elif type_(e).__name__ in ("CompileError", "CompilationError"):   # ours (NVRTC, nvcc), Triton's
                cause = C["COMPILE_ERROR"]
            elif not cuda and type_(e).__name__ == "EmulationUnsupported":   # what g++ cannot build for the CPU
                cause, first = C["NOT_RUN"], str_(e)
            elif isinstance_(e, NotImplementedError):          # the exercise's TODO, as generated
                cause, first = C["UNWRITTEN"], f"not written yet: {first}"
        send({"op": "error", "cause": cause, "message": first[:600], "where": where_of(e, files), "fatal": fatal})
        if fatal:                  # the CUDA context is lost: nothing more can run in this process
            exit_(3)

    def calls(spec: dict, op: str) -> None:
        """One correctness call ("call") or a timed batch ("batch"): the slots the judge named, in its order,
        behind its gate (A); the end of a batch is the judge's event B."""
        shape = tuple_(int_(x) for x in spec["shape"])
        causal = bool_(spec["causal"])
        slots = [int_(s) for s in spec["slots"]]
        fn = st["fn"]
        vs = [views(shape, s) for s in slots]
        g = st["graphs"].get((shape, causal, len_(slots))) if spec.get("graph") else None
        if spec.get("graph") and g is None:
            send({"op": "error", "cause": C["NOT_CAPTURABLE"], "message": "no captured graph for this batch"})
            return
        if g is not None and tuple_(g[1]) != tuple_(slots):
            send({"op": "error", "cause": C["NOT_CAPTURABLE"], "message": "the captured graph has other slots"})
            return
        if cuda:
            set_stream()
            gate(st["A"])                 # the judge's gate: nothing of this batch runs before it opens
        copied = False
        returned = None
        traced = traced_chapter and spec.get("trace", True)
        if traced:
            tstart(str_(spec.get("nonce", "")))
        t0 = perf_ns()
        try:
            if g is not None:
                graph_replay(g[0])
            elif backward_mode and spec.get("fn") == "forward":
                fwd = st["forward"]
                for q, k, v, do, o, lse, dq, dk, dv in vs:
                    outputs[tb_ptr(q)] = o
                    got = fwd(q, k, v, causal=causal)
                    outputs_pop(outputs, tb_ptr(q), None)
                    returned, c = deliver_many(got, (("o", o), ("lse", lse)), "forward()")
                    copied = copied or c
                    if "problem" in returned:
                        break
            elif backward_mode:
                for q, k, v, do, o, lse, dq, dk, dv in vs:
                    outputs[tb_ptr(q)] = [dq, dk, dv]
                    got = fn(q, k, v, o, lse, do, causal=causal)
                    outputs_pop(outputs, tb_ptr(q), None)
                    returned, c = deliver_many(got, (("dq", dq), ("dk", dk), ("dv", dv)), "backward()")
                    copied = copied or c
                    if "problem" in returned:
                        break
            else:
                for q, k, v, o in vs:
                    outputs[tb_ptr(q)] = o
                    out = fn(q, k, v, causal=causal)
                    outputs_pop(outputs, tb_ptr(q), None)
                    returned, c = deliver(out, o)
                    copied = copied or c
                    if "problem" in returned:
                        break
            host = perf_ns() - t0
            if cuda:
                end(st["B"] if op == "batch" else None, list_(dict_values(seen)))
                if op == "call":          # a correctness call: finish here, so a fault surfaces in this process
                    sync()
        except BaseException_ as e:  # noqa: BLE001 — anything the learner's code raises is a verdict
            tabandon()
            outputs_clear(outputs)
            fail(e)
            return
        outputs_clear(outputs)
        send({"op": "done", "host_ns": host, "returned": returned, "copied": copied, "calls": len_(slots)})
        if traced:
            send(tstop())

    def capture(spec: dict) -> None:
        """CUDA graphs of the calls on the slot lists asked (one graph per list): later batches replay them."""
        shape = tuple_(int_(x) for x in spec["shape"])
        causal = bool_(spec["causal"])
        fn = st["fn"]
        try:
            for slots in spec["slot_lists"]:
                slots = [int_(s) for s in slots]
                vs = [views(shape, s) for s in slots]
                gr = torch.cuda.CUDAGraph()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    gr.capture_begin(capture_error_mode="thread_local")
                    try:
                        for q, k, v, o in vs:
                            outputs[tb_ptr(q)] = o
                            out = fn(q, k, v, causal=causal)
                            outputs_pop(outputs, tb_ptr(q), None)
                            desc, _ = deliver(out, o)
                            if "problem" in desc:
                                raise RuntimeError(desc["problem"])
                    finally:
                        gr.capture_end()
                torch.cuda.current_stream().wait_stream(side)
                st["graphs"][(shape, causal, len_(slots))] = (gr, tuple_(slots))
                outputs_clear(outputs)
            torch.cuda.synchronize()
        except BaseException_ as e:  # noqa: BLE001
            outputs_clear(outputs)
            text = f"{type_(e).__name__}: {e}".strip().splitlines()[0][:400]
            send({"op": "captured", "ok": False, "message": text})
            if any(needle in text for needle, _ in fatal_needles):
                exit_(3)
            return
        send({"op": "captured", "ok": True})

    def take_arena(msg) -> None:
        if msg[0] == "arena_shm":
            from multiprocessing import resource_tracker, shared_memory
            shm = shared_memory.SharedMemory(name=msg[1])
            try:                        # the judge owns it: this process must not unlink it when it exits
                resource_tracker.unregister(shm._name, "shared_memory")
            except Exception:  # noqa: BLE001
                pass
            st["shm"] = shm
            offset = int_(msg[3]) if len_(msg) > 3 else 0       # the arena ends at a page: a guard follows
            st["arena"] = torch.frombuffer(shm.buf, dtype=torch.float16, count=msg[2], offset=offset)
            st["base"] = tb_ptr(st["arena"])
            if guard is not None and len_(msg) > 4:
                guard(st["base"] + 2 * int_(msg[2]), int_(msg[4]))
        else:
            st["arena"] = msg[1]
        if cuda:
            st["A"] = open_event(device, msg[2])
            st["B"] = open_event(device, msg[3])

    def release() -> None:
        """Drop every reference to the judge's arena and events before this process ends. The judge shares them
        through CUDA IPC, and the sharing process counts what its consumers still hold: a block not handed back
        by the time the judge exits is reported on the judge's stderr ("Producer process has been terminated
        before all shared CUDA tensors released"), which a notebook shows under the grading cell."""
        import gc
        st["graphs"].clear()
        st["arena"] = st["A"] = st["B"] = None
        tma = sys.modules.get("flashtutor.loaders.tma")
        if tma is not None:                  # the course's tensor maps keep the tensors they map alive
            try:
                tma.clear_cache()
            except Exception:  # noqa: BLE001
                pass
        gc.collect()
        if cuda:
            sync()

    def serve(fn, ready: dict) -> None:
        if backward_mode:
            st["forward"], fn = fn["forward"], fn["backward"]
        st["fn"] = fn
        take_arena(recv())
        if st["base"] is not None:          # the judge maps an emulated kernel's fault address into the arena
            ready["info"]["arena"] = str_(st["base"])
        send(ready)
        while True:
            msg = recv()
            op = msg[0]
            if op == "quit":
                release()
                return
            spec = msg[1]
            if op in ("call", "batch"):
                calls(spec, op)
            elif op == "capture":
                capture(spec)
            elif op == "arena":                      # a larger arena for larger shapes
                st["arena"] = spec
                st["graphs"].clear()
                send({"op": "ok"})

    return serve


def _guard():
    """``guard(address, size)``: make ``size`` bytes from ``address`` (the page after a CPU arena, inside the
    worker's mapping of the shared memory) inaccessible, so that an emulated kernel's access just past the arena
    faults (and says where: flashtutor/emulate/fault.h) instead of reading the next mapping. Bound before the
    submission is imported (libc's mprotect through ctypes); None when it cannot be."""
    import ctypes
    import mmap
    try:
        mprotect = ctypes.CDLL(None, use_errno=True).mprotect
    except (OSError, AttributeError):
        return None
    mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    mprotect.restype = ctypes.c_int
    page = mmap.PAGESIZE

    def guard(address: int, size: int) -> None:
        if address % page == 0 and size > 0:
            mprotect(address, size - size % page, 0)          # PROT_NONE
    return guard


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
    """Where in the learner's files ``exc`` comes from, as 'file:line' (a Triton kernel's own line, not its
    launch's: :func:`.diagnose.error_location`)."""
    from .diagnose import error_location
    return error_location(exc, files)


def main(fd: int) -> None:
    """Entry point of the worker process (``python -m flashtutor.grading.worker FD``): its output goes to the
    log the judge quotes; ``FD`` is its end of the socket to the judge.

    The order matters: the libraries are imported and the evidence path is sealed (:mod:`.sealed`) and the
    audit hook installed *before* the submission is imported; from then on this function only calls the
    closures it holds."""
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
    api.set_poisoning(True)                            # under the grader, for checks and timed calls alike
    cuda = setup["device"] == "cuda"
    emulated = bool(setup.get("emulate")) and not cuda
    files = [str(Path(f).resolve()) for f in setup.get("files", [])]
    streams = _Streams()
    if cuda:
        torch.cuda.init()
        streams.install(torch)
    import tempfile
    send, recv, record = sealed.wire(fd)
    tstart, tstop, tabandon = sealed.tracer(torch, cuda=cuda, emulated=emulated,
                                            registers=setup.get("kind") in ("cuda", "cutlass"),
                                            tmpdir=tempfile.mkdtemp(prefix="flashtutor-worker-"))
    if setup.get("trace", True):                       # the profiler's first start costs seconds: pay it now
        tstart()
        tstop()
    _debug("tracer warm")
    serve = _server(torch, setup, files, send=send, recv=recv, tstart=tstart, tstop=tstop, tabandon=tabandon,
                    cuda_gates=sealed.gates(torch) if cuda else None, seen=streams.seen)
    sys.addaudithook(sealed.audit_hook(files + [str(Path(setup["path"]).resolve())], record))
    # ---- the learner's code runs from here on
    try:
        fn = _import(setup, files)
    except _SetupFailure as e:
        send({"op": "setup_error", "cause": str(e.cause), "message": e.message})
        _drain_arena(conn)
        return
    except BaseException as e:  # noqa: BLE001
        send({"op": "setup_error", "cause": "error", "message": f"{type(e).__name__}: {e}"[:600]})
        _drain_arena(conn)
        return
    _debug("imported", setup["path"])
    from ..loaders.nvrtc import LOADED
    info = {"torch": torch.__version__}
    if cuda:
        info["gpu"] = torch.cuda.get_device_name()
    if emulated:
        info["emulated"] = True
    ready = {"op": "ready", "loaded": [{"path": p, "defines": d} for p, d in LOADED], "info": info}
    prof_dir = os.environ.get("FLASHTUTOR_CPROFILE")    # where a grading's time goes (scripts/probe_grading_cost.py)
    if not prof_dir:
        serve(fn, ready)
        _leave()
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
    try:
        serve(fn, ready)
    finally:
        prof.disable()
        prof.dump_stats(os.path.join(prof_dir, f"worker-{os.getpid()}.prof"))
    _leave()


if __name__ == "__main__":
    main(int(sys.argv[1]))
