"""The worker's evidence path, sealed before the learner's code is imported.

The worker process is the learner's: once the submission is imported, its code can reach every module,
class and object of the process that a name leads to — ``sys.modules``, the tracer's class, torch's
profiler classes, ``json``, ``multiprocessing.connection``, even ``builtins`` — and re-bind them. What
the judge receives from the worker must therefore travel on a path that no such re-binding reaches.

:func:`seal` builds that path **before** the import. Every callable it will use afterwards is captured
then, as a local of the closures it returns: the profiler's C functions (``_enable_profiler``,
``_disable_profiler``, the record-function markers) instead of ``torch.profiler.profile``; the C
accessors of a profiler event (``_KinetoEvent.name`` …) as unbound descriptors, so a patch of the
class changes nothing here; ``builtins`` such as ``len`` and ``sorted``; a JSON encoder written with
methods of immutable built-in types (``str.join``, ``int.__repr__``) and ``_json``'s C string escaper;
the write to the judge's socket as ``os.write`` on the descriptor, framed as
``multiprocessing.connection`` frames it; the CUDA event and stream methods of torch's C base classes
for the gate (wait on the judge's event A) and the end (record the judge's event B). After the
import, nothing on this path looks up a module or class attribute.

The closures are reachable only through this module's callers' frames (local variables of the worker's
``main``) and the garbage collector's lists: the audit hook (:func:`audit_hook`), installed before the
import too, refuses both to the learner's code. Python offers no way to remove an audit hook.

What the guard refuses is recorded here (not in any module) and goes out with every message as
``tampering``: the judge turns it into a verdict that names the file and line, whatever the learner's
code did with the exception it got.

What this cannot stop: native code loaded into this process (a C++ extension, ``ctypes`` — refused by the
hook from the learner's files, but a ``cpp_extension`` build of the learner's own is native code too) can
overwrite anything in memory. The book's grading page says so.
"""
from __future__ import annotations


def _stdlib_roots() -> tuple[str, ...]:
    import os
    import sysconfig
    roots = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


def _library_roots() -> tuple[str, ...]:
    """Folders whose code acts on the learner's behalf (torch, triton, cuda-python, numpy … and the course's
    package): site-packages and the folder of ``flashtutor`` itself."""
    import os
    import site
    import sysconfig
    roots = set()
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(p)
    try:
        roots.update(site.getsitepackages())
    except AttributeError:
        pass
    try:
        roots.add(site.getusersitepackages())
    except AttributeError:
        pass
    import flashtutor
    roots.add(os.path.dirname(os.path.abspath(flashtutor.__file__)))
    for mod in ("torch", "triton", "numpy", "cuda"):
        try:
            m = __import__(mod)
            f = getattr(m, "__file__", None) or next(iter(getattr(m, "__path__", [])), None)
            if f:
                roots.add(os.path.dirname(os.path.dirname(os.path.abspath(f))))
        except Exception:  # noqa: BLE001 — not installed here
            pass
    return tuple(sorted(os.path.realpath(r) + os.sep for r in roots if r))


# Standard-library functions that take a frame for their own use and hand none back to their caller
# (namedtuple and Enum's functional API name the caller's module; logging finds the caller's line; traceback
# formats text; warnings looks for the frame to blame). Called from the learner's code, they are allowed.
_BENIGN = {("collections", "namedtuple"), ("typing", "_caller"), ("typing", "__init__"), ("enum", "_create_"),
           ("enum", "__call__"), ("logging", "findCaller"), ("warnings", "_next_external_frame"),
           ("warnings", "warn"), ("traceback", "extract_stack"), ("traceback", "format_stack"),
           ("traceback", "print_stack"), ("traceback", "_extract_from_extended_frame_gen"),
           ("<frozen importlib._bootstrap_external>", "source_to_code"),
           ("<frozen importlib._bootstrap_external>", "get_code")}
# Events that hand out frames or live objects, or switch off what watches the process.
_FRAME_EVENTS = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects",
                 "gc.get_referrers", "gc.get_referents", "sys.monitoring.register_callback",
                 "sys.monitoring.use_tool_id", "sys.addaudithook"}
