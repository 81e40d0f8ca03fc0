"""Exercises are generated from the solutions (nbgrader's model).

In a solution file, the lines between ``BEGIN SOLUTION`` and ``END SOLUTION`` markers (in a
``//`` or ``#`` comment) are replaced by a TODO stub with the same indentation. The stub keeps
the file valid: a CUDA kernel body becomes a comment (it compiles, writes nothing, and so fails
the grader's NaN check); a Python block becomes ``raise NotImplementedError``, or ``pass`` when the
marker says ``BEGIN SOLUTION [jit]`` — inside a ``@triton.jit`` function, where a raise does not
compile on a GPU, the kernel then runs and leaves its output unwritten.

Each chapter folder also gets a small pytest file, ``test_chapterNN.py``, rendered from the one
template below (:data:`TEST_TEMPLATE`): ``pytest chapters/NN_slug`` grades the learner's files, one
test per criterion of the grader's verdict (:mod:`flashtutor.grading.pytest_grading`). It is generated
rather than committed by hand so that every chapter has the same file, kept current by the same
``flashtutor exercises --write`` and checked by the same ``--check``; and, like the exercises, it is
recorded in the manifest, so an edit a learner makes to it is kept as their exercises' are. Its name carries
the chapter's number because pytest imports test files of folders without ``__init__.py`` by their
base name: one ``test_attention.py`` per chapter would collide in ``pytest chapters``.

Writing never loses a learner's work: a file is overwritten only if it is exactly what the
generator wrote last time (its hash is in ``chapters/.generated.json``); otherwise it is first
copied to ``<name>.mine-<timestamp>``. The same record tells which files a learner has changed
(:func:`changed_files`): the course's own tests compare an exercise with its solution only while it
is untouched, except under ``CI=true`` (:func:`ci`), where every exercise is held to its solution.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import re
import shutil
import textwrap
from pathlib import Path

from .chapters import CHAPTERS, ROOT, Chapter, get_chapter

_BEGIN = re.compile(r"^(\s*)(//|#)\s*BEGIN SOLUTION\b(.*)$")
_END = re.compile(r"^\s*(//|#)\s*END SOLUTION\b")
MANIFEST = ROOT / "chapters" / ".generated.json"


TODO_WIDTH = 100     # a TODO hint wraps here: the solutions' one-line hints run to 470 characters


def _todo(indent: str, comment: str, hint: str) -> list[str]:
    """The TODO comment for ``hint``, wrapped at :data:`TODO_WIDTH` columns, continuation lines aligned
    under its first word (a learner's editor and the book's listings show it without scrolling)."""
    first, rest = f"{indent}{comment} TODO: ", f"{indent}{comment}       "
    lines = textwrap.wrap(hint + ".", width=TODO_WIDTH, initial_indent=first, subsequent_indent=rest,
                          break_long_words=False, break_on_hyphens=False)
    return [line + "\n" for line in lines]


def todos(text: str) -> list[tuple[int, str]]:
    """The TODO hints of an exercise's text: (line number, the hint as one line), a wrapped hint's
    continuation lines (:func:`_todo`) joined back to it."""
    out: list[tuple[int, str]] = []
    lines = text.splitlines()
    for n, line in enumerate(lines):
        m = re.match(r"^(\s*)(//|#) TODO: (.*)$", line)
        if not m:
            continue
        hint, cont = [m.group(3)], f"{m.group(1)}{m.group(2)}       "
        for nxt in lines[n + 1:]:
            if not nxt.startswith(cont) or not nxt[len(cont):].strip():
                break
            hint.append(nxt[len(cont):].strip())
        out.append((n + 1, "TODO: " + " ".join(hint)))
    return out


def stub(text: str, filename: str = "") -> str:
    """Return the exercise version of a solution's text."""
    out, inside, indent, comment = [], False, "", "#"
    for n, line in enumerate(text.splitlines(keepends=True), 1):
        m = _BEGIN.match(line)
        if m:
            if inside:
                raise ValueError(f"{filename}:{n}: nested BEGIN SOLUTION")
            inside, indent, comment = True, m.group(1), m.group(2)
            hint = m.group(3).strip(" :-—")
            jit = hint.startswith("[jit]")
            hint = hint.removeprefix("[jit]").strip(" :-—")
            out.extend(_todo(indent, comment, hint or "your code here"))
            if comment == "#":
                out.append(f"{indent}pass\n" if jit else
                           f'{indent}raise NotImplementedError("{Path(filename).name}: TODO")\n')
            continue
        if _END.match(line):
            if not inside:
                raise ValueError(f"{filename}:{n}: END SOLUTION without BEGIN")
            inside = False
            continue
        if not inside:
            out.append(line)
    if inside:
        raise ValueError(f"{filename}: BEGIN SOLUTION without END")
    return "".join(out)


