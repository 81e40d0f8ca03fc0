"""Chapter 3's measurements on a GPU, in one go: ``flashtutor bench 03 [--out FILE] [--skip ncu]``.

1. correctness of steps a, b, c (the manifest's, :data:`flashtutor.chapters.STEPS`) on the seed, small,
   odd and large sets, causal and not (and the seed shape with large logits), one line per case;
2. the steps table — chapter 1's reference, chapter 2's online softmax (if that module exists), the
   three wmma steps and SDPA — on the seed shape (causal and not) and the small set, then the three
   wmma steps and SDPA on the large set; saved as ``rows``, printed as markdown;
3. if ``ncu`` (Nsight Compute) is on PATH, the shared-memory bank conflicts of steps a, b, c at the
   seed shape, to ``ncu03-<gpu>-<date>.txt`` beside the results file (raw) and under ``ncu`` (parsed).
   Optional: never fatal.

A failing part is printed and the run goes on; the JSON is rewritten after every part. The notebook
uses the same functions: :func:`step_modules`, :func:`steps_table`, :func:`ncu_bank_conflicts`.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..chapters import ROOT, get_chapter, step
from ..docs import table as markdown_table

CH = get_chapter("03")
WMMA_STEPS = {s.label: s.module for s in CH.steps}
EARLIER = {   # earlier chapters' references, timed where they take less than NAIVE_LIMIT_S per call
    "ch1 reference": step("1a").module,
    "ch2 online softmax": step("2c").module,
}
PARTS = {"resources": "resources (registers, spills, shared memory)",
         "checks": "correctness: steps a, b, c on seed, small, odd, large",
         "peaks": "peaks (copy bandwidth, fp16 matmul)",
         "table": "steps table: seed (causal and not) and small",
         "large": "steps table: large (the wmma steps only)",
         "ncu": "ncu: shared-memory bank conflicts at the seed shape"}
NAIVE_LIMIT_S = 0.5
NCU_METRICS = (   # the brief's two counters first; the others are extras, dropped if this ncu lacks them
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
)
NCU_EXTRA = (
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",     # all shared-load passes, conflicts included
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "sm__sass_l1tex_data_bank_conflicts_pipe_lsu_mem_shared_op_ldsm.sum",   # ldmatrix = load_matrix_sync
    "gpu__time_duration.sum",
)
NCU_LABELS = {
    NCU_METRICS[0]: "ld bank conflicts", NCU_METRICS[1]: "st bank conflicts",
    NCU_EXTRA[0]: "ld wavefronts", NCU_EXTRA[1]: "st wavefronts",
    NCU_EXTRA[2]: "ldmatrix conflicts (SASS)", NCU_EXTRA[3]: "time under ncu (ns)",
}


def step_modules(*, earlier: bool = True, log=print) -> dict[str, str]:
    """Label → module of every step that imports here (chapter 2's is optional: written separately)."""
    steps = {}
    for label, mod in ({**EARLIER, **WMMA_STEPS} if earlier else WMMA_STEPS).items():
        try:
            importlib.import_module(mod)
            steps[label] = mod
        except Exception as e:   # a missing or broken module leaves its column out, it does not stop the table
            log(f"  left out {label} ({mod}): {type(e).__name__}: {str(e)[:160]}")
    return steps


def _slow_skip(steps: dict, limit_s: float = NAIVE_LIMIT_S):
    """A ``skip(name, problem)`` for steps_table: leave an earlier chapter's kernel out of a shape where
    one call takes longer than ``limit_s`` (timed once, after a warm-up call that also compiles it)."""
    import torch
    cache: dict = {}

    def skip(name, p):
        if name not in EARLIER:
            return None
        key = (name, p.name)
        if key not in cache:
            why = None
            try:
                fn = importlib.import_module(steps[name]).attention
                q, k, v = p.inputs(0, "cuda")
                t0 = time.perf_counter()
                fn(q, k, v, causal=p.causal)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                if first < 20 * limit_s:         # the first call includes the compile; time a second one
                    t0 = time.perf_counter()
                    fn(q, k, v, causal=p.causal)
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t0
                else:
                    dt = first
                if dt > limit_s:
                    why = f"{dt:.2f} s per call (> {limit_s} s)"
            except Exception:                     # let steps_table run it and report the error
                torch.cuda.synchronize()
            cache[key] = why
        return cache[key]
    return skip


def steps_table(sets=("seed", "small"), *, causal_seed: bool = True, earlier: bool = True, peaks=None,
                reps: int = 30, progress: bool = True, log=print) -> list[dict]:
    """Rows of :func:`flashtutor.bench.steps_table` for chapter 3's steps on the given shape sets
    (non-causal; the seed shape also causal when ``causal_seed``)."""
    from . import tables
    probs = []
    for s in sets:
        probs += tables.problems(s, causal=(False, True) if (s == "seed" and causal_seed) else (False,))
    steps = step_modules(earlier=earlier, log=log)
    return tables.steps_table(steps, probs, reps=reps, peaks=peaks, progress=progress,
                             skip=_slow_skip(steps) if earlier else None)


def plot_steps(rows: list[dict], env: str = ""):
    """The steps table (:func:`steps_table`) as bars per shape: chapters 1 and 2, steps a, b, c, SDPA;
    `env`, the environment line, in the caption under them."""
    from .tables import plot_steps as _plot
    order = ["ch1 reference", "ch2 online softmax", "a wmma", "b + cp.async", "c + padding", "SDPA"]
    colors = dict(zip(order, ("#888888", "#3c9a5f", "#cf6a2e", "#d9a632", "#8a5cc2", "#2e6fcf")))
    return _plot(rows, order, env=env, colors=colors,
                 title="Chapter 3's WMMA steps against SDPA: µs per call, per shape")


def check_all(sets=CH.bench.check_sets, *, log=print) -> list[dict]:
    """Every wmma step on every shape of ``sets``, causal and not, plus large logits at the seed shape.
    The output buffers are NaN-filled (as under the grader); q, k, v and the reference are made once
    per shape and shared by the steps."""
    import torch

    from ..api import set_poisoning
    from ..check import check_output
    from ..problems import reference, sdpa, shape_set

    fns = {}
    for label, mod in WMMA_STEPS.items():
        try:
            fns[label] = importlib.import_module(mod).attention
        except Exception as e:
            log(f"  {label}: import failed: {type(e).__name__}: {e}")
    cases = [p for s in sets for p in shape_set(s)]
    cases.append(shape_set("seed")[0].replace(qk_std=6.0))   # scores of std 36: exp overflows without the max
    out, seen = [], set()
    set_poisoning(True)
    try:
        for p0 in cases:
            if p0 in seen:
                continue
            seen.add(p0)
            q, k, v = p0.inputs(1, "cuda")
            for causal in (False, True):
                p = p0.replace(causal=causal)
                ref = reference(q, k, v, causal=causal)
                ref_sdpa = sdpa(q, k, v, causal=causal)
                for label, fn in fns.items():
                    rec = {"step": label, "problem": p.name}
                    try:
                        o = fn(q, k, v, causal=causal)
                        torch.cuda.synchronize()
                        r = check_output(p, q, k, v, o, ref=ref, sdpa_out=ref_sdpa, seed=1)
                        rec.update(ok=r.ok, err=r.err, bound=r.bound, message=r.message)
                    except Exception as e:
                        rec.update(ok=False, message=f"{type(e).__name__}: {str(e)[:300]}")
                        try:
                            torch.cuda.synchronize()
                        except Exception:
                            pass
                    out.append(rec)
                    mark = "ok  " if rec["ok"] else "FAIL"
                    detail = f"err {rec['err']:.2e} ≤ {rec['bound']:.2e}" if rec["ok"] else rec["message"][:300]
                    log(f"  {mark} {label:14s} {p.name:32s} {detail}")
                del ref, ref_sdpa
            del q, k, v
            torch.cuda.empty_cache()
    finally:
        set_poisoning(False)
    return out


def resources() -> dict:
    """Registers, spills and shared memory of every kernel of the three steps (from the cubin)."""
    from ..loaders import load_cuda
    res = {}
    for label, mod in WMMA_STEPS.items():
        m = importlib.import_module(mod)
        r = load_cuda(m.SOURCE).resources()
        for name, v in r.items():
            v = {k2: v[k2] for k2 in ("registers", "spill_instructions", "stack_bytes") if k2 in v}
            v["dynamic_shared_bytes"] = m.shared_bytes(128 if name.endswith("128") else 64)
            res[f"{label}: {name}"] = v
    return res


# ---------------------------------------------------------------- Nsight Compute ----------------
def _ncu_target() -> None:
    """What ncu profiles: one call of each wmma step at the seed shape (after a warm-up that compiles)."""
    import torch

    from ..problems import shape_set
    p = shape_set("seed")[0]
    q, k, v = p.inputs(0, "cuda")
    for label, mod in WMMA_STEPS.items():
        fn = importlib.import_module(mod).attention
        fn(q, k, v)
        torch.cuda.synchronize()
    print("ncu target done", flush=True)


def _parse_ncu_csv(text: str) -> dict:
    """{kernel name: {metric: value}} from ``ncu --csv`` output (the last launch of each kernel)."""
    import csv
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if not lines:
        return {}
    out: dict = {}
    for row in csv.DictReader(lines):
        name, metric, value = row.get("Kernel Name"), row.get("Metric Name"), row.get("Metric Value")
        if not name or not metric:
            continue
        try:
            val = float(value.replace(",", ""))
        except (AttributeError, ValueError):
            val = value
        out.setdefault(name, {})[metric] = val
    return out


def ncu_bank_conflicts(out_txt=None, *, timeout: float = 120.0, log=print) -> dict:
    """Profile :func:`_ncu_target` under ncu (``--clock-control none``); returns {"kernels": {...}} or
    {"error": ...}. Tries all metrics first, then only the two bank-conflict counters."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return {"error": "ncu (Nsight Compute) is not on PATH"}
    deadline = time.monotonic() + timeout
    raw, result = [], {"error": "ncu gave no metrics"}
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for metrics, extra in ((NCU_METRICS + NCU_EXTRA, ["--print-units", "base"]), (NCU_METRICS, [])):
        left = deadline - time.monotonic()
        if left < 10:
            break
        cmd = [ncu, "--clock-control", "none", "-k", "regex:^wmma_", "--csv", *extra,
               "--metrics", ",".join(metrics), sys.executable, "-m", "flashtutor.bench.ch03", "--ncu-target"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=left, cwd=ROOT, env=env)
            text = r.stdout + "\n" + r.stderr
            raw.append("$ " + " ".join(cmd) + f"\n(exit {r.returncode})\n" + text)
            kernels = _parse_ncu_csv(r.stdout)
            if kernels:
                result = {"kernels": kernels, "metrics": list(metrics), "command": " ".join(cmd)}
                break
            result = {"error": f"ncu exit {r.returncode}: " + (text.strip().splitlines() or ["no output"])[-1][:300]}
        except subprocess.TimeoutExpired:
            raw.append("$ " + " ".join(cmd) + "\n(timed out)")
            result = {"error": f"ncu timed out after {timeout:.0f} s"}
            break
        except Exception as e:
            raw.append("$ " + " ".join(cmd) + f"\n{type(e).__name__}: {e}")
            result = {"error": f"{type(e).__name__}: {e}"}
            break
    if out_txt:
        Path(out_txt).write_text("\n\n".join(raw) + "\n")
    return result


def ncu_table(result: dict) -> str:
    """The bank-conflict counters per kernel as a fixed-width table (or the reason there are none)."""
    if "kernels" not in result:
        return f"no ncu numbers: {result.get('error')}"
    metrics = result["metrics"]
    short = {m: NCU_LABELS.get(m, m) for m in metrics}
    lines = [f"{'kernel':<22}" + "".join(f"{short[m]:>26}" for m in metrics)]
    for name, vals in result["kernels"].items():
        cells = []
        for m in metrics:
            v = vals.get(m, "—")
            cells.append(f"{v:>26,.0f}" if isinstance(v, float) else f"{str(v):>26}")
        lines.append(f"{name:<22}" + "".join(cells))
    return "\n".join(lines)


def ncu_markdown(result: dict) -> str:
    """:func:`ncu_table` as a Markdown table (what the notebook displays: one column per counter fits the page)."""
    if "kernels" not in result:
        return f"no ncu numbers: {result.get('error')}"
    metrics = result["metrics"]
    rows = [[name] + [f"{vals[m]:,.0f}" if isinstance(vals.get(m), float) else vals.get(m) for m in metrics]
            for name, vals in result["kernels"].items()]
    return markdown_table(["kernel"] + [NCU_LABELS.get(m, m) for m in metrics], rows)


# ---------------------------------------------------------------- the whole run ----------------
def run(r) -> int:
    """``flashtutor bench 03``: the parts into ``r`` (a :class:`flashtutor.bench.runner.Run`)."""
    from ..roofline import basis_peaks, measure_peaks, reached_line
    from .tables import markdown

    rows: list = []
    r.doc["rows"] = rows
    res = r.part("resources", resources, store="resources") or {}
    for k, v in res.items():
        r.log(f"  {k:40s} {v}")
    checks = r.part("checks", lambda: check_all(log=r.log), store="checks") or []
    n_bad = sum(1 for c in checks if not c["ok"])
    r.log(f"  {len(checks) - n_bad} of {len(checks)} cases correct")
    reached = r.part("peaks", measure_peaks)          # what a GEMM and a copy reach: recorded, not the basis
    if reached is not None:
        r.doc["reached"] = asdict(reached)
        r.log(f"  {reached_line(reached)}")
        r.save()
    peaks = basis_peaks(reached.name) if reached is not None else None   # the floors' basis: the datasheet
    r.doc["peaks"] = asdict(peaks) if peaks else None
    sets = CH.bench.time_sets
    rows += r.part("table", lambda: steps_table(tuple(s for s in sets if s != "large"), peaks=peaks, progress=False,
                                                log=r.log)) or []
    r.save()
    if "large" in sets:
        rows += r.part("large", lambda: steps_table(("large",), earlier=False, causal_seed=False, peaks=peaks,
                                                    progress=False, log=r.log)) or []
        r.save()
    print(markdown(rows), flush=True)
    found = r.part("ncu", lambda: ncu_bank_conflicts(r.side("ncu03", ".txt"), log=r.log), store="ncu")
    if found is not None:
        print(ncu_table(found), flush=True)
    if n_bad:
        r.log(f"{n_bad} correctness failures")
    return 1 if n_bad else 0


if __name__ == "__main__":        # the process ncu profiles (ncu_bank_conflicts starts it)
    if sys.argv[1:] != ["--ncu-target"]:
        sys.exit("python -m flashtutor.bench.ch03 --ncu-target: the process ncu profiles; "
                 "the chapter's run is `flashtutor bench 03`")
    _ncu_target()
