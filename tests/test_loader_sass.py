"""NVRTC compiles the chapter kernels for sm_90a on a machine without a GPU; cuobjdump reads them."""
from pathlib import Path

import pytest

from flashtutor.chapters import ROOT
from flashtutor.loaders import CompileError, load_cuda
from flashtutor.loaders.nvrtc import compile_cuda
from flashtutor.sass import disassemble, histogram, opcode
from conftest import untouched_exercise

SOLUTION = ROOT / "solutions/01_naive_cuda/attention.cu"
EXERCISE = ROOT / "chapters/01_naive_cuda/attention.cu"
REFERENCE = ROOT / "flashtutor/kernels/k01_naive_three_pass.cu"


@pytest.mark.parametrize("path,kernels", [(SOLUTION, {"naive_attention"}),
                                          (REFERENCE, {"scores_kernel", "softmax_kernel", "pv_kernel"})])
def test_chapter1_kernels_compile_for_sm90a_without_spills(path, kernels):
    mod = load_cuda(path, arch="sm_90a")
    res = mod.resources()
    assert set(res) == kernels
    for name, r in res.items():
        assert 0 < r["registers"] <= 64, (name, r)      # plenty of occupancy headroom
        assert r["spill_instructions"] == 0 and r["local_bytes"] == 0, (name, r)
        assert r["stack_bytes"] == 0, (name, r)


def test_solution_sass_is_scalar_fp32_math():
    sass = disassemble(load_cuda(SOLUTION, arch="sm_90a").cubin)["naive_attention"]
    h = histogram(sass)
    assert h["FFMA"] > 0 and h["LDG"] > 0 and h["STG"] > 0   # fp32 FMAs on loads from global memory
    assert h["HMMA"] == 0 and h["HGMMA"] == 0                # no tensor cores in chapter 1


def test_stub_compiles_and_does_nothing():
    untouched_exercise("01")
    sass = disassemble(load_cuda(EXERCISE, arch="sm_90a").cubin)["naive_attention"]
    assert histogram(sass)["STG"] == 0                       # writes nothing: the grader sees NaN


def test_compile_error_names_file_and_line(tmp_path):
    bad = tmp_path / "attention.cu"
    lines = SOLUTION.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if "m = fmaxf(m, s[j]);" in ln)
    lines[n] = lines[n].replace("m = fmaxf(m, s[j]);", "m = fmaxf(m, s[j])")
    bad.write_text("\n".join(lines))
    with pytest.raises(CompileError) as e:
        compile_cuda(bad, arch="sm_90a")
    (f, line, msg), *_ = e.value.errors
    assert Path(f) == bad.resolve() and line in (n + 1, n + 2)   # NVRTC points at the statement or the next
    assert f"{bad.resolve()}:{line}: error:" in str(e.value)


def test_cache_is_keyed_by_content(tmp_path):
    p = tmp_path / "k.cu"
    p.write_text('extern "C" __global__ void k(float* x) { x[0] = 1.f; }')
    a = compile_cuda(p, arch="sm_90a")
    p.write_text('extern "C" __global__ void k(float* x) { x[0] = 2.f; }')
    b = compile_cuda(p, arch="sm_90a")
    assert a != b
    assert compile_cuda(p, arch="sm_90a") == b


def test_cache_is_keyed_by_the_compiler(tmp_path, monkeypatch):
    """A cubin built by one NVRTC is not served to another (ptxas differs between versions: the CPU tier pins the GPU
    host's), from memory or from disk."""
    from flashtutor.loaders import nvrtc
    p = tmp_path / "k.cu"
    p.write_text('extern "C" __global__ void k(float* x) { x[0] = 3.f; }')
    monkeypatch.setattr(nvrtc, "CACHE_DIR", tmp_path / "cache")
    compile_cuda(p, arch="sm_90a")
    assert len(list((tmp_path / "cache").glob("*.cubin"))) == 1
    assert nvrtc.nvrtc_version().count(".") == 1                 # "13.0": the compiler this process loaded
    monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: "99.9")
    compile_cuda(p, arch="sm_90a")                                # another compiler: compiled again, cached apart
    assert len(list((tmp_path / "cache").glob("*.cubin"))) == 2


def test_opcode_parsing():
    assert opcode("@!P0 LDG.E.128 R4, desc[UR6][R2.64]") == "LDG"
    assert opcode("HMMA.16816.F32 R0, R4, R8, R0") == "HMMA"


def test_instruction_classes_and_predication():
    from flashtutor.sass import classify, predication
    ins = ["@!P0 EXIT", "LDG.E.128 R4, desc[UR6][R2.64]", "HMMA.16816.F32 R0, R4, R8, R0", "@P1 BRA 0x100",
           "FFMA R1, R2, R3, R1", "LDL R5, [R1]", "BAR.SYNC.DEFER_BLOCKING 0x0"]
    c = classify(ins)
    assert c["tensor cores"] == 1 and c["fp32 math"] == 1 and c["global loads"] == 1
    assert c["local memory (spills, stack arrays)"] == 1 and c["barriers"] == 1 and c["branches"] == 2
    assert predication(ins) == {"instructions": 7, "predicated": 2, "predicated branches": 2}


def test_wmma_example_uses_tensor_cores_and_runtime_index_spills():
    """The appendix's claims, checked: mma_sync becomes HMMA; a run-time-indexed array goes to the stack."""
    ex = load_cuda(ROOT / "book/examples/wmma_tile.cu", arch="sm_90a")
    d = disassemble(ex.cubin)
    assert histogram(d["tile_wmma"])["HMMA"] > 0 and histogram(d["tile_loop"])["HMMA"] == 0
    la = load_cuda(ROOT / "book/examples/local_array.cu", arch="sm_90a")
    res = la.resources()
    assert res["runtime_index"]["stack_bytes"] > 0 and res["runtime_index"]["spill_instructions"] > 0
    assert res["constant_index"]["stack_bytes"] == 0 and res["constant_index"]["spill_instructions"] == 0
