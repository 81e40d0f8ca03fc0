"""Chapter 8 Hopper step: one backward kernel, tiles through TMA, dQ added in L2 by TMA reductions.

Step 8b's measurements (results/ch08-time-h100-2026-11-27-b-partial.log) say tiles are exhausted at D = 128: the
second dQ pass recomputes QKᵀ and dO Vᵀ (the backward does 3.5× the forward's matmul work instead of 2.5×), and
folding dQ into the dK/dV kernel with ``tl.atomic_add`` was slower than the pass, because every (query block, key
block) pair then issues BLOCK_M·D scalar fp32 atomics from registers. FlashAttention-3 keeps the fold and changes how
the partial dQ travels: the tile goes to shared memory and one bulk *reduce* copy (``cp.reduce.async.bulk``, an add
done by the copy engine) adds it into the fp32 dQ buffer in L2 — one instruction per tile, issued asynchronously.
This step does the same through a TMA descriptor (``cp.reduce.async.bulk.tensor``, what ``desc.atomic_add`` emits).

What changed since step 8b:
1. one backward kernel: dQ is folded into the dK/dV kernel (keys outer) and leaves each step through a TMA reduce-add
   (``desc.atomic_add``) into a zeroed fp32 [B·H·S, D] buffer; a cast to fp16 follows;
2. Q, dO, K and V tiles arrive through TMA descriptors on the [B·H·S, D] views (chapter 4's Hopper kernel), so the
   compiler pipelines the copies across the query loop instead of computing addresses in registers;
3. the causal split of step 8b (mask only the diagonal band) is kept; the forward is step 8a's.

Rows past S. A tile that runs past a head's last row reads the next head's rows (zeros past the tensor's end). Query
rows past S get lse = +inf, so their P is exactly 0, and their dS, and the dQ rows they would add into the next head
are exactly +0.0 (adding zero changes nothing). Key rows past S are masked out of dS before dQ is formed (their P can
overflow), and their dK, dV rows are stored with a mask, never through TMA.

Without TMA (GPUs before Hopper) the same kernel reads the same tiles through pointers and adds dQ with
``tl.atomic_add`` (``USE_TMA=False, TMA_ADD=False``); Triton's interpreter runs the TMA loads but has no TMA reduce, so
the CPU tests run this file's code with element atomics for dQ (``TMA_ADD=False``).
Limitation: slower than step 8a, measured. On an H100 (results/ch08-time-h100-2026-11-27-c.log) the autotuner picks
64 queries × 128 keys with 8 warps at D = 128 and the backward takes 1.72–1.88× cuDNN's time (8a: 1.40–1.49×); at
D = 64 (S = 4096) 1.51–1.56× (8a: 1.37–1.38×). Nsight Compute says why (results/ch08-8c-h100-2026-11-27/): with dQ
folded in, a thread holds dK, dV and this step's dQ tile in fp32 at once; at 255 registers the kernel makes 84 M
local-memory spill requests (8a's dK/dV kernel: 0.66 M) and keeps the tensor pipe busy 35 % of the time (8a's kernels:
56 % and 65 %). The reduce is not the problem: element atomics instead cost another 8 %. FlashAttention-3 affords the
fold with warp specialization and ``setmaxnreg`` (a producer warp group that gives its registers up to the warp groups
doing the matmuls, chapter 7's tools); Triton 3.6 documents its own warp specialization
(``tl.range(..., warp_specialize=True)``) for Blackwell only, and this kernel does not ask for it. dQ's summation
order also changes from run to run.

Same interface as steps 8a and 8b: ``attention(q, k, v, *, causal=False)`` (differentiable), ``forward`` (→ o, lse),
``backward`` (→ dq, dk, dv); ``launch_backward`` runs one explicit configuration (the sweep).
"""
from __future__ import annotations

import inspect

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ..api import check_inputs
from . import k08a_backward as base
from . import k08b_backward_tuned as tuned
from .k04_triton_fa2_hopper import _s_key, _tile, has_tma

LOG2E = base.LOG2E
forward = base.forward                   # the forward is step 8a's (the solution's swept tiles)
interpreting = tuned.interpreting


