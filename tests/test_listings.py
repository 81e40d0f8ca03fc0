"""A page's stored outputs show source files (``docs.listing``): after the file changes, the listing must change too,
or the page teaches code the course no longer has — and the line numbers it gives point at other lines. Each
listing in a stored output is compared with its file now (``docs.stale_listings``); ``scripts/refresh_listings.py``
re-runs the listing cells that went stale, leaving the page's GPU outputs alone."""
from __future__ import annotations

import json

import pytest

from flashtutor import docs
from flashtutor.chapters import ROOT

NOTEBOOKS = sorted((ROOT / "chapters").glob("**/*.ipynb"))


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT / "chapters")))
def test_every_stored_listing_matches_its_file(nb):
    stale = docs.stale_listings(nb, ROOT)
    assert not stale, f"{nb.relative_to(ROOT)}: " + "; ".join(stale) + " (run scripts/refresh_listings.py)"


def _page(tmp_path, *outputs):
    cells = [{"cell_type": "code", "source": "", "metadata": {}, "execution_count": None,
              "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"text/markdown": o}}
                          for o in outputs]}]
    path = tmp_path / "page.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    return path


def test_a_listing_is_stale_once_its_lines_move_or_change(tmp_path):
    src = tmp_path / "k.py"
    src.write_text("a = 1\n\ndef f():\n    return 2\n")
    now = docs.listing(src, "def f(", root=tmp_path)                     # lines 3–4
    whole = docs.listing(src, root=tmp_path)
    assert docs.stale_listings(_page(tmp_path, now, whole), tmp_path) == []
    src.write_text("a = 1\nb = 2\n\ndef f():\n    return 2\n")           # the function moved down one line
    assert len(docs.stale_listings(_page(tmp_path, now), tmp_path)) == 1
    assert len(docs.stale_listings(_page(tmp_path, whole), tmp_path)) == 1
    fresh = docs.listing(src, "def f(", root=tmp_path)
    assert docs.stale_listings(_page(tmp_path, fresh), tmp_path) == []
    src.write_text("a = 1\nb = 2\n\ndef f():\n    return 3\n")           # same lines, other code
    assert len(docs.stale_listings(_page(tmp_path, fresh), tmp_path)) == 1


def test_the_refresher_rebuilds_a_stale_listing_cell_as_the_page_stores_it(tmp_path):
    """scripts/refresh_listings.py's re-run of a listing cell gives the listing of the file now, in the page's
    output format (a display of Markdown, the text as a list of lines)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("refresh_listings", ROOT / "scripts/refresh_listings.py")
    refresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(refresh)
    source = 'display(Markdown(docs.listing(ROOT / "flashtutor/docs.py", "def span(", root=ROOT)))'
    assert all(refresh.ALLOWED.search(line) for line in source.splitlines())
    outs = refresh.rerun(source)
    assert [o["output_type"] for o in outs] == ["display_data"]
    assert "".join(outs[0]["data"]["text/markdown"]) == docs.listing(ROOT / "flashtutor/docs.py", "def span(", root=ROOT)
    assert docs.stale_listings(_page(tmp_path, "".join(outs[0]["data"]["text/markdown"])), ROOT) == []
