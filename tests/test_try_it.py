"""The bar before the exercise (issue 26, item 7): each chapter page lets the learner try their file at one shape
right after the exercise contract (flashtutor.contract.try_it), and chapters 1 and 4 show what a compile error looks
like (flashtutor.contract.compile_error, on a broken copy of the solution). Both run the real `flashtutor grade` in a
subprocess; here they run on this machine (the CPU set without a GPU), and the pages' cells are checked in place.
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pytest

from flashtutor import contract as ct
from flashtutor.chapters import CHAPTERS, ROOT, get_chapter
from flashtutor.exercises import generated

PAGES = {
    "01": "chapters/01_naive_cuda/naive_cuda.ipynb",
    "02": "chapters/02_tiling/tiling.ipynb",
    "03": "chapters/03_wmma/wmma.ipynb",
    "04": "chapters/04_triton_online_softmax/triton_fa2.ipynb",
    "05": "chapters/05_cutlass_three_kernel/cutlass_three_kernel.ipynb",
    "06": "chapters/06_batching/batching.ipynb",
    "07": "chapters/07_hopper/hopper.ipynb",
    "08": "chapters/08_backward/backward.ipynb",
}
DEMOS = ("01", "04")          # the pages that also show a compile error


def _text(cell) -> str:
    return "".join(cell["source"])


def _out(cell) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def page_problems(cells: list[dict], key: str) -> list[str]:
    """What is missing or wrong around chapter ``key``'s contract cell: the try-it prose and cell right after it
    (and, for the demo chapters, the compile-error prose and cell after that); each new cell's stored output run,
    without an error, ending in its exit code's meaning."""
    at = [i for i, c in enumerate(cells) if c["cell_type"] == "code"
          and re.search(r'print\(contract\("' + key + r'"\)\)', _text(c))]
    if len(at) != 1:
        return [f"{len(at)} contract cells"]
    i = at[0]
    want = [("markdown", "Try it"), ("code", f'try_it("{key}")')]
    if key in DEMOS:
        want += [("markdown", "compile error looks like"), ("code", f'compile_error("{key}")')]
    problems = []
    for n, (kind, text) in enumerate(want, start=1):
        cell = cells[i + n] if i + n < len(cells) else {"cell_type": None, "source": []}
        if cell["cell_type"] != kind or text not in _text(cell):
            problems.append(f"cell {i + n} is not the {kind} cell with {text!r}")
            continue
        if kind == "code":
            outs = cell.get("outputs", [])
            if not cell.get("execution_count") or not outs:
                problems.append(f"cell {i + n} has not run")
            if any(o["output_type"] in ("error", "execute_result") for o in outs):
                problems.append(f"cell {i + n} stores an error or a value, not only what it printed")
            if not re.search(r"exit code \d: ", _out(cell)) or "Traceback" in _out(cell):
                problems.append(f"cell {i + n}'s output does not end in a verdict")
    return problems


@pytest.mark.parametrize("key", list(PAGES))
def test_each_chapter_page_has_its_try_it_cell_after_the_contract(key):
    cells = json.loads((ROOT / PAGES[key]).read_text())["cells"]
    assert page_problems(cells, key) == []


def test_the_page_check_can_fail():
    cells = json.loads((ROOT / PAGES["04"]).read_text())["cells"]
    i = next(n for n, c in enumerate(cells) if 'try_it("04")' in _text(c))
    assert page_problems(cells[:i] + cells[i + 1:], "04")                 # the try-it cell gone
    ran = dict(cells[i], execution_count=None, outputs=[])
    assert page_problems(cells[:i] + [ran] + cells[i + 1:], "04")         # there, but never run
    assert page_problems(cells, "01") == ["0 contract cells"]


def test_every_chapter_has_a_page():
    assert set(PAGES) == {k for k in CHAPTERS if (ROOT / "solutions" / get_chapter(k).slug).is_dir()}


# ---------------------------------------------------------------- the helpers, run here -------------------------
def _gpu() -> bool:
    import torch
    return torch.cuda.is_available()


def test_try_it_grades_the_chapter_4_solution_and_says_pass(capsys):
    ct.try_it("04", "solutions/04_triton_online_softmax/attention.py")
    out = capsys.readouterr().out
    sets = "--sets seed --no-timing" if _gpu() else "--sets cpu"
    assert out.startswith(f"$ flashtutor grade 04 solutions/04_triton_online_softmax/attention.py {sets}")
    assert "PASS" in out and "FAIL" not in out
    assert out.rstrip().endswith("exit code 0: pass")
    assert str(ROOT) not in out                             # the course's folder is shown relative


def _stub_path(key, tmp_path) -> str:
    """The chapter's exercise file while it is the generator's stub; once the learner has changed it, a copy of
    the stub (with the chapter's other generated files) in ``tmp_path``."""
    ch = get_chapter(key)
    files = generated(ch)
    if all(p.read_text() == text for p, text in files.items()):
        return str(ch.exercise_path().relative_to(ROOT))
    for p, text in files.items():
        (tmp_path / p.name).write_text(text)
    return str(tmp_path / ch.exercise_path().name)


