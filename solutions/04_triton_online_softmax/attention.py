"""Chapter 4 exercise: FlashAttention-2 in Triton — one program per (query block, batch·head).

The idea: a program owns BLOCK_M query rows of one (batch, head). It keeps them on chip and streams
the keys and values past in blocks of BLOCK_N, keeping per row a running max ``m_i``, a running sum
``l_i`` and an unnormalised output ``acc`` (the online softmax). Scores never reach memory: HBM
traffic is Q, K, V read and O written, plus K and V re-read once per query block.
What changed since chapter 3: the S×S score matrix is gone, and ``tl.dot`` puts both matmuls on the
tensor cores without us writing fragments; the block loop, the masks and the softmax update are ours.
Limitation: one fixed tile configuration per head dim, plain pointer loads (no TMA), and a mask
computed on every key block even where no key is masked; ``flashtutor/kernels/k04_triton_fa2_hopper.py``
removes those three.

You write the body of the K/V loop in ``flash_attention_kernel``; the rest is given. Grade it with
``flashtutor grade 04`` or, in the notebook, ``flashtutor.grade("04")``. Without a GPU it runs through
Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, set before Triton compiles this file).
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

import flashtutor as ft

LOG2E = 1.4426950408889634    # log2(e) = 1/ln 2: e^x = 2^(x·log2 e), and 2^x is one instruction (MUFU.EX2)

# One tile configuration for both head dims, chosen from the chapter's sweep when it ran on an H200 (the
# notebook shows the same sweep run on an H100): BLOCK_M query rows and BLOCK_N keys per step, warps per
# program, pipeline stages.
CONFIGS = {
    64: dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    128: dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
}
# Under the interpreter (CPU) small tiles, so that the course's small CPU shapes still span
# several blocks and exercise the partial-block masks.
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=1)


@triton.jit
def flash_attention_kernel(
    Q, K, V, O,                       # pointers to [B, H, S, D] fp16 tensors, contiguous
    qk_scale,                         # (1/sqrt(D))·log2(e): scores come out in base-2 units
    H, S,                             # number of heads, sequence length
    stride_b, stride_h, stride_s,     # element strides of a batch, a head, a row (a column's is 1)
    D: tl.constexpr,                  # head dim (64 or 128)
    BLOCK_M: tl.constexpr,            # Br: query rows per program
    BLOCK_N: tl.constexpr,            # Bc: keys per step of the loop
    CAUSAL: tl.constexpr,
):
    # Which tile of the output is ours: grid = (ceil(S / BLOCK_M), B·H).
    pid_m = tl.program_id(0)                                   # query block
    pid_bh = tl.program_id(1)                                  # flattened (batch, head)
    b = pid_bh // H
    h = pid_bh % H
    # First element of this (b, h) slab: b·stride_b + h·stride_h, in 64-bit (B·H·S·D can pass 2^31).
    head = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h
    q_ptr = Q + head
    k_ptr = K + head
    v_ptr = V + head
    o_ptr = O + head

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)          # [BLOCK_M] query positions
    offs_n = tl.arange(0, BLOCK_N)                             # [BLOCK_N] key offsets within a block
    offs_d = tl.arange(0, D)                                   # [D]
    row_ok = offs_m < S                                        # [BLOCK_M] the last query block may be partial

    # Q tile: loaded once, reused against every K/V block. Rows past S read as 0 and are never stored.
    q = tl.load(q_ptr + offs_m[:, None] * stride_s + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)               # [BLOCK_M, D] fp16

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)        # [BLOCK_M] running row max (base 2)
    l_i = tl.zeros([BLOCK_M], tl.float32)                      # [BLOCK_M] running Σ 2^(s - m_i)
    acc = tl.zeros([BLOCK_M, D], tl.float32)                   # [BLOCK_M, D] running Σ 2^(s - m_i)·v

    # Causal: keys past this block's last query row are masked for every row, so stop there.
    end = S
    if CAUSAL:
        end = tl.minimum(S, (pid_m + 1) * BLOCK_M)
    for start_n in range(0, end, BLOCK_N):
        # BEGIN SOLUTION [jit]: load a K and a V block (masked past S), scores = q·kᵀ·qk_scale, mask them to -inf (past S; causal: key > query), then the online-softmax update of m_i, l_i, acc
        offs_kv = start_n + offs_n                             # [BLOCK_N] key positions of this step
        kv_ok = offs_kv < S                                    # [BLOCK_N] the last key block may be partial
        k = tl.load(k_ptr + offs_kv[:, None] * stride_s + offs_d[None, :],
                    mask=kv_ok[:, None], other=0.0)            # [BLOCK_N, D] fp16
        v = tl.load(v_ptr + offs_kv[:, None] * stride_s + offs_d[None, :],
                    mask=kv_ok[:, None], other=0.0)            # [BLOCK_N, D] fp16
        scores = tl.dot(q, tl.trans(k)) * qk_scale             # [BLOCK_M, BLOCK_N] fp32, base-2 units
        keep = kv_ok[None, :]                                  # [1, BLOCK_N]
        if CAUSAL:
            keep = keep & (offs_kv[None, :] <= offs_m[:, None])   # [BLOCK_M, BLOCK_N] key j ≤ query i
        scores = tl.where(keep, scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))       # [BLOCK_M] the max including this block
        alpha = tl.exp2(m_i - m_new)                           # [BLOCK_M] rescales what was summed so far
        p = tl.exp2(scores - m_new[:, None])                   # [BLOCK_M, BLOCK_N] in [0, 1]; masked → 0
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)                    # [BLOCK_M, D] += p·v, fp16 in, fp32 out
        m_i = m_new
        # END SOLUTION

    acc = acc / l_i[:, None]                                   # O_i = acc_i / l_i
    tl.store(o_ptr + offs_m[:, None] * stride_s + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=row_ok[:, None])


def interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def launch(q, k, v, *, causal=False, BLOCK_M, BLOCK_N, num_warps=4, num_stages=3):
    """Run the kernel with an explicit tile configuration (the chapter's sweep calls this)."""
    ft.check_inputs(q, k, v, device_type=None)
    if q.device.type != "cuda" and not interpreting():
        raise ValueError("CPU tensors run only through Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before this file is imported (or move q, k, v to a GPU)")
    B, H, S, D = q.shape
    o = ft.output_like(q)                                                      # [B, H, S, D]
    grid = (triton.cdiv(S, BLOCK_M), B * H)
    flash_attention_kernel[grid](
        q, k, v, o, D ** -0.5 * LOG2E, H, S, q.stride(0), q.stride(1), q.stride(2),
        D=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, CAUSAL=causal, num_warps=num_warps, num_stages=num_stages)
    return o


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics)."""
    ft.check_inputs(q, k, v, device_type=None)
    cfg = INTERPRETER_CONFIG if interpreting() else CONFIGS[q.shape[-1]]
    return launch(q, k, v, causal=causal, **cfg)
