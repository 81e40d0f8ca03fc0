"""The book's measured charts are legible: every one is drawn here with small fake data (no GPU) and checked.

* every text of the figure (titles, axis labels, tick labels, legend entries, annotations, cell values,
  colour-bar labels, the environment line) shows at least plots.MIN_FONT_PT points on the page: a
  figure wider than the book's content column (plots.MAX_WIDTH_IN) is scaled down to it, its text with
  it; the width is the larger of the figure's and what a ``bbox_inches="tight"`` save keeps (Jupyter's
  inline backend saves that way), so text sticking out of the figure counts too;
* no legend covers data: its box, as the renderer draws it, meets no plotted line, marker, bar, span,
  image or text of any axes, and no tick label, axis label or title;
* a chart is titled by what it shows and captioned with where it was measured: its title, over all the
  panels, is one line of at most plots.TITLE_MAX_CHARS characters with no environment in it; the
  environment line (GPU, versions, date) is a caption under every panel and under any legend placed
  below them, inside the figure and inside what a tight save keeps; neither the title nor the caption
  overlaps another text or a legend, and no chart puts the environment line above its panels;
* the chart cells of the chapter notebooks draw through these functions (no figure size or font size
  of their own), and the cells that only plot are run here with fake rows.

Each check has a negative control: a deliberately bad figure it must flag.
CPU only, a few seconds.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.legend import Legend  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from flashtutor import plots  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ENV = ("NVIDIA H100 80GB HBM3 · torch 2.11.0+cu130 · cuDNN 9.19.0 · triton 3.6.0 · driver 580.159.04 · "
       "2026-11-23 22:06 UTC")


# ------------------------------------------------------------------------------------ the checks ---
def shown_width_in(fig) -> float:
    """How wide the figure is as saved for the page: the figure, or its tight box (+ the 0.1-inch pad
    of a tight save) when something sticks out of it."""
    fig.canvas.draw()
    tight = fig.get_tightbbox(fig.canvas.get_renderer())
    return max(fig.get_figwidth(), tight.width + 0.2)


def _texts(fig):
    """Every visible, non-empty Text of the figure (subfigures, axes, axis, legends, colour bars)."""
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def small_texts(fig, min_pt: float = plots.MIN_FONT_PT) -> list[tuple[float, str]]:
    """(size shown on the page, text) of every text below `min_pt` as shown."""
    width = shown_width_in(fig)
    out = []
    for t in _texts(fig):
        shown = plots.shown_pt(t.get_fontsize(), width)
        if shown < min_pt - 1e-6:
            out.append((round(shown, 2), t.get_text()))
    return out


def _drawn_tick_labels(axis):
    lo, hi = sorted(axis.get_view_interval())
    return [tick.label1 for tick in axis.get_major_ticks() + axis.get_minor_ticks()
            if tick.label1.get_visible() and tick.label1.get_text().strip()
            and lo - 1e-9 * abs(hi - lo) <= tick.get_loc() <= hi + 1e-9 * abs(hi - lo)]


def _line_hits(line, box: Bbox) -> bool:
    """Does the drawn line (its path, or its markers) meet `box` (display coordinates)?"""
    path = line.get_transform().transform_path(line.get_path())
    if len(path.vertices) == 0:
        return False
    if line.get_linestyle() not in ("None", "none", "", " ") and len(path.vertices) > 1 \
            and path.intersects_bbox(box, filled=False):
        return True
    if line.get_marker() not in (None, "None", "none", "", " "):
        r = line.get_markersize() * line.figure.dpi / 72.0 / 2
        grown = Bbox.from_extents(box.x0 - r, box.y0 - r, box.x1 + r, box.y1 + r)
        return any(grown.contains(x, y) for x, y in path.vertices if math.isfinite(x) and math.isfinite(y))
    return False


def legend_overlaps(fig) -> list[tuple[str, str]]:
    """(legend, what it covers) for every legend box that meets plotted data or a label of any axes."""
    fig.canvas.draw()
    legends = [lg for lg in fig.findobj(Legend) if lg.get_visible()]
    out = []
    for lg in legends:
        box = lg.get_window_extent()
        name = "legend[" + ", ".join(t.get_text() for t in lg.get_texts())[:40] + "]"
        own = set(lg.get_texts())
        for ax in fig.findobj(Axes):
            if not ax.get_visible():
                continue
            inside = Bbox.intersection(box, ax.bbox)        # data is clipped to its axes
            if inside is not None and inside.width > 0 and inside.height > 0:
                for line in ax.lines:
                    if line.get_visible() and _line_hits(line, inside):
                        out.append((name, f"line {line.get_label()!r}"))
                for p in list(ax.patches) + list(ax.images) + list(ax.collections):
                    if p.get_visible():
                        ext = p.get_window_extent()
                        if ext.width > 0 and ext.height > 0 and ext.overlaps(inside):
                            out.append((name, f"{type(p).__name__} {p.get_label()!r}"))
            texts = list(ax.texts) + [ax.title, ax.xaxis.label, ax.yaxis.label]
            texts += _drawn_tick_labels(ax.xaxis) + _drawn_tick_labels(ax.yaxis)
            for t in texts:
                if t in own or not t.get_visible() or not t.get_text().strip():
                    continue
                if t.get_window_extent().overlaps(box):
                    out.append((name, f"text {t.get_text()!r}"))
    return out


def assert_legible(fig):
    small = small_texts(fig)
    assert not small, f"text below {plots.MIN_FONT_PT} pt on the page (figure {shown_width_in(fig):.2f} in wide): {small}"
    covered = legend_overlaps(fig)
    assert not covered, f"legends over data or labels: {covered}"


# The environment line, as any chart prints it: a GPU's name, a library's version, a date.
ENV_MARKS = re.compile(r"NVIDIA|torch \d|triton \d|cuDNN \d|driver \d|\d{4}-\d\d-\d\d")


def _panels(fig) -> list[Bbox]:
    """The display box of every visible axes with everything drawn around it (tick labels, axis labels,
    its title, a legend anchored to it)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [ax.get_tightbbox(renderer) for ax in fig.findobj(Axes) if ax.get_visible() and ax.get_in_layout()]


