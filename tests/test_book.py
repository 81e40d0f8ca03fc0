"""The book builds: `jupyter-book build` with warnings as errors, into a temporary folder.

This is the README's `jupyter-book build .`, made strict; it never writes the repository's own
_build/. A second test checks that a broken table of contents really does fail the build, so the
first test cannot pass by accident. The build is made once per session (tests/book_build.py) and
tests/test_book_html.py reads the same HTML.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from book_build import build as _build, built_once

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """The repository's book, built once per session and shared with tests/test_book_html.py."""
    return built_once(tmp_path_factory)


def _toc_files(toc_text: str) -> list[str]:
    """Every `root:` and `file:` entry of _toc.yml (a plain scan, so no YAML library is needed)."""
    files = []
    for line in toc_text.splitlines():
        line = line.split("#", 1)[0].strip().lstrip("- ").strip()
        for key in ("root:", "file:"):
            if line.startswith(key):
                files.append(line[len(key):].strip().strip("'\""))
    return files


def test_book_builds_without_warnings(built_book):
    log = built_book.log
    assert built_book.returncode == 0, f"jupyter-book build failed:\n{log[-6000:]}"
    assert "WARNING" not in log, "the build printed warnings:\n" + "\n".join(
        line for line in log.splitlines() if "WARNING" in line)

    html = built_book.html
    assert (html / "index.html").is_file()
    assert (html / "book" / "intro.html").is_file()
    assert (html / "chapters" / "01_naive_cuda" / "naive_cuda.html").is_file()
    # Every page named in the table of contents was built.
    for entry in _toc_files((ROOT / "_toc.yml").read_text()):
        page = html / (str(Path(entry).with_suffix("")) + ".html")
        assert page.is_file(), f"{entry} is in _toc.yml but {page.relative_to(html)} was not built"
    # Nothing outside the table of contents slipped in (solutions, tests, wheels...).
    assert not (html / "solutions").exists()
    assert not (html / "tests").exists()
    # Tables a cell displays as markdown render as tables, not as a paragraph of pipes.
    for page in ("chapters/02_tiling/tiling.html", "chapters/03_wmma/wmma.html"):
        text = (html / page).read_text()
        assert "<p>| " not in text and "cell_output" in text and "<table" in text, page
    # Formulas render offline: every page with math loads MathJax from the book itself, and it is there.
    mathjax = html / "_static" / "mathjax"
    assert (mathjax / "tex-mml-chtml.js").is_file() and any((mathjax / "output/chtml/fonts/woff-v2").glob("*.woff"))
    pages = [p for p in html.rglob("*.html") if "tex-mml-chtml.js" in p.read_text(errors="replace")]
    assert any(p.name == "notation.html" for p in pages), "the notation page loads no MathJax"
    for page in pages:
        text = page.read_text(errors="replace")
        assert "cdn.jsdelivr.net" not in text and "_static/mathjax/tex-mml-chtml.js" in text, page


def test_broken_toc_fails_the_build(tmp_path):
    """A toc entry without a file must fail: proof that the test above can fail."""
    src = tmp_path / "src"
    (src / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_config.yml", src / "_config.yml")
    shutil.copytree(ROOT / "book" / "_ext", src / "book" / "_ext")
    (src / "book" / "intro.md").write_text("# Intro\n\nA page.\n")
    (src / "_toc.yml").write_text(
        "format: jb-book\nroot: book/intro\nchapters:\n  - file: book/no_such_page\n")
    result = _build(src, tmp_path / "out")
    log = result.stdout + result.stderr
    assert result.returncode != 0 or "WARNING" in log, (
        "a table of contents naming a missing page built cleanly:\n" + log[-3000:])
    assert "no_such_page" in log, log[-3000:]          # it failed for the missing page, not for anything else


BOOK_NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb")) + sorted((ROOT / "chapters").glob("*/*.ipynb"))


@pytest.mark.parametrize("notebook", BOOK_NOTEBOOKS, ids=lambda p: p.name)
def test_book_notebook_runs(notebook, tmp_path):
    """Each notebook under book/ runs top to bottom here (GPU cells print a note on a CPU), and
    the cells tagged `nbval-check-output` reproduce their stored output (nbval's lax mode)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(tmp_path), str(notebook)],
        capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, f"{notebook.name} failed under nbval:\n{(result.stdout + result.stderr)[-6000:]}"


def test_stored_outputs_show_no_machine_paths_into_the_course():
    """Stored outputs name course files relative to the course folder, never as the absolute path of the
    machine that ran them (a reader's copy lives elsewhere)."""
    import json
    import re
    absolute = re.compile(r"(?<![\w.~])/(?:[\w.-]+/)+(?:chapters|solutions|flashtutor)/[\w.-]+")
    for nb in BOOK_NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        for i, cell in enumerate(cells):
            found = absolute.findall(json.dumps(cell.get("outputs", [])))
            assert not found, f"{nb.name} cell {i}: {found[:2]}"


def reader_noise(outputs: list) -> list[str]:
    """What a reader would trip over in a cell's stored outputs: warnings, tracebacks, paths into an installed
    Python, markdown tables printed as plain text (they render as a paragraph of pipes)."""
    import re
    found = []
    for out in outputs:
        text = out.get("text", "")
        text = text if isinstance(text, str) else "".join(text)
        if out.get("output_type") == "error" or "Traceback (most recent call last)" in text:
            found.append("traceback")
        if re.search(r"\w*Warning: ", text):
            found.append("warning")
        if re.search(r"/(site|dist)-packages/", text):
            found.append("installed-package path")
        if out.get("output_type") == "stream" and re.search(r"^\|(\s*-+\s*\|)+\s*$", text, re.M):
            found.append("markdown table printed as text")
    return found


def test_stored_outputs_carry_no_reader_noise():
    import json
    bad = {"output_type": "stream", "name": "stdout", "text": "| a | b |\n|---|---|\n| 1 | 2 |\n"}
    warn = {"output_type": "stream", "name": "stderr",
            "text": "/x/site-packages/torch/profiler.py:224: UserWarning: Warning: Profiler clears events\n"}
    assert reader_noise([bad]) == ["markdown table printed as text"]          # the check can fail
    assert set(reader_noise([warn])) == {"warning", "installed-package path"}
    for nb in BOOK_NOTEBOOKS:
        for i, cell in enumerate(json.loads(nb.read_text())["cells"]):
            found = reader_noise(cell.get("outputs", []))
            assert not found, f"{nb.name} cell {i}: {found}"