# (Reading a code object — ``__code__``, ``f_code`` — is audited too, but hands out nothing live: inspect.signature
# reads it for the learner. Replacing one is refused below.)
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame"}
_WHAT = {"sys._getframe": "reads stack frames (sys._getframe)",
         "sys._current_frames": "reads every thread's stack frames (sys._current_frames)",
         "sys.settrace": "installs a trace function (sys.settrace)",
         "sys.setprofile": "installs a profile function (sys.setprofile)",
         "gc.get_objects": "walks the garbage collector's objects (gc.get_objects)",
         "gc.get_referrers": "walks the garbage collector's referrers (gc.get_referrers)",
         "gc.get_referents": "walks the garbage collector's referents (gc.get_referents)",
         "sys.monitoring.register_callback": "installs a monitoring callback (sys.monitoring)",
         "sys.monitoring.use_tool_id": "claims a monitoring tool id (sys.monitoring)",
         "sys.addaudithook": "adds an audit hook",
         "ctypes.dlopen": "loads a native library with ctypes",
         "ctypes.dlsym": "looks up a native symbol with ctypes",
         "code.__new__": "builds a code object (types.CodeType / code.replace)",
         "marshal.loads": "builds code objects from bytes (marshal.loads)"}


def audit_hook(files, record, *, stdlib=None, libraries=None):
    """A PEP 578 audit hook that refuses, to code of the learner's, what reaches the grading machinery:
    frames (``sys._getframe``, ``tb_frame``/``gi_frame``/``cr_frame``, ``sys._current_frames``), the garbage
    collector's object lists, trace and profile functions, ``ctypes``, new code objects, re-assigned
    ``__code__``, source compiled under a library's file name, and files written into the library folders.

    "Code of the learner's": a frame whose file is not in the standard library nor among the libraries
    (site-packages, the course's package) — the submission's files, modules it wrote or built at run time,
    ``exec``'d strings. An event raised by a library function called from the learner's code is allowed
    (torch, Triton and the course's loaders use frames and ``ctypes`` on the learner's behalf), except when the
    only code between the learner's frame and the event is the standard library's (``inspect.currentframe``,
    ``traceback.walk_stack``, ``ctypes.CDLL``), unless that standard-library function is one that keeps the
    frame to itself (:data:`_BENIGN`).

    ``record(what, where)`` is called once per refusal (before the exception is raised). Returns the hook."""
    import os
    import sys
    getframe = sys._getframe
    realpath = os.path.realpath
    startswith = str.startswith
    own = frozenset(realpath(f) for f in files)
    stdlib = stdlib if stdlib is not None else _stdlib_roots()
    libraries = libraries if libraries is not None else _library_roots()
    trusted_write = tuple(r for r in libraries + stdlib)
    benign = frozenset(_BENIGN)
    frame_events, frame_attrs, whats = frozenset(_FRAME_EVENTS), frozenset(_FRAME_ATTRS), dict(_WHAT)
    kinds: dict = {}
    from _thread import get_ident
    busy: dict = {}                    # threads inside the hook (its own look at frames raises events too)
    PermissionError_, RuntimeError_ = PermissionError, RuntimeError
    isinstance_, str_, len_, int_, any_, dict_, type_ = isinstance, str, len, int, any, dict, type
    dict_get = dict.get

    def kind(filename: str) -> str:
        """'lib', 'std' or 'learner' for a code object's file name."""
        k = kinds.get(filename)
        if k is None:
            if startswith(filename, "<frozen "):
                k = "std"
            elif startswith(filename, "<"):
                k = "learner"                       # exec'd strings, <stdin>, <string>
            else:
                p = realpath(filename)
                if p in own:
                    k = "learner"
                elif startswith(p, libraries):
                    k = "lib"
                elif startswith(p, stdlib):
                    k = "std"
                else:
                    k = "learner"
            kinds[filename] = k
        return k

    def module_of(filename: str) -> str:
        base = filename.rsplit("/", 2)
        name = base[-1][:-3] if base[-1].endswith(".py") else base[-1]
        return base[-2] if name == "__init__" and len_(base) > 1 else name

    def frame_kind(f) -> str:
        """A frame's kind: its code's file name, and — where its globals name a file (a module's do) — that file
        too must be a library's or the standard library's: code compiled or crafted to claim a library's file
        name, run in the learner's own module, stays the learner's."""
        k = kind(f.f_code.co_filename)
        if k != "learner":
            g = f.f_globals
            named = dict_get(g, "__file__") if type_(g) is dict_ else None
            if isinstance_(named, str_) and kind(named) == "learner":
                return "learner"
        return k

    def culprit(depth: int):
        """The learner's frame responsible for the event, or None: the innermost frame if it is the
        learner's, or the first frame past a run of standard-library frames (none of them benign)."""
        f = getframe(depth)
        while f is not None:
            code = f.f_code
            k = frame_kind(f)
            if k == "learner":
                return f
            if k == "lib":
                return None
            if (module_of(code.co_filename), code.co_name) in benign:
                return None
            f = f.f_back
        return None

    def refuse(event: str, what: str, depth: int = 3):
        f = culprit(depth)
        if f is None:
            return
        where = f"{f.f_code.co_filename}:{f.f_lineno}"
        record(what, where)
        if event == "sys.addaudithook":     # only a RuntimeError stops a hook from being added (and is swallowed)
            raise RuntimeError_("tampering: adds an audit hook")
        raise PermissionError_(f"tampering: {what} at {where} — the grading worker does not allow a submission "
                               "to reach into the process that grades it")

    def hook(event, args):
        me = get_ident()
        if me in busy:
            return
        busy[me] = True
        try:
            if event in frame_events:
                refuse(event, whats[event])
            elif event == "object.__getattr__":
                if len_(args) > 1 and args[1] in frame_attrs:
                    refuse(event, f"reads {args[1]} (a frame)")
            elif event == "object.__setattr__":
                if len_(args) > 1 and args[1] == "__code__":
                    refuse(event, "replaces a function's __code__")
            elif event in ("ctypes.dlopen", "ctypes.dlsym", "code.__new__", "marshal.loads"):
                refuse(event, whats[event])
            elif event == "compile":
                name = args[1] if len_(args) > 1 else None
                if isinstance_(name, str_) and (startswith(name, "<frozen") or
                                                (not startswith(name, "<") and kind(name) != "learner")):
                    refuse(event, f"compiles source under a library's file name ({name})")
            elif event == "open":
                path, mode = args[0], args[1] if len_(args) > 1 else "r"
                flags = args[2] if len_(args) > 2 else None
                writes = (isinstance_(mode, str_) and any_(c in mode for c in "wax+")) or \
                         (isinstance_(flags, int_) and flags & 0o3)
                if writes and isinstance_(path, str_) and startswith(realpath(path), trusted_write):
                    refuse(event, f"writes into a library folder ({path})")
            elif event in ("os.rename", "os.link", "os.symlink"):
                dst = args[1] if len_(args) > 1 else None
                if isinstance_(dst, str_) and startswith(realpath(dst), trusted_write):
                    refuse(event, f"moves a file into a library folder ({dst})")
        finally:
            del busy[me]

    return hook


