"""Execute the book's notebooks in place on this machine (the GPU host), so their stored outputs come from it.

    python scripts/execute_notebooks.py chapters/01_naive_cuda/naive_cuda.ipynb ...   (default: every notebook in _toc.yml)

Each notebook runs in a fresh kernel with its own folder as the working directory. Afterwards its outputs name
course files relative to the course folder and the cache as ~/.cache (never this machine's absolute paths), and
a line per notebook reports its wall time and whether a cell raised. Exit code 1 when any notebook failed.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def toc_notebooks() -> list[Path]:
    files = []
    for line in (ROOT / "_toc.yml").read_text().splitlines():
        line = line.split("#", 1)[0].strip().lstrip("- ").strip()
        for key in ("root:", "file:"):
            if line.startswith(key):
                p = ROOT / (line[len(key):].strip() + ".ipynb")
                if p.exists():
                    files.append(p)
    return files


def scrub(text: str) -> str:
    text = text.replace(str(ROOT) + "/", "")
    home = os.path.expanduser("~")
    return text.replace(home + "/.cache", "~/.cache")


def scrub_outputs(nb) -> None:
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                out["text"] = scrub(out["text"] if isinstance(out["text"], str) else "".join(out["text"]))
            for key, val in list(out.get("data", {}).items()):
                if key.startswith("text/") or key == "application/json":
                    if isinstance(val, str):
                        out["data"][key] = scrub(val)
                    elif isinstance(val, list):
                        out["data"][key] = [scrub(v) for v in val]


def run(path: Path, timeout: int) -> tuple[bool, float, str]:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    nb = nbformat.read(path, as_version=4)
    t = time.time()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    ok, err = True, ""
    try:
        client.execute()
    except CellExecutionError as e:
        ok, err = False, str(e).splitlines()[-1][:300] if str(e) else "cell failed"
    scrub_outputs(nb)
    nbformat.write(nb, path)
    return ok, time.time() - t, err


def main() -> int:
    paths = [Path(p).resolve() for p in sys.argv[1:]] or toc_notebooks()
    timeout = int(os.environ.get("NB_CELL_TIMEOUT", "900"))
    failed = 0
    report = []
    for p in paths:
        ok, secs, err = run(p, timeout)
        failed += not ok
        report.append({"notebook": str(p.relative_to(ROOT)), "ok": ok, "seconds": round(secs, 1), "error": err})
        print(f"{'ok  ' if ok else 'FAIL'} {p.relative_to(ROOT)} {secs:.0f} s {err}", flush=True)
    out = os.environ.get("NB_REPORT")
    if out:
        Path(out).write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
