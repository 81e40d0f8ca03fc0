"""Chapter 8's reference on sampled rows (flashtutor/backward.py: reference_rows, check_rows), for the shapes whose
full float64 reference is too large to keep: it must agree with the full reference row for row, and the rule applied
to the sampled rows must pass right gradients and fail a wrong row, naming it. Plain torch, no Triton."""
import pytest
import torch

from flashtutor import backward as bw

ROWS = [(0, 0, 0), (1, 2, 69), (0, 1, 33), (1, 2, 5), (0, 1, 34), (1, 0, 16)]


def _inputs(B=2, H=3, S=70, D=64, std=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, do = (torch.randn(B, H, S, D, generator=g) for _ in range(4))
    return tuple(t.half() for t in (q * std, k * std, v, do))


@pytest.mark.parametrize("causal", [False, True])
def test_sampled_rows_agree_with_the_full_reference(causal):
    q, k, v, do = _inputs()
    full = bw.reference_grads(q, k, v, do, causal=causal)
    rows = bw.reference_rows(q, k, v, do, ROWS, causal=causal, chunk=16)   # blocks of 16 queries: 5 per slab
    for name in ("o", "lse", "dq", "dk", "dv", "dq_floor", "dk_floor"):
        want = torch.stack([full[name][b, h, i] for b, h, i in ROWS])
        assert torch.allclose(rows[name], want, rtol=1e-12, atol=1e-14), name


def test_the_rule_on_sampled_rows_passes_right_gradients_and_names_a_wrong_row():
    q, k, v, do = _inputs()
    causal = True
    full = bw.reference_grads(q, k, v, do, causal=causal)
    base = bw.fa2_precision_grads(q, k, v, do, causal=causal)
    ref_rows = bw.reference_rows(q, k, v, do, ROWS, causal=causal)
    right = {n: full[n].half() for n in ("o", "dq", "dk", "dv")}
    right["lse"] = full["lse"].float()
    checks = bw.check_rows(right, ROWS, ref_rows, base)
    assert [c.name for c in checks] == ["o", "dq", "dk", "dv", "lse"] and all(c.ok for c in checks), \
        [c.message for c in checks]
    wrong = dict(right, dk=right["dk"].clone())
    wrong["dk"][1, 2, 5] += 0.25                                        # one sampled key row off
    checks = {c.name: c for c in bw.check_rows(wrong, ROWS, ref_rows, base)}
    assert not checks["dk"].ok and checks["dk"].row == (1, 2, 5), checks["dk"].message
    assert "[b=1, h=2, s=5]" in checks["dk"].message
    assert all(c.ok for n, c in checks.items() if n != "dk")
    stale = dict(right, lse=right["lse"] + 0.01)                        # an lse off by 0.01 everywhere
    assert not {c.name: c for c in bw.check_rows(stale, ROWS, ref_rows, base)}["lse"].ok
