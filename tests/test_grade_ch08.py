"""Chapter 8 graded by the grader on the CPU (Triton's interpreter, the 'cpu' set): the solution passes, the stub
fails as unfinished, and each backward-pass bug of the corpus (tests/adversarial/ch08_mutations.py) fails with the
cause and the explanation it should get, except its GPU-only races, which pass here (the interpreter runs one program
at a time). The same cases, races included, run on a GPU in the GPU tier (tests/gpu_gradings.py)."""
from __future__ import annotations

import pytest

from adversarial.ch08_mutations import GPU_ONLY, MUTATIONS, materialize
from flashtutor import exercises, grade
from flashtutor.chapters import get_chapter

CH = get_chapter("08")


def _grade(path):
    return grade("08", path, device="cpu", sets=("cpu",), progress=False)


def test_the_solution_passes_on_the_cpu():
    r = _grade(CH.solution_path())
    assert r.verdict == "pass", r.failures
    assert len(r.checks) == 10 and all(c.ok for c in r.checks)
    assert "backward(q, k, v, o, lse, do) on the grader's own o and lse" in " ".join(r.method)


def test_the_stub_fails(tmp_path):
    path = tmp_path / "attention.py"
    path.write_text(exercises.stub(CH.solution_path().read_text(encoding="utf-8"), str(CH.solution_path())),
                    encoding="utf-8")
    r = _grade(path)
    assert r.verdict == "fail" and not any(c.ok for c in r.checks)
    assert r.causes == {"unwritten"}, (r.causes, r.failures)          # zeros stored from the TODO loops, a NaN lse
    assert "TODO stub" in "\n".join(r.failures)


@pytest.mark.parametrize("name", sorted(set(MUTATIONS) - GPU_ONLY))   # GPU_ONLY: right here, see below
def test_a_backward_bug_gets_its_verdict(tmp_path, name):
    causes, says, _, what = MUTATIONS[name]
    r = _grade(materialize(name, tmp_path / name))
    assert r.verdict == "fail", (name, what)
    got = {str(c.cause) for c in r.checks if not c.ok}
    assert got and got <= causes, (name, got)
    assert says in "\n".join(r.failures), (name, r.failures)


@pytest.mark.parametrize("name", sorted(GPU_ONLY))
def test_a_race_is_right_on_the_cpu(tmp_path, name):
    """A GPU-only bug (dQ added with a plain load + add + store by every key block's program, no atomics) passes
    under the interpreter: its programs run one after another, so no read-modify-write is lost. Only the GPU tier
    (below) can fail it; this documents that a CPU pass says nothing about races (one grading, ~5 s)."""
    r = _grade(materialize(name, tmp_path / name))
    assert r.verdict == "pass", (name, r.failures)
    assert all(c.ok for c in r.checks)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_backward_bug_gets_its_verdict_on_the_gpu(gradings, name):
    """The same bugs on a GPU, on the chapter's odd set (B and H > 1, S = 1, 113, 1023, both head dims), graded
    beside the tier's other gradings (tests/gpu_gradings.py)."""
    causes, says, _, what = MUTATIONS[name]
    r = gradings.report("ch08 bug", name)
    assert r.verdict == "fail", (name, what)
    got = {str(c.cause) for c in r.checks if not c.ok}
    assert got and got <= causes, (name, got, r.failures)
    assert says in "\n".join(r.failures), (name, r.failures)


def test_gradients_asked_for_in_another_order_are_still_right(tmp_path):
    """output_like(q) hands out the grader's dq, dk, dv buffers in that order; a backward that asks for them as
    dk, dq, dv returns the grader's dq buffer as its dk: the worker reads both before it writes either (a correct
    submission is never failed for the order it allocates in)."""
    text = CH.solution_path().read_text(encoding="utf-8")
    old = "    dq, dk, dv = (ft.output_like(q) for _ in range(3))"
    assert text.count(old) == 1
    path = tmp_path / "attention.py"
    path.write_text(text.replace(old, "    dk, dq, dv = (ft.output_like(q) for _ in range(3))"), encoding="utf-8")
    r = _grade(path)
    assert r.verdict == "pass", r.failures
