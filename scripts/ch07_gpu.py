"""Chapter 7 on a Hopper GPU, in one go (written on a CPU machine; meant to be run on an H100/H200):

    PYTHONPATH=$PWD OUT=/some/dir python scripts/ch07_gpu.py            # everything (< 4 min on an H100)
    PYTHONPATH=$PWD python scripts/ch07_gpu.py --steps 7a --no-time      # one step, correctness only

1. probes (flashtutor/kernels/k07_probes.py): the TMA 128-byte swizzle image, wgmma with K-major and
   MN-major descriptors, the accumulator and A-fragment layouts — each alone, so a failure names the
   broken assumption;
2. per step (k07a, k07b, k07c if present): registers/spills per kernel; correctness against the fp32
   reference with NaN-poisoned outputs (flashtutor.check.check_output: per-row error ≤ 2× SDPA's + 1 fp16
   ulp) on B2 H3 S113, B3 H2 S1023, B1 H16 S1024 at D64 and B2 H3 S113, B1 H2 S1023 at D128, causal and
   not, plus large logits (q, k × 6); inputs checked unchanged; then timing with triton's do_bench
   (median, L2 flushed) against SDPA (cuDNN backend pinned where available) at B4 H32 S4096,
   B2 H32 S8192, B2 H32 S16384 for D128 and D64, causal and not, and the seed shape B1 H16 S1024 D64;
3. the exercise stub (chapters/07_hopper): it must come back at once with an all-NaN output.

Every step runs in its own subprocess with a time limit: an illegal address poisons a CUDA context
and a wrong barrier phase hangs, and either must not stop the others. Results go to $OUT/ch07.json
(OUT defaults to the current directory), rewritten after each part; a compact table is printed last.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STEPS = {   # step → module (left out when its file is missing)
    "7a": "flashtutor.kernels.k07a_wgmma_tma",
    "7b": "flashtutor.kernels.k07b_warp_specialized",
    "7c": "flashtutor.kernels.k07c_pingpong",
}
CHECK_SHAPES = [(2, 3, 113, 64), (3, 2, 1023, 64), (1, 16, 1024, 64), (2, 3, 113, 128), (1, 2, 1023, 128)]
LARGE_LOGITS = [(1, 2, 1023, 64), (1, 2, 1023, 128)]          # q, k × 6: logits ×36
TIME_SHAPES = [(4, 32, 4096, 128), (2, 32, 8192, 128), (2, 32, 16384, 128),
               (4, 32, 4096, 64), (2, 32, 8192, 64), (2, 32, 16384, 64), (1, 16, 1024, 64)]
LIMITS = {"probes": 120, "step": 150, "stub": 90}             # seconds per subprocess
BUDGET_S = 230                                                 # stop starting new timing work after this


# ================================================================ worker side (one subprocess) =====
def _emit(**rec):
    print("@@" + json.dumps(rec, default=str), flush=True)


def _context_alive() -> bool:
    """False once the CUDA context is lost (an illegal address or instruction poisons it for good)."""
    import torch
    try:
        torch.cuda.synchronize()
        torch.zeros(1, device="cuda").add_(1).item()
        return True
    except Exception:
        return False


def _timing_inputs(p):
    """Random q, k, v made on the GPU (the CPU generator of Problem.inputs takes seconds at S = 16384)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(0)
    return tuple(torch.randn(p.shape, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))


def work_probes():
    from flashtutor.kernels import k07_probes
    for name, fn in k07_probes.PROBES.items():
        t0 = time.time()
        try:
            res = fn()
        except Exception as e:
            res = f"error: {type(e).__name__}: {str(e)[:300]}"
        _emit(kind="probe", name=name, result=res, s=round(time.time() - t0, 2))