def _figure_legends(fig) -> list[Legend]:
    return [lg for lg in fig.findobj(Legend) if lg.get_visible() and lg in getattr(lg.figure, "legends", [])]


def _above(box: Bbox, panels) -> bool:
    return all(box.y0 >= p.y1 - 0.5 for p in panels)


def _below(box: Bbox, panels) -> bool:
    return all(box.y1 <= p.y0 + 0.5 for p in panels)


def _tick_labels(fig) -> set[int]:
    """ids of every tick label (drawn or not: one outside the view is kept, undrawn, at its place)."""
    return {id(t) for ax in fig.findobj(Axes) for axis in (ax.xaxis, ax.yaxis)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks() for t in (tick.label1, tick.label2)}


def chart_titles(fig) -> list[Text]:
    """The texts over all the panels (the chart's title, whatever drew it)."""
    panels, ticks = _panels(fig), _tick_labels(fig)
    return [t for t in _texts(fig) if id(t) not in ticks and _above(t.get_window_extent(), panels)]


def title_problems(fig) -> list[str]:
    """What is wrong with the texts over the panels: more than one, more than one line, longer than
    plots.TITLE_MAX_CHARS, the environment line in it."""
    out = []
    titles = chart_titles(fig)
    if len(titles) > 1:
        out.append(f"{len(titles)} texts over the panels: {[t.get_text() for t in titles]}")
    for t in titles:
        text = t.get_text()
        if "\n" in text.strip():
            out.append(f"title of {text.count(chr(10)) + 1} lines: {text!r}")
        if len(text) > plots.TITLE_MAX_CHARS:
            out.append(f"title of {len(text)} characters: {text!r}")
        if ENV_MARKS.search(text):
            out.append(f"the environment in the title: {text!r}")
    return out