TEST_TEMPLATE = '''"""Chapter {key}, {title}: grade your exercise with pytest, one test per criterion.

    pytest chapters/{slug}                          # grades {entry} beside this file
    pytest chapters/{slug} --submission FILE        # grades another file with the same interface
    pytest chapters/{slug} --junitxml=report.xml    # also writes JUnit XML: one testcase per criterion
    pytest chapters/{slug} --sanitize               # also runs it under compute-sanitizer (GPU)

The grader runs once, as `flashtutor grade {key}` does (your code in a worker process of its own), and
each test is one criterion of its verdict: correctness-<set> for each shape set it checked (the
large-logit cases on their own), source (nothing the chapter forbids), sass where the chapter has a
rule on the compiled code, speed, and sanitizer with --sanitize. A failure's message is the grader's
explanation; a criterion this machine cannot grade (speed without a CUDA GPU) is skipped, with the
reason. FLASHTUTOR_SUBMISSION=FILE works like --submission. This file is generated by
`flashtutor exercises --write` (flashtutor/exercises.py); the hooks are in chapters/conftest.py and
flashtutor/grading/pytest_grading.py.
"""

CHAPTER = "{key}"


def test_criterion(criterion, graded):
    graded.check(criterion)
'''


def grading_tests(ch: Chapter) -> Path:
    """The chapter's generated pytest file (see :data:`TEST_TEMPLATE`)."""
    return ch.exercise_dir / f"test_chapter{ch.key}.py"


def pairs(ch: Chapter):
    """(solution file, exercise file) for each generated file of a chapter."""
    for name in ch.files:
        yield ch.solution_dir / name, ch.exercise_dir / name


def generated(ch: Chapter) -> dict[Path, str]:
    """Every file the generator writes for a chapter, with the text it writes: the exercise files
    (stubs of the solution's) and the chapter's pytest file."""
    out = {ex: stub(sol.read_text(encoding="utf-8"), str(sol)) for sol, ex in pairs(ch)}
    out[grading_tests(ch)] = TEST_TEMPLATE.format(key=ch.key, slug=ch.slug, title=ch.title, entry=ch.entry)
    return out


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _manifest() -> dict:
    return json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def stale(chapters=None) -> list[str]:
    """Generated files that differ from what the generator writes now (empty list: all in sync)."""
    bad = []
    for ch in chapters or CHAPTERS.values():
        for ex, want in generated(ch).items():
            if not ex.exists() or ex.read_text(encoding="utf-8") != want:
                bad.append(_rel(ex))
    return bad


def changed_files(key, names=None) -> list[Path]:
    """The chapter's generated files that a learner has changed: those whose sha256 is not the one the
    generator recorded when it wrote them (the manifest), and those it never recorded that differ from
    what it writes now. A deleted file counts as changed. ``names``: only these file names (e.g. the
    chapter's exercise files, ``ch.files``); default, every generated file of the chapter."""
    ch = get_chapter(key)
    manifest = _manifest()
    out = []
    for ex, want in generated(ch).items():
        if names is not None and ex.name not in names:
            continue
        if not ex.exists():
            out.append(ex)
            continue
        have = ex.read_bytes()
        recorded = manifest.get(_rel(ex))
        if recorded is not None:
            if hashlib.sha256(have).hexdigest() != recorded:
                out.append(ex)
        elif have != want.encode():
            out.append(ex)
    return out


def ci() -> bool:
    """Whether this is a CI run (``CI=true``, as CI services set it): there, an exercise is compared with its
    solution even when it differs from what the generator recorded, so an author's stale exercise fails."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def write(chapters=None) -> list[str]:
    """Regenerate exercise files; back up any that a learner changed. Returns lines to print."""
    manifest = _manifest()
    said = []
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for ch in chapters or CHAPTERS.values():
        for ex, want in generated(ch).items():
            rel = _rel(ex)
            if ex.exists():
                have = ex.read_text(encoding="utf-8")
                if have == want:
                    manifest[rel] = _sha(want)
                    continue
                if manifest.get(rel) != _sha(have):
                    backup = ex.with_name(f"{ex.name}.mine-{stamp}")
                    shutil.copy2(ex, backup)
                    said.append(f"kept your version of {rel} as {backup.name}")
            ex.parent.mkdir(parents=True, exist_ok=True)
            ex.write_text(want, encoding="utf-8")
            manifest[rel] = _sha(want)
            said.append(f"wrote {rel}")
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return said
