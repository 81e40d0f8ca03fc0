"""Is a kernel's output right? The error-ratio rule, NaN poisoning, and explanations.

The rule is FlashAttention's own test, applied per output row: compute a high-precision reference;
for every row (b, h, i), the learner's worst absolute error on that row may be at most ``RATIO``
times SDPA's worst error on the same row, plus one fp16 ulp of the row's largest output. The ulp
term lets a correct fp32-accumulating kernel whose final rounding falls the other way than SDPA's
pass (its error is that rounding: at most half an ulp). Judging per row keeps the bound tight where
outputs are small: with a global maximum, the few large outputs (e.g. the first rows of causal
attention, which average only a handful of values) would set a loose bound for every row.

Before the call every output buffer is filled with NaN (see :func:`flashtutor.output_like`), so
an element the kernel never wrote shows up as NaN — and NaN or Inf anywhere fails.
When the check fails it says why in the learner's terms: which index, expected vs got, and the
likely cause where the pattern tells (unwritten tail, one batch/head only, wrong scale, ignored
causal mask, overflow without max subtraction).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .problems import Problem, reference

RATIO = 2.0                 # allowed error relative to SDPA's own fp16 error
FP16_ULP_AT_1 = 2.0 ** -10  # fp16 has 10 explicit mantissa bits: ulp(x) <= x * 2^-10


@dataclass
class CheckResult:
    ok: bool
    problem: str
    seed: int
    err: float = float("nan")        # learner's max |out - ref| on the worst row (by err / bound)
    sdpa_err: float = float("nan")   # SDPA's max |out - ref| on that row
    bound: float = float("nan")      # RATIO * sdpa_err + 1 ulp of that row's largest |ref|
    max_err: float = float("nan")    # learner's max |out - ref| over the whole output
    message: str = ""
    cause: str = ""                  # short tag: nan, unwritten, tail, scale, causal, batch, shape, ...
    worst: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def row_bounds(ref: torch.Tensor, sdpa_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (..., i): SDPA's worst error and the learner's bound on that row."""
    sdpa_err = (sdpa_out.to(ref.dtype) - ref).abs().amax(dim=-1)                 # [B, H, S]
    floor = FP16_ULP_AT_1 * ref.abs().amax(dim=-1) + 1e-6                        # [B, H, S]
    return sdpa_err, RATIO * sdpa_err + floor


def validate_output(p: Problem, q: torch.Tensor, out) -> str | None:
    """Return an error message if ``out`` is not a tensor shaped and typed like q, else None."""
    if not isinstance(out, torch.Tensor):
        return f"attention() returned {type(out).__name__}, expected a torch.Tensor shaped like q {tuple(q.shape)}"
    if tuple(out.shape) != tuple(q.shape):
        return f"output has shape {tuple(out.shape)}, expected {tuple(q.shape)} ([B, H, S, D] like q)"
    if out.dtype != q.dtype:
        return f"output dtype is {out.dtype}, expected {q.dtype} (the same as q)"
    if out.device != q.device:
        return f"output is on {out.device}, expected {q.device} (the same device as q)"
    return None


def check_output(p: Problem, q, k, v, out, *, ref=None, sdpa_out=None, seed: int = 0) -> CheckResult:
    """Apply the rule to one output; explain a failure."""
    res = CheckResult(ok=False, problem=p.name, seed=seed)
    bad = validate_output(p, q, out)
    if bad:
        res.message, res.cause = bad, "shape"
        return res
    if ref is None:
        ref = reference(q, k, v, causal=p.causal)
    if sdpa_out is None:
        from .problems import sdpa
        sdpa_out = sdpa(q, k, v, causal=p.causal)
    o = out.to(ref.dtype)

    nonfinite = ~torch.isfinite(o)
    if nonfinite.any():
        res.err = res.max_err = float("inf")
        res.message, res.cause = _explain_nonfinite(p, o, nonfinite)
        return res

    diff = (o - ref).abs()                                   # [B, H, S, D]
    row_sdpa, row_bound = row_bounds(ref, sdpa_out)          # [B, H, S]
    row_err = diff.amax(dim=-1)                              # [B, H, S]
    worst_row = int((row_err / row_bound).flatten().argmax())
    r = _unravel(worst_row, row_err.shape)
    d = int(diff[r].argmax())
    idx = (*r, d)
    res.err, res.sdpa_err, res.bound = row_err[r].item(), row_sdpa[r].item(), row_bound[r].item()
    res.max_err = diff.max().item()
    res.worst = {"index": idx, "expected": ref[idx].item(), "got": o[idx].item()}
    if res.err <= res.bound:
        res.ok = True
        return res
    res.message, res.cause = _explain_wrong(p, q, k, v, o, ref, diff, row_bound, res)
    return res


def _unravel(flat: int, shape) -> tuple[int, ...]:
    idx = []
    for n in reversed(shape):
        idx.append(flat % n)
        flat //= n
    return tuple(reversed(idx))


def _fmt_idx(idx) -> str:
    return "[b={}, h={}, s={}, d={}]".format(*idx)


