"""Exercises are generated from the solutions, stay in sync, and never overwrite a learner's work."""
import re

import pytest

from flashtutor import exercises
from flashtutor.chapters import CHAPTERS


@pytest.mark.parametrize("key", sorted(CHAPTERS))
def test_exercises_match_their_solutions(key):
    """Every generated file of the chapter is what its solution (or the test template) generates. A file the
    learner changed since it was generated is their work: not compared, said in a skip — except under
    CI=true, where an exercise that differs from its solution's stub fails (an author's stale exercise)."""
    ch = CHAPTERS[key]
    mine = [] if exercises.ci() else exercises.changed_files(key)
    ignored = {p.relative_to(exercises.ROOT).as_posix() for p in mine}
    bad = [f for f in exercises.stale([ch]) if f not in ignored]
    assert bad == [], f"out of date: {', '.join(bad)}: run `flashtutor exercises --write`"
    if mine:
        names = ", ".join(sorted(ignored))
        one = len(mine) == 1
        pytest.skip(f"{names} {'was' if one else 'were'} changed since {'it was' if one else 'they were'} generated "
                    "(your work): not compared")


def test_stub_replaces_marked_regions_only():
    src = "a\n    // BEGIN SOLUTION: the loop\n    secret();\n    // END SOLUTION\nb\n"
    assert exercises.stub(src) == "a\n    // TODO: the loop.\nb\n"
    py = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
    out = exercises.stub(py)
    assert "return 1" not in out and "raise NotImplementedError" in out
    compile(out, "f.py", "exec")
    jit = exercises.stub("def k():\n    x = 1\n    # BEGIN SOLUTION [jit]: the loop\n    x = 2\n    # END SOLUTION\n")
    assert jit == "def k():\n    x = 1\n    # TODO: the loop.\n    pass\n"


def test_a_long_hint_wraps_at_100_columns_under_its_first_word():
    hint = " ".join(f"step{i} with (a, b)" for i in range(40))          # 700 characters on one marker line
    out = exercises.stub(f"        // BEGIN SOLUTION: {hint}\n        x();\n        // END SOLUTION\n")
    lines = out.splitlines()
    assert len(lines) > 5 and all(len(line) <= exercises.TODO_WIDTH for line in lines)
    assert lines[0].startswith("        // TODO: step0 ") and all(re.match(r"        //       \S", l) for l in lines[1:])
    assert " ".join(l.split("//", 1)[1].strip() for l in lines) == "TODO: " + hint + "."   # nothing lost or split
    assert exercises.todos("int a;\n" + out) == [(2, "TODO: " + hint + ".")]               # read back as one hint


@pytest.mark.parametrize("src", ["// BEGIN SOLUTION\nx\n", "x\n// END SOLUTION\n",
                                 "// BEGIN SOLUTION\n// BEGIN SOLUTION\n// END SOLUTION\n"])
def test_unbalanced_markers_are_errors(src):
    with pytest.raises(ValueError):
        exercises.stub(src)


def test_every_solution_has_a_marked_region():
    for ch in CHAPTERS.values():
        sols = [s.read_text() for s, _ in exercises.pairs(ch)]
        assert any("BEGIN SOLUTION" in s for s in sols), ch.slug


@pytest.fixture
def private_course(tmp_path, monkeypatch):
    """A private copy of chapter 1's solution tree (the real exercise files stay untouched), with the
    generator pointed at it; returns the chapter, re-rooted there."""
    from dataclasses import replace
    import flashtutor.chapters as chapters
    ch = CHAPTERS["01"]
    (tmp_path / "solutions" / ch.slug).mkdir(parents=True)
    (tmp_path / "chapters" / ch.slug).mkdir(parents=True)
    for name in ch.files:
        (tmp_path / "solutions" / ch.slug / name).write_text((ch.solution_dir / name).read_text())
    monkeypatch.setattr(exercises, "ROOT", tmp_path)
    monkeypatch.setattr(exercises, "MANIFEST", tmp_path / "chapters" / ".generated.json")
    monkeypatch.setattr(chapters, "ROOT", tmp_path)
    return replace(ch)


def test_write_keeps_a_learners_changes(tmp_path, private_course):
    ch = fake = private_course
    said = exercises.write([fake])
    assert len([s for s in said if s.startswith("wrote")]) == len(ch.files) + 1     # and the chapter's test file
    assert exercises.grading_tests(fake).read_text() == exercises.generated(fake)[exercises.grading_tests(fake)]
    mine = tmp_path / "chapters" / ch.slug / "attention.cu"
    mine.write_text(mine.read_text() + "\n// my work in progress\n")
    said = exercises.write([fake])
    backups = list(mine.parent.glob("attention.cu.mine-*"))
    assert len(backups) == 1 and "my work in progress" in backups[0].read_text()
    assert any("kept your version" in s for s in said)


def test_changed_files_are_the_learners(tmp_path, monkeypatch, private_course):
    """What the generator wrote (its hash in the manifest) is untouched; an edit, a deletion, or a file it never
    recorded that differs from what it writes now is the learner's."""
    ch = private_course
    monkeypatch.setattr(exercises, "CHAPTERS", {"01": ch})
    monkeypatch.setattr(exercises, "get_chapter", lambda key: ch)
    exercises.write()
    folder = tmp_path / "chapters" / ch.slug
    assert exercises.changed_files("01") == []
    (folder / "attention.cu").write_text((folder / "attention.cu").read_text() + "// mine\n")
    assert exercises.changed_files("01") == [folder / "attention.cu"]
    assert exercises.changed_files("01", names=("attention.py",)) == []
    (folder / "attention.py").unlink()
    assert set(exercises.changed_files("01")) == {folder / "attention.cu", folder / "attention.py"}
    # not in the manifest: untouched only while it is what the generator writes now
    exercises.MANIFEST.write_text("{}")
    assert set(exercises.changed_files("01")) == {folder / "attention.cu", folder / "attention.py"}
    test_file = exercises.grading_tests(ch)
    test_file.write_text(test_file.read_text() + "\n")
    assert test_file in exercises.changed_files("01")


def test_ci_is_strict(monkeypatch):
    for value, strict in (("true", True), ("1", True), ("false", False), ("", False)):
        monkeypatch.setenv("CI", value)
        assert exercises.ci() is strict
    monkeypatch.delenv("CI")
    assert exercises.ci() is False
