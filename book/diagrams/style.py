"""Shared look of the book's diagrams: colours, font sizes, figure width, and a few drawing helpers.

The book's content column is about 7.5 inches wide, so a figure drawn at most MAX_WIDTH_IN wide is shown
at (close to) its natural size, and a text of MIN_FONT_PT points stays that size on the page.
tests/test_diagrams.py checks every <text> of every SVG against MIN_FONT_PT, scaled by how much a wider
figure would be shrunk to fit the column.

Importing this module changes nothing global; the diagram modules pass sizes and colours explicitly.
"""
from __future__ import annotations

from matplotlib import patches

# the smallest text anywhere in a diagram, and the book's content width (wider figures are scaled down on the
# page): the same rule as the measured charts'
from flashtutor.plots import MAX_WIDTH_IN, MIN_FONT_PT  # noqa: E402,F401

# Font sizes (points). Nothing below MIN_FONT_PT.
SMALL = 9.0                # cell labels, annotations
NORMAL = 10.0              # box titles, axis labels
TITLE = 11.0               # panel titles

# Colours. One meaning each, across all chapters (and close to the colours of the notebooks' charts).
Q = "#2e6fcf"              # queries, Q tiles
K = "#3c9a5f"              # keys, K tiles
V = "#d9a632"              # values, V tiles
O = "#8a5cc2"              # outputs, O
SCORES = "#cf6a2e"         # the score matrix S (and P)
STATE = "#c23b5a"          # online-softmax state: running max m, sum l, acc
HBM = "#7f7f7f"            # global memory (HBM)
L2 = "#a9a9a9"             # L2 cache
SMEM = "#6aa5d9"           # shared memory
REG = "#9fd4a3"            # registers
HOST = "#cf6a2e"           # host (CPU) work
GPU = "#2e6fcf"            # GPU work
IDLE = "#e4e4e4"           # idle time, unused cells
GRID = "#555555"           # outlines
TEXT = "#222222"
MUTED = "#666666"          # secondary text
HIGHLIGHT = "#c23b5a"      # the one thing to look at


def light(color: str, amount: float = 0.55) -> str:
    """`color` mixed with white: amount 0 keeps it, 1 gives white."""
    c = color.lstrip("#")
    r, g, b = (int(c[i:i + 2], 16) for i in (0, 2, 4))
    mix = lambda x: round(x + (255 - x) * amount)
    return f"#{mix(r):02x}{mix(g):02x}{mix(b):02x}"


def box(ax, x, y, w, h, *, fc="white", ec=GRID, lw=1.0, text=None, size=NORMAL, color=TEXT,
        hatch=None, weight="normal", ha="center", va="center", zorder=2, **kw):
    """A rectangle with lower-left corner (x, y) and an optional centred label."""
    ax.add_patch(patches.Rectangle((x, y), w, h, facecolor=fc, edgecolor=ec, linewidth=lw, hatch=hatch,
                                   zorder=zorder))
    if text is not None:
        tx = x + w / 2 if ha == "center" else (x + 0.02 * w if ha == "left" else x + 0.98 * w)
        ty = y + h / 2 if va == "center" else (y + h - 0.05 * h if va == "top" else y + 0.05 * h)
        ax.text(tx, ty, text, ha=ha, va=va, fontsize=size, color=color, weight=weight, zorder=zorder + 1, **kw)


def arrow(ax, xy_from, xy_to, *, color=GRID, lw=1.3, style="-|>", text=None, size=SMALL, text_xy=None,
          ha="center", va="center", rad=0.0, **kw):
    """An arrow from xy_from to xy_to, with an optional label (at text_xy, or the midpoint)."""
    ax.annotate("", xy=xy_to, xytext=xy_from,
                arrowprops=dict(arrowstyle=style, color=color, lw=lw, shrinkA=0, shrinkB=0,
                                connectionstyle=f"arc3,rad={rad}"))
    if text is not None:
        if text_xy is None:
            text_xy = ((xy_from[0] + xy_to[0]) / 2, (xy_from[1] + xy_to[1]) / 2)
        ax.text(*text_xy, text, ha=ha, va=va, fontsize=size, color=color, **kw)


def blank_axes(fig, rect=(0, 0, 1, 1), xlim=(0, 100), ylim=(0, 100)):
    """Axes with no frame or ticks, for drawing in data units (aspect not forced)."""
    ax = fig.add_axes(rect)
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.axis("off")
    return ax
