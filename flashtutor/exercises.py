"""Exercises are generated from the solutions (nbgrader's model).

In a solution file, the lines between ``BEGIN SOLUTION`` and ``END SOLUTION`` markers (in a
``//`` or ``#`` comment) are replaced by a TODO stub with the same indentation. The stub keeps
the file valid: a CUDA kernel body becomes a comment (it compiles, writes nothing, and so fails
the grader's NaN check); a Python block becomes ``raise NotImplementedError``, or ``pass`` when the
marker says ``BEGIN SOLUTION [jit]`` — inside a ``@triton.jit`` function, where a raise does not
compile on a GPU, the kernel then runs and leaves its output unwritten.

Writing never loses a learner's work: a file is overwritten only if it is exactly what the
generator wrote last time (its hash is in ``chapters/.generated.json``); otherwise it is first
copied to ``<name>.mine-<timestamp>``.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import re
import shutil
from pathlib import Path

from .chapters import CHAPTERS, ROOT, Chapter

_BEGIN = re.compile(r"^(\s*)(//|#)\s*BEGIN SOLUTION\b(.*)$")
_END = re.compile(r"^\s*(//|#)\s*END SOLUTION\b")
MANIFEST = ROOT / "chapters" / ".generated.json"


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
            out.append(f"{indent}{comment} TODO: {hint or 'your code here'}.\n")
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


def pairs(ch: Chapter):
    """(solution file, exercise file) for each generated file of a chapter."""
    for name in ch.files:
        yield ch.solution_dir / name, ch.exercise_dir / name


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def stale(chapters=None) -> list[str]:
    """Exercise files that differ from what their solution generates (empty list: all in sync)."""
    bad = []
    for ch in chapters or CHAPTERS.values():
        for sol, ex in pairs(ch):
            want = stub(sol.read_text(), str(sol))
            if not ex.exists() or ex.read_text() != want:
                bad.append(str(ex.relative_to(ROOT)))
    return bad


def write(chapters=None) -> list[str]:
    """Regenerate exercise files; back up any that a learner changed. Returns lines to print."""
    manifest = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    said = []
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for ch in chapters or CHAPTERS.values():
        for sol, ex in pairs(ch):
            want = stub(sol.read_text(), str(sol))
            rel = str(ex.relative_to(ROOT))
            if ex.exists():
                have = ex.read_text()
                if have == want:
                    manifest[rel] = _sha(want)
                    continue
                if manifest.get(rel) != _sha(have):
                    backup = ex.with_name(f"{ex.name}.mine-{stamp}")
                    shutil.copy2(ex, backup)
                    said.append(f"kept your version of {rel} as {backup.name}")
            ex.parent.mkdir(parents=True, exist_ok=True)
            ex.write_text(want)
            manifest[rel] = _sha(want)
            said.append(f"wrote {rel}")
    MANIFEST.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return said
