"""Diagrams of the CUDA primer (book/cuda_primer.ipynb): how a launch is cut into blocks, warps and threads and
spread over the SMs, and what the 32 loads of one warp become in the memory system.

Hardware figures are NVIDIA's published ones for the H100 SXM (H100 architecture whitepaper and the CUDA C++
Programming Guide's table for compute capability 9.0): 132 SMs, at most 64 resident warps (2048 threads) and
32 resident blocks per SM, at most 1024 threads per block, 32 threads per warp. Global memory is read in
32-byte sectors, four to a 128-byte cache line (the CUDA C++ Best Practices Guide, "Coalesced Access to Global
Memory"). The example launch is the primer's own: book/examples/row_scale.cu with ROWS x COLS elements.
"""
from __future__ import annotations

from matplotlib.figure import Figure

import style as st

SMS = 132                   # H100 SXM
WARP = 32
MAX_WARPS_PER_SM = 64
MAX_THREADS_PER_BLOCK = 1024
SECTOR, LINE = 32, 128      # bytes

# the primer's example launch (book/cuda_primer.ipynb): grid (ceil(COLS / THREADS), ROWS), block (THREADS,)
ROWS, COLS, THREADS = 3, 300, 128
GRID_X = -(-COLS // THREADS)        # 3 blocks along a row


def execution() -> Figure:
    fig = Figure(figsize=(7.5, 4.3))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 86))

    # 1. the grid: GRID_X x ROWS blocks
    ax.text(1, 82, "the grid", fontsize=st.TITLE, weight="bold", va="center")
    ax.text(1, 77, f"grid = ({GRID_X}, {ROWS}): {GRID_X * ROWS} blocks", fontsize=st.SMALL, va="center")
    bw, bh, x0, y0 = 11, 9, 3, 38
    for by in range(ROWS):
        for bx in range(GRID_X):
            hi = (bx, by) == (1, 0)
            st.box(ax, x0 + bx * (bw + 1.5), y0 + (ROWS - 1 - by) * (bh + 1.5), bw, bh,
                   fc=st.light(st.GPU, 0.35 if hi else 0.8), ec=st.HIGHLIGHT if hi else st.GRID,
                   lw=1.6 if hi else 0.8, text=f"({bx},{by})", size=st.SMALL)
    ax.text(1, y0 - 4, "blockIdx = (x, y)\nx: which 128 columns\ny: which row",
            fontsize=st.SMALL, va="top", linespacing=1.3)

    # 2. one block: 128 threads = 4 warps
    ax.text(50, 82, "one block", fontsize=st.TITLE, weight="bold", va="center")
    ax.text(50, 77, f"block = ({THREADS},): {THREADS} threads", fontsize=st.SMALL, va="center")
    st.arrow(ax, (x0 + 2 * bw + 1.5, y0 + 2 * (bh + 1.5) + bh), (49, 66), color=st.HIGHLIGHT, lw=1.2)
    wx, ww, wh = 51, 36, 8.5
    for w in range(THREADS // WARP):
        y = 64 - w * (wh + 2)
        st.box(ax, wx, y, ww, wh, fc=st.light(st.GPU, 0.6), ec=st.GRID, lw=0.8)
        for t in range(8):                        # 8 ticks stand for the warp's 32 threads
            st.box(ax, wx + 1 + t * 3.2, y + 1.5, 2.6, wh - 3, fc="white", ec=st.GRID, lw=0.5, zorder=3)
        ax.text(wx + 27.5, y + wh / 2, f"warp {w}", fontsize=st.SMALL, va="center", ha="left")
    ax.text(wx, 64 - 3 * (wh + 2) - 3, "threadIdx.x = 0 … 127; a warp is\n32 consecutive threads that issue\n"
            "one instruction together", fontsize=st.SMALL, va="top", linespacing=1.3)

    # 3. the SMs
    ax.text(100, 82, f"the GPU: {SMS} SMs", fontsize=st.TITLE, weight="bold", va="center")
    ax.text(100, 77, "(H100 SXM); a block runs on one SM", fontsize=st.SMALL, va="center")
    sx, sw, sh = 101, 21, 17
    for i, (x, y) in enumerate(((sx, 55), (sx + sw + 3, 55), (sx, 33), (sx + sw + 3, 33))):
        st.box(ax, x, y, sw, sh, fc=st.light(st.SMEM, 0.7), ec=st.GRID, lw=0.9)
        label = f"SM {i}" if i < 3 else f"SM {SMS - 1}"
        ax.text(x + 1, y + sh - 2.5, label, fontsize=st.SMALL, va="center", weight="bold")
        if i == 0:   # the highlighted block lands here, beside other blocks' warps
            st.box(ax, x + 1.5, y + 2, sw - 3, 5, fc=st.light(st.GPU, 0.35), ec=st.HIGHLIGHT, lw=1.2,
                   text="block (1,0)", size=st.SMALL)
            st.box(ax, x + 1.5, y + 8, sw - 3, 4, fc=st.light(st.GPU, 0.8), ec=st.GRID, lw=0.6)
    ax.text(sx + sw + 1.5, 52.5, "…", fontsize=st.TITLE, ha="center", va="center")
    st.arrow(ax, (wx + ww + 1, 50), (sx - 0.5, 62), color=st.HIGHLIGHT, lw=1.2)
    ax.text(sx - 1, 29, f"an SM keeps up to {MAX_WARPS_PER_SM} warps\nresident and issues from a ready\n"
                        f"one each cycle: that is how it\nhides a slow load",
            fontsize=st.SMALL, va="top", linespacing=1.3)

    ax.text(1, 2, f"A launch names the grid and the block; the hardware hands blocks to SMs as they have "
                  f"room. Threads of\none block can share memory and wait for each other (__syncthreads); "
                  f"threads of different blocks\ncannot. At most {MAX_THREADS_PER_BLOCK} threads per block.",
            fontsize=st.SMALL, va="bottom", linespacing=1.3)
    return fig


def coalescing() -> Figure:
    fig = Figure(figsize=(7.5, 3.9))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 78))
    lane_w, x0 = 2.9, 13

    def warp_row(y):
        ax.text(1, y + 2, "warp", fontsize=st.SMALL, va="center", ha="left", weight="bold")
        for t in range(WARP):
            st.box(ax, x0 + t * lane_w, y, lane_w - 0.4, 4, fc=st.light(st.GPU, 0.5), ec=st.GRID, lw=0.4)

    def links(y_from, y_to, x_to):
        for t in range(WARP):
            ax.plot([x0 + t * lane_w + lane_w / 2 - 0.2, x_to(t)], [y_from, y_to], color=st.MUTED, lw=0.5)

    # coalesced: thread t reads float t -> 128 contiguous bytes, 4 sectors
    ax.text(1, 74, "coalesced: thread t reads float t", fontsize=st.TITLE, weight="bold", va="center")
    warp_row(63)
    per_sector = SECTOR // 4                               # 8 floats (8 threads) per sector
    sw = per_sector * lane_w
    links(63, 56, lambda t: x0 + t * lane_w + lane_w / 2 - 0.2)
    ax.text(1, 54, "memory", fontsize=st.SMALL, va="center", ha="left", weight="bold")
    for s in range(LINE // SECTOR):
        st.box(ax, x0 + s * sw, 52, sw - 0.4, 4, fc=st.HBM, ec="white", lw=0.4, text=f"{SECTOR} B",
               size=st.SMALL, color="white")
    ax.text(x0 + WARP * lane_w + 2, 58, f"{LINE // SECTOR} sectors = one {LINE}-byte\nline: "
                                         f"{LINE} B fetched,\n{LINE} B used", fontsize=st.SMALL, va="center",
            linespacing=1.3)

    # strided: thread t reads float 32*t -> one sector in each of 32 lines
    ax.text(1, 42, f"strided: thread t reads float {WARP}·t (rows {LINE} bytes apart)", fontsize=st.TITLE,
            weight="bold", va="center")
    warp_row(31)
    links(31, 24, lambda t: x0 + t * lane_w + lane_w / 2 - 0.2)
    ax.text(1, 22, "memory", fontsize=st.SMALL, va="center", ha="left", weight="bold")
    for t in range(WARP):                                  # each box: one 128-byte line, its first sector used
        x = x0 + t * lane_w
        st.box(ax, x, 20, lane_w - 0.4, 4, fc=st.IDLE, ec="white", lw=0.3)
        st.box(ax, x, 20, (lane_w - 0.4) / 4, 4, fc=st.HBM, ec="none", lw=0)
    ax.text(x0 + WARP * lane_w + 2, 26, f"{WARP} sectors in {WARP} lines:\n"
                                         f"{WARP * SECTOR} B fetched,\n{WARP * 4} B used", fontsize=st.SMALL,
            va="center", linespacing=1.3)
    ax.text(x0, 16.5, f"(each box is a {LINE}-byte line, drawn narrower; dark: the sector a thread needs)",
            fontsize=st.SMALL, va="top", color=st.MUTED)
    ax.text(1, 2, "A warp's load instruction is served sector by sector: threads that read neighbouring "
                  "addresses share sectors,\nthreads that read far apart each pay for a sector of their own.",
            fontsize=st.SMALL, va="bottom", linespacing=1.3)
    return fig


DIAGRAMS = {"ch00_execution": execution, "ch00_coalescing": coalescing}
