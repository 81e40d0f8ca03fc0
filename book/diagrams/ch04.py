"""Chapter 4 diagrams: the grid of programs and one program's K/V loop, and which score blocks a causal
program visits.

The numbers come from the chapter's code (solutions/04_triton_online_softmax/attention.py):
grid = (cdiv(S, BLOCK_M), B·H), BLOCK_M = BLOCK_N = 64 for both head dims (CONFIGS), the seed shape
B1 H16 S1024 D64; with causal, program pid_m stops its loop at end = min(S, (pid_m + 1)·BLOCK_M). The
small causal example is the notebook's (S = 10, blocks of 4).
"""
from __future__ import annotations

from matplotlib import patches
from matplotlib.figure import Figure

import style as st

B, H, S, D = 1, 16, 1024, 64          # the seed shape
BLOCK_M = BLOCK_N = 64                 # CONFIGS[64] and CONFIGS[128]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def grid() -> Figure:
    fig = Figure(figsize=(7.5, 4.3))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 86))
    n_m, n_bh = cdiv(S, BLOCK_M), B * H
    pm, pbh = 1, 3                                  # the program the right half follows
    b, h = divmod(pbh, H)

    # left: the grid
    c, gx, gy = 2.2, 11, 27
    ax.text(1, 83, f"grid = (cdiv(S, BLOCK_M), B·H) = ({n_m}, {n_bh})", fontsize=st.TITLE, weight="bold",
            va="center")
    ax.text(1, 77.5, f"B = {B}, H = {H}, S = {S}, BLOCK_M = {BLOCK_M}", fontsize=st.SMALL, va="center",
            color=st.MUTED)
    for i in range(n_m):
        for j in range(n_bh):
            on = (i, j) == (pm, pbh)
            st.box(ax, gx + i * c, gy + (n_bh - 1 - j) * c, c, c, fc=st.HIGHLIGHT if on else st.light(st.Q, 0.7),
                   ec="white", lw=0.5, zorder=3 if on else 2)
    ax.text(gx + n_m * c / 2, gy - 1.5, "pid_m = program_id(0):\nthe query block", ha="center", va="top",
            fontsize=st.SMALL, linespacing=1.3)
    ax.text(gx - 1.5, gy + n_bh * c / 2, "pid_bh = program_id(1)\n= b·H + h", rotation=90, ha="right",
            va="center", fontsize=st.SMALL, linespacing=1.3)
    ax.text(1, 4, f"{n_m * n_bh} programs for 132 SMs;\neach owns {BLOCK_M} query rows\nof one (batch, head)",
            fontsize=st.SMALL, va="bottom", linespacing=1.3)

    # right: program (pm, pbh)
    x0 = 54
    q0 = pm * BLOCK_M
    ax.text(x0, 77.5, f"program ({pm}, {pbh}): b = {b}, h = {h}, query rows {q0}–{q0 + BLOCK_M - 1}",
            fontsize=st.NORMAL, weight="bold", va="center")
    top, hh = 64, 34
    th = hh / n_m
    cur = 2                                          # the loop step drawn as current
    cols = [("Q", st.Q, x0, {pm}), ("K", st.K, x0 + 12, {cur}), ("V", st.V, x0 + 21, {cur}),
            ("O", st.O, x0 + 80, {pm})]
    for name, col, x, hi in cols:
        st.box(ax, x, top - hh, 7, hh, fc=st.light(col, 0.8), ec=st.GRID)
        for t in range(n_m):
            if t in hi:
                st.box(ax, x, top - (t + 1) * th, 7, th, fc=col, ec="black", lw=1.2, zorder=4)
            elif t:
                ax.plot([x, x + 7], [top - t * th] * 2, color=st.light(st.GRID, 0.5), lw=0.5, zorder=3)
        ax.text(x + 3.5, top - hh - 1, name, ha="center", va="top", fontsize=st.NORMAL, weight="bold", color=col)
    kx = x0 + 30                                     # the loop walks the K and V blocks downwards
    ax.annotate("", xy=(kx, top - hh + 0.5), xytext=(kx, top - 0.5),
                arrowprops=dict(arrowstyle="-|>", color=st.GRID, lw=1.4))
    ax.text(kx + 1.2, top - hh + 1, "loop", fontsize=st.SMALL, va="bottom", ha="left", color=st.MUTED)
    # on-chip state
    rx, rw, ry, rh = x0 + 47, 24, 36, 20
    st.box(ax, rx, ry, rw, rh, fc=st.light(st.REG, 0.35), ec=st.GRID, lw=0.9)
    ax.text(rx + rw / 2, ry + rh - 4, "on chip (fp32)", ha="center", va="center", fontsize=st.SMALL,
            weight="bold")
    ax.text(rx + rw / 2, ry + 8, f"m_i [{BLOCK_M}]\nl_i [{BLOCK_M}]\nacc [{BLOCK_M}, {D}]", ha="center",
            va="center", fontsize=st.SMALL, linespacing=1.35)
    st.arrow(ax, (x0 + 7, top - pm * th), (rx + 4, ry + rh), color=st.Q, rad=-0.5)   # over the K, V columns
    st.arrow(ax, (kx + 1, top - (cur + 0.5) * th), (rx, ry + rh - 4), color=st.GRID)
    st.arrow(ax, (rx + rw, ry + rh / 2), (x0 + 80, top - (pm + 0.5) * th), color=st.O)
    ax.text(x0, top - hh - 7,
            f"Q tile: loaded once. K, V: one {BLOCK_N}-row block per step,\n"
            f"start_n = 0, {BLOCK_N}, …, {S - BLOCK_N}, masked past S. Each step:\n"
            "scores = tl.dot(q, kᵀ)·qk_scale, the masks, then the online-\n"
            "softmax update of m_i, l_i and acc. After the loop:\n"
            "O = acc / l_i, stored once, masked past S.",
            fontsize=st.SMALL, va="top", linespacing=1.3)
    return fig


