"""Chapter 6 diagrams: a host/GPU timeline of direct launches against graph replays, and the tile loop
that lets a program walk several tiles.

The timeline is drawn to scale from the times chapter 6's notebooks (the chapter's page and its
sections' pages) store for B32 H16 S128 D64, read from their outputs each time the figure is drawn (so a
re-executed notebook redraws it): the host's time to issue one call (the "host issue" column of the graph
section: k06_multihead.attention launched directly, and the solution's graph replay), the GPU's time per call with a warm L2, as in a loop of
back-to-back calls (the per-call lines: multihead, solution), the loops' measured rate ("host done"),
and the GPU and date of the run. The tile loop is the notebook's: `for tile in range(pid, n_tiles, P)`,
and tile t is (b·h, key chunk, query block) = (t // n_m // n_split, t // n_m % n_split, t % n_m).
"""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

from matplotlib.figure import Figure

import style as st

CHAPTER = Path(__file__).resolve().parents[2] / "chapters" / "06_batching"   # batching.ipynb and its sections
SHAPE = "B32 H16 S128 D64"
WINDOW_US = 170.0
_NUM = r"([0-9]+(?:\.[0-9]+)?)"


def stored_times(notebooks: list[Path] | None = None) -> dict:
    """The numbers the timeline needs, from the stored outputs of the chapter's notebooks (the host times on
    the remedies' page, the per-call table on the measurements' page; ValueError if one is missing)."""
    notebooks = sorted(CHAPTER.glob("*.ipynb")) if notebooks is None else notebooks
    cells = [c for nb in notebooks for c in json.loads(nb.read_text())["cells"]]
    text = "\n".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", ""))
                      for c in cells for o in c.get("outputs", []))
    # the per-call table (bench06.rows_markdown): the shape without the tokens every row shares (H16 D64)
    row = r"^\|\s*" + SHAPE.split()[0] + r"\W+" + SHAPE.split()[2] + r"\s*\|\s*{step}\s*\|\s*{n}\s*\|\s*{n}\s*\|\s*{n}\s*\|"
    patterns = {
        "host_direct": rf"^k06 kernel, direct launch\s+{_NUM}\s+{_NUM}",
        "host_graph": rf"^solution \(graph replay\)\s+{_NUM}\s+{_NUM}",
        "gpu_direct": row.format(step="multihead", n=_NUM),
        "gpu_graph": row.format(step="solution", n=_NUM),
        "run": r"NVIDIA ([A-Z][0-9]+)[^·\n]*·[^\n]*?([0-9]{4}-[0-9]{2}-[0-9]{2}) [0-9:]+ UTC",
    }
    found = {}
    for key, pat in patterns.items():
        m = re.search(pat, text, re.MULTILINE)
        if m is None:
            raise ValueError(f"{', '.join(nb.name for nb in notebooks)} store no output matching {pat!r}: "
                             "chapter 6's timeline cannot be drawn (run the notebooks on a GPU, or update "
                             "book/diagrams/ch06.py)")
        found[key] = m.groups()
    return {"host_direct_us": float(found["host_direct"][0]), "done_direct_us": float(found["host_direct"][1]),
            "host_graph_us": float(found["host_graph"][0]), "done_graph_us": float(found["host_graph"][1]),
            "gpu_direct_us": float(found["gpu_direct"][2]), "gpu_graph_us": float(found["gpu_graph"][2]),
            "gpu": found["run"][0], "date": found["run"][1]}


def schedule(host_us: float, gpu_us: float, window: float = WINDOW_US):
    """A loop of calls: the host issues call k in [k·host, (k+1)·host] without waiting; the GPU runs it
    once it is issued and the previous call has finished. Returns (host spans, GPU spans) in the window."""
    host, gpu, gpu_free, k = [], [], 0.0, 0
    while k * host_us < window:
        h0, h1 = k * host_us, (k + 1) * host_us
        host.append((h0, h1))
        g0 = max(h1, gpu_free)
        if g0 < window:
            gpu.append((g0, g0 + gpu_us))
        gpu_free = g0 + gpu_us
        k += 1
    return host, gpu


