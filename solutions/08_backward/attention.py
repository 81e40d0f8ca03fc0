"""Chapter 8 exercise: the backward pass of FlashAttention-2 in Triton — gradients recomputed from the log-sum-exp.

The idea: the forward keeps only O and, per query row, the log-sum-exp ``lse_i = log Σ_j e^(s_ij)`` of its scaled
scores; with it the backward rebuilds any tile of P exactly as ``P_ij = e^(s_ij − lse_i)``, so the S×S matrix is never
stored in either pass. With ``dO`` the gradient of the loss with respect to O, and ``scale = 1/sqrt(D)``:

    dV = Pᵀ dO            dP = dO Vᵀ            dS = P ∘ (dP − delta),   delta_i = Σ_d dO_id · O_id
    dQ = scale · dS K     dK = scale · dSᵀ Q

(``delta`` is rowsum(dO ∘ O), which equals rowsum(P ∘ dP): the softmax's Jacobian needs it once per row, so a small
preprocessing kernel computes it before the main loops.) Three kernels after the forward:

1. ``bwd_preprocess_kernel``: delta = rowsum(dO ∘ O), one fp32 per query row;
2. ``bwd_dkdv_kernel``: a program owns Bc keys (K_j, V_j stay on chip, dK_j and dV_j accumulate in fp32) and streams
   every query block past them (keys outer, queries inner), recomputing P from lse;
3. ``bwd_dq_kernel``: a program owns Br queries and streams the keys past them (the forward's loop order), recomputing
   P and dS a second time to accumulate dQ_i.

Two passes recompute QKᵀ twice (the backward then does 3.5× the forward's matmul work instead of 2.5×), but each
output tile is written by exactly one program: the result is deterministic. The alternative (FlashAttention-2's own
choice, and ``flashtutor/kernels/k08b_backward_tuned.py``'s ``dq_mode="atomic"``) folds dQ into kernel 2: the program
that owns key block j adds its share ``scale · dS_ij K_j`` into an fp32 dQ buffer with ``tl.atomic_add``, because many
key blocks add to the same dQ rows at once. That saves the second QKᵀ and dP but costs an fp32 read-modify-write of
dQ per key block in L2, and the order of the additions (hence the last bits of dQ) changes from run to run.

What changed since chapter 4: the forward stores ``lse`` (natural log, fp32, [B, H, S]: the same quantity as SDPA's
``logsumexp``; the kernels work in base 2 internally and convert at the boundary), and the backward is new.
``attention`` wraps both in a ``torch.autograd.Function``, so ``attention(q, k, v).backward(g)`` trains a model.
Limitation: the tile sizes are one configuration per head dim, swept at one shape; the causal mask is computed on
every tile (also where no element is masked), and QKᵀ is recomputed twice; ``flashtutor/kernels/k08b_backward_tuned.py``
autotunes, masks only the diagonal tiles and offers atomics for dQ.

You write the forward's log-sum-exp, the preprocessing, and the bodies of the two backward loops; the rest is given.
Without a GPU it runs through Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, set before Triton compiles
this file).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

import flashtutor as ft

LOG2E = 1.4426950408889634    # log2(e) = 1/ln 2: e^x = 2^(x·log2 e), and 2^x is one instruction (MUFU.EX2)
LN2 = 0.6931471805599453      # ln 2 = 1/log2(e): turns a base-2 log into a natural one

# Tile sizes per head dim for a GPU (register budget: dK and dV accumulate [Bc, D] fp32 each), chosen by the chapter's
# sweep on an H100 at B4 H32 S4096 (scripts/ch08_sweep.py, results/ch08-sweep-h100-2026-11-27.json; the page of
# measurements prints what they bought over the first guess, 64×64 tiles with 8 warps). FWD is chapter 4's kernel;
# DKDV: BLOCK_N keys owned by a program, BLOCK_M queries per step; DQ: BLOCK_M queries owned, BLOCK_N keys per step.
CONFIGS = {
    64: dict(FWD=dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
             PRE=dict(BLOCK_M=128, num_warps=4),
             DKDV=dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=2),
             DQ=dict(BLOCK_M=128, BLOCK_N=32, num_warps=8, num_stages=3)),
    128: dict(FWD=dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
              PRE=dict(BLOCK_M=128, num_warps=4),
              DKDV=dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2),
              DQ=dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)),
}
# Under the interpreter (CPU) small tiles, and different ones for queries and keys, so that the course's small CPU
# shapes span several blocks, exercise the partial-block masks, and catch a causal start that assumes Br = Bc.
INTERPRETER_CONFIG = dict(FWD=dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1),
                          PRE=dict(BLOCK_M=16, num_warps=4),
                          DKDV=dict(BLOCK_M=16, BLOCK_N=32, num_warps=4, num_stages=1),
                          DQ=dict(BLOCK_M=32, BLOCK_N=16, num_warps=4, num_stages=1))


# ------------------------------------------------------------------------------------------------ forward ----------
@triton.jit
def fwd_kernel(
    Q, K, V, O, LSE,                  # [B, H, S, D] fp16 ×4 (contiguous); LSE: [B, H, S] fp32
    qk_scale,                         # (1/sqrt(D))·log2(e): scores come out in base-2 units
    H, S,                             # number of heads, sequence length
    stride_b, stride_h, stride_s,     # element strides of a batch, a head, a row (a column's is 1)
    D: tl.constexpr,                  # head dim (64 or 128)
    BLOCK_M: tl.constexpr,            # Br: query rows per program
    BLOCK_N: tl.constexpr,            # Bc: keys per step of the loop
    CAUSAL: tl.constexpr,
):
    # Chapter 4's kernel; new: the per-row log-sum-exp is stored for the backward.
    pid_m = tl.program_id(0)                                   # query block
    pid_bh = tl.program_id(1)                                  # flattened (batch, head)
    head = (pid_bh // H).to(tl.int64) * stride_b + (pid_bh % H).to(tl.int64) * stride_h   # 64-bit: B·H·S·D > 2^31
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # [BLOCK_M] query positions
    offs_n = tl.arange(0, BLOCK_N)                             # [BLOCK_N] key offsets within a block
    offs_d = tl.arange(0, D)                                   # [D]
    row_ok = offs_m < S                                        # [BLOCK_M] the last query block may be partial

    q = tl.load(Q + head + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)               # [BLOCK_M, D] fp16
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)        # [BLOCK_M] running row max (base 2)
    l_i = tl.zeros([BLOCK_M], tl.float32)                      # [BLOCK_M] running Σ 2^(s - m_i)
    acc = tl.zeros([BLOCK_M, D], tl.float32)                   # [BLOCK_M, D] running Σ 2^(s - m_i)·v

    end = S
    if CAUSAL:
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)             # keys past the block's last row are all masked
    for start_n in range(0, end, BLOCK_N):
        offs_kv = start_n + offs_n                             # [BLOCK_N] key positions of this step
        kv_ok = offs_kv < S                                    # [BLOCK_N]
        k = tl.load(K + head + offs_kv[:, None] * stride_s + offs_d[None, :],
                    mask=kv_ok[:, None], other=0.0)            # [BLOCK_N, D] fp16
        v = tl.load(V + head + offs_kv[:, None] * stride_s + offs_d[None, :],
                    mask=kv_ok[:, None], other=0.0)            # [BLOCK_N, D] fp16
        s = tl.dot(q, tl.trans(k)) * qk_scale                  # [BLOCK_M, BLOCK_N] fp32, base-2 units
        keep = kv_ok[None, :]                                  # [1, BLOCK_N]
        if CAUSAL:
            keep = keep & (offs_kv[None, :] <= offs_m[:, None])   # [BLOCK_M, BLOCK_N] key j ≤ query i
        s = tl.where(keep, s, float("-inf"))                   # [BLOCK_M, BLOCK_N]
        m_new = tl.maximum(m_i, tl.max(s, axis=1))             # [BLOCK_M]
        alpha = tl.exp2(m_i - m_new)                           # [BLOCK_M] rescales what was summed so far
        p = tl.exp2(s - m_new[:, None])                        # [BLOCK_M, BLOCK_N] in [0, 1]; masked → 0
        l_i = l_i * alpha + tl.sum(p, axis=1)                  # [BLOCK_M]
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])   # [BLOCK_M, D] += p·v, fp16 in, fp32 out
        m_i = m_new

    tl.store(O + head + offs_m[:, None] * stride_s + offs_d[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=row_ok[:, None])   # [BLOCK_M, D] O_i = acc_i / l_i
    # BEGIN SOLUTION [jit]: store lse_i = log Σ_j e^(s_ij) in natural-log units: m_i + log2(l_i) is its base-2 value (m_i and l_i are base 2), times ln 2 = 0.6931471805599453; one fp32 per row at LSE + pid_bh·S + row, rows past S masked
    lse = (m_i + tl.log2(l_i)) * 0.6931471805599453           # [BLOCK_M] base 2 → natural log (× ln 2)
    tl.store(LSE + pid_bh.to(tl.int64) * S + offs_m, lse, mask=row_ok)
    # END SOLUTION


# ------------------------------------------------------------------------------------------------ backward ---------
@triton.jit
def bwd_preprocess_kernel(
    O, DO, DELTA,                     # [B, H, S, D] fp16 ×2; DELTA: [B, H, S] fp32
    H, S,
    stride_b, stride_h, stride_s,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,            # rows per program
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    head = (pid_bh // H).to(tl.int64) * stride_b + (pid_bh % H).to(tl.int64) * stride_h
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # [BLOCK_M] query positions
    offs_d = tl.arange(0, D)                                   # [D]
    row_ok = offs_m < S                                        # [BLOCK_M]
    # BEGIN SOLUTION [jit]: load the O and dO tiles (rows past S masked), delta = rowsum(dO ∘ O) in fp32, store it at DELTA + pid_bh·S + row
    o = tl.load(O + head + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)               # [BLOCK_M, D] fp16
    do = tl.load(DO + head + offs_m[:, None] * stride_s + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)              # [BLOCK_M, D] fp16
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)   # [BLOCK_M] fp32
    tl.store(DELTA + pid_bh.to(tl.int64) * S + offs_m, delta, mask=row_ok)
    # END SOLUTION


@triton.jit
def bwd_dkdv_kernel(
    Q, K, V, DO, DK, DV,              # [B, H, S, D] fp16 ×6
    LSE, DELTA,                       # [B, H, S] fp32 ×2 (natural-log lse; rowsum(dO ∘ O))
    sm_scale,                         # 1/sqrt(D)
    H, S,
    stride_b, stride_h, stride_s,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,            # Br: query rows per step of the loop
    BLOCK_N: tl.constexpr,            # Bc: keys owned by this program
    CAUSAL: tl.constexpr,
):
    # Keys outer: this program owns keys [start_n, start_n + BLOCK_N) and streams the query blocks past them.
    # Everything is computed transposed (keys as rows: sT = K Qᵀ), so dV += PᵀdO and dK += dSᵀQ need no transpose of P.
    pid_n = tl.program_id(0)                                   # key block
    pid_bh = tl.program_id(1)
    head = (pid_bh // H).to(tl.int64) * stride_b + (pid_bh % H).to(tl.int64) * stride_h
    row = pid_bh.to(tl.int64) * S                              # first element of this (b, h) in LSE and DELTA
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)                   # [BLOCK_N] key positions (ours)
    offs_mb = tl.arange(0, BLOCK_M)                            # [BLOCK_M] query offsets within a block
    offs_d = tl.arange(0, D)                                   # [D]
    kv_ok = offs_n < S                                         # [BLOCK_N] the last key block may be partial

    k = tl.load(K + head + offs_n[:, None] * stride_s + offs_d[None, :],
                mask=kv_ok[:, None], other=0.0)                # [BLOCK_N, D] fp16
    v = tl.load(V + head + offs_n[:, None] * stride_s + offs_d[None, :],
                mask=kv_ok[:, None], other=0.0)                # [BLOCK_N, D] fp16
    dk = tl.zeros([BLOCK_N, D], tl.float32)                    # [BLOCK_N, D] Σ_i dS_ijᵀ q_i (scale applied at the end)
    dv = tl.zeros([BLOCK_N, D], tl.float32)                    # [BLOCK_N, D] Σ_i P_ijᵀ dO_i
    qk_scale = sm_scale * 1.4426950408889634                   # (1/sqrt(D))·log2(e): scores in base-2 units

    # Causal: queries before our first key see none of our keys; start at the query block holding query start_n.
    lo = 0
    if CAUSAL:
        lo = (start_n // BLOCK_M) * BLOCK_M
    for start_m in range(lo, S, BLOCK_M):
        # BEGIN SOLUTION [jit]: load q, dO (rows past S masked), lse and delta (rows past S: lse = +inf, so their P is 0); scores sT = K Qᵀ·qk_scale masked to -inf (query past S; causal: query < key); Pᵀ = 2^(sT − lse·log2 e); dV += Pᵀ dO; dPᵀ = V dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − delta); dK += dSᵀ Q (fp16 operands, fp32 accumulators)
        offs_m = start_m + offs_mb                             # [BLOCK_M] query positions of this step
        q_ok = offs_m < S                                      # [BLOCK_M]
        q = tl.load(Q + head + offs_m[:, None] * stride_s + offs_d[None, :],
                    mask=q_ok[:, None], other=0.0)             # [BLOCK_M, D] fp16
        do = tl.load(DO + head + offs_m[:, None] * stride_s + offs_d[None, :],
                     mask=q_ok[:, None], other=0.0)            # [BLOCK_M, D] fp16
        lse = tl.load(LSE + row + offs_m, mask=q_ok, other=float("inf"))   # [BLOCK_M] fp32, natural log
        delta = tl.load(DELTA + row + offs_m, mask=q_ok, other=0.0)       # [BLOCK_M] fp32
        sT = tl.dot(k, tl.trans(q)) * qk_scale                 # [BLOCK_N, BLOCK_M] fp32, base-2 units
        keep = q_ok[None, :]                                   # [1, BLOCK_M]
        if CAUSAL:
            keep = keep & (offs_m[None, :] >= offs_n[:, None])    # [BLOCK_N, BLOCK_M] query i ≥ key j
        sT = tl.where(keep, sT, float("-inf"))                 # [BLOCK_N, BLOCK_M] masked → P = 0
        # e^(s - lse) = 2^((s - lse)·log2 e): sT is already ×log2 e, lse is natural log, so ×1.44269504 = log2 e
        pT = tl.exp2(sT - lse[None, :] * 1.4426950408889634)   # [BLOCK_N, BLOCK_M] P_ijᵀ, recomputed
        dv = tl.dot(pT.to(do.dtype), do, dv)                   # [BLOCK_N, D] += Pᵀ dO
        dpT = tl.dot(v, tl.trans(do))                          # [BLOCK_N, BLOCK_M] fp32 dPᵀ = V dOᵀ
        dsT = pT * (dpT - delta[None, :])                      # [BLOCK_N, BLOCK_M] dSᵀ = Pᵀ ∘ (dPᵀ − delta)
        dk = tl.dot(dsT.to(q.dtype), q, dk)                    # [BLOCK_N, D] += dSᵀ Q
        # END SOLUTION

    tl.store(DK + head + offs_n[:, None] * stride_s + offs_d[None, :],
             (dk * sm_scale).to(DK.dtype.element_ty), mask=kv_ok[:, None])   # [BLOCK_N, D] dK = scale·dSᵀQ
    tl.store(DV + head + offs_n[:, None] * stride_s + offs_d[None, :],
             dv.to(DV.dtype.element_ty), mask=kv_ok[:, None])                # [BLOCK_N, D]


@triton.jit
def bwd_dq_kernel(
    Q, K, V, DO, DQ,                  # [B, H, S, D] fp16 ×5
    LSE, DELTA,                       # [B, H, S] fp32 ×2
    sm_scale,                         # 1/sqrt(D)
    H, S,
    stride_b, stride_h, stride_s,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,            # Br: query rows owned by this program
    BLOCK_N: tl.constexpr,            # Bc: keys per step of the loop
    CAUSAL: tl.constexpr,
):
    # Queries outer (the forward's order): this program owns BLOCK_M rows of dQ and streams the keys past them.
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    head = (pid_bh // H).to(tl.int64) * stride_b + (pid_bh % H).to(tl.int64) * stride_h
    row = pid_bh.to(tl.int64) * S
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # [BLOCK_M] query positions (ours)
    offs_nb = tl.arange(0, BLOCK_N)                            # [BLOCK_N] key offsets within a block
    offs_d = tl.arange(0, D)                                   # [D]
    row_ok = offs_m < S                                        # [BLOCK_M]

    q = tl.load(Q + head + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)               # [BLOCK_M, D] fp16
    do = tl.load(DO + head + offs_m[:, None] * stride_s + offs_d[None, :],
                 mask=row_ok[:, None], other=0.0)              # [BLOCK_M, D] fp16
    lse2 = tl.load(LSE + row + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634   # [BLOCK_M] lse in base 2
    delta = tl.load(DELTA + row + offs_m, mask=row_ok, other=0.0)                    # [BLOCK_M] fp32
    dq = tl.zeros([BLOCK_M, D], tl.float32)                    # [BLOCK_M, D] Σ_j dS_ij k_j (scale applied at the end)
    qk_scale = sm_scale * 1.4426950408889634                   # (1/sqrt(D))·log2(e)

    end = S
    if CAUSAL:
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)             # keys past our last query are all masked
    for start_n in range(0, end, BLOCK_N):
        # BEGIN SOLUTION [jit]: load a K and a V block (keys past S masked); scores s = Q Kᵀ·qk_scale masked to -inf (key past S; causal: key > query); P = 2^(s − lse2); dP = dO Vᵀ; dS = P ∘ (dP − delta); dQ += dS K (fp16 operands, fp32 accumulator)
        offs_n = start_n + offs_nb                             # [BLOCK_N] key positions of this step
        kv_ok = offs_n < S                                     # [BLOCK_N]
        k = tl.load(K + head + offs_n[:, None] * stride_s + offs_d[None, :],
                    mask=kv_ok[:, None], other=0.0)            # [BLOCK_N, D] fp16
        v = tl.load(V + head + offs_n[:, None] * stride_s + offs_d[None, :],
                    mask=kv_ok[:, None], other=0.0)            # [BLOCK_N, D] fp16
        s = tl.dot(q, tl.trans(k)) * qk_scale                  # [BLOCK_M, BLOCK_N] fp32, base-2 units
        keep = kv_ok[None, :]                                  # [1, BLOCK_N]
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])    # [BLOCK_M, BLOCK_N] key j ≤ query i
        s = tl.where(keep, s, float("-inf"))                   # [BLOCK_M, BLOCK_N] masked → P = 0
        p = tl.exp2(s - lse2[:, None])                         # [BLOCK_M, BLOCK_N] P_ij, recomputed
        dp = tl.dot(do, tl.trans(v))                           # [BLOCK_M, BLOCK_N] fp32 dP = dO Vᵀ
        ds = p * (dp - delta[:, None])                         # [BLOCK_M, BLOCK_N] dS = P ∘ (dP − delta)
        dq = tl.dot(ds.to(k.dtype), k, dq)                     # [BLOCK_M, D] += dS K
        # END SOLUTION

    tl.store(DQ + head + offs_m[:, None] * stride_s + offs_d[None, :],
             (dq * sm_scale).to(DQ.dtype.element_ty), mask=row_ok[:, None])   # [BLOCK_M, D] dQ = scale·dS K


# ------------------------------------------------------------------------------------------------ host side --------
def interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _config(q: torch.Tensor, config: dict | None) -> dict:
    if config is not None:
        return config
    return INTERPRETER_CONFIG if interpreting() else CONFIGS[q.shape[-1]]


def _check_device(q: torch.Tensor) -> None:
    if q.device.type != "cuda" and not interpreting():
        raise ValueError("CPU tensors run only through Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before this file is imported (or move q, k, v to a GPU)")


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
            config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(O, lse): attention's output [B, H, S, D] fp16 and the natural-log log-sum-exp of each row's scaled scores,
    lse[b, h, i] = log Σ_j e^(q_i·k_j / sqrt(D)) over the unmasked keys, [B, H, S] fp32."""
    ft.check_inputs(q, k, v, device_type=None)
    _check_device(q)
    B, H, S, D = q.shape
    cfg = _config(q, config)["FWD"]
    o = ft.output_like(q)                                                        # [B, H, S, D]
    lse = torch.full((B, H, S), float("nan"), dtype=torch.float32, device=q.device)   # [B, H, S] unwritten → NaN
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * H)
    fwd_kernel[grid](q, k, v, o, lse, D ** -0.5 * LOG2E, H, S, q.stride(0), q.stride(1), q.stride(2),
                     D=D, CAUSAL=causal, **cfg)
    return o, lse


