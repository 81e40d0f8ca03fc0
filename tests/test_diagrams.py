"""The book's diagrams: drawn by code, committed as SVG, legible, and shown in every chapter.

* `book/diagrams/build.py --check` passes: the committed SVGs are what the code draws now;
* every text of every SVG is at least style.MIN_FONT_PT points as it appears on the page (a figure wider
  than the book's content column is scaled down, and its text with it), and a negative control shows
  that the same check rejects small text;
* every chapter notebook 01-06 of _toc.yml has a cell tagged "diagram" that shows an existing SVG, and
  every SVG drawn for chapters 1-6 is shown in its chapter;
* the numbers in the diagrams are the chapters' own: each is compared with the function or the stored
  output of the chapter it illustrates.

CPU only, a few seconds.
"""
from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIAGRAMS = ROOT / "book" / "diagrams"
SVG_DIR = DIAGRAMS / "svg"
CHAPTERS = ("01", "02", "03", "04", "05", "06")


def _load(name: str):
    """A module of book/diagrams by file name (they import `style` from their own folder)."""
    if str(DIAGRAMS) not in sys.path:
        sys.path.insert(0, str(DIAGRAMS))
    spec = importlib.util.spec_from_file_location(f"test_diagrams_{name}", DIAGRAMS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


style = _load("style")


# ------------------------------------------------------------------------------- the SVG files ----
def test_committed_svgs_match_the_code():
    result = subprocess.run([sys.executable, str(DIAGRAMS / "build.py"), "--check"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, "the SVGs are stale or missing:\n" + result.stdout + result.stderr


_SIZE = re.compile(r"font-size:\s*([0-9.]+)(px|pt)?")
_SVG_NS = "{http://www.w3.org/2000/svg}"


def _length_pt(value: str) -> float:
    m = re.fullmatch(r"([0-9.]+)(pt|px|in)?", value.strip())
    assert m, f"unexpected SVG length {value!r}"
    number, unit = float(m.group(1)), m.group(2) or "px"
    return number * {"pt": 1.0, "px": 0.75, "in": 72.0}[unit]


def small_texts(svg_text: str, min_pt: float = style.MIN_FONT_PT, page_width_in: float = style.MAX_WIDTH_IN):
    """(size on the page in points, text) of every <text>/<tspan> smaller than min_pt.

    matplotlib writes the figure's size in points and a viewBox in the same units, so a font-size of
    n user units is n points at the figure's natural size. A figure wider than the page's content column
    is shown scaled down to it, and so is its text."""
    root = ET.fromstring(svg_text)
    width_pt = _length_pt(root.get("width"))
    view_w = float(root.get("viewBox").split()[2])
    scale = (width_pt / view_w) * min(1.0, page_width_in * 72.0 / width_pt)
    too_small = []
    for el in root.iter():
        if el.tag not in (_SVG_NS + "text", _SVG_NS + "tspan"):
            continue
        sizes = [float(v) for v, _ in _SIZE.findall(el.get("style", ""))]
        if el.get("font-size"):
            sizes.append(float(re.match(r"[0-9.]+", el.get("font-size")).group(0)))
        label = "".join(el.itertext()).strip()
        for size in sizes:
            if size * scale < min_pt - 1e-6:
                too_small.append((round(size * scale, 2), label))
    return too_small


def _svgs():
    return sorted(SVG_DIR.glob("*.svg"))


def test_there_are_svgs():
    stems = {p.stem for p in _svgs()}
    assert {f"ch{c}" for c in CHAPTERS} <= {s[:4] for s in stems}, sorted(stems)


@pytest.mark.parametrize("svg", _svgs(), ids=lambda p: p.name)
def test_every_text_is_at_least_the_minimum_size(svg):
    text = svg.read_text()
    assert "<text" in text, f"{svg.name} has no <text>: render with svg.fonttype = 'none'"
    assert not small_texts(text), f"{svg.name}: text below {style.MIN_FONT_PT} pt on the page: {small_texts(text)[:5]}"


def _render(fig) -> str:
    import io

    import matplotlib
    matplotlib.use("Agg")
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "flashtutor"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def test_the_size_check_rejects_small_text():
    """Negative controls: 6-pt text, a subscript in math text, and 9-pt text in a figure so wide that the
    page shrinks it, are all rejected by the same helper; 9-pt text in a figure of the page's width is not."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4, 2))
    fig.text(0.1, 0.5, "six points", fontsize=6)
    assert any(label == "six points" and size == pytest.approx(6.0) for size, label in small_texts(_render(fig)))

    fig = Figure(figsize=(4, 2))
    fig.text(0.1, 0.5, "$m_i$", fontsize=9)            # the subscript is set at 70%
    assert small_texts(_render(fig))

    fig = Figure(figsize=(2 * style.MAX_WIDTH_IN, 2))
    fig.text(0.1, 0.5, "nine points, wide figure", fontsize=9)
    assert [label for _, label in small_texts(_render(fig))] == ["nine points, wide figure"]

    fig = Figure(figsize=(style.MAX_WIDTH_IN, 2))
    fig.text(0.1, 0.5, "nine points", fontsize=9)
    assert small_texts(_render(fig)) == []


# ---------------------------------------------------------------------- the chapters show them ----
def _chapter_notebooks() -> dict[str, Path]:
    """Chapter number -> the chapter's page (its first file in _toc.yml, before its sections), for chapters 01-06."""
    found = {}
    for line in (ROOT / "_toc.yml").read_text().splitlines():
        m = re.match(r"\s*-?\s*file:\s*(chapters/(\d\d)_[^\s#]+)", line)
        if m and m.group(2) in CHAPTERS and (ROOT / (m.group(1) + ".ipynb")).exists():
            found.setdefault(m.group(2), ROOT / (m.group(1) + ".ipynb"))
    return found


def _pages(nb: Path) -> list[Path]:
    """A chapter's page and its sections' pages: the notebooks of its folder."""
    return sorted(nb.parent.glob("*.ipynb"))


def _diagram_cells(nb: Path) -> list[str]:
    cells = [c for page in _pages(nb) for c in json.loads(page.read_text())["cells"]]
    return ["".join(c["source"]) for c in cells if "diagram" in c.get("metadata", {}).get("tags", [])]


def test_toc_lists_chapters_1_to_6():
    assert sorted(_chapter_notebooks()) == list(CHAPTERS)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_shows_its_diagrams(chapter):
    nb = _chapter_notebooks()[chapter]
    cells = _diagram_cells(nb)
    assert cells, f"{nb.name} has no markdown cell tagged 'diagram'"
    shown = set()
    for src in cells:
        refs = re.findall(r"\]\((\.\./\.\./book/diagrams/svg/([\w.-]+\.svg))\)", src)
        assert refs, f"{nb.name}: a 'diagram' cell shows no SVG of book/diagrams/svg/:\n{src}"
        for rel, name in refs:
            assert (nb.parent / rel).resolve() == SVG_DIR / name and (SVG_DIR / name).is_file(), rel
            shown.add(Path(name).stem)
        caption = src.split(")", 1)[1].strip()
        assert len(caption) > 40, f"{nb.name}: a diagram without a caption: {src}"
    drawn = {p.stem for p in _svgs() if p.stem.startswith(f"ch{chapter}_")}
    assert drawn <= shown, f"chapter {chapter} does not show {sorted(drawn - shown)}"


# ----------------------------------------------------- the numbers are the chapters' own numbers ----
def _stored_text(nb: Path, contains: str) -> str:
    """The stored stream output of the first code cell of the chapter's pages whose source contains `contains`."""
    for cell in (c for page in _pages(nb) for c in json.loads(page.read_text())["cells"]):
        if cell["cell_type"] == "code" and contains in "".join(cell["source"]):
            return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))
    raise AssertionError(f"{nb.name}: no code cell containing {contains!r}")


def test_ch01_byte_counts_are_the_problems():
    from flashtutor.problems import SHAPE_SETS
    ch01 = _load("ch01")
    p = SHAPE_SETS["seed"][0]
    assert (p.B, p.H, p.S, p.D) == (ch01.B, ch01.H, ch01.S, ch01.D)
    assert ch01.QKVO_MB == pytest.approx(p.min_bytes / 1e6)
    assert ch01.SCORES_MB == pytest.approx(p.score_bytes / 1e6)
    from flashtutor.roofline import datasheet_peaks
    assert ch01.HBM_TBS == datasheet_peaks("NVIDIA H100 80GB HBM3").hbm_tbs


def test_ch02_tiles_and_online_softmax_are_the_chapters():
    ch02 = _load("ch02")
    src = (ROOT / "solutions" / "02_tiling" / "attention.cu").read_text()
    assert "constexpr int Br = 64;" in src and "constexpr int THREADS = 256;" in src
    assert "Bc = D == 64 ? 64 : 32" in src and "LDQK = D + 4" in src and "LDP = Br + 4" in src
    assert ch02.shared_bytes() == 68608 and "D =  64, Bc = 64: 17 408 + 17 408 + 16 384 + 17 408 = 68 608" in src
    # The online-softmax panel is the notebook's example row: same m, alpha and l per tile as its output.
    out = _stored_text(_chapter_notebooks()["02"], "online == direct")
    printed = [tuple(float(x) for x in m) for m in
               re.findall(r"tile \d+: m = +([-\d.]+) +alpha = ([\d.]+) +l = +([\d.]+)", out)]
    drawn = [(s["m"], s["alpha"], s["l"]) for s in ch02.online_steps(ch02.example_row())]
    assert len(printed) == len(drawn) == 5
    for (m, a, l), (dm, da, dl) in zip(printed, drawn):
        assert (round(dm, 3), round(da, 4), round(dl, 4)) == (m, a, l)


def test_ch03_bank_passes_are_the_chapters_model():
    ch03 = _load("ch03")
    from flashtutor.kernels import k03c_swizzle as c_mod
    _, before, after = c_mod.conflict_table(64)[0]
    assert (ch03.passes(64 * 2), ch03.passes((64 + c_mod.PAD_H) * 2)) == (before, after) == (8, 1)
    assert ch03.PAD_H == c_mod.PAD_H and (ch03.BR, ch03.BC) == (c_mod.Br, c_mod.Bc) and ch03.WARPS == c_mod.WARPS


def test_ch04_grid_and_causal_are_the_chapters():
    ch04 = _load("ch04")
    src = (ROOT / "solutions" / "04_triton_online_softmax" / "attention.py").read_text()
    for d in (64, 128):
        assert f"{d}: dict(BLOCK_M={ch04.BLOCK_M}, BLOCK_N={ch04.BLOCK_N}," in src
    assert "grid = (triton.cdiv(S, BLOCK_M), B * H)" in src
    assert "end = tl.minimum(S, (pid_m + 1) * BLOCK_M)" in src
    # The S = 10 example is the notebook's printout: '#' kept, '·' masked in a visited block, ' ' never loaded.
    out = _stored_text(_chapter_notebooks()["04"], "S_demo, BM_demo, BN_demo")
    rows = dict((int(i), row) for i, row in re.findall(r"query +(\d+) \|(.{10})\|", out))
    cells = ch04.demo_cells()
    symbol = {ch04.KEPT: "#", ch04.CAUSAL: "·", ch04.SKIPPED: " "}
    assert sorted(rows) == list(range(ch04.DEMO_S))
    for i, row in rows.items():
        assert "".join(symbol[cells[i, j]] for j in range(ch04.DEMO_S)) == row, i
    assert ch04.block_counts() == {"visited": 136, "all": 256}


def test_ch05_bytes_add_up_to_the_chapters_count():
    ch05 = _load("ch05")
    from flashtutor.bench import ch05 as bench05
    from flashtutor.kernels import k05_three_kernel as ref
    from flashtutor.problems import Problem
    assert tuple(ch05.CROSSOVER_S) == tuple(bench05.CROSSOVER_S)
    for S in tuple(ch05.CROSSOVER_S) + (1, 113, 1023):
        for causal in (False, True):
            p = Problem(ch05.B, ch05.H, S, ch05.D, causal=causal)
            assert ch05.pipeline_bytes(S, causal=causal) == ref.bytes_moved(p), (S, causal)
            assert ch05.score_matrix_bytes(S) == ref.score_bytes(p)
            assert ch05.fused_bytes(S) == p.min_bytes


def test_ch06_timeline_and_tile_loop_are_the_chapters():
    ch06 = _load("ch06")
    t = ch06.stored_times()
    assert t["host_direct_us"] > t["host_graph_us"] > 0 and t["gpu_direct_us"] > 0 and t["gpu_graph_us"] > 0
    out = _stored_text(_chapter_notebooks()["06"], "n_tiles, P = 12, 4")
    assert "tile -> (b·h, key chunk, query block): " + str([ch06.tile_coords(t) for t in range(12)]) in out
    assert "program 0: tiles [0, 4, 8]" in out
    if t["host_graph_us"] > t["gpu_graph_us"]:      # the caption's "cuts … N×" is the ratio of the rates it cites
        assert f"{t['done_direct_us'] / t['done_graph_us']:.1f}×" in ch06.pace(t)
