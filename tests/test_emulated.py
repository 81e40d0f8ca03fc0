"""Grading the CUDA chapters (1, 2, 3, 5) on a CPU, their kernels emulated (flashtutor.emulate): each solution
passes with execution "emulated", each untouched exercise fails as "unwritten", one wrong kernel per chapter
is rejected with its cause; without g++ (or for what the emulation cannot build) the verdict stays "not run".
The g++ builds are cached by content under $FLASHTUTOR_CACHE/emu, so a second run is faster."""
from __future__ import annotations

import pytest

from flashtutor import emulate, grade
from flashtutor.chapters import get_chapter
from flashtutor.problems import shape_set
from conftest import untouched_exercise

needs_gxx = pytest.mark.skipif(not emulate.available(), reason=f"no CPU emulation here: {emulate.unavailable_reason()}")
CHAPTERS = ("01", "02", "03", "05")

# chapter -> (file, old, new, the cause the report must name): the solution with one realistic bug.
MUTANTS = {
    "01": ("attention.py", "D ** -0.5", "1.0 / D", "scale"),                       # scale 1/D, not 1/sqrt(D)
    "02": ("attention.cu", "if (key >= S || (causal && key > row))", "if (causal && key > row)",
           "wrong"),                                                                # keys past S not masked
    "03": ("attention.cu", "for (int e = 0; e < NE; ++e) a[e] = alpha_w[row_of[e]];",
           "for (int e = 0; e < NE; ++e) a[e] = alpha_w[lane / 4 + 8 * (e / 2 % 2)];",
           "wrong"),                                                                # assumes sm_80's fragment layout
    "05": ("softmax.cu", "const int n = causal ? i + 1 : S;", "const int n = S;", "causal"),   # ignores causal
}


