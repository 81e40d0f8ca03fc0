"""Chapter 8 tuned step: the same backward, autotuned, masking only the diagonal tiles, with dQ by atomics or a pass.

Step 8a's kernels with three changes, each a known lever of the FlashAttention-2 backward:
1. the tile sizes, warps and pipeline depths of every kernel are chosen by ``triton.autotune`` per (S, D, causal)
   from a small list (the forward's too);
2. causal dK/dV: a key block's queries split into the diagonal band (query blocks that straddle the key block,
   where the mask is computed) and the rest (every query after the band sees every key of the block: no mask, no
   compare, no select). Query rows past S need no mask there either: their lse is loaded as +inf, so P = 2^(s − ∞) = 0;
3. ``dq_mode="atomic"`` folds dQ into the dK/dV kernel: the program owning key block j adds
   scale·dS_ij·K_j to an fp32 dQ buffer with ``tl.atomic_add`` for every query block i it visits (FlashAttention-2's
   choice). That drops the second pass's QKᵀ and dO Vᵀ (the backward then does 2.5× the forward's matmul work, not
   3.5×) at the price of an fp32 read-modify-write of dQ in L2 per (query block, key block) and a non-deterministic
   summation order; ``dq_mode="pass"`` (the default) keeps step 8a's deterministic second pass.
What changed since step 8a: autotuning, the diagonal/off-diagonal split and the atomic dQ option.
Limitation: plain pointer loads (no TMA descriptors) and no warp specialization; the configuration lists are a first
guess made without a GPU. Against step 8a with the tiles of its sweep, it buys nothing on an H100 at D = 128, and its
atomic dQ is slower than the pass there (results/ch08-time-h100-2026-11-27-b-partial.log, printed on the chapter's
page of measurements): the next step needs a new idea, not new tiles.

Same interface as step 8a: ``attention(q, k, v, *, causal=False)`` (differentiable), ``forward`` (→ o, lse),
``backward(..., dq_mode="pass" | "atomic")`` (→ dq, dk, dv). Under Triton's interpreter (``TRITON_INTERPRET=1``,
CPU tensors) the autotuner is bypassed and the small ``INTERPRETER_CONFIG`` is used.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from ..api import check_inputs, output_like
from . import k08a_backward as base

LOG2E = base.LOG2E
fwd_kernel = base.fwd_kernel                       # the forward is step 8a's kernel; only its tiles are tuned here
bwd_preprocess_kernel = base.bwd_preprocess_kernel
bwd_dq_kernel = base.bwd_dq_kernel                 # the second dQ pass is step 8a's kernel, tuned


@triton.jit
def bwd_dkdv_tuned_kernel(
    Q, K, V, DO, DK, DV,              # [B, H, S, D] fp16 ×6
    LSE, DELTA,                       # [B, H, S] fp32 ×2 (natural-log lse; rowsum(dO ∘ O))
    DQ_ACC,                           # [B, H, S, D] fp32, zeroed: dQ accumulated by atomics (ATOMIC_DQ only)
    sm_scale,                         # 1/sqrt(D)
    H, S,
    stride_b, stride_h, stride_s,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,            # Br: query rows per step; divides BLOCK_N (the diagonal band is whole blocks)
    BLOCK_N: tl.constexpr,            # Bc: keys owned by this program
    CAUSAL: tl.constexpr,
    ATOMIC_DQ: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    head = (pid_bh // H).to(tl.int64) * stride_b + (pid_bh % H).to(tl.int64) * stride_h
    row = pid_bh.to(tl.int64) * S
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)                   # [BLOCK_N] key positions (ours)
    offs_mb = tl.arange(0, BLOCK_M)                            # [BLOCK_M]
    offs_d = tl.arange(0, D)                                   # [D]
    kv_ok = offs_n < S                                         # [BLOCK_N]
    k = tl.load(K + head + offs_n[:, None] * stride_s + offs_d[None, :],
                mask=kv_ok[:, None], other=0.0)                # [BLOCK_N, D] fp16
    v = tl.load(V + head + offs_n[:, None] * stride_s + offs_d[None, :],
                mask=kv_ok[:, None], other=0.0)                # [BLOCK_N, D] fp16
    dk = tl.zeros([BLOCK_N, D], tl.float32)                    # [BLOCK_N, D]
    dv = tl.zeros([BLOCK_N, D], tl.float32)                    # [BLOCK_N, D]
    qk_scale = sm_scale * 1.4426950408889634                   # (1/sqrt(D))·log2(e): base-2 scores

    # Causal: the diagonal band, queries [start_n, start_n + BLOCK_N), is visited with the mask; the queries after it
    # without. Queries before start_n see none of our keys. Not causal: no band, every query block without a mask.
    band_hi = start_n
    rest = 0
    if CAUSAL:
        band_hi = tl.minimum(start_n + BLOCK_N, S)
        rest = band_hi
    for start_m in range(start_n, band_hi, BLOCK_M):
        dk, dv = _dkdv_step(Q, DO, LSE, DELTA, DQ_ACC, k, v, dk, dv, head, row, start_m, offs_mb, offs_n, offs_d,
                            kv_ok, qk_scale, sm_scale, S, stride_s, BLOCK_M, True, ATOMIC_DQ)
    for start_m in range(rest, S, BLOCK_M):
        dk, dv = _dkdv_step(Q, DO, LSE, DELTA, DQ_ACC, k, v, dk, dv, head, row, start_m, offs_mb, offs_n, offs_d,
                            kv_ok, qk_scale, sm_scale, S, stride_s, BLOCK_M, False, ATOMIC_DQ)

    tl.store(DK + head + offs_n[:, None] * stride_s + offs_d[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_ok[:, None])   # [BLOCK_N, D]
    tl.store(DV + head + offs_n[:, None] * stride_s + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_ok[:, None])                # [BLOCK_N, D]


@triton.jit
def _dkdv_step(Q, DO, LSE, DELTA, DQ_ACC, k, v, dk, dv, head, row, start_m, offs_mb, offs_n, offs_d,
               kv_ok, qk_scale, sm_scale, S, stride_s,
               BLOCK_M: tl.constexpr, MASK: tl.constexpr, ATOMIC_DQ: tl.constexpr):
    """One query block against the program's key block: step 8a's loop body, the causal compare only if MASK."""
    offs_m = start_m + offs_mb                                 # [BLOCK_M]
    q_ok = offs_m < S                                          # [BLOCK_M]
    q = tl.load(Q + head + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=q_ok[:, None], other=0.0)                 # [BLOCK_M, D] fp16
    do = tl.load(DO + head + offs_m[:, None] * stride_s + offs_d[None, :],
                 mask=q_ok[:, None], other=0.0)                # [BLOCK_M, D] fp16
    lse = tl.load(LSE + row + offs_m, mask=q_ok, other=float("inf"))   # [BLOCK_M] rows past S: +inf → P = 0
    delta = tl.load(DELTA + row + offs_m, mask=q_ok, other=0.0)       # [BLOCK_M]
    sT = tl.dot(k, tl.trans(q)) * qk_scale                     # [BLOCK_N, BLOCK_M] fp32, base 2
    if MASK:
        sT = tl.where(offs_m[None, :] >= offs_n[:, None], sT, float("-inf"))   # [BLOCK_N, BLOCK_M] query i ≥ key j
    pT = tl.exp2(sT - lse[None, :] * 1.4426950408889634)       # [BLOCK_N, BLOCK_M] ×log2 e: lse is natural log
    dv = tl.dot(pT.to(do.dtype), do, dv)                       # [BLOCK_N, D] += Pᵀ dO
    dpT = tl.dot(v, tl.trans(do))                              # [BLOCK_N, BLOCK_M] dPᵀ = V dOᵀ
    dsT = (pT * (dpT - delta[None, :])).to(q.dtype)            # [BLOCK_N, BLOCK_M] dSᵀ, fp16 for the tensor cores
    dk = tl.dot(dsT, q, dk)                                    # [BLOCK_N, D] += dSᵀ Q
    if ATOMIC_DQ:
        # Keys past S (k = v = 0) would add P·(0 − delta)·0 here, but P = 2^(0 − lse) can overflow to inf when a row's
        # lse is very negative, and inf·0 is NaN: zero their dS first.
        dsT = tl.where(kv_ok[:, None], dsT, 0.0)               # [BLOCK_N, BLOCK_M]
        dq = tl.dot(tl.trans(dsT), k) * sm_scale               # [BLOCK_M, D] fp32: this key block's share of dQ_i
        tl.atomic_add(DQ_ACC + head + offs_m[:, None] * stride_s + offs_d[None, :], dq,
                      mask=q_ok[:, None], sem="relaxed")       # many key blocks add to the same rows at once
    return dk, dv


# ------------------------------------------------------------------------------------------------ tuning -----------
def _configs(pairs, warps=(4, 8), stages=(2, 3)):
    return [triton.Config(dict(BLOCK_M=m, BLOCK_N=n), num_warps=w, num_stages=s)
            for m, n in pairs for w in warps for s in stages]


def _prune_dkdv(configs, named_args, **kw):
    """BLOCK_M must divide BLOCK_N (the causal band is whole query blocks); D = 128 with Bc = 128 spills."""
    d = kw.get("D", named_args.get("D"))
    return [c for c in configs if c.kwargs["BLOCK_N"] % c.kwargs["BLOCK_M"] == 0
            and not (d == 128 and c.kwargs["BLOCK_N"] * c.kwargs["BLOCK_M"] > 128 * 64)] or configs[:1]


FWD_CONFIGS = _configs([(64, 64), (128, 64), (128, 32)], warps=(4, 8), stages=(2, 3, 4))
DKDV_CONFIGS = _configs([(32, 128), (64, 128), (32, 64), (64, 64), (16, 128)], warps=(4, 8), stages=(2, 3))
DQ_CONFIGS = _configs([(128, 32), (128, 64), (64, 64), (64, 32)], warps=(4, 8), stages=(2, 3))
_KEY = ["S", "D", "CAUSAL"]
fwd_tuned = triton.autotune(FWD_CONFIGS, key=_KEY)(fwd_kernel)
dkdv_tuned = triton.autotune(DKDV_CONFIGS, key=_KEY + ["ATOMIC_DQ"], reset_to_zero=["DQ_ACC"],
                             prune_configs_by={"early_config_prune": _prune_dkdv})(bwd_dkdv_tuned_kernel)
dq_tuned = triton.autotune(DQ_CONFIGS, key=_KEY)(bwd_dq_kernel)
PRE = dict(BLOCK_M=128, num_warps=4)

INTERPRETER_CONFIG = dict(FWD=dict(BLOCK_M=16, BLOCK_N=16), PRE=dict(BLOCK_M=16),
                          DKDV=dict(BLOCK_M=16, BLOCK_N=32), DQ=dict(BLOCK_M=32, BLOCK_N=16))


def interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _launch(tuned, raw, grid_of, cfg, *args, fixed=None, **kw):
    """The autotuned kernel on a GPU; the raw kernel with a fixed small config under the interpreter, or with
    ``fixed`` (BLOCK_M, BLOCK_N, num_warps, num_stages) where the caller names one (checks that must not autotune)."""
    if fixed is not None or interpreting():
        cfg = fixed if fixed is not None and not interpreting() else cfg
        return raw[grid_of(cfg)](*args, **kw, **cfg)
    return tuned[grid_of](*args, **kw)


def forward(q, k, v, *, causal: bool = False, config: dict | None = None):
    """(O [B, H, S, D] fp16, lse [B, H, S] fp32 natural log), as step 8a's ``forward``; ``config["FWD"]``: one fixed
    configuration instead of the autotuner."""
    check_inputs(q, k, v, device_type=None)
    B, H, S, D = q.shape
    o = output_like(q)
    lse = torch.full((B, H, S), float("nan"), dtype=torch.float32, device=q.device)
    _launch(fwd_tuned, fwd_kernel, lambda m: (triton.cdiv(S, m["BLOCK_M"]), B * H), INTERPRETER_CONFIG["FWD"],
            q, k, v, o, lse, D ** -0.5 * LOG2E, H, S, q.stride(0), q.stride(1), q.stride(2), D=D, CAUSAL=causal,
            fixed=(config or {}).get("FWD"))
    return o, lse


def preprocess(o, do):
    """delta = rowsum(dO ∘ O), [B, H, S] fp32: step 8a's preprocessing kernel, which every later step runs first."""
    B, H, S, D = o.shape
    delta = torch.empty((B, H, S), dtype=torch.float32, device=o.device)        # [B, H, S]
    pre = INTERPRETER_CONFIG["PRE"] if interpreting() else PRE
    bwd_preprocess_kernel[(triton.cdiv(S, pre["BLOCK_M"]), B * H)](o, do, delta, H, S, o.stride(0), o.stride(1),
                                                                    o.stride(2), D=D, **pre)
    return delta