@triton.jit
def _add_rows(dst, row, val, ROWS, BLOCK: tl.constexpr, D: tl.constexpr, TMA_ADD: tl.constexpr):
    """dst[row : row + BLOCK] += val (fp32 [BLOCK, D]): one TMA reduce-add, or element atomics through pointers
    (rows past ROWS dropped, as TMA drops them)."""
    if TMA_ADD:
        dst.atomic_add([row, 0], val)
    else:
        rows = row + tl.arange(0, BLOCK)                        # [BLOCK]
        ptrs = dst + rows.to(tl.int64)[:, None] * D + tl.arange(0, D)[None, :]
        tl.atomic_add(ptrs, val, mask=(rows < ROWS)[:, None], sem="relaxed")


@triton.jit
def _step(q_src, do_src, dq_dst, LSE, DELTA, k, v, dk, dv, row0, start_m, offs_mb, offs_n, kv_ok, qk_scale, sm_scale,
          S, ROWS, D: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr, USE_TMA: tl.constexpr,
          TMA_ADD: tl.constexpr):
    """One query block against the program's key block: dK, dV accumulate; this block's share of dQ goes out."""
    offs_m = start_m + offs_mb                                  # [BLOCK_M] query positions
    q_ok = offs_m < S                                           # [BLOCK_M]
    q = _tile(q_src, row0 + start_m, ROWS, BLOCK_M, D, USE_TMA)     # [BLOCK_M, D] fp16
    do = _tile(do_src, row0 + start_m, ROWS, BLOCK_M, D, USE_TMA)   # [BLOCK_M, D] fp16
    lse = tl.load(LSE + row0 + offs_m, mask=q_ok, other=float("inf"))   # [BLOCK_M] rows past S: +inf → P = 0
    delta = tl.load(DELTA + row0 + offs_m, mask=q_ok, other=0.0)       # [BLOCK_M]
    sT = tl.dot(k, tl.trans(q)) * qk_scale                      # [BLOCK_N, BLOCK_M] fp32, base 2
    if MASK:
        sT = tl.where(offs_m[None, :] >= offs_n[:, None], sT, float("-inf"))   # causal: query i ≥ key j
    pT = tl.exp2(sT - lse[None, :] * 1.4426950408889634)        # [BLOCK_N, BLOCK_M] lse is natural log
    dv = tl.dot(pT.to(do.dtype), do, dv)                        # [BLOCK_N, D] += Pᵀ dO
    dpT = tl.dot(v, tl.trans(do))                               # [BLOCK_N, BLOCK_M] dPᵀ = V dOᵀ
    dsT = pT * (dpT - delta[None, :])                           # [BLOCK_N, BLOCK_M] dSᵀ
    dsT = tl.where(kv_ok[:, None], dsT, 0.0).to(q.dtype)        # keys past S: P may overflow there, and is not ours
    dk = tl.dot(dsT, q, dk)                                     # [BLOCK_N, D] += dSᵀ Q
    dq = tl.dot(tl.trans(dsT), k) * sm_scale                    # [BLOCK_M, D] fp32: this key block's share of dQ
    _add_rows(dq_dst, row0 + start_m, dq, ROWS, BLOCK_M, D, TMA_ADD)
    return dk, dv