def work_step(module: str, do_check: bool, do_time: bool, deadline: float):
    import torch
    import triton.testing

    from flashtutor.api import set_poisoning
    from flashtutor.check import check_output
    from flashtutor.loaders import load_cuda
    from flashtutor.problems import Problem

    mod = importlib.import_module(module)
    try:
        res = load_cuda(mod.SOURCE, arch="sm_90a").resources()
        _emit(kind="resources", kernels={k: {f: v.get(f) for f in ("registers", "spill_instructions", "local_bytes",
                                                                   "stack_bytes", "instructions")}
                                         | {"HGMMA": v.get("opcodes", {}).get("HGMMA", 0),
                                            "UTMALDG": v.get("opcodes", {}).get("UTMALDG", 0)}
                                         for k, v in res.items()})
    except Exception as e:
        _emit(kind="resources", error=f"{type(e).__name__}: {str(e)[:300]}")

    if do_check:
        set_poisoning(True)
        cases = [(Problem(*s, causal=c), 0) for s in CHECK_SHAPES for c in (False, True)]
        cases += [(Problem(*s, causal=c, qk_std=6.0), 0) for s in LARGE_LOGITS for c in (False, True)]
        cases += [(Problem(2, 3, 113, 64, causal=True), 1), (Problem(2, 3, 113, 128), 1)]   # a second seed
        for p, seed in cases:
            t0 = time.time()
            try:
                q, k, v = p.inputs(seed, "cuda")
                before = [t.clone() for t in (q, k, v)]
                out = mod.attention(q, k, v, causal=p.causal)
                torch.cuda.synchronize()
                r = check_output(p, q, k, v, out, seed=seed)
                unchanged = all(torch.equal(a, b) for a, b in zip(before, (q, k, v)))
                _emit(kind="check", problem=p.name, ok=bool(r.ok and unchanged), err=r.err, bound=r.bound,
                      sdpa_err=r.sdpa_err, max_err=r.max_err, cause=r.cause if unchanged else "inputs changed",
                      message=r.message[:300], s=round(time.time() - t0, 2))
            except Exception as e:
                _emit(kind="check", problem=p.name, ok=False, cause="error",
                      message=f"{type(e).__name__}: {str(e)[:300]}", s=round(time.time() - t0, 2))
                if not _context_alive():
                    _emit(kind="fatal", error="the CUDA context is lost; later cases of this step were not run")
                    return
        set_poisoning(False)

    if do_time:
        from flashtutor.timing import graph_times, pinned_sdpa
        for shape in TIME_SHAPES:
            for causal in (False, True):
                p = Problem(*shape, causal=causal)
                if time.time() > deadline:
                    _emit(kind="time", problem=p.name, skipped="time budget")
                    continue
                try:
                    q, k, v = _timing_inputs(p)
                    backend, sdpa = pinned_sdpa(q, k, v, causal=causal)     # cuDNN on torch 2.11 / Hopper
                    mine = mod.attention(q, k, v, causal=causal)
                    diff = (mine.float() - sdpa().float()).abs().max().item()   # a sanity number, not the rule
                    t_me = triton.testing.do_bench(lambda: mod.attention(q, k, v, causal=causal),
                                                   warmup=25, rep=100, return_mode="median")
                    with sdpa.pinned():
                        t_sdpa = triton.testing.do_bench(sdpa, warmup=25, rep=100, return_mode="median")
                    rec = dict(kind="time", problem=p.name, ms=t_me, sdpa_ms=t_sdpa, sdpa_backend=backend,
                               tflops=p.flops / (t_me * 1e-3) / 1e12, sdpa_tflops=p.flops / (t_sdpa * 1e-3) / 1e12,
                               speed_vs_sdpa=t_sdpa / t_me, max_diff_vs_sdpa=diff)
                    if p.S <= 1024:          # small: launch cost matters; time GPU work from CUDA graphs too
                        g_me = graph_times(lambda: mod.attention(q, k, v, causal=causal)).median_us
                        with sdpa.pinned():
                            g_sdpa = graph_times(sdpa).median_us
                        rec.update(graph_us=g_me, sdpa_graph_us=g_sdpa, graph_speed_vs_sdpa=g_sdpa / g_me)
                    _emit(**rec)
                    del q, k, v, mine
                except Exception as e:
                    _emit(kind="time", problem=p.name, error=f"{type(e).__name__}: {str(e)[:300]}")
                    if not _context_alive():
                        _emit(kind="fatal", error="the CUDA context is lost; later shapes were not timed")
                        return


