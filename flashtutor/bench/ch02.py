"""Chapter 2 on the GPU in one go: every step checked, then the steps table, then compute-sanitizer.

    flashtutor bench 02 [--out FILE] [--skip sanitize]

1. **checks.** Every step of the chapter (the manifest's, :data:`flashtutor.chapters.STEPS`) and the
   solution file, each on the chapter's check sets, causal and not, with
   :func:`flashtutor.check.check_output` (one line per case). Each step runs in a child process of its
   own, so a step that crashes the CUDA context (an illegal address) cannot take the others with it.
2. **table.** With :func:`flashtutor.bench.steps_table`: chapter 1's reference, steps a, b, c and
   SDPA on the seed and small shapes (and the seed shape causal): time, bytes moved (each step's
   ``bytes_moved``), achieved TB/s, and the speed-up of step c over chapter 1's reference per shape
   (what the chapter's speed rule is calibrated from). Only steps that passed every check are timed.
3. **sanitize.** memcheck, racecheck and synccheck on steps a, b and the solution, on two small
   shapes (partial tiles, both head dims): the barrier placement of the tiled kernels is checked
   on the hardware, not only by reading.

The results file holds ``rows``, ``speedups``, ``resources``, ``checks``, ``check_summary``,
``sanitize`` and ``phases``. The notebook calls :func:`check_steps` and :func:`table` in its own process.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..chapters import ROOT, get_chapter

CH = get_chapter("02")
SOLUTION = CH.solution_path()
PARTS = {"checks": "1. correctness: every step on the seed, small and odd sets, causal and not",
         "table": "2. the steps table (seed and small shapes; the seed shape causal)",
         "sanitize": "3. compute-sanitizer (memcheck, racecheck, synccheck) on two small shapes"}

# The steps of the table, in the order of the chapter (SDPA is added by steps_table).
STEPS = {"ch1 reference": get_chapter("01").step("1a").module, **{s.label: s.module for s in CH.steps}}
# What phase 1 checks: the chapter's steps and the solution file itself.
CHECKED = {**{s.label: s.module for s in CH.steps}, "solution": str(SOLUTION)}
# What phase 3 runs under compute-sanitizer (module files; step c is the solution).
SANITIZED = {**{s.label: s.path for s in CH.steps if not s.solution}, "solution": SOLUTION}
CHECK_SETS = CH.bench.check_sets
MAX_SECONDS_PER_CALL = 1.0
# Seconds per unit of B·H·S²·D, a generous estimate per step: chapter 1's reference took 3.5 ms at
# the seed shape (B·H·S²·D = 1.07e9) on an H200; the tiled steps are far faster than that.
_SECONDS_PER_UNIT = {"ch1 reference": 4e-12, "a coalesced": 4e-12, "b smem tiles": 4e-13, "c online softmax": 4e-13}


def _say(*a):
    print(*a, flush=True)


def load_step(step: str):
    """The ``attention`` of a step: a module path, or a .py file (imported under its own name)."""
    if step.endswith(".py"):
        name = "flashtutor_bench02_" + Path(step).stem
        if name in sys.modules:
            return sys.modules[name].attention, sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, step)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        return mod.attention, mod
    mod = importlib.import_module(step)
    return mod.attention, mod


def check_problems(sets=CHECK_SETS, causal=(False, True)):
    from .tables import problems
    seen, out = set(), []
    for p in problems(*sets, causal=causal):
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def check_steps(names=None, *, sets=CHECK_SETS, causal=(False, True), seed: int = 0, log=_say) -> list[dict]:
    """Check each step on every problem of ``sets`` (causal and not); one line per case. A step
    that raises on one case is reported and the next case runs."""
    import torch

    from ..check import check_output
    names = list(names or CHECKED)
    results = []
    for name in names:
        try:
            fn, _ = load_step(CHECKED.get(name, name))
        except Exception as e:  # a compile error: every case of this step fails with it
            log(f"{name:<17} could not be loaded: {type(e).__name__}: {str(e)[:300]}")
            results.append({"step": name, "problem": "*", "ok": False, "error": f"{type(e).__name__}: {e}"})
            continue
        for p in check_problems(sets, causal):
            row = {"step": name, "problem": p.name}
            try:
                q, k, v = p.inputs(seed, "cuda")
                out = fn(q, k, v, causal=p.causal)
                torch.cuda.synchronize()
                res = check_output(p, q, k, v, out, seed=seed)
                row.update(ok=res.ok, err=res.err, bound=res.bound, message=res.message, cause=res.cause)
                verdict = "ok   " if res.ok else "WRONG"
                log(f"{name:<17} {p.name:<26} {verdict} error {res.err:.2e} (allowed {res.bound:.2e})"
                    + ("" if res.ok else f"  {res.message[:240]}"))
            except Exception as e:
                row.update(ok=False, error=f"{type(e).__name__}: {str(e)[:300]}")
                log(f"{name:<17} {p.name:<26} ERROR {type(e).__name__}: {str(e)[:240]}")
                try:
                    torch.cuda.synchronize()
                except Exception:
                    pass
            results.append(row)
    return results


def table_problems():
    """The chapter's timed sets (seed and small), non-causal, and the seed shape causal."""
    from .tables import problems
    return problems(*CH.bench.time_sets) + problems("seed", causal=(True,))