@triton.jit(do_not_specialize=["S", "ROWS", "S_KEY"])
def bwd_fused_kernel(
    q_src, k_src, v_src, do_src,      # TMA descriptors on the [B·H·S, D] fp16 views (or plain pointers)
    dq_dst,                           # TMA descriptor on the zeroed [B·H·S, D] fp32 dQ buffer (or its pointer)
    DQ_ACC,                           # that buffer as a tensor: the autotuner zeroes it between its trial runs
    DK, DV,                           # [B·H·S, D] fp16 outputs (masked pointer stores)
    LSE, DELTA,                       # [B·H·S] fp32 ×2 (natural-log lse; rowsum(dO ∘ O))
    sm_scale,                         # 1/sqrt(D)
    S, ROWS,                          # sequence length; B·H·S
    S_KEY,                            # S rounded up to a power of two: the autotuner's key, unused here
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,            # Br: query rows per step
    BLOCK_N: tl.constexpr,            # Bc: keys owned by this program
    CAUSAL: tl.constexpr,
    USE_TMA: tl.constexpr = True,     # tiles through TMA descriptors
    TMA_ADD: tl.constexpr = True,     # dQ through a TMA reduce-add (Triton's interpreter has none: element atomics)
):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    row0 = pid_bh * S                                           # this (b, h)'s first row of every [B·H·S, ·] view
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)                    # [BLOCK_N] key positions (ours)
    offs_mb = tl.arange(0, BLOCK_M)                             # [BLOCK_M]
    kv_ok = offs_n < S                                          # [BLOCK_N]
    k = _tile(k_src, row0 + start_n, ROWS, BLOCK_N, D, USE_TMA)    # [BLOCK_N, D] fp16
    v = _tile(v_src, row0 + start_n, ROWS, BLOCK_N, D, USE_TMA)    # [BLOCK_N, D] fp16
    dk = tl.zeros([BLOCK_N, D], tl.float32)
    dv = tl.zeros([BLOCK_N, D], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634

    # Causal: the query blocks that straddle our keys (the diagonal band) are masked; every query block after them
    # sees all our keys (no mask); those before see none. Not causal: no band, every query block without a mask.
    band_lo = 0
    rest = 0
    if CAUSAL:
        band_lo = (start_n // BLOCK_M) * BLOCK_M                # the query block holding our first key's position
        rest = tl.minimum(tl.cdiv(start_n + BLOCK_N, BLOCK_M) * BLOCK_M, S)   # first block past our last key
    for start_m in range(band_lo, rest, BLOCK_M):
        dk, dv = _step(q_src, do_src, dq_dst, LSE, DELTA, k, v, dk, dv, row0, start_m, offs_mb, offs_n, kv_ok,
                       qk_scale, sm_scale, S, ROWS, D, BLOCK_M, True, USE_TMA, TMA_ADD)
    for start_m in range(rest, S, BLOCK_M):
        dk, dv = _step(q_src, do_src, dq_dst, LSE, DELTA, k, v, dk, dv, row0, start_m, offs_mb, offs_n, kv_ok,
                       qk_scale, sm_scale, S, ROWS, D, BLOCK_M, False, USE_TMA, TMA_ADD)

    rows = (row0 + offs_n).to(tl.int64)                         # [BLOCK_N]
    offs_d = tl.arange(0, D)
    tl.store(DK + rows[:, None] * D + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_ok[:, None])
    tl.store(DV + rows[:, None] * D + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_ok[:, None])


# ------------------------------------------------------------------------------------------------ tuning -----------
# (BLOCK_M, BLOCK_N, num_warps, num_stages), a first list for the H100 made from step 8a's sweep (its dK/dV winners:
# 64×64 with 4 warps at D = 128, 128 queries × 64 keys at D = 64) and FlashAttention-3's choice (Br = 64 queries,
# Bc = 128 keys, two warp groups); three per head dim, because the H100 host compiles each for every key.
TUNED = {
    64: [(128, 64, 4, 2), (64, 64, 4, 2), (64, 128, 8, 2)],
    128: [(64, 64, 4, 2), (64, 64, 8, 2), (64, 128, 8, 2)],
}
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1)


def _set_block_shapes(nargs):
    """Autotuner pre-hook: a descriptor's block shape must match the configuration being run."""
    if not nargs.get("USE_TMA", True):
        return
    bm, bn, d = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["D"]
    for name, rows in (("q_src", bm), ("do_src", bm), ("k_src", bn), ("v_src", bn)):
        nargs[name].block_shape = [rows, d]
    if nargs.get("TMA_ADD", True):
        nargs["dq_dst"].block_shape = [bm, d]


def _configs():
    seen = sorted({c for cs in TUNED.values() for c in cs})
    return [triton.Config(dict(BLOCK_M=m, BLOCK_N=n), num_warps=w, num_stages=s, pre_hook=_set_block_shapes)
            for m, n, w, s in seen]


def _prune(configs, named_args, **kw):
    d = named_args.get("D", kw.get("D"))
    want = set(TUNED[d])
    return [c for c in configs if (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages) in want]


_autotune_kw = ({"do_bench": lambda fn, quantiles: triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=quantiles)}
                if "do_bench" in inspect.signature(triton.autotune).parameters else {})
