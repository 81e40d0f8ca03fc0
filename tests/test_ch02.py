"""Chapter 2 (tiling): the CPU tier compiles every step for sm_90a and reads its resources and SASS,
and runs the kernels through a CPU emulation of the CUDA thread model (flashtutor.emulate); the GPU tier
checks them for real and grades the solution and the stub."""
from __future__ import annotations

import importlib
import importlib.util
import shutil
from pathlib import Path

import pytest

from flashtutor import exercises
from flashtutor.chapters import ROOT, get_chapter
from flashtutor.check import check_output
from flashtutor.loaders import load_cuda
from flashtutor.problems import Problem, shape_set
from flashtutor.sass import disassemble, histogram
from conftest import untouched_exercise

CH = get_chapter("02")
KERNELS = ROOT / "flashtutor" / "kernels"
SOLUTION_CU = ROOT / "solutions" / "02_tiling" / "attention.cu"
EXERCISE_CU = ROOT / "chapters" / "02_tiling" / "attention.cu"
STEPS = {s.id[-1]: s for s in CH.steps}          # "a", "b", "c": the chapter manifest's steps
KERNEL_NAMES = {"a": {"coalesced_d64", "coalesced_d128"}, "b": {"smem_tiles_d64", "smem_tiles_d128"},
                "c": {"flash_attention_d64", "flash_attention_d128"}}
STEP_CU = {step: (s.kernel, KERNEL_NAMES[step]) for step, s in STEPS.items()}   # kernel file, its kernels
TILED = ("b", "c")
SM_REGISTERS = 65536          # 32-bit registers per SM (H100, H200)
SM_SHARED = 228 * 1024        # shared memory per SM (H100, H200); 1 KB of it is reserved per block
BLOCK_RESERVED = 1024


def _step_module(step):
    return importlib.import_module(STEPS[step].module)


def _launcher(step):
    """The module whose attention() launches the step's kernels (step c: the solution file)."""
    m = _step_module(step)
    return m._mod if step == "c" else m


# ---------------------------------------------------------------- compile, resources, SASS -------
@pytest.mark.parametrize("step", sorted(STEP_CU))
def test_step_compiles_for_sm90a_without_spills(step):
    path, kernels = STEP_CU[step]
    res = load_cuda(path, arch="sm_90a").resources()
    assert set(res) == kernels
    for name, r in res.items():
        assert r["spill_instructions"] == 0 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, (name, r)
        if step in TILED:
            # __launch_bounds__(256, 2): two blocks of 256 threads must fit in the register file.
            assert 0 < r["registers"] and 2 * 256 * r["registers"] <= SM_REGISTERS, (name, r)
            assert r["shared_bytes"] <= BLOCK_RESERVED, (name, r)   # the tiles are dynamic, nothing static
        else:
            assert 0 < r["registers"] <= 64, (name, r)              # a warp per row: light threads
            assert r["shared_bytes"] == 0, (name, r)


@pytest.mark.parametrize("step", TILED)
def test_shared_memory_per_block_as_designed(step):
    m = _launcher(step)
    want = {64: 4 * (64 * 68 + 64 * 68 + 64 * 64 + 64 * 68),     # Qs, Ks [64][68]; Vs [64][64]; Ps [64][68]
            128: 4 * (64 * 132 + 32 * 132 + 32 * 128 + 32 * 68)}  # Qs [64][132]; Ks [32][132]; Vs [32][128]; Ps [32][68]
    for D, nbytes in want.items():
        assert m.shared_bytes(D) == nbytes
        assert 2 * (nbytes + BLOCK_RESERVED) <= SM_SHARED       # two blocks per SM, as the registers allow
        assert nbytes <= 227 * 1024                             # the most one block may ask for on sm_90


@pytest.mark.parametrize("step", TILED)
def test_tiled_sass_uses_shared_memory_and_no_tensor_cores(step):
    path, _ = STEP_CU[step]
    for name, ins in disassemble(load_cuda(path, arch="sm_90a").cubin).items():
        h = histogram(ins)
        assert h["LDS"] > 0 and h["STS"] > 0 and h["BAR"] > 0, name          # tiles through shared memory
        assert h["FFMA"] > 0 and h["HMMA"] == 0 and h["HGMMA"] == 0, name    # scalar fp32, no tensor cores
        assert any(i.startswith("LDG.E.128") for i in ins), name             # 16-byte global loads
        assert h["SHFL"] > 0, name                                           # row max/sum across 16 threads


