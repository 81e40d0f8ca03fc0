"""Run a learner's code in a spawned child process, so a crash or a hang becomes a verdict.

An illegal memory access poisons the CUDA context of the process that made it; a segfault or a
hang takes the process down with it. So the grader never runs learner code itself: it starts a
child (``spawn``, a fresh interpreter: no inherited CUDA state), sends it the tasks, and waits
for one answer per task with a timeout. When the child dies or stops answering, the task gets a
named verdict (the child's last stderr lines attached) and a new child carries on with the next.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

_SIGNALS = {-signal.SIGSEGV: "segmentation fault", -signal.SIGABRT: "abort", -signal.SIGKILL: "killed",
            -signal.SIGBUS: "bus error", -signal.SIGFPE: "floating-point exception"}


@dataclass
class Outcome:
    """What became of one task: its result dict, or why there is none."""
    index: int
    result: dict | None
    verdict: str = "ok"        # ok | crash | timeout | setup_error | setup_timeout | not_run
    message: str = ""
    seconds: float = 0.0


def _child(conn, worker: str, setup: dict, tasks: list[dict], log_path: str):
    # Learner output (prints, device-side assert messages) goes to a log the parent can quote.
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    import importlib
    mod_name, fn_prefix = worker.rsplit(":", 1)
    mod = importlib.import_module(mod_name)
    do_setup: Callable = getattr(mod, f"{fn_prefix}_setup")
    do_task: Callable = getattr(mod, f"{fn_prefix}_task")
    try:
        state = do_setup(setup)
    except BaseException as e:  # noqa: BLE001 — anything the learner's import raises is a verdict
        conn.send(("setup_error", getattr(e, "verdict_message", None) or f"{type(e).__name__}: {e}",
                   getattr(e, "verdict", "error")))
        return
    conn.send(("ready", state.get("info", {}) if isinstance(state, dict) else {}))
    for i, task in enumerate(tasks):
        result = do_task(state, task)
        conn.send(("result", i, result))
        if result.get("fatal"):   # the CUDA context is gone: nothing more can run in this process
            conn.close()
            os._exit(3)
    conn.send(("done",))


def _tail(path: str, n: int = 15) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln.rstrip() for ln in f.readlines() if ln.strip()]
        return "\n".join(lines[-n:])
    except OSError:
        return ""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        return f"killed by signal {-code} ({_SIGNALS.get(code, 'signal')})"
    return f"exited with code {code}"


def run_isolated(worker: str, setup: dict, tasks: list[dict], *, setup_timeout: float = 180.0,
                 task_timeout: Callable[[dict], float] | float = 120.0,
                 on_outcome: Callable[[Outcome], None] | None = None,
                 max_timeouts: int = 2) -> tuple[dict, list[Outcome]]:
    """Run ``tasks`` through ``worker`` ("module:prefix" naming ``prefix_setup``/``prefix_task``).

    After ``max_timeouts`` timeouts the remaining tasks are not run (a hanging kernel usually hangs
    on every shape; waiting out each would take minutes). Returns (setup info or {"error": ...},
    one Outcome per task, in order).
    """
    ctx = mp.get_context("spawn")
    timeout_of = task_timeout if callable(task_timeout) else (lambda _t, s=float(task_timeout): s)
    outcomes: list[Outcome | None] = [None] * len(tasks)
    info: dict = {}
    i = 0
    timeouts = 0
    with tempfile.TemporaryDirectory(prefix="flashtutor-") as tmp:
        while i < len(tasks) or (not tasks and not info):
            if timeouts >= max_timeouts:
                for j in range(i, len(tasks)):
                    outcomes[j] = Outcome(j, None, "not_run", f"skipped after {timeouts} timeouts")
                break
            log = os.path.join(tmp, f"child-{i}.log")
            parent_conn, child_conn = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_child, args=(child_conn, worker, setup, tasks[i:], log), daemon=True)
            proc.start()
            child_conn.close()
            base = i
            t0 = time.monotonic()

            def finish(j: int, verdict: str, message: str, result=None):
                o = Outcome(j, result, verdict, message, time.monotonic() - t0)
                outcomes[j] = o
                if on_outcome:
                    on_outcome(o)

            if not parent_conn.poll(setup_timeout):
                _kill(proc)
                msg = f"setup (import/compile) took longer than {setup_timeout:.0f} s"
                info = {"error": msg, "verdict": "setup_timeout"}
                for j in range(i, len(tasks)):
                    finish(j, "setup_timeout" if j == i else "not_run", msg if j == i else "")
                break
            try:
                msg = parent_conn.recv()
            except EOFError:
                proc.join(5)
                text = f"the process {_describe_exit(proc.exitcode)} while importing the submission"
                info = {"error": text, "log": _tail(log), "verdict": "crash"}
                for j in range(i, len(tasks)):
                    finish(j, "setup_error" if j == i else "not_run", text if j == i else "")
                break
            if msg[0] == "setup_error":
                proc.join(5)
                info = {"error": msg[1], "verdict": msg[2], "log": _tail(log)}
                for j in range(i, len(tasks)):
                    finish(j, "setup_error" if j == i else "not_run", msg[1] if j == i else "")
                break
            if not info:
                info = msg[1]
            if not tasks:
                proc.join(5)
                break
            while i < len(tasks):
                t0 = time.monotonic()
                limit = timeout_of(tasks[i])
                if not parent_conn.poll(limit):
                    _kill(proc)
                    timeouts += 1
                    finish(i, "timeout", f"no answer within {limit:.0f} s: the kernel hangs (an endless loop, "
                                         f"a barrier not every thread reaches, a spin-wait) or is far too slow")
                    i += 1
                    break
                try:
                    msg = parent_conn.recv()
                except EOFError:
                    proc.join(5)
                    finish(i, "crash", f"the process {_describe_exit(proc.exitcode)}" +
                           (f"; its last output:\n{_tail(log)}" if _tail(log) else ""))
                    i += 1
                    break
                if msg[0] == "done":
                    break
                _, j, result = msg
                finish(base + j, "ok", "", result)
                i = base + j + 1
                if result.get("fatal"):
                    proc.join(10)
                    log_tail = _tail(log)
                    if log_tail:
                        result["log"] = log_tail
                    break
            if proc.is_alive():
                proc.join(10)
                _kill(proc)
    return info, [o if o else Outcome(j, None, "not_run") for j, o in enumerate(outcomes)]


def _kill(proc):
    if proc.is_alive():
        proc.kill()
    proc.join(10)
