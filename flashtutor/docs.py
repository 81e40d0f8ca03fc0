"""Text for the book's pages: a module's docstring as Markdown (prose, not reST in a grey box), tables as
Markdown (the page renders them as tables, in its own font, where printed columns would run past the
content column), and long printed lines wrapped to that column.

The package's docstrings use a small part of reStructuredText: ``literal``, roles such as
:func:`name`, bullet lists, and code blocks indented by four spaces after a blank line. This turns
those into CommonMark (what the book's notebooks render), so one text serves ``help()`` and the page.
"""
from __future__ import annotations

import inspect
import re
import textwrap
from pathlib import Path

_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|obj|exc):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _inline(line: str) -> str:
    return _LITERAL.sub(r"`\1`", _ROLE.sub(r"`\1`", line))


def markdown(obj) -> str:
    """The docstring of ``obj`` (a module, class or function) as Markdown; '' when it has none."""
    doc = inspect.cleandoc(obj.__doc__ or "")      # its own docstring, not one inherited
    out: list[str] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        starts_block = line.startswith("    ") and (i == 0 or not lines[i - 1].strip())
        if starts_block:                     # a code block: indented lines (blank lines inside it kept)
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            out += ["```python", textwrap.dedent("\n".join(block)), "```", ""]
            continue
        out.append(_inline(line))
        i += 1
    return "\n".join(out).strip() + "\n" if out else ""


WIDTH = 100          # characters of a printed line the book's content column shows without scrolling