def test_coalesced_sass_uses_shuffles_and_no_shared_memory():
    path, _ = STEP_CU["a"]
    for name, ins in disassemble(load_cuda(path, arch="sm_90a").cubin).items():
        h = histogram(ins)
        assert h["SHFL"] > 0 and h["FFMA"] > 0, name
        assert h["LDS"] == 0 and h["STS"] == 0 and h["HMMA"] == 0, name


def test_online_softmax_computes_each_score_once():
    """Step b's two passes compute the Q·Kᵀ tile twice; step c once: about half the score FFMAs."""
    b = disassemble(load_cuda(STEP_CU["b"][0], arch="sm_90a").cubin)["smem_tiles_d64"]
    c = disassemble(load_cuda(STEP_CU["c"][0], arch="sm_90a").cubin)["flash_attention_d64"]
    assert histogram(b)["FFMA"] > 1.5 * histogram(c)["FFMA"]


def test_stub_compiles_and_stores_nothing():
    untouched_exercise("02")
    sass = disassemble(load_cuda(EXERCISE_CU, arch="sm_90a").cubin)
    assert set(sass) == STEP_CU["c"][1]
    for name, ins in sass.items():
        assert histogram(ins)["STG"] == 0, name          # writes nothing: the grader sees NaN


def test_exercise_is_generated_from_the_solution():
    untouched_exercise("02")
    assert exercises.stale([CH]) == []
    text = SOLUTION_CU.read_text()
    assert text.count("BEGIN SOLUTION") == text.count("END SOLUTION") >= 3


def test_reference_module_loads_the_solution():
    from flashtutor.kernels import k02c_online_softmax as c
    assert STEPS["c"].solution and STEP_CU["c"][0] == SOLUTION_CU and STEPS["c"].module == c.__name__
    assert c.SOURCE == ROOT / "solutions" / "02_tiling" / "attention.py"
    assert Path(c._mod.__file__) == c.SOURCE and Path(c._mod._kernel_file) == SOLUTION_CU
    assert CH.reference == c.__name__
    assert not list(KERNELS.glob("k02c*.cu"))            # no copy of the kernel


def test_bytes_moved_decrease_with_each_step():
    a, b, c = (_step_module(s) for s in "abc")
    for p in shape_set("seed") + shape_set("small"):
        for causal in (False, True):
            pc = p.replace(causal=causal)
            assert a.bytes_moved(pc) > b.bytes_moved(pc) > c.bytes_moved(pc) >= pc.min_bytes, pc.name
    seed = shape_set("seed")[0]
    assert c.bytes_moved(seed.replace(causal=True)) < c.bytes_moved(seed)


def test_bench02_times_what_the_chapter_shows():
    from flashtutor.bench import ch02 as bench02
    assert list(bench02.STEPS) == ["ch1 reference"] + [s.label for s in CH.steps]       # the manifest's, in order
    assert list(bench02.STEPS.values()) == [get_chapter("01").reference] + [s.module for s in CH.steps]
    assert set(bench02.CHECKED) == {s.label for s in CH.steps} | {"solution"}
    probs = bench02.table_problems()
    assert [p for p in probs if not p.causal] == list(shape_set("seed") + shape_set("small"))
    assert [p.name for p in probs if p.causal] == [shape_set("seed")[0].replace(causal=True).name]
    assert not any(bench02.skip(n, p) for n in bench02.STEPS for p in probs)
    assert bench02.skip("ch1 reference", shape_set("large")[-1])         # seconds per call: left out
    rows = [{"problem": "P", "step": "ch1 reference", "median_us": 900.0},
            {"problem": "P", "step": "c online softmax", "median_us": 30.0}, {"problem": "Q", "step": "SDPA"}]
    assert bench02.speedups(rows) == [{"problem": "P", "speedup": 30.0, "ch1 reference us": 900.0,
                                       "c online softmax us": 30.0}]


