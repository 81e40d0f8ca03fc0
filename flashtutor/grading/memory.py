"""The judge's GPU memory on a shared GPU: what it gives back, what it does when the GPU is full, what it records.

Several gradings may share one GPU (the GPU tier grades ten at once; a learner may grade in two notebooks). The
judge's own allocations (the arena, the references, SDPA's outputs in the timed phase) then compete with other
processes', and an out-of-memory there is the machine's state, not the learner's kernel. So:

* :func:`trim` hands the judge's cached blocks back to the driver after a case or a timed shape that left more
  than :data:`TRIM_BYTES` cached (the caching allocator keeps freed blocks for this process otherwise) — only in
  a judge process of its own (:data:`OWN_PROCESS`, set by ``judge._main``): in pytest's process, after earlier
  gradings there, its ``gc.collect()`` hung for minutes on the H100 (2026-11-27, a finalizer among their garbage:
  results/gpu-tier-h100-2026-11-27-e), and a judge in its caller's process grades alone anyway;
* :func:`retry` runs a step of the judge again after waiting, when it ran out of memory, and raises
  :class:`GraderOutOfMemory` (a verdict of "not graded here", never a failure) when the GPU stays full;
* :func:`describe` says in one line how full the GPU was and who held it, for that verdict and for a learner's
  own out-of-memory (a kernel that asks for too much fails; the line says whether the GPU was free when it did);
* :class:`Peaks` records the most this judge and its worker held (the report's ``memory``), so that a run that
  ran out says which process held what.
"""
from __future__ import annotations

import gc
import os
import time

TRIM_BYTES = 64 << 20        # cached but unused: handed back above this
OWN_PROCESS = False          # this process is a judge process and nothing else (judge._main): it may trim
WAITS_S = (3.0, 10.0, 20.0)  # how long to wait before each retry of a step that ran out of memory
GiB = float(1 << 30)
# For the GPU tier's test of a full GPU (tests/test_gpu.py), which caps the judge's allocator instead of filling a
# shared GPU: FLASHTUTOR_JUDGE_MEMORY_LIMIT (bytes the judge may hold) and FLASHTUTOR_MEMORY_WAITS ("0.2,0.2").
LIMIT_ENV, WAITS_ENV = "FLASHTUTOR_JUDGE_MEMORY_LIMIT", "FLASHTUTOR_MEMORY_WAITS"


def wait_times() -> tuple[float, ...]:
    text = os.environ.get(WAITS_ENV, "")
    return tuple(float(x) for x in text.split(",") if x.strip()) if text else WAITS_S


def cap_judge() -> None:
    """The judge's allocator capped at FLASHTUTOR_JUDGE_MEMORY_LIMIT bytes, where a test sets it."""
    limit = os.environ.get(LIMIT_ENV)
    if limit:
        import torch
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, int(limit) / total))


class GraderOutOfMemory(Exception):
    """The judge's own step ran out of GPU memory after every retry: the grading is not done here."""


def is_oom(e: BaseException) -> bool:
    """Whether ``e`` is CUDA out of memory (torch's allocator, or a library's CUDA call that reports it)."""
    import torch
    if isinstance(e, torch.OutOfMemoryError):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def trim(above: int = TRIM_BYTES) -> None:
    """Hand this process's cached, unused GPU blocks back to the driver when there are more than ``above`` bytes."""
    import torch
    if not OWN_PROCESS or not torch.cuda.is_initialized():
        return
    if torch.cuda.memory_reserved() - torch.cuda.memory_allocated() > above:
        gc.collect()
        torch.cuda.empty_cache()


