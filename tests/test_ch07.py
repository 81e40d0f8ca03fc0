"""Chapter 7 (Hopper): the CPU tier compiles every kernel for sm_90a and reads what ptxas made (HGMMA,
UTMALDG, setmaxnreg honoured, no local memory, no serialized wgmma), checks that the launchers and the
kernels agree on shared memory, that the exercise is the solution with its marked regions cut out,
and unit-tests the tensor-map helper. The kernels themselves run in scripts/ch07_gpu.py (GPU only)."""
from __future__ import annotations

import ctypes
import importlib
import io
from pathlib import Path

import re

import pytest

from flashtutor.chapters import CHAPTERS, ROOT
from flashtutor.loaders import load_cuda, tma
from flashtutor.loaders.nvrtc import course_include_dir, cuda_include_dir
from flashtutor.sass import disassemble, histogram
from conftest import untouched_exercise

# step: (kernel file, kernel name prefix, launcher module)
STEPS = {
    "a": (ROOT / "flashtutor/kernels/k07a_wgmma_tma.cu", "wgmma_tma", "flashtutor.kernels.k07a_wgmma_tma"),
    "b": (ROOT / "solutions/07_hopper/attention.cu", "ws_attention", "flashtutor.kernels.k07b_warp_specialized"),
}
if (ROOT / "flashtutor/kernels/k07c_pingpong.cu").exists():
    STEPS["c"] = (ROOT / "flashtutor/kernels/k07c_pingpong.cu", "pingpong", "flashtutor.kernels.k07c_pingpong")
SOLUTION_STEP = "b"       # the exercise's step: c is its tuned sibling (DESIGN: keep the teaching kernel small)
SOLUTION = ROOT / "solutions/07_hopper/attention.cu"
EXERCISE = ROOT / "chapters/07_hopper/attention.cu"
PROBES = ROOT / "flashtutor/kernels/k07_probes.cu"
BLOCK_MAX = 227 * 1024                               # the most dynamic shared memory one block may have (H100/H200)
BLOCK_RESERVED = 1024                                # the 1 KB the system keeps per block (reported as static)


@pytest.fixture(scope="module")
def built():
    return {s: load_cuda(path, arch="sm_90a") for s, (path, _, _) in STEPS.items()}


@pytest.fixture(scope="module")
def sass(built):
    return {s: disassemble(m.cubin) for s, m in built.items()}


def _compile_log(path: Path, defines: dict | None = None) -> str:
    """NVRTC's log (ptxas's remarks included) for one file compiled for sm_90a."""
    from cuda.core import Program, ProgramOptions
    opts = ProgramOptions(name=str(path), arch="sm_90a", std="c++17", include_path=[str(path.parent), course_include_dir(), cuda_include_dir()],
                          define_macro=[(k, str(v)) for k, v in (defines or {}).items()] or None)
    log = io.StringIO()
    Program(path.read_text(), "c++", opts).compile("cubin", logs=log)
    return log.getvalue().replace("\x00", "")


def test_one_kernel_per_head_dim(built):
    for s, mod in built.items():
        prefix = STEPS[s][1]
        assert set(mod.resources()) == {f"{prefix}_d64", f"{prefix}_d128"}, s


def test_no_spills_no_local_memory(built):
    for s, mod in built.items():
        for name, r in mod.resources().items():
            assert r["spill_instructions"] == 0 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, (s, name, r)
            assert 0 < r["registers"] <= 255, (s, name, r)
            assert r["shared_bytes"] <= BLOCK_RESERVED, (s, name, r)    # every tile is in dynamic shared memory


def test_wgmma_and_tma_in_the_sass(sass):
    """The chapter's SASS rule: HGMMA (wgmma) and UTMALDG (TMA loads), as the grader's opcode parser counts them."""
    rule = CHAPTERS["07"].sass
    assert rule.require == ("HGMMA", "UTMALDG") and rule.no_spills
    for s, kernels in sass.items():
        for name, instrs in kernels.items():
            h = histogram(instrs)
            for op in rule.require:
                assert h[op] > 0, (s, name, op)
            assert h["HMMA"] == 0 and h["LDSM"] == 0, (s, name)      # no mma.sync / ldmatrix path left
            assert h["LDGSTS"] == 0, (s, name)                        # no cp.async: every tile comes by TMA
            assert any(i.startswith("HGMMA.64x") and ".F32" in i for i in instrs), (s, name)   # fp32 accumulate


