"""Nsight Compute profiles of chapter 7's steps and of SDPA (cuDNN) at one shape, summarised as text; with
``-bwd`` targets, chapter 8's backward steps and SDPA's cuDNN backward.

    PYTHONPATH=$PWD OUT=/some/dir python scripts/ncu07.py                       # 7a 7b 7c SDPA at B4 H32 S4096 D128
    PYTHONPATH=$PWD OUT=/some/dir python scripts/ncu07.py --targets 7c SDPA --shape 2 32 16384 128 --causal
    PYTHONPATH=$PWD OUT=/some/dir python scripts/ncu07.py --targets 8a-bwd 8c-bwd SDPA-bwd --work 2.5

A ``-bwd`` target profiles the backward alone: its forward (O, lse; for SDPA the autograd graph) runs before the
warm-up, outside the profiled range, and dO is fixed. ``--work 2.5`` counts the backward's FLOPs (2.5 forwards).
``8c-noreduce-bwd`` is step 8c with its dQ added by element atomics instead of TMA reduce-adds (same tiles as the
autotuner's D = 128 choice, 64 × 128, 8 warps): what the reduce buys.

Runs ``ncu`` on this same script in target mode (``--target``): each target is warmed up (compiled,
called once), then called once more inside an NVTX range named ``prof``, and only kernels launched in
that range are profiled (``--nvtx-include prof/``), with ``--clock-control none`` (the GPU's clocks as
they are; never changed). Sections: SpeedOfLight, ComputeWorkloadAnalysis, MemoryWorkloadAnalysis,
WarpStateStats, SchedulerStats, LaunchStats, Occupancy, InstructionStats, plus the tensor-pipe and
fp16-tensor-op counters this ncu lists for the GPU (``ncu --query-metrics``).

Writes to $OUT: ``ncu07.ncu-rep`` (the report), ``ncu07-raw.csv`` (every collected metric),
``ncu07-summary.txt`` (per kernel: time, achieved TFLOP/s, tensor-pipe utilisation, issue activity,
top warp-stall reasons per issued instruction, registers, shared memory, L2/DRAM throughput, and ncu's
own rule texts for warp stalls), and ``ncu07-summary.json`` (the same numbers).
"""
from __future__ import annotations

import argparse
import csv
import datetime
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {   # name → the module whose attention(q, k, v, *, causal) is profiled; SDPA: torch's, cuDNN pinned
    "7a": "flashtutor.kernels.k07a_wgmma_tma",
    "7b": "flashtutor.kernels.k07b_warp_specialized",
    "7c": "flashtutor.kernels.k07c_pingpong",
    "SDPA": None,
}
BACKWARD = {"8a": "flashtutor.kernels.k08a_backward", "8b": "flashtutor.kernels.k08b_backward_tuned",
            "8c": "flashtutor.kernels.k08c_backward_tma", "8c-noreduce": "flashtutor.kernels.k08c_backward_tma",
            "8d": "flashtutor.kernels.k08d_backward_ws",
            "SDPA": None}
TARGETS.update({f"{name}-bwd": None for name in BACKWARD})
SECTIONS = ("SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "WarpStateStats",
            "SchedulerStats", "LaunchStats", "Occupancy", "InstructionStats")


# ================================================================ target side (under ncu) =========
def run_targets(names: list[str], shape: tuple[int, int, int, int], causal: bool, extra: dict[str, str]) -> None:
    import importlib
    import importlib.util

    import torch

    from flashtutor.timing import pinned_sdpa
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    for name in names:
        if name.endswith("-bwd"):
            fn = _backward(name[:-4], q, k, v, causal)
        elif name == "SDPA":
            _, sdpa = pinned_sdpa(q, k, v, causal=causal)
            fn = sdpa
        else:
            spec = extra.get(name) or TARGETS[name]
            if spec.endswith(".py"):                       # a launcher file outside the package (an older version)
                s = importlib.util.spec_from_file_location(f"ncu_{name}", ROOT / spec)
                mod = importlib.util.module_from_spec(s)
                sys.modules[s.name] = mod                  # (a dataclass in it looks its module up by name)
                s.loader.exec_module(mod)
            else:
                mod = importlib.import_module(spec)
            fn = (lambda m=mod: m.attention(q, k, v, causal=causal))
        fn()                                               # compile, encode, warm up: outside the profiled range
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("prof")
        fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        print(f"profiled {name}", flush=True)


