"""The look of the book's measured charts: figure width, font sizes, legends, the title and the caption.

The book's content column is about MAX_WIDTH_IN (7.5) inches wide; a wider figure is scaled down on the
page, and its text with it: a font of F points in a figure W inches wide shows as
``F * min(1, MAX_WIDTH_IN / W)`` points (:func:`shown_pt`). W is the image's width: a
``bbox_inches="tight"`` save (what Jupyter's inline backend does) pads the figure by 0.1 inch a side, so
the charts are drawn at most WIDTH_IN (7.2) wide, with no text below MIN_FONT_PT and legends outside the
axes (so that they cannot cover a line, a bar or a marker). The same size rule as the hand-drawn diagrams
(``book/diagrams/style.py``); ``tests/test_charts.py`` draws every chart with fake data and checks it.

A chart is titled by what it shows, and says where it was measured underneath:

* the **title** (:func:`title` on the figure) is one short line over the panels, at most TITLE_MAX_CHARS
  characters: what the chart shows ("Chapter 2's steps against SDPA, per shape"), not the machine;
* the **caption** (:func:`caption`) is the environment line (GPU, driver, versions, date:
  ``env.describe_line()``), or any other note about how the numbers were taken, under the panels and
  under a legend placed below them, inside the image: SMALL points, muted, left-aligned, wrapped to the
  figure's width. :func:`env_line`, the older name, draws the same caption.

Figures use a constrained layout (:class:`ChartLayout`) that keeps the title at the top, the caption and
a legend placed below at the bottom, and lays the panels out in between, so that nothing overlaps and a
tight save is no wider than the figure plus its padding. Importing this module changes nothing global;
sizes are passed explicitly.

    fig, ax = plots.figure(height=3.4)
    ax.plot(...); ax.set_xlabel("S")
    plots.legend(ax)                      # right of the axes; "below" / "above" for wide legends
    plots.title(fig, "Time per call as S grows")
    plots.caption(fig, describe_line())
"""
from __future__ import annotations

import textwrap

MIN_FONT_PT = 9.0          # the smallest text anywhere in a chart, as shown on the page
MAX_WIDTH_IN = 7.5         # the book's content width: wider figures are scaled down on the page
WIDTH_IN = 7.2             # the charts' width: a tight save adds 0.1 in each side, and stays within MAX_WIDTH_IN
DPI = 110                  # the notebooks' charts have always been drawn at 110 dpi

# Font sizes (points). Nothing below MIN_FONT_PT.
SMALL = 9.0                # tick labels, legend entries, cell values, annotations, the caption
NORMAL = 10.0              # axis labels, colour-bar labels
TITLE = 10.0               # panel titles
CHART_TITLE = 11.0         # the chart's title, over all its panels
MUTED = "#555555"          # the caption
TITLE_MAX_CHARS = 70       # a chart's title: one line of at most this many characters

# The colours the chapters' charts have used for the same things.
COLORS = {"ch1 reference": "#888888", "reference": "#888888", "row kernel": "#cf6a2e", "sdpa": "#2e6fcf",
          "SDPA": "#2e6fcf", "a coalesced": "#cf6a2e", "b smem tiles": "#d9a632",
          "c online softmax": "#3c9a5f", "teaching": "#cf6a2e", "tuned, one config": "#999999",
          "tuned": "#2e6fcf"}


def shown_pt(size_pt: float, width_in: float, page_width_in: float = MAX_WIDTH_IN) -> float:
    """The size, in points on the page, of a font of `size_pt` in a figure `width_in` inches wide."""
    return size_pt * min(1.0, page_width_in / width_in)


def new_figure(width: float = WIDTH_IN, height: float = 3.4):
    """An empty figure with the charts' layout (:class:`ChartLayout`), at most WIDTH_IN wide (MAX_WIDTH_IN
    once saved tight)."""
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(min(width, WIDTH_IN), height), dpi=DPI)
    fig.set_layout_engine(_chart_layout_class()())
    return fig


def figure(nrows: int = 1, ncols: int = 1, *, height: float = 3.4, width: float = WIDTH_IN,
           squeeze: bool = True, **subplots_kw):
    """``plt.subplots`` for a chart: (fig, axes), the figure at most WIDTH_IN wide, every axes styled."""
    fig = new_figure(width, height)
    axes = fig.subplots(nrows, ncols, squeeze=squeeze, **subplots_kw)
    for ax in fig.axes:
        style_axes(ax)
    return fig, axes


def style_axes(ax):
    """Tick labels (major and minor), axis labels and title of `ax` at the chart sizes; returns ax."""
    ax.tick_params(axis="both", which="both", labelsize=SMALL)
    ax.xaxis.label.set_fontsize(NORMAL)
    ax.yaxis.label.set_fontsize(NORMAL)
    ax.title.set_fontsize(TITLE)
    return ax


def _is_axes(target) -> bool:
    return hasattr(target, "get_legend_handles_labels")


