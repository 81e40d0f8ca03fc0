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


# ---------------------------------------------------------------- the GPU tier's shared gradings ----
@pytest.fixture(scope="session")
def gradings(tmp_path_factory):
    """Every grading of the GPU tier, started together the first time a test asks (tests/gpu_gradings.py)."""
    import faulthandler
    import os
    from gpu_gradings import Gradings
    faulthandler.dump_traceback_later(480, repeat=True)          # if anything hangs, say where
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