# ---- causal ---------------------------------------------------------------------------------------
DEMO_S, DEMO_B = 10, 4                 # the notebook's example: S = 10, BLOCK_M = BLOCK_N = 4

KEPT, CAUSAL, PAST_S, PAD_ROW, SKIPPED = "kept", "causal", "past_s", "pad_row", "skipped"
COLORS = {KEPT: st.SCORES, CAUSAL: st.light(st.SCORES, 0.75), PAST_S: st.light(st.GRID, 0.6),
          PAD_ROW: st.IDLE, SKIPPED: "white"}


def demo_cells(S: int = DEMO_S, bm: int = DEMO_B, bn: int = DEMO_B) -> dict[tuple[int, int], str]:
    """What happens to score (i, j) of the padded [n_m·bm, cdiv(S, bn)·bn] grid in the causal kernel."""
    n_m = cdiv(S, bm)
    out = {}
    for pid_m in range(n_m):
        end = min(S, (pid_m + 1) * bm)                     # the causal loop bound
        visited = {j for n in range(0, end, bn) for j in range(n, n + bn)}
        for i in range(pid_m * bm, (pid_m + 1) * bm):
            for j in range(cdiv(S, bn) * bn):
                if j not in visited:
                    out[i, j] = SKIPPED
                elif i >= S:
                    out[i, j] = PAD_ROW                    # computed, never stored (row_ok)
                elif j >= S:
                    out[i, j] = PAST_S                     # loaded as 0, score set to -inf (kv_ok)
                elif j > i:
                    out[i, j] = CAUSAL                     # score set to -inf
                else:
                    out[i, j] = KEPT
    return out


def block_counts(S: int = S, bm: int = BLOCK_M, bn: int = BLOCK_N) -> dict[str, int]:
    """Key blocks the causal programs visit, of all the blocks a non-causal program visits."""
    n_m, n_n = cdiv(S, bm), cdiv(S, bn)
    visited = sum(cdiv(min(S, (p + 1) * bm), bn) for p in range(n_m))
    return {"visited": visited, "all": n_m * n_n}