def wrap(text: str, width: int = WIDTH) -> str:
    """``text`` with every line longer than ``width`` broken at spaces; the continuation lines are indented
    past the line's own indent (and past a leading "* " or "NNN: "), so a list stays a list."""
    out = []
    for line in text.splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        lead = re.match(r"\s*(?:[*-] |\d+: )?", line).group(0)
        out.append(textwrap.fill(line, width=width, initial_indent="", subsequent_indent=" " * (len(lead) + 2),
                                 break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)


_SHAPE = re.compile(r"\bB\d+ H\d+ S\d+ D\d+\b")
NBSP = "\u00a0"


def keep_shapes(text: str) -> str:
    """``text`` with the spaces inside each problem shape ("B1 H16 S1024 D64") made non-breaking: a table's
    narrow column then breaks between shapes and words, never inside a shape (four lines a shape, otherwise)."""
    return _SHAPE.sub(lambda m: m.group(0).replace(" ", NBSP), text)


def table(header, rows) -> str:
    """A Markdown table: ``header`` a list of column titles, ``rows`` lists of cells (anything ``str`` takes;
    ``None`` shows as "—"). A ``|`` inside a cell is escaped, so it stays one cell; a shape stays on one line."""
    cell = lambda x: "—" if x is None else keep_shapes(str(x).replace("|", "\\|").replace("\n", " "))  # noqa: E731
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


_LANGUAGE = {".cu": "cuda", ".cuh": "cuda", ".py": "python", ".cpp": "c++", ".h": "c++", ".ptx": "text"}


def code(text: str, language: str = "python", *, caption: str | None = None, first_line: int | None = None) -> str:
    """``text`` as a MyST code block: the page highlights it (Pygments' ``language`` lexer) where printed
    source was plain grey text, numbers its lines from ``first_line`` when given, and titles it ``caption``."""
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", text)), default=0))
    opts = ([f":caption: {caption}"] if caption else []) + ([f":lineno-start: {first_line}"] if first_line else [])
    return "\n".join([f"{fence}{{code-block}} {language}", *opts, "", text.rstrip("\n"), fence])


def span(lines: list[str], first: str, last: str | None = None) -> tuple[int, int]:
    """The 0-based first and last index of an excerpt of ``lines``: from the first line containing ``first``
    to the next line containing ``last``; without ``last``, the one statement that line ends (``;``) or the
    brace block it opens."""
    i = next((n for n, line in enumerate(lines) if first in line), None)
    if i is None:
        raise ValueError(f"no line contains {first!r}")
    i = _with_template(lines, i)
    if last is not None:
        j = next((n for n in range(i, len(lines)) if last in lines[n]), None)
        if j is None:
            raise ValueError(f"no line after {first!r} contains {last!r}")
        return i, j
    if "{" not in lines[i] and lines[i].split("//")[0].rstrip().endswith(";"):
        return i, i
    depth, opened = 0, False
    for j in range(i, len(lines)):
        depth += lines[j].count("{") - lines[j].count("}")
        opened = opened or "{" in lines[j]
        if opened and depth <= 0:
            return i, j
    return i, len(lines) - 1


def _with_template(lines: list[str], i: int, reach: int = 6) -> int:
    """``i``, or the line of the ``template <…>`` header that the declaration on line ``i`` belongs to (within
    ``reach`` lines above it, its parameter list possibly over several lines): a C++ listing that starts at a
    function's name without its template line shows a declaration the compiler would not accept."""
    for k in range(i - 1, max(-1, i - 1 - reach), -1):
        text = lines[k].split("//")[0].strip()
        if text.startswith("template"):
            return k
        if not text or any(c in text for c in ";{}") or text.startswith("#"):
            return i
    return i


def listing(path, first: str | None = None, last: str | None = None, *, context: int = 0, root=None,
            language: str | None = None) -> str:
    """An excerpt of the source file ``path`` as a highlighted, line-numbered code block titled with the file
    (relative to ``root``) and its line range (:func:`span` chooses the lines; ``context`` lines before them
    too); the whole file without ``first``."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    i, j = span(lines, first, last) if first is not None else (0, len(lines) - 1)
    i = max(0, i - context)
    while i < j and not lines[i].strip():          # context that reaches a blank line: the listing starts after it
        i += 1
    name = path.resolve().relative_to(Path(root).resolve()) if root else path.name
    return code("\n".join(lines[i:j + 1]), language or _LANGUAGE.get(path.suffix, "text"),
                caption=(str(name) if first is None else f"{name}, line {i + 1}" if i == j
                         else f"{name}, lines {i + 1}–{j + 1}"), first_line=i + 1)


def source_diff(a: Path, b: Path, context: int = 1) -> str:
    """The unified diff of two steps' source files, code only (from the first ``#include``, without the exercise
    markers), as a diff code block: what one step changed over the one before it."""
    import difflib

    def code_only(path: Path) -> list[str]:
        text = path.read_text()
        text = text[text.index("#include"):]
        return [line for line in text.splitlines() if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line]

    diff = difflib.unified_diff(code_only(a), code_only(b), a.name, b.name, n=context, lineterm="")
    return code("\n".join(diff), "diff", caption=f"{a.name} → {b.name}, the code only (the header comments "
                                                  "differ too: read them in the files)")


def exercise_excerpt(solution: Path, first: str, last: str, caption: str) -> str:
    """The exercise's text (the solution with its bodies replaced by TODOs, as the exercise is generated) from the
    line containing ``first`` to the one containing ``last``, with a decorator just above it, as a code block."""
    from .exercises import stub
    lines = stub(Path(solution).read_text(encoding="utf-8")).splitlines()
    i, j = span(lines, first, last)
    i -= lines[i - 1].startswith("@")
    return code("\n".join(lines[i:j + 1]), caption=caption, first_line=i + 1)


_BLOCK = re.compile(r"(`{3,})\{code-block\} \S+\n((?::[a-z-]+: [^\n]*\n)*)\n(.*?)\n\1", re.S)


def stale_listings(notebook: Path, root: Path) -> list[str]:
    """The source listings in ``notebook``'s stored outputs that no longer match their files, one line each (cell,
    caption, why): see :func:`stale_in_outputs`."""
    import json
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    return [f"cell {n}: {caption} differs from the file now"
            for n, cell in enumerate(cells) for caption in stale_in_outputs(cell.get("outputs", []), root)]


def stale_in_outputs(outputs: list, root: Path) -> list[str]:
    """The captions of the listings in a cell's ``outputs`` that no longer match their files: a block captioned
    "<file>, lines a–b" (or ", line a") must equal those lines of the file now, one captioned "<file>" the file from
    its first numbered line on, one captioned "<file>: <name>" a run of the file's lines. Other captions (an
    exercise's excerpt, a diff of two steps) are not checked."""
    out = []
    for o in outputs:
        text = o.get("data", {}).get("text/markdown") or o.get("text") or ""
        text = "".join(text) if isinstance(text, list) else text
        for m in _BLOCK.finditer(text):
            opts = dict(re.findall(r":([a-z-]+): ([^\n]*)", m.group(2)))
            caption, body = opts.get("caption", ""), m.group(3).split("\n")
            rng = re.fullmatch(r"(.+?), lines? (\d+)(?:–(\d+))?", caption)
            name = rng.group(1) if rng else caption.split(": ")[0]
            path = Path(root) / name
            if not name or not path.is_file():
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            if rng:
                a, b = int(rng.group(2)), int(rng.group(3) or rng.group(2))
                ok = lines[a - 1:b] == body
            elif ": " in caption:
                ok = any(lines[i:i + len(body)] == body for i in range(len(lines)))
            else:
                a = int(opts.get("lineno-start", 1))
                ok = lines[a - 1:a - 1 + len(body)] == body
            if not ok:
                out.append(caption)
    return out
