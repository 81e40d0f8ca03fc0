"""The correctness rule and its explanations, on CPU tensors."""
import math

import pytest
import torch

from flashtutor.check import FP16_ULP_AT_1, RATIO, check_output, row_bounds
from flashtutor.problems import Problem, reference, sdpa

P = Problem(2, 3, 37, 64)


@pytest.fixture(scope="module")
def case():
    q, k, v = P.inputs(seed=1)
    ref = reference(q, k, v)
    return q, k, v, ref, sdpa(q, k, v)


def test_reference_is_fp64_and_matches_sdpa(case):
    q, k, v, ref, s = case
    assert ref.dtype == torch.float64
    assert (s.double() - ref).abs().max() < 2e-3


def test_sdpa_output_itself_passes(case):
    q, k, v, ref, s = case
    assert check_output(P, q, k, v, s.clone(), ref=ref, sdpa_out=s).ok


def test_bound_is_per_row_ratio_times_sdpa_error_plus_one_ulp(case):
    q, k, v, ref, s = case
    sdpa_err, bound = row_bounds(ref, s)
    b, h, i = 1, 2, 5
    want_sdpa = (s[b, h, i].double() - ref[b, h, i]).abs().max().item()
    assert sdpa_err[b, h, i].item() == pytest.approx(want_sdpa)
    assert bound[b, h, i].item() == pytest.approx(RATIO * want_sdpa + FP16_ULP_AT_1 * ref[b, h, i].abs().max().item() + 1e-6)


def test_error_just_above_the_rows_bound_fails_and_below_passes(case):
    q, k, v, ref, s = case
    _, bound = row_bounds(ref, s)
    for factor, ok in ((0.5, True), (3.0, False)):
        out = ref.clone()
        out[1, 2, 5, 7] += factor * bound[1, 2, 5].item()
        r = check_output(P, q, k, v, out.half(), ref=ref, sdpa_out=s)
        assert r.ok is ok
        if not ok:
            assert r.worst["index"] == (1, 2, 5, 7)
            assert "[b=1, h=2, s=5, d=7]" in r.message


def test_small_row_is_judged_by_its_own_scale():
    """An error that a global bound (set by the large early rows of causal attention) would allow
    fails on a row whose outputs are small."""
    p = Problem(1, 1, 64, 64, causal=True)
    q, k, v = p.inputs(seed=3)
    ref = reference(q, k, v, causal=True)
    s = sdpa(q, k, v, causal=True)
    _, bound = row_bounds(ref, s)
    assert bound.max() > 2 * bound[0, 0, -1]              # early rows average few values: large outputs
    out = ref.clone()
    out[0, 0, -1, 0] += 1.5 * bound[0, 0, -1].item()      # within the loosest row's bound ...
    assert 1.5 * bound[0, 0, -1] < bound.max()
    assert not check_output(p, q, k, v, out.half(), ref=ref, sdpa_out=s).ok   # ... but not this row's


def test_fp32_accumulation_passes_where_sdpa_is_exact():
    """At S = 1 the output is v itself and SDPA's error is 0; a kernel that rounds an fp32 result
    passes through the one-ulp floor."""
    p = Problem(2, 3, 1, 64)
    q, k, v = p.inputs(seed=4)
    out = (v.double() * (1 + 2 ** -13)).half()             # off by a fraction of an ulp before rounding
    assert check_output(p, q, k, v, out).ok


def test_all_nan_is_unwritten(case):
    q, k, v, ref, s = case
    r = check_output(P, q, k, v, torch.full_like(q, float("nan")), ref=ref, sdpa_out=s)
    assert not r.ok and r.cause == "unwritten" and "stub" in r.message


def test_nan_tail_is_named(case):
    q, k, v, ref, s = case
    out = s.clone()
    out[:, :, 32:] = float("nan")
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert r.cause == "tail" and "s ≥ 32" in r.message


def test_scattered_inf_is_nonfinite(case):
    q, k, v, ref, s = case
    out = s.clone()
    out[0, 1, 3, 4] = float("inf")
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert not r.ok and r.cause == "nan" and "Inf" in r.message


def test_wrong_scale_is_recognised(case):
    q, k, v, ref, s = case
    D = q.shape[-1]
    alt = reference(q * (1 / D) * math.sqrt(D), k, v)     # softmax scale 1/D
    r = check_output(P, q, k, v, alt.half(), ref=ref, sdpa_out=s)
    assert r.cause == "scale" and "1/D" in r.message


