"""Building the book for the tests: `jupyter-book build` with warnings as errors, into a temporary folder.

The strict build takes about a minute, so a test session builds the repository's book once and every test that
reads it shares that build (`built_book`): tests/test_book.py checks that it built cleanly, tests/test_book_html.py
reads its HTML. Under pytest-xdist the workers of one session share it too: the first to ask builds it, under a
file lock, and the others read the finished folder and the build's log.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def jupyter_book() -> str:
    """The jupyter-book command of this interpreter's environment (the package has no __main__)."""
    beside = Path(sys.executable).parent / "jupyter-book"
    if beside.exists():
        return str(beside)
    found = shutil.which("jupyter-book")
    if found is None:
        pytest.fail("jupyter-book is not installed: pip install -r requirements.txt")
    return found


def build(source: Path, out: Path) -> subprocess.CompletedProcess:
    """`jupyter-book build` of `source` into `out`/_build, strict (warnings as errors, but keep going)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [jupyter_book(), "build", "--warningiserror", "--keep-going", "--path-output", str(out), str(source)],
        capture_output=True, text=True, env=env, timeout=600)


@dataclasses.dataclass(frozen=True)
class Built:
    out: Path            # the --path-output folder: the book is in out/_build/html
    returncode: int
    log: str             # stdout and stderr of the build

    @property
    def html(self) -> Path:
        return self.out / "_build" / "html"


def built_once(tmp_path_factory) -> Built:
    """The repository's book, built once per test session (once for all xdist workers of a session)."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent                                   # the session's folder, shared by its workers
    out, record = base / "book-build", base / "book-build.json"
    with open(base / "book-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            result = build(ROOT, out)
            record.write_text(json.dumps({"returncode": result.returncode, "log": result.stdout + result.stderr}))
    done = json.loads(record.read_text())
    return Built(out, done["returncode"], done["log"])
