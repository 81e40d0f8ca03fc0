import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        # The tests that only read the shared gradings go last, the contention test (which must run alone)
        # at the very end: the tests that compute in pytest's own process then run while the pool grades.
        def order(item):
            if "gradings" not in getattr(item, "fixturenames", ()):
                return 0
            return 2 if "another_process" in item.name else 1
        items.sort(key=order)
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (the GPU tier: pytest -m gpu on an H100/H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
    items.sort(key=_cpu_tier_order)


# The CPU tier's longest files, longest first. `pytest -n 2 --dist loadfile` hands whole files to the two
# workers in collection order (pyproject's --no-loadscope-reorder keeps xdist from sorting them by test
# count), each worker taking the next file as it finishes one: with the long files first, the short ones
# fill in at the end and the workers finish together, instead of one long file running alone at 97-100 %.
# Seconds measured on 2 cores (2026-11-27, /work/notes/cpu-tier.md), from fresh caches / warm. test_ch05.py
# goes first: its nvcc builds (~70 s, once per machine) are done before chapter 5's notebook asks for them.
LONG_FILES = (
    "test_ch05.py",             # 30 / 4: the seed's CUTLASS GEMM compiled for sm_90a, with and without asserts
    "test_book.py",             # 130 / 115: the book build and every notebook under nbval
    "test_ch06.py",             # 110 / 57: NVRTC builds of the table's configurations, the Triton interpreter
    "test_adversarial.py",      # 60 / 55
    "test_pytest_grading.py",   # 40 / 34
    "test_grade_cpu.py",        # 35 / 34
    "test_emulated.py",         # 35 / 31
    "test_ch04.py",             # 32 / 32
    "test_grade_ch08.py",       # 37: seven gradings of chapter 8 through Triton's interpreter
    "test_try_it.py",           # 22: the try-it and compile-error helpers, each a real `flashtutor grade`
    "test_ch07.py",             # 30 / 8
    "test_bench.py",            # 22 / 20
)


def _cpu_tier_order(item) -> int:
    """Long files first, in LONG_FILES' order; every other file after them, in collection order."""
    name = Path(str(item.fspath)).name
    return LONG_FILES.index(name) if name in LONG_FILES else len(LONG_FILES)


# ---------------------------------------------------------------- the GPU tier's shared gradings ----
@pytest.fixture(scope="session")
def gradings(tmp_path_factory):
    """Every grading of the GPU tier, started together the first time a test asks (tests/gpu_gradings.py)."""
    import faulthandler
    import os
    from gpu_gradings import Gradings
    out = os.environ.get("FLASHTUTOR_RESULTS_DIR")
    # if anything hangs, say where: every thread's stack at 420 s, and on SIGUSR1 (scripts/gpu_tier.sh sends it
    # before its time limit), into the results (pytest captures stderr here, and a cut run prints nothing)
    dump = open(os.path.join(out, "hang-dump.txt"), "w") if out else sys.stderr
    faulthandler.dump_traceback_later(420, repeat=True, file=dump)
    import signal
    faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    os.environ.setdefault("FLASHTUTOR_DEBUG_DUMP_S", "400")
    g = Gradings(tmp_path_factory.mktemp("gradings"))
    yield g
    g.shutdown()
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session", autouse=True)
def _gradings_start_at_once(request):
    """On a GPU, the shared gradings start with the session when any selected test reads them."""
    if _has_gpu() and any("gradings" in getattr(i, "fixturenames", ()) for i in request.session.items):
        request.getfixturevalue("gradings")
    yield


def _gpu_lock(mode: str):
    from flashtutor.grading.timing import GpuLock
    return getattr(GpuLock(), mode)()


@pytest.fixture
def gpu_shared():
    """A test that computes on the GPU in pytest's own process: never beside a grading's timed section.
    (Not for tests that call grade() here or wait for a grading: the grader takes the lock itself.)"""
    with _gpu_lock("shared"):
        yield


@pytest.fixture
def gpu_alone():
    """A test that times on the GPU in pytest's own process: alone, as the grader's timed sections are."""
    with _gpu_lock("exclusive"):
        yield


# ---------------------------------------------------------------- a learner's edits ----------------
def untouched_exercise(key: str) -> None:
    """For a test that reads a chapter's exercise files as the generator wrote them: skip it, naming the
    files, when a learner has changed them (their work must not turn the course's tests red) — except under
    CI=true, where an author's stale exercise must still fail."""
    from flashtutor import exercises
    from flashtutor.chapters import get_chapter
    changed = exercises.changed_files(key, names=get_chapter(key).files)
    if changed and not exercises.ci():
        pytest.skip(f"{', '.join(str(p.relative_to(ROOT)) for p in changed)} changed since it was generated (your work): "
                    "not checked against the solution (CI=true checks it anyway)")