def _backward(step: str, q, k, v, causal: bool):
    """A callable running one backward of ``step`` (its forward done here, outside the profiled range)."""
    import importlib

    import torch
    g = torch.Generator(device="cuda").manual_seed(1)
    do = torch.randn(q.shape, device="cuda", dtype=q.dtype, generator=g)
    if step == "SDPA":
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            o = F.scaled_dot_product_attention(*leaves, is_causal=causal)

        def grad():
            # on this thread: autograd's own device thread is outside the NVTX range pushed here (2026-11-27: the
            # profile caught no kernel of SDPA's backward)
            with torch.autograd.set_multithreading_enabled(False):
                return torch.autograd.grad(o, leaves, do, retain_graph=True)
        return grad
    mod = importlib.import_module(BACKWARD[step])
    o, lse = mod.forward(q, k, v, causal=causal)
    if step == "8c-noreduce":
        return lambda: mod.launch_backward(q, k, v, o, lse, do, causal=causal, BLOCK_M=64, BLOCK_N=128,
                                           num_warps=8, num_stages=2, tma_add=False)
    return lambda: mod.backward(q, k, v, o, lse, do, causal=causal)


# ================================================================ parent side ======================
def _ncu() -> str:
    exe = shutil.which("ncu")
    if exe:
        return exe
    for d in sorted(Path("/opt/nvidia").glob("nsight-compute*/*/ncu")) + sorted(Path("/usr/local/cuda/bin").glob("ncu")):
        return str(d)
    raise SystemExit("ncu not found")


def tensor_metrics(ncu: str) -> list[str]:
    """The tensor-pipe counters this ncu knows for the current GPU, with the suffix that gives a rate."""
    try:
        out = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=120).stdout
    except Exception:
        return []
    names = set(re.findall(r"^(\S+)\s", out, re.M))
    want = []
    for n in sorted(names):
        if re.fullmatch(r"sm__pipe_tensor\w*_cycles_active", n) or re.fullmatch(r"sm__inst_executed_pipe_tensor\w*", n):
            want.append(n + (".avg.pct_of_peak_sustained_active" if n.endswith("cycles_active") else ".sum"))
        elif re.fullmatch(r"sm__ops_path_tensor_src_fp16_dst_fp32", n):
            want.append(n + ".sum")
    return want


def profile(args, out: Path) -> tuple[Path | None, str]:
    ncu = _ncu()
    rep = out / "ncu07"
    extra = tensor_metrics(ncu)
    target = [sys.executable, str(Path(__file__).resolve()), "--target", *args.targets,
              "--shape", *map(str, args.shape)] + (["--causal"] if args.causal else [])
    for spec in args.extra:
        target += ["--extra", spec]
    base = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", "prof/", "--target-processes", "all",
            "-f", "-o", str(rep)]
    for s in SECTIONS:
        base += ["--section", s]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = []
    # With the extra counters; without them, if ncu refuses one; and without the NVTX filter (kernels by
    # name instead, warm-up calls included), if the range caught nothing.
    by_name = [a for a in base if a not in ("--nvtx", "--nvtx-include", "prof/")]
    by_name += ["-k", "regex:pingpong|wgmma_tma|ws_attention|cudnn|fmha|flash|sdpa|attn|bwd"]
    tries = ([(base, extra)] if extra else []) + [(base, []), (by_name, [])]
    for b, metrics in tries:
        cmd = b + (["--metrics", ",".join(metrics)] if metrics else []) + target
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=args.timeout)
        log.append(f"$ {' '.join(cmd)}\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}")
        if p.returncode == 0 and rep.with_suffix(".ncu-rep").exists():
            return rep.with_suffix(".ncu-rep"), "\n".join(log)
    return None, "\n".join(log)


def _num(x: str):
    try:
        return float(x.replace(",", ""))
    except (ValueError, AttributeError):
        return None


def read_raw(ncu: str, rep: Path) -> tuple[list[dict], str]:
    """The raw page as one dict per profiled kernel (metric → (value, unit)) and the CSV text."""
    p = subprocess.run([ncu, "-i", str(rep), "--page", "raw", "--csv"], capture_output=True, text=True, timeout=300)
    rows = list(csv.reader(io.StringIO(p.stdout)))
    if len(rows) < 3:
        return [], p.stdout
    head, units = rows[0], rows[1]
    kernels = []
    for r in rows[2:]:
        kernels.append({h: (v, u) for h, u, v in zip(head, units, r)})
    return kernels, p.stdout


def read_rules(ncu: str, rep: Path) -> dict[str, list[str]]:
    """ncu's rule texts (the 'details' page), per kernel, for the sections that explain stalls and issue."""
    p = subprocess.run([ncu, "-i", str(rep), "--page", "details", "--csv", "--print-details", "all"],
                       capture_output=True, text=True, timeout=300)
    out: dict[str, list[str]] = {}
    rows = list(csv.reader(io.StringIO(p.stdout)))
    if not rows:
        return out
    head = rows[0]
    col = {h: i for i, h in enumerate(head)}
    for r in rows[1:]:
        try:
            kid = r[col["ID"]] + " " + r[col["Kernel Name"]][:60]
            sec, name, val = r[col["Section Name"]], r[col["Metric Name"]], r[col["Metric Value"]]
        except (KeyError, IndexError):
            continue
        if sec in ("WarpStateStats", "Warp State Statistics", "SchedulerStats", "Scheduler Statistics",
                   "ComputeWorkloadAnalysis", "Compute Workload Analysis") and len(val) > 80:
            out.setdefault(kid, []).append(f"[{sec}] {name}: {val}")
    return out