def work_stub():
    """The untouched exercise must return promptly with every output element NaN (never hang)."""
    import importlib.util

    import torch

    from flashtutor.api import set_poisoning
    from flashtutor.problems import Problem
    set_poisoning(True)
    path = ROOT / "chapters" / "07_hopper" / "attention.py"
    spec = importlib.util.spec_from_file_location("ch07_exercise", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    for shape in [(2, 3, 113, 64), (1, 2, 1023, 128)]:
        for causal in (False, True):
            p = Problem(*shape, causal=causal)
            t0 = time.time()
            try:
                q, k, v = p.inputs(0, "cuda")
                out = ex.attention(q, k, v, causal=causal)
                torch.cuda.synchronize()
                _emit(kind="stub", problem=p.name, all_nan=bool(torch.isnan(out).all().item()),
                      s=round(time.time() - t0, 2))
            except Exception as e:
                _emit(kind="stub", problem=p.name, error=f"{type(e).__name__}: {str(e)[:300]}")


# ================================================================ parent side ======================
def run_child(args: list[str], limit: float) -> tuple[list[dict], str]:
    """Run this script as a worker; return its records and a status ('ok', 'timeout …', 'exit …')."""
    cmd = [sys.executable, str(Path(__file__).resolve())] + args
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        out, err = proc.communicate(timeout=limit)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}: {err.strip()[-600:]}"
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        status = f"timeout after {limit:.0f} s (a hang: a barrier phase that never completes?)"
    recs = []
    for line in out.splitlines():
        if line.startswith("@@"):
            try:
                recs.append(json.loads(line[2:]))
            except json.JSONDecodeError:
                pass
    return recs, status


def environment() -> dict:
    env = {"date": datetime.datetime.now().isoformat(timespec="seconds")}
    try:
        import torch
        env.update(torch=torch.__version__, cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                   gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
                   capability=torch.cuda.get_device_capability() if torch.cuda.is_available() else None)
    except Exception as e:
        env["torch_error"] = str(e)
    for name in ("triton", "cuda.core", "cuda.bindings"):
        try:
            env[name] = importlib.import_module(name).__version__
        except Exception:
            pass
    return env


def present_steps(wanted) -> dict[str, str]:
    steps = {}
    for key, module in STEPS.items():
        if wanted and key not in wanted:
            continue
        if (ROOT / (module.replace(".", "/") + ".py")).exists():
            steps[key] = module
    return steps