def finished(host_us: float, gpu_us: float, window: float = WINDOW_US) -> int:
    return sum(1 for _, end in schedule(host_us, gpu_us, window)[1] if end <= window)


def _lane(ax, y, spans, color, label_fmt, window, idle=False):
    h = 0.8
    if idle:
        ax.barh(y, window, left=0, height=h, color="white", edgecolor=st.light(st.GRID, 0.4), hatch="////",
                lw=0.5, zorder=1)
    for k, (a, b) in enumerate(spans):
        b = min(b, window)
        ax.barh(y, b - a, left=a, height=h, color=color, edgecolor="white", lw=1.0, zorder=2)
        if b - a > 1.5 * len(label_fmt(k)) + 1:          # ~1.5 µs of this axis per character at 9 pt
            ax.text((a + b) / 2, y, label_fmt(k), ha="center", va="center", fontsize=st.SMALL, color="white",
                    zorder=3)


def timeline() -> Figure:
    t = stored_times()
    fig = Figure(figsize=(7.5, 4.2))
    rows = [
        (f"direct launch: the host spends {t['host_direct_us']} µs per call, the GPU {t['gpu_direct_us']} µs",
         t["host_direct_us"], t["gpu_direct_us"]),
        (f"graph replay: the host spends {t['host_graph_us']} µs per call, the GPU {t['gpu_graph_us']} µs",
         t["host_graph_us"], t["gpu_graph_us"]),
    ]
    axes = [fig.add_axes((0.09, 0.7, 0.89, 0.22)), fig.add_axes((0.09, 0.32, 0.89, 0.22))]
    for ax, (title, h_us, g_us) in zip(axes, rows):
        host, gpu = schedule(h_us, g_us)
        _lane(ax, 1, host, st.HOST, lambda k: f"issue {k + 1}" if h_us > 20 else str(k + 1), WINDOW_US)
        _lane(ax, 0, gpu, st.GPU, lambda k: f"call {k + 1}" if h_us > 20 else str(k + 1), WINDOW_US, idle=True)
        ax.set_xlim(0, WINDOW_US)
        ax.set_ylim(-0.6, 1.6)
        ax.set_yticks([0, 1])
        ax.set_yticklabels(["GPU", "host"], fontsize=st.SMALL)
        ax.tick_params(labelsize=st.SMALL, length=3)
        ax.spines[["top", "right", "left"]].set_visible(False)
        n = finished(h_us, g_us)
        ax.set_title(f"{title}: {n} call{'' if n == 1 else 's'} done in {WINDOW_US:.0f} µs", fontsize=st.NORMAL,
                     loc="left")
    axes[1].set_xlabel("µs", fontsize=st.SMALL)
    caption = (f"{SHAPE} on an {t['gpu']} (chapter 6's stored run, {t['date']}), drawn to scale. A kernel starts "
               "once its call is issued and the previous kernel is done; hatched: the GPU idles. The loops measured "
               f"{t['done_direct_us']} and {t['done_graph_us']} µs per call (\"host done\"): " + pace(t))
    fig.text(0.02, 0.02, textwrap.fill(caption, 100), fontsize=st.SMALL, va="bottom", linespacing=1.3)
    return fig


def pace(t: dict) -> str:
    """Who sets the pace of the graph-replayed loop, from the stored times: it depends on the host (on the H100's
    slower host a replay took longer than the kernel, so the host still set the pace)."""
    if t["host_graph_us"] <= t["gpu_graph_us"]:
        return "with the graph, the GPU sets the pace."
    cut = t["done_direct_us"] / t["done_graph_us"]          # the rates the caption cites ("host done")
    return (f"the graph cuts the host's cost per call {cut:.1f}×, yet on this host a replay still takes longer than "
            "the kernel: the host sets the pace in both loops.")


