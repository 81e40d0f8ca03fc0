"""The backward pass of attention: the float64 reference for O, lse, dQ, dK, dV; the tolerance rule; the FLOP count.

With ``s = scale · Q Kᵀ`` (``scale = 1/sqrt(D)``, keys j > i masked to −∞ when causal), ``P = softmax(s)`` row by
row, ``O = P V`` and ``dO`` the gradient of the loss with respect to O:

    dV = Pᵀ dO      dP = dO Vᵀ      dS = P ∘ (dP − rowsum(dO ∘ O))      dQ = scale · dS K      dK = scale · dSᵀ Q

(rowsum(dO ∘ O) = rowsum(P ∘ dP) because O = P V: the softmax Jacobian's correction term, ``delta`` in the kernels.)
:func:`reference_grads` evaluates these formulas in float64, one group of (b, h) slabs at a time;
:func:`autograd_grads` gets the same from torch's autograd in float64 (the tests check that the two agree, so the
formulas above are not taken on trust).

The tolerance rule is the forward's (``flashtutor/check.py``), applied to every gradient: for every row of a gradient
(a query row of O and dQ, a key row of dK and dV), the kernel's worst absolute error against float64 may be at most
``RATIO`` = 2 times the error of SDPA's own fp16 backward on that row, plus one fp16 ulp of the row's largest |ref|.
SDPA's error is measured on the same inputs, the same ``dO`` and the same device (:func:`baseline_grads`).

On a CPU, SDPA is not a fair yardstick for a tensor-core backward, so :func:`baseline_grads` there returns
:func:`fa2_precision_grads` instead: the FlashAttention-2 algorithm with its roundings (P cast to fp16 before PᵀdO,
dS cast to fp16 before dS K and dSᵀQ, delta from the fp16 O that the forward saved, fp32 accumulation, fp16 results),
which is what the GPU backends of SDPA (FLASH, cuDNN) feed their tensor cores too. Measured on this course's CPU
machine (torch 2.13, B2 H3 S70 D64, q and k ×6, seed 0): on the worst dQ row, torch's CPU SDPA (its flash kernel,
fp32 throughout) was off by 1.7e-5, a float32 evaluation of the formulas by 6e-5, and the FA2-precision evaluation by
6e-3 — the last from delta: rounding O to fp16 moves rowsum(dO ∘ O) by ~2^-11·|O||dO|·sqrt(D), and that error reaches
every dS_ij of the row. With large logits (nearly one-hot rows) dQ and dK are small differences, so that error is large
relative to them. Against CPU SDPA, a kernel that rounds where the tensor cores do fails those rows (this chapter's
solution did, by 14× to 40×); ``scripts/ch08_gpu.py`` prints, per shape, how the FA2-precision error compares with
the real SDPA backends' on a GPU.

The log-sum-exp, an fp32 output with no SDPA counterpart in the public API, gets a fixed bound
(:data:`LSE_ABS`, :data:`LSE_REL`): an error δ in lse_i multiplies row i of the recomputed P by e^(−δ).

One term is added to the bounds of dQ and dK, because the backward receives O in fp16 (the forward's output) and so
cannot know delta_i = rowsum(dO ∘ O)_i better than β_i = 2^-11 · Σ_d |dO_id|·|O_id| (half an fp16 ulp on each O_id).
An error ε_i ≤ β_i in delta_i shifts dS_ij by −P_ij·ε_i, hence dQ_i by −scale·ε_i·(P K)_i and dK_j by
−scale·Σ_i P_ij ε_i Q_i; the allowances ``dq_floor`` = scale·β_i·max_d |(P K)_id| and ``dk_floor`` =
scale·max_d (Pᵀ (β ∘ |Q|))_jd (per row, from the float64 reference) cover that. It matters where logits are large:
a nearly one-hot row has dQ_i ≈ 0 (dP_ij* ≈ delta_i cancel), and the sign-random rounding of O makes SDPA's error on
that row small or large by luck, independently of the kernel's, so the ratio of the two is noise (measured: 14× on
one row of 420 at B2 H3 S70 D64, q and k ×6, for a kernel that is otherwise within 2× everywhere). β is a worst case,
about sqrt(D) above the typical error, and still ~200× below what omitting delta costs (dK at B2 H3 S37 D64;
a dropped causal mask: ~10^5×), as tests/test_ch08.py checks.

FLOPs: the forward does two matmuls of 2·S²·D per (b, h) (QKᵀ and PV); the backward five (QKᵀ recomputed, dV = PᵀdO,
dP = dO Vᵀ, dQ = dS K, dK = dSᵀQ): 2.5× the forward's, half of that for causal, as FlashAttention's papers count it.
A backward that recomputes QKᵀ and dP a second time for dQ does 3.5× the forward's work but is credited with 2.5×,
so its TFLOP/s compare with SDPA's on the same footing.

This module imports torch only (the grader's judge side and the CPU tests may use it without Triton).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .check import _unravel      # a flat index into [B, H, S, D] coordinates, as the forward check reports them

RATIO = 2.0                 # allowed error relative to SDPA's own fp16 error (as the forward's rule, check.RATIO)
FP16_ULP_AT_1 = 2.0 ** -10  # fp16 has 10 explicit mantissa bits: ulp(x) <= x * 2^-10
# lse: an error δ scales the recomputed P_ij = e^(s_ij − lse_i) by e^(−δ) ≈ 1 − δ. 2^-12 (a quarter of an fp16 ulp at
# 1) keeps that below the rounding P gets anyway when it is cast to fp16 for the matmuls; the relative term allows
# for fp32 scores: s_ij = scale·Σ_d q_id k_id summed in fp32 over D ≤ 128 terms carries ~D·2^-24 of |s| in error.
LSE_ABS = 2.0 ** -12
LSE_REL = 2.0 ** -16
DELTA_ROUNDING = 2.0 ** -11   # half an fp16 ulp, relative: the most rounding to fp16 changes a (normal) value by
NAMES = ("o", "dq", "dk", "dv")   # the tensors the rule applies to, in the order they are reported


# ------------------------------------------------------------------------------------------------ references -------
def _mask(S: int, device) -> torch.Tensor:
    return torch.ones(S, S, dtype=torch.bool, device=device).triu_(1)          # [S, S] True where key j > query i


def reference_grads(q, k, v, do, *, causal: bool = False, dtype: torch.dtype = torch.float64) -> dict:
    """{o, lse, dq, dk, dv, dq_floor, dk_floor} in ``dtype`` (float64 by default, on q's device) from the explicit
    formulas.

    lse is the natural-log log-sum-exp of each row's scaled scores, [B, H, S]; dq_floor and dk_floor, [B, H, S], are
    the allowances for delta's fp16 rounding (see the module's docstring). Slabs are processed a group at a time so
    that the S×S matrices of a group stay under ~1 GiB."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D)
    out = {n: torch.empty((B, H, S, D), dtype=dtype, device=q.device) for n in NAMES}
    for n in ("lse", "dq_floor", "dk_floor"):
        out[n] = torch.empty((B, H, S), dtype=dtype, device=q.device)
    flat = {n: t.view(B * H, S, -1) if t.dim() == 4 else t.view(B * H, S) for n, t in out.items()}
    per_slab = 4 * S * S * torch.finfo(dtype).bits // 8                       # s, p, dp, ds alive at once
    step = max(1, (1 << 30) // max(per_slab, 1))
    qf, kf, vf, dof = (t.reshape(B * H, S, D) for t in (q, k, v, do))
    mask = _mask(S, q.device) if causal else None
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False                              # only matters for dtype=float32
    try:
        for i in range(0, B * H, step):
            Q, K, V, dO = (t[i:i + step].to(dtype) for t in (qf, kf, vf, dof))   # [n, S, D] ×4
            s = torch.matmul(Q, K.transpose(-1, -2)) * scale                   # [n, S, S]
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            lse = torch.logsumexp(s, dim=-1)                                   # [n, S]
            p = torch.exp(s - lse[..., None])                                  # [n, S, S]
            o = torch.matmul(p, V)                                             # [n, S, D]
            delta = (dO * o).sum(dim=-1)                                       # [n, S] rowsum(dO ∘ O)
            dp = torch.matmul(dO, V.transpose(-1, -2))                         # [n, S, S]
            ds = p * (dp - delta[..., None])                                   # [n, S, S]
            flat["o"][i:i + step] = o
            flat["lse"][i:i + step] = lse
            flat["dv"][i:i + step] = torch.matmul(p.transpose(-1, -2), dO)     # [n, S, D]
            flat["dq"][i:i + step] = torch.matmul(ds, K) * scale               # [n, S, D]
            flat["dk"][i:i + step] = torch.matmul(ds.transpose(-1, -2), Q) * scale   # [n, S, D]
            beta = DELTA_ROUNDING * (dO.abs() * o.abs()).sum(dim=-1)            # [n, S] most that fp16 O moves delta
            flat["dq_floor"][i:i + step] = scale * beta * torch.matmul(p, K).abs().amax(dim=-1)         # [n, S]
            flat["dk_floor"][i:i + step] = scale * torch.matmul(p.transpose(-1, -2),
                                                               beta[..., None] * Q.abs()).amax(dim=-1)  # [n, S]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    return out


def reference_rows(q, k, v, do, rows, *, causal: bool = False, chunk: int = 1024,
                   dtype: torch.dtype = torch.float64) -> dict:
    """The float64 reference on a few rows only, for shapes whose full reference is too large to keep (the grader's
    timed shapes, up to S = 16384): ``rows`` is a list of (b, h, i); for each, query row i's o, lse and dq and key row
    i's dk and dv, with dq_floor and dk_floor, as ``{name: tensor[len(rows), ...]}`` in ``rows``' order.

    Query row i needs its scores against every key; key row j needs column j of P, hence every query's lse and delta:
    each (b, h) that holds a row is walked once in blocks of ``chunk`` queries (a block's scores, ``chunk × S``, are
    the largest tensor), the sampled keys' dK and dV accumulated block by block. O(S²·D) per (b, h) sampled,
    memory O(chunk·S), whatever B and H are."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D)
    n = len(rows)
    out = {nm: torch.zeros((n, D), dtype=dtype, device=q.device) for nm in NAMES}
    for nm in ("lse", "dq_floor", "dk_floor"):
        out[nm] = torch.zeros(n, dtype=dtype, device=q.device)
    slabs: dict = {}
    for r, (b, h, i) in enumerate(rows):
        slabs.setdefault((int(b), int(h)), []).append((r, int(i)))
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for (b, h), picks in slabs.items():
            Q, K, V, dO = (t[b, h].to(dtype) for t in (q, k, v, do))          # [S, D] ×4
            where = torch.tensor([r for r, _ in picks], device=q.device)
            J = torch.tensor([i for _, i in picks], device=q.device)           # the sampled rows (as keys and queries)
            dk = torch.zeros((len(picks), D), dtype=dtype, device=q.device)
            dv = torch.zeros_like(dk)
            dk_floor = torch.zeros((len(picks), D), dtype=dtype, device=q.device)
            for c0 in range(0, S, chunk):
                c1 = min(S, c0 + chunk)
                s = torch.matmul(Q[c0:c1], K.transpose(0, 1)) * scale          # [c, S]
                if causal:
                    keys = torch.arange(S, device=q.device)
                    qs = torch.arange(c0, c1, device=q.device)
                    s.masked_fill_(keys[None, :] > qs[:, None], float("-inf"))
                lse = torch.logsumexp(s, dim=-1)                               # [c]
                p = torch.exp(s - lse[:, None])                                # [c, S]
                o = torch.matmul(p, V)                                         # [c, D]
                delta = (dO[c0:c1] * o).sum(dim=-1)                            # [c]
                beta = DELTA_ROUNDING * (dO[c0:c1].abs() * o.abs()).sum(dim=-1)   # [c]
                # the sampled keys: column j of P and dS for this block's queries
                pj = p[:, J]                                                   # [c, m]
                dpj = torch.matmul(dO[c0:c1], V[J].transpose(0, 1))            # [c, m]
                dsj = pj * (dpj - delta[:, None])                              # [c, m]
                dv += torch.matmul(pj.transpose(0, 1), dO[c0:c1])              # [m, D]
                dk += torch.matmul(dsj.transpose(0, 1), Q[c0:c1]) * scale      # [m, D]
                dk_floor += torch.matmul(pj.transpose(0, 1), beta[:, None] * Q[c0:c1].abs())   # [m, D]
                # the sampled queries that fall in this block
                inside = [(r, i - c0) for r, i in picks if c0 <= i < c1]
                if inside:
                    rr = torch.tensor([r for r, _ in inside], device=q.device)
                    ii = torch.tensor([i for _, i in inside], device=q.device)
                    dp = torch.matmul(dO[c0:c1][ii], V.transpose(0, 1))        # [m', S]
                    ds = p[ii] * (dp - delta[ii, None])                        # [m', S]
                    out["o"][rr] = o[ii]
                    out["lse"][rr] = lse[ii]
                    out["dq"][rr] = torch.matmul(ds, K) * scale
                    out["dq_floor"][rr] = scale * beta[ii] * torch.matmul(p[ii], K).abs().amax(dim=-1)
            out["dk"][where], out["dv"][where] = dk, dv
            out["dk_floor"][where] = scale * dk_floor.amax(dim=-1)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    return out


def check_rows(got: dict, rows, ref_rows: dict, baseline: dict) -> list[GradCheck]:
    """The rule of :func:`check_tensor` on the sampled ``rows`` only: ``got`` and ``baseline`` hold the full
    [B, H, S, D] tensors (o, dq, dk, dv; ``got`` may hold lse [B, H, S]), ``ref_rows`` is :func:`reference_rows`'
    answer for ``rows``. The sampled rows of each tensor are checked as one [1, 1, m, ...] tensor; the worst row is
    then named by its (b, h, s), in ``GradCheck.row`` and in the message."""
    idx = [tuple(int(x) for x in r) for r in rows]
    b, h, i = (torch.tensor(c) for c in zip(*idx))

    def pick(t):                                    # the sampled rows of a [B, H, S, ...] tensor, as [1, 1, m, ...]
        return t[b.to(t.device), h.to(t.device), i.to(t.device)][None, None]

    def named(c: GradCheck) -> GradCheck:           # position m in ``rows`` → its (b, h, s)
        if c.row:
            pos = c.row[2]
            c.row = idx[pos]
            c.message = c.message.replace(f"[b=0, h=0, s={pos}]", f"[b={c.row[0]}, h={c.row[1]}, s={c.row[2]}]")
        return c

    res = []
    for nm in NAMES:
        if nm not in got:
            continue
        if got[nm] is None or tuple(got[nm].shape[:3]) != tuple(baseline[nm].shape[:3]):
            res.append(check_tensor(nm, got[nm], baseline[nm].to(torch.float64), baseline[nm]))   # says the shape
            continue
        floor = ref_rows.get(f"{nm}_floor")
        res.append(named(check_tensor(nm, pick(got[nm]), ref_rows[nm][None, None], pick(baseline[nm]),
                                      None if floor is None else floor[None, None])))
    lse = got.get("lse")
    if lse is not None:
        whole = lse.dim() == 3 and tuple(lse.shape) == tuple(baseline["o"].shape[:3])
        c = check_lse(pick(lse) if whole else lse, ref_rows["lse"][None, None])
        res.append(named(c) if whole else c)
    return res


def autograd_grads(q, k, v, do, *, causal: bool = False, dtype: torch.dtype = torch.float64) -> dict:
    """{o, dq, dk, dv} from torch's autograd through plain float64 attention (small shapes: the S×S scores are kept)."""
    Q, K, V = (t.detach().to(dtype).requires_grad_(True) for t in (q, k, v))
    s = torch.matmul(Q, K.transpose(-1, -2)) / math.sqrt(q.shape[-1])          # [B, H, S, S]
    if causal:
        s = s.masked_fill(_mask(q.shape[-2], q.device), float("-inf"))
    o = torch.matmul(torch.softmax(s, dim=-1), V)                              # [B, H, S, D]
    o.backward(do.to(dtype))
    return {"o": o.detach(), "dq": Q.grad, "dk": K.grad, "dv": V.grad}


def sdpa_grads(q, k, v, do, *, causal: bool = False) -> dict:
    """{o, dq, dk, dv} from SDPA in q's dtype (fp16), with whichever backend is active (pin one with
    ``torch.nn.attention.sdpa_kernel`` around the call): the error the tolerance rule is scaled by."""
    Q, K, V = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(Q, K, V, is_causal=causal)
    o.backward(do)
    return {"o": o.detach(), "dq": Q.grad, "dk": K.grad, "dv": V.grad}


def fa2_precision_grads(q, k, v, do, *, causal: bool = False) -> dict:
    """{o, dq, dk, dv} by the FlashAttention-2 algorithm's rounding points, evaluated in fp32 on q's device: fp32
    scores and softmax; P rounded to fp16 before P V and Pᵀ dO; O rounded to fp16 (what the forward saves) before
    delta = rowsum(dO ∘ O); dS rounded to fp16 before dS K and dSᵀ Q; every result rounded to fp16. The CPU's stand-in
    for a GPU SDPA backward (see the module's docstring)."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D)
    f16, f32 = torch.float16, torch.float32
    out = {n: torch.empty((B, H, S, D), dtype=f16, device=q.device) for n in NAMES}
    flat = {n: t.view(B * H, S, D) for n, t in out.items()}
    step = max(1, (1 << 30) // max(4 * S * S * 4, 1))
    qf, kf, vf, dof = (t.reshape(B * H, S, D) for t in (q, k, v, do))
    mask = _mask(S, q.device) if causal else None
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for i in range(0, B * H, step):
            Q, K, V, dO = (t[i:i + step].to(f32) for t in (qf, kf, vf, dof))    # [n, S, D] ×4, fp16 values
            s = torch.matmul(Q, K.transpose(-1, -2)) * scale                   # [n, S, S]
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            p = torch.softmax(s, dim=-1)                                       # [n, S, S] fp32
            p16 = p.to(f16).to(f32)                                            # [n, S, S] as the tensor cores see it
            o16 = torch.matmul(p16, V).to(f16)                                 # [n, S, D] the saved O
            delta = (dO * o16.to(f32)).sum(dim=-1)                             # [n, S]
            dp = torch.matmul(dO, V.transpose(-1, -2))                         # [n, S, S]
            ds16 = (p * (dp - delta[..., None])).to(f16).to(f32)               # [n, S, S]
            flat["o"][i:i + step] = o16
            flat["dv"][i:i + step] = torch.matmul(p16.transpose(-1, -2), dO).to(f16)
            flat["dq"][i:i + step] = (torch.matmul(ds16, K) * scale).to(f16)
            flat["dk"][i:i + step] = (torch.matmul(ds16.transpose(-1, -2), Q) * scale).to(f16)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    return out


def baseline_grads(q, k, v, do, *, causal: bool = False) -> tuple[str, dict]:
    """(label, {o, dq, dk, dv}): the errors the rule scales. On a GPU, SDPA's fp16 backward with the active backend
    (pin one with ``torch.nn.attention.sdpa_kernel``); on a CPU, :func:`fa2_precision_grads`."""
    if q.device.type == "cuda":
        return "SDPA", sdpa_grads(q, k, v, do, causal=causal)
    return "FA2-precision (CPU stand-in for SDPA)", fa2_precision_grads(q, k, v, do, causal=causal)


# ------------------------------------------------------------------------------------------------ the rule ---------
@dataclass
class GradCheck:
    """The rule applied to one tensor (o, lse, dq, dk or dv)."""
    name: str
    ok: bool
    err: float = float("nan")        # the kernel's worst |got − ref| on the worst row (by err / bound)
    sdpa_err: float = float("nan")   # SDPA's worst error on that row (nan for lse)
    bound: float = float("nan")      # RATIO · sdpa_err + 1 fp16 ulp of the row's largest |ref|
    max_err: float = float("nan")    # the kernel's worst error over the whole tensor
    row: tuple = ()                  # (b, h, s) of the worst row
    margin: float = float("nan")     # min over rows of bound / err (≥ 1 passes; inf where every error is 0)
    message: str = ""
    worst: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def row_bounds(ref: torch.Tensor, sdpa_out: torch.Tensor, extra=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (..., i) of a [B, H, S, D] tensor: SDPA's worst error and the kernel's bound on that row (``extra``,
    [B, H, S]: an allowance added to the bound, e.g. ``dq_floor``)."""
    sdpa_err = (sdpa_out.to(ref.dtype) - ref).abs().amax(dim=-1)                  # [B, H, S]
    floor = FP16_ULP_AT_1 * ref.abs().amax(dim=-1) + 1e-6                         # [B, H, S]
    if extra is not None:
        floor = floor + extra.to(device=ref.device, dtype=ref.dtype)
    return sdpa_err, RATIO * sdpa_err + floor


def check_tensor(name: str, got: torch.Tensor, ref: torch.Tensor, sdpa_out: torch.Tensor, extra=None) -> GradCheck:
    """The rule on one [B, H, S, D] tensor; the message says which row, by how much, and SDPA's error there."""
    res = GradCheck(name=name, ok=False)
    if got is None or tuple(got.shape) != tuple(ref.shape):
        res.message = f"{name}: shape {None if got is None else tuple(got.shape)}, expected {tuple(ref.shape)}"
        return res
    g = got.detach().to(device=ref.device, dtype=ref.dtype)
    bad = ~torch.isfinite(g)
    if bad.any():
        first = _unravel(int(bad.flatten().nonzero()[0]), g.shape)
        res.err = res.max_err = float("inf")
        res.message = f"{name}: {int(bad.sum())} of {g.numel()} elements are NaN/Inf (first at {list(first)})"
        return res
    diff = (g - ref).abs()                                                   # [B, H, S, D]
    row_sdpa, row_bound = row_bounds(ref, sdpa_out, extra)                   # [B, H, S]
    row_err = diff.amax(dim=-1)                                              # [B, H, S]
    ratio = row_err / row_bound                                              # [B, H, S]
    r = _unravel(int(ratio.flatten().argmax()), row_err.shape)
    d = int(diff[r].argmax())
    res.err, res.sdpa_err, res.bound = row_err[r].item(), row_sdpa[r].item(), row_bound[r].item()
    res.max_err, res.row = diff.max().item(), r
    res.margin = res.bound / res.err if res.err > 0 else float("inf")
    res.worst = {"index": (*r, d), "expected": ref[(*r, d)].item(), "got": g[(*r, d)].item()}
    res.ok = res.err <= res.bound
    verdict = "ok" if res.ok else "FAIL"
    plus = " + delta allowance" if extra is not None else ""
    res.message = (f"{name}: {verdict}: worst row [b={r[0]}, h={r[1]}, s={r[2]}] error {res.err:.3g} vs allowed "
                   f"{res.bound:.3g} (2x SDPA's {res.sdpa_err:.3g} + 1 fp16 ulp{plus}); margin {res.margin:.3g}")
    return res


def check_lse(lse: torch.Tensor, ref_lse: torch.Tensor) -> GradCheck:
    """|lse − ref| ≤ LSE_ABS + LSE_REL·|ref| on every row (natural-log lse, [B, H, S])."""
    res = GradCheck(name="lse", ok=False)
    if lse is None or tuple(lse.shape) != tuple(ref_lse.shape):
        res.message = f"lse: shape {None if lse is None else tuple(lse.shape)}, expected {tuple(ref_lse.shape)}"
        return res
    g = lse.detach().to(device=ref_lse.device, dtype=ref_lse.dtype)
    if not torch.isfinite(g).all():
        res.err = res.max_err = float("inf")
        res.message = f"lse: {int((~torch.isfinite(g)).sum())} rows are NaN/Inf (unwritten?)"
        return res
    diff = (g - ref_lse).abs()                                               # [B, H, S]
    bound = LSE_ABS + LSE_REL * ref_lse.abs()                                # [B, H, S]
    r = _unravel(int((diff / bound).flatten().argmax()), diff.shape)
    res.err, res.bound, res.max_err, res.row = diff[r].item(), bound[r].item(), diff.max().item(), r
    res.margin = res.bound / res.err if res.err > 0 else float("inf")
    res.ok = res.err <= res.bound
    res.message = (f"lse: {'ok' if res.ok else 'FAIL'}: worst row [b={r[0]}, h={r[1]}, s={r[2]}] error "
                   f"{res.err:.3g} vs allowed {res.bound:.3g} (expected {ref_lse[r].item():.6g}, "
                   f"got {g[r].item():.6g})")
    return res


def check_grads(got: dict, ref: dict, sdpa: dict, names=NAMES) -> list[GradCheck]:
    """The rule on each of ``names`` present in ``got`` (and on lse when ``got`` has one)."""
    out = [check_tensor(n, got[n], ref[n], sdpa[n], ref.get(f"{n}_floor")) for n in names if n in got]
    if "lse" in got and "lse" in ref:
        out.append(check_lse(got["lse"], ref["lse"]))
    return out


def check_kernel(forward, backward, q, k, v, do, *, causal: bool = False, ref: dict | None = None,
                 baseline: dict | None = None) -> list[GradCheck]:
    """Run ``forward(q, k, v, causal=) -> (o, lse)`` and ``backward(q, k, v, o, lse, do, causal=) -> (dq, dk, dv)``
    and apply the rule to o, dq, dk, dv and lse (``ref`` and ``baseline`` are computed when not given)."""
    ref = ref if ref is not None else reference_grads(q, k, v, do, causal=causal)
    baseline = baseline if baseline is not None else baseline_grads(q, k, v, do, causal=causal)[1]
    o, lse = forward(q, k, v, causal=causal)
    dq, dk, dv = backward(q, k, v, o, lse, do, causal=causal)
    return check_grads(dict(o=o, lse=lse, dq=dq, dk=dk, dv=dv), ref, baseline)


# ------------------------------------------------------------------------------------------------ cost -------------
def forward_flops(B: int, H: int, S: int, D: int, causal: bool = False) -> float:
    """4·B·H·S²·D: QKᵀ and PV, 2·S²·D each per (b, h); causal does about half."""
    f = 4.0 * B * H * S * S * D
    return f / 2 if causal else f


def backward_flops(B: int, H: int, S: int, D: int, causal: bool = False) -> float:
    """2.5× the forward: QKᵀ (recomputed), PᵀdO, dO Vᵀ, dS K, dSᵀQ, 2·S²·D each per (b, h); causal half."""
    return 2.5 * forward_flops(B, H, S, D, causal)


def tflops(flops: float, us: float) -> float:
    """TFLOP/s of ``flops`` done in ``us`` microseconds."""
    return flops / (us * 1e-6) / 1e12
