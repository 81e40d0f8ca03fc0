"""The symptoms of issue 27, graded for real on a GPU (the GPU tier): the same wrong kernels as
test_messages.py's CPU gradings get messages that name their cause there too. A write past the output is the
corpus's out-of-bounds case (tests/adversarial), graded on the GPU by the tier's pool."""
import pytest

from test_diagnose import WRONG
from test_messages import LARGE_LOGITS_HINT, _mutated

pytestmark = pytest.mark.gpu


def test_a_triton_kernel_without_the_running_max_gets_the_overflow_hint_on_the_gpu(tmp_path):
    from flashtutor import grade
    path = _mutated("04", {"attention.py": [(
        "m_new = tl.maximum(m_i, tl.max(scores, axis=1))       # [BLOCK_M] the max including this block",
        "m_new = tl.zeros_like(m_i)                            # no running max: exp2 of the raw scores")]},
        tmp_path / "nomax")
    r = grade("04", path, device="cuda", timing=False, progress=False)
    bad = [c for c in r.checks if not c.ok]
    assert r.verdict == "fail" and bad and all("logits" in c.problem for c in bad), [(c.problem, c.cause) for c in bad]
    assert {str(c.cause) for c in bad} <= {"nan", "wrong"}, {str(c.cause) for c in bad}
    text = "\n".join(r.failures)
    assert "wrote nothing" not in text and "never written" not in text and "zero keys" not in text, text
    assert text.count(LARGE_LOGITS_HINT) == 1 and "share: large logits" in r.shared, (r.shared, text)


def test_a_cuda_causal_off_by_one_is_0_over_0_on_the_gpu(tmp_path):
    from flashtutor import grade
    path = _mutated("01", {"attention.cu": [("const int n_keys = causal ? i + 1 : S;",
                                             "const int n_keys = causal ? i : S;")]}, tmp_path / "offbyone")
    r = grade("01", path, device="cuda", timing=False, progress=False)
    bad = [c for c in r.checks if not c.ok]
    assert bad and all("causal" in c.problem for c in bad) and {str(c.cause) for c in bad} == {"nan"}, \
        [(c.problem, str(c.cause), c.message[:80]) for c in bad]
    text = "\n".join(r.failures)
    assert "zero keys" in text and "0/0" in text and "off-by-one" in text, text
    assert "wrote nothing" not in text and "never written" not in text and "overflow" not in text
    assert "share: causal" in r.shared, r.shared


def test_a_triton_compile_error_names_the_kernel_line_on_the_gpu(tmp_path):
    """`tl.dot(q, k)` without the transpose, compiled for the GPU by the worker: the report names the tl.dot
    line, not the launch."""
    from flashtutor import grade
    path = _mutated("04", {"attention.py": [("scores = tl.dot(q, tl.trans(k)) * qk_scale", WRONG)]},
                    tmp_path / "nodot")
    lines = path.read_text().splitlines()
    dot = next(i + 1 for i, ln in enumerate(lines) if WRONG in ln)
    launch = next(i + 1 for i, ln in enumerate(lines) if "flash_attention_kernel[grid](" in ln)
    r = grade("04", path, device="cuda", timing=False, progress=False)
    text = "\n".join([r.summary, r.error or "", *r.failures])
    assert r.verdict == "fail"
    assert f"attention.py:{dot}" in text and f"attention.py:{launch}" not in text, text
    assert "reduction dimensions" in text, text
    # Triton's CompilationError is a compile error (where the tile makes tl.dot(q, k) a shape mismatch; where it does
    # not, the kernel compiles and computes the wrong thing)
    assert "compile error" in {str(c.cause) for c in r.checks if not c.ok}, r.failures