def caption_problems(fig, marker: str = "torch 2.11.0") -> list[str]:
    """Where the texts holding `marker` (the environment line) are not: under every panel and every
    figure legend, inside the figure and inside its tight box (what a tight save keeps)."""
    panels = _panels(fig)
    legends = [lg.get_window_extent() for lg in _figure_legends(fig)]
    tight = fig.get_tightbbox(fig.canvas.get_renderer())          # inches
    out = []
    found = [t for t in _texts(fig) if marker in t.get_text()]
    if not found:
        return [f"no text holds {marker!r}"]
    for t in found:
        box = t.get_window_extent()
        name = repr(t.get_text()[:40])
        if not _below(box, panels):
            out.append(f"{name} is not under every panel")
        if not _below(box, legends):
            out.append(f"{name} is not under the legends below the panels")
        if box.y0 < -0.5 or box.x0 < -0.5 or box.x1 > fig.bbox.x1 + 0.5 or box.y1 > fig.bbox.y1 + 0.5:
            out.append(f"{name} sticks out of the figure")
        inches = Bbox(box.get_points() / fig.dpi)
        if not (tight.x0 - 1e-3 <= inches.x0 and inches.x1 <= tight.x1 + 1e-3
                and tight.y0 - 1e-3 <= inches.y0 and inches.y1 <= tight.y1 + 1e-3):
            out.append(f"{name} is outside what a tight save keeps")
    return out


def text_overlaps(fig, texts) -> list[tuple[str, str]]:
    """(text, what it meets) for each of `texts` that overlaps another visible text or a legend."""
    fig.canvas.draw()
    texts = [t for t in texts if t is not None]
    legends = [lg for lg in fig.findobj(Legend) if lg.get_visible()]
    own = {id(t) for lg in legends for t in lg.get_texts()} | {id(lg.get_title()) for lg in legends}
    ticks = _tick_labels(fig)
    out = []
    for t in texts:
        box = t.get_window_extent()
        drawn = {id(x) for ax in fig.findobj(Axes) for axis in (ax.xaxis, ax.yaxis) for x in _drawn_tick_labels(axis)}
        for other in _texts(fig):
            if other is t or id(other) in own or (id(other) in ticks and id(other) not in drawn):
                continue
            if box.overlaps(other.get_window_extent()):
                out.append((t.get_text()[:40], f"text {other.get_text()[:40]!r}"))
        for lg in legends:
            if box.overlaps(lg.get_window_extent()):
                out.append((t.get_text()[:40], "a legend"))
    return out


def assert_titled_and_captioned(fig, *, titled: bool = True, marker: str | None = "torch 2.11.0"):
    problems = title_problems(fig)
    assert not problems, problems
    titles = chart_titles(fig)
    if titled:
        assert titles, "no title over the panels"
    captions = [t for t in _texts(fig) if marker and marker in t.get_text()]
    if marker:
        problems = caption_problems(fig, marker)
        assert not problems, problems
    met = text_overlaps(fig, titles + captions)
    assert not met, f"the title or the caption overlaps: {met}"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ------------------------------------------------------------------------- negative controls ---
def test_small_text_is_flagged():
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    ax.plot([1, 2, 3], [1, 4, 9])
    ax.set_title("a seven-point title", fontsize=7)
    ax.tick_params(labelsize=9)
    assert small_texts(fig) == [(7.0, "a seven-point title")]


def test_wide_figure_shrinks_its_text():
    fig, ax = plt.subplots(figsize=(12.0, 3.0))
    ax.plot([1, 2, 3], [1, 4, 9])
    ax.set_xlabel("ten points, shown at 6.25", fontsize=10)
    ax.tick_params(labelsize=10)
    assert (6.25, "ten points, shown at 6.25") in small_texts(fig)
    fig.set_figwidth(7.5)
    assert not [t for _, t in small_texts(fig) if t == "ten points, shown at 6.25"]


def test_text_sticking_out_widens_the_figure():
    fig, ax = plt.subplots(figsize=(7.4, 3.0))
    ax.plot([1, 2, 3], [1, 4, 9])
    ax.tick_params(labelsize=9.2)
    ax.annotate("a long note that runs far past the right edge of the figure", (3, 9), fontsize=9.2)
    assert shown_width_in(fig) > 7.6
    assert small_texts(fig)