def wire(fd: int):
    """The worker's end of the judge's socket, sealed: ``(send, recv, record)``.

    ``send(obj)`` writes one JSON message (dict/list/str/int/float/bool/None) framed as
    ``multiprocessing.connection`` frames it (the judge reads it with ``Connection.recv_bytes``), with the
    tampering record attached to every message; ``recv()`` reads one of the judge's pickled messages;
    ``record(what, where)`` notes a refusal of the audit hook."""
    import _json
    import os
    import pickle

    len_, int_, float_, str_, type_, bool_ = len, int, float, str, type, bool
    list_, dict_, tuple_ = list, dict, tuple
    join, encode = str.join, str.encode
    int_repr, float_repr = int.__repr__, float.__repr__
    to_bytes, from_bytes = int.to_bytes, int.from_bytes
    dict_items, list_append = dict.items, list.append
    esc = _json.encode_basestring_ascii
    write, read = os.write, os.read
    loads = pickle.loads
    memoryview_, bytearray_, bytes_ = memoryview, bytearray, bytes
    inf = float("inf")
    tampering: list = []

    def enc(x) -> str:
        t = type_(x)
        if x is None:
            return "null"
        if t is bool_:
            return "true" if x else "false"
        if t is int_:
            return int_repr(x)
        if t is float_:
            if x != x:
                return "NaN"
            if x == inf:
                return "Infinity"
            if x == -inf:
                return "-Infinity"
            return float_repr(x)
        if t is str_:
            return esc(x)
        if t is list_ or t is tuple_:
            return "[" + join(",", [enc(i) for i in x]) + "]"
        if t is dict_:
            return "{" + join(",", [esc(str_(k)) + ":" + enc(v) for k, v in dict_items(x)]) + "}"
        return esc(str_(x))

    def send(obj: dict) -> None:
        if tampering:
            obj = dict_(obj)
            obj["tampering"] = [list_(t) for t in tampering[:5]]
        data = encode(enc(obj), "utf-8")
        view = memoryview_(to_bytes(len_(data), 4, "big", signed=True) + data)
        while len_(view):
            view = view[write(fd, view):]

    def exactly(n: int) -> bytes:
        buf = bytearray_()
        while len_(buf) < n:
            chunk = read(fd, n - len_(buf))
            if not chunk:
                raise EOFError("the judge closed the connection")
            buf += chunk
        return bytes_(buf)

    def recv():
        n = from_bytes(exactly(4), "big", signed=True)
        if n == -1:
            n = from_bytes(exactly(8), "big")
        return loads(exactly(n))

    def record(what: str, where: str) -> None:
        if len_(tampering) < 20:
            list_append(tampering, (str_(what), str_(where)))

    return send, recv, record


