"""The backward pass under the grader (chapter 8): the judge's side of a backward slot.

A slot of the backward layout (:mod:`.protocol`) holds ``q | k | v | do | o | lse | dq | dk | dv``. Before the
learner's ``backward`` runs, the judge writes random q, k, v and do, and o and lse *of its own*: the output and the
natural-log log-sum-exp of each row's scaled scores, as the chapter's ``forward`` must produce them. So the backward
is timed alone, on the inputs a correct forward would have given it, and a backward that depends on anything its
forward left behind (an lse kept from the last forward call, say) computes from stale numbers.

Here: filling a block of slots (:func:`fill_slots`: on a GPU, o and lse from SDPA's FLASH forward, which returns the
same natural-log lse; on a CPU, float32 formulas), SDPA's backward as the timed yardstick (:class:`SdpaBackward`:
``torch.autograd.grad`` through SDPA's forward, pinned to one backend, on copies of the slot's inputs made before the
batch), the sampled-row check of every timed call's gradients (:func:`sampled_rows_check`) and the full re-check of a
few (:func:`recheck`), and what a failed correctness case says (:func:`nothing_computed`, :func:`explain`). Imports
torch and the course's reference (``flashtutor.backward``) only: nothing of the learner's.
"""
from __future__ import annotations

import math
import random

from .protocol import numel, parts, slot_elems, views

_RNG = random.Random(random.SystemRandom().randrange(1 << 62))
GRADS = ("dq", "dk", "dv")


