"""Chapter 3 (WMMA): the CPU tier compiles every step for sm_90a and reads what the compiler made
(tensor cores, cp.async, no local memory, shared memory as designed); the GPU tier checks outputs."""
from __future__ import annotations

import importlib

import pytest

from flashtutor.chapters import ROOT, get_chapter
from flashtutor.loaders import load_cuda
from flashtutor.sass import disassemble, histogram
from conftest import untouched_exercise

CH = get_chapter("03")
PREFIX = {"a": "wmma_attention", "b": "wmma_cp_async", "c": "wmma_padded"}   # each step's kernel names
# step: (kernel file, kernel name prefix, launcher module), from the chapter manifest
STEPS = {s.id[-1]: (s.kernel, PREFIX[s.id[-1]], s.module) for s in CH.steps}
EXERCISE = ROOT / "chapters/03_wmma/attention.cu"
# Dynamic shared memory per block, bytes, as designed (the headers of the .cu files explain each tile).
DESIGNED = {"a": {64: 42240, 128: 58624}, "b": {64: 58624, 128: 91392}, "c": {64: 65792, 128: 98560}}
SM_SHARED = 228 * 1024           # shared memory per SM on H100/H200
BLOCK_RESERVED = 1024            # the driver reserves 1 KB of it per block
BLOCK_MAX = 227 * 1024           # the most one block may have


@pytest.fixture(scope="module")
def built():
    return {s: load_cuda(path, arch="sm_90a") for s, (path, _, _) in STEPS.items()}


@pytest.fixture(scope="module")
def sass(built):
    return {s: disassemble(m.cubin) for s, m in built.items()}


def test_one_kernel_per_head_dim(built):
    for s, mod in built.items():
        prefix = STEPS[s][1]
        assert set(mod.resources()) == {f"{prefix}_d64", f"{prefix}_d128"}, s


def test_no_spills_no_local_memory(built):
    for s, mod in built.items():
        for name, r in mod.resources().items():
            assert r["spill_instructions"] == 0 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, (s, name, r)
            assert 0 < r["registers"] <= 255, (s, name, r)
            assert r["shared_bytes"] <= BLOCK_RESERVED, (s, name, r)    # all tiles live in dynamic shared memory


def test_tensor_cores_through_ldmatrix(sass):
    for s, kernels in sass.items():
        for name, instrs in kernels.items():
            h = histogram(instrs)
            assert h["HMMA"] > 0, (s, name)            # mma_sync → HMMA.16816.F32
            assert h["HGMMA"] == 0, (s, name)          # wmma cannot reach Hopper's wgmma
            assert h["LDSM"] > 0, (s, name)            # load_matrix_sync → ldmatrix (the bank analysis assumes it)
            assert any(i.startswith("HMMA.16816.F32") for i in instrs), (s, name)   # fp32 accumulation


def test_cp_async_only_from_step_b_on(sass):
    for name, instrs in sass["a"].items():
        h = histogram(instrs)
        assert h["LDGSTS"] == 0 and h["LDG"] > 0, name             # plain loads: global → register → shared
    for s in ("b", "c"):
        for name, instrs in sass[s].items():
            h = histogram(instrs)
            assert h["LDGSTS"] > 0, (s, name)                      # cp.async
            assert h["LDG"] == 0, (s, name)                        # every tile goes through cp.async
            assert h["LDGDEPBAR"] > 0 and h["DEPBAR"] > 0, (s, name)   # commit_group / wait_group


@pytest.mark.parametrize("step", sorted(STEPS))
def test_shared_memory_as_designed(step):
    mod = importlib.import_module(STEPS[step][2])
    for D, want in DESIGNED[step].items():
        assert mod.shared_bytes(D) == want, (step, D)
        assert want <= BLOCK_MAX
    if step == "c":   # the reference: 3 blocks per SM at D = 64, 2 at D = 128
        assert 3 * (mod.shared_bytes(64) + BLOCK_RESERVED) <= SM_SHARED
        assert 2 * (mod.shared_bytes(128) + BLOCK_RESERVED) <= SM_SHARED


@pytest.mark.parametrize("step", sorted(STEPS))
def test_launcher_and_kernel_agree_on_the_layout(step, tmp_path):
    """The .cu file's Layout<D>::BYTES (what the kernel indexes) equals what the launcher allocates."""
    path, _, module = STEPS[step]
    mod = importlib.import_module(module)
    probe = tmp_path / "probe.cu"
    probe.write_text(f'#include "{path}"\n'
                     f"static_assert(Layout<64>::BYTES == {mod.shared_bytes(64)}, \"D = 64\");\n"
                     f"static_assert(Layout<128>::BYTES == {mod.shared_bytes(128)}, \"D = 128\");\n")
    load_cuda(probe, arch="sm_90a")     # a CompileError names the static_assert that failed


def test_padding_removes_the_modelled_conflicts():
    from flashtutor.kernels import k03c_swizzle as c
    for D in (64, 128):
        for what, unpadded, padded in c.conflict_table(D):
            assert unpadded > 1 and padded == 1, what
    assert c.passes(c.ldmatrix_phase(128)) == 8           # 8 rows, one bank group: 8 passes
    assert c.passes(c.ldmatrix_phase(144)) == 1
    assert c.passes([0, 0, 4, 4]) == 1                     # the same word twice is a broadcast


