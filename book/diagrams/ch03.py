"""Chapter 3 diagrams: how a warp's tile products split into 16×16×16 wmma fragments (step a), and the
shared-memory banks an ldmatrix phase touches with and without the padding of step c.

The numbers come from the chapter's code: Br = 64 query rows per block of 4 warps, Bc = 64 keys per
tile, D = 64 (solutions/03_wmma/attention.cu, flashtutor/kernels/k03a_wmma.py); rows padded by
PAD_H = 8 halves in step c, and the bank model of flashtutor/kernels/k03c_swizzle.py (32 banks of
4 bytes; an ldmatrix phase reads 8 rows of 16 bytes).
"""
from __future__ import annotations

from matplotlib.figure import Figure

import style as st

BR, BC, D, WARPS = 64, 64, 64, 4     # step a at D = 64
FRAG = 16                            # wmma tile: 16×16×16
PAD_H = 8                            # step c: halves added to each fp16 row
BANKS, BANK_BYTES = 32, 4


def _frag_grid(ax, x, y, n_cols, n_rows, size, color, labels=None, hi=(), ec=st.GRID, label_size=st.SMALL):
    """n_rows × n_cols fragments with lower-left corner (x, y); row 0 at the top. `hi`: highlighted (r, c)."""
    for r in range(n_rows):
        for c in range(n_cols):
            on = (r, c) in hi
            st.box(ax, x + c * size, y + (n_rows - 1 - r) * size, size, size,
                   fc=color if on else st.light(color, 0.78), ec="black" if on else ec, lw=1.4 if on else 0.8,
                   zorder=3 if on else 2)
            if labels:
                ax.text(x + (c + 0.5) * size, y + (n_rows - 0.5 - r) * size, labels(r, c), ha="center",
                        va="center", fontsize=label_size, color="white" if on else st.TEXT, zorder=5)


def fragments() -> Figure:
    fig = Figure(figsize=(7.5, 4.0))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(10, 90))
    f = 7.6                                   # drawing size of one 16×16 fragment
    nk, nn, nd = D // FRAG, BC // FRAG, D // FRAG   # 4, 4, 4 at D = Bc = 64

    # the block: 4 warps of 16 query rows each
    wx, wy, wh = 2, 35, 8
    ax.text(wx, 76, "the block:", fontsize=st.NORMAL, weight="bold", va="center")
    ax.text(wx, 71.5, f"{WARPS} warps, {BR} rows", fontsize=st.SMALL, va="center")
    for w in range(WARPS):
        on = w == 1
        st.box(ax, wx, wy + (WARPS - 1 - w) * wh, 13, wh, fc=st.Q if on else st.light(st.Q, 0.75),
               ec="black" if on else st.GRID, lw=1.3 if on else 0.8, text=f"warp {w}", size=st.SMALL,
               color="white" if on else st.TEXT)
    ax.text(wx, wy - 2, f"{FRAG} rows\neach", fontsize=st.SMALL, va="top", color=st.MUTED)

    # product 1: S_w = Q_w · K_jᵀ, fragment n = 2 highlighted
    n_hi = 2
    ax_, cy = 20, 33                          # left edge of Q_w, bottom of the S row
    bx = ax_ + nk * f + 2.5                   # left edge of Kᵀ and S_w
    ax.text(ax_, 82, "S = Q_w · K_jᵀ", fontsize=st.TITLE, weight="bold", va="center")
    _frag_grid(ax, ax_, cy, nk, 1, f, st.Q, labels=lambda r, c: f"qf[{c}]", hi={(0, c) for c in range(nk)})
    _frag_grid(ax, bx, cy + f + 2.5, nn, nk, f, st.K, hi={(kk, n_hi) for kk in range(nk)})
    _frag_grid(ax, bx, cy, nn, 1, f, st.SCORES, labels=lambda r, c: f"n={c}", hi={(0, n_hi)})
    ax.text(ax_ + nk * f / 2, cy - 1.5, f"Q_w [16 × {D}]: warp 1's\nrows, matrix_a", ha="center", va="top",
            fontsize=st.SMALL)
    ax.text(bx + nn * f / 2, cy - 1.5, f"S_w [16 × {BC}] fp32\n→ shared memory", ha="center", va="top", fontsize=st.SMALL)
    ax.text(bx + nn * f / 2, cy + f + 2.5 + nk * f + 1, f"K_jᵀ [{D} × {BC}]\nmatrix_b, col_major",
            ha="center", va="bottom", fontsize=st.SMALL)
    st.arrow(ax, (wx + 13, wy + 2.5 * wh), (ax_ + 3, cy + f), color=st.Q, lw=1.2, rad=0.25)
    ax.text(bx - 1.2, cy + f + 2.5 + nk * f / 2, "kk = 0 … 3", rotation=90, ha="right", va="center",
            fontsize=st.SMALL, color=st.MUTED)

    # product 2: acc += P_w · V_j, fragment dn = 1 highlighted
    d_hi = 1
    px = 85
    vx = px + nn * f + 2.5
    ax.text(px, 82, "acc += P_w · V_j", fontsize=st.TITLE, weight="bold", va="center")
    _frag_grid(ax, px, cy, nn, 1, f, st.SCORES, labels=lambda r, c: f"kk={c}", hi={(0, c) for c in range(nn)})
    _frag_grid(ax, vx, cy + f + 2.5, nd, nn, f, st.V, hi={(kk, d_hi) for kk in range(nn)})
    _frag_grid(ax, vx, cy, nd, 1, f, st.STATE, labels=lambda r, c: f"dn={c}", hi={(0, d_hi)})
    ax.text(px + nn * f / 2, cy - 1.5, f"P_w [16 × {BC}] fp16\nmatrix_a, from shared", ha="center", va="top", fontsize=st.SMALL)
    ax.text(vx + nd * f / 2, cy - 1.5, f"acc [16 × {D}] fp32\nin registers", ha="center", va="top",
            fontsize=st.SMALL)
    ax.text(vx + nd * f / 2, cy + f + 2.5 + nn * f + 1, f"V_j [{BC} × {D}]\nmatrix_b, row_major",
            ha="center", va="bottom", fontsize=st.SMALL)

    mma = nk * nn
    ax.text(2, 16, f"Each square is one {FRAG}×{FRAG} fragment. A highlighted output fragment is the sum of "
                    f"{nk} mma_sync calls, one\nper highlighted pair (a {FRAG}×{FRAG}×{FRAG} product each, compiled "
                    f"to 2 HMMA.16816.F32). Per K/V tile a warp issues\n{mma} mma_sync for S and {mma} for P·V; "
                    f"its acc stays in registers across all tiles.",
            fontsize=st.SMALL, va="center", linespacing=1.35)
    return fig