def _copy(ch, folder, edit=None):
    """The chapter's solution written into ``folder``, with ``edit`` = (file, old, new) applied once."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ch.files:
        text = (ch.solution_dir / name).read_text()
        if edit and edit[0] == name:
            assert text.count(edit[1]) == 1, f"the mutation no longer applies to {name}: {edit[1]!r}"
            text = text.replace(edit[1], edit[2])
        (folder / name).write_text(text)
    return folder / ch.entry


def _grade(key, path, **kw):
    return grade(key, path, device="cpu", progress=False, seeds=1, **kw)


@needs_gxx
@pytest.mark.parametrize("key", CHAPTERS)
def test_solution_passes_emulated(key):
    ch = get_chapter(key)
    r = _grade(key, ch.solution_path())
    assert r.verdict == "pass", (r.summary, r.failures[:3])
    assert r.execution == "emulated" and not r.compile_only and not r.timings
    assert {c.problem.removesuffix(" causal") for c in r.checks if "logits" not in c.problem} \
        == {p.name for p in shape_set("emulated")}
    assert any(m.startswith("execution: emulated") for m in r.method)
    assert any("GEMMs ran as a CPU reference" in w for w in r.warnings) == (key == "05")


@needs_gxx
@pytest.mark.parametrize("key", CHAPTERS)
def test_exercise_stub_is_unwritten(key):
    untouched_exercise(key)
    r = _grade(key, get_chapter(key).exercise_path())
    assert r.verdict == "fail" and r.causes == {"unwritten"}, (r.causes, r.failures[:2])
    assert r.execution == "emulated"


@needs_gxx
@pytest.mark.parametrize("key", CHAPTERS)
def test_wrong_kernel_is_rejected(key, tmp_path):
    *edit, cause = MUTANTS[key]
    r = _grade(key, _copy(get_chapter(key), tmp_path / key, edit))
    assert r.verdict == "fail" and cause in r.causes, (r.causes, r.failures[:2])
    assert r.execution == "emulated"


@needs_gxx
def test_a_hanging_kernel_ends_by_the_check_timeout(tmp_path):
    """Threads past the last row spin forever: the worker is killed at the timeout, twice, then the rest is skipped."""
    edit = ("attention.cu", "if (r >= rows) return;", "while (r >= rows) { }")
    r = _grade("01", _copy(get_chapter("01"), tmp_path / "hang", edit), check_timeout=2)
    causes = [str(c.cause) for c in r.checks]
    assert causes[:2] == ["timeout", "timeout"] and set(causes[2:]) == {"not_run"}, causes
    assert r.verdict == "fail" and r.seconds < 60


@needs_gxx
def test_what_gxx_cannot_build_is_not_run(tmp_path):
    """Inline PTX compiles for the GPU but not for the CPU: not run here (never a pass, never a fail)."""
    edit = ("attention.cu", "if (r >= rows) return;", 'if (r >= rows) return;\n    asm volatile("membar.gl;");')
    r = _grade("01", _copy(get_chapter("01"), tmp_path / "ptx", edit))
    assert r.verdict == "not run" and r.compile_only and r.execution == "compiled only" and not r.checks
    assert any("cannot build attention.cu with g++" in w for w in r.warnings), r.warnings


def test_without_gxx_cuda_chapters_are_compiled_only(monkeypatch):
    monkeypatch.setattr(emulate, "available", lambda: False)
    monkeypatch.setattr(emulate, "unavailable_reason", lambda: "g++ 12 or newer with _Float16 is needed")
    r = _grade("01", get_chapter("01").solution_path())
    assert r.verdict == "not run" and r.compile_only and r.execution == "compiled only" and not r.checks
    assert r.exit_code == 3 and r.arch == "sm_90a"
    assert any("g++ 12 or newer" in w for w in r.warnings), r.warnings


def test_sm90_sources_are_not_emulated():
    assert "sm_90 hardware" in emulate.unsupported([get_chapter("07").solution_dir / "attention.cu"])
    for key in CHAPTERS:
        ch = get_chapter(key)
        assert emulate.unsupported(sorted(ch.solution_dir.glob("*.cu"))) is None, key


PROBE = r"""
extern "C" __global__ void warp_sums(int* out) {          // a 3-D block: threads numbered x + y·Dx + z·Dx·Dy
    const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int v = t;
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    if (t % 32 == 0) out[(blockIdx.x + gridDim.x * blockIdx.y) * 4 + t / 32] = v;
}
extern "C" __global__ void early_exit(int* out, int n) {  // returned threads do not hold up a barrier
    __shared__ int seen;
    if (threadIdx.x == 0) seen = 0;
    __syncthreads();
    if (threadIdx.x >= n) return;
    atomicAdd(&seen, 1);
    __syncthreads();
    if (threadIdx.x == 0) out[0] = seen;
}
extern "C" __global__ void deadlock(int* out) {            // half a warp at __syncwarp, half at __syncthreads
    if (threadIdx.x < 16) __syncwarp(); else __syncthreads();
    out[threadIdx.x] = 1;
}
"""


@needs_gxx
def test_emulator_threads_barriers_deadlock_and_trace(tmp_path):
    import torch

    from flashtutor.grading.worker import Tracer
    cu = tmp_path / "probe.cu"
    cu.write_text(PROBE)
    mod = emulate.EmuModule(cu, strict=True)
    out = torch.zeros(6 * 4, dtype=torch.int32)
    tracer = Tracer(cuda=False, emulated=True)          # the grading worker's: each launch shows as a kernel
    tracer.start("probe")
    mod.warp_sums(grid=(2, 3), block=(32, 2, 2), args=(out,))
    assert [(k.name, k.count) for k in tracer.stop().kernels] == [("warp_sums", 1)]
    assert out.tolist() == [32 * 32 * w + 496 for w in range(4)] * 6
    one = torch.zeros(1, dtype=torch.int32)
    mod.early_exit(grid=(1,), block=(64,), args=(one, 40))
    assert one.item() == 40
    with pytest.raises(RuntimeError, match="deadlock in block"):
        mod.deadlock(grid=(1,), block=(32,), args=(torch.zeros(32, dtype=torch.int32),))
    with pytest.raises(ValueError, match="at most 1024"):
        mod.deadlock(grid=(1,), block=(64, 32), args=(torch.zeros(32, dtype=torch.int32),))
