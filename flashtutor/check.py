"""Is a kernel's output right? The error-ratio rule, NaN poisoning, and explanations.

The rule is FlashAttention's own test, applied per output row: compute a high-precision reference;
for every row (b, h, i), the learner's worst absolute error on that row may be at most ``RATIO``
times SDPA's worst error on the same row, plus one fp16 ulp of the row's largest output. The ulp
term lets a correct fp32-accumulating kernel whose final rounding falls the other way than SDPA's
pass (its error is that rounding: at most half an ulp). Judging per row keeps the bound tight where
outputs are small: with a global maximum, the few large outputs (e.g. the first rows of causal
attention, which average only a handful of values) would set a loose bound for every row.

Before the call every output buffer is filled with a never-written pattern (a quiet NaN with a payload
no arithmetic produces: :mod:`flashtutor.grading.protocol`), and NaN or Inf anywhere fails. The check
tells the two kinds of NaN apart: an element that still carries the pattern was never written (cause
``unwritten``, or ``tail`` / ``batch`` when whole last rows or whole (b, h) slices are missing), while a
NaN or Inf with other bits was computed by the kernel (cause ``nan``), and the message says where it first
appears and what the case has there: a causal row left with zero keys (0/0: an off-by-one in the mask),
large logits (exp overflow), only the last partial tile. An output with no pattern at all (a pre-fill of
plain NaN, or a kernel that wrote every element) is judged by its bits too: torch's plain NaN fill is 0x7E00,
while a CPU computes 0xFE00 and a GPU 0x7FFF.
When the check fails it says why in the learner's terms: which index, expected vs got, and the
likely cause where the evidence tells (unwritten tail, one batch/head only, wrong scale, ignored
causal mask). Whether large logits are *the* cause needs every case of a grading (right on the ordinary
ones, wrong only on the large-logit ones): :mod:`flashtutor.grading.rules` says that.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .problems import Problem, reference

RATIO = 2.0                 # allowed error relative to SDPA's own fp16 error
FP16_ULP_AT_1 = 2.0 ** -10  # fp16 has 10 explicit mantissa bits: ulp(x) <= x * 2^-10
FP16_EXP_LIMIT = math.log(65504.0)   # ≈ 11.09: e^s above this is inf once cast to fp16
ALL_NAN = "every output element is NaN computed by the kernel"   # rules.py reads a case's message by this
PLAIN_NAN_BITS = 0x7E00     # torch's fp16 fill_(nan): the judge's pre-fill before the never-written pattern


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

    row_sdpa, row_bound = row_bounds(ref, sdpa_out)          # [B, H, S]
    nonfinite = ~torch.isfinite(o)
    if nonfinite.any():
        res.err = res.max_err = float("inf")
        res.message, res.cause = _explain_nonfinite(p, q, k, v, out, o, nonfinite, row_bound, ref)
        return res

    diff = (o - ref).abs()                                   # [B, H, S, D]
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


def _explain_nonfinite(p: Problem, q, k, v, out: torch.Tensor, o: torch.Tensor, nonfinite: torch.Tensor,
                       row_bound=None, ref=None) -> tuple[str, str]:
    """Why some outputs are NaN/Inf: never written (they still carry the pre-fill) or computed by the kernel."""
    unwritten = never_written(out)[0] & nonfinite
    computed = nonfinite & ~unwritten
    if unwritten.any():
        msg, cause = _explain_unwritten(out, unwritten, nonfinite)
        if computed.any():
            msg += (f" Besides, {int(computed.sum())} element(s) are NaN/Inf that the kernel computed (first at "
                    f"{_first(computed)}).")
        return msg, cause
    return _explain_computed(p, q, k, v, o, computed, row_bound, ref)


def never_written(out: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Which elements of an fp16 output still carry the judge's pre-fill, and which pre-fill that was.

    The judge fills every output with :data:`~flashtutor.grading.protocol.UNWRITTEN_BITS`, a quiet NaN that
    no arithmetic produces. Where no element carries it, the pre-fill may have been a plain NaN (torch's
    ``fill_(nan)``: bits 0x7E00, while a NaN computed on a CPU is 0xFE00 and on a GPU 0x7FFF), so elements
    that are exactly 0x7E00 count as never written then. Returns (mask, "pattern" | "nan" | "")."""
    from .grading.protocol import unwritten_mask
    if out.dtype != torch.float16:
        return torch.zeros(out.shape, dtype=torch.bool, device=out.device), ""
    m = unwritten_mask(out)
    if bool(m.any()):
        return m, "pattern"
    plain = out.contiguous().view(torch.int16) == PLAIN_NAN_BITS
    if bool(plain.any()):
        return plain, "nan"
    return torch.zeros_like(m), ""


