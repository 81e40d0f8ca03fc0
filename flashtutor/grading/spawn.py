"""The judge's handle on a worker process: launched early, fed, read with timeouts, replaced after a crash.

No torch at import: ``grade`` launches the worker before the judge imports anything heavy, so the two
processes pay their start-up (torch, CUDA, the tracer's first start) side by side.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .evidence import Cause, MalformedMessage, parse_message, tampering_message

DEBUG = os.environ.get("FLASHTUTOR_DEBUG", "") not in ("", "0")


def debug(*what) -> None:
    """FLASHTUTOR_DEBUG=1: the judge's steps on stderr, with a clock (the worker's go to its log)."""
    if DEBUG:
        import sys
        print(f"[judge {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d}]", *what, file=sys.stderr,
              flush=True)


class WorkerFailed(Exception):
    def __init__(self, cause: Cause, message: str, log: str = ""):
        super().__init__(message)
        self.cause, self.message, self.log = cause, message, log


class WorkerHandle:
    """One worker process at a time: spawned, fed, read with timeouts, replaced after a crash."""

    def __init__(self, setup: dict, tmp: str, setup_timeout: float):
        self.setup, self.tmp, self.setup_timeout = setup, tmp, setup_timeout   # tmp: the folder of its logs
        self.proc = self.conn = None
        self.starts = 0
        self.while_starting = None      # the judge's own set-up, done while the first worker starts
        self.info: dict = {}            # the last "ready" message's info (strings): torch, gpu, arena

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def log(self) -> str:
        return os.path.join(self.tmp, f"worker-{self.starts}.log")

    def launch(self) -> None:
        """Start a worker process (``python -m flashtutor.grading.worker`` on one end of a socket pair: nothing
        of the caller's ``__main__`` is imported there) and send it its set-up. It imports torch and starts its
        tracer while the judge gets ready; :meth:`attach` then gives it the arena."""
        import socket
        import subprocess
        import sys
        from multiprocessing.connection import Connection

        self.stop()
        self.starts += 1
        mine, theirs = socket.socketpair()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["PYTHONUNBUFFERED"] = "1"
        os.makedirs(self.tmp, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "flashtutor.grading.worker", str(theirs.fileno())],
                                         pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, cwd=str(Path(self.setup["path"]).parent))
        theirs.close()
        self.conn = Connection(mine.detach())
        debug(f"worker {self.proc.pid} started, log {self.log}")
        self.conn.send(self.setup)

    def attach(self, arena_msg: tuple) -> dict:
        """Give the launched worker the shared arena and wait until it has imported the submission."""
        import torch.multiprocessing  # noqa: F401 — registers the reducers that share CUDA tensors
        if self.proc is None:
            self.launch()
        try:
            self.conn.send(arena_msg)
            debug("arena sent")
        except (BrokenPipeError, OSError):
            pass              # it already stopped (an import error): its message is waiting to be read
        if self.while_starting:
            self.while_starting()
            self.while_starting = None
        msg = self.receive(self.setup_timeout, setup=True)
        debug("worker answered", msg.get("op"))
        if msg.get("tampering"):                 # the submission's import reached into the worker
            self.stop()
            raise WorkerFailed(Cause.TAMPERING, tampering_message(msg["tampering"]), self.tail())
        if msg["op"] == "setup_error" or msg["op"] == "error":
            self.stop()
            raise WorkerFailed(msg["cause"], msg["message"], self.tail())
        if msg["op"] != "ready":
            self.stop()
            raise WorkerFailed(Cause.MALFORMED, f"the worker answered {msg['op']!r} instead of 'ready'", self.tail())
        self.info = dict(msg.get("info") or {})
        return msg

    def start(self, arena_msg: tuple) -> dict:
        """A fresh worker, attached: after a crash, or when none was launched early."""
        self.launch()
        return self.attach(arena_msg)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def request(self, msg: tuple, timeout: float) -> dict:
        debug("->", msg[0], msg[1] if len(msg) > 1 and isinstance(msg[1], dict) else "")
        try:
            self.conn.send(msg)
        except (BrokenPipeError, OSError):
            return self._dead("")
        return self.receive(timeout)

    def receive(self, timeout: float, *, setup: bool = False) -> dict:
        if not self.conn.poll(timeout):
            self.stop(kill=True)          # it did not answer in time: it would not read a "quit" either
            if setup:
                raise WorkerFailed(Cause.TIMEOUT, f"setup (import/compile) took longer than {timeout:.0f} s", self.tail())
            return {"op": "error", "cause": Cause.TIMEOUT, "fatal": True, "where": "", "log": self.tail(),
                    "message": f"no answer within {timeout:.0f} s: the kernel hangs (an endless loop, a barrier not "
                               "every thread reaches, a spin-wait) or is far too slow"}
        try:
            raw = self.conn.recv_bytes(64 << 20)
        except (EOFError, OSError):
            if setup:
                code = self._wait(5)
                raise WorkerFailed(Cause.CRASH, f"the worker {_exit(code)} while importing the submission",
                                   self.tail())
            return self._dead("")
        try:
            m = parse_message(raw)
            debug("<-", m.get("op"), m.get("message", "")[:100] if m.get("op") != "trace" else len(m["trace"].kernels))
            return m
        except MalformedMessage as e:
            self.stop()
            return {"op": "error", "cause": Cause.MALFORMED, "fatal": True, "where": "", "log": "",
                    "message": f"the worker sent a malformed message ({e}); the grading of this process stopped"}

    def _wait(self, timeout: float):
        try:
            return self.proc.wait(timeout)
        except Exception:  # noqa: BLE001
            return None

    def _dead(self, what: str) -> dict:
        code = self._wait(5)
        tail = self.tail()
        emulated = bool(self.setup.get("emulate"))
        fault = fault_line(self.tail(400)) if emulated else None    # a traceback may follow it (FLASHTUTOR_DEBUG)
        self.stop()
        return {"op": "error", "cause": Cause.CRASH, "fatal": True, "where": "", "log": tail, "exit": code,
                "fault": fault, "message": crash_message(code, tail, emulated=emulated, fault=fault)}

    def keep_log(self) -> None:
        """FLASHTUTOR_WORKER_LOGS=DIR: keep each worker's log there (the learner's prints, crashes)."""
        keep = os.environ.get("FLASHTUTOR_WORKER_LOGS")
        if keep and os.path.exists(self.log):
            import shutil
            os.makedirs(keep, exist_ok=True)
            shutil.copy(self.log, os.path.join(keep, f"{Path(self.setup['path']).parent.name}-{os.getpid()}-"
                                                     f"{os.path.basename(self.log)}"))

    def tail(self, n: int = 15) -> str:
        try:
            with open(self.log, errors="replace") as f:
                lines = [ln.rstrip() for ln in f.readlines() if ln.strip()]
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def stop(self, *, kill: bool = False) -> None:
        """End the worker: asked to quit (2 s to do so), then killed; ``kill``: at once."""
        if self.proc is not None:
            try:
                if self.proc.poll() is None and not kill:
                    try:
                        self.conn.send(("quit",))
                    except Exception:  # noqa: BLE001
                        pass
                    self._wait(2)
                if self.proc.poll() is None:
                    self.proc.kill()
                self._wait(10)
                if self.proc.returncode is not None and self.proc.returncode != 0:
                    gpu_released(self.proc.pid)
            except Exception:  # noqa: BLE001
                pass
            try:
                self.conn.close()
            except Exception:  # noqa: BLE001
                pass
            self.keep_log()
        self.proc = None


def gpu_released(pid: int, timeout: float = 20.0) -> bool:
    """Wait until the GPU no longer runs work of the process ``pid``, which has exited: a worker killed inside
    a kernel (a hang) or after a fault leaves its context to the driver, whose teardown can outlast the
    process. The judge calls this while it still holds the GPU lock, so no other grading's timed section
    starts beside the dying kernel. Uses NVML's list of compute processes; without NVML, returns at once."""
    try:
        import pynvml
        pynvml.nvmlInit()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    except Exception:  # noqa: BLE001 — no NVML here
        return True
    t = time.monotonic()
    while time.monotonic() - t < timeout:
        try:
            if not any(pr.pid == pid for h in handles for pr in pynvml.nvmlDeviceGetComputeRunningProcesses(h)):
                _log_release(pid, time.monotonic() - t, True)
                return True
        except Exception:  # noqa: BLE001
            return True
        time.sleep(0.05)
    _log_release(pid, timeout, False)
    return False