def table(results: dict) -> str:
    lines = []
    pr = results.get("probes", {})
    if pr:
        lines.append("probes: " + (pr.get("status", "") if pr.get("status") != "ok" else "")
                     + ", ".join(f"{r['name']} {'ok' if r['result'] == 'ok' else 'FAIL'}" for r in pr.get("records", [])))
        for r in pr.get("records", []):
            if r["result"] != "ok":
                lines.append(f"  {r['name']}: {r['result']}")
    for key, st in results.get("steps", {}).items():
        recs = st.get("records", [])
        res = next((r for r in recs if r["kind"] == "resources"), {})
        regs = ", ".join(f"{k}: {v['registers']} regs, {v['spill_instructions']} spills, HGMMA {v['HGMMA']}, "
                         f"UTMALDG {v['UTMALDG']}" for k, v in res.get("kernels", {}).items())
        checks = [r for r in recs if r["kind"] == "check"]
        ok = sum(r["ok"] for r in checks)
        lines.append(f"\n== {key} ({st['module']}) — {st['status']}")
        lines.append(f"  {regs or res.get('error', 'no resources')}")
        for r in recs:
            if r["kind"] == "fatal":
                lines.append(f"  FATAL: {r.get('error')}")
        lines.append(f"  correctness: {ok}/{len(checks)} cases pass")
        for r in checks:
            if not r["ok"]:
                lines.append(f"    FAIL {r['problem']}: {r.get('cause')} — {r.get('message', '')[:200]}")
            else:
                lines.append(f"    ok   {r['problem']}: err {r['err']:.3g} ≤ bound {r['bound']:.3g}")
        times = [r for r in recs if r["kind"] == "time"]
        if times:
            lines.append(f"  {'shape':<32} {'ms':>8} {'TFLOP/s':>8} {'SDPA ms':>8} {'SDPA TF':>8} {'speed':>6} {'|Δ|':>8}")
            for r in times:
                if "ms" in r:
                    lines.append(f"  {r['problem']:<32} {r['ms']:8.3f} {r['tflops']:8.1f} {r['sdpa_ms']:8.3f} "
                                 f"{r['sdpa_tflops']:8.1f} {r['speed_vs_sdpa']:6.2f} {r['max_diff_vs_sdpa']:8.1e}"
                                 + (f"   graph-replayed: {r['graph_us']:.1f} µs vs SDPA {r['sdpa_graph_us']:.1f} µs "
                                    f"({r['graph_speed_vs_sdpa']:.2f})" if "graph_us" in r else ""))
                else:
                    lines.append(f"  {r['problem']:<32} {r.get('error') or r.get('skipped')}")
    stub = results.get("stub")
    if stub:
        recs = stub.get("records", [])
        good = sum(bool(r.get("all_nan")) for r in recs)
        lines.append(f"\n== exercise stub — {stub['status']}: {good}/{len(recs)} calls came back all-NaN "
                     f"(max {max((r.get('s', 0) for r in recs), default=0):.1f} s)")
        for r in recs:
            if not r.get("all_nan"):
                lines.append(f"    {r['problem']}: {r.get('error', 'some outputs written')}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", nargs="*", help="e.g. 7a 7b (default: every step file present)")
    ap.add_argument("--no-probes", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--no-stub", action="store_true")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:                                   # inside a subprocess
        try:
            if a.worker == "probes":
                work_probes()
            elif a.worker == "stub":
                work_stub()
            else:
                work_step(a.worker, not a.no_check, not a.no_time, a.deadline or time.time() + 1e9)
        except Exception as e:
            _emit(kind="fatal", error=f"{type(e).__name__}: {e}", trace=traceback.format_exc()[-1500:])
        return

    t_start = time.time()
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    out_file = out_dir / "ch07.json"
    results: dict = {"environment": environment(), "steps": {}}

    def save():
        results["wall_s"] = round(time.time() - t_start, 1)
        out_file.write_text(json.dumps(results, indent=1, default=str))

    cap = results["environment"].get("capability")
    if not cap or tuple(cap) != (9, 0):
        print(f"chapter 7 needs an sm_90 GPU (H100/H200); this machine has {results['environment'].get('gpu')}")
        save()
        return 1

    if not a.no_probes:
        recs, status = run_child(["--worker", "probes"], LIMITS["probes"])
        results["probes"] = {"status": status, "records": recs}
        save()
        print(table({"probes": results["probes"]}), flush=True)

    steps = present_steps(a.steps)
    for i, (key, module) in enumerate(steps.items()):
        # share the remaining time budget among the remaining steps' timing
        left = BUDGET_S - (time.time() - t_start)
        deadline = time.time() + max(30.0, (left - 15) / (len(steps) - i))   # 15 s kept for the stub
        args = ["--worker", module, "--deadline", str(deadline)]
        args += ["--no-check"] if a.no_check else []
        args += ["--no-time"] if a.no_time else []
        recs, status = run_child(args, min(LIMITS["step"], deadline - time.time() + 60))
        results["steps"][key] = {"module": module, "status": status, "records": recs}
        save()
        print(table({"steps": {key: results["steps"][key]}}), flush=True)

    if not a.no_stub:
        recs, status = run_child(["--worker", "stub"], LIMITS["stub"])
        results["stub"] = {"status": status, "records": recs}
        save()

    print("\n" + "=" * 100)
    print(f"chapter 7 on {results['environment'].get('gpu')} — {results['environment'].get('date')}, "
          f"{time.time() - t_start:.0f} s; JSON: {out_file}")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
