"""Chapter 2 diagrams: the tiles of step c moving through shared memory, and the online softmax.

The numbers come from the chapter's code: Br = 64 query rows and 256 threads per block, Bc = 64 keys per
tile at D = 64 (solutions/02_tiling/attention.cu, `Tile<64>`), tile rows padded to D + 4 floats, and the
online-softmax example row of the notebook (300 scores, tiles of 64).
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

import style as st

# solutions/02_tiling/attention.cu at D = 64
S_SEQ, D = 1024, 64        # the seed shape's sequence length and head dim
BR, BC = 64, 64            # Br query rows per block; Bc keys per K/V tile (Tile<64>::Bc)
THREADS = 256              # a 16 × 16 grid: ty = tid / 16, tx = tid % 16
TM, TN = BR // 16, BC // 16  # each thread: rows 4·ty … 4·ty + 3, keys tx, tx + 16, tx + 32, tx + 48
LDQK, LDP = D + 4, BR + 4  # padded row strides (floats) of Qs/Ks and of Ps
SMEM = {"Qs": BR * LDQK * 4, "Ks": BC * LDQK * 4, "Vs": BC * D * 4, "Ps": BC * LDP * 4}


def shared_bytes() -> int:
    """Shared memory per block at D = 64: 68 608 bytes (the kernel's header and `shared_bytes(64)`)."""
    return sum(SMEM.values())


def tiles() -> Figure:
    fig = Figure(figsize=(7.5, 4.4))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 88))
    n_tiles = S_SEQ // BR                          # 16 tiles of 64 rows
    qb, kt = 2, 5                                  # the block's query tile, the current key tile
    top, h = 76, 56                                # global matrices: y from top - h to top
    th = h / n_tiles

    # global memory: Q, K, V of one (batch, head)
    ax.text(1, 85, "global memory (one head)", fontsize=st.TITLE, weight="bold", va="center")
    for x0, name, col, hi in ((3, "Q", st.Q, qb), (19, "K", st.K, kt), (31, "V", st.V, kt)):
        st.box(ax, x0, top - h, 9, h, fc=st.light(col, 0.8), ec=st.GRID)
        for t in range(1, n_tiles):
            ax.plot([x0, x0 + 9], [top - t * th] * 2, color=st.light(st.GRID, 0.5), lw=0.5, zorder=3)
        st.box(ax, x0, top - (hi + 1) * th, 9, th, fc=col, ec="black", lw=1.2, zorder=4)
        ax.text(x0 + 4.5, top + 1.2, name, ha="center", va="bottom", fontsize=st.TITLE, weight="bold", color=col)
    ax.text(1, top - h - 2, f"S = {S_SEQ} rows × D = {D}, fp16, {n_tiles} tiles\n"
                            f"Q tile: rows {qb * BR}–{(qb + 1) * BR - 1} (this block)\n"
                            f"K, V tiles: rows {kt * BC}–{(kt + 1) * BC - 1} (step k0 = {kt * BC})",
            ha="left", va="top", fontsize=st.SMALL, linespacing=1.35)

    # one arrow between the two memories
    st.arrow(ax, (42, 52), (55, 52), color=st.GRID, lw=2.2)
    ax.text(48.5, 54.5, "copy", ha="center", va="bottom", fontsize=st.SMALL)
    ax.text(48.5, 49.5, "16-byte\nloads", ha="center", va="top", fontsize=st.SMALL, color=st.MUTED)

    # shared memory of the block
    sx, sw = 57, 45
    ax.text(sx, 85, "shared memory (one block)", fontsize=st.TITLE, weight="bold", va="center")
    rows = [("Qs", st.Q, f"[{BR}][{LDQK}] fp32", "once"),
            ("Ks", st.K, f"[{BC}][{LDQK}] fp32", "every step"),
            ("Vs", st.V, f"[{BC}][{D}] fp32", "every step"),
            ("Ps", st.SCORES, f"[{BC}][{LDP}] fp32, Pᵀ", "by the softmax")]
    y = 77
    for name, col, what, when in rows:
        st.box(ax, sx, y - 11.5, sw, 11.5, fc=st.light(col, 0.75), ec=col, lw=1.4)
        ax.text(sx + 1.5, y - 3.3, name, fontsize=st.NORMAL, weight="bold", va="center", color=st.TEXT)
        ax.text(sx + 9.5, y - 3.3, what, fontsize=st.SMALL, va="center")
        ax.text(sx + 9.5, y - 8.3, f"{SMEM[name]:,} B, {when}".replace(",", " ", 1), fontsize=st.SMALL,
                va="center", color=st.MUTED)
        y -= 13.2
    ax.text(sx, y - 0.5, f"{shared_bytes():,} bytes in all".replace(",", " "), fontsize=st.SMALL, va="top")

    # one step of the loop, and the registers
    rx, rw = 107, 42
    ax.text(rx, 85, "one step of the loop", fontsize=st.TITLE, weight="bold", va="center")
    steps = ["__syncthreads()",
             "copy the K and V tiles",
             "__syncthreads()",
             f"scores of the {BR}×{BC} tile:\n{TM} rows × {TN} keys per thread",
             "online softmax → Ps",
             "__syncthreads()",
             "acc += P · V"]
    y = 78
    for s_ in steps:
        bar = s_.startswith("__sync")
        n_lines = s_.count("\n") + 1
        hh = 4.4 * n_lines + 0.8
        st.box(ax, rx, y - hh, rw, hh, fc=st.IDLE if bar else "white", ec=st.GRID, lw=0.8,
               text=s_, size=st.SMALL, color=st.MUTED if bar else st.TEXT)
        y -= hh + 1.1
    ax.text(rx, 23, f"thread (tx, ty) of {THREADS} (16 × 16):\nrows 4·ty + i, i = 0 … {TM - 1},\n"
                    f"keys tx + 16·j, j = 0 … {TN - 1}", fontsize=st.SMALL, va="center", linespacing=1.3)
    st.box(ax, rx, 1, rw, 14, fc=st.light(st.REG, 0.3), ec=st.GRID, lw=0.8)
    ax.text(rx + rw / 2, 11.5, "registers (each thread)", ha="center", va="center", fontsize=st.SMALL,
            weight="bold")
    ax.text(rx + rw / 2, 5.5, f"m and its share of ℓ for {TM} rows,\nacc: {TM} rows × {D // 16} columns",
            ha="center", va="center", fontsize=st.SMALL)
    ax.text(1, 4, f"A K or V row crosses from global memory once per block of {BR} queries;\n"
                  "no score is written back.", fontsize=st.SMALL, va="center", color=st.TEXT)
    return fig