def _explain_nonfinite(p: Problem, o: torch.Tensor, nonfinite: torch.Tensor) -> tuple[str, str]:
    B, H, S, D = o.shape
    n_bad, n = int(nonfinite.sum()), nonfinite.numel()
    first = _fmt_idx(_unravel(int(nonfinite.flatten().nonzero()[0]), o.shape))
    isnan = torch.isnan(o)
    if n_bad == n:
        return ("every output element is NaN: the kernel wrote nothing (the output is pre-filled with NaN). "
                "Is the kernel still the TODO stub, or did the launch fail silently?", "unwritten")
    rows_bad = nonfinite.any(dim=-1)                     # [B, H, S]
    bad_s = rows_bad.any(dim=0).any(dim=0)               # [S]
    first_bad_row = int(bad_s.nonzero()[0])
    if isnan.all(dim=-1).eq(rows_bad).all() and bad_s[first_bad_row:].all() and first_bad_row > 0:
        return (f"rows s ≥ {first_bad_row} of S={S} were never written (still NaN): a tail that is not a whole "
                f"block. Round the grid up (ceil-divide) and guard the last block with `if (row < S)`.", "tail")
    per_bh = rows_bad.any(dim=-1)                        # [B, H]
    if not per_bh.all() and per_bh.any() and isnan[per_bh].all():
        ok_bh = [(b, h) for b in range(B) for h in range(H) if not per_bh[b, h]]
        return (f"whole (batch, head) slices are NaN — only {ok_bh[:4]} were written. "
                f"Check the b/h offsets (stride of a head is S·D, of a batch H·S·D) and the grid size.", "batch")
    what = "NaN" if bool(isnan.any()) else "Inf"
    hint = ""
    if p.qk_std > 1:
        hint = (" These inputs have large logits: exp(s) overflows fp32 above s ≈ 88.7 unless the row max is "
                "subtracted first (softmax(s) = softmax(s - max s)).")
    return (f"{n_bad} of {n} output elements are {what} (first at {first}).{hint}", "nan")


def _explain_wrong(p: Problem, q, k, v, o, ref, diff, row_bound, res: CheckResult) -> tuple[str, str]:
    B, H, S, D = o.shape
    w = res.worst
    b, h, i, _ = w["index"]
    base = (f"error {res.err:.3g} > allowed {res.bound:.3g} on row [b={b}, h={h}, s={i}] "
            f"(2× SDPA's {res.sdpa_err:.3g} on that row + 1 fp16 ulp): expected {w['expected']:.5g}, "
            f"got {w['got']:.5g} at {_fmt_idx(w['index'])}.")
    row_bad = diff.amax(dim=-1) > row_bound              # [B, H, S]
    # One (batch, head) right and the others wrong: an indexing bug that B = H = 1 hides.
    per_bh = row_bad.any(dim=-1)                         # [B, H]
    if B * H > 1 and not per_bh[0, 0] and per_bh.any():
        return base + (" Batch 0, head 0 is right but other (b, h) are not: the kernel indexes as if B = H = 1 "
                       "(check the b/h offsets)."), "batch"
    # Rows beyond a multiple of a block size wrong: a partial-tile bug.
    per_s = row_bad.any(dim=0).any(dim=0)                # [S]
    bad = per_s.nonzero()
    if len(bad) and bool(per_s[int(bad[0]):].all()) and int(bad[0]) > 0:
        return base + f" Rows s ≥ {int(bad[0])} are wrong and the ones before are right: the last partial tile.", "tail"

    def matches(alt):
        return bool(((o - alt).abs().amax(dim=-1) <= row_bound).all())

    # Causal mask ignored (or applied when it should not be).
    alt = reference(q, k, v, causal=not p.causal, dtype=ref.dtype)
    if matches(alt):
        what = "ignores the causal mask" if p.causal else "applies a causal mask although causal=False"
        return base + f" The output matches attention with causal={not p.causal}: the kernel {what}.", "causal"
    # Wrong softmax scale: compare with the common mistakes.
    for label, scale in (("1/D", 1.0 / D), ("1 (no scale)", 1.0), ("sqrt(D)", math.sqrt(D))):
        alt = _reference_with_scale(q, k, v, scale, p.causal, ref.dtype)
        if matches(alt):
            return base + f" The output matches a softmax scale of {label}; attention uses 1/sqrt(D) = {1/math.sqrt(D):.4g}.", "scale"
    # Much larger than rounding but the same ballpark: precision.
    if res.err < 50 * res.bound:
        return base + (" The error is small but above the tolerance: accumulate in fp32 (not fp16), and keep "
                       "the softmax sum and the output accumulator in fp32 until the final store."), "precision"
    return base, "wrong"


def _reference_with_scale(q, k, v, scale, causal, dtype):
    qs = q.to(dtype) * (scale * math.sqrt(q.shape[-1]))   # reference() applies 1/sqrt(D) itself
    return reference(qs, k.to(dtype), v.to(dtype), causal=causal, dtype=dtype)
