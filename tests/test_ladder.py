"""The chapter manifest is the one registry of the ladder, and kernels/ holds the steps alone.

* flashtutor/kernels/README.md is the table the manifest and the steps' headers give now (and stops being
  so when the manifest changes: negative controls);
* every step's files exist, its header states an idea and a limitation, every file of kernels/ is named
  by the manifest, the labels are the ones the committed results files use;
* imports point down: nothing under flashtutor/kernels/ imports flashtutor.grading or flashtutor.bench
  (read from the source, with a negative control, and seen at run time in a fresh process).

CPU only, a few seconds.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from flashtutor import chapters
from flashtutor.chapters import CHAPTERS, KERNEL_FILES, KERNELS_README, ROOT, STEPS, get_chapter
from flashtutor.problems import SHAPE_SETS

KERNELS = ROOT / "flashtutor" / "kernels"
# The drivers that moved to flashtutor/bench/: their old paths re-export the new modules until the
# notebooks are re-executed, and are the only files of kernels/ allowed to name flashtutor.bench.
UPWARD = ("flashtutor.grading", "flashtutor.bench")


# ---------------------------------------------------------------- the README table ---------------
def test_kernels_readme_is_the_manifests_table():
    assert KERNELS_README.read_text() == chapters.ladder_markdown(), \
        "flashtutor/kernels/README.md is stale: python -m flashtutor.chapters --write-readme"
    assert chapters.main(["--check"]) == 0


def test_every_step_is_a_row_of_the_readme():
    text = KERNELS_README.read_text()
    for ch in CHAPTERS.values():
        for s in ch.steps:
            row = next(line for line in text.splitlines() if line.startswith(f"| **{s.id}**"))
            assert str(s.path.relative_to(ROOT)) in row and str(s.kernel.relative_to(ROOT)) in row, row
            assert s.idea in row and s.limitation in row, row


@pytest.mark.parametrize("change", ["label", "new step", "source", "removed step"])
def test_the_readme_check_fails_when_the_manifest_changes(monkeypatch, change):
    """Negative controls: each change of the manifest makes the committed README stale."""
    steps = dict(STEPS)
    s = steps["03"][1]
    if change == "label":
        steps["03"] = (steps["03"][0], replace(s, label="b + cp.async (renamed)"), steps["03"][2])
    elif change == "new step":
        steps["07"] = steps["07"] + (chapters.Step("7d", "7d", "flashtutor.kernels.k07c_pingpong"),)
    elif change == "source":          # another header: another limitation
        steps["03"] = (steps["03"][0], replace(s, source="flashtutor/kernels/k03c_swizzle.cu"), steps["03"][2])
    else:
        steps["02"] = steps["02"][1:]
    monkeypatch.setattr(chapters, "STEPS", steps)
    assert chapters.ladder_markdown() != KERNELS_README.read_text()
    assert chapters.main(["--check"]) == 1


def test_a_header_is_read_not_typed(tmp_path):
    """The idea is the header's title without its 'Chapter N, step x:' prefix; the limitation the first sentence
    after 'Limitation:', from the first file that states one."""
    py = tmp_path / "k09_demo.py"
    py.write_text('"""Chapter 9, step a: tiles | in pairs. More detail.\n\nLimitation: ``one`` thing. Another."""\n')
    cu = tmp_path / "k09_demo.cu"
    cu.write_text("// Chapter 9 — a kernel.\n//\n// What changed since step z: the pairs.\n"
                  "// Limitation: not this one.\n#include <x.h>\n")
    h = chapters.read_header(py, cu)
    assert h.idea == "Tiles \\| in pairs." and h.limitation == "`one` thing." and h.changed == "the pairs."
    assert chapters.read_header(cu).idea == "A kernel." and chapters.read_header(cu).limitation == "Not this one."


# ---------------------------------------------------------------- the registry -------------------
def test_every_step_has_its_files_an_idea_and_a_limitation():
    ids = [s.id for ch in CHAPTERS.values() for s in ch.steps]
    assert len(ids) == len(set(ids))
    for key, ch in CHAPTERS.items():
        assert ch.steps, f"chapter {key} has no step in the manifest"
        for s in ch.steps:
            assert s.chapter == key and chapters.step(s.id) is s and ch.step(s.label) is s
            assert s.path.is_file() and s.kernel.is_file(), s
            assert len(s.idea) > 20 and len(s.limitation) > 20, (s.id, s.header)
        assert ch.reference in [s.module for s in ch.steps], f"chapter {key}'s reference is not one of its steps"
        for s in ch.steps:
            if s.module.endswith(".py"):         # a step that is a solution file only: the chapter's solution
                assert s.solution and s.path == ch.solution_path(), s


def test_every_file_of_kernels_is_named_by_the_manifest():
    steps = [s for ch_steps in STEPS.values() for s in ch_steps]          # a chapter being built has steps too
    named = {s.path for s in steps} | {s.kernel for s in steps} | \
        {ROOT / f for files in KERNEL_FILES.values() for f in files}
    for path in sorted(KERNELS.glob("*")):
        if path.suffix not in (".py", ".cu", ".cuh") or path.name == "__init__.py":
            continue
        assert path in named, f"{path.relative_to(ROOT)} is not a step (or a chapter's kernel file) of the manifest"


def test_the_benches_read_shape_sets_that_exist():
    for ch in CHAPTERS.values():
        if ch.bench:
            assert set(ch.bench.check_sets) | set(ch.bench.time_sets) <= set(SHAPE_SETS), ch.key
            assert ch.bench.name == f"bench{ch.key}" and ch.bench.module == f"flashtutor.bench.ch{ch.key}"
    assert [S for _, _, S, _ in get_chapter("05").bench.shapes] == [512, 1024, 2048, 4096, 8192, 16384]


def test_labels_are_the_ones_the_results_files_use():
    """The committed bench results name their steps by the manifest's labels, so they stay readable."""
    from flashtutor.bench import ch02, ch03
    known = {"02": set(ch02.STEPS), "03": set(ch03.WMMA_STEPS) | set(ch03.EARLIER)}
    for key, labels in known.items():
        files = sorted((ROOT / "results").glob(f"bench{key}-*.json"))
        assert files, key
        for f in files:
            steps = {r["step"] for r in json.loads(f.read_text())["rows"]}
            assert steps <= labels | {"SDPA"}, (f.name, steps - labels)