def skip(name: str, p) -> str | None:
    """Leave a step out of a shape where one call would take more than about a second."""
    est = _SECONDS_PER_UNIT.get(name, 0.0) * p.B * p.H * p.S * p.S * p.D
    if est > MAX_SECONDS_PER_CALL:
        return f"≈{est:.1f} s per call"
    return None


def table(steps=None, probs=None, *, reps: int = 30, max_seconds: float = 10.0, progress: bool = True) -> list[dict]:
    """The steps table (one row per shape and step, plus SDPA)."""
    from .tables import steps_table
    steps = {n: STEPS[n] for n in (steps or STEPS)}
    return steps_table(steps, probs or table_problems(), reps=reps, max_seconds=max_seconds, skip=skip,
                       progress=progress)


def plot_steps(rows: list[dict], env: str = ""):
    """The steps table (:func:`table`) as bars per shape: chapter 1's reference, steps a, b, c and SDPA;
    `env`, the environment line, in the caption under them."""
    from .tables import plot_steps as _plot
    return _plot(rows, ["ch1 reference", "a coalesced", "b smem tiles", "c online softmax", "SDPA"], env=env,
                 title="Chapter 2's steps against SDPA: µs per call, per shape")


def speedups(rows: list[dict], step: str = "c online softmax", over: str = "ch1 reference") -> list[dict]:
    """Per shape: ``over``'s time / ``step``'s time (what the chapter's speed rule is calibrated from)."""
    by = {}
    for r in rows:
        if "median_us" in r:
            by.setdefault(r["problem"], {})[r["step"]] = r["median_us"]
    return [{"problem": p, "speedup": t[over] / t[step], f"{over} us": t[over], f"{step} us": t[step]}
            for p, t in by.items() if step in t and over in t]


def resources() -> dict:
    """Registers, shared memory, spills of every step's kernels, as compiled for this GPU."""
    from ..loaders import load_cuda
    out = {}
    for name, path in ((s.label, s.kernel) for s in CH.steps):
        try:
            out[name] = load_cuda(path).resources()
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


