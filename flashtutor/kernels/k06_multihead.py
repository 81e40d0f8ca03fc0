"""Chapter 6 reference: attention for small S — several (batch, head) tiles per program, a persistent grid.

The idea: chapter 4 launches one program per (query block, batch·head) and each program does one
tile. At S = 128 a tile is ~3 µs of work and the whole call a few times the HBM floor, so what the
grid costs around the work matters: programs that start, load, compute and store one tile each
leave the memory system idle between their load and their store. Here a program loops over tiles
(``for tile in range(pid, n_tiles, num_programs)``), so

* with a **persistent grid** (a fixed ``per_sm`` × number-of-SMs programs) or **several heads per
  program** (``per_prog`` tiles each) the compiler's software pipeline fetches the next tile's Q, K, V
  while the current tile computes — when S ≤ BLOCK_N the K/V loop disappears (``ONE_BLOCK``: the
  whole sequence is one K/V tile) and the tile loop is the loop it pipelines;
* full key blocks carry no mask (``EVEN_N``: S a multiple of BLOCK_N), and where the table says so the
  tiles arrive by TMA (tensor descriptors), both as in chapter 4's Hopper kernel;
* the configuration comes from a small table by (D, S, tiles per SM) computed once per shape (no
  autotuning at call time: chapter 4's tuned kernel spent ~57 µs of host time per call in the
  autotuner's dispatch), and the kernel takes 11 arguments (strides are implied: the inputs are
  contiguous).

The kernels themselves are the chapter's solution (``solutions/06_batching/attention.py``), loaded from
that file so they exist in one place; this module adds what the measurements need: a launch with an
explicit configuration (``launch``), the direct-launch ``attention`` (no split, no CUDA graph: the kernel
alone), the configuration sweep and a compile-only resource report (registers, shared memory, spills,
pipelined copies) that works without a GPU. Split keys: :mod:`flashtutor.kernels.k06_split_kv`.
What changed since chapter 4: the grid is a loop over tiles; full key blocks skip the mask; TMA where
the table says so. Limitation: the tile configuration is fixed per (D, S bucket, tiles per SM) and
tuned on one GPU; causal calls still mask every key block; for one sequence with few heads the tiles
cannot fill the GPU (split the keys).
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

from ..chapters import ROOT
from . import solution_module

SOURCE = ROOT / "solutions" / "06_batching" / "attention.py"


solution = solution_module("06_batching")
multihead_kernel = solution.multihead_kernel
combine_kernel = solution.combine_kernel
Config = solution.Config
CONFIGS = solution.CONFIGS
INTERPRETER_CONFIG = solution.INTERPRETER_CONFIG
config_for = solution.config_for
make_plan = solution.make_plan
launch_into = solution.launch_into
interpreting = solution.interpreting
num_sms = solution.num_sms
LOG2E = solution.LOG2E

_plans: dict = {}


def table_config(S: int, D: int = 64, BH: int = 16, sms: int = 132):
    """The configuration the table gives a GPU with ``sms`` SMs for B·H = ``BH`` slabs of length S
    (``config_for`` gives the interpreter's on a CPU)."""
    return solution.table_config(BH, S, D, sms)


def launch(q, k, v, *, causal=False, BLOCK_M, BLOCK_N, num_warps=4, num_stages=2, per_sm=0, per_prog=1,
           tma=False, n_split=1):
    """One direct launch with an explicit configuration (the sweep calls this). ``n_split=1``: no split."""
    from ..api import check_inputs, output_like
    check_inputs(q, k, v, device_type=None)
    B, H, S, D = q.shape
    cfg = Config(BLOCK_M, BLOCK_N, num_warps, num_stages, per_sm, per_prog, tma)
    key = (tuple(q.shape), bool(causal), q.device, cfg, n_split)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = make_plan(B, H, S, D, causal, q.device, cfg, n_split)
    return launch_into(q, k, v, output_like(q), causal, plan)


def attention(q, k, v, *, causal: bool = False):
    """softmax(q kᵀ / sqrt(D)) v, [B, H, S, D] fp16: the table's configuration, no split, no graph."""
    from ..api import check_inputs
    check_inputs(q, k, v, device_type=None)
    B, H, S, D = q.shape
    cfg = config_for(B * H, S, D, q.device)
    return launch(q, k, v, causal=causal, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps,
                  num_stages=cfg.num_stages, per_sm=cfg.per_sm, per_prog=cfg.per_prog, tma=cfg.tma, n_split=1)


# ---- the configuration sweep ---------------------------------------------------------------------
# Programs: one tile each (per_prog=1, chapter 4's grid), 2 or 4 tiles each, or a persistent grid of
# 1, 2 or 4 programs per SM. Tiles and launch parameters as in chapter 4's sweep.
SWEEP = {"BLOCK_M": (64, 128), "BLOCK_N": (64, 128), "num_warps": (4, 8), "num_stages": (1, 2, 3),
         "programs": (("per_prog", 1), ("per_prog", 2), ("per_prog", 4), ("per_sm", 1), ("per_sm", 2),
                      ("per_sm", 4))}


def sweep_configs(grid: dict = SWEEP) -> list:
    out = []
    for bm, bn, w, s, (kind, n) in itertools.product(grid["BLOCK_M"], grid["BLOCK_N"], grid["num_warps"],
                                                     grid["num_stages"], grid["programs"]):
        out.append(Config(bm, bn, w, s, per_sm=n if kind == "per_sm" else 0,
                          per_prog=n if kind == "per_prog" else 1))
    return out


def label(cfg) -> str:
    progs = f"{cfg.per_sm}/SM" if cfg.per_sm else f"{cfg.per_prog} tile{'s' if cfg.per_prog > 1 else ''}/prog"
    return f"{cfg.BLOCK_M}×{cfg.BLOCK_N} w{cfg.num_warps} s{cfg.num_stages} {progs}" + (" TMA" if cfg.tma else "")


def sweep(problem, configs=None, *, timer=None, seed: int = 0, log=None) -> list[dict]:
    """Check and time every configuration at ``problem``. ``timer(fn) -> Stats`` defaults to
    :func:`flashtutor.timing.graph_times` (L2 flushed, launch cost removed); rows sorted fastest first."""
    import torch

    from ..problems import sdpa
    configs = list(configs or sweep_configs())
    if timer is None:
        from ..timing import graph_times
        timer = graph_times
    q, k, v = problem.inputs(seed, "cuda" if torch.cuda.is_available() else "cpu")
    want = sdpa(q, k, v, causal=problem.causal).float()
    rows = []
    for cfg in configs:
        row = {"label": label(cfg), **cfg.__dict__, "us": float("nan"), "ok": False, "error": ""}
        kw = dict(BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                  per_sm=cfg.per_sm, per_prog=cfg.per_prog, tma=cfg.tma)
        try:
            out = launch(q, k, v, causal=problem.causal, **kw)
            row["ok"] = bool(torch.isfinite(out).all()) and (out.float() - want).abs().max().item() < 2e-2
            if row["ok"]:
                row["us"] = timer(lambda: launch(q, k, v, causal=problem.causal, **kw)).median_us
        except Exception as e:   # does not fit (shared memory, registers) or does not compile
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
        rows.append(row)
        if log:
            log(f"  {row['label']:<34} {row['us']:8.2f} µs {'' if row['ok'] else 'FAILED ' + row['error']}")
    return sorted(rows, key=lambda r: (not r["ok"], r["us"] if r["us"] == r["us"] else float("inf")))


# ---- what the compiler makes of it (no GPU needed) -----------------------------------------------
_COMPILE_CHILD = r"""
import json, sys
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton
from flashtutor.kernels import k06_multihead as mh
from flashtutor.sass import resource_usage
a = json.loads(sys.argv[1])
sig = {n: "*fp16" for n in ("Q", "K", "V", "O")}
if a["tma"]:                                   # descriptors of [BLOCK_M, D] (Q) and [BLOCK_N, D] (K, V) tiles
    import torch
    from triton.runtime.jit import mangle_type
    from triton.tools.tensor_descriptor import TensorDescriptor
    t = torch.empty(256, a["D"], dtype=torch.float16)
    for n, b in (("Q", a["BLOCK_M"]), ("K", a["BLOCK_N"]), ("V", a["BLOCK_N"])):
        sig[n] = mangle_type(TensorDescriptor(t, [256, a["D"]], [a["D"], 1], [b, a["D"]]))
sig["W"] = "*fp32" if a["split"] else "*fp16"
sig.update(qk_scale="fp32", S="i32", n_tiles="i32", n_m="i32", n_split="i32", chunk="i32")
const = dict(D=a["D"], BLOCK_M=a["BLOCK_M"], BLOCK_N=a["BLOCK_N"], CAUSAL=a["causal"], SPLIT=a["split"],
             ONE_BLOCK=a["one_block"], EVEN_N=a["even_n"], TMA=a["tma"])
sig.update({c: "constexpr" for c in const})
aligned = {(i,): [["tt.divisibility", 16]] for i in range(5) if not (a["tma"] and i < 3)}   # the pointers
src = ASTSource(fn=mh.multihead_kernel, signature=sig, constexprs=const, attrs=aligned)
k = triton.compile(src, target=GPUTarget("cuda", a["arch"], 32),
                   options=dict(num_warps=a["num_warps"], num_stages=a["num_stages"]))
res = next(iter(resource_usage(k.asm["cubin"]).values()))
ttgir = k.asm["ttgir"]
print(json.dumps({"shared_bytes": k.metadata.shared, "registers": res.get("registers"),
                  "spill_instructions": res.get("spill_instructions"),
                  "async_copies": ttgir.count("async_copy_global_to_local"),
                  "tma_copies": ttgir.count("async_tma_copy_global_to_local"),
                  "wgmma": k.asm["ptx"].count("wgmma.mma_async"), "triton": triton.__version__}))
"""


def compile_info(cfg, *, D: int = 64, causal: bool = False, split: bool = False, one_block: bool = False,
                 even_n: bool = True, arch: int = 90) -> dict:
    """Compile ``multihead_kernel`` for ``sm_<arch>`` without running it and report its resources:
    shared memory per program, registers per thread, spill instructions, the number of asynchronous
    global→shared copies in the pipelined loop (0: the loads are not pipelined) and of wgmma
    instructions (with ``cfg.tma`` the pipelined copies are TMA bulk copies, counted as ``tma_copies``).
    ``even_n``: S is a multiple of BLOCK_N (no key mask). Runs in a child process (under
    TRITON_INTERPRET=1 this process's Triton is the interpreter); needs ``cuobjdump``/``nvdisasm`` (pip wheels) for the register count."""
    args = dict(D=D, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                causal=bool(causal), split=bool(split), one_block=bool(one_block), even_n=bool(even_n),
                tma=bool(cfg.tma), arch=arch)
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION=os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", _COMPILE_CHILD, json.dumps(args)], capture_output=True, text=True,
                       env=env, timeout=600)
    if r.returncode:
        raise RuntimeError(f"compiling for sm_{arch} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])