def test_legend_over_a_line_is_flagged():
    fig, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.plot(range(10), [5] * 10, label="flat line through the middle")
    ax.legend(loc="center", fontsize=10)
    assert any("line" in what for _, what in legend_overlaps(fig))


def test_legend_over_markers_only_is_flagged():
    fig, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.plot([0, 5, 10], [0, 5, 0], "o", ms=8, label="markers")      # no line: only the marker at (5, 5)
    ax.set_xlim(-1, 11)
    ax.set_ylim(-1, 6)
    lg = ax.legend(loc="upper center", fontsize=10)
    assert legend_overlaps(fig), lg.get_window_extent()


def test_legend_over_bars_is_flagged():
    fig = plots.grouped_bars(["a", "b", "c"], {"x": [25, 100, 1000], "y": [28, 200, 2000]}, ylabel="µs")
    ax = fig.axes[0]
    ax.legend(loc="upper left", fontsize=10)         # inside, over the first group: its bars reach the top
    ax.set_ylim(5, 30)
    assert any("Rectangle" in what for _, what in legend_overlaps(fig))


def test_legend_over_tick_labels_is_flagged():
    fig, ax = plt.subplots(figsize=(6.0, 3.0))
    ax.plot([1, 2, 3], [1, 4, 9], label="y")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), fontsize=10)     # right on the x tick labels
    assert any("text" in what for _, what in legend_overlaps(fig))


def test_a_legend_clear_of_data_passes():
    fig, ax = plots.figure(height=3.0)
    ax.plot(range(10), [5] * 10, label="line")
    plots.legend(ax)
    assert_legible(fig)


def test_the_environment_above_the_panels_is_flagged():
    """The old convention: the environment line as a figure title over the panels."""
    fig, ax = plots.figure(height=3.0)
    ax.plot([1, 2, 3], [1, 4, 9])
    fig.suptitle(ENV, fontsize=9)
    assert caption_problems(fig) and any("environment" in p for p in title_problems(fig))


def test_a_caption_among_the_panels_is_flagged():
    fig, (a, b) = plots.figure(2, 1, height=4.0)
    a.plot([1, 2, 3], [1, 4, 9])
    b.plot([1, 2, 3], [1, 4, 9])
    fig.text(0.0, 0.48, ENV, fontsize=9)                         # between the two panels
    assert any("not under every panel" in p for p in caption_problems(fig))


def test_a_caption_over_a_legend_below_is_flagged():
    fig, ax = plots.figure(height=3.0)
    ax.plot([1, 2, 3], [1, 4, 9], label="y")
    fig.legend(loc="outside lower center")                       # matplotlib's own slot, not the caption's
    fig.text(0.5, 0.0, ENV, fontsize=9, ha="center", va="bottom")
    problems = caption_problems(fig) + [w for _, w in text_overlaps(fig, [t for t in _texts(fig) if "torch" in t.get_text()])]
    assert problems


def test_a_long_or_wrapped_title_is_flagged():
    fig, ax = plots.figure(height=3.0)
    ax.plot([1, 2, 3], [1, 4, 9])
    plots.title(fig, "a title that goes on and on about what the chart shows, well past seventy characters")
    assert any("characters" in p for p in title_problems(fig))
    plots.title(fig, "a title\non two lines")
    assert any("lines" in p for p in title_problems(fig))
    plots.title(fig, "Time per call as S grows")
    assert title_problems(fig) == []


def test_a_title_over_a_label_is_flagged():
    fig, ax = plots.figure(height=2.0)
    ax.plot([1, 2, 3], [1, 4, 9])
    ax.set_ylabel("a y label far too long for the height of these axes to hold", fontsize=10)
    title = fig.text(0.0, 0.5, "a title in the wrong place", fontsize=11, va="center")
    assert text_overlaps(fig, [title])


