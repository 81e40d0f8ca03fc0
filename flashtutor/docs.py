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
    import textwrap
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