# ---- banks ------------------------------------------------------------------------------------
def ldmatrix_rows(row_stride_bytes: int) -> list[int]:
    """Start byte of each of the 8 16-byte rows one ldmatrix phase reads (k03c_swizzle.ldmatrix_phase)."""
    return [r * row_stride_bytes for r in range(8)]


def passes(row_stride_bytes: int) -> int:
    """Passes of one ldmatrix phase: the most distinct 4-byte words any bank must deliver."""
    words: dict[int, set] = {}
    for start in ldmatrix_rows(row_stride_bytes):
        for b in range(0, 16, BANK_BYTES):
            w = (start + b) // BANK_BYTES
            words.setdefault(w % BANKS, set()).add(w)
    return max(len(s) for s in words.values())


def _bank_panel(ax, x0, y_top, stride_halves, title):
    cell = 1.9                                # width of one 4-byte bank in drawing units
    stride = stride_halves * 2                 # bytes per K-tile row
    n_lines = -(-8 * stride // (BANKS * BANK_BYTES))   # 128-byte lines the 8 rows occupy
    lh = 4.0
    ax.text(x0, y_top + 7.5, title, fontsize=st.NORMAL, weight="bold", va="center")
    ax.text(x0 - 0.8, y_top + 2.3, "bank", ha="right", va="center", fontsize=st.SMALL, color=st.MUTED)
    for b in range(0, BANKS, 4):
        ax.text(x0 + (b + 0.5) * cell, y_top + 2.3, str(b), ha="center", va="center", fontsize=st.SMALL,
                color=st.MUTED)
    for line in range(n_lines):
        y = y_top - (line + 1) * lh
        for b in range(BANKS):
            addr = line * BANKS * BANK_BYTES + b * BANK_BYTES
            row, off = divmod(addr, stride)
            if row >= 8:
                fc, label = "white", None
            elif off >= D * 2:
                fc, label = st.IDLE, None                                        # the padding
            elif off < 16:
                fc, label = st.K, str(row)                                       # the 16 bytes ldmatrix reads
            else:
                fc, label = st.light(st.K, 0.8), None
            st.box(ax, x0 + b * cell, y, cell, lh, fc=fc, ec="white", lw=0.5)
            if label and off == 4:                                               # one label per 16-byte chunk
                ax.text(x0 + b * cell, y + lh / 2, label, ha="center", va="center", fontsize=st.SMALL,
                        color="white", weight="bold", zorder=5)
    hit = sorted({(start // BANK_BYTES + i) % BANKS for start in ldmatrix_rows(stride) for i in range(4)})
    n = passes(stride)
    y_end = y_top - 9 * lh                     # the padded panel has 9 lines: align the two panels
    where = (f"the 8 rows share banks {hit[0]}–{hit[-1]}" if len(hit) < BANKS else
             f"the 8 rows cover the {BANKS} banks once each")
    ax.text(x0, y_end - 3, f"row stride {stride} B ({stride_halves} halves):\n{where}", fontsize=st.SMALL,
            va="top", linespacing=1.3)
    ax.text(x0, y_end - 13, f"→ {n} pass{'es' if n > 1 else ''} per ldmatrix phase", fontsize=st.NORMAL,
            va="center", weight="bold", color=st.HIGHLIGHT if n > 1 else st.K)


def banks() -> Figure:
    fig = Figure(figsize=(7.5, 3.8))
    ax = st.blank_axes(fig, xlim=(0, 150), ylim=(0, 76))
    _bank_panel(ax, 8, 62, D, f"steps a and b: rows of D = {D} halves")
    _bank_panel(ax, 83, 62, D + PAD_H, f"step c: rows padded by {PAD_H} halves")
    ax.text(1, 4, "Shared memory drawn 128 bytes (32 banks of 4 bytes) per line; the first 8 rows of a K tile. "
                  "Dark: the 16 bytes\nof each row that one ldmatrix phase reads (numbered by row); grey: padding.",
            fontsize=st.SMALL, va="center", linespacing=1.35)
    return fig


DIAGRAMS = {
    "ch03_fragments": fragments,
    "ch03_banks": banks,
}
