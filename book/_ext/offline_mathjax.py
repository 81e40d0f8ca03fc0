"""Formulas render offline: MathJax is served from the built book itself, not from a CDN.

The files come from the ``django-static-mathjax`` wheel (MathJax 3.2.2's own distribution, Apache 2.0,
no dependencies; requirements.txt pins it). At the end of an HTML build this copies the part a page
uses — the TeX+MathML→CommonHTML component, its web fonts and the TeX extensions it may load on demand,
and the menu — into ``_static/mathjax/``; ``mathjax_path`` in _config.yml points the pages there.
A missing package is a build warning, which the course's strict build turns into an error.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.util import logging

LOG = logging.getLogger(__name__)
PARTS = ("tex-mml-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "ui", "a11y")


def _source() -> Path | None:
    try:
        import mathjax
    except ImportError:
        return None
    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    return es5 if (es5 / "tex-mml-chtml.js").is_file() else None


def _copy(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    src = _source()
    if src is None:
        LOG.warning("offline_mathjax: MathJax's files are not installed (pip install django-static-mathjax); "
                    "formulas would need a CDN")
        return
    dest = Path(app.outdir) / "_static" / "mathjax"
    for part in PARTS:
        s, d = src / part, dest / part
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        elif s.is_file():
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(s, d)


def setup(app):
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
