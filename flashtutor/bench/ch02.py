"""Chapter 2 on the GPU in one go: every step checked, then the steps table, then compute-sanitizer.

    python -m flashtutor.kernels.bench02 OUT_DIR [--reps N] [--no-sanitize]

1. **Checks.** Steps a, b, c and the solution file, each on the seed, small and odd shape sets,
   causal and not, with :func:`flashtutor.check.check_output` (one line per case). Each step runs in
   a child process of its own, so a step that crashes the CUDA context (an illegal address) cannot
   take the others with it.
2. **Table.** With :func:`flashtutor.bench.steps_table`: chapter 1's reference, steps a, b, c and
   SDPA on the seed and small shapes (and the seed shape causal): time, bytes moved (each step's
   ``bytes_moved``), achieved TB/s. Saved with :func:`flashtutor.bench.save` to OUT_DIR/bench02.json
   and printed as markdown, with the speed-up of step c over chapter 1's reference per shape (what
   the chapter's speed rule is calibrated from). Only steps that passed every check are timed.
3. **Sanitizer.** memcheck, racecheck and synccheck on steps a, b and the solution, on two small
   shapes (partial tiles, both head dims): the barrier placement of the tiled kernels is checked
   on the hardware, not only by reading.

The notebook calls :func:`check_steps` and :func:`table` in its own process.
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

from ..chapters import ROOT

SOLUTION = ROOT / "solutions" / "02_tiling" / "attention.py"

# The steps of the table, in the order of the chapter (SDPA is added by steps_table).
STEPS = {
    "ch1 reference": "flashtutor.kernels.k01_naive_three_pass",
    "a coalesced": "flashtutor.kernels.k02a_coalesced",
    "b smem tiles": "flashtutor.kernels.k02b_smem_tiles",
    "c online softmax": "flashtutor.kernels.k02c_online_softmax",
}
# What phase 1 checks: the chapter's steps and the solution file itself.
CHECKED = {
    "a coalesced": "flashtutor.kernels.k02a_coalesced",
    "b smem tiles": "flashtutor.kernels.k02b_smem_tiles",
    "c online softmax": "flashtutor.kernels.k02c_online_softmax",
    "solution": str(SOLUTION),
}
# What phase 3 runs under compute-sanitizer (module files; step c is the solution).
SANITIZED = {
    "a coalesced": ROOT / "flashtutor" / "kernels" / "k02a_coalesced.py",
    "b smem tiles": ROOT / "flashtutor" / "kernels" / "k02b_smem_tiles.py",
    "solution": SOLUTION,
}
CHECK_SETS = ("seed", "small", "odd")
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
    from ..bench import problems
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
    """The seed and small shapes, non-causal, and the seed shape causal."""
    from ..bench import problems
    return problems("seed", "small") + problems("seed", causal=(True,))


def skip(name: str, p) -> str | None:
    """Leave a step out of a shape where one call would take more than about a second."""
    est = _SECONDS_PER_UNIT.get(name, 0.0) * p.B * p.H * p.S * p.S * p.D
    if est > MAX_SECONDS_PER_CALL:
        return f"≈{est:.1f} s per call"
    return None


def table(steps=None, probs=None, *, reps: int = 30, max_seconds: float = 10.0, progress: bool = True) -> list[dict]:
    """The steps table (one row per shape and step, plus SDPA)."""
    from ..bench import steps_table
    steps = {n: STEPS[n] for n in (steps or STEPS)}
    return steps_table(steps, probs or table_problems(), reps=reps, max_seconds=max_seconds, skip=skip,
                       progress=progress)


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
    for name, path in (("a coalesced", ROOT / "flashtutor/kernels/k02a_coalesced.cu"),
                       ("b smem tiles", ROOT / "flashtutor/kernels/k02b_smem_tiles.cu"),
                       ("c online softmax", SOLUTION.with_name("attention.cu"))):
        try:
            out[name] = load_cuda(path).resources()
        except Exception as e:
            out[name] = {"error": f"{type(e).__name__}: {e}"}
    return out


# ---------------------------------------------------------------- the script ---------------------
def _child(args: list[str], timeout: float) -> tuple[int, float]:
    """Run ``python -m flashtutor.kernels.bench02 …`` and forward its output line by line."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(ROOT) not in parts:
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + parts)
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "flashtutor.kernels.bench02", *args], stdout=subprocess.PIPE,
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
        _say(f"  (stopped after {timeout:.0f} s)")
    return rc, time.monotonic() - t0