# ---- the online softmax on the notebook's example row -------------------------------------------
ROW_S, ROW_BC = 300, 64


def example_row() -> np.ndarray:
    """The chapter's made-up row of scores (base-2 units): 3 sin(0.37 j) + j / 50."""
    j = np.arange(ROW_S, dtype=np.float64)
    return 3 * np.sin(0.37 * j) + j / 50


def online_steps(s: np.ndarray, bc: int = ROW_BC) -> list[dict]:
    """Per tile: the new running max m, alpha = 2^(m_old - m_new), the old sum rescaled, the tile's
    own sum relative to the new max, and the new running sum l (the notebook's loop, scalar)."""
    m, l, out = -math.inf, 0.0, []
    for k0 in range(0, len(s), bc):
        t = s[k0:k0 + bc]
        m_new = max(m, float(t.max()))
        alpha = 2.0 ** (m - m_new)
        tile_sum = float(np.exp2(t - m_new).sum())
        out.append(dict(k0=k0, k1=min(len(s), k0 + bc), m=m_new, alpha=alpha, old=alpha * l, tile=tile_sum,
                        l=alpha * l + tile_sum))
        m, l = m_new, alpha * l + tile_sum
    return out


def online_softmax() -> Figure:
    s = example_row()
    steps = online_steps(s)
    fig = Figure(figsize=(7.5, 4.6))
    gs = fig.add_gridspec(2, 1, height_ratios=[1.25, 1], left=0.09, right=0.985, top=0.9, bottom=0.11, hspace=0.12)
    ax, bx = fig.add_subplot(gs[0]), fig.add_subplot(gs[1])

    for i, stp in enumerate(steps):
        for a in (ax, bx):
            if i % 2 == 0:
                a.axvspan(stp["k0"] - 0.5, stp["k1"] - 0.5, color=st.IDLE, lw=0, zorder=0)
    ax.plot(np.arange(ROW_S), s, ".", ms=2.5, color=st.MUTED, zorder=2, label="scores s of the row")
    for i, stp in enumerate(steps):
        ax.plot([stp["k0"] - 0.5, stp["k1"] - 0.5], [stp["m"]] * 2, color=st.STATE, lw=2.2, zorder=3,
                label="running max m after the tile" if i == 0 else None)
        ax.text((stp["k0"] + stp["k1"]) / 2, stp["m"] + 0.35, f"m = {stp['m']:.2f}", ha="center", va="bottom",
                fontsize=st.SMALL, color=st.STATE)
        ax.text((stp["k0"] + stp["k1"]) / 2, -4.6, f"tile {i}", ha="center", va="bottom", fontsize=st.SMALL,
                color=st.TEXT)
    ax.set_ylim(-5, 11.5)
    ax.set_xlim(-0.5, ROW_S - 0.5)
    ax.set_ylabel("score (base-2 units)", fontsize=st.NORMAL)
    ax.tick_params(labelsize=st.SMALL, labelbottom=False)
    ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, fontsize=st.SMALL, frameon=False,
              borderaxespad=0.2)

    centers = [(stp["k0"] + stp["k1"] - 1) / 2 for stp in steps]
    widths = [min(0.75 * ROW_BC, 0.95 * (stp["k1"] - stp["k0"])) for stp in steps]
    olds = [stp["old"] for stp in steps]
    news = [stp["tile"] for stp in steps]
    bx.bar(centers, olds, widths, color=st.light(st.STATE, 0.55), edgecolor=st.STATE, lw=0.8,
           label="α · ℓ before the tile (old terms moved onto the new max)")
    bx.bar(centers, news, widths, bottom=olds, color=st.light(st.Q, 0.5), edgecolor=st.Q, lw=0.8,
           label="Σ 2^(s − m) of the tile's keys")
    for c, stp in zip(centers, steps):
        bx.text(c, stp["l"] + 0.8, f"ℓ = {stp['l']:.2f}", ha="center", va="bottom", fontsize=st.SMALL)
        if stp["old"] > 0:
            bx.text(c, stp["old"] / 2, f"α = {stp['alpha']:.3f}", ha="center", va="center", fontsize=st.SMALL,
                    color=st.TEXT)
        else:
            bx.text(c, 2.0, "α = 0\n(first tile)", ha="center", va="bottom", fontsize=st.SMALL, color=st.TEXT)
    bx.set_ylim(0, 40)
    bx.set_xlim(-0.5, ROW_S - 0.5)
    bx.set_ylabel("running sum ℓ", fontsize=st.NORMAL)
    bx.set_xlabel(f"key index j (tiles of Bc = {ROW_BC} keys)", fontsize=st.NORMAL)
    bx.tick_params(labelsize=st.SMALL)
    bx.legend(loc="upper left", fontsize=st.SMALL, frameon=False, borderaxespad=0.3)
    return fig


DIAGRAMS = {
    "ch02_tiles": tiles,
    "ch02_online_softmax": online_softmax,
}
