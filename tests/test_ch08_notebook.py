"""Chapter 8's notebooks (chapters/08_backward/backward.ipynb and its sections): in the book after chapter 7,
showing its diagrams, whose contents are the solution's, with stored tables that are still those of the results
files they read.

tests/test_book.py runs the notebook under nbval and builds the book; tests/test_diagrams.py checks the SVGs
against book/diagrams/ch08.py and their text sizes. This file checks what those do not, for chapter 8 only.
CPU only, well under a second.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "chapters" / "08_backward" / "backward.ipynb"
DIAGRAMS = ROOT / "book" / "diagrams"
SOLUTION = ROOT / "solutions" / "08_backward" / "attention.py"
TIME_LOG = ROOT / "results" / "ch08-time-h100-2026-11-27-b-partial.log"
LATER_LOG = ROOT / "results" / "ch08-time-h100-2026-11-27-d.log"   # 8a, 8c and 8d in one run: the later section
FINAL_LOG = ROOT / "results" / "ch08-time-h100-2026-11-27-e.log"   # 8a and 8d after 8d's last change: target 2
TRAIN = ROOT / "results" / "ch08-train-h100-2026-11-27-c.json"     # swept tiles, then the interleaved pairs


def _cells():
    """The cells of the chapter's page and of its sections' pages (the notebooks of its folder)."""
    pages = sorted(NOTEBOOK.parent.glob("*.ipynb"))                 # backward.ipynb before backward_…
    return [c for page in pages for c in json.loads(page.read_text(encoding="utf-8"))["cells"]]


def _outputs(cell) -> str:
    text = []
    for o in cell.get("outputs", []):
        text.append("".join(o.get("text", "")))
        text.append("".join(o.get("data", {}).get("text/markdown", "")))
    return "".join(text)


def _diagram_module():
    if str(DIAGRAMS) not in sys.path:
        sys.path.insert(0, str(DIAGRAMS))         # ch08.py imports `style` from its own folder
    spec = importlib.util.spec_from_file_location("test_ch08_notebook_diagrams", DIAGRAMS / "ch08.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_toc_lists_chapter_8_after_chapter_7():
    files = [m.group(1) for m in re.finditer(r"^\s*-\s*file:\s*(\S+)", (ROOT / "_toc.yml").read_text(), re.M)]
    assert "chapters/08_backward/backward" in files
    last_of_7 = max(i for i, f in enumerate(files) if f.startswith("chapters/07_"))     # chapter 7 or its last section
    assert files.index("chapters/08_backward/backward") == last_of_7 + 1


def test_code_lines_fit_the_page():
    for i, cell in enumerate(_cells()):
        if cell["cell_type"] == "code":
            long = [line for line in "".join(cell["source"]).splitlines() if len(line) > 100]
            assert not long, f"cell {i}: {long}"


def test_every_code_cell_has_run():
    """Executed on a CPU at least: every code cell has an execution count and no error output. A hidden cell with no
    output that a section page added after the run (its imports and helpers, tagged remove-cell) has none: nbval runs
    it in the CPU tier."""
    for i, cell in enumerate(_cells()):
        added = "remove-cell" in cell.get("metadata", {}).get("tags", []) and not cell.get("outputs")
        if cell["cell_type"] == "code" and not added:
            assert cell.get("execution_count"), f"cell {i} was not executed"
            assert not any(o.get("output_type") == "error" for o in cell.get("outputs", [])), f"cell {i}"


def test_the_chapter_shows_its_diagrams_with_captions():
    shown = set()
    for cell in _cells():
        if "diagram" in cell.get("metadata", {}).get("tags", []):
            src = "".join(cell["source"])
            for rel, name in re.findall(r"\]\((\.\./\.\./book/diagrams/svg/(ch08_[\w-]+)\.svg)\)", src):
                assert (NOTEBOOK.parent / rel).resolve().is_file(), rel
                assert len(src.split(")", 1)[1].strip()) > 40, f"no caption under {name}"
                shown.add(name)
    drawn = set(_diagram_module().DIAGRAMS)
    assert drawn and drawn == shown, (sorted(drawn), sorted(shown))


def test_the_data_flow_is_the_solutions():
    """Every tensor the diagram says a kernel reads or writes is a pointer argument of that kernel."""
    flow = _diagram_module().FLOW
    src = SOLUTION.read_text(encoding="utf-8")
    kernels = ["fwd_kernel", "bwd_preprocess_kernel", "bwd_dkdv_kernel", "bwd_dq_kernel"]
    args = {}
    for k in kernels:
        m = re.search(rf"def {k}\((.*?)\):", src, re.S)
        args[k] = set(re.findall(r"\b([A-Z][A-Z_]*)\b", re.sub(r"#[^\n]*", "", m.group(1))))
    names = {"Q": {"Q"}, "K": {"K"}, "V": {"V"}, "O": {"O"}, "lse": {"LSE"}, "dO": {"DO"}, "delta": {"DELTA"},
             "dQ": {"DQ"}, "dK, dV": {"DK", "DV"}}
    for tensor, cells in flow.items():
        if tensor not in names:
            continue                                     # P, dP, dS: on chip only, no argument
        for kernel, cell in zip(kernels, cells):
            present = names[tensor] <= args[kernel]
            assert present == (cell is not None), (tensor, kernel, cell, sorted(args[kernel]))


def test_the_diagram_sizes_are_the_notebooks():
    ch08 = _diagram_module()
    sizes = ch08.sizes()
    out = next(_outputs(c) for c in _cells() if "Q, K, V, O (fp16)" in "".join(c["source"]))
    row = re.search(rf"B{ch08.B} H{ch08.H} S{ch08.S} D{ch08.D}\s+([\d.]+) MB\s+([\d.]+) MB\s+([\d.]+) GB", out)
    assert row, out
    qkvo, lse, p = (float(x) for x in row.groups())
    assert round(4 * sizes["tensor"] / 1e6, 1) == qkvo and round(sizes["rows"] / 1e6, 1) == lse
    assert round(sizes["p"] / 1e9, 2) == p


def test_stored_tables_are_the_results_files():
    """Every backward time of the H100 log is in the stored table (re-run the notebook when the log changes), and
    the training table holds the JSON's losses and step times."""
    text = "".join(_outputs(c) for c in _cells())
    for line in TIME_LOG.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s+bwd\s+(B\d+ H\d+) S\s*(\d+) (D\d+)( causal)?\s+(\S+)\s+([\d.]+) µs", line)
        if m:
            b_h, s, d, causal, who, us = m.groups()
            shape = f"{b_h} S{s} {d}".replace(" ", "\u00a0") + (causal or "")
            assert f"| {shape} | {who} | {float(us) / 1e3:.2f} ms |" in text, line
    run = json.loads(TRAIN.read_text())
    for name, loss in run["summary"]["final_loss_mean_of_last_10pct"].items():
        assert f"{loss:.4f}" in text and f"{run['summary']['median_step_ms'][name]:.1f} ms" in text, name
    assert f"{run['summary']['gap']:+.4f}" in text