def test_env_line_is_the_caption():
    """The older name still works (the notebooks call it) and draws the caption, once."""
    fig, ax = plots.figure(height=3.0)
    ax.plot([1, 2, 3], [1, 4, 9], label="y")
    plots.legend(ax, where="below")
    plots.env_line(fig, "an older line")
    plots.env_line(fig, ENV)
    assert_titled_and_captioned(fig, titled=False)
    assert not [t for t in _texts(fig) if "an older line" in t.get_text()]


def test_caption_on_a_figure_not_made_here():
    """A figure of plt.subplots (no layout): the caption still goes under the panels."""
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    ax.plot([1, 2, 3], [1, 4, 9])
    ax.set_xlabel("x")
    plots.title(fig, "A chart drawn elsewhere")
    plots.caption(fig, ENV)
    assert_titled_and_captioned(fig)


# ------------------------------------------------------------------------------- fake data -----
def _sweep_rows(scale=1.0):
    from flashtutor.bench import ch04
    rows = []
    for i, c in enumerate(ch04.all_configs()):
        ok = i % 7 != 3
        us = scale * (20 + (i * 37) % 41) if ok else float("nan")
        rows.append({**c.kwargs(), "label": c.label, "ok": ok, "us": us})
    return rows


def _vs_sdpa_table():
    names = ["B1 H16 S1024 D64", "B1 H16 S1024 D64 causal", "B4 H32 S4096 D128", "B2 H32 S16384 D64",
             "B2 H32 S16384 D128 causal"]
    return [{"problem": n, "time_vs_sdpa": {"teaching": 1.45 - 0.05 * i, "tuned, one config": 1.18 - 0.02 * i,
                                            "tuned": 1.05 - 0.03 * i}} for i, n in enumerate(names)]


def _crossover_rows():
    rows = []
    for S in (512, 1024, 2048, 4096, 8192, 16384):
        base = (S / 512) ** 2
        for name, t in (("3-kernel (reference)", 30 * base ** 0.8), ("ch4 Triton (Hopper)", 20 * base),
                        ("SDPA", 12 * base)):
            rows.append({"S": S, "kernel": name, "us": t, "basis": "graph"})
    return rows


def _memory_rows():
    return [{"S": S, "fits_l2": S <= 1024, "l2_bytes": 50 * 2**20} for S in (512, 1024, 2048, 4096, 8192, 16384)]


def _per_seq_rows():
    rows = []
    steps = ("ch4 teaching", "ch4 tuned", "multihead", "split-KV", "solution", "SDPA")
    for S in (128, 256, 512):
        for B in (8, 16, 32):
            for i, step in enumerate(steps):
                us = (S / 128) * (0.5 + 0.05 * i) * (1 + 8 / B)
                rows.append({"problem": f"B{B} H16 S{S} D64", "B": B, "S": S, "step": step,
                             "graph_us_per_seq": us, "floor": {"memory_us": 0.3 * S / 128 * B}})
    rows.append({"problem": "B1 H16 S1024 D64", "B": 1, "S": 1024, "step": "SDPA", "graph_us_per_seq": 9.0,
                 "floor": {"memory_us": 3.0}})
    return rows


def _launch_rows():
    rows = [{"call": "torch.add, 1K floats (eager)", "group": "PyTorch", "n_args": 2, "issue_us": 11.0,
             "gpu_us": 2.0, "graph_node_us": 1.1}]
    for n, us in ((1, 17.0), (4, 19.0), (16, 30.0), (32, 43.0)):
        rows.append({"call": f"Triton empty kernel, {n} arg{'s' if n > 1 else ''}", "group": "Triton", "n_args": n,
                     "issue_us": us, "gpu_us": 1.8, "graph_node_us": 1.0})
    rows += [{"call": "cuda.core, flashtutor loader", "group": "cuda.core", "n_args": 1, "issue_us": 26.0,
              "gpu_us": 1.8, "graph_node_us": 1.0},
             {"call": "cuda.core.launch, prepared", "group": "cuda.core", "n_args": 1, "issue_us": 5.8, "gpu_us": 1.8},
             {"call": "SDPA (cudnn), B1 H16 S1024 D64", "group": "SDPA", "n_args": 3, "issue_us": 31.0,
              "gpu_us": 15.0, "graph_node_us": 15.2},
             {"call": "graph replay, 1 node (Triton empty kernel)", "group": "graph", "n_args": 1, "issue_us": 5.2,
              "gpu_us": 2.0},
             {"call": "broken", "group": "Triton", "n_args": 2, "error": "ZeroDivisionError"}]
    return rows


SHAPES = ["B1 H16 S1024 D64"] + [f"B{B} H16 S{S} D64" for S in (128, 256, 512) for B in (8, 16, 32)]


def _steps_rows(steps):
    rows = []
    for j, p in enumerate(SHAPES + ["B1 H16 S1024 D64 causal"]):
        for i, s in enumerate(steps):
            rows.append({"problem": p, "step": s, "median_us": 10.0 * (1 + j) * 3.0 ** (len(steps) - i)})
    rows.append({"problem": SHAPES[0], "step": "broken step", "error": "wrong"})
    return rows


CH02_STEPS = ["ch1 reference", "a coalesced", "b smem tiles", "c online softmax", "SDPA"]
CH03_STEPS = ["ch1 reference", "ch2 online softmax", "a wmma", "b + cp.async", "c + padding", "SDPA"]


# ------------------------------------------------------------------------- every chart function ---
def _chart_heatmap():
    from flashtutor.bench import ch04
    return ch04.heatmap(_sweep_rows(), title="teaching kernel, B1 H16 S1024 D64: median µs").figure


def _chart_heatmaps():
    from flashtutor.bench import ch04
    return ch04.heatmaps({"B1 H16 S1024 D64": _sweep_rows(), "B4 H32 S4096 D128": _sweep_rows(100.0)}, env=ENV)


def _chart_vs_sdpa():
    from flashtutor.bench import ch04
    return ch04.plot_vs_sdpa(_vs_sdpa_table(), env=ENV)


def _chart_crossover():
    from flashtutor.bench import ch05
    rows = _crossover_rows()
    assert ch05.crossings(rows), "the fake data should cross, to draw the crossover's line and note"
    return ch05.plot_crossover(rows, _memory_rows(), env=ENV).figure


def _chart_per_seq():
    from flashtutor.bench import ch06
    return ch06.plot_per_seq(_per_seq_rows(), "graph", env="graph-replayed, L2 flushed · " + ENV)


def _chart_launch_cost():
    from flashtutor.bench import launch_cost
    return launch_cost.plot(_launch_rows(), env=ENV)


def _chart_ch02_steps():
    from flashtutor.bench import ch02
    return ch02.plot_steps(_steps_rows(CH02_STEPS), env=ENV)


def _chart_ch03_steps():
    from flashtutor.bench import ch03
    return ch03.plot_steps(_steps_rows(CH03_STEPS), env=ENV)


def _chart_ch01_bars():
    names = [p.replace(" D64", "") for p in SHAPES]
    return plots.grouped_bars(names, {k: [100.0 * (i + 1) / (3 ** j) for i in range(len(names))]
                                      for j, k in enumerate(("reference", "row kernel", "sdpa"))},
                              ylabel="µs per call (median, log)", env=ENV,
                              title="Chapter 1's kernels against SDPA, per shape")