@pytest.mark.parametrize("key,says", [
    ("04", "Is the loop over the keys still the TODO stub"),
    ("01", "Is the kernel still the TODO stub"),
])
def test_try_it_on_the_stub_fails_with_a_clear_message(key, says, capsys, tmp_path):
    ct.try_it(key, _stub_path(key, tmp_path))
    out = capsys.readouterr().out
    assert "FAIL" in out and "unwritten" in out and "what went wrong" in out
    assert says in " ".join(line.strip("│ ") for line in out.splitlines())   # the panel's lines joined
    assert "Traceback" not in out
    assert out.rstrip().endswith("exit code 1: fail")
    if not _gpu():
        assert "(on this machine, without a GPU: " in out
        assert "checked:" not in out and "full=True" in out        # the method's lines left for full=True


def test_try_it_says_why_when_the_chapter_cannot_run_here(monkeypatch, capsys):
    """A machine without Triton cannot check chapter 4 at all: one line says why, nothing is run."""
    import flashtutor.env as env
    monkeypatch.setattr(env, "machine", lambda rows=None: {"gpu": False, "cc": None, "triton": False})
    monkeypatch.setattr(ct, "run_grade", lambda *a, **k: pytest.fail("graded a chapter that cannot run"))
    ct.try_it("04")
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("$ flashtutor grade 04 --sets cpu")
    assert len(out) == 2 and out[1].startswith("not run: chapter 04 cannot be checked") and "triton" in out[1]


def _solution_digest(key) -> str:
    ch = get_chapter(key)
    return hashlib.sha256(b"".join((ch.solution_dir / f).read_bytes() for f in ch.files)).hexdigest()


def test_the_cuda_compile_error_names_the_file_and_the_line(capsys, tmp_path):
    _, broken_line = ct.broken_copy("01", tmp_path)          # the line the demonstration breaks
    before = _solution_digest("01")
    ct.compile_error("01")
    out = capsys.readouterr().out
    assert _solution_digest("01") == before                    # the course's files are only read
    assert f">{broken_line:>5} |         s[j] = dot * scale\n" in out
    assert "FAIL (nothing ran) — compile error" in out
    # NVRTC notices a missing ';' at the next token: the start of the next line
    assert re.search(rf"│ {ct.BROKEN}/attention\.cu:{broken_line + 1}: error: expected a \";\" +│", out), out
    assert "/tmp/" not in out and "ft-" not in out            # the temporary folder is not shown
    assert out.rstrip().endswith("exit code 1: fail")


def test_the_triton_error_names_the_file_and_the_line(capsys, tmp_path):
    _, broken_line = ct.broken_copy("04", tmp_path)
    before = _solution_digest("04")
    ct.compile_error("04")
    out = capsys.readouterr().out
    assert _solution_digest("04") == before
    assert f">{broken_line:>5} |         alpha = tl.exp2(m_i - m_nwe)\n" in out
    assert "m_nwe" in out.split("what went wrong", 1)[1]                        # the report names the typo ...
    assert re.search(rf"{ct.BROKEN}/attention\.py:{broken_line}\b", out), out  # ... and the file and line
    assert "/tmp/" not in out
    assert out.rstrip().endswith("exit code 1: fail")


def test_broken_copy_breaks_one_line_of_a_copy(tmp_path):
    py, n = ct.broken_copy("01", tmp_path)
    ch = get_chapter("01")
    assert py == tmp_path / ct.BROKEN / "attention.py"
    assert sorted(p.name for p in py.parent.iterdir()) == sorted(ch.files)
    a = (ch.solution_dir / "attention.cu").read_text().split("\n")
    b = (py.parent / "attention.cu").read_text().split("\n")
    assert [i + 1 for i, (x, y) in enumerate(zip(a, b)) if x != y] == [n] and len(a) == len(b)
    with pytest.raises(ValueError, match="no line"):
        ct.broken_copy("01", tmp_path / "again", line="no such text")


# ---------------------------------------------------------------- small parts ---------------------------------
def test_a_shortened_line_keeps_its_box_closed():
    box = "╭──────────╮\n│ /a/b/x:1 │\n│ plain    │\n╰──────────╯"
    out = ct._boxed_replace(box, "/a/b/", "")
    assert out.splitlines()[1] == "│ x:1      │" and out.splitlines()[2] == "│ plain    │"
    assert {len(line) for line in out.splitlines()} == {12}
    assert ct._boxed_replace("see /a/b/x", "/a/b/", "") == "see x"      # outside a box, only the path changes


def test_exit_meanings_are_the_commands_own():
    from flashtutor.cli import parser
    epilog = parser().epilog
    for code, meaning in ct.EXIT_MEANING.items():
        assert f"{code} {meaning}" in epilog, (code, meaning)


def test_the_commands_are_the_contracts():
    from flashtutor.contract import contract
    for gpu in (True, False):
        shown = "flashtutor " + " ".join(a for a in ct.grade_command("02", gpu=gpu) if a != "--quiet")
        assert shown in contract("02"), shown


def test_docs_imports_no_grading_module():
    code = "import sys, flashtutor.docs; print(sorted(m for m in sys.modules if m.startswith('flashtutor.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "flashtutor.docs" in loaded and "flashtutor.grading" not in loaded, loaded