def _first(mask: torch.Tensor) -> str:
    return _fmt_idx(_unravel(int(mask.flatten().nonzero()[0]), mask.shape))


def _explain_unwritten(out: torch.Tensor, unwritten: torch.Tensor, nonfinite: torch.Tensor) -> tuple[str, str]:
    B, H, S, D = out.shape
    n_un, n = int(unwritten.sum()), unwritten.numel()
    if n_un == n:
        return ("every output element still carries the grader's pre-fill (a NaN bit pattern that arithmetic does "
                "not produce): the kernel wrote nothing. Is the kernel still the TODO stub, or did the launch fail "
                "silently (an empty grid, the wrong output tensor, a launch on another device)?", "unwritten")
    rows_un = unwritten.all(dim=-1)                      # [B, H, S] whole rows never written
    rows_any = unwritten.any(dim=-1)                     # [B, H, S]
    un_s = rows_any.any(dim=0).any(dim=0)                # [S]
    first_row = int(un_s.nonzero()[0])
    if rows_un.eq(rows_any).all() and bool(un_s[first_row:].all()) and first_row > 0:
        return (f"rows s ≥ {first_row} of S={S} were never written (they still carry the grader's pre-fill): a tail "
                f"that is not a whole block. Round the grid up (ceil-divide) and guard the last block with "
                f"`if (row < S)`.", "tail")
    per_bh = rows_any.any(dim=-1)                        # [B, H]
    if not per_bh.all() and bool(unwritten[per_bh].all()):
        ok_bh = [(b, h) for b in range(B) for h in range(H) if not per_bh[b, h]]
        return (f"whole (batch, head) slices were never written (they still carry the grader's pre-fill) — only "
                f"{ok_bh[:4]}{' …' if len(ok_bh) > 4 else ''} were. Check the b/h offsets (stride of a head is S·D, "
                f"of a batch H·S·D) and the grid size.", "batch")
    cols = unwritten.any(dim=0).any(dim=0).any(dim=0)    # [D]
    what = ""
    if bool(rows_any.all()) and not bool(cols.all()):
        first_col = int(cols.nonzero()[0])
        if bool(cols[first_col:].all()):
            what = f" Columns d ≥ {first_col} of D={D} are never written in any row: check the loop over d."
    return (f"{n_un} of {n} output elements were never written (they still carry the grader's pre-fill; first at "
            f"{_first(unwritten)}).{what}", "unwritten")