def title(target, text: str, width_chars: int | None = None):
    """`target` a Figure: the chart's title, one line over all its panels at CHART_TITLE points, left-aligned
    (say what the chart shows in at most TITLE_MAX_CHARS characters; the machine goes in :func:`caption`).
    `target` an Axes (or a SubFigure): a panel title at TITLE points (wrapped to `width_chars` characters
    when given). Drawing a figure's title again replaces it. Returns the Text."""
    if not text:
        return None
    if _is_axes(target):
        if width_chars:
            text = "\n".join(textwrap.wrap(text, width_chars))
        return target.set_title(text, fontsize=TITLE)
    layout = _layout_of(target)
    if layout is None:                      # a subfigure, or a figure with a layout of another kind
        return target.suptitle(text, fontsize=TITLE if target.get_figure(root=True) is not target else CHART_TITLE)
    if layout.title is None:
        layout.title = target.text(0.0, 1.0, text, fontsize=CHART_TITLE, ha="left", va="top")
    else:
        layout.title.set_text(text)
    return layout.title


_title = title          # for grouped_bars, whose argument `title` hides this function


def caption(target, line: str):
    """The caption under the panels (and under a legend placed below them), inside the image: `line` (the
    environment line, ``describe_line()``, or any note on how the numbers were taken) at SMALL points,
    muted, left-aligned, wrapped to the figure's width. `target` a Figure, or an Axes of one. Drawing it
    again replaces it. Returns the Text (None for an empty line)."""
    if not line:
        return None
    fig = target.get_figure(root=True)
    text = wrap_env(line, fig.get_figwidth() - 0.2)
    layout = _layout_of(fig)
    if layout is None:                      # a figure with a layout of another kind: matplotlib's own slot
        return fig.supxlabel(text, x=0.01, ha="left", fontsize=SMALL, color=MUTED, multialignment="left")
    if layout.caption is None:
        layout.caption = fig.text(0.0, 0.0, text, fontsize=SMALL, color=MUTED, ha="left", va="bottom",
                                  multialignment="left")
    else:
        layout.caption.set_text(text)
    return layout.caption


def env_line(fig, line: str):
    """The environment line as the chart's caption, under the panels: :func:`caption` (this name is older,
    from when the line went above the panels; notebooks still call it). Returns the Text."""
    return caption(fig, line)


def legend(target, *, where: str = "right", ncol: int | None = None, handles=None, labels=None, **kw):
    """A legend at SMALL points outside the plotting area, where it cannot cover data.

    `target` an Axes: ``where="right"`` (beside the axes, top-aligned; the default), ``"above"`` (over
    the axes, in a row), or ``"below"`` (the axes' entries in a legend at the foot of its figure, under
    every x label, where constrained layout makes room for it). `target` a Figure (or SubFigure):
    one legend for all its axes (entries with the same label once), ``"below"`` (the default for a
    figure), ``"above"`` or ``"right"`` of all the panels. Returns the Legend, or None with nothing to show."""
    if handles is None:
        axes = target.axes if not hasattr(target, "get_legend_handles_labels") else [target]
        seen = {}
        for ax in axes:
            for h, lab in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(lab, h)
        handles, labels = list(seen.values()), list(seen)
    if not handles:
        return None
    kw.setdefault("fontsize", SMALL)
    kw.setdefault("frameon", False)
    is_axes = _is_axes(target)
    if is_axes and where == "below":
        target, is_axes = target.get_figure(root=False), False
    if not is_axes and where == "right" and ncol is None:
        ncol = 1
    if ncol is None:
        ncol = 1 if where == "right" else _row_columns(labels, WIDTH_IN - 0.4)
    layout = None if is_axes or where != "below" else _layout_of(target)
    if is_axes:
        place = {"right": dict(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0),
                 "above": dict(loc="lower center", bbox_to_anchor=(0.5, 1.02), borderaxespad=0.0)}[where]
    elif layout is not None:                # placed by the layout: over the caption, under the panels
        lg = target.legend(handles, labels, ncol=ncol, loc="lower center", bbox_to_anchor=(0.0, 0.0, 1.0, 1.0),
                           bbox_transform=target.transFigure, borderaxespad=0.0, **kw)
        layout.below.append(lg)
        return lg
    else:
        place = {"right": dict(loc="outside right upper"), "above": dict(loc="outside upper center"),
                 "below": dict(loc="outside lower center")}[where]
    return target.legend(handles, labels, ncol=ncol, **place, **kw)


def _row_columns(labels, width_in: float) -> int:
    """How many legend columns of these labels fit in `width_in` (entries of equal width, as matplotlib
    lays them out: a handle, a gap and the longest label at SMALL points)."""
    entry = 0.75 + max(len(str(lab)) for lab in labels) * 0.6 * SMALL / 72.0
    fit = max(1, min(len(labels), int(width_in // entry)))
    rows = -(-len(labels) // fit)
    return -(-len(labels) // rows)          # the same number of rows, balanced


def wrap_env(line: str, width_in: float, size: float = SMALL) -> str:
    """`line` broken at its " · " separators (or spaces) into lines that fit `width_in` at `size` points."""
    chars = max(20, int(width_in * 72.0 / (0.62 * size)))      # DejaVu Sans: about 0.55-0.6 em a character
    parts, lines = line.split(" · "), []
    for part in parts:
        if lines and len(lines[-1]) + 3 + len(part) <= chars:
            lines[-1] += " · " + part
        else:
            lines.extend(textwrap.wrap(part, chars) or [""])
    return "\n".join(lines)


_CHART_LAYOUT = None


def _chart_layout_class():
    """:class:`ChartLayout`, made on first use (so that importing this module imports no matplotlib)."""
    global _CHART_LAYOUT
    if _CHART_LAYOUT is None:
        from matplotlib.layout_engine import ConstrainedLayoutEngine
        from matplotlib.transforms import Bbox

        class ChartLayout(ConstrainedLayoutEngine):
            """Constrained layout with three bands: the title at the top, the caption at the bottom with the
            legends placed below the panels over it, and the panels (laid out by matplotlib's constrained
            layout) in the rectangle left between them, so that none of them can overlap."""

            def __init__(self, **kw):
                super().__init__(**kw)
                self.title = None           # Text: the chart's title
                self.caption = None         # Text: the caption
                self.below = []             # figure legends over the caption

            def execute(self, fig):
                width, height = fig.get_size_inches()
                pad_y, pad_x = self.get()["h_pad"] / height, self.get()["w_pad"] / width
                frac = lambda artist: artist.get_window_extent().height / fig.bbox.height   # noqa: E731
                bottom = 0.0
                shown = lambda artist: artist is not None and artist.get_visible() and artist.get_text()  # noqa: E731
                if shown(self.caption):
                    self.caption.set_position((pad_x, bottom + pad_y))
                    bottom += pad_y + frac(self.caption)
                for lg in self.below:
                    if lg.get_visible() and lg in fig.legends:
                        lg.set_bbox_to_anchor(Bbox.from_extents(0.0, bottom + pad_y, 1.0, 1.0), fig.transFigure)
                        bottom += pad_y + frac(lg)
                top = 1.0
                if shown(self.title):
                    self.title.set_position((pad_x, top - pad_y))
                    top -= pad_y + frac(self.title)
                self.set(rect=(0.0, bottom, 1.0, max(top - bottom, 0.05)))
                return super().execute(fig)

        _CHART_LAYOUT = ChartLayout
        globals()["ChartLayout"] = ChartLayout
    return _CHART_LAYOUT


def _layout_of(fig):
    """The :class:`ChartLayout` of root figure `fig`: its own, or one put in place of a plain constrained
    layout (or of none); None for a subfigure, or a figure laid out another way."""
    if fig is None or fig.get_figure(root=True) is not fig:
        return None
    cls = _chart_layout_class()
    engine = fig.get_layout_engine()
    if isinstance(engine, cls):
        return engine
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    if engine is not None and type(engine) is not ConstrainedLayoutEngine:
        return None
    new = cls(**{k: v for k, v in (engine.get() if engine else {}).items() if k != "rect"})
    try:
        fig.set_layout_engine(new)
    except RuntimeError:
        return None
    return new


def grouped_bars(categories, series: dict, *, ylabel: str, colors: dict | None = None, log: bool = True,
                 env: str = "", title: str = "", hlines=(), height: float | None = None, where: str | None = None,
                 ax=None):
    """Bars grouped by category (one bar per series in each group): `series` maps a label to one value
    per category (None or NaN: no bar). Tick labels rotated 30°, the legend outside the axes (`where`:
    right of them for up to three series, else above them in rows), `hlines` (y, style dict) reference
    lines across, `title` the chart's short title (the panel's, when drawn into `ax`), `env` the caption
    under the chart. Returns the figure."""
    where = where or ("right" if len(series) <= 3 else "above")
    given_ax = ax is not None
    if ax is None:
        fig, ax = figure(height=height or (3.4 if where == "right" else 3.9))
    else:
        fig = ax.figure
        style_axes(ax)
    colors = {**COLORS, **(colors or {})}
    n = max(1, len(series))
    w = 0.8 / n
    for i, (label, values) in enumerate(series.items()):
        pts = [(x, v) for x, v in enumerate(values) if v is not None and v == v and not (log and v <= 0)]
        ax.bar([x + i * w for x, _ in pts], [v for _, v in pts], w, label=label, color=colors.get(label))
    for y, style in hlines:
        ax.axhline(y, **{"color": "black", "lw": 0.8, **style})
    if log:
        ax.set_yscale("log")
    ax.set_ylabel(ylabel, fontsize=NORMAL)
    ax.set_xticks([x + 0.4 - w / 2 for x in range(len(categories))])
    ax.set_xticklabels(list(categories), rotation=30, ha="right", rotation_mode="anchor", fontsize=SMALL)
    ax.set_xlim(-0.1 - w / 2, len(categories) - 0.1 - w / 2)     # each group spans x - w/2 .. x + 0.8 - w/2
    ax.grid(axis="y", alpha=0.3, which="major")
    ax.set_axisbelow(True)
    legend(ax, where=where)
    _title(ax if given_ax else fig, title)
    caption(fig, env)
    return fig

