"""One convention across the book (issue 26): a ratio against SDPA is a *time* ratio, yours / SDPA's
("1.45× SDPA's time", below 1 = faster than SDPA), never a speed (SDPA's time / yours, "% of SDPA's
speed", "× faster than SDPA"); and "% of peak" has one basis, the datasheet dense fp16 tensor-core peak
(``flashtutor.roofline.peak_tflops``; book/measuring.ipynb defines it), never a measured matmul rate.

The scan covers the book's markdown pages, every notebook cell of the book and the chapters (sources,
and stored text outputs: stream, text/plain, text/markdown, text/html), and the headers the bench
tables print. Speed-ups between two of the course's kernels ("21× faster than chapter 1's reference")
are allowed; anything that names SDPA in the speed direction is not.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (pattern, what it is): each matches a phrasing in the speed direction, or a second "peak".
FORBIDDEN: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(p, re.IGNORECASE), why) for p, why in (
    (r"SDPA'?s? (GPU )?time\s*(/|over)\s*(the |your |each )?(kernel|yours|step|pipeline|solution)",
     "SDPA's time over the kernel's is a speed: write the kernel's time / SDPA's"),
    (r"\bSDPA\s*/\s*(yours|kernel|teach|tuned|ref|row|step|3-kernel|solution)\b",
     "SDPA / the kernel is a speed: write the kernel / SDPA (a time ratio)"),
    (r"%\s*of SDPA\b(?!'s(?: [\w-]+)? time)", "'% of SDPA' is a speed: write '× SDPA's time'"),
    (r"%\s*of (cuBLAS|cuDNN|FlashAttention)\b(?!'s(?: [\w-]+)? time)",
     "'% of cuBLAS' (a library's time over yours) is a speed: write '× cuBLAS's time' (chapter 5's GEMM table did)"),
    (r"\bSDPA'?s speed\b", "SDPA's speed: write the target as a time, '≤ N× SDPA's time'"),
    (r"(speed|speed-up|speedup)\s+(vs\.?|relative to|against|over|of)\s+SDPA\b",
     "a speed relative to SDPA: write the kernel's time / SDPA's"),
    (r"\b(the )?speed of (SDPA|FlashAttention)", "a speed relative to SDPA: write a time ratio"),
    (r"[×x]\s+(faster|slower)\s+than\s+(SDPA|cuDNN|FlashAttention)",
     "'N× faster than SDPA': write 'M× SDPA's time'"),
    (r"\bspeed_vs_sdpa\b", "speed_vs_sdpa: the course's key is time_vs_sdpa (yours / SDPA's)"),
    (r"\b(matmul|measured|GEMM)\s+peak\b", "a measured rate is not a peak: '% of peak' uses the datasheet"),
    (r"\b(7[0-9]{2}|8[0-9]{2}|9[0-79][0-9]|98[0-8])(\.\d+)?\s*TFLOP/s\s+peak\b",
     "a peak other than the datasheet basis (989 TFLOP/s on an H100 SXM)"),
    (r"%\s*of\s+(the\s+)?(measured|matmul|GEMM)\b", "a percentage of a measured rate is not '% of peak'"),
))


def violations(text: str, where: str = "") -> list[str]:
    """Every forbidden phrasing in ``text``, as 'WHERE:LINE: why — «excerpt»'. Phrases wrapped over two
    lines (a printed line folded by docs.wrap, a markdown paragraph) are caught: the text is matched with
    each line break and the indentation after it read as one space, and reported at the line it starts on."""
    flat, starts = [], []                        # the text with line breaks as spaces; each line's offset
    # Quotations are the quoted's words, not the book's (the results page quotes the seed reports' claims to test
    # them: “1.51× faster than FlashAttention-3”): text between “ and ” is blanked, its length kept.
    text = re.sub(r"“[^”\n]*”", lambda m: " " * len(m.group(0)), text)
    for line in text.splitlines():
        starts.append(sum(len(x) + 1 for x in flat))
        flat.append(line.strip())
    joined = " ".join(flat)
    out = []
    for pat, why in FORBIDDEN:
        for m in pat.finditer(joined):
            line = max(i for i, s in enumerate(starts) if s <= m.start()) + 1
            excerpt = joined[max(0, m.start() - 30): m.end() + 30]
            out.append(f"{where}:{line}: {why} — «{excerpt}»")
    return out


def _texts(nb_path: Path):
    """(label, text) for every cell source and stored text output of a notebook."""
    nb = json.loads(nb_path.read_text())
    for i, cell in enumerate(nb["cells"]):
        yield f"cell {i} ({cell['cell_type']} source)", "".join(cell["source"])
        for o in cell.get("outputs", []):
            if "text" in o:
                yield f"cell {i} output", "".join(o["text"])
            for mime, v in o.get("data", {}).items():
                if mime in ("text/plain", "text/markdown", "text/html"):
                    yield f"cell {i} output {mime}", "".join(v) if isinstance(v, list) else v


def book_files() -> list[Path]:
    return sorted([*ROOT.glob("book/*.md"), *ROOT.glob("book/*.ipynb"), *ROOT.glob("chapters/*/*.ipynb")])


@pytest.mark.parametrize("path", book_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_book_uses_one_ratio_direction_and_one_peak(path):
    rel = path.relative_to(ROOT)
    found = []
    if path.suffix == ".md":
        found += violations(path.read_text(), str(rel))
    else:
        for label, text in _texts(path):
            found += violations(text, f"{rel} {label}")
    assert not found, "the other direction, or a second peak:\n" + "\n".join(found)


def test_bench_table_headers_use_the_time_direction():
    """The headers the bench modules print: a time ratio against SDPA, a % of the datasheet peak."""
    from flashtutor.bench import ch05, ch06, ch07, tables
    from flashtutor.roofline import datasheet_peaks
    row = {"problem": "B1 H16 S1024 D64", "step": "mine", "median_us": 20.0, "spread": 0.02,
           "time_vs_sdpa": 1.25, "pct_floor": 30.0, "graph_us": 18.0, "graph_vs_sdpa": 1.2}
    heads = [tables.markdown([row], columns=("median", "vs SDPA", "graph vs SDPA", "% floor")).splitlines()[0],
             ch06.rows_markdown([]).splitlines()[0],
             ch07.table([], datasheet_peaks("NVIDIA H100 80GB HBM3")).splitlines()[0],
             ch07.gains_table([]).splitlines()[0],
             ch05.gemm_table([]).splitlines()[0]]
    assert "time / SDPA" in heads[0] and "graph time / SDPA" in heads[0]
    assert "% of peak (989)" in heads[2]
    for h in heads:
        assert not violations(h, "header"), h
    text = "\n".join(heads)
    assert "| vs SDPA |" not in text                      # ambiguous: which way does the ratio go?


@pytest.mark.parametrize("bad", [
    "Speed against SDPA (SDPA's time over the kernel's) and the chapter's target:",
    "speed = SDPA's time / the kernel's time (> 1: faster than SDPA)",
    "the tuned kernel meets 0.9× SDPA's speed at 7 of 10 shapes",
    "| problem | teach/SDPA | SDPA/tuned |",
    "18% of SDPA's speed (SDPA 16.1 µs, 3-kernel 87.2 µs)",
    "a good kernel can be 5× faster\n  than SDPA at B32",                   # wrapped over two lines
    "the kernel reaches 98% of SDPA",
    "% of matmul peak (765)",
    "2× that is 112%–160% of the measured peak (765 TFLOP/s)",
    "SDPA reached 82% of the 765 TFLOP/s peak",
    "r['speed_vs_sdpa']['tuned']",
    "| product · shape | configuration | µs | TFLOP/s | TB/s | % of cuBLAS |",     # chapter 5's table, before
])
def test_the_scan_catches_the_other_direction(bad):
    found = violations("a first line\n" + bad, "sample.md")
    assert found and all(f.startswith("sample.md:2:") for f in found), found


@pytest.mark.parametrize("good", [
    "the tuned kernel took 0.88× SDPA's time (below 1: faster than SDPA)",
    "the target is ≤ 1.11× SDPA's time",
    "| problem | teaching / SDPA | tuned / SDPA |",
    "21.4–26.2× faster than chapter 1's reference",                      # a speed-up between course kernels
    "616 TFLOP/s = 62% of peak (989 TFLOP/s, H100 SXM datasheet)",
    "a large fp16 GEMM reached 748 TFLOP/s = 76% of peak on this H100 SXM",
    "1.02× SDPA's time",
    "the HBM floor is 59% of SDPA's graph-replayed time",                # a time over a time
    "| `001` | “1.51× faster than FlashAttention-3” | took 3.71× its time |",   # a quoted claim, tested
    "| product · shape | configuration | µs | TFLOP/s | TB/s | time ÷ cuBLAS |",   # chapter 5's table, now
])
def test_the_scan_lets_the_convention_through(good):
    assert violations(good, "sample.md") == []
