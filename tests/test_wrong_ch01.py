"""Chapter 1's wrong kernels (tests/wrong/ch01.py): each compiles (but one) on CPU, and on the GPU
each gets its verdict in a grading run that survives them all."""
import pytest

from flashtutor import grade
from flashtutor.loaders import CompileError, load_cuda
from wrong.ch01 import MUTATIONS, materialize

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


@pytest.mark.gpu
@pytest.mark.parametrize("name", RUNTIME)
def test_wrong_kernel_gets_its_verdict_on_gpu(name, tmp_path):
    cause, _, why = MUTATIONS[name]
    path = materialize(name, tmp_path / name)
    r = grade("01", path, timing=False, progress=False, check_timeout=30, sets=("seed", "odd"), seeds=1)
    got = {c.get("cause") for c in r.checks if not c.get("ok")}
    assert r.verdict == "fail", why
    assert cause in got, (why, got, r.failures[:3])
    if cause in ("illegal memory access", "device-side assert"):
        # the CUDA context died, yet later cases still ran in fresh processes
        assert sum(1 for c in r.checks if c.get("cause") not in ("not_run",)) == len(r.checks)
