"""Typed records: what the worker reports, what the judge measures, what it concludes.

Everything the worker sends is a JSON object read by :func:`parse_message` — never a pickle, because
unpickling runs code and the worker runs the learner's. The judge turns each message into one of the
dataclasses below, checking every field's type and bounding its size, so a malformed or hostile message
is a verdict ("the worker sent a malformed message"), not a crash or a foothold in the judge.

Who produces what (the judge trusts only what it produces itself, or cross-checks):

=====================  ===========  ==============================================================
evidence               produced by  how a forgery is caught
=====================  ===========  ==============================================================
inputs, reference      judge        — (the worker only ever sees the inputs, after the judge wrote them)
output (a slot)        worker       compared with the judge's reference; NaN-filled first by the judge
inputs unchanged       judge        the judge compares the slots with its private copies
GPU time per call      judge        events only the judge records, around interprocess events that
                                    gate the worker's queued calls (see :mod:`.timing`)
host time per call     worker       informational only (never in a verdict)
kernels that ran       worker       CUPTI trace of *every* call; cross-checked: each call must show
                                    one of the learner's kernels (an untraced call is a verdict), a
                                    kernel with the learner's name must match the judge's own
                                    compile of the learner's source (registers), library kernels fail
SASS, registers        judge        compiled by the judge from the learner's source
=====================  ===========  ==============================================================
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum

MAX_MESSAGE = 32 << 20          # bytes: a trace of thousands of calls fits easily
_MAX_STR = 4000
_MAX_LIST = 20000


class Verdict(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_RUN = "not run"          # nothing could be run here (no GPU for a CUDA chapter)
    DISTURBED = "disturbed"      # correct, but another process disturbed the timing: re-run

    def __str__(self) -> str:
        return self.value


class Cause(str, Enum):
    """Why a case, a call or a timed shape failed (the report groups failures by cause)."""
    # correctness (flashtutor.check names these)
    UNWRITTEN = "unwritten"
    TAIL = "tail"
    BATCH = "batch"
    SCALE = "scale"
    CAUSAL = "causal"
    PRECISION = "precision"
    NAN = "nan"
    WRONG = "wrong"
    SHAPE = "shape"
    INPUTS_MODIFIED = "inputs modified"
    # the call itself
    ERROR = "error"
    COMPILE_ERROR = "compile error"
    IMPORT_ERROR = "import error"
    UNSUPPORTED_GPU = "unsupported GPU"
    ILLEGAL_ADDRESS = "illegal memory access"
    DEVICE_ASSERT = "device-side assert"
    MISALIGNED = "misaligned address"
    LAUNCH_FAILURE = "kernel crashed (unspecified launch failure)"
    ILLEGAL_INSTRUCTION = "illegal instruction"
    OUT_OF_MEMORY = "out of memory"
    CRASH = "crash"
    TIMEOUT = "timeout"
    NOT_RUN = "not_run"
    GRADER_MEMORY = "grader out of GPU memory"   # the judge's own step found the GPU full: not graded here
    MALFORMED = "malformed message"
    # what ran
    FORBIDDEN = "forbidden"                  # the static scan of the source
    LIBRARY_KERNEL = "library kernel"        # the trace: a library's attention/GEMM/convolution/... kernel ran
    NOT_OWN = "not your kernel"              # a kernel with your kernel's name, but not compiled from your file
    UNTRACED = "untraced"                    # a call whose kernels the trace did not see
    NO_KERNEL = "no kernel"                  # none of your kernels ran
    TAMPERING = "tampering"                  # the worker's audit hook refused the learner's code (frames, gc, ...)
    NOT_INDEPENDENT = "calls not independent"   # a timed batch cost more than its calls (work moved between calls)
    OUTSIDE_WINDOW = "outside the window"    # a timed batch's kernels ran before the gate or after its end
    # timing
    TIMED_OUTPUT_WRONG = "timed output wrong"
    BELOW_FLOOR = "below floor"
    TOO_SLOW = "too slow"
    NOT_CAPTURABLE = "not capturable"
    DISTURBED = "disturbed"
    # compiled code
    SASS = "SASS rule"
    # compute-sanitizer
    MEMORY_ERROR = "memory error"
    RACE = "race"
    BARRIER = "barrier error"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def of(cls, text: str) -> "Cause":
        try:
            return cls(text)
        except ValueError:
            return cls.ERROR


CUDA_FATAL = (("illegal memory access", Cause.ILLEGAL_ADDRESS),
              ("CUDA_ERROR_ILLEGAL_ADDRESS", Cause.ILLEGAL_ADDRESS),
              ("device-side assert triggered", Cause.DEVICE_ASSERT),   # not torch's hint "…device-side assertions"
              ("CUDA_ERROR_ASSERT", Cause.DEVICE_ASSERT),
              ("misaligned address", Cause.MISALIGNED),
              ("unspecified launch failure", Cause.LAUNCH_FAILURE),
              ("CUDA_ERROR_LAUNCH_FAILED", Cause.LAUNCH_FAILURE),
              ("illegal instruction", Cause.ILLEGAL_INSTRUCTION))


# ---------------------------------------------------------------- records ----------------------------
@dataclass
class KernelRecord:
    """One kernel (or copy/fill) name on one stream, aggregated over the calls of a task."""
    name: str
    stream: int
    count: int
    total_us: float
    registers: int | None = None       # per thread, as CUPTI reports it
    shared_bytes: int | None = None    # static + dynamic
    bytes: int | None = None           # memory copies: bytes moved (all calls)


@dataclass
class Trace:
    """What the worker's tracer saw during a task's calls (CUPTI on a GPU, aten ops on a CPU)."""
    kernels: list[KernelRecord] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    ok: bool = True                    # the tracer ran (False: the worker says it could not trace)
    error: str = ""
    span_us: float | None = None       # GPU time from the first activity's start to the last's end (CUPTI)

    @property
    def names(self) -> list[str]:
        return sorted({k.name for k in self.kernels})


@dataclass
class CaseResult:
    """One correctness case: a problem, a seed, the verdict on the output, and what ran."""
    problem: str
    seed: int
    ok: bool
    cause: Cause | None = None
    message: str = ""
    err: float = float("nan")
    bound: float = float("nan")
    sdpa_err: float = float("nan")
    max_err: float = float("nan")
    kernels: list[str] = field(default_factory=list)
    log: str = ""

    def to_dict(self) -> dict:
        d = asdict(self)
        d["cause"] = str(self.cause) if self.cause else ""
        return d


@dataclass
class Measurement:
    """GPU time per call of one candidate on one shape (median over rounds of the slope between two
    batch sizes), its spread, and the host's cost of issuing a call (informational)."""
    median_us: float
    p10_us: float
    p90_us: float
    rounds: int
    host_us: float | None = None        # host time to issue one call (the worker's own clock for yours)
    batch: tuple[int, int] = (0, 0)     # the two batch sizes
    gate_held: float = 1.0              # fraction of batches whose calls were all queued before they ran
    fixed_us: float | None = None       # the batch's fixed cost beyond the control batch's (the worker's only)
    control_us: float | None = None     # the control batch's window: no call, the same gate and hops
    control_spread_us: float | None = None   # its p10-p90 over rounds

    @property
    def spread(self) -> float:
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us else float("nan")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["spread"] = self.spread
        return d