def _bwd_lines(path):
    """{shape as the page's tables write it: {who: µs}} of a ch08_gpu log's backward-alone lines."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s+bwd\s+(B\d+ H\d+) S\s*(\d+) D\s*(\d+)( causal)?\s+(\S+)\s+([\d.]+) µs\s+([\d.]+) TFLOP/s",
                     line)
        if m:
            b_h, s, d, causal, who, us, tf = m.groups()
            shape = f"{b_h} S{s} D{d}".replace(" ", "\u00a0") + (causal or "")
            out.setdefault(shape, {})[who] = (float(us), float(tf))
    return out


def test_the_later_run_s_table_and_target_are_its_log():
    """The later section's table holds every backward time of steps 8a, 8c and 8d in the -d log with its ratios to
    both SDPA backends; the targets cell names the fastest step there at every D = 128 shape; the checks cell counts
    the log's verdicts."""
    text = "".join(_outputs(c) for c in _cells())
    flat = " ".join(text.split())
    shapes = _bwd_lines(LATER_LOG)
    assert len(shapes) == 8
    for shape, by in shapes.items():
        cudnn, flash = by["SDPA-cudnn"][0], by["SDPA-flash"][0]
        for who in ("8a", "8c", "8d"):
            us, tf = by[who]
            assert f"| {shape} | {who} | {us:.1f} | {tf:.0f} | {us / cudnn:.2f} | {us / flash:.2f} |" in text, \
                (shape, who)
    d128 = {s: by for s, by in shapes.items() if "D128" in s}
    best = {min(("8a", "8c", "8d"), key=lambda w: by[w][0]) for by in d128.values()}
    assert best == {"8d"}, best
    assert "the fastest of 8a, 8c, 8d at every D = 128 shape: step 8d" in flat
    log = LATER_LOG.read_text(encoding="utf-8")
    ok, failed = len(re.findall(r" vs (?:CUDNN|FLASH): ok ", log)), len(re.findall(r" vs (?:CUDNN|FLASH): FAIL", log))
    assert f"{LATER_LOG.relative_to(ROOT)} (" in text and f"{ok} ok, {failed} failed" in flat and failed == 0


