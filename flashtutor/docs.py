"""A module's docstring as Markdown, for a notebook to show it as prose rather than as reST in a grey box.

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