# ---------------------------------------------------------------- imports point down -------------
def upward_imports(path: Path, package: str = "flashtutor.kernels") -> list[str]:
    """The modules above the kernels (grading, bench) that a file imports or names for importlib."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            names = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        found += [n for n in names if n.startswith(UPWARD)]
    return found


def test_no_kernel_imports_the_grader_or_the_bench():
    for path in sorted(KERNELS.glob("*.py")):
        assert upward_imports(path) == [], f"{path.relative_to(ROOT)} imports upwards"


def test_the_import_check_sees_every_form(tmp_path):
    """Negative control: each way of importing upwards is caught."""
    for src in ("from ..grading import grade\n", "from .. import bench\n", "import flashtutor.grading.judge\n",
                "from flashtutor.bench.ch02 import STEPS\n", "importlib.import_module('flashtutor.grading')\n"):
        f = tmp_path / "k99_bad.py"
        f.write_text(src)
        assert upward_imports(f), src
    (tmp_path / "k99_good.py").write_text("from ..problems import Problem\nfrom . import solution_module\n")
    assert upward_imports(tmp_path / "k99_good.py") == []


def test_importing_every_kernel_loads_neither_grader_nor_bench():
    code = ("import importlib, sys\n"
            "from flashtutor.chapters import CHAPTERS, KERNEL_FILES\n"
            "mods = [s.module for ch in CHAPTERS.values() for s in ch.steps if not s.module.endswith('.py')]\n"
            "mods += ['flashtutor.kernels.k07_probes']\n"
            "for m in mods: importlib.import_module(m)\n"
            "print([n for n in sys.modules if n.startswith(('flashtutor.grading', 'flashtutor.bench'))])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout
