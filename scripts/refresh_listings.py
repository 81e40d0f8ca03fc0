"""Re-run the cells whose stored source listings went stale (``flashtutor.docs.stale_listings``), and only those:
a page executed on an H100 keeps its GPU outputs, and a listing cell only reads files, so its output is the same
on any machine. A cell qualifies only if it calls nothing but ``docs.listing``/``docs.code`` and ``display``;
anything else is reported and left alone (re-execute that page instead).

    python scripts/refresh_listings.py [NOTEBOOK ...]      # default: every chapter notebook; --check: only list
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ALLOWED = re.compile(r"^\s*(#.*)?$|^\s*[A-Z0-9_]+ = (ROOT|Path\()|display\(Markdown\(docs\.(listing|code)\(|^\s+")


def rerun(source: str) -> list[dict]:
    """The cell's display outputs, as the notebook stores them."""
    from IPython.display import Markdown

    from flashtutor import docs
    outs = []

    def display(obj):
        outs.append({"data": {"text/markdown": obj.data.splitlines(keepends=True),
                              "text/plain": ["<IPython.core.display.Markdown object>"]},
                     "metadata": {}, "output_type": "display_data"})
    exec(compile(source, "<listing cell>", "exec"),
         {"ROOT": ROOT, "docs": docs, "display": display, "Markdown": Markdown, "Path": Path})
    return outs


def main() -> int:
    from flashtutor.docs import stale_listings
    ap = argparse.ArgumentParser()
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    left = 0
    for nb in a.notebooks or sorted((ROOT / "chapters").glob("**/*.ipynb")):
        stale = stale_listings(nb, ROOT)
        if not stale:
            continue
        print(f"{nb}: " + "; ".join(stale))
        if a.check:
            left += len(stale)
            continue
        doc = json.loads(nb.read_text(encoding="utf-8"))
        for n in sorted({int(s.split()[1].rstrip(":")) for s in stale}):
            cell = doc["cells"][n]
            source = "".join(cell["source"])
            if not all(ALLOWED.search(line) for line in source.splitlines()):
                print(f"  cell {n} does more than list files: re-execute {nb} instead")
                left += 1
                continue
            cell["outputs"] = rerun(source)
            print(f"  cell {n} re-run")
        nb.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        left += len(stale_listings(nb, ROOT))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