def _log_release(pid: int, seconds: float, gone: bool) -> None:
    from .timing import log_line          # the tier's log of where GPU time goes (FLASHTUTOR_BATCH_LOG)
    debug(f"worker {pid}'s GPU work {'gone' if gone else 'still listed'} after {seconds:.2f} s")
    log_line(event="worker released", worker=pid, waited_s=round(seconds, 3), gone=gone)


# Signals of a process that touched memory it must not: on the CPU an emulated kernel's access past a buffer ends
# the process with one of these (a GPU reports "illegal memory access" instead).
MEMORY_SIGNALS = {"SIGSEGV", "SIGBUS", "SIGABRT"}


# The line flashtutor/emulate/fault.h writes when an emulated kernel faults. The log is the learner's process's
# output: parsed strictly, and what it says is a hint about where, never evidence for a verdict.
FAULT_LINE = re.compile(r"flashtutor-emulate: fault at address 0x([0-9a-f]{1,16}) \((a read|a write|an access)\) "
                        r"in kernel ([A-Za-z_][A-Za-z0-9_]{0,119}) \(block (\d{1,10}),(\d{1,10}),(\d{1,10}) "
                        r"thread (\d{1,10}),(\d{1,10}),(\d{1,10})\)")


ABORT_LINE = re.compile(r"flashtutor-emulate: abort (in|after) kernel ([A-Za-z_][A-Za-z0-9_]{0,119})"
                        r"(?: \(block (\d{1,10}),(\d{1,10}),(\d{1,10}) thread (\d{1,10}),(\d{1,10}),(\d{1,10})\))?")


