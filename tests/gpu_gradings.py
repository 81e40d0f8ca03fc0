"""The GPU tier's gradings, all started at once and shared by the tests that read them.

Every solution (timed), every stub and reference (untimed) and the whole adversarial corpus are graded
by a pool of threads, each grading in a judge process of its own (judges in threads of one process hung
on the H100, 2026-11-23). They share the GPU the way the grader lets them: correctness calls take the
GPU lock shared, each timed shape takes it alone, so the host's cores compile, import and check side by
side while every timing runs alone. Tests that use the GPU in pytest's own process hold the lock shared
for their duration (see conftest.py), so they never run beside a timed section either.

A grading that raised is kept as its exception and re-raised by the test that reads it.
"""
from __future__ import annotations

import json
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from flashtutor import exercises, grade
from flashtutor.chapters import CHAPTERS, ROOT

# the longest gradings first (their timed shapes queue for the GPU): CUTLASS builds, the large sets
_LONGEST = ("05", "07", "04", "03", "06")
TIMED = sorted((k for k, c in CHAPTERS.items() if c.time_sets),
               key=lambda k: _LONGEST.index(k) if k in _LONGEST else len(_LONGEST))
STUB_CHAPTERS = list(CHAPTERS)


def learners_changes(key: str) -> list[str]:
    """The chapter's exercise files a learner changed since they were generated: its stub is then theirs, not
    graded here (none under CI=true, where every stub is graded and must fail)."""
    if exercises.ci():
        return []
    return [p.relative_to(ROOT).as_posix() for p in exercises.changed_files(key, names=CHAPTERS[key].files)]


STUBS = [k for k in STUB_CHAPTERS if not learners_changes(k)]
REFERENCES = {k: str(ROOT / f) for k, f in {"01": "flashtutor/kernels/k01_naive_three_pass.py",
                                             "04": "flashtutor/kernels/k04_triton_fa2_hopper.py"}.items()}
LANES = 10         # gradings at once: a judge and a worker each, on the H100 host's 16 cores. With 8, the corpus
                   # waited 75 s for lanes held by the solutions' checks queued behind timed shapes (H100, 2026-11-24)


def corpus_kwargs(case, tmp: Path, device: str) -> dict:
    """How a corpus case is graded: the small adversarial set on a GPU, one seed, short timeouts."""
    from adversarial.cases import chapter_for
    gpu = device == "cuda"
    return dict(chapter=chapter_for(case), path=case.path(tmp), device=device, progress=False, timing=case.timing,
                sets=("adversarial",) if gpu else None, seeds=1,
                check_timeout=6 if case.cause == "timeout" else 20,   # a hang is proved by two timeouts: short ones
                time_sets=("adversarial",) if case.timing else None, sanitize=case.sanitize, rounds=3)


class Gradings:
    def __init__(self, tmp: Path):
        from adversarial.cases import CASES
        self.pool = ThreadPoolExecutor(LANES)
        self.jobs: dict[tuple, Future] = {}
        self.t0 = time.time()
        self.timeline: list[dict] = []      # when each grading started and ended, and its phases
        # the longest first: timed solutions (their timed shapes queue for the GPU), the references, the corpus
        for k in TIMED:
            self._submit(("solution", k), dict(chapter=k, solution=True, reference=k == "01"))
        for k, f in REFERENCES.items():
            self._submit(("reference", k), dict(chapter=k, path=f, timing=False))
        for case in CASES:
            self._submit(("case", case.name), corpus_kwargs(case, tmp, "cuda"))
        from adversarial.ch08_mutations import MUTATIONS, materialize
        for name in sorted(MUTATIONS):      # chapter 8's backward-pass bugs, on its odd set (test_grade_ch08.py)
            self._submit(("ch08 bug", name), dict(chapter="08", path=materialize(name, tmp / "ch08" / name),
                                                  sets=("odd",), timing=False))
        for k in STUBS:
            self._submit(("stub", k), dict(chapter=k, timing=False, sets=("seed", "odd")))

    def _submit(self, key: tuple, kw: dict) -> None:
        def one():
            t = time.time()
            try:
                r = grade(**{"progress": False, **kw}, separate_judge=True)
            except Exception as e:  # noqa: BLE001 — re-raised by the test that reads it
                r = e
            self.timeline.append({"grading": "/".join(key), "start_s": round(t - self.t0, 1),
                                  "end_s": round(time.time() - self.t0, 1),
                                  "phases": getattr(r, "phases", {}), "memory": getattr(r, "memory", {}),
                                  "verdict": str(getattr(r, "verdict", r))[:80]})
            return r, round(time.time() - t, 1)
        self.jobs[key] = self.pool.submit(one)

    def report(self, *key):
        """The report of one grading (waits for it); raises what the grading raised."""
        r, _ = self.jobs[key].result()
        if isinstance(r, Exception):
            raise r
        return r

    def seconds(self, *key) -> float:
        return self.jobs[key].result()[1]

    def wait_all(self) -> None:
        for f in self.jobs.values():
            f.result()

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        out = os.environ.get("FLASHTUTOR_RESULTS_DIR")
        if out and self.timeline:       # the tier's critical path, for making it shorter
            Path(out).mkdir(parents=True, exist_ok=True)
            (Path(out) / "gpu-tier-timeline.json").write_text(json.dumps(
                sorted(self.timeline, key=lambda x: x["start_s"]), indent=1))
