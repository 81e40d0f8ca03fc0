"""Grade a learner's ``attention(q, k, v, *, causal=False)`` for correctness and speed.

    report = grade("01")                         # chapters/01_naive_cuda/attention.py
    report = grade("01", "my_attention.py")      # any file with the same interface
    report = grade("01", solution=True)          # the course's solution

The grader itself never touches the GPU: every task runs in a spawned child process
(:mod:`flashtutor.isolate`), so an illegal memory access, a crash or a hang is a verdict.
Correctness: every shape of the chapter's sets, causal and not, several seeds, NaN-poisoned
outputs, inputs verified unchanged (:mod:`flashtutor.check`). Speed (GPU only): the learner and
SDPA alternately in the child, CUDA events, L2 flushed, median of ≥ 50 reps; the timed output is
checked again; % of the roofline floor on the peaks measured on this GPU.
"""
from __future__ import annotations

import importlib.util
import re
import sys
import traceback
from dataclasses import asdict
from pathlib import Path

from .chapters import Chapter, get_chapter
from .problems import Problem, shape_set
from .report import Report

# Timeouts (seconds). A naive kernel at the largest graded shape takes well under a second;
# these only catch hangs. Compilation with NVRTC takes ~0.1 s; CUTLASS with nvcc takes minutes.
SETUP_TIMEOUT = 300.0
CHECK_TIMEOUT = 120.0
TIME_TIMEOUT = 300.0


class Verdict(Exception):
    def __init__(self, verdict: str, message: str):
        super().__init__(message)
        self.verdict, self.verdict_message = verdict, message


# ---------------------------------------------------------------- child side --------------------
def _problem(d: dict) -> Problem:
    import torch
    d = dict(d)
    d.pop("name", None)
    d["dtype"] = getattr(torch, d.get("dtype", "float16"))
    return Problem(**d)