def causal() -> Figure:
    fig = Figure(figsize=(7.5, 4.2))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 84))

    # left: the notebook's S = 10 example, element by element
    cells = demo_cells()
    n = cdiv(DEMO_S, DEMO_B) * DEMO_B                      # 12 rows and columns, padding included
    c, x0, y0 = 4.2, 14, 16
    ax.text(1, 81, f"S = {DEMO_S}, BLOCK_M = BLOCK_N = {DEMO_B} (the notebook's example)", fontsize=st.NORMAL,
            weight="bold", va="center")
    for (i, j), kind in cells.items():
        st.box(ax, x0 + j * c, y0 + (n - 1 - i) * c, c, c, fc=COLORS[kind], ec=st.light(st.GRID, 0.6), lw=0.4,
               hatch="///" if kind == PAD_ROW else None)
    for t in range(0, n + 1, DEMO_B):
        ax.plot([x0 + t * c] * 2, [y0, y0 + n * c], color=st.GRID, lw=1.2, zorder=4)
        ax.plot([x0, x0 + n * c], [y0 + t * c] * 2, color=st.GRID, lw=1.2, zorder=4)
    for p in range(n // DEMO_B):
        ax.text(x0 - 1, y0 + (n - (p + 0.5) * DEMO_B) * c, f"pid_m={p}", ha="right", va="center",
                fontsize=st.SMALL)
    for j in range(0, n, 2):
        ax.text(x0 + (j + 0.5) * c, y0 + n * c + 0.8, str(j), ha="center", va="bottom", fontsize=st.SMALL,
                color=st.MUTED)
    ax.text(x0 + n * c / 2, y0 + n * c + 5, "key j", ha="center", va="bottom", fontsize=st.SMALL, color=st.MUTED)
    ax.text(x0 + n * c / 2, y0 - 1.5, "query i (rows 10, 11: padding)", ha="center", va="top", fontsize=st.SMALL,
            color=st.MUTED)

    # legend, in the free space to the right of the example
    lx, ly = 68, 70
    legend = [(KEPT, "computed and kept (j ≤ i)"), (CAUSAL, "visited, masked: j > i"),
              (PAST_S, "visited, masked: key past S"), (PAD_ROW, "row past S: computed, not stored"),
              (SKIPPED, "never loaded: the loop stops")]
    for k, (kind, label) in enumerate(legend):
        y = ly - k * 6
        ax.add_patch(patches.Rectangle((lx, y - 1.8), 3.6, 3.6, facecolor=COLORS[kind],
                                       edgecolor=st.light(st.GRID, 0.3), lw=0.6,
                                       hatch="///" if kind == PAD_ROW else None))
        ax.text(lx + 5, y, label, fontsize=st.SMALL, va="center")

    # right-bottom: the seed shape, block by block
    counts = block_counts()
    n_b = cdiv(S, BLOCK_M)
    bc, bx0, by0 = 1.9, 70, 4
    for pm in range(n_b):
        for kn in range(n_b):
            if kn > pm:
                fc = "white"
            elif kn == pm:
                fc = st.light(st.SCORES, 0.45)             # the diagonal block: the mask bites inside
            else:
                fc = st.SCORES                             # below the diagonal: no key is masked
            st.box(ax, bx0 + kn * bc, by0 + (n_b - 1 - pm) * bc, bc, bc, fc=fc, ec=st.light(st.GRID, 0.55), lw=0.4)
    ax.add_patch(patches.Rectangle((bx0, by0), n_b * bc, n_b * bc, fill=False, edgecolor=st.GRID, lw=1.0))
    tx = bx0 + n_b * bc + 3
    n_full = n_b * (n_b - 1) // 2
    ax.text(tx, by0 + n_b * bc, f"the seed shape: S = {S},\nblocks of {BLOCK_M} × {BLOCK_N}", fontsize=st.SMALL,
            va="top", weight="bold", linespacing=1.3)
    ax.text(tx, by0 + 9, f"dark: no score masked ({n_full})\nlight: the diagonal ({n_b})\n"
                         f"white: never loaded ({n_b * n_b - counts['visited']})\n"
                         f"{counts['visited']} of {counts['all']} blocks visited",
            fontsize=st.SMALL, va="center", linespacing=1.35)
    return fig


DIAGRAMS = {
    "ch04_grid": grid,
    "ch04_causal": causal,
}