@dataclass
class TimingResult:
    """One timed shape: every candidate's GPU time, the ratios, the re-checks and what disturbed it."""
    problem: str
    basis: str                                   # "stream" (queued calls) or "graph" (replayed)
    backend: str = ""                            # SDPA's backend, pinned
    times: dict[str, Measurement] = field(default_factory=dict)   # learner, sdpa, [baseline], [reference]
    ratio: float | None = None                   # learner / SDPA
    speedup_vs_baseline: float | None = None
    floor_us: float | None = None
    pct_floor: dict[str, float] = field(default_factory=dict)
    rechecked: int = 0
    recheck_ok: bool = True
    recheck_message: str = ""
    disturbed: str = ""                          # why the timing is not trusted ("" = clean)
    causes: list[Cause] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    busy_fraction: float | None = None           # traced kernel time / measured window (yours)
    span_over_window_us: float | None = None     # the most a batch's traced GPU span exceeded its window (yours)
    skipped: str = ""                            # why this shape was not timed
    seconds: float = 0.0                         # wall time the judge spent on this shape (all candidates)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times"] = {k: m.to_dict() for k, m in self.times.items()}
        d["causes"] = [str(c) for c in self.causes]
        return d


# ---------------------------------------------------------------- the wire --------------------------
class MalformedMessage(Exception):
    pass


def dumps(obj: dict) -> bytes:
    return json.dumps(obj, default=str).encode()


def _str(d: dict, key: str, default: str = "") -> str:
    v = d.get(key, default)
    if not isinstance(v, str):
        raise MalformedMessage(f"field {key!r} is not a string")
    return v[:_MAX_STR]