@dataclass(frozen=True)
class Abort:
    """An abort while an emulated kernel ran (``block``, ``thread``: a failed assert) or after (None: the last kernel
    that ran, as the C library found its heap corrupted), as the worker's log tells it."""
    kernel: str
    block: tuple | None = None
    thread: tuple | None = None

    def who(self) -> str:
        if self.block is None or self.thread is None:
            return self.kernel
        return (f"{self.kernel} (block {','.join(map(str, self.block))} thread "
                f"{','.join(map(str, self.thread))})")


@dataclass(frozen=True)
class Fault:
    """An emulated kernel's memory fault, as the worker's log tells it."""
    address: int
    access: str                  # "read", "write" or "" (not known)
    kernel: str
    block: tuple
    thread: tuple

    def who(self) -> str:
        return (f"{self.kernel} (block {','.join(map(str, self.block))} thread "
                f"{','.join(map(str, self.thread))})")


def fault_line(log: str) -> Fault | Abort | None:
    """The last fault or abort line of a worker's log (None when there is none): the one written as it died."""
    found = None
    for line in (log or "").splitlines()[-1000:]:
        line = line.strip()
        m = FAULT_LINE.fullmatch(line) or ABORT_LINE.fullmatch(line)
        if m:
            found = m
    if found is None:
        return None
    g = found.groups()
    if found.re is ABORT_LINE:
        if g[0] == "in" and g[2] is not None:
            return Abort(g[1], tuple(int(x) for x in g[2:5]), tuple(int(x) for x in g[5:8]))
        return Abort(g[1]) if g[0] == "after" and g[2] is None else None
    return Fault(int(g[0], 16), {"a read": "read", "a write": "write"}.get(g[1], ""), g[2],
                 tuple(int(x) for x in g[3:6]), tuple(int(x) for x in g[6:9]))


def fault_place(fault: Fault, base, arena_elems: int, shape, slot) -> str:
    """Where ``fault``'s address lies among the call's buffers, in words ('' when that cannot be said): ``base``
    is the arena's address in the worker (its "ready" message's info, a string), ``shape`` and ``slot`` the
    call's. Never raises: its inputs come from the learner's process."""
    from .protocol import locate, numel
    try:
        if not isinstance(fault, Fault) or not isinstance(base, str) or not re.fullmatch(r"\d{1,20}", base) \
                or slot is None:
            return ""
        shape = tuple(int(x) for x in shape)
        at = locate(fault.address - int(base), int(arena_elems), shape, int(slot))
    except (TypeError, ValueError, OverflowError):
        return ""
    dims = "×".join(map(str, shape))
    if at is None:
        return (f"the address {fault.address:#x} lies outside the grader's input and output buffers: in memory of "
                "the process (a buffer of your own, such as a scratch tensor, or an address computed wrongly)")
    if "past_end" in at:
        n = numel(shape)
        past = at["past_end"]
        if past < 0:
            return "the address lies in a guard page after the grader's memory"
        what = (f"the address is element {n + past} of out, " + ("just past its end" if past == 0 else
                f"{past} past its end") + f" (out is {dims} = {n} fp16 values), in a guard page after the grader's "
                "memory")
        if fault.access != "write":       # a read past q, k or v runs on through the next of them to here
            what += (f"; q, k, v and out lie one after another, out last, so an index past q, k or v runs on to "
                     f"here too: it is element {4 * n + past} of q, {3 * n + past} of k, {2 * n + past} of v")
        return what
    idx = ", ".join(map(str, at["index"]))
    where = "" if at["slot"] == int(slot) else f" of another call's slot ({at['slot']})"
    return f"the address is {at['tensor']}[{idx}]{where} (element {at['element']} of {at['tensor']}, {dims})"