def test_exercise_stub_compiles_and_does_nothing():
    untouched_exercise("03")
    for name, instrs in disassemble(load_cuda(EXERCISE, arch="sm_90a").cubin).items():
        h = histogram(instrs)
        assert h["HMMA"] == 0 and h["STG"] == 0, name      # no products, no output: the grader sees NaN


def test_bytes_moved_is_the_same_for_every_step():
    from flashtutor.problems import SHAPE_SETS
    mods = [importlib.import_module(m) for _, _, m in STEPS.values()]
    for p in SHAPE_SETS["seed"] + SHAPE_SETS["odd"]:
        for causal in (False, True):
            pc = p.replace(causal=causal)
            got = {m.bytes_moved(pc) for m in mods}
            assert len(got) == 1, pc.name
            assert got.pop() >= pc.min_bytes


# ---------------------------------------------------------------- the CPU emulation --------------
# The kernels' own source, compiled for the CPU with g++ (flashtutor.emulate): every CUDA thread a fiber,
# barriers and shuffles as written, shared memory NaN-filled per block (poison_shared), accumulator
# fragments in a scrambled layout (wmma.h), cp.async copies landing only at the wait that covers them
# (cp_async.h).
from flashtutor import emulate as emu  # noqa: E402
needs_gxx = pytest.mark.skipif(not emu.available(), reason="the CUDA emulation needs g++ with C++20 and _Float16")
EMU_PROBLEMS = [(2, 3, 1, 64), (2, 3, 113, 64), (1, 2, 70, 128), (1, 1, 200, 128), (1, 1, 130, 64)]


def _launcher(step):
    mod = importlib.import_module(STEPS[step][2])
    return mod._mod if step == "a" else mod       # step a's launcher is the solution module itself


def _emulate(step, cu=None, problems=EMU_PROBLEMS, causal=(False, True)):
    from flashtutor.api import set_poisoning
    from flashtutor.check import check_output
    from flashtutor.problems import Problem
    launcher, bad = _launcher(step), []
    set_poisoning(True)
    try:
        with emu.emulated(launcher, cu or STEPS[step][0], poison_shared=True) as em:
            for shape in problems:
                for c in causal:
                    p = Problem(*shape, causal=c)
                    q, k, v = p.inputs(5)
                    r = check_output(p, q, k, v, launcher.attention(q, k, v, causal=c), seed=5)
                    if not r.ok:
                        bad.append(f"{p.name}: {r.message}")
            return bad, em
    finally:
        set_poisoning(False)


@needs_gxx
@pytest.mark.parametrize("step", sorted(STEPS))
def test_step_is_correct_in_the_cpu_emulation(step):
    bad, em = _emulate(step)
    assert not bad, "\n".join(bad)
    assert em.errors() == 0                        # every wmma pointer 32-byte aligned, every ldm a multiple of 16 B
    launches = [l for k in em.kernels.values() for l in k.launches]
    assert {l["shared_mem"] for l in launches} == set(DESIGNED[step].values())
    assert {l["block"] for l in launches} == {(128,)}


# Each mutation breaks one thing the kernels must get right; the emulation must notice.
MUTATIONS = {
    "epilogue reuses alpha_w before every lane has read it": (
        "a", "    __syncwarp();                                          // every lane is done reading alpha_w",
        "    //"),
    "rescale assumes the sm_80 accumulator layout instead of asking": (
        "a", "a[e] = alpha_w[row_of[e]];", "a[e] = alpha_w[lane / 4 + 8 * (e / 2 % 2)];"),
    "keys past S are not masked": ("a", "if (key >= S || (causal && key > row))", "if (causal && key > row)"),
    "P·V waits for one cp.async group too few": (
        "b", "cp_async_wait<2>();                                // V_j is done",
        "cp_async_wait<3>();                                // V_j is done"),
    "S = Q·Kᵀ starts before K_j has landed": (
        "c", "cp_async_wait<1>();                                // my copies of K_j",
        "cp_async_wait<2>();                                // my copies of K_j"),
}


@needs_gxx
@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_emulation_catches_a_broken_kernel(name, tmp_path):
    step, old, new = MUTATIONS[name]
    src = STEPS[step][0].read_text()
    assert src.count(old) == 1, f"the mutation no longer applies: {old!r}"
    bad_cu = tmp_path / STEPS[step][0].name
    bad_cu.write_text(src.replace(old, new))
    bad, _ = _emulate(step, bad_cu, problems=[(2, 3, 113, 64), (1, 1, 200, 128)])
    assert bad, f"the emulation did not notice: {name}"


# ---------------------------------------------------------------- GPU tier ----------------------
@pytest.mark.usefixtures("gpu_shared")
@pytest.mark.gpu
@pytest.mark.parametrize("step", sorted(STEPS))
def test_step_is_correct_on_odd_and_seed(step):
    import torch

    from flashtutor.api import set_poisoning
    from flashtutor.check import check_output
    from flashtutor.problems import SHAPE_SETS
    attention = importlib.import_module(STEPS[step][2]).attention
    set_poisoning(True)                     # unwritten outputs are NaN, as under the grader
    try:
        bad = []
        for p in SHAPE_SETS["odd"] + SHAPE_SETS["seed"]:
            for causal in (False, True):
                pc = p.replace(causal=causal)
                q, k, v = pc.inputs(3, "cuda")
                out = attention(q, k, v, causal=causal)
                torch.cuda.synchronize()
                r = check_output(pc, q, k, v, out, seed=3)
                if not r.ok:
                    bad.append(f"{pc.name}: {r.message}")
    finally:
        set_poisoning(False)
    assert not bad, "\n".join(bad)