def _num(d: dict, key: str, default=None, kind=(int, float)):
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, kind):
        raise MalformedMessage(f"field {key!r} is not a number")
    return v


def parse_message(raw: bytes) -> dict:
    """A worker message as a dict with checked fields (``op`` first). Raises MalformedMessage."""
    if len(raw) > MAX_MESSAGE:
        raise MalformedMessage(f"message of {len(raw)} bytes")
    try:
        d = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise MalformedMessage(f"not JSON: {e}") from None
    if not isinstance(d, dict) or not isinstance(d.get("op"), str):
        raise MalformedMessage("not an object with an 'op'")
    op = d["op"]
    out: dict = {"op": op, "tampering": _tampering(d)}
    if op in ("error", "setup_error"):
        out["cause"] = Cause.of(_str(d, "cause", "error"))
        out["message"] = _str(d, "message")
        out["where"] = _str(d, "where")
        out["fatal"] = bool(d.get("fatal", False))
        out["log"] = _str(d, "log")
    elif op == "done":
        out["host_ns"] = _num(d, "host_ns", 0)
        r = d.get("returned")
        if r is not None and not isinstance(r, dict):
            raise MalformedMessage("field 'returned' is not an object")
        out["returned"] = {k: str(v)[:200] for k, v in (r or {}).items()}
        out["copied"] = bool(d.get("copied", False))
        out["calls"] = _num(d, "calls", 1, int)
    elif op == "trace":
        out["trace"] = parse_trace(d)
    elif op == "ready":
        loaded = d.get("loaded", [])
        if not isinstance(loaded, list) or len(loaded) > 1000:
            raise MalformedMessage("field 'loaded' is not a list")
        out["loaded"] = [{"path": str(x.get("path", ""))[:1000], "defines": {str(k)[:100]: str(v)[:100] for k, v in
                          (x.get("defines") or {}).items()}} for x in loaded if isinstance(x, dict)]
        out["info"] = {str(k)[:100]: str(v)[:400] for k, v in (d.get("info") or {}).items()}
    elif op in ("ok", "captured"):
        out["message"] = _str(d, "message")
        out["ok"] = bool(d.get("ok", True))
    else:
        raise MalformedMessage(f"unknown op {op[:40]!r}")
    return out


def _tampering(d: dict) -> list[tuple[str, str]]:
    """The worker's record of what its audit hook refused: [(what, file:line)], at most 5."""
    t = d.get("tampering", [])
    if not isinstance(t, list) or len(t) > 20:
        raise MalformedMessage("field 'tampering' is not a short list")
    out = []
    for row in t[:5]:
        if not isinstance(row, list) or len(row) != 2 or not all(isinstance(x, str) for x in row):
            raise MalformedMessage("a tampering row is not [what, where]")
        out.append((row[0][:300], row[1][:300]))
    return out


def tampering_message(rows) -> str:
    """The verdict's sentence for what the audit hook refused."""
    what, where = rows[0]
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    return (f"tampering: your code {what} at {where}{more}. The grading worker refuses frames, the garbage "
            "collector's object lists, trace functions, ctypes and new code objects to a submission: they reach the "
            "process that collects the evidence, not the attention")


def parse_trace(d: dict) -> Trace:
    ks = d.get("kernels", [])
    ops = d.get("ops", [])
    if not isinstance(ks, list) or not isinstance(ops, list) or len(ks) > _MAX_LIST or len(ops) > _MAX_LIST:
        raise MalformedMessage("trace fields are not lists")
    kernels = []
    for row in ks:
        if not isinstance(row, list) or len(row) != 7:
            raise MalformedMessage("a trace row is not [name, stream, count, total_us, registers, shared, bytes]")
        name, *nums = row
        if not isinstance(name, str) or not all((isinstance(x, (int, float)) and not isinstance(x, bool)) or x is None
                                                for x in nums):
            raise MalformedMessage("a trace row has the wrong types")
        stream, count, total, regs, smem, nbytes = nums
        kernels.append(KernelRecord(name[:400], int(stream or 0), int(count or 0), float(total or 0.0),
                                    None if regs is None else int(regs), None if smem is None else int(smem),
                                    None if nbytes is None else int(nbytes)))
    span = _num(d, "span_us")
    return Trace(kernels, [str(o)[:200] for o in ops], bool(d.get("ok", True)), _str(d, "error"),
                 None if span is None else float(span))