# ---- the tile loop ------------------------------------------------------------------------------
N_M, N_SPLIT, N_BH, P = 3, 2, 2, 4                 # query blocks per head, key chunks, heads, programs


def tile_coords(t: int, n_m: int = N_M, n_split: int = N_SPLIT) -> tuple[int, int, int]:
    """(b·h, key chunk, query block) of tile t: the query block varies fastest."""
    return t // n_m // n_split, t // n_m % n_split, t % n_m


PROGRAM_COLORS = [st.light(st.GPU, a) for a in (0.0, 0.3, 0.55, 0.8)]   # program 0 … 3: shades of GPU work
PROGRAM_TEXT = ["white", "white", st.TEXT, st.TEXT]


def tile_loop() -> Figure:
    fig = Figure(figsize=(7.5, 3.3))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(-2, 66))
    # tile t goes to program t % P
    n_tiles = N_M * N_SPLIT * N_BH
    w, x0 = 10.5, 20
    ax.text(1, 62, f"{n_tiles} tiles: {N_BH} heads (b·h) × {N_SPLIT} key chunks × {N_M} query blocks, "
                   f"and P = {P} programs", fontsize=st.NORMAL, weight="bold", va="center")
    ax.text(x0 - 2, 53, "tile t", ha="right", va="center", fontsize=st.SMALL)
    ax.text(x0 - 2, 46.5, "(b·h, chunk,\nquery block)", ha="right", va="center", fontsize=st.SMALL,
            linespacing=1.2)
    for t in range(n_tiles):
        p = t % P
        col = PROGRAM_COLORS[p]
        st.box(ax, x0 + t * w, 43, w, 13, fc=col, ec="white", lw=1.5)
        ax.text(x0 + (t + 0.5) * w, 53, str(t), ha="center", va="center", fontsize=st.NORMAL, weight="bold",
                color=PROGRAM_TEXT[p])
        ax.text(x0 + (t + 0.5) * w, 46.5, "{},{},{}".format(*tile_coords(t)), ha="center", va="center",
                fontsize=st.SMALL, color=PROGRAM_TEXT[p])
    for g in range(1, N_BH * N_SPLIT):                # separators between (b·h, chunk) groups
        ax.plot([x0 + g * N_M * w] * 2, [42, 57], color=st.GRID, lw=1.2)

    ax.text(1, 36, "for tile in range(pid, n_tiles, P): each program walks its tiles one after another",
            fontsize=st.SMALL, va="center")
    for p in range(P):
        y = 28 - p * 7
        ax.text(x0 - 2, y, f"program {p}", ha="right", va="center", fontsize=st.SMALL)
        for k, t in enumerate(range(p, n_tiles, P)):
            st.box(ax, x0 + k * (w + 1.5), y - 3, w, 6, fc=PROGRAM_COLORS[p], ec="white",
                   text=str(t), size=st.SMALL, color=PROGRAM_TEXT[p])
    st.arrow(ax, (x0, 1), (x0 + 3 * (w + 1.5) - 1.5, 1), color=st.MUTED, lw=1.0)
    ax.text(x0 + 3 * (w + 1.5), 1, "time", fontsize=st.SMALL, color=st.MUTED, va="center")
    ax.text(x0 + 3 * (w + 1.5) + 11, 24,
            f"P = {n_tiles}: one tile per program (chapter 4's grid).\n"
            f"P = {P}: {n_tiles // P} tiles per program; the next tile's loads\n"
            "can be in flight while this one computes.\n"
            "P = a small multiple of the SM count: a persistent grid.",
            fontsize=st.SMALL, va="center", linespacing=1.3)
    return fig


DIAGRAMS = {
    "ch06_timeline": timeline,
    "ch06_tile_loop": tile_loop,
}