def crash_message(code, log: str, *, emulated: bool = False, fault: Fault | Abort | None = None,
                  place: str = "") -> str:
    """What a dead worker's end says to the learner: how it ended, what it probably means (an emulated kernel
    killed by SIGSEGV/SIGBUS/SIGABRT: an access past a buffer; with the emulation's fault line, which kernel,
    block and thread, and ``place``: where the address lies, :func:`fault_place`), and its last output without
    the profiler's and the allocator's lines (:func:`.rules.clean_log`) and without the fault line."""
    import signal

    from .rules import clean_log, heap_corrupted
    text = f"the process {_exit(code)}"
    sig = signal.Signals(-code).name if isinstance(code, int) and code < 0 and -code in signal.valid_signals() \
        else ""
    heap = heap_corrupted(log)
    if emulated and isinstance(fault, Abort) and sig == "SIGABRT":
        if heap:
            text += (f": the C library found its heap corrupted {'while' if fault.block else 'after'} the emulated "
                     f"kernel {fault.who()} ran, the mark of a write past the end of a buffer (an index out of "
                     "bounds), most likely one of your own such as a scratch tensor (a write past the grader's q, k, "
                     "v or out lands in their own memory, not on the heap)")
        elif fault.block is not None:
            text += (f": the emulated kernel {fault.who()} aborted, most likely a failed assert() (its message, if "
                     "any, is in the output below); on a GPU this is a device-side assert")
        else:
            text += (f": the last emulated kernel to run was {fault.who()}; an abort after a kernel often means it "
                     "wrote past the end of a buffer (an index out of bounds) of your own, such as a scratch tensor")
        if heap or fault.block is None:
            text += (". Check the indices of the last, partial tile and the strides of a row, a head and a batch; on "
                     "a GPU, `flashtutor grade --sanitize` names the kernel, the buffer and the index")
    elif emulated and isinstance(fault, Fault) and sig in MEMORY_SIGNALS:
        how = {"read": "read", "write": "wrote"}.get(fault.access, "read or wrote")
        text += (f": the emulated kernel {fault.who()} {how} past the end of a buffer (an index out of bounds)"
                 + (f" — {place}" if place else "")
                 + ". On the CPU such an access ends the process where a GPU reports an illegal memory access. "
                 "Check the indices of the last, partial tile and the strides of a row, a head and a batch; on a "
                 "GPU, `flashtutor grade --sanitize` names the kernel, the buffer and the index")
    elif emulated and (sig in MEMORY_SIGNALS or heap):
        text += (": an emulated kernel most likely read or wrote past the end of a buffer (an index out of bounds)"
                 + (" — the C library found its heap corrupted, the mark of a write past a buffer" if heap else "")
                 + ". On the CPU such an access ends the process where a GPU reports an illegal memory access. "
                 "Check the indices of the last, partial tile and the strides of a row, a head and a batch; on a "
                 "GPU, `flashtutor grade --sanitize` names the kernel, the buffer and the index")
    elif heap:
        text += ": the C library found its heap corrupted, the mark of a write past the end of a buffer"
    shown = "\n".join(ln for ln in clean_log(log).splitlines()
                      if not FAULT_LINE.fullmatch(ln.strip()) and not ABORT_LINE.fullmatch(ln.strip())).strip()
    return text + (f"; its last output:\n{shown}" if shown else "")


def _exit(code) -> str:
    import signal
    names = {-signal.SIGSEGV: "segmentation fault", -signal.SIGABRT: "abort", -signal.SIGKILL: "killed",
             -signal.SIGBUS: "bus error", -signal.SIGFPE: "floating-point exception"}
    if code is None:
        return "did not exit"
    if code < 0:
        return f"was killed by signal {-code} ({names.get(code, 'signal')})"
    return f"exited with code {code}"
