"""Chapter 1's wrong kernels (tests/adversarial/ch01_mutations.py) compile for sm_90a on a CPU
(but the one that must not). Their verdicts on the GPU: tests/test_adversarial.py."""
import pytest

from flashtutor import grade
from flashtutor.loaders import CompileError, load_cuda
from adversarial.ch01_mutations import MUTATIONS, materialize

RUNTIME = [n for n in MUTATIONS if n != "compile_error"]


@pytest.mark.parametrize("name", RUNTIME)
def test_wrong_kernel_compiles_for_sm90a(name, tmp_path):
    path = materialize(name, tmp_path / name)
    load_cuda(path.with_suffix(".cu"), arch="sm_90a")


def test_compile_error_is_reported_with_file_and_line(tmp_path):
    path = materialize("compile_error", tmp_path / "ce")
    with pytest.raises(CompileError) as e:
        load_cuda(path.with_suffix(".cu"), arch="sm_90a")
    assert f"{path.with_suffix('.cu')}:" in str(e.value)


def test_grader_reports_compile_error_without_gpu(tmp_path):
    path = materialize("compile_error", tmp_path / "ce")
    r = grade("01", path, progress=False)
    assert r.verdict == "fail" and r.summary == "compile error"
    assert "attention.cu:" in r.failures[0] and "error" in r.failures[0]
