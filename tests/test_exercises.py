"""Exercises are generated from the solutions, stay in sync, and never overwrite a learner's work."""
import pytest

from flashtutor import exercises
from flashtutor.chapters import CHAPTERS


def test_exercises_match_their_solutions():
    assert exercises.stale() == [], "run `flashtutor exercises --write`"


def test_stub_replaces_marked_regions_only():
    src = "a\n    // BEGIN SOLUTION: the loop\n    secret();\n    // END SOLUTION\nb\n"
    assert exercises.stub(src) == "a\n    // TODO: the loop.\nb\n"
    py = "def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
    out = exercises.stub(py)
    assert "return 1" not in out and "raise NotImplementedError" in out
    compile(out, "f.py", "exec")
    jit = exercises.stub("def k():\n    x = 1\n    # BEGIN SOLUTION [jit]: the loop\n    x = 2\n    # END SOLUTION\n")
    assert jit == "def k():\n    x = 1\n    # TODO: the loop.\n    pass\n"


@pytest.mark.parametrize("src", ["// BEGIN SOLUTION\nx\n", "x\n// END SOLUTION\n",
                                 "// BEGIN SOLUTION\n// BEGIN SOLUTION\n// END SOLUTION\n"])
def test_unbalanced_markers_are_errors(src):
    with pytest.raises(ValueError):
        exercises.stub(src)


def test_every_solution_has_a_marked_region():
    for ch in CHAPTERS.values():
        sols = [s.read_text() for s, _ in exercises.pairs(ch)]
        assert any("BEGIN SOLUTION" in s for s in sols), ch.slug


def test_write_keeps_a_learners_changes(tmp_path, monkeypatch):
    from dataclasses import replace
    ch = CHAPTERS["01"]
    # a private copy of the chapter tree, so the real exercise files are untouched
    (tmp_path / "solutions" / ch.slug).mkdir(parents=True)
    (tmp_path / "chapters" / ch.slug).mkdir(parents=True)
    for name in ch.files:
        (tmp_path / "solutions" / ch.slug / name).write_text((ch.solution_dir / name).read_text())
    monkeypatch.setattr(exercises, "ROOT", tmp_path)
    monkeypatch.setattr(exercises, "MANIFEST", tmp_path / "chapters" / ".generated.json")
    import flashtutor.chapters as chapters
    monkeypatch.setattr(chapters, "ROOT", tmp_path)
    fake = replace(ch)
    said = exercises.write([fake])
    assert len([s for s in said if s.startswith("wrote")]) == len(ch.files)
    mine = tmp_path / "chapters" / ch.slug / "attention.cu"
    mine.write_text(mine.read_text() + "\n// my work in progress\n")
    said = exercises.write([fake])
    backups = list(mine.parent.glob("attention.cu.mine-*"))
    assert len(backups) == 1 and "my work in progress" in backups[0].read_text()
    assert any("kept your version" in s for s in said)
