"""Short table cells stay on one line.

The course's tables are mostly numbers with units and problem shapes ("1.90 ms", "18250 ±0%",
"B4 H32 S4096 D128 causal", "2026-11-26"). Squeezed into the content column, the browser breaks such a cell
wherever it may — "1.90" over "ms", a shape over three lines, a date at its hyphen — and a table of 50 rows
becomes 150 lines tall. Here every body cell whose text is at most ``SHORT`` characters gets the class
``ft-nowrap`` (book/_static/flashtutor.css: ``white-space: nowrap``): such cells keep their line, the
longer ones (shapes, sentences, verdicts with reasons) still wrap between words, and a table that no longer
fits scrolls inside the column with its scrollbar. (With 16 or 28 characters, tables of many such cells grew
wider than the column: 30-430 px on seven pages, measured in Chromium at 1280 px; with 12, 15 and 48 px on two.) The text itself is unchanged (no non-breaking characters to trip a copy and paste).
"""
from __future__ import annotations

from docutils import nodes

SHORT = 12          # characters: a time with its unit ("1.90 ms"), a spread ("18250 ±0%"), a date


def _mark(app, doctree, docname) -> None:
    for body in doctree.findall(nodes.tbody):
        for entry in body.findall(nodes.entry):
            if len(entry.astext()) <= SHORT:
                entry["classes"].append("ft-nowrap")


def setup(app):
    app.connect("doctree-resolved", _mark)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