def test_hgmma_count_matches_the_tiles(sass):
    """Per tile: D/16 wgmma for S = Q·Kᵀ and Bc/16 for O += P·V (the loops are unrolled once). Step c issues
    each GEMM in two places (S_0 in a prologue, the last P·V in an epilogue, both besides the loop), once per
    key-tile width its static walk uses at that head dim (masked and unmasked tiles may differ), and once more
    in the dynamic walk (the masked width) where the launcher's SCHEDULE uses one."""
    Bc = {"a": 64, "b": 128}
    for s, kernels in sass.items():
        for name, instrs in kernels.items():
            D = 64 if name.endswith("_d64") else 128
            n = histogram(instrs)["HGMMA"]
            if s == "c":
                from flashtutor.kernels import k07c_pingpong as k07c
                dynamic = any(k07c.SCHEDULE[(D, c)] == "dynamic" for c in (False, True))
                widths = [*{k07c.tile(D, c) for c in (False, True)}] + [k07c.tile(D, True)] * dynamic
                assert n == sum(2 * (D // 16) + 2 * (bc // 16) for bc in widths), (name, n, widths)
            else:
                assert n % (D // 16 + Bc[s] // 16) == 0, (s, name, n)


def test_setmaxnreg_honoured_and_wgmma_not_serialized():
    for s, (path, _, _) in STEPS.items():
        log = _compile_log(path)
        assert "C7508" not in log, (s, log)     # 'setmaxnreg ignored; unable to determine register count at entry'
        assert "C7510" not in log, (s, log)     # 'wgmma ... serialized' (a dependence ptxas could not prove safe)
        assert "Potential Performance Loss" not in log, (s, log)   # e.g. C7519: serialized for a wgmma in a branch
        assert "warning" not in log.lower(), (s, log)


def test_warp_specialized_steps_move_registers(sass):
    for s, kernels in sass.items():
        for name, instrs in kernels.items():
            n = histogram(instrs)["USETMAXREG"]
            per_config = 1
            if s == "c":     # one role split per key-tile width its static walk uses (masked or not) + the dynamic walk's
                from flashtutor.kernels import k07c_pingpong as k07c
                D = 64 if name.endswith("_d64") else 128
                per_config = len({k07c.tile(D, c) for c in (False, True)}) + any(
                    k07c.SCHEDULE[(D, c)] == "dynamic" for c in (False, True))
            assert (n == 2 * per_config) if s >= "b" else (n == 0), (s, name, n)   # one .dec (producer), one .inc (consumers)


def test_launchers_allocate_what_the_kernels_index(tmp_path):
    """Layout<D>::BYTES (what the kernel indexes) + the 1024-byte alignment slack = what the launcher asks for."""
    for s, (path, _, module) in STEPS.items():
        mod = importlib.import_module(module)
        probe = tmp_path / f"probe_{s}.cu"
        probe.write_text(f'#include "{path}"\n'
                         f"static_assert(Layout<64>::BYTES + SWIZZLE_ATOM == {mod.shared_bytes(64)}, \"D = 64\");\n"
                         f"static_assert(Layout<128>::BYTES + SWIZZLE_ATOM == {mod.shared_bytes(128)}, \"D = 128\");\n")
        load_cuda(probe, arch="sm_90a")      # a CompileError names the static_assert that failed
        for D in (64, 128):
            assert mod.shared_bytes(D) <= BLOCK_MAX, (s, D)


def test_other_targets_get_a_clear_error():
    from flashtutor.loaders import CompileError
    for path in [p for p, _, _ in STEPS.values()] + [SOLUTION]:
        with pytest.raises(CompileError, match="need an sm_90a target"):
            load_cuda(path, arch="sm_80")


def test_the_solution_is_step_b():
    """Step b is the solution itself (flashtutor.kernels.k07b_warp_specialized loads it), not a copy of it."""
    import importlib
    step = importlib.import_module(STEPS[SOLUTION_STEP][2])
    assert STEPS[SOLUTION_STEP][0] == SOLUTION == step.SOURCE
    assert step.attention.__code__.co_filename == str(ROOT / "solutions/07_hopper/attention.py")


def test_exercise_is_generated_and_compiles():
    untouched_exercise("07")
    from flashtutor import exercises
    assert exercises.stale([CHAPTERS["07"]]) == []
    text = EXERCISE.read_text()
    assert text.count("// TODO:") == 3 and "BEGIN SOLUTION" not in text
    assert "mbar_arrive(sm.kv_empty + 8 * s)" not in text and "mbar_wait(sm.kv_full + 8 * s," not in text  # the learner's part
    kernels = disassemble(load_cuda(EXERCISE, arch="sm_90a").cubin)
    for name, instrs in kernels.items():
        h = histogram(instrs)
        # With the wait unwritten, `ready` stays false and the consumers leave before any GEMM: no HGMMA
        # is left in the code at all, so nothing can wait on a barrier that never completes.
        assert h["HGMMA"] == 0, name
        assert h["UTMALDG"] > 0 and h["USETMAXREG"] == 2, name    # the producer is intact


def test_probes_compile():
    mod = load_cuda(PROBES, arch="sm_90a")
    res = mod.resources()
    assert {"probe_tma_swizzle", "probe_wgmma_ss_d64", "probe_wgmma_rs_d128"} <= set(res)
    for name, r in res.items():
        assert r["spill_instructions"] == 0, name
    from flashtutor.kernels import k07_probes
    for D in (64, 128):   # the largest probe's tiles + barrier fit its allocation
        assert 2 * 64 * D * 2 + 8 + 1023 <= k07_probes.SMEM


# ---------------------------------------------------------------- the tensor-map helper ----------
def test_plan_for_the_attention_matrices():
    p = tma.plan_2d(2 * 3 * 113, 128, box_rows=64)                 # [B·H·S, D] fp16, box [64, 64]
    assert p.global_dim == (128, 678)                              # innermost first, as the driver wants
    assert p.global_strides == (256,)                              # bytes per row
    assert p.box_dim == (64, 64) and p.element_strides == (1, 1)
    assert p.box_row_bytes == 128 and p.box_bytes == 64 * 128
    assert p.smem_alignment == 1024                                # 8 rows × the 128-byte swizzle span
    assert tma.plan_2d(4096, 64, box_rows=128).box_bytes == 128 * 128


@pytest.mark.parametrize("kw, msg", [
    (dict(rows=10, cols=60, box_rows=8, box_cols=56), "multiple of 16"),          # row stride 120 bytes
    (dict(rows=10, cols=64, box_rows=300), r"\[1, 256\]"),                         # box too tall
    (dict(rows=10, cols=128, box_rows=64, box_cols=128), "swizzle span"),         # 256-byte rows, 128-byte swizzle
    (dict(rows=10, cols=64, box_rows=64, box_cols=4), "multiple of 16"),          # 8-byte box rows
    (dict(rows=10, cols=64, box_rows=64, swizzle=256), "swizzle 256"),
    (dict(rows=0, cols=64, box_rows=64), "2\\^32"),
])
def test_plan_refuses_what_the_driver_would(kw, msg):
    with pytest.raises(tma.TensorMapError, match=msg):
        tma.plan_2d(**kw)


def test_plan_checks_the_address():
    p = tma.plan_2d(64, 64, box_rows=64)
    p.check(0x7f0000000100)
    with pytest.raises(tma.TensorMapError, match="16-byte aligned"):
        p.check(0x7f0000000108)


def test_swizzle_worked_example():
    """The header of k07a_wgmma_tma.cu: row 3, chunk 5 (halves 40..47) lands in chunk 6, byte 480."""
    assert tma.swizzled_offset(3 * 128 + 5 * 16) == 3 * 128 + 6 * 16 == 480
    assert tma.swizzled_offset(11 * 128 + 5 * 16) == 11 * 128 + 6 * 16        # repeats every 8 rows
    assert tma.swizzled_offset(5 * 16 + 7) == 5 * 16 + 7                        # row 0 is unchanged
    atom = [tma.swizzled_offset(b) for b in range(1024)]
    assert sorted(atom) == list(range(1024))                                    # a permutation of the atom
    # the same 16-byte column chunk of 8 consecutive rows: 8 different positions = all 32 banks
    assert len({tma.swizzled_offset(r * 128 + 2 * 16) % 128 for r in range(8)}) == 8
    assert tma.swizzled_offset(1000, 0) == 1000


def test_kernel_params_pack_maps_tensors_and_scalars():
    from cuda.bindings import driver
    m = tma.TensorMap(driver.CUtensorMap(), tma.plan_2d(64, 64, box_rows=64), tensor=None)
    values, types = tma.kernel_params((m, 7, 0.5, True), (128, 4, 4, 4))
    assert values[0] is m.cu_map and types[0] is None              # the driver copies getPtr()'s 128 bytes
    assert types[1:] == (ctypes.c_int32, ctypes.c_float, ctypes.c_int32) and values[1:] == (7, 0.5, 1)
    with pytest.raises(TypeError, match="__grid_constant__ CUtensorMap"):
        tma.kernel_params((m,), (8,))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        tma.kernel_params((m,), (128, 4))
    helper = getattr(driver, "_HelperKernelParams", None)        # cuda.bindings' own packing, if reachable
    if helper is not None:
        h = helper((values, types))
        ptrs = (ctypes.c_void_p * 4).from_address(h.ckernelParams)
        assert ptrs[0] == m.cu_map.getPtr()                         # the map itself, not a copy of a pointer
        assert ctypes.c_int32.from_address(ptrs[1]).value == 7
        assert ctypes.c_float.from_address(ptrs[2]).value == 0.5


def test_encode_needs_a_gpu():
    reason = tma.driver_reason()
    if reason is not None:
        pytest.skip(f"encoding a tensor map needs the driver and a Hopper GPU: {reason}")
    import torch
    x = torch.zeros(256, 128, dtype=torch.float16, device="cuda")
    m = tma.encode(x, box_rows=64)
    assert m.plan.box_bytes == 8192 and len(m.cu_map.opaque) == 16


def test_encode_arguments_are_accepted_by_the_bindings():
    """The bindings' own argument conversion runs before the driver is reached: plain ints where the
    driver wants cuuint32_t fail there ("Cannot convert int"), on any machine, so this runs on a CPU."""
    import torch
    from cuda.bindings import driver
    plan = tma.plan_2d(256, 128, box_rows=64)
    try:
        err, _ = driver.cuTensorMapEncodeTiled(*tma.encode_args(driver, plan, torch.float16, 1 << 20))
    except TypeError:
        raise
    except Exception as e:  # noqa: BLE001 — no driver on this machine, after the arguments were converted
        assert "driver" in str(e).lower(), e
        return
    assert err is not None


def test_launcher_refuses_non_hopper_before_compiling(monkeypatch):
    import torch
    mod = importlib.import_module(STEPS["a"][2])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100")
    with pytest.raises(RuntimeError, match="need sm_90"):
        mod.require_hopper()


def test_step_c_tiles_agree_with_the_kernel(tmp_path):
    """The launcher's key-tile widths (TILES, passed as defines) are the .cu file's defaults, so a compile
    without defines (the grader's, the tests') builds the kernel the launcher runs; the ring depth and
    the grid choice are what the header says."""
    from flashtutor.kernels import k07c_pingpong as k07c
    probe = tmp_path / "probe_tiles.cu"
    lines = [f'#include "{STEPS["c"][0]}"']
    for (D, causal), bc in k07c.TILES.items():
        macro = f"BC_D{D}" + ("_CAUSAL" if causal else "")
        lines.append(f'static_assert({macro} == {bc}, "{macro}");')
        lines.append(f'static_assert(Tiles<{D}, {bc}>::STAGES == {k07c.stages(D, causal)}, "stages {D} {causal}");')
    lines.append(f'static_assert(MAX_STAGES == {k07c.MAX_STAGES} && EXP2_FMA_EVERY == {k07c.EXP2_FMA_EVERY} '
                 f'&& SOFTMAX_SPLIT == {k07c.SOFTMAX_SPLIT}, "knobs");')
    lines.append(f'static_assert(SPLIT_TAIL_D64 == {int(k07c.SPLIT_TAIL[64])} && SPLIT_TAIL_D128 == '
                 f'{int(k07c.SPLIT_TAIL[128])}, "split last round");')
    # query blocks that end at S: the three-consumer kernel only (the default compile has two at D = 64)
    lines.append('static_assert(END_ALIGN_WIDE && !Roles<64>::END_ALIGN && !Roles<128>::END_ALIGN, "end align");')
    probe.write_text("\n".join(lines) + "\n")
    load_cuda(probe, arch="sm_90a")
    assert k07c.stages(128, False) >= 2 and k07c.stages(128, True) >= 2
    assert k07c.Bc == max(k07c.TILES.values())


def test_step_c_variants_compile_without_spills():
    """The other tile widths and the exp2-on-FMA option (scripts/ch07_gpu.py --sweep) build without
    spills or local memory: the consumers' S (Bc/2 registers), P (Bc/4) and O (D/2) fit in 240 registers."""
    from flashtutor.kernels import k07c_pingpong as k07c
    for kw in (dict(tiles={(128, False): 160, (64, False): 192}, exp2_fma_every=4),
               dict(tiles={(128, True): 128, (64, False): 176}, max_stages=2, row_split=1)):
        for name, r in k07c.variant(**kw).module().resources().items():
            assert r["spill_instructions"] == 0 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, (kw, name, r)


def test_step_c_three_consumer_warpgroups_where_the_wider_tiles_pay():
    """At D = 64 the launcher takes three consumer warpgroups (192-row work tiles) unless the last, partly filled
    round of tiles costs more than the wider tiles gain: the choices the H100 A/B of 2026-11-28 found faster
    (results/ch07-issue28-h100-2026-11-28/3-d64-consumers-ab.log), and two at D = 128. The three-warpgroup
    kernel builds without spills in the 160 registers setmaxnreg can give each of its consumers."""
    from flashtutor.kernels import k07c_pingpong as k07c
    measured = {(4, 32, 4096): 3, (2, 32, 8192): 3, (2, 32, 16384): 3, (4, 32, 2048): 3,    # 3 faster there
                (2, 16, 2048): 2, (8, 16, 1024): 2, (1, 16, 1024): 2}                      # 2 faster there
    for (B, H, S), n in measured.items():
        assert k07c.consumers(64, S, B * H, 132) == n, (B, H, S)
        assert k07c.consumers(128, S, B * H, 132) == 2
    module = k07c.attention.module(3)
    wide = module.resources()["pingpong_d64"]
    assert wide["spill_instructions"] == 0 and wide["local_bytes"] == 0, wide
    assert wide["registers"] == 128                       # 65536 / 512 threads: what the block starts with
    # the SASS checks of the default build, for this one: the chapter's opcodes, one S = Q·Kᵀ and one P·V per
    # walk in the prologue/loop/epilogue (static and dynamic: the launcher's wide schedule uses the counter with
    # masking), a setmaxnreg pair per walk, and ptxas serializing no wgmma
    instrs = disassemble(module.cubin)["pingpong_d64"]
    h = histogram(instrs)
    assert h["HGMMA"] == 2 * 2 * (64 // 16 + k07c.tile(64) // 16) and h["UTMALDG"] > 0, h
    assert k07c.WIDE_SCHEDULE[True] == "dynamic" and k07c.tile(64, True) == k07c.tile(64)
    assert h["USETMAXREG"] == 2 * 2, h
    defines = {"CONSUMERS_D64": 3, "DYNAMIC_D64": 1}
    log = _compile_log(STEPS["c"][0], defines)
    assert "C7510" not in log and "C7508" not in log and "warning" not in log.lower(), log
    assert "Potential Performance Loss" not in log, log


def test_step_c_second_q_buffer_builds_and_agrees_on_its_layout(tmp_path):
    """Q_SLOTS_D64 = 2 (prepared for issue 28, to be timed on an H100: the next work tile's Q loads while this one
    runs): with two consumers and with three, the kernel's layout is what the launcher allocates, it fits the
    227 KB with the same K and V rings, builds without spills and ptxas serializes no wgmma; the default build
    keeps one buffer."""
    from flashtutor.kernels import k07c_pingpong as k07c
    for n in (2, 3):
        defines = {"Q_SLOTS_D64": 2, "CONSUMERS_D64": n, "DYNAMIC_D64": int(n == 3)}
        probe = tmp_path / f"probe_q2_{n}.cu"
        probe.write_text(f'#include "{STEPS["c"][0]}"\n'
                         f"static_assert(Layout<64>::BYTES + SWIZZLE_ATOM == "
                         f"{k07c.shared_bytes(64, n_consumers=n, q_slots=2)}, \"D = 64, two Q buffers\");\n"
                         f"static_assert(Tiles<64, 128>::STAGES == {k07c._stages(64, 128, rows=64 * n)}, \"rings\");\n")
        load_cuda(probe, arch="sm_90a", defines=defines)
        log = _compile_log(STEPS["c"][0], defines)
        assert "Potential Performance Loss" not in log and "warning" not in log.lower(), log
    r = k07c.variant(q_slots_d64=2).module(3).resources()["pingpong_d64"]
    assert r["spill_instructions"] == 0 and r["local_bytes"] == 0, r
    assert k07c.shared_bytes(64, n_consumers=3, q_slots=2) <= BLOCK_MAX


def test_step_c_splits_only_a_partial_last_round():
    """The launcher splits the last round of work tiles only where it is partial and the idle blocks can take
    two parts or more of TAIL_KEYS key tiles each: 4096 tiles on 132 SMs leave 4 for the last round, 33 idle
    blocks each, capped by 24 key tiles / 3; a multiple of the grid, a single round, or a tail too large to
    split is not split."""
    from flashtutor.kernels import k07c_pingpong as k07c
    assert k07c.TAIL_KEYS == 3
    assert k07c.split_parts(4096, 132, 24) == 8          # B4 H32 S4096 D128: 24 key tiles of 176
    assert k07c.split_parts(4096, 132, 47) == 15         # B2 H32 S8192
    assert k07c.split_parts(8192, 132, 94) == 16         # B2 H32 S16384: 8 tiles left, 132 // 8 blocks each
    assert k07c.split_parts(132 * 32, 132, 24) == 0      # full rounds only
    assert k07c.split_parts(100, 132, 24) == 0           # one round: nothing waits for it
    assert k07c.split_parts(132 + 70, 132, 24) == 0      # 70 left: one block each already
    assert k07c.split_parts(132 + 4, 132, 5) == 0        # 5 key tiles: no two parts of 3


def test_step_c_descriptor_increments_build_the_same_descriptors_with_fewer_uniform_instructions():
    """FT_DESC_INC (issue 28's first candidate, to be timed on an H100): each tile's wgmma descriptors are built once
    and stepped by adding offset / 16, instead of make_desc per instruction. The same descriptor for every base
    address and step the kernel uses (a model of hopper.cuh's make_desc: address bits 0-13, strides, swizzle), no
    spills, the same wgmma count, and fewer instructions on the uniform datapath, which the H100 profile found three
    times cuDNN's (results/ncu07-h100-2026-11-28)."""
    from flashtutor.kernels import k07c_pingpong as k07c

    def make_desc(addr, lbo, sbo):
        return ((addr & 0x3FFFF) >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 62
    window = 1 << 18                                       # make_desc keeps 18 address bits: a CTA's shared window
    for D, bc in ((128, 176), (64, 128)):
        steps_s = [(kk // 4) * rows * 128 + (kk % 4) * 32 for rows in (k07c.Br, 64 * k07c.WIDE_D64, bc) for kk in range(D // 16)]
        steps_pv = [kk * 16 * 128 for kk in range(bc // 16)]
        for base in range(0, window, 1024):                # every swizzle-atom-aligned base in the window
            for step in steps_s:
                if base + step < window:
                    assert make_desc(base + step, 16, 1024) == make_desc(base, 16, 1024) + (step >> 4)
            for step in steps_pv:
                if base + step < window:
                    assert make_desc(base + step, bc * 128, 1024) == make_desc(base, bc * 128, 1024) + (step >> 4)
    default = k07c.variant().module().resources()
    stepped = k07c.variant(desc_inc=True).module().resources()
    for name, r in stepped.items():
        uniform = lambda res: sum(n for op, n in res["opcodes"].items() if op.startswith("U"))  # noqa: E731
        assert r["spill_instructions"] == 0 and r["local_bytes"] == 0, (name, r)
        assert r["opcodes"]["HGMMA"] == default[name]["opcodes"]["HGMMA"], name
        assert uniform(r) < 0.8 * uniform(default[name]), (name, uniform(r), uniform(default[name]))


def test_the_event_timed_ab_script_builds_the_variants_it_names():
    """scripts/ch07c_ab.py (the independent event-timed check of a 7c variant, for the GPU): its variant specs turn into
    k07c.variant keywords that compile, so a GPU call is not spent on a typo."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("ch07c_ab", ROOT / "scripts/ch07c_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    att = ab.build("desc_inc=1,tiles=128,split_tail=0", 128, False)
    assert att.config["split_tail"] == {64: False, 128: False}
    assert att.module().resources()["pingpong_d128"]["spill_instructions"] == 0
    with pytest.raises(TypeError):
        ab.build("no_such_knob=1", 64, False)
    assert callable(ab.chapter6().attention)          # --seed times chapter 6's solution beside step 7c


def test_exp2_polynomial_matches_exp2():
    """exp2_poly's arithmetic in float32 (numpy), against 2^x: relative error under 1e-4 on [-120, 0]."""
    import numpy as np
    x = np.linspace(-120, 0, 200001, dtype=np.float32)
    t = x + np.float32(12582912.0)
    f = x - (t - np.float32(12582912.0))
    p = ((np.float32(0.055171460) * f + np.float32(0.24261086)) * f + np.float32(0.69326097)) * f + np.float32(0.99992812)
    got = (p.view(np.int32) + (t.view(np.int32) << 23)).view(np.float32)
    rel = np.abs(got.astype(np.float64) / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() < 1e-4, rel.max()
    text = STEPS["c"][0].read_text()
    for c in ("0.055171460f", "0.24261086f", "0.69326097f", "0.99992812f", "12582912.f"):
        assert c in text, c


@pytest.mark.skipif("c" not in STEPS, reason="step c is not written yet")
def test_step_c_keeps_its_overlaps(sass):
    """ptxas kept the pipelining (a wait for all but the newest wgmma group: the S_j wait with P·V still
    running) and the ping-pong turns (named-barrier arrivals, 256 threads = two warpgroups)."""
    for name, instrs in sass["c"].items():
        assert any(i.startswith("WARPGROUP.DEPBAR.LE gsb0, 0x1") for i in instrs), name
        assert any("BAR.ARV" in i and "0x100" in i for i in instrs), name
        assert any(i.startswith("BAR.SYNC") and "0x100" in i for i in instrs), name


def test_the_ptx_wrappers_live_in_one_header():
    """Every chapter-7 kernel includes flashtutor/cuda/hopper.cuh; none defines a wrapper of its own."""
    untouched_exercise("07")
    header = ROOT / "flashtutor/cuda/hopper.cuh"
    wrappers = set(re.findall(r"__forceinline__ \w+ (\w+)\(", header.read_text()))
    assert {"mbar_wait", "tma_load_2d", "make_desc", "wgmma_fence", "fence_regs", "fast_exp2"} <= wrappers
    for path in [p for p, _, _ in STEPS.values()] + [SOLUTION, EXERCISE]:
        text = path.read_text()
        assert '#include "hopper.cuh"' in text, path
        assert not wrappers & set(re.findall(r"__forceinline__ \w+ (\w+)\(", text)), path


def test_step_c_passes_the_graders_source_scan():
    """`flashtutor grade 07 flashtutor/kernels/k07c_pingpong.py` times step 7c the grader's way: its launcher
    must pass the source scan (an identifier-like string naming a forbidden call — it refused
    'softmax_split' once — fails a grading before anything is timed)."""
    from flashtutor.grading import scan
    assert scan.scan_python(ROOT / (STEPS["c"][2].replace(".", "/") + ".py")) == []