# ---------------------------------------------------------------- the run ------------------------
def _child(args: list[str], timeout: float, log=print) -> tuple[int, float]:
    """Run ``python -m flashtutor.bench.ch02 …`` (one step's checks, or the table) and forward its output
    line by line."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in parts:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + parts)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "flashtutor.bench.ch02", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", env=env)
    killed = []

    def _kill():                      # a child that hangs (or prints nothing) is stopped after `timeout`
        killed.append(True)
        proc.kill()

    watchdog = threading.Timer(timeout, _kill)
    watchdog.start()
    try:
        for line in proc.stdout:
            print("  " + line.rstrip("\n"), flush=True)
        rc = proc.wait()
    finally:
        watchdog.cancel()
    if killed:
        log(f"  (stopped after {timeout:.0f} s)")
    return rc, time.monotonic() - t0


def _read(path: Path, default):
    try:
        return json.loads(path.read_text())
    except Exception:
        return default


def run(r) -> int:
    """``flashtutor bench 02``: the three parts into ``r`` (a :class:`flashtutor.bench.runner.Run`)."""
    passed, summary = [], {}

    def checks():
        out = []
        for name in CHECKED:
            with tempfile.TemporaryDirectory() as tmp:
                res_file = Path(tmp) / "res.json"
                rc, secs = _child(["--check", name, "--result", str(res_file)], timeout=240, log=r.log)
                res = _read(res_file, [])
            ok = bool(res) and all(x.get("ok") for x in res)
            n_ok = sum(1 for x in res if x.get("ok"))
            r.log(f"-> {name}: {'PASS' if ok else 'FAIL'} {n_ok}/{len(res)} cases ({secs:.0f} s, exit code {rc})")
            out += res or [{"step": name, "problem": "*", "ok": False, "error": f"child exit code {rc}, no result"}]
            summary[name] = {"ok": ok, "passed": n_ok, "cases": len(res)}
            if ok:
                passed.append(name)
        r.doc["check_summary"] = summary
        return out
    r.part("checks", checks, store="checks")

    def timed_table():
        timed = [n for n in STEPS if n == "ch1 reference" or "checks" in r.skipped or n in passed]
        left_out = [n for n in STEPS if n not in timed]
        if left_out:
            r.log(f"   not timed (failed a check): {', '.join(left_out)}")
        with tempfile.TemporaryDirectory() as tmp:
            res_file = Path(tmp) / "table.json"
            rc, _ = _child(["--table", "--result", str(res_file), "--steps", "|".join(timed)], timeout=420,
                           log=r.log)
            r.doc.update(_read(res_file, {}))
        r.doc["table_exit_code"] = rc
        if rc:
            raise RuntimeError(f"the table's child process ended with exit code {rc}")
    r.part("table", timed_table)

    def sanitize_all():
        from concurrent.futures import ThreadPoolExecutor

        from ..grading.sanitize import format_findings, sanitize

        def one(item):           # each call runs its three tools in parallel child processes
            name, path = item
            try:
                return name, sanitize("02", path, timeout=150)
            except Exception as e:
                return name, {"verdict": "not run", "summary": f"{type(e).__name__}: {e}", "tools": {}}

        with ThreadPoolExecutor(len(SANITIZED)) as ex:
            found = dict(ex.map(one, SANITIZED.items()))
        for name, res in found.items():
            r.log(f"-> {name}")
            r.log("   " + format_findings(res).replace("\n", "\n   "))
        return found
    sanitized = r.part("sanitize", sanitize_all, store="sanitize") or {}

    for name, s in summary.items():
        r.log(f"   {name:<17} {'PASS' if s['ok'] else 'FAIL'} {s['passed']}/{s['cases']}")
    for name, res in sanitized.items():
        r.log(f"   {name:<17} sanitizer: {res.get('verdict')}")
    all_ok = all(s["ok"] for s in summary.values()) and not r.doc.get("table_exit_code") and \
        all(res.get("verdict") in ("clean",) for res in sanitized.values())
    return 0 if all_ok else 1


def _child_main(argv=None) -> int:
    """The child processes of :func:`run` (not a command of its own: ``flashtutor bench 02`` runs them)."""
    ap = argparse.ArgumentParser(prog="python -m flashtutor.bench.ch02")
    ap.add_argument("--check", metavar="STEP", help="check one step")
    ap.add_argument("--table", action="store_true", help="the steps table")
    ap.add_argument("--steps", help="the table's steps, separated by |")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--result", required=True, help="where the child writes its JSON")
    a = ap.parse_args(argv)
    if a.check:                                                  # ---- phase 1, one step
        res = check_steps([a.check])
        Path(a.result).write_text(json.dumps(res, default=str))
        return 0 if all(x.get("ok") for x in res) else 1
    if not a.table:
        ap.error("give --check STEP or --table (the whole run is `flashtutor bench 02`)")
    from ..env import describe_line                              # ---- phase 2
    from .tables import markdown
    rows = table(a.steps.split("|") if a.steps else None, reps=a.reps, progress=False)
    sp = speedups(rows)
    Path(a.result).write_text(json.dumps({"rows": rows, "speedups": sp, "resources": resources()}, default=str))
    _say(markdown(rows))
    _say(f"\n{describe_line()}")
    if sp:
        lo = min(sp, key=lambda x: x["speedup"])
        _say("\nspeed-up of step c over chapter 1's reference (its time / step c's time):")
        for x in sp:
            _say(f"  {x['problem']:<26} {x['speedup']:8.1f}×")
        _say(f"  smallest: {lo['speedup']:.1f}× at {lo['problem']}")
    return 0


if __name__ == "__main__":
    sys.exit(_child_main())