def _mhz(entry) -> float | None:
    """A clock-rate metric (value, unit) in MHz."""
    if not entry or _num(entry[0]) is None:
        return None
    return _num(entry[0]) * {"ghz": 1e3, "mhz": 1.0, "khz": 1e-3, "hz": 1e-6}.get(entry[1].lower(), 1e-6)


def summarise(kernels: list[dict], names: list[str], flops: float) -> list[dict]:
    out = []
    for i, k in enumerate(kernels):
        get = lambda m: _num(k.get(m, ("", ""))[0])                     # noqa: E731
        name = k.get("Kernel Name", ("?", ""))[0]
        dur_ns = get("gpu__time_duration.sum")
        unit = k.get("gpu__time_duration.sum", ("", ""))[1]
        dur_s = dur_ns * {"ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3, "nsecond": 1e-9}.get(unit, 1e-9) \
            if dur_ns else None
        stalls = {}
        for m, (v, _) in k.items():
            mm = re.fullmatch(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio", m)
            if mm and _num(v) is not None:
                stalls[mm.group(1)] = _num(v)
        top = sorted(stalls.items(), key=lambda kv: -kv[1])[:8]
        tensor = {m: _num(v) for m, (v, _) in k.items() if "tensor" in m and _num(v) is not None}
        rec = {
            "kernel": name,
            "target": None,
            "time_us": dur_s * 1e6 if dur_s else None,
            "tflops": flops / dur_s / 1e12 if dur_s else None,
            "registers_per_thread": get("launch__registers_per_thread"),
            "shared_dynamic": " ".join(k.get("launch__shared_mem_per_block_dynamic", ("?", ""))),
            "shared_static": " ".join(k.get("launch__shared_mem_per_block_static", ("?", ""))),
            "grid": get("launch__grid_size"), "block": get("launch__block_size"),
            "sm_throughput_pct": get("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
            "issue_active_pct": get("sm__inst_issued.avg.pct_of_peak_sustained_active")
            or get("smsp__issue_active.avg.pct_of_peak_sustained_active"),
            "l2_throughput_pct": get("lts__t_sectors.avg.pct_of_peak_sustained_elapsed")
            or get("lts__throughput.avg.pct_of_peak_sustained_elapsed"),
            "dram_throughput_pct": get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
            or get("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
            "l1_hit_pct": get("l1tex__t_sector_hit_rate.pct"),
            "l2_hit_pct": get("lts__t_sector_hit_rate.pct"),
            "warps_active_per_scheduler": get("smsp__warps_active.avg.per_cycle_active"),
            "eligible_warps_per_scheduler": get("smsp__warps_eligible.avg.per_cycle_active"),
            "sm_clock_mhz": _mhz(k.get("gpc__cycles_elapsed.avg.per_second")),
            "pipes_pct_of_active": {pipe: get(f"sm__inst_executed_pipe_{pipe}.avg.pct_of_peak_sustained_active")
                                    for pipe in ("tensor_op_gmma", "xu", "fma", "alu", "uniform", "lsu")},
            "tensor": tensor,
            "top_stalls_per_issue": top,
        }
        out.append(rec)
    return out


def text_report(env: dict, args, recs: list[dict], rules: dict) -> str:
    lines = [f"ncu07 — {', '.join(args.targets)} under Nsight Compute, {env.get('date')}",
             f"GPU {env.get('gpu')} (driver {env.get('driver')}), torch {env.get('torch')}, CUDA {env.get('cuda')}, "
             f"cuDNN {env.get('cudnn')}, triton {env.get('triton')}, {env.get('ncu')}",
             f"shape B{args.shape[0]} H{args.shape[1]} S{args.shape[2]} D{args.shape[3]}"
             f"{' causal' if args.causal else ''}; ncu --clock-control none, one profiled call per target after a "
             f"warm-up; TFLOP/s = {args.work:g} × 4·B·H·S²·D{' / 2' if args.causal else ''} / the profiled kernel's duration "
             f"(gpu__time_duration under the profiler: indicative; the timed runs are the chapter's results files)",
             f"sections: {', '.join(SECTIONS)}", ""]
    for r in recs:
        lines.append(f"== {r['target'] or '?'}: {r['kernel'][:110]}")
        f = lambda x, fmt="{:.1f}": "—" if x is None else fmt.format(x)   # noqa: E731
        lines.append(f"  time {f(r['time_us'])} µs, {f(r['tflops'], '{:.0f}')} TFLOP/s; SM clock {f(r['sm_clock_mhz'], '{:.0f}')} MHz; "
                     f"grid {f(r['grid'], '{:.0f}')} × block {f(r['block'], '{:.0f}')}")
        lines.append(f"  registers/thread {f(r['registers_per_thread'], '{:.0f}')} (the cap at launch; setmaxnreg moves them), "
                     f"shared memory {r['shared_dynamic']} dynamic + {r['shared_static']} static")
        for m, v in sorted(r["tensor"].items()):
            if (m.endswith(".avg.pct_of_peak_sustained_active") and "cycles_active" in m and v > 0
                    or m.endswith("gmma.sum")):
                lines.append(f"  {m} = {v:.4g}")
        lines.append("  instructions issued per pipe, % of the pipe's peak while the SM is active: "
                     + ", ".join(f"{k} {f(v)}" for k, v in r["pipes_pct_of_active"].items()))
        lines.append(f"  SM throughput {f(r['sm_throughput_pct'])}% of peak; issue slots busy {f(r['issue_active_pct'])}%; "
                     f"warps active/eligible per scheduler {f(r['warps_active_per_scheduler'], '{:.2f}')}/"
                     f"{f(r['eligible_warps_per_scheduler'], '{:.2f}')}")
        lines.append(f"  L2 throughput {f(r['l2_throughput_pct'])}%, hit {f(r['l2_hit_pct'])}%; DRAM throughput "
                     f"{f(r['dram_throughput_pct'])}%")
        lines.append("  top warp stalls (cycles per issued instruction): "
                     + ", ".join(f"{k} {v:.2f}" for k, v in r["top_stalls_per_issue"]))
        for kid, texts in rules.items():
            if r["kernel"][:60] in kid:
                for t in texts[:6]:
                    lines.append("    " + t[:600])
        lines.append("")
    return "\n".join(lines)


def environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        import torch
        import triton
        env.update(gpu=torch.cuda.get_device_name(), torch=torch.__version__, cuda=torch.version.cuda,
                   cudnn=torch.backends.cudnn.version(), triton=triton.__version__)
    except Exception as e:
        env["error"] = str(e)
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        pass
    try:
        env["ncu"] = subprocess.run([_ncu(), "--version"], capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[-1]
    except Exception:
        pass
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", nargs="*", default=list(TARGETS))
    ap.add_argument("--shape", nargs=4, type=int, default=[4, 32, 4096, 128])
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--extra", action="append", default=[], help="NAME=module-or-launcher.py: another target")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--work", type=float, default=1.0, help="FLOPs in forwards (the backward: 2.5)")
    ap.add_argument("--target", nargs="*", help=argparse.SUPPRESS)     # target mode (under ncu)
    a = ap.parse_args()
    extra = dict(s.split("=", 1) for s in a.extra)
    if a.target is not None:
        run_targets(a.target, tuple(a.shape), a.causal, extra)
        return 0
    for name in a.targets:
        if name not in TARGETS and name not in extra:
            raise SystemExit(f"unknown target {name}")
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    env = environment()
    rep, log = profile(a, out)
    (out / "ncu07-log.txt").write_text(log)
    if rep is None:
        print(log[-6000:])
        return 1
    ncu = _ncu()
    kernels, raw = read_raw(ncu, rep)
    (out / "ncu07-raw.csv").write_text(raw)
    B, H, S, D = a.shape
    flops = a.work * 4.0 * B * H * S * S * D / (2 if a.causal else 1)
    recs = summarise(kernels, a.targets, flops)
    # Kernels come back in launch order: one per target (then each is named by its target), unless a
    # target launched several (then by the kernel's name).
    if len(recs) == len(a.targets):
        for r, t in zip(recs, a.targets):
            r["target"] = t
    else:
        for r in recs:
            kn = r["kernel"].lower()
            r["target"] = ("7a" if "wgmma_tma" in kn else "7b" if "ws_attention" in kn else "7c" if "pingpong" in kn
                           else "8c" if "bwd_fused" in kn else "8d" if "ws_backward" in kn else "8a" if "bwd_dkdv" in kn or "bwd_dq" in kn
                           else "SDPA" if any(w in kn for w in ("cudnn", "sdpa", "fmha", "flash", "attn")) else None)
    rules = read_rules(ncu, rep)
    text = text_report(env, a, recs, rules)
    (out / "ncu07-summary.txt").write_text(text)
    (out / "ncu07-summary.json").write_text(json.dumps({"environment": env, "shape": a.shape, "causal": a.causal,
                                                        "kernels": recs}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