def test_ignored_causal_mask_is_recognised():
    p = P.replace(causal=True)
    q, k, v = p.inputs(seed=2)
    out = sdpa(q, k, v, causal=False)
    r = check_output(p, q, k, v, out)
    assert r.cause == "causal"


def test_wrong_shape_and_dtype(case):
    q, k, v, ref, s = case
    assert check_output(P, q, k, v, s.transpose(1, 2), ref=ref, sdpa_out=s).cause == "shape"
    assert "dtype" in check_output(P, q, k, v, s.float(), ref=ref, sdpa_out=s).message
    assert "torch.Tensor" in check_output(P, q, k, v, None, ref=ref, sdpa_out=s).message


def test_inputs_are_random_and_seeded():
    a = P.inputs(seed=3)
    b = P.inputs(seed=3)
    c = P.inputs(seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert a[0].abs().min() >= 0 and a[0].std() > 0.5   # not zeros


def test_large_logits_overflow_without_max_subtraction():
    p = P.replace(qk_std=6.0)
    q, k, v = p.inputs(seed=5)
    s = (q.double() @ k.double().transpose(-1, -2)) * p.scale
    assert s.max() > 88.8   # exp() of this overflows fp32: the case the NaN test relies on


def test_flops_and_bytes():
    p = Problem(1, 16, 1024, 64)
    assert p.flops == 4 * 16 * 1024 ** 2 * 64
    assert p.replace(causal=True).flops == p.flops / 2
    assert p.min_bytes == 4 * 16 * 1024 * 64 * 2


# ---------------------------------------------------------------- "wrote nothing" vs "wrote NaN" ----------
# The judge pre-fills outputs with a NaN pattern arithmetic does not produce (protocol.UNWRITTEN_BITS); a NaN the
# kernel computes has other bits (0xFE00 on a CPU, 0x7FFF on a GPU). Older judges pre-filled plain NaN (0x7E00).
from flashtutor.grading.protocol import UNWRITTEN_BITS, fill_unwritten  # noqa: E402


def _bits(t):
    return {int(x) & 0xFFFF for x in t.contiguous().view(torch.int16).flatten().unique()}


def _softmax_attention(q, k, v, *, causal=False, diagonal=True, subtract_max=True):
    """Attention in fp32 the way a kernel computes it: exp, sum, divide. ``diagonal=False``: the causal mask
    keeps keys j < i only (an off-by-one: row 0 has no key); ``subtract_max=False``: exp of the raw scores."""
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    S = s.shape[-1]
    if causal:
        s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1 if diagonal else 0), float("-inf"))
    m = s.amax(dim=-1, keepdim=True) if subtract_max else torch.zeros_like(s[..., :1])
    e = torch.exp(s - m)                       # an all-masked row: exp(-inf - (-inf)) = NaN, or exp(-inf) = 0
    return ((e @ v.float()) / e.sum(dim=-1, keepdim=True)).half()


def test_the_pattern_everywhere_is_wrote_nothing(case):
    q, k, v, ref, s = case
    out = torch.empty_like(q)
    fill_unwritten(out)
    assert _bits(out) == {UNWRITTEN_BITS}
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert r.cause == "unwritten" and "wrote nothing" in r.message and "stub" in r.message, r.message


def test_nan_computed_everywhere_is_not_wrote_nothing():
    """Every element NaN by arithmetic (0xFE00 as a CPU computes it; a GPU's 0x7FFF) on large logits: the kernel wrote
    NaN (an overflow can explain it), not nothing."""
    p = P.replace(qk_std=6.0)
    q, k, v = p.inputs(seed=5)
    z = torch.zeros(q.shape)
    cpu_nan = (z / z).half()
    gpu_nan = torch.full_like(q, 0).view(torch.int16).fill_(0x7FFF).view(torch.float16)
    for out, bits in ((cpu_nan, 0xFE00), (gpu_nan, 0x7FFF)):
        assert _bits(out) == {bits}
        r = check_output(p, q, k, v, out)
        assert r.cause == "nan" and "computed by the kernel" in r.message and "large logits" in r.message, r.message
        assert "wrote nothing" not in r.message and "never written" not in r.message


