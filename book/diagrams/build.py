"""Render the book's diagrams to SVG: `python book/diagrams/build.py [--check]`.

Every `book/diagrams/ch*.py` defines `DIAGRAMS: dict[str, Callable[[], Figure]]`, an output stem (such
as "ch02_tiles") mapped to a function that draws the figure. This script imports each of them, calls
every function and writes `book/diagrams/svg/<stem>.svg`. The output is deterministic (a fixed hash
salt for the SVG's ids, no date in the metadata, text kept as text), so the committed SVGs can be
compared with what the code draws now:

    python book/diagrams/build.py            # (re)write book/diagrams/svg/
    python book/diagrams/build.py --check    # render into a temporary folder; exit 1 naming every SVG
                                             # that differs from the committed one or is missing

The chapter notebooks show the SVGs (markdown cells tagged "diagram"); tests/test_diagrams.py runs
the check.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

HERE = Path(__file__).resolve().parent
SVG_DIR = HERE / "svg"

RC = {
    "svg.hashsalt": "flashtutor",   # ids of clip paths and glyphs: the same on every run
    "svg.fonttype": "none",         # text stays <text>: searchable, and its size can be checked
}


def modules() -> dict[str, object]:
    """The chapter modules `ch*.py` of this folder, imported by path, by file name."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))   # so that a module can `import style`
    found = {}
    for path in sorted(HERE.glob("ch*.py")):
        spec = importlib.util.spec_from_file_location(f"flashtutor_diagrams_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if not isinstance(getattr(mod, "DIAGRAMS", None), dict):
            raise TypeError(f"{path.name} defines no DIAGRAMS dict")
        found[path.name] = mod
    return found


def diagrams() -> dict[str, object]:
    """Every diagram of every chapter module: stem -> function returning a Figure."""
    out = {}
    for name, mod in modules().items():
        for stem, fn in mod.DIAGRAMS.items():
            if stem in out:
                raise ValueError(f"diagram {stem!r} is defined twice ({name})")
            out[stem] = fn
    return out


def render(out_dir: Path, only: list[str] | None = None) -> list[Path]:
    """Draw the diagrams (all, or the stems in `only`) into `out_dir`; return the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with matplotlib.rc_context(RC):
        for stem, fn in diagrams().items():
            if only and stem not in only:
                continue
            fig = fn()
            path = out_dir / f"{stem}.svg"
            try:
                fig.savefig(path, format="svg", metadata={"Date": None})
            finally:
                plt.close(fig)
            written.append(path)
    return written


def check(svg_dir: Path = SVG_DIR) -> list[str]:
    """Problems between the code and the committed SVGs: one line per missing or differing file."""
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        drawn = render(Path(tmp))
        for stale in sorted(set(p.name for p in svg_dir.glob("*.svg")) - {p.name for p in drawn}):
            problems.append(f"{(svg_dir / stale).relative_to(HERE.parents[1])}: no diagram draws it (delete it)")
        for fresh in drawn:
            committed = svg_dir / fresh.name
            if not committed.exists():
                problems.append(f"{committed.relative_to(HERE.parents[1])}: missing (run book/diagrams/build.py)")
            elif committed.read_bytes() != fresh.read_bytes():
                problems.append(f"{committed.relative_to(HERE.parents[1])}: differs from what the code draws "
                                f"(run book/diagrams/build.py)")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed SVGs instead of writing them")
    ap.add_argument("stems", nargs="*", help="only these diagrams (default: all)")
    args = ap.parse_args(argv)
    if args.check:
        problems = check()
        for line in problems:
            print(line)
        if not problems:
            print(f"all {len(diagrams())} diagrams match their SVGs")
        return 1 if problems else 0
    for path in render(SVG_DIR, args.stems or None):
        print(path.relative_to(HERE.parents[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
