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
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

# a cell that only names paths and displays listings may run here alone
ALLOWED = re.compile(r"^\s*(#.*)?$|^\s*[A-Z0-9_]+ = (ROOT|Path\()|display\(Markdown\(docs\.(listing|code)\(|^\s+")


def rerun(source: str) -> list:
    """The cell's display outputs (raises NameError when it needs a name an earlier cell defines)."""
    import nbformat
    from IPython.display import Markdown

    from flashtutor import docs
    outs = []

    def display(obj):
        outs.append(nbformat.v4.new_output("display_data", data={
            "text/markdown": obj.data, "text/plain": "<IPython.core.display.Markdown object>"}))
    exec(compile(source, "<listing cell>", "exec"),
         {"ROOT": ROOT, "docs": docs, "display": display, "Markdown": Markdown, "Path": Path})
    return outs


def page_run(nb: Path):
    """The page executed on this machine (a fresh kernel, the page's folder as the working directory, paths
    scrubbed as scripts/execute_notebooks.py does)."""
    import nbformat
    from nbclient import NotebookClient

    from execute_notebooks import scrub_outputs
    page = nbformat.read(nb, as_version=4)
    NotebookClient(page, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(nb.parent)}}).execute()
    scrub_outputs(page)
    return page


def main() -> int:
    import nbformat

    from flashtutor.docs import stale_in_outputs, stale_listings
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
        page = nbformat.read(nb, as_version=4)
        rest = []
        for n in sorted({int(s.split()[1].rstrip(":")) for s in stale}):
            source = page.cells[n].source
            try:
                if not all(ALLOWED.search(line) for line in source.splitlines()):
                    raise NameError("not a cell of listings alone")
                page.cells[n].outputs = rerun(source)
                print(f"  cell {n} re-run alone")
            except NameError:
                rest.append(n)
        if rest:
            print(f"  executing {nb.name} on this machine for cells {rest}")
            run = page_run(nb)
            for n in rest:
                outs = run.cells[n].outputs
                if any(o.output_type == "display_data" for o in outs) and not stale_in_outputs(outs, ROOT):
                    page.cells[n].outputs = outs
                    print(f"  cell {n} from the page's run")
                else:
                    print(f"  cell {n}: the page's run did not give current listings; re-execute {nb} on a GPU")
        nbformat.write(page, nb)
        left += len(stale_listings(nb, ROOT))
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