def _import_file(path: Path):
    name = f"flashtutor_submission_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Verdict("error", f"cannot import {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    return mod


def _where(exc: BaseException, files: list[str]) -> str:
    """The innermost traceback frame inside the learner's files, as 'file:line'."""
    best = ""
    for fr in traceback.extract_tb(exc.__traceback__):
        if any(Path(fr.filename).resolve() == Path(f).resolve() for f in files):
            best = f"{fr.filename}:{fr.lineno}"
    return best


_CUDA_FATAL = (("illegal memory access", "illegal memory access"),
               ("device-side assert", "device-side assert"),
               ("misaligned address", "misaligned address"),
               ("unspecified launch failure", "kernel crashed (unspecified launch failure)"),
               ("illegal instruction", "illegal instruction"),
               ("CUDA_ERROR_ILLEGAL_ADDRESS", "illegal memory access"),
               ("CUDA_ERROR_ASSERT", "device-side assert"),
               ("CUDA_ERROR_LAUNCH_FAILED", "kernel crashed (launch failure)"))


def _exception_result(exc: BaseException, state: dict, problem: Problem) -> dict:
    text = f"{type(exc).__name__}: {exc}".strip()
    where = _where(exc, state["files"])
    verdict, fatal = "error", False
    for needle, name in _CUDA_FATAL:
        if needle in text:
            verdict, fatal = name, True
            break
    else:
        if "out of memory" in text.lower():
            verdict = "out of memory"
        elif type(exc).__name__ == "CompileError":
            verdict = "compile error"
    first = text.splitlines()[0] if text else type(exc).__name__
    msg = f"{verdict}: {first[:400]}" + (f" (raised at {where})" if where else "")
    if fatal:
        msg += (". The CUDA context is lost after this; the remaining cases run in a fresh process. "
                "Find the bad access with `flashtutor grade --sanitize` or compute-sanitizer.")
    return {"kind": "check", "ok": False, "problem": problem.name, "message": msg, "cause": verdict,
            "fatal": fatal, "err": float("inf")}


def grade_setup(setup: dict) -> dict:
    import os
    if setup.get("kind") == "triton" and setup["device"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"   # must be set before triton is imported
    import torch

    from .api import set_poisoning
    from .loaders import CompileError, load_cuda

    set_poisoning(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    path = Path(setup["path"])
    files = [str(path)] + list(setup.get("cuda_files", []))
    info: dict = {"resources": {}}
    for cu in setup.get("cuda_files", []):
        try:
            m = load_cuda(cu, arch=setup.get("arch"))
        except CompileError as e:
            raise Verdict("compile error", str(e)) from None
        info["arch"] = m.arch
        try:
            info["resources"][Path(cu).name] = m.resources()
        except Exception as e:  # the disassembler is optional
            info["resources_error"] = str(e)
    if setup.get("compile_only"):
        return {"info": info}
    from .anticheat import Integrity
    integrity = Integrity()                  # fingerprints taken before any learner code runs
    try:
        mod = _import_file(path)
    except Verdict:
        raise
    except Exception as e:
        where = _where(e, files)
        raise Verdict("import error", f"importing {path.name} raised {type(e).__name__}: {e}"
                      + (f" (at {where})" if where else "")) from None
    fn = getattr(mod, "attention", None)
    if not callable(fn):
        raise Verdict("error", f"{path.name} defines no function attention(q, k, v, *, causal=False)")
    build = getattr(mod, "build", None) if setup.get("kind") == "cutlass" else None
    if callable(build):   # compile the library GEMMs now, under the setup timeout, not in the first check
        try:
            build(verbose=False)
        except NotImplementedError as e:     # the exercise's TODO (gemm_configs) is not written yet
            where = _where(e, files)
            raise Verdict("not implemented", f"{e}" + (f" (at {where})" if where else "")) from None
        except Exception as e:
            if type(e).__name__ == "UnsupportedGPU":
                raise Verdict("unsupported GPU", str(e)) from None
            where = _where(e, files)
            raise Verdict("compile error", f"building the CUTLASS GEMMs of {path.name} failed: "
                          f"{type(e).__name__}: {e}" + (f" (at {where})" if where else "")) from None
    from .env import describe
    info["env"] = describe()
    ref = None
    if setup.get("reference"):
        ref = importlib.import_module(setup["reference"]).attention
    baseline = importlib.import_module(setup["baseline"]).attention if setup.get("baseline") else None
    own = _own_kernels(mod)
    info["own_kernels"] = sorted(own)
    return {"info": info, "fn": fn, "ref": ref, "baseline": baseline, "files": files, "device": setup["device"],
            "peaks": None,
            "integrity": integrity, "mod": mod, "anticheat": setup.get("anticheat", True),
            "allowed_kernels": setup.get("allowed_kernels"), "kind": setup.get("kind")}


def _own_kernels(mod) -> set[str]:
    """The learner's kernel names: those of every .cu loaded in this process (the submission's own
    files, loaded at setup or by its calls) and the @triton.jit functions of its module."""
    from .loaders.nvrtc import LOADED, kernel_names
    own = set()
    for cu in LOADED:
        own |= kernel_names(cu)
    for obj in vars(mod).values():
        if type(obj).__name__ in ("JITFunction", "Autotuner", "Heuristics"):
            inner = obj
            while hasattr(inner, "fn"):
                inner = inner.fn
            own.add(getattr(inner, "__name__", ""))
    own.discard("")
    return own


def grade_task(state: dict, task: dict) -> dict:
    try:
        run = {"check": _run_check, "profile": _run_profile, "time": _run_time}[task["kind"]]
        result = run(state, task)
    except BaseException as e:  # noqa: BLE001 — a verdict, never a dead grader
        result = _exception_result(e, state, _problem(task["problem"]))
    changed = state["integrity"].changed() if state.get("integrity") else []
    if changed:   # nothing measured after this can be trusted; end this process
        return {"kind": task["kind"], "ok": False, "problem": _problem(task["problem"]).name, "cause": "tampering",
                "fatal": True, "message": "the submission replaced what the grader relies on: " + ", ".join(changed)}
    return result


def _scrub(like):
    """Leave a NaN-filled block of the output's size in torch's allocator cache, so an output taken
    with torch.empty_like starts as NaN too (unwritten elements then fail the check)."""
    import torch
    t = torch.empty_like(like)
    t.fill_(float("nan"))
    del t


def _sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def _run_check(state: dict, task: dict) -> dict:
    import torch

    from .api import set_poisoning
    from .check import check_output
    from .problems import reference, sdpa

    p = _problem(task["problem"])
    dev = state["device"]
    q, k, v = p.inputs(task["seed"], dev)
    ref = reference(q, k, v, causal=p.causal)
    sdpa_out = sdpa(q, k, v, causal=p.causal)
    before = [hash_tensor(t) for t in (q, k, v)]
    _scrub(q)
    _sync(dev)
    set_poisoning(True)
    try:
        out = state["fn"](q, k, v, causal=p.causal)
        _sync(dev)
    except BaseException as e:  # noqa: BLE001
        return _exception_result(e, state, p)
    finally:
        set_poisoning(False)
    changed = [n for n, h, t in zip("qkv", before, (q, k, v)) if hash_tensor(t) != h]
    if changed:
        return {"kind": "check", "ok": False, "problem": p.name, "seed": task["seed"], "cause": "inputs modified",
                "message": f"the kernel modified its input(s) {', '.join(changed)}: inputs must stay read-only",
                "err": float("nan")}
    res = check_output(p, q, k, v, out, ref=ref, sdpa_out=sdpa_out, seed=task["seed"])
    if isinstance(out, torch.Tensor) and out.numel() and out.is_floating_point():
        out.fill_(float("nan"))  # if this memory is handed back next call, it is NaN, not an old answer
    d = res.to_dict()
    d["kind"] = "check"
    return d


def hash_tensor(t) -> tuple:
    """A cheap fingerprint of a tensor's contents (sum and sum of squares in fp64, and a sample)."""
    f = t.double()
    return (f.sum().item(), (f * f).sum().item(), f.flatten()[:: max(1, f.numel() // 97)].sum().item())


def _run_profile(state: dict, task: dict) -> dict:
    """One call under torch.profiler: which aten ops and which GPU kernels ran, on which stream."""
    import json
    import os
    import tempfile

    import torch
    from torch.profiler import ProfilerActivity, profile

    from .anticheat import judge_trace

    p = _problem(task["problem"])
    dev = state["device"]
    q, k, v = p.inputs(task["seed"], dev)
    state["fn"](q, k, v, causal=p.causal)          # warm-up: compilation and caches stay out of the trace
    _sync(dev)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev == "cuda" else [])
    marker = torch.zeros(1, device=dev)
    with profile(activities=acts) as prof:
        marker.add_(1)                              # a kernel known to run on the caller's stream
        state["fn"](q, k, v, causal=p.causal)
        _sync(dev)
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(trace)
        with open(trace) as f:
            events = json.load(f).get("traceEvents", [])
    own = _own_kernels(state["mod"])                # asked again: a call may load more .cu files
    aten = [e["name"] for e in events if e.get("cat") == "cpu_op"]
    kernels = [(e["name"], e.get("args", {}).get("stream"))
               for e in sorted(events, key=lambda e: e.get("ts", 0)) if e.get("cat") == "kernel"]
    marker_stream = None
    if kernels and "add" in kernels[0][0].lower():  # the marker ran first: its stream is the caller's
        marker_stream = kernels.pop(0)[1]
    allowed = re.compile(state["allowed_kernels"]) if state.get("allowed_kernels") else None
    problems = judge_trace(aten, kernels, marker_stream if dev == "cuda" else None, own,
                           need_own_kernel=dev == "cuda" and state.get("kind") in ("cuda", "triton"),
                           allowed_kernels=allowed) if state.get("anticheat", True) else []
    return {"kind": "profile", "ok": not problems, "problem": p.name, "seed": task["seed"],
            "cause": "forbidden" if problems else "", "message": "; ".join(problems),
            "kernels": sorted({n[:120] for n, _ in kernels})[:20]}


def _run_time(state: dict, task: dict) -> dict:
    import torch

    from .check import check_output
    from .roofline import datasheet_peaks, measure_peaks, percent_of_floor
    from .timing import compare, graph_times, pinned_sdpa

    import random

    p = _problem(task["problem"])
    q, k, v = p.inputs(task["seed"], "cuda")
    fn = state["fn"]
    backend, sdpa_fn = pinned_sdpa(q, k, v, causal=p.causal)
    fns = {"learner": lambda: fn(q, k, v, causal=p.causal), "sdpa": sdpa_fn}
    if state.get("ref") is not None:
        ref_fn = state["ref"]
        fns["reference"] = lambda: ref_fn(q, k, v, causal=p.causal)
    if state.get("baseline") is not None:    # the earlier chapter's kernel the speed rule compares with
        base_fn = state["baseline"]
        fns["baseline"] = lambda: base_fn(q, k, v, causal=p.causal)
    gen = torch.Generator(device="cuda").manual_seed(task["seed"])
    reps = task.get("reps", 50)
    spot = set(random.Random().sample(range(reps), k=min(3, reps)))   # secret: which calls get re-checked
    kept = []

    def refresh(name, r):
        # New inputs for every timed call (written before the L2 flush, so they are not cached):
        # a kernel that returns an earlier answer, or caches by address, is caught by the re-check.
        for t in (q, k, v):
            t.normal_(generator=gen)

    def keep(name, r, out):
        if name == "learner" and r in spot:
            kept.append((q.clone(), k.clone(), v.clone(), out.clone() if isinstance(out, torch.Tensor) else out))

    stats = compare(fns, reps=reps, before=refresh, after=keep)
    rechecks = [check_output(p, *inp[:3], inp[3], seed=task["seed"]) for inp in kept]
    bad = [r for r in rechecks if not r.ok]
    recheck = bad[0] if bad else (rechecks[0] if rechecks else check_output(p, q, k, v, fns["learner"](), seed=0))
    # A second, short pass with a device-wide synchronize before each end event: work that the
    # kernel left running on another stream is counted there, and not in the first pass.
    synced = compare({"learner": fns["learner"]}, reps=5, warmup=1, device_sync=True)["learner"]
    graph = {}
    if task.get("graph"):
        for name, f in fns.items():
            if name == "baseline":
                continue
            try:
                graph[name] = graph_times(f).to_dict()
            except Exception as e:  # capture can fail (host syncs, allocations)
                graph[name] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    if "baseline" in stats:
        result_extra = {"speedup_vs_baseline": stats["baseline"].median_us / stats["learner"].median_us}
    else:
        result_extra = {}
    if "median_us" in graph.get("learner", {}) and "median_us" in graph.get("sdpa", {}):
        result_extra["graph_ratio"] = graph["learner"]["median_us"] / graph["sdpa"]["median_us"]
    if state["peaks"] is None:
        try:
            state["peaks"] = measure_peaks()
        except Exception:
            state["peaks"] = datasheet_peaks(torch.cuda.get_device_name())
    peaks = state["peaks"]
    floor = peaks.floor_us(p) if peaks else {}
    result = {"kind": "time", "problem": p.name, "problem_dict": p.to_dict(), "backend": backend,
              "stats": {n: s.to_dict() for n, s in stats.items()}, "graph": graph,
              "ratio": stats["learner"].median_us / stats["sdpa"].median_us,
              "recheck_ok": recheck.ok, "recheck_message": recheck.message, "rechecked": len(rechecks),
              "synced_us": synced.median_us,
              "escapes_timer": synced.median_us > 1.5 * stats["learner"].median_us + 30.0,
              "floor": floor, "peaks": asdict(peaks) if peaks else None, **result_extra}
    if floor:
        result["pct_floor"] = {n: percent_of_floor(s.median_us, floor["floor_us"]) for n, s in stats.items()}
        result["below_floor"] = stats["learner"].median_us < 0.9 * floor["floor_us"]
    if result["ratio"] < 0.1:   # 10× faster than SDPA: plausible only after a second look
        q2, k2, v2 = p.inputs(task["seed"] + 1, "cuda")
        again = check_output(p, q2, k2, v2, fn(q2, k2, v2, causal=p.causal), seed=task["seed"] + 1)
        result["suspicious"] = f"{1 / result['ratio']:.0f}× faster than SDPA; re-verified on fresh inputs: " + \
            ("correct" if again.ok else "WRONG — " + again.message)
        if not again.ok:
            result["recheck_ok"], result["recheck_message"] = False, again.message
    return result


# ---------------------------------------------------------------- parent side -------------------
def plan(ch: Chapter, *, sets=None, seeds=None, timing=True, graph=None, device="cuda",
         time_sets=None) -> list[dict]:
    """The list of tasks: correctness cases first, then one profiled call, then timings.

    Seeds are drawn fresh for every grading run (a kernel cannot be tuned to known inputs); the
    report lists them, so a failure can be reproduced.
    """
    import random
    tasks: list[dict] = []
    sets = sets or (("cpu",) if device == "cpu" else ch.check_sets)
    seeds = seeds or ch.seeds
    base_seed = random.SystemRandom().randrange(1 << 30)
    seen = set()
    for s in sets:
        for p in shape_set(s):
            for causal in ((False, True) if ch.causal else (False,)):
                pc = p.replace(causal=causal)
                if pc in seen:
                    continue
                seen.add(pc)
                for seed in range(seeds):
                    tasks.append({"kind": "check", "problem": pc.to_dict(), "seed": base_seed + len(tasks)})
    # The problem for the large-logit cases and the profiled call: the first with a few tiles of keys.
    base = next((p for p in shape_set(sets[0]) if p.S >= 32), shape_set(sets[0])[0])
    if ch.large_logits:
        big = base.replace(qk_std=6.0)    # scores with std 36: exp() overflows fp32 without max subtraction
        tasks.append({"kind": "check", "problem": big.to_dict(), "seed": base_seed + len(tasks)})
        if ch.causal:
            tasks.append({"kind": "check", "problem": big.replace(causal=True).to_dict(), "seed": base_seed + len(tasks)})
    if ch.anticheat:
        tasks.append({"kind": "profile", "problem": base.to_dict(), "seed": base_seed + len(tasks)})
    if timing and device == "cuda":
        for s in time_sets or ch.time_sets:
            for p in shape_set(s):
                tasks.append({"kind": "time", "problem": p.to_dict(), "seed": base_seed + len(tasks),
                              "graph": ch.graph_time if graph is None else graph})
    return tasks


def _gpu_available() -> bool:
    """Whether a CUDA GPU is visible, asked without initialising CUDA in this process."""
    import subprocess
    try:
        r = subprocess.run([sys.executable, "-c", "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                           capture_output=True, timeout=120)
        return r.returncode == 0
    except Exception:
        return False


def grade(chapter, path=None, *, solution: bool = False, device: str | None = None, sets=None, seeds=None,
          timing: bool = True, graph: bool | None = None, reference: bool = False, progress: bool = True,
          time_sets=None, sanitize: bool = False,
          setup_timeout: float = SETUP_TIMEOUT, check_timeout: float = CHECK_TIMEOUT,
          time_timeout: float = TIME_TIMEOUT) -> Report:
    ch = get_chapter(chapter)
    if ch.setup_timeout and setup_timeout == SETUP_TIMEOUT:
        setup_timeout = ch.setup_timeout
    if path is None:
        path = ch.solution_path() if solution else ch.exercise_path()
    path = Path(path).resolve()
    if not path.exists():
        raise FileNotFoundError(f"no submission at {path}")
    if device is None:
        device = "cuda" if _gpu_available() else "cpu"
    compiled = ch.kind in ("cuda", "cutlass")     # the learner writes .cu files (NVRTC)
    cuda_files = sorted(str(f) for f in path.parent.glob(path.stem + "*.cu")) if compiled else []
    if compiled and not cuda_files:
        cuda_files = sorted(str(f) for f in path.parent.glob("*.cu"))
    report = Report(chapter=ch.key, title=ch.title, path=str(path), device=device, excluded=ch.excluded,
                    speed_rule=asdict(ch.speed))
    if ch.anticheat:   # read, never run: safe in this process
        from .anticheat import scan
        report.static = [f.to_dict() for f in scan(path, cuda_files, ch.allowed)]
    compile_only = compiled and device != "cuda"
    tasks = [] if compile_only else plan(ch, sets=sets, seeds=seeds, timing=timing, graph=graph, device=device,
                                         time_sets=time_sets)
    setup = {"path": str(path), "cuda_files": cuda_files, "device": device, "compile_only": compile_only,
             "kind": ch.kind, "anticheat": ch.anticheat, "allowed_kernels": ch.allowed_kernels,
             "reference": ch.reference if reference and device == "cuda" else None,
             "baseline": ch.speed.baseline if ch.speed.min_speedup_vs and timing and device == "cuda" else None}

    from .isolate import Outcome, run_isolated
    first = [t for t in tasks if t["kind"] != "time"]        # correctness and the profiled call
    timed = [t for t in tasks if t["kind"] == "time"]
    bar = _Progress(len(tasks), f"grading {ch.key} · {path.name}") if progress and tasks else None
    timeout_of = lambda t: time_timeout if t["kind"] == "time" else check_timeout  # noqa: E731
    try:
        info, outcomes = run_isolated("flashtutor.grader:grade", setup, first, setup_timeout=setup_timeout,
                                      task_timeout=timeout_of, on_outcome=bar.advance if bar else None)
        correct = all(o.verdict == "ok" and o.result.get("ok") for o in outcomes) and "error" not in info
        if timed and correct:   # timing a wrong kernel tells the learner nothing and costs minutes
            _, more = run_isolated("flashtutor.grader:grade", setup, timed, setup_timeout=setup_timeout,
                                   task_timeout=timeout_of, on_outcome=bar.advance if bar else None)
        else:
            more = [Outcome(i, {"kind": "time", "ok": True, "skipped": True, "problem": _problem(t["problem"]).name},
                            "ok") for i, t in enumerate(timed)]
        outcomes = outcomes + more
        tasks = first + timed
    finally:
        if bar:
            bar.close()
    report.fill(info, tasks, outcomes, compile_only=compile_only, speed=ch.speed, sass=ch.sass)
    if sanitize:
        from .sanitize import sanitize as run_sanitizer
        report.add_sanitizer(run_sanitizer(ch, path))
    return report


class _Progress:
    """A rich progress bar on stderr (a terminal or a notebook), or nothing if rich is missing."""

    def __init__(self, total: int, label: str):
        self.p = None
        from .env import in_notebook_without_widgets
        if in_notebook_without_widgets():   # rich would only warn there, and draw nothing
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), transient=True)
            self.p.start()
            self.t = self.p.add_task(label, total=total)
        except Exception:
            self.p = None

    def advance(self, _outcome):
        if self.p:
            self.p.advance(self.t)

    def close(self):
        if self.p:
            self.p.stop()
