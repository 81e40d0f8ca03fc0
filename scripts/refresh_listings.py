"""Re-run the cells whose stored source listings went stale (``flashtutor.docs.stale_listings``), and only those:
a page executed on an H100 keeps its GPU outputs, and a listing cell only reads files, so its output is the same
on any machine. A cell that calls nothing but ``docs.listing``/``docs.code`` and ``display`` is re-run alone; one
that needs the page's earlier cells (a path defined above it) gets its outputs from an execution of the whole page
on this machine (every page runs without a GPU), and only that cell's outputs are copied back — and only if they
are listings that match their files, so a cell whose output depends on the GPU is never replaced.

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
sys.path.insert(0, str(ROOT / "scripts"))

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


def from_page_run(nb: Path, cells: list[int]) -> dict[int, list[dict]]:
    """The outputs of ``cells`` from executing the whole page on this machine (a fresh kernel, the page's folder as
    the working directory, paths scrubbed as scripts/execute_notebooks.py does)."""
    import nbformat
    from nbclient import NotebookClient

    from execute_notebooks import scrub_outputs
    page = nbformat.read(nb, as_version=4)
    NotebookClient(page, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(nb.parent)}}).execute()
    scrub_outputs(page)

    def stored(o):               # as the page stores it: multi-line strings as lists of lines
        o = json.loads(json.dumps(o, sort_keys=True))
        for key, val in o.get("data", {}).items():
            if isinstance(val, str) and key.startswith("text/"):
                o["data"][key] = val.splitlines(keepends=True)
        if isinstance(o.get("text"), str):
            o["text"] = o["text"].splitlines(keepends=True)
        return o
    return {n: [stored(o) for o in page.cells[n].outputs] for n in cells}


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
        cells = sorted({int(s.split()[1].rstrip(":")) for s in stale})
        rest = []
        for n in cells:
            source = "".join(doc["cells"][n]["source"])
            try:
                if not all(ALLOWED.search(line) for line in source.splitlines()):
                    raise NameError("more than listings")
                doc["cells"][n]["outputs"] = rerun(source)       # a name defined on an earlier cell: NameError
                print(f"  cell {n} re-run alone")
            except NameError:
                rest.append(n)
        if rest:
            print(f"  executing {nb.name} on this machine for cells {rest}")
            for n, outs in from_page_run(nb, rest).items():
                trial = dict(doc, cells=[dict(doc["cells"][n], outputs=outs)])
                tmp = nb.with_suffix(".refresh.ipynb")
                tmp.write_text(json.dumps(trial), encoding="utf-8")
                fresh = not stale_listings(tmp, ROOT) and any(o.get("output_type") == "display_data" for o in outs)
                tmp.unlink()
                if fresh:
                    doc["cells"][n]["outputs"] = outs
                    print(f"  cell {n} from the page's run")
                else:
                    print(f"  cell {n}: the page's run did not give current listings; re-execute {nb} on a GPU")
        nb.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        left += len(stale_listings(nb, ROOT))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