def processes() -> dict[int, int]:
    """{pid: bytes} of the processes holding memory on this GPU, from NVML ({} where NVML cannot say)."""
    try:
        import pynvml
        import torch
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        return {p.pid: int(p.usedGpuMemory or 0) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
    except Exception:  # noqa: BLE001 — no NVML, or no per-process figures in this container
        return {}


def describe(ours: set[int] = frozenset()) -> str:
    """One line: how much of the GPU's memory is free, and what the other processes hold."""
    import torch
    try:
        free, total = torch.cuda.mem_get_info()
    except Exception:  # noqa: BLE001
        return "the GPU's free memory could not be read"
    text = f"{free / GiB:.1f} of {total / GiB:.1f} GiB free"
    others = {p: b for p, b in processes().items() if p not in ours}
    if others:
        n = len(others)
        text += f"; {n} other process{'es' if n > 1 else ''} held {sum(others.values()) / GiB:.1f} GiB"
    return text


def _total_bytes() -> int:
    import torch
    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


HOG_FRACTION = 0.5           # a worker holding more than this share of the GPU ran the grader out of memory itself


def worker_hog(worker_pid: int | None) -> str:
    """'' — or, when the learner's own worker holds more than HOG_FRACTION of the GPU's memory, why the grader's
    out-of-memory is the submission's doing (a kernel that keeps memory between calls): then the grade fails with
    it instead of reading "not graded here", which a submission could otherwise reach on purpose."""
    if not worker_pid:
        return ""
    held = processes().get(worker_pid, 0)
    try:
        total = _total_bytes()
    except Exception:  # noqa: BLE001
        return ""
    if total and held > HOG_FRACTION * total:
        return (f"the grader ran out of GPU memory while your code's process held {held / GiB:.1f} of "
                f"{total / GiB:.1f} GiB: attention() must not keep that much memory between calls")
    return ""


def verdict(e: BaseException, what: str, worker_pid: int | None, ours: set[int] = frozenset()):
    """(cause, message) of the judge's out-of-memory ``e`` (after its retries, or raised anywhere else): the
    submission's failure when its own process holds most of the GPU (:func:`worker_hog`), else "not graded here"."""
    from .evidence import Cause
    hog = worker_hog(worker_pid)
    if hog:
        return Cause.OUT_OF_MEMORY, hog
    return Cause.GRADER_MEMORY, str(e) if isinstance(e, GraderOutOfMemory) else not_graded_message(what, e, ours)


def first_sentence(e: BaseException) -> str:
    """torch's out-of-memory message up to its first period: what was asked ("Tried to allocate 130.00 MiB")."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    parts = text.split(". ")
    return ". ".join(parts[:2]) if len(parts) > 1 and parts[0].lower().startswith("cuda out of memory") else parts[0]


def not_graded_message(what: str, e: BaseException, ours: set[int] = frozenset()) -> str:
    return (f"not graded here: the grader ran out of GPU memory {what} ({first_sentence(e)}; {describe(ours)}) "
            "— other processes hold the GPU's memory; grade again when it is free")


def retry(step, what: str, ours: set[int] = frozenset(), waits=None, sleep=time.sleep):
    """``step()``, again after each wait in ``waits`` (default: :func:`wait_times`) while it runs out of GPU memory;
    GraderOutOfMemory (its message says what and how full the GPU was) when it still does after the last."""
    waits = wait_times() if waits is None else waits
    for i in range(len(waits) + 1):
        try:
            return step()
        except Exception as e:  # noqa: BLE001
            if not is_oom(e):
                raise
            trim(above=0)
            if i == len(waits):
                raise GraderOutOfMemory(not_graded_message(what, e, ours)) from e
            sleep(waits[i])


class Peaks:
    """The most GPU memory the judge (torch's peak reserved) and its worker (NVML, when sampled) held."""

    def __init__(self):
        self.judge = 0
        self.worker = 0

    def sample(self, worker_pid: int | None) -> None:
        import torch
        if not torch.cuda.is_initialized():
            return
        self.judge = max(self.judge, torch.cuda.max_memory_reserved())
        if worker_pid:
            self.worker = max(self.worker, processes().get(worker_pid, 0))

    def to_dict(self) -> dict:
        return {"judge_gib": round(self.judge / GiB, 2), "worker_gib": round(self.worker / GiB, 2)}