def test_a_plain_nan_pre_fill_still_reads_as_unwritten(case):
    """Outputs pre-filled with torch's plain NaN (0x7E00, the judge before the pattern): still 'wrote nothing'."""
    q, k, v, ref, s = case
    r = check_output(P, q, k, v, torch.full_like(q, float("nan")), ref=ref, sdpa_out=s)
    assert r.cause == "unwritten" and "wrote nothing" in r.message


def test_a_tail_and_a_slice_of_the_pattern_are_named(case):
    q, k, v, ref, s = case
    out = s.clone()
    fill_unwritten(out[:, :, 32:])
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert r.cause == "tail" and "s ≥ 32" in r.message and "pre-fill" in r.message, r.message
    out = s.clone()
    fill_unwritten(out[1])                      # batch 1 never written
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert r.cause == "batch" and "(0, 0)" in r.message, r.message
    assert "computed" not in r.message


def test_nan_computed_in_the_last_rows_is_not_called_unwritten(case):
    """NaN the kernel computed in the last rows (say keys past S read unmasked) is a 'nan' in the last tile,
    not a tail that was never written."""
    q, k, v, ref, s = case
    out = s.clone()
    z = torch.zeros(out[:, :, 32:].shape)
    out[:, :, 32:] = (z / z).half()
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert r.cause == "nan" and "rows s ≥ 32" in r.message and "partial tile" in r.message, r.message
    assert "never written" not in r.message


def test_a_causal_row_with_zero_keys_is_named_as_0_over_0():
    """The causal mask off by one (keys j < i): row 0 keeps no key, its softmax is 0/0 — NaN the kernel computed,
    and the other rows match attention with the diagonal masked."""
    p = Problem(2, 3, 37, 64, causal=True)
    q, k, v = p.inputs(seed=6)
    out = _softmax_attention(q, k, v, causal=True, diagonal=False)
    assert torch.isnan(out[:, :, 0]).all() and torch.isfinite(out[:, :, 1:]).all()
    r = check_output(p, q, k, v, out)
    assert r.cause == "nan" and "[b=0, h=0, s=0, d=0]" in r.message, r.message
    assert "zero keys" in r.message and "0/0" in r.message and "off-by-one" in r.message
    assert "diagonal masked too" in r.message
    assert "wrote nothing" not in r.message and "large logits" not in r.message and "overflow" not in r.message
    right = _softmax_attention(q, k, v, causal=True)
    assert check_output(p, q, k, v, right).ok


def test_large_logits_without_the_max_say_what_the_case_has_not_the_cause():
    """exp of raw scores overflows on the large-logit case: the case's message says the case has large logits
    (a fact) and where the NaN is; it does not call it unwritten."""
    p = P.replace(qk_std=6.0)
    q, k, v = p.inputs(seed=5)
    out = _softmax_attention(q, k, v, subtract_max=False)
    assert not torch.isfinite(out).all()
    r = check_output(p, q, k, v, out)
    assert r.cause == "nan" and "large logits" in r.message and "row max" in r.message, r.message
    assert "65504" in r.message and "wrote nothing" not in r.message and "zero keys" not in r.message
    assert check_output(p, q, k, v, _softmax_attention(q, k, v)).ok     # with the max: right


def test_unwritten_and_computed_nan_together_name_both(case):
    q, k, v, ref, s = case
    out = s.clone()
    fill_unwritten(out[:, :, 32:])
    out[0, 0, 3, 5] = (torch.zeros(1) / torch.zeros(1)).half()
    r = check_output(P, q, k, v, out, ref=ref, sdpa_out=s)
    assert r.cause == "tail" and "computed" in r.message and "[b=0, h=0, s=3, d=5]" in r.message, r.message


def test_nan_in_every_row_with_ordinary_logits_is_the_stubs_empty_loop(case):
    """Chapter 4's stub runs, adds no key and stores acc / l = 0/0 everywhere: computed NaN, not a pre-fill, and
    not an overflow (ordinary logits); the message points at the TODO loop, and does not say 'wrote nothing'."""
    q, k, v, ref, s = case
    z = torch.zeros(q.shape)
    r = check_output(P, q, k, v, (z / z).half(), ref=ref, sdpa_out=s)
    assert r.cause == "unwritten" and "TODO" in r.message and "0/0" in r.message, r.message
    assert "wrote nothing" not in r.message and "overflow" not in r.message.replace("cannot overflow", "")