def _read(path: Path, default):
    try:
        return json.loads(path.read_text())
    except Exception:
        return default


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flashtutor.kernels.bench02", description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", nargs="?", help="where bench02.json goes")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--no-sanitize", action="store_true")
    ap.add_argument("--check", metavar="STEP", help=argparse.SUPPRESS)      # child: check one step
    ap.add_argument("--table", action="store_true", help=argparse.SUPPRESS)  # child: the table
    ap.add_argument("--steps", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.check:                                                  # ---- child: phase 1, one step
        res = check_steps([a.check])
        Path(a.result).write_text(json.dumps(res, default=str))
        return 0 if all(r.get("ok") for r in res) else 1
    if a.table:                                                  # ---- child: phase 2
        from ..bench import markdown, save
        from ..env import describe_line
        steps = a.steps.split("|") if a.steps else None
        rows = table(steps, reps=a.reps, progress=False)
        sp = speedups(rows)
        doc = save(rows, Path(a.out_dir) / "bench02.json", speedups=sp, resources=resources())
        _say(markdown(rows))
        _say(f"\n{describe_line()}")
        if sp:
            lo = min(sp, key=lambda s: s["speedup"])
            _say("\nspeed-up of step c over chapter 1's reference (its time / step c's time):")
            for s in sp:
                _say(f"  {s['problem']:<26} {s['speedup']:8.1f}×")
            _say(f"  smallest: {lo['speedup']:.1f}× at {lo['problem']}")
        return 0 if doc else 1

    if not a.out_dir:
        ap.error("OUT_DIR is required")
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    summary: dict = {"checks": {}, "phases": {}}

    _say("== 1. correctness: every step on the seed, small and odd sets, causal and not")
    passed = []
    checks = []
    for name in CHECKED:
        with tempfile.TemporaryDirectory() as tmp:
            res_file = Path(tmp) / "res.json"
            rc, secs = _child(["--check", name, "--result", str(res_file)], timeout=240)
            res = _read(res_file, [])
        ok = bool(res) and all(r.get("ok") for r in res)
        n_ok = sum(1 for r in res if r.get("ok"))
        _say(f"-> {name}: {'PASS' if ok else 'FAIL'} {n_ok}/{len(res)} cases ({secs:.0f} s, exit code {rc})")
        checks += res or [{"step": name, "problem": "*", "ok": False, "error": f"child exit code {rc}, no result"}]
        summary["checks"][name] = {"ok": ok, "passed": n_ok, "cases": len(res)}
        if ok:
            passed.append(name)
    (out / "bench02-checks.json").write_text(json.dumps(checks, indent=1, default=str))
    summary["phases"]["checks_s"] = round(time.monotonic() - t_start, 1)

    _say("\n== 2. the steps table (seed and small shapes; the seed shape causal)")
    t2 = time.monotonic()
    timed = [n for n in STEPS if n == "ch1 reference" or n in passed]
    left_out = [n for n in STEPS if n not in timed]
    if left_out:
        _say(f"   not timed (failed a check): {', '.join(left_out)}")
    rc, secs = _child(["--table", str(out), "--steps", "|".join(timed), "--reps", str(a.reps)], timeout=420)
    summary["phases"]["table_s"] = round(time.monotonic() - t2, 1)
    summary["table_exit_code"] = rc

    sanitize_results = {}
    if not a.no_sanitize:
        _say("\n== 3. compute-sanitizer (memcheck, racecheck, synccheck) on two small shapes")
        from concurrent.futures import ThreadPoolExecutor

        from ..sanitize import format_findings, sanitize
        t3 = time.monotonic()

        def one(item):           # each call runs its three tools in parallel child processes
            name, path = item
            try:
                return name, sanitize("02", path, timeout=150)
            except Exception as e:
                return name, {"verdict": "not run", "summary": f"{type(e).__name__}: {e}", "tools": {}}

        with ThreadPoolExecutor(len(SANITIZED)) as ex:
            sanitize_results = dict(ex.map(one, SANITIZED.items()))
        for name, r in sanitize_results.items():
            _say(f"-> {name}")
            _say("   " + format_findings(r).replace("\n", "\n   "))
        _say(f"   ({time.monotonic() - t3:.0f} s)")
        summary["phases"]["sanitize_s"] = round(time.monotonic() - t3, 1)

    doc = _read(out / "bench02.json", {})
    doc.update(checks=checks, check_summary=summary["checks"], sanitize=sanitize_results, phases=summary["phases"])
    (out / "bench02.json").write_text(json.dumps(doc, indent=1, default=str))
    total = time.monotonic() - t_start
    _say(f"\n== done in {total:.0f} s: {out / 'bench02.json'}")
    for name, s in summary["checks"].items():
        _say(f"   {name:<17} {'PASS' if s['ok'] else 'FAIL'} {s['passed']}/{s['cases']}")
    if sanitize_results:
        for name, r in sanitize_results.items():
            _say(f"   {name:<17} sanitizer: {r.get('verdict')}")
    all_ok = all(s["ok"] for s in summary["checks"].values()) and rc == 0 and \
        all(r.get("verdict") in ("clean",) for r in sanitize_results.values())
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
