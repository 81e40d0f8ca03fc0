"""Chapter 1 diagram: the memory hierarchy of an H100 SXM, and where the reference kernel keeps its data.

Capacities and bandwidth are NVIDIA's published figures for the H100 SXM (product datasheet: 80 GB of
HBM3 at 3.35 TB/s, the figure flashtutor.roofline.DATASHEET uses; architecture whitepaper: 132 SMs,
65 536 32-bit registers and 256 KB of L1/shared memory per SM, up to 228 KB of it shared, 50 MB of L2).
The byte counts are Problem.min_bytes and Problem.score_bytes of the seed shape, B1 H16 S1024 D64, as
the chapter's first table prints them.
"""
from __future__ import annotations

from matplotlib.figure import Figure

import style as st

B, H, S, D = 1, 16, 1024, 64                 # the seed shape
QKVO_MB = 4 * B * H * S * D * 2 / 1e6        # Q, K, V read once, O written once, fp16: 8.4 MB
ONE_MB = QKVO_MB / 4                         # one of them: 2.1 MB
SCORES_MB = B * H * S * S * 4 / 1e6          # the fp32 score matrix [B, H, S, S]: 67.1 MB
L2_MB, HBM_GB, HBM_TBS, SMS = 50, 80, 3.35, 132


def memory() -> Figure:
    fig = Figure(figsize=(7.5, 4.6))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 92))
    ax.text(1, 88, "H100 SXM (NVIDIA's published figures)", fontsize=st.TITLE, weight="bold", va="center")
    ax.text(71, 88, "chapter 1's reference kernel, seed shape", fontsize=st.TITLE, weight="bold", va="center")

    levels = [  # name, detail, colour, indent (narrow at the top: small and fast)
        ("registers", "65 536 × 32 bit = 256 KB per SM", st.REG, 6),
        ("L1 / shared memory", "256 KB per SM, up to 228 KB shared", st.SMEM, 4),
        ("L2 cache", f"{L2_MB} MB, shared by all {SMS} SMs", st.L2, 2),
        ("HBM3 (global memory)", f"{HBM_GB} GB, {HBM_TBS} TB/s", st.HBM, 0),
    ]
    uses = [
        "each thread's dot product q·k and\nits sums, in fp32",
        "shared memory is not used: each thread\nloads its own q and k rows",
        "L1 and L2 serve the re-reads: every\nq and k element is loaded S = 1024 times",
        None,
    ]
    row_h, gap, y = 15.5, 2.5, 82
    for (name, detail, col, ind), use in zip(levels, uses):
        st.box(ax, 7 + ind, y - row_h, 61 - 2 * ind, row_h, fc=st.light(col, 0.55), ec=col, lw=1.4)
        ax.text(37.5, y - 5, name, ha="center", va="center", fontsize=st.NORMAL, weight="bold")
        ax.text(37.5, y - 10.8, detail, ha="center", va="center", fontsize=st.SMALL)
        if use:
            ax.text(72, y - row_h / 2, use, ha="left", va="center", fontsize=st.SMALL, linespacing=1.3)
        y -= row_h + gap
    ax.plot([5, 5], [82, 82 - 2 * row_h - gap], color=st.MUTED, lw=1.0)
    ax.text(2.6, 82 - row_h - gap / 2, f"on each of the {SMS} SMs", rotation=90, ha="center", va="center",
            fontsize=st.SMALL, color=st.MUTED)

    # HBM row: the bytes of the seed shape, to scale
    y0 = 82 - 3 * (row_h + gap) - row_h            # bottom of the HBM box
    x0, width = 72, 76
    scale = width / (QKVO_MB + SCORES_MB)
    bar_y, bar_h = y0 + 7, 5
    x = x0
    for name, col in (("Q", st.Q), ("K", st.K), ("V", st.V), ("O", st.O)):
        st.box(ax, x, bar_y, ONE_MB * scale, bar_h, fc=col, ec="white", lw=0.6)
        ax.text(x + ONE_MB * scale / 2, bar_y + bar_h + 1.2, name, ha="center", va="bottom", fontsize=st.SMALL,
                weight="bold", color=col)                     # each segment named in its own colour
        x += ONE_MB * scale
    st.box(ax, x, bar_y, SCORES_MB * scale, bar_h, fc=st.SCORES, ec="white", lw=0.6,
           text=f"fp32 scores [B, H, S, S]: {SCORES_MB:.1f} MB", size=st.SMALL, color="white")
    ax.text(x + 1.0, bar_y + bar_h + 1.2, f"together {QKVO_MB:.1f} MB", fontsize=st.SMALL, va="bottom",
            color=st.TEXT)
    l2_x = x0 + L2_MB * scale
    ax.plot([x0, l2_x], [bar_y - 1.4] * 2, color=st.TEXT, lw=1.0)
    ax.plot([x0, x0], [bar_y - 2.2, bar_y - 0.6], color=st.TEXT, lw=1.0)
    ax.plot([l2_x, l2_x], [bar_y - 2.2, bar_y - 0.6], color=st.TEXT, lw=1.0)
    ax.text(l2_x + 1.5, bar_y - 1.4, f"all of L2: {L2_MB} MB", fontsize=st.SMALL, va="center")
    ax.text(x0 + width, bar_y + bar_h + 1.2, "to scale", fontsize=st.SMALL, va="bottom", ha="right",
            color=st.MUTED)

    ax.text(1, 0.5, "scores_kernel writes the scores to HBM; softmax_kernel walks each row three times and "
                    "rewrites it\nas P; in pv_kernel each of a row's D = 64 threads reads the whole row of P.",
            fontsize=st.SMALL, va="bottom", linespacing=1.3)
    return fig


DIAGRAMS = {"ch01_memory": memory}