def tracer(torch, *, cuda: bool, emulated: bool = False, registers: bool = True, tmpdir: str | None = None):
    """The tracer of the worker's calls, sealed: ``(start, stop, abandon)``.

    ``start(nonce)`` opens a profiling session through the profiler's C functions (CPU ops; CUPTI kernels,
    copies and fills on a GPU) with a begin marker carrying the judge's nonce; ``stop()`` closes it with an end
    marker and returns the trace as the JSON-ready dict :func:`~.evidence.parse_trace` reads (``ok`` False when
    a marker is missing: the session was stopped or replaced during the call); ``abandon()`` closes it after a
    failure. Emulated CUDA launches (:mod:`flashtutor.emulate` marks each with a range) count as kernels."""
    import json as _jsonmod
    import os
    import tempfile

    len_, sorted_, int_, float_, str_, type_ = len, sorted, int, float, str, type
    list_, dict_, zip_, min_, max_ = list, dict, zip, min, max
    Exception_ = Exception
    join, startswith, strip = str.join, str.startswith, str.strip
    int_repr = int.__repr__
    dict_get, dict_values, list_append = dict.get, dict.values, list.append
    bytes_join, bytes_decode = bytes.join, bytes.decode
    scan_once = _jsonmod.JSONDecoder().scan_once            # the C scanner, bound to a private decoder
    open_, read, close, unlink, getpid = os.open, os.read, os.close, os.unlink, os.getpid
    O_RDONLY = os.O_RDONLY
    path_join = os.path.join
    tmpdir = tmpdir or tempfile.mkdtemp(prefix="flashtutor-trace-")

    A = torch._C._autograd
    P = torch._C._profiler
    enable, disable, prepare = A._enable_profiler, A._disable_profiler, A._prepare_profiler
    rf_enter, rf_exit = A._record_function_with_args_enter, A._record_function_with_args_exit
    KE = A._KinetoEvent
    ev_name, ev_dev, ev_dur, ev_stream = KE.name, KE.device_type, KE.duration_ns, KE.device_resource_id
    ev_corr, ev_meta, ev_start = KE.correlation_id, KE.metadata_json, KE.start_ns
    PR = A._ProfilerResult
    res_events, res_save = PR.events, PR.save
    DT = A.DeviceType
    dt_int = DT.__int__
    DT_CPU, DT_CUDA = int_(DT.CPU), int_(DT.CUDA)
    from ..emulate import TRACE_PREFIX
    prefix = str_(TRACE_PREFIX)
    n_prefix = len_(prefix)
    acts = {P.ProfilerActivity.CPU} | ({P.ProfilerActivity.CUDA} if cuda else set())
    from torch.autograd import profiler as _ap
    on_start = getattr(_ap, "_run_on_profiler_start", lambda: None)     # torch's Python flag (is a profiler on?)
    on_stop = getattr(_ap, "_run_on_profiler_stop", lambda: None)
    template = _ap.profile(use_kineto=True, use_device="cuda" if cuda else None)
    try:
        config = template.config(create_trace_id=True)
    except TypeError:                                    # an older torch: no trace id
        config = template.config()
    del template
    # CUPTI reports a kernel once it has run: the session ends only after the device has finished (a timed batch
    # is still waiting behind the judge's gate when the worker answers), as torch's profile.__exit__ does.
    device_sync = torch._C._cuda_synchronize if cuda else (lambda: None)
    state = {"nonce": "", "on": False, "saves": 0}

    def untraced(why: str) -> dict:
        return {"op": "trace", "ok": False, "error": why[:400], "ops": [], "kernels": []}

    def start(nonce: str = "warm-up") -> None:
        state["nonce"] = str_(nonce)
        prepare(config, acts)
        on_start()
        enable(config, acts)
        state["on"] = True
        rf_exit(rf_enter("flashtutor:" + state["nonce"] + ":begin"))

    def abandon() -> None:
        if state["on"]:
            state["on"] = False
            try:
                device_sync()
            except Exception_:  # noqa: BLE001 — a lost context: the worker ends after this
                pass
            try:
                disable()
            except Exception_:  # noqa: BLE001
                pass
            on_stop()

    def num(d: dict, key: str):
        v = dict_get(d, key)
        return int_(v) if type_(v) in (int_, float_) else None

    def resources(meta: str):
        """Registers per thread, shared memory, bytes of an event's CUPTI metadata (a JSON fragment)."""
        try:
            s = strip(meta or "")
            if not s:
                return (None, None, None)
            d, _ = scan_once(s if startswith(s, "{") else "{" + s + "}", 0)
        except Exception_:  # noqa: BLE001
            return (None, None, None)
        if type_(d) is not dict_:
            return (None, None, None)
        return (num(d, "registers per thread"), num(d, "shared memory"), num(d, "bytes"))

    def from_chrome(result, device, meta):
        """CUPTI's metadata as the exported trace carries it (torch keeps it out of the events), matched by
        correlation id, else by name."""
        state["saves"] += 1
        path = path_join(tmpdir, "trace-" + int_repr(getpid()) + "-" + int_repr(state["saves"]) + ".json")
        try:
            res_save(result, path)
            fd_ = open_(path, O_RDONLY)
            chunks: list = []
            while True:
                b = read(fd_, 1 << 20)
                if not b:
                    break
                list_append(chunks, b)
            close(fd_)
            unlink(path)
            trace, _ = scan_once(strip(bytes_decode(bytes_join(b"", chunks), "utf-8", "replace")), 0)
        except Exception_:  # noqa: BLE001
            return meta
        by_corr: dict = {}
        by_name: dict = {}
        for ev in (dict_get(trace, "traceEvents") or []) if type_(trace) is dict_ else []:
            if type_(ev) is not dict_ or dict_get(ev, "cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
                continue
            a = dict_get(ev, "args") or {}
            if type_(a) is not dict_:
                continue
            got = (num(a, "registers per thread"), num(a, "shared memory"), num(a, "bytes"))
            c = dict_get(a, "correlation")
            if type_(c) in (int_, float_):
                by_corr[int_(c)] = got
            nm = dict_get(ev, "name")
            if type_(nm) is str_ and nm not in by_name:
                by_name[nm] = got
        out: list = []
        for e, m in zip_(device, meta):
            try:
                c = int_(ev_corr(e))
            except Exception_:  # noqa: BLE001
                c = None
            got = dict_get(by_corr, c) if c is not None else None
            list_append(out, got or dict_get(by_name, ev_name(e)) or m)
        return out

    def stop() -> dict:
        if not state["on"]:
            return untraced("the tracer was not running")
        state["on"] = False
        nonce = state["nonce"]
        try:
            rf_exit(rf_enter("flashtutor:" + nonce + ":end"))
            device_sync()
            result = disable()
            on_stop()
            events = res_events(result)
        except Exception_ as e:  # noqa: BLE001 — the learner's code may have stopped the profiler
            on_stop()
            return untraced("the trace could not be read: " + type_(e).__name__ + ": " + str_(e))
        names = {ev_name(e) for e in events}
        missing = [m for m in ("begin", "end") if ("flashtutor:" + nonce + ":" + m) not in names]
        if missing:
            return untraced("the trace lacks its " + join(" and ", missing) + " marker: the profiling session was "
                            "stopped or replaced during the call")
        ops = sorted_({ev_name(e) for e in events if dt_int(ev_dev(e)) == DT_CPU and startswith(ev_name(e), "aten::")})
        kernels: dict = {}
        if not cuda:
            if emulated:
                for e in events:
                    nm = ev_name(e)
                    if startswith(nm, prefix):
                        r = dict_get(kernels, nm)
                        if r is None:
                            r = kernels[nm] = [nm[n_prefix:], 0, 0, 0.0, None, None, None]
                        r[2] += 1
                        r[3] += ev_dur(e) / 1e3
            return {"op": "trace", "ok": True, "error": "", "ops": ops, "kernels": list_(dict_values(kernels))}
        device = [e for e in events if dt_int(ev_dev(e)) == DT_CUDA]
        meta = [resources(ev_meta(e)) for e in device]
        for e, m in zip_(device, meta):
            nm = ev_name(e)
            copy = startswith(nm, "Memcpy") or startswith(nm, "Memset")
            if (registers and m[0] is None and not copy) or (startswith(nm, "Memcpy DtoH") and m[2] is None):
                meta = from_chrome(result, device, meta)
                break
        # The GPU time from the first activity's start to the last one's end: a timed batch's work lies inside
        # the judge's window (after its gate, before its end event) unless some of it ran on a stream the worker
        # did not gate or join; the judge compares the two.
        span = None
        if device:
            starts = [ev_start(e) for e in device]
            ends = [ev_start(e) + ev_dur(e) for e in device]
            span = (max_(ends) - min_(starts)) / 1e3
        for e, m in zip_(device, meta):
            key = (ev_name(e), int_(ev_stream(e)))
            r = dict_get(kernels, key)
            if r is None:
                r = kernels[key] = [key[0], key[1], 0, 0.0, m[0], m[1], 0 if m[2] is not None else None]
            r[2] += 1
            r[3] += ev_dur(e) / 1e3
            if m[2] is not None:
                r[6] = (r[6] or 0) + m[2]
        return {"op": "trace", "ok": True, "error": "", "ops": ops, "kernels": list_(dict_values(kernels)),
                "span_us": span}

    return start, stop, abandon


def gates(torch):
    """The CUDA side of a call, sealed: ``(set_stream, gate, end, sync, open_event)``.

    ``set_stream()`` makes the worker's own stream current again (the learner's code may have switched);
    ``gate(A)`` makes it wait for the judge's event A; ``end(B, streams)`` makes it wait for every stream in
    ``streams``, then records the judge's event B on it (``B`` None: no record); ``sync()`` waits on the host for
    it; ``open_event(device, handle)`` opens one of the judge's interprocess events. All through the C base
    classes of torch's streams and events (their Python subclasses are the learner's to patch)."""
    len_, int_, enumerate_ = len, int, enumerate
    list_append = list.append
    EB = torch._C._CudaEventBase
    SB = torch._C._CudaStreamBase
    ev_record, ev_wait, from_ipc = EB.record, EB.wait, EB.from_ipc_handle
    stream_sync = SB.synchronize
    set_stream_c = torch._C._cuda_setStream
    stream0 = torch.cuda.current_stream()
    s_id, s_dev, s_type = int_(stream0.stream_id), int_(stream0.device_index), int_(stream0.device_type)
    new_event = torch.cuda.Event
    joiners = [new_event() for _ in range(8)]

    def set_stream() -> None:
        set_stream_c(stream_id=s_id, device_index=s_dev, device_type=s_type)

    def gate(a) -> None:
        ev_wait(a, stream0)

    def end(b, streams=()) -> None:
        for i, s in enumerate_(streams):
            if i >= len_(joiners):
                list_append(joiners, new_event())
            ev_record(joiners[i], s)
            ev_wait(joiners[i], stream0)
        if b is not None:
            ev_record(b, stream0)

    def sync() -> None:
        stream_sync(stream0)

    def open_event(device: int, handle):
        return from_ipc(device, handle)

    return set_stream, gate, end, sync, open_event