def _explain_computed(p: Problem, q, k, v, o: torch.Tensor, bad: torch.Tensor, row_bound, ref) -> tuple[str, str]:
    """NaN or Inf that the kernel computed: where it first appears, and what the case has there."""
    B, H, S, D = o.shape
    n_bad, n = int(bad.sum()), bad.numel()
    isnan = torch.isnan(o) & bad
    what = "NaN" if bool(isnan.any()) else "Inf"
    idx = _unravel(int(bad.flatten().nonzero()[0]), bad.shape)
    b, h = idx[0], idx[1]
    if n_bad == n and what == "NaN" and bool(isnan.all()) and p.qk_std == 1.0 and not (p.causal and S == 1):
        # Every element NaN with ordinary logits (no exp can overflow): 0/0 in every row, a softmax sum of 0 —
        # no key was ever added. The exercise's stub does that: the loop over the keys is still a TODO. (A causal
        # S = 1 is row 0 alone, which a mask off by one empties too: rules.py tells them apart from the others.)
        return (f"{ALL_NAN} (not the grader's never-written pre-fill), with ordinary logits that cannot overflow: 0/0 in every row, a softmax sum of 0 — no key was ever "
                f"added. Is the loop over the keys still the TODO stub (or does it never run)?", "unwritten")
    head = (f"{n_bad} of {n} output elements are {what} computed by the kernel (not the grader's never-written "
            f"pre-fill); the first at {_fmt_idx(idx)}.")
    if n_bad == n and what == "NaN" and bool(isnan.all()):
        head = f"{ALL_NAN} (not the grader's never-written pre-fill)."
    rows_bad = bad.any(dim=-1)                           # [B, H, S]
    bad_s = rows_bad.any(dim=0).any(dim=0)               # [S]
    rows = bad_s.nonzero().flatten().tolist()
    hints = []
    # A row with no key: under the causal mask row 0 keeps exactly one key (j = 0), so NaN there is 0/0 — when
    # the NaN is in row 0 alone (and the logits are ordinary), or the other rows match the mask shifted by one.
    shifted = p.causal and bool(rows) and rows[0] == 0 and _matches_strict_causal(q, k, v, o, b, h, row_bound, ref)
    if p.causal and (shifted or (rows == [0] and p.qk_std == 1.0)):
        others = f" (and {len(rows) - 1} other row{'s' if len(rows) > 2 else ''})" if len(rows) > 1 else ""
        hints.append(f"Row s = 0 has it{others}; under the causal mask row 0 keeps a single key (j = 0), and a row "
                     f"left with zero keys gives 0/0 (its max is −inf and its sum 0). An off-by-one in the mask? "
                     f"Row i keeps keys j ≤ i, i + 1 of them"
                     + ("; the other rows match attention with keys j < i, i.e. the diagonal masked too." if shifted
                        else "."))
    elif rows and rows[0] > 0 and rows == list(range(rows[0], S)) and S > 1:
        hints.append(f"Only rows s ≥ {rows[0]} of S={S} have it: the last, partial tile. Values past S read without "
                     f"a mask (load with a mask and `other=`), or a row whose every key was masked to −inf (0/0).")
    per_bh = rows_bad.any(dim=-1)                        # [B, H]
    if B * H > 1 and not bool(per_bh.all()) and not hints:
        some = [(bb, hh) for bb in range(B) for hh in range(H) if per_bh[bb, hh]]
        hints.append(f"Only (b, h) = {some[:4]}{' …' if len(some) > 4 else ''} have it, of {B}×{H}: an offset that "
                     f"reaches another slab or past the buffer (stride of a head S·D, of a batch H·S·D).")
    top = _largest_score(q, k, b, h, rows[:64], p.causal) if p.qk_std > 1 and not shifted else -math.inf
    if top > FP16_EXP_LIMIT:             # exp of the largest score overflows at least fp16 where the NaN is
        hints.append(f"This case has large logits (q and k scaled by {p.qk_std:g}): the row max of q·kᵀ/√D "
                     f"reaches {top:.4g} in the first rows that have it; exp(s) overflows fp32 above s ≈ 88.7 "
                     f"(so does exp2(s·log2 e)), and a value cast to fp16 overflows above 65504 (e^s for s > 11.1).")
    if what == "Inf" and not hints:
        hints.append("Inf is a value beyond fp16's range (65504) stored to the output: an exponential that "
                     "overflowed, or a sum not divided by the softmax denominator.")
    return " ".join([head] + hints), "nan"


def _matches_strict_causal(q, k, v, o, b: int, h: int, row_bound, ref) -> bool:
    """Whether slab (b, h) of the output matches attention with keys j < i (the diagonal masked as well) on
    every row but row 0 (which then has no key)."""
    if row_bound is None or q.shape[2] < 2:
        return False
    dt = ref.dtype if ref is not None else torch.float64
    qs, ks, vs = (t[b, h].to(dt) for t in (q, k, v))
    s = (qs @ ks.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    S = s.shape[0]
    s.masked_fill_(torch.ones(S, S, dtype=torch.bool, device=s.device).triu_(0), float("-inf"))
    alt = torch.softmax(s[1:], dim=-1) @ vs                                  # rows 1..S-1
    err = (o[b, h, 1:].to(dt) - alt).abs().amax(dim=-1)
    return bool(torch.isfinite(err).all() and (err <= row_bound[b, h, 1:]).all())


def _largest_score(q, k, b: int, h: int, rows: list[int], causal: bool) -> float:
    qs, ks = q[b, h, rows].double(), k[b, h].double()
    s = (qs @ ks.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))          # [len(rows), S]
    if causal:
        j = torch.arange(ks.shape[0], device=s.device)
        s = s.masked_fill(j[None, :] > torch.tensor(rows, device=s.device)[:, None], float("-inf"))
    return float(s.amax())


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