def _chart_report():
    """The grade report's chart (its HTML view in a notebook): ten shapes, three candidates, a log axis."""
    from flashtutor.grading.evidence import Measurement, TimingResult
    from flashtutor.grading.report import Report
    r = Report(chapter="01", title="t", path="x.py", device="cuda",
               env={"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "date": "2026-11-23 22:06 UTC"})
    for i, p in enumerate(SHAPES):
        m = [Measurement(v, 0.97 * v, 1.03 * v, 5) for v in (1000.0 * (i + 1), 300.0 * (i + 1), 10.0 + i)]
        r.timings.append(TimingResult(p, "stream", times=dict(zip(("learner", "reference", "sdpa"), m))))
    return r.chart()


def _chart_results_ladder():
    """The results page's ladder chart, from results/ (its environment is in the page's caption, not in it)."""
    from flashtutor import results_page as rp
    return rp.draw_chart(rp.ladder_chart_data(rp.Results(rp.RESULTS)))


CHARTS = {"results_page.draw_chart": _chart_results_ladder, "report.chart": _chart_report, "ch04.heatmap": _chart_heatmap, "ch04.heatmaps": _chart_heatmaps, "ch04.plot_vs_sdpa": _chart_vs_sdpa,
          "ch05.plot_crossover": _chart_crossover, "ch06.plot_per_seq": _chart_per_seq,
          "launch_cost.plot": _chart_launch_cost, "ch02.plot_steps": _chart_ch02_steps,
          "ch03.plot_steps": _chart_ch03_steps, "plots.grouped_bars": _chart_ch01_bars}


@pytest.mark.parametrize("name", list(CHARTS))
def test_chart_is_legible(name):
    fig = CHARTS[name]()
    assert fig.get_figwidth() <= plots.MAX_WIDTH_IN + 1e-9
    assert shown_width_in(fig) <= plots.MAX_WIDTH_IN + 0.25, "something sticks out of the figure"
    assert_legible(fig)


@pytest.mark.parametrize("name", ["ch04.heatmaps", "ch04.plot_vs_sdpa", "ch05.plot_crossover",
                                  "ch06.plot_per_seq", "launch_cost.plot", "ch02.plot_steps", "ch03.plot_steps",
                                  "plots.grouped_bars"])
def test_chart_shows_the_environment_line(name):
    fig = CHARTS[name]()
    shown = " ".join(t.get_text().replace("\n", " ") for t in _texts(fig))
    for part in ("NVIDIA H100 80GB HBM3", "torch 2.11.0+cu130", "2026-11-23 22:06 UTC"):
        assert part in shown
    env = [t for t in _texts(fig) if "torch 2.11.0" in t.get_text()]
    assert env and all(t.get_fontsize() >= plots.MIN_FONT_PT for t in env)


@pytest.mark.parametrize("name", [n for n in CHARTS if n != "ch04.heatmap"])
def test_chart_has_a_short_title_and_the_environment_in_a_caption_below(name):
    """ch04.heatmap draws one panel of ch04.heatmaps (its caller's title is a panel title); the ladder chart
    of the results page has its environment in the page's caption, under the image."""
    fig = CHARTS[name]()
    marker = None if name == "results_page.draw_chart" else "torch 2.11.0"
    assert_titled_and_captioned(fig, marker=marker)
    if marker is None:
        assert not [t.get_text() for t in _texts(fig) if ENV_MARKS.search(t.get_text())]


def test_the_old_charts_fail_the_checks():
    """The negative control at chart scale: the ch06 panels as they were drawn before (12.6 inches,
    a 7-point legend and an 8-point title)."""
    fig, axes = plt.subplots(1, 3, figsize=(12.6, 3.4), dpi=110)
    for ax in axes:
        ax.plot([8, 16, 32], [3, 2, 1], "o-", label="step")
        ax.set_title("S = 128", fontsize=9)
    axes[-1].legend(fontsize=7)
    fig.suptitle(ENV, fontsize=8)
    assert small_texts(fig)


def test_wrap_env_keeps_every_part():
    text = plots.wrap_env(ENV, 3.0)
    assert text.count("\n") >= 2
    assert text.replace("\n", " · ").split(" · ") == ENV.split(" · ")


def test_plots_imports_no_grader_and_kernels_do_not_import_plots():
    src = (ROOT / "flashtutor" / "plots.py").read_text()
    assert "grading" not in src.split('"""', 2)[2]
    for f in (ROOT / "flashtutor" / "kernels").rglob("*.py"):
        assert "plots" not in f.read_text(), f"{f} imports flashtutor.plots"


# ----------------------------------------------------------------------------- notebook cells ---
NOTEBOOKS = sorted(p for p in ROOT.glob("chapters/0[1-6]_*/*.ipynb"))


def _code_cells(nb: Path):
    return ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_notebook_cells_draw_through_the_chart_functions(nb):
    """No chart cell of chapters 1-6 sizes its figure or its fonts itself: they call the functions above."""
    for src in _code_cells(nb):
        for bad in ("figsize=", "fontsize=", "plt.subplots(", "plt.figure(", ".set_title("):
            assert bad not in src, f"{nb.name}: a cell uses {bad!r}:\n{src[:400]}"


def _cell(nb_glob: str, marker: str) -> str:
    """The one code cell containing `marker` among the chapter's notebooks (its page and its sections)."""
    found = [s for nb in sorted(ROOT.glob(nb_glob)) for s in _code_cells(nb) if marker in s]
    assert len(found) == 1, f"{nb_glob}: {len(found)} cells contain {marker!r}"
    return found[0]


class _St:
    def __init__(self, us):
        self.median_us = us


class _P:
    def __init__(self, name):
        self.name = name


def _run_cell(src: str, **names):
    shown = []
    ns = {"describe_line": lambda **kw: ENV, "plt": plt, **names}
    old_show = plt.show
    plt.show = lambda *a, **k: shown.extend(plt.get_fignums())
    try:
        exec(compile(src, "<cell>", "exec"), ns)
    finally:
        plt.show = old_show
    figs = [plt.figure(n) for n in dict.fromkeys(shown or plt.get_fignums())]
    assert figs, "the cell drew nothing"
    return figs


def test_ch01_chart_cell():
    rows = [(_P(n), "flash", {"reference": _St(100.0 * (i + 1)), "row kernel": _St(30.0 * (i + 1)),
                              "sdpa": _St(5.0 + i)}, None, None) for i, n in enumerate(SHAPES)]
    for fig in _run_cell(_cell("chapters/01_*/*.ipynb", "grouped_bars"), rows=rows):
        assert_legible(fig)
        assert_titled_and_captioned(fig, titled=False)


def test_ch02_chart_cell():
    from flashtutor.bench import ch02
    for fig in _run_cell(_cell("chapters/02_*/*.ipynb", "plot_steps"), rows=_steps_rows(CH02_STEPS), bench02=ch02):
        assert_legible(fig)
        assert_titled_and_captioned(fig, titled=False)


def test_ch03_chart_cell():
    from flashtutor.bench import ch03
    for fig in _run_cell(_cell("chapters/03_*/*.ipynb", "plot_steps"), rows=_steps_rows(CH03_STEPS), bench03=ch03):
        assert_legible(fig)
        assert_titled_and_captioned(fig, titled=False)


def test_ch04_vs_sdpa_cell():
    from flashtutor.bench import ch04
    for fig in _run_cell(_cell("chapters/04_*/*.ipynb", "plot_vs_sdpa"), table=_vs_sdpa_table(), sweep04=ch04):
        assert_legible(fig)
        assert_titled_and_captioned(fig, titled=False)


def test_ch06_per_seq_cell():
    from flashtutor.bench import ch06
    rows = _per_seq_rows()
    for r in rows:
        r.update(event={"median_us": 1.0}, graph={"median_us": 1.0})
    for fig in _run_cell(_cell("chapters/06_*/*.ipynb", "plot_per_seq"), rows=rows, bench06=ch06):
        assert_legible(fig)
        assert_titled_and_captioned(fig, titled=False)


@pytest.mark.parametrize("nb_glob,call", [("chapters/04_*/*.ipynb", "sweep04.heatmaps("),
                                          ("chapters/05_*/*.ipynb", "bench05.plot_crossover("),
                                          ("chapters/06_*/*.ipynb", "launch_cost.plot(")])
def test_gpu_chart_cells_call_the_checked_function(nb_glob, call):
    """Cells that measure before they plot cannot run here; they must at least draw with the function
    the tests above check, passing the environment line."""
    src = _cell(nb_glob, call)
    assert "describe_line()" in src.split(call, 1)[1].split("\n", 1)[0]