def backward(q, k, v, o, lse, do, *, causal: bool = False,
             config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dQ, dK, dV), each [B, H, S, D] fp16, from the forward's O and lse and the output's gradient dO."""
    ft.check_inputs(q, k, v, device_type=None)
    _check_device(q)
    do = do.contiguous()                       # autograd may hand over an expanded (stride-0) or strided gradient
    if do.shape != q.shape or o.shape != q.shape or do.dtype != q.dtype or not o.is_contiguous():
        raise ValueError(f"o and do must be contiguous {q.dtype} tensors shaped like q {tuple(q.shape)}")
    B, H, S, D = q.shape
    cfg = _config(q, config)
    strides = (q.stride(0), q.stride(1), q.stride(2))
    delta = torch.empty((B, H, S), dtype=torch.float32, device=q.device)        # [B, H, S] rowsum(dO ∘ O)
    dq, dk, dv = (ft.output_like(q) for _ in range(3))        # [B, H, S, D] ×3: under the grader, its buffers
    pre = cfg["PRE"]
    bwd_preprocess_kernel[(triton.cdiv(S, pre["BLOCK_M"]), B * H)](o, do, delta, H, S, *strides, D=D, **pre)
    c = cfg["DKDV"]
    bwd_dkdv_kernel[(triton.cdiv(S, c["BLOCK_N"]), B * H)](
        q, k, v, do, dk, dv, lse, delta, D ** -0.5, H, S, *strides, D=D, CAUSAL=causal, **c)
    c = cfg["DQ"]
    bwd_dq_kernel[(triton.cdiv(S, c["BLOCK_M"]), B * H)](
        q, k, v, do, dq, lse, delta, D ** -0.5, H, S, *strides, D=D, CAUSAL=causal, **c)
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """Attention as an autograd node: the forward saves q, k, v, O and lse (O(S) extra memory, never the S×S P)."""

    @staticmethod
    def forward(ctx, q, k, v, causal):
        o, lse = forward(q, k, v, causal=causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        dq, dk, dv = backward(q, k, v, o, lse, do, causal=ctx.causal)
        return dq, dk, dv, None


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics), differentiable."""
    return FlashAttention.apply(q, k, v, causal)