def backward(q, k, v, o, lse, do, *, causal: bool = False, dq_mode: str = "pass", config: dict | None = None):
    """(dQ, dK, dV) fp16; ``dq_mode``: "pass" (a second, deterministic kernel) or "atomic" (fp32 atomics);
    ``config`` ({"DKDV": ..., "DQ": ...}, each BLOCK_M, BLOCK_N, num_warps, num_stages): fixed configurations instead
    of the autotuners (DKDV's BLOCK_M must divide its BLOCK_N)."""
    if dq_mode not in ("pass", "atomic"):
        raise ValueError(f"dq_mode must be 'pass' or 'atomic', not {dq_mode!r}")
    check_inputs(q, k, v, device_type=None)
    do = do.contiguous()
    B, H, S, D = q.shape
    strides = (q.stride(0), q.stride(1), q.stride(2))
    delta = preprocess(o, do)
    dq, dk, dv = (torch.empty_like(q) for _ in range(3))
    atomic = dq_mode == "atomic"
    dq_acc = torch.zeros(q.shape if atomic else (1,), dtype=torch.float32, device=q.device)   # [B, H, S, D] fp32
    _launch(dkdv_tuned, bwd_dkdv_tuned_kernel, lambda m: (triton.cdiv(S, m["BLOCK_N"]), B * H),
            INTERPRETER_CONFIG["DKDV"], q, k, v, do, dk, dv, lse, delta, dq_acc, D ** -0.5, H, S, *strides,
            D=D, CAUSAL=causal, ATOMIC_DQ=atomic, fixed=(config or {}).get("DKDV"))
    if atomic:
        dq.copy_(dq_acc)                                       # fp32 → fp16 (the scale is already applied)
    else:
        _launch(dq_tuned, bwd_dq_kernel, lambda m: (triton.cdiv(S, m["BLOCK_M"]), B * H), INTERPRETER_CONFIG["DQ"],
                q, k, v, do, dq, lse, delta, D ** -0.5, H, S, *strides, D=D, CAUSAL=causal,
                fixed=(config or {}).get("DQ"))
    return dq, dk, dv


def differentiable(forward, backward):
    """(Function, attention): a step's ``forward`` (→ o, lse) and ``backward`` (→ dq, dk, dv) as one
    ``torch.autograd.Function``; ``attention(q, k, v, *, causal=False, **options)`` hands the options to the backward.
    Steps 8b and 8c use it; the solution keeps its own copy (a learner's file stands alone)."""
    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal, options):
            o, lse = forward(q, k, v, causal=causal)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.options = causal, options
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = backward(q, k, v, o, lse, do, causal=ctx.causal, **ctx.options)
            return dq, dk, dv, None, None

    def attention(q, k, v, *, causal: bool = False, **options):
        """softmax(q kᵀ / sqrt(D)) v, differentiable; q, k, v: [B, H, S, D] fp16."""
        return Function.apply(q, k, v, causal, options)
    return Function, attention


FlashAttentionTuned, _attention = differentiable(forward, backward)


def attention(q, k, v, *, causal: bool = False, dq_mode: str = "pass"):
    """softmax(q kᵀ / sqrt(D)) v, differentiable; q, k, v: [B, H, S, D] fp16."""
    return _attention(q, k, v, causal=causal, dq_mode=dq_mode)