# ---------------------------------------------------------------- the judge's forward for a slot -------------------
def forward_with_lse(q, k, v, causal: bool):
    """(o fp16, lse fp32 [B, H, S]) for the judge's slots: on a GPU SDPA's FLASH kernel (its ``logsumexp`` is the
    natural-log lse of the scaled scores), on a CPU the formulas in float32 (small shapes only)."""
    import torch
    if q.device.type == "cuda":
        try:
            res = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)
            return res[0], res[1].float()
        except RuntimeError:
            pass
    D = q.shape[-1]
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) / math.sqrt(D)
    if causal:
        S = q.shape[-2]
        s.masked_fill_(torch.ones(S, S, dtype=torch.bool, device=q.device).triu_(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.exp(s - lse[..., None]), v.float())
    return o.to(q.dtype), lse


def fill_inputs(block, shape, gen, seed: int, qk_std: float) -> None:
    """``block``: [n, slot] rows of the backward layout. Random q, k, v, do (q and k × ``qk_std``), the same
    numbers for the same seed and n whatever the memory (so a block can be regenerated for a re-check)."""
    n = numel(shape)
    gen.manual_seed(seed)
    block[:, : 4 * n].normal_(generator=gen)
    if qk_std != 1.0:
        block[:, : 2 * n].mul_(qk_std)


def fill_slots(arena, shape, count: int, gen, seed: int, qk_std: float, causal: bool) -> None:
    """Slots 0…count−1: fresh random q, k, v, do; the judge's o and lse for them; dq, dk, dv never written."""
    from .protocol import fill_unwritten
    size = slot_elems(shape, "backward")
    block = arena[: count * size].view(count, size)
    fill_inputs(block, shape, gen, seed, qk_std)
    dq_at = next(start for name, start, _ in parts(shape, "backward") if name == "dq")
    fill_unwritten(block[:, dq_at:])                   # dq, dk, dv: contiguous at the end of each slot
    for i in range(count):
        q, k, v, do, o, lse, *_ = views(arena, shape, i, "backward")
        o_, lse_ = forward_with_lse(q, k, v, causal)
        o.copy_(o_)
        lse.copy_(lse_)


def regenerate(shape, gen, seed: int, count: int, slot: int, qk_std: float, device):
    """The q, k, v, do slot ``slot`` of a block of ``count`` slots was given, written again in fresh memory."""
    import torch
    size = slot_elems(shape, "backward")
    n = numel(shape)
    block = torch.empty(count, 4 * n, dtype=torch.float16, device=device)
    pad = torch.empty(count, size, dtype=torch.float16, device=device)
    fill_inputs(pad, shape, gen, seed, qk_std)          # the same view shape as the arena's: the same numbers
    block.copy_(pad[:, : 4 * n])
    del pad
    return tuple(block[slot, j * n:(j + 1) * n].view(*shape) for j in range(4))


# ---------------------------------------------------------------- SDPA's backward, timed by the judge --------------
class SdpaBackward:
    """SDPA's backward as a local candidate: for each slot, SDPA's forward is run once (before any batch, under the
    pinned backend) on private copies of the slot's q, k, v, and each call is ``torch.autograd.grad`` of that output
    with the slot's ``do`` — the backward kernels alone, as in a training step. (The copies keep the inputs that
    autograd saved from being overwritten by the next batch's fresh inputs, which it would refuse.)"""

    def __init__(self, arena, shape, causal: bool, count: int):
        import torch
        self.torch = torch
        self.graphs = {}
        for i in range(count):
            q, k, v, do, *_ = views(arena, shape, i, "backward")
            leaves = tuple(t.detach().clone().requires_grad_(True) for t in (q, k, v))
            out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
            self.graphs[do.data_ptr()] = (out, leaves)

    def __call__(self, q, k, v, do, o, lse, dq, dk, dv, causal: bool):
        out, leaves = self.graphs[do.data_ptr()]
        return self.torch.autograd.grad(out, leaves, do, retain_graph=True)


# ---------------------------------------------------------------- evidence from the timed calls --------------------
def sampled_rows_check(arena, shape, slots, causal: bool, rows: int = 8) -> str:
    """Every timed call's dq, dk and dv, on ``rows`` random rows of one random (b, h) per call, against a float32
    reference of those rows (:func:`flashtutor.backward.reference_rows`) from the slot's own q, k, v, do. Loose on
    purpose (2 % of the row's largest value + 1e-3): it finds gradients that are not gradients — never written,
    computed from a stale lse, left from another call — on every call, not the last bits (the correctness cases
    judge those). Returns '' or what is wrong, for the first bad call."""
    import torch

    from ..backward import reference_rows
    from .protocol import unwritten_mask
    B, H, S, D = shape
    for pos, slot in enumerate(slots):
        q, k, v, do, o, lse, dq, dk, dv = views(arena, shape, slot, "backward")
        b, h = _RNG.randrange(B), _RNG.randrange(H)
        picks = [(b, h, i) for i in sorted(_RNG.sample(range(S), min(rows, S)))]
        ref = reference_rows(q, k, v, do, picks, causal=causal, dtype=torch.float32)
        idx = torch.tensor([i for _, _, i in picks], device=q.device)
        for name, got in (("dq", dq), ("dk", dk), ("dv", dv)):
            g = got[b, h].index_select(0, idx)                                   # [m, D]
            never = unwritten_mask(g).any(dim=-1)
            g = g.float()
            err = (g - ref[name]).abs().amax(dim=-1)                             # [m]
            bound = 0.02 * ref[name].abs().amax(dim=-1) + 1e-3
            bad = never | ~(err <= bound)
            if bool(bad.any()):
                r = int(bad.nonzero()[0])
                what = ("never written (still the grader's pattern)" if bool(never[r])
                        else f"off by {float(err[r]):.3g} (allowed {float(bound[r]):.3g})")
                return (f"call {pos + 1} of a batch of {len(slots)}: {name} row [b={b}, h={h}, s={picks[r][2]}] is "
                        f"{what}")
    return ""


# ---------------------------------------------------------------- one correctness case -----------------------------
def worst(checks):
    """The failing check with the smallest margin, else the passing one with the smallest margin."""
    bad = [c for c in checks if not c.ok]
    pool = bad or list(checks)
    return min(pool, key=lambda c: c.margin if c.margin == c.margin else -1.0)


def nothing_computed(got: dict, ref: dict) -> str:
    """'' or what says that a backward-pass output was never computed, though written: a gradient that is zero
    everywhere where the reference is not (the accumulators were stored as they started: the loop over the other
    blocks is still the TODO), or an lse that is NaN in every row (the buffer's own fill, never stored over)."""
    import torch
    said = []
    for name, t in got.items():
        if name == "lse":
            if bool(torch.isnan(t).all()):
                said.append("lse is NaN in every row: the forward never stored it over its buffer's NaN fill")
        elif not bool(t.any()) and bool(ref[name].any()):
            said.append(f"{name} is zero everywhere")
    if not said:
        return ""
    return ("; ".join(said) + ": nothing was accumulated or stored. Is the loop (or the store) still the exercise's "
            "TODO stub?")


def explain(failed: list, passed: list, causal: bool) -> str:
    """One line on the likely cause, from which tensors failed and which passed (the backward's own mistakes)."""
    names = {c.name for c in failed}
    if not names:
        return ""
    if names == {"lse"} or names == {"o", "lse"} or names == {"o"}:
        return "the forward is wrong (o or lse): check the log-sum-exp, natural log of the scaled scores' row sums"
    if names == {"dq"}:
        return "only dQ is wrong: the dQ loop (its scale, its mask, or lost updates when programs add to one row)"
    if names == {"dk"} or names == {"dq", "dk"}:
        return ("dV is right but dK (and dQ) are not: dS — the softmax correction P ∘ (dP − delta), delta = rowsum(dO "
                "∘ O) — or the scale on dS")
    if {"dq", "dk", "dv"} <= names:
        return ("every gradient is wrong, so P itself is: recompute it from the lse you are given (natural log: "
                "P = e^(s − lse), s the scaled scores), not from one kept from a forward call, and check the scale on "
                "the scores" + (" and the causal mask in both loops" if causal else ""))
    if {"dk", "dv"} <= names and causal:
        return "dK and dV are wrong on a causal case: the causal mask (or the diagonal block) in the dK/dV loop?"
    return ""


# ---------------------------------------------------------------- timing: SDPA's backend, re-checks ----------------
BACKENDS = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def pinned_sdpa_backward(arena, shape, causal: bool, count: int):
    """(backend name, the context that pins it, :class:`SdpaBackward` for slots 0…count−1): the first of cuDNN,
    FLASH, memory-efficient, math whose forward and backward accept these inputs (what PyTorch picks on Hopper).
    The slots' inputs must be written first."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    last = None
    for name in BACKENDS:
        ctx = sdpa_kernel(getattr(SDPBackend, name))
        try:
            with ctx:
                cand = SdpaBackward(arena, shape, causal, count)
                cand(*views(arena, shape, 0, "backward"), causal)
            torch.cuda.current_stream().synchronize()
        except RuntimeError as e:
            last = e
            continue
        return name.lower().replace("_attention", ""), sdpa_kernel(getattr(SDPBackend, name)), cand
    raise RuntimeError(f"no SDPA backend runs this backward: {last}")


class Recheck:
    """A timed call's gradients re-checked (the shape of :class:`flashtutor.check.CheckResult` that the timed
    phase reads: ok and message)."""

    def __init__(self, ok: bool, message: str):
        self.ok, self.message = ok, message


def recheck(p, inputs, out, rows: int = 64) -> Recheck:
    """One timed call's dq, dk, dv (``out``) under the chapter's rule on ``rows`` random rows, against the float64
    reference of those rows and SDPA's backward on the same inputs (``inputs``: q, k, v, do)."""
    from .. import backward as bw
    q, k, v, do = inputs
    B, H, S, D = p.shape
    picks = [(_RNG.randrange(B), _RNG.randrange(H), _RNG.randrange(S)) for _ in range(rows)]
    ref = bw.reference_rows(q, k, v, do, picks, causal=p.causal)
    baseline = bw.sdpa_grads(q, k, v, do, causal=p.causal) if q.device.type == "cuda" else \
        bw.fa2_precision_grads(q, k, v, do, causal=p.causal)
    checks = bw.check_rows(dict(zip(GRADS, out)), picks, ref, baseline)
    failed = [c for c in checks if not c.ok]
    return Recheck(not failed, "; ".join(c.message for c in failed))