# ---------------------------------------------------------------- the CPU emulation --------------
from flashtutor import emulate as emu  # noqa: E402
needs_gxx = pytest.mark.skipif(not emu.available(), reason="the CUDA emulation needs g++ with C++20 and _Float16")

EMU_PROBLEMS = {   # partial tiles, S = 1, D = 128 (Bc = 32), B > 1 and H > 1, several query blocks
    "a": (Problem(2, 3, 1, 64), Problem(1, 2, 45, 64), Problem(1, 1, 70, 128)),
    "b": (Problem(2, 3, 1, 64), Problem(2, 3, 113, 64), Problem(1, 2, 70, 128), Problem(1, 1, 200, 64)),
    "c": (Problem(2, 3, 1, 64), Problem(2, 3, 113, 64), Problem(1, 2, 70, 128), Problem(1, 1, 200, 64),
          Problem(1, 2, 130, 64, qk_std=6.0)),
}


def _emulate(module, problems, cu=None):
    bad = []
    with emu.emulated(module, cu) as em:
        for p0 in problems:
            for causal in (False, True):
                p = p0.replace(causal=causal)
                q, k, v = p.inputs(seed=3)
                r = check_output(p, q, k, v, module.attention(q, k, v, causal=causal))
                if not r.ok:
                    bad.append(f"{p.name}: {r.message}")
    return bad, em


@needs_gxx
@pytest.mark.parametrize("step", sorted(EMU_PROBLEMS))
def test_step_is_correct_in_the_cpu_emulation(step):
    bad, em = _emulate(_launcher(step), EMU_PROBLEMS[step])
    assert not bad, bad
    launches = [l for kern in em.kernels.values() for l in kern.launches]
    assert launches
    if step in TILED:
        assert all(l["block"] == (256,) and l["shared_mem"] in (68608, 75776) for l in launches)


# Each mutation breaks one thing the kernel must get right; the emulation must notice.
MUTATIONS = {
    "no barrier before P·V": ("        __syncthreads();                                  // Ps complete before anyone reads it\n", ""),
    "no mask for keys past S": ("key >= S || (causal && key > row)", "(causal && key > row)"),
    "acc not rescaled": ("for (int c = 0; c < TD; ++c) acc[r][c] *= alpha;", ""),
    "causal off by one": ("(causal && key > row)", "(causal && key >= row)"),
}


@needs_gxx
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_emulation_catches_a_broken_solution(name, tmp_path):
    old, new = MUTATIONS[name]
    src = SOLUTION_CU.read_text()
    assert old in src
    (tmp_path / "attention.cu").write_text(src.replace(old, new))
    shutil.copy(SOLUTION_CU.with_name("attention.py"), tmp_path / "attention.py")
    spec = importlib.util.spec_from_file_location(f"mutant_{abs(hash(name))}", tmp_path / "attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    bad, _ = _emulate(mod, (Problem(1, 2, 113, 64), Problem(1, 1, 70, 128)))
    assert bad, f"the emulation did not notice: {name}"


@needs_gxx
def test_stub_leaves_the_output_unwritten_in_the_emulation(tmp_path, monkeypatch):
    import torch

    for f in ("attention.py", "attention.cu"):
        shutil.copy(ROOT / "chapters" / "02_tiling" / f, tmp_path / f)
    spec = importlib.util.spec_from_file_location("ch02_stub_emu", tmp_path / "attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("FLASHTUTOR_POISON_OUTPUTS", "1")
    p = Problem(1, 2, 70, 64)
    q, k, v = p.inputs(seed=0)
    with emu.emulated(mod):
        out = mod.attention(q, k, v)
    assert torch.isnan(out).all()


# ---------------------------------------------------------------- GPU tier ----------------------
@pytest.mark.usefixtures("gpu_shared")
@pytest.mark.gpu
@pytest.mark.parametrize("step", "abc")
def test_step_correct_on_gpu(step):
    mod = _step_module(step)
    bad = []
    for p0 in shape_set("odd") + shape_set("seed"):
        for causal in (False, True):
            p = p0.replace(causal=causal)
            q, k, v = p.inputs(seed=1, device="cuda")
            r = check_output(p, q, k, v, mod.attention(q, k, v, causal=causal))
            if not r.ok:
                bad.append(f"{p.name}: {r.message}")
    assert not bad, bad