def test_the_final_run_s_target_is_its_results_file():
    """The targets cell checks target 2 on step 8d in the final run (-e), from its JSON: per D = 128 shape, met or
    missed and by how much; at every shape 8d's and 8a's time over cuDNN's, 8a's over 8d's and 8d's in the -d log;
    the checks cell counts the final log's verdicts (none failed)."""
    text = "".join(_outputs(c) for c in _cells())
    flat = " ".join(text.split())
    recs = json.loads(FINAL_LOG.with_suffix(".json").read_text())["records"]
    checks = [r for r in recs if r["kind"] == "check"]
    assert not [r for r in checks if not r["ok"]]
    assert (f"{FINAL_LOG.name}, times from {FINAL_LOG.with_suffix('.json').name} (the final run: 8a and 8d after "
            f"8d's last change; {len(checks)} checks, 0 failed):") in flat
    log = FINAL_LOG.read_text(encoding="utf-8")
    ok, failed = len(re.findall(r" vs (?:CUDNN|FLASH): ok ", log)), len(re.findall(r" vs (?:CUDNN|FLASH): FAIL", log))
    assert ok == len(checks) and failed == 0
    assert f"{FINAL_LOG.relative_to(ROOT)} (" in text and f"{ok} ok, 0 failed" in flat
    us = {}
    for r in recs:
        if r["kind"] == "time" and r["mode"] == "bwd":
            shape = f"B{r['B']} H{r['H']} S{r['S']} D{r['D']}" + (" causal" if r["causal"] else "")
            us.setdefault(shape, {})[r["step"]] = r["median_us"]
    assert len(us) == 8
    logged = {s.replace("\u00a0", " "): by for s, by in _bwd_lines(FINAL_LOG).items()}
    for shape, by in us.items():                        # the log prints the JSON's times
        assert all(abs(logged[shape][w][0] - t) < 0.051 for w, t in by.items()), shape
    before = {s.replace("\u00a0", " "): by for s, by in _bwd_lines(LATER_LOG).items()}
    verdicts = []
    for shape, by in us.items():
        x, a = by["8d"] / by["SDPA-cudnn"], by["8a"] / by["SDPA-cudnn"]
        d = before[shape]["8d"][0] / before[shape]["SDPA-cudnn"][0]
        line = f"{shape} 8d {x:.2f}, 8a {a:.2f}, 8a / 8d {by['8a'] / by['8d']:.2f}; in -d: {d:.2f}"
        assert line in flat, line
        if "D128" in shape:
            verdict = (f"met ({0.9 * x:.2f}× the time allowed)" if 0.9 * x <= 1 else
                       f"missed by {100 * (0.9 * x - 1):.0f} % ({0.9 * x:.2f}× the time allowed)")
            assert f"{shape} {x:.2f} — {verdict}" in flat, (shape, verdict)
            verdicts.append((shape.endswith("causal"), 0.9 * x <= 1))
    assert sorted(verdicts) == [(False, False), (False, False), (True, True), (True, True)], verdicts


def interleaved_summary(timing):
    """The interleaved timing's medians and p10–p90 recomputed from its per-step times, the way
    scripts/ch08_train.py computes them (the sorted list's element at int(f · n); ratios 8a / SDPA per pair)."""
    def q(xs, f):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(f * len(xs)))]
    rec = timing["runs"]
    a, b = list(rec)                                    # "sdpa", then the chapter's step
    out = {}
    for kind in ("wall_ms", "event_ms"):
        ratios = [y / x for x, y in zip(rec[a][kind], rec[b][kind])]
        out[kind] = {n: {"median": q(rec[n][kind], 0.5), "p10": q(rec[n][kind], 0.1), "p90": q(rec[n][kind], 0.9)}
                     for n in (a, b)}
        out[kind]["pair_ratio"] = {"median": q(ratios, 0.5), "p10": q(ratios, 0.1), "p90": q(ratios, 0.9)}
    return out


def test_the_printed_interleaved_timing_is_the_results_file():
    """The page prints the training run's interleaved step times (CUDA events and wall time: medians, p10–p90, the
    per-pair ratio) as the JSON holds them, and the JSON's figures are those of its own per-step times."""
    run = json.loads(TRAIN.read_text())
    timing, step = run["interleaved"], run["config"]["step"]
    assert len(timing["runs"]["sdpa"]["event_ms"]) == len(timing["runs"][step]["event_ms"]) == timing["pairs"]
    mine = interleaved_summary(timing)
    for kind in ("wall_ms", "event_ms"):
        for who, stats in mine[kind].items():
            for k, v in stats.items():
                assert abs(v - timing[kind][who][k]) < 1e-12, (kind, who, k)
    text = " ".join("".join(_outputs(c) for c in _cells()).split())      # docs.wrap's line breaks as spaces
    assert f"interleaved: {timing['pairs']} pairs of steps" in text
    for kind in ("event_ms", "wall_ms"):
        t = mine[kind]
        line = (f"{kind[:-3]} time per step: "
                + ", ".join(f"{'SDPA' if n == 'sdpa' else n} {t[n]['median']:.2f} ms (p10–p90 "
                            f"{t[n]['p10']:.2f}–{t[n]['p90']:.2f})" for n in ("sdpa", step))
                + f"; {step} / SDPA per pair {t['pair_ratio']['median']:.3f} (p10–p90 "
                  f"{t['pair_ratio']['p10']:.3f}–{t['pair_ratio']['p90']:.3f})")
        assert line in text, line
    ratio = mine["event_ms"]["pair_ratio"]["median"]
    verdict = "met" if ratio <= 1.10 else "missed"
    assert (f"training step time, {step} / SDPA per pair (median, CUDA events): {ratio:.3f} — "
            f"target at most 1.10: {verdict}") in text