bwd_fused_tuned = triton.autotune(_configs(), key=["S_KEY", "D", "CAUSAL", "USE_TMA", "TMA_ADD"], reset_to_zero=["DQ_ACC"],
                                  prune_configs_by={"early_config_prune": _prune}, **_autotune_kw)(bwd_fused_kernel)


# ------------------------------------------------------------------------------------------------ host side --------
def _views(q, k, v, do, dq_acc, bm, bn, use_tma, tma_add):
    """What the kernel reads and adds through: descriptors on the [B·H·S, D] views, or the tensors."""
    B, H, S, D = q.shape
    rows = B * H * S

    def desc(t, b):
        return TensorDescriptor(t.view(rows, D), [rows, D], [D, 1], [b, D])
    loads = [desc(t, b) if use_tma else t for t, b in ((q, bm), (k, bn), (v, bn), (do, bm))]
    return (*loads, desc(dq_acc, bm) if tma_add else dq_acc)


def _prepare(q, k, v, o, lse, do):
    check_inputs(q, k, v, device_type=None)
    if q.device.type != "cuda" and not interpreting():
        raise ValueError("CPU tensors run only through Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before this file is imported (or move q, k, v to a GPU)")
    do = do.contiguous()
    delta = tuned.preprocess(o, do)                                             # [B, H, S]
    dq_acc = torch.zeros(q.shape, dtype=torch.float32, device=q.device)         # [B, H, S, D] fp32
    dk, dv = torch.empty_like(q), torch.empty_like(q)
    return do, delta, dq_acc, dk, dv


def _tma(q, use_tma, tma_add=None):
    """(tiles through TMA, dQ through a TMA reduce-add): both on Hopper and newer; under the interpreter TMA loads
    only (it has no reduce)."""
    if use_tma is None:
        use_tma = has_tma(q.device) or interpreting()
    if tma_add is None:
        tma_add = use_tma
    return use_tma, tma_add and use_tma and not interpreting()


def launch_backward(q, k, v, o, lse, do, *, causal=False, BLOCK_M, BLOCK_N, num_warps=4, num_stages=2,
                    use_tma=None, tma_add=None):
    """(dQ, dK, dV) with one explicit configuration (the sweep, the interpreter, the profile); ``tma_add=False``
    adds dQ with element atomics even where TMA loads the tiles (what the reduce buys, measured)."""
    use_tma, tma_add = _tma(q, use_tma, tma_add)
    do, delta, dq_acc, dk, dv = _prepare(q, k, v, o, lse, do)
    B, H, S, D = q.shape
    src = _views(q, k, v, do, dq_acc, BLOCK_M, BLOCK_N, use_tma, tma_add)
    bwd_fused_kernel[(triton.cdiv(S, BLOCK_N), B * H)](
        *src, dq_acc, dk, dv, lse, delta, D ** -0.5, S, B * H * S, _s_key(S), D=D, BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N, CAUSAL=causal, USE_TMA=use_tma, TMA_ADD=tma_add, num_warps=num_warps,
        num_stages=num_stages)
    return dq_acc.to(q.dtype), dk, dv


def backward(q, k, v, o, lse, do, *, causal: bool = False):
    """(dQ, dK, dV) fp16: the autotuned fused kernel (TMA on Hopper and newer)."""
    if interpreting():
        return launch_backward(q, k, v, o, lse, do, causal=causal, **INTERPRETER_CONFIG)
    use_tma, tma_add = _tma(q, None)
    do, delta, dq_acc, dk, dv = _prepare(q, k, v, o, lse, do)
    B, H, S, D = q.shape
    src = _views(q, k, v, do, dq_acc, 64, 64, use_tma, tma_add)         # block shapes set per configuration
    grid = lambda meta: (triton.cdiv(S, meta["BLOCK_N"]), B * H)       # noqa: E731
    bwd_fused_tuned[grid](*src, dq_acc, dk, dv, lse, delta, D ** -0.5, S, B * H * S, _s_key(S), D=D,
                          CAUSAL=causal, USE_TMA=use_tma, TMA_ADD=tma_add)
    return dq_acc.to(q.dtype), dk, dv


FlashAttentionTMA, attention = tuned.differentiable(forward, backward)   # attention(q, k, v, *, causal=False)
