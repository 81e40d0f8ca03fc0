"""The evidence chapter 8's timed calls are judged on (flashtutor/grading/gradients.py), run on CPU tensors: the
sampled-row check of every timed call's dq, dk, dv, and the full re-check of a few. Correct gradients pass; gradients
left unwritten, zeroed or computed from another slot's inputs fail, with the call and the tensor named. On a GPU the
same functions run on the judge's arena (tests/test_gpu.py grades chapter 8's solution timed)."""
from __future__ import annotations

import torch

from flashtutor import backward as bw
from flashtutor.grading import gradients as gr
from flashtutor.grading.protocol import slot_elems, views
from flashtutor.problems import Problem

SHAPE = (2, 3, 37, 64)


def arena_with(count: int, causal: bool, seed: int = 5):
    """A CPU arena of ``count`` backward slots: the judge's inputs, o and lse, and the reference's gradients."""
    arena = torch.empty(count * slot_elems(SHAPE, "backward") + 64, dtype=torch.float16)
    gr.fill_slots(arena, SHAPE, count, torch.Generator(), seed, 1.0, causal)
    for i in range(count):
        q, k, v, do, o, lse, dq, dk, dv = views(arena, SHAPE, i, "backward")
        ref = bw.reference_grads(q, k, v, do, causal=causal)
        for name, t in (("dq", dq), ("dk", dk), ("dv", dv)):
            t.copy_(ref[name])
    return arena


def test_fill_slots_writes_the_forward_of_the_slots_inputs():
    arena = arena_with(2, causal=True)
    q, k, v, do, o, lse, *_ = views(arena, SHAPE, 1, "backward")
    ref = bw.reference_grads(q, k, v, do, causal=True)
    assert (o.double() - ref["o"]).abs().max() < 2e-3
    assert (lse.double() - ref["lse"]).abs().max() < 1e-4


def test_sampled_rows_pass_correct_gradients_and_name_a_bad_call():
    arena = arena_with(3, causal=False)
    assert gr.sampled_rows_check(arena, SHAPE, [2, 0, 1], False, rows=37) == ""
    views(arena, SHAPE, 0, "backward")[7].zero_()                      # slot 0's dk: zeros
    said = gr.sampled_rows_check(arena, SHAPE, [2, 0, 1], False, rows=37)
    assert said.startswith("call 2 of a batch of 3: dk row"), said
    from flashtutor.grading.protocol import fill_unwritten
    fill_unwritten(views(arena, SHAPE, 2, "backward")[6])              # slot 2's dq: never written
    said = gr.sampled_rows_check(arena, SHAPE, [2, 0, 1], False, rows=37)
    assert said.startswith("call 1 of a batch of 3: dq row") and "never written" in said, said


def test_gradients_of_another_slot_fail_the_sampled_rows():
    """A call that returns the gradients it computed for other inputs (another slot's, a cached call's)."""
    arena = arena_with(2, causal=True)
    a, b = views(arena, SHAPE, 0, "backward"), views(arena, SHAPE, 1, "backward")
    for j in (6, 7, 8):
        b[j].copy_(a[j])
    assert "call 2 of a batch of 2" in gr.sampled_rows_check(arena, SHAPE, [0, 1], True, rows=37)


def test_the_recheck_applies_the_chapters_rule():
    p = Problem(*SHAPE, causal=True)
    g = torch.Generator().manual_seed(3)
    q, k, v, do = (torch.randn(SHAPE, generator=g).half() for _ in range(4))
    ref = bw.reference_grads(q, k, v, do, causal=True)
    good = tuple(ref[n].half() for n in ("dq", "dk", "dv"))
    assert gr.recheck(p, (q, k, v, do), good).ok
    bad = (good[0], good[1] * 1.01, good[2])                          # dK off by 1 %: far beyond 2x SDPA's error
    r = gr.recheck(p, (q, k, v, do), bad, rows=111)
    assert not r.ok and r.message.startswith("dk: FAIL"), r.message


def test_nothing_computed_is_the_stubs_signature_only():
    ref = {"dq": torch.ones(2), "dk": torch.ones(2)}
    assert gr.nothing_computed({"dq": torch.zeros(2), "dk": torch.ones(2)}, ref) == (
        "dq is zero everywhere: nothing was accumulated or stored. Is the loop (or the store) still the exercise's "
        "TODO stub?")
    assert gr.nothing_computed({"dq": torch.full((2,), 0.5)}, ref) == ""
    assert "lse is NaN in every row" in gr.nothing_computed({"lse": torch.full((3,), float("nan"))}, ref)
    assert gr.nothing_computed({"lse": torch.tensor([float("nan"), 1.0])}, ref) == ""
