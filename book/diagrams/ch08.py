"""Chapter 8 diagrams: what each kernel of the backward pass reads and writes in global memory (the data flow),
and the two loop orders of the backward (dK/dV with the keys outer, dQ with the queries outer, or by atomics).

The data flow is the solution's (solutions/08_backward/attention.py): the forward writes O and the natural-log
lse; ``bwd_preprocess_kernel`` reads O and dO and writes delta = rowsum(dO ∘ O); ``bwd_dkdv_kernel`` reads Q, K, V,
dO, lse and delta and writes dK and dV; ``bwd_dq_kernel`` reads the same and writes dQ. P, dP and dS exist only as
tiles on chip. The sizes are those of the chapter's first timed shape, B4 H32 S4096 D128 (fp16 [B, H, S, D]
tensors, fp32 [B, H, S] rows, and P if it were stored in fp16). The loop orders are schematic (six blocks of
queries and of keys, causal, Br = Bc).
"""
from __future__ import annotations

from matplotlib import patches
from matplotlib.figure import Figure

import style as st

B, H, S, D = 4, 32, 4096, 128          # the first timed shape of scripts/ch08_gpu.py (TIME_SHAPES[0])


def sizes() -> dict[str, float]:
    """Bytes of one [B, H, S, D] fp16 tensor, one [B, H, S] fp32 row vector, and P as [B, H, S, S] fp16."""
    return {"tensor": B * H * S * D * 2, "rows": B * H * S * 4, "p": B * H * S * S * 2}


def _mb(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB" if n >= 1e7 else f"{n / 1e6:.1f} MB"


# ---- the data flow ---------------------------------------------------------------------------------------
KERNELS = ["forward", "preprocess", "dK, dV\n(keys outer)", "dQ\n(queries outer)"]
READ, WRITE, CHIP = "read", "write", "chip"
# tensor -> one entry per kernel: READ, WRITE, CHIP (computed as tiles on chip, never stored) or None
FLOW = {
    "Q": [READ, None, READ, READ],
    "K": [READ, None, READ, READ],
    "V": [READ, None, READ, READ],
    "O": [WRITE, READ, None, None],
    "lse": [WRITE, None, READ, READ],
    "dO": [None, READ, READ, READ],
    "delta": [None, WRITE, READ, READ],
    "dQ": [None, None, None, WRITE],
    "dK, dV": [None, None, WRITE, None],
    "P, dP, dS": [CHIP, None, CHIP, CHIP],
}
COLOR = {"Q": st.Q, "K": st.K, "V": st.V, "O": st.O, "lse": st.STATE, "dO": st.O, "delta": st.STATE,
         "dQ": st.Q, "dK, dV": st.K, "P, dP, dS": st.SCORES}


def dataflow() -> Figure:
    fig = Figure(figsize=(7.4, 4.8))
    ax = st.blank_axes(fig, xlim=(0, 148), ylim=(0, 94))
    sz = sizes()
    what = {"Q": "tensor", "K": "tensor", "V": "tensor", "O": "tensor", "lse": "rows", "dO": "tensor",
            "delta": "rows", "dQ": "tensor", "dK, dV": "tensor", "P, dP, dS": "p"}
    shape = {"tensor": "[B,H,S,D] fp16", "rows": "[B,H,S] fp32", "p": "[B,H,S,S] fp16"}
    ax.text(1, 91, f"What each kernel reads and writes in global memory, sizes at B{B} H{H} S{S} D{D}",
            fontsize=st.TITLE, weight="bold", va="center")
    x0, cw, y_top, rh = 52, 24, 72, 6.2
    ax.annotate("", xy=(x0 + 4 * cw, y_top + 10), xytext=(x0, y_top + 10),
                arrowprops=dict(arrowstyle="-|>", color=st.MUTED, lw=1.0))
    ax.text(x0 + 2 * cw, y_top + 10.8, "launch order", fontsize=st.SMALL, color=st.MUTED, ha="center",
            va="bottom")
    for c, name in enumerate(KERNELS):
        st.box(ax, x0 + c * cw + 0.5, y_top, cw - 1, 8, fc=st.light(st.GPU, 0.8), ec=st.GRID, text=name,
               size=st.SMALL, weight="bold", linespacing=1.15)
    for r, (name, row) in enumerate(FLOW.items()):
        y = y_top - (r + 1) * rh
        kind = what[name]
        ax.text(1, y + rh / 2, name, fontsize=st.NORMAL, weight="bold", color=COLOR[name], va="center")
        ax.text(15, y + rh / 2, shape[kind], fontsize=st.SMALL, va="center", color=st.MUTED)
        ax.text(50, y + rh / 2, _mb(sz[kind]), fontsize=st.SMALL, va="center", ha="right")
        for c, cell in enumerate(row):
            x = x0 + c * cw + 0.5
            if cell is None:
                st.box(ax, x, y + 0.4, cw - 1, rh - 0.8, fc="white", ec=st.light(st.GRID, 0.8), lw=0.5)
            elif cell == READ:
                st.box(ax, x, y + 0.4, cw - 1, rh - 0.8, fc=st.light(COLOR[name], 0.7), ec=st.GRID, lw=0.6,
                       text="read", size=st.SMALL)
            elif cell == WRITE:
                st.box(ax, x, y + 0.4, cw - 1, rh - 0.8, fc=COLOR[name], ec="black", lw=1.0, text="write",
                       size=st.SMALL, color="white", weight="bold")
            else:
                st.box(ax, x, y + 0.4, cw - 1, rh - 0.8, fc=st.light(COLOR[name], 0.85), ec=st.GRID, lw=0.6,
                       hatch="///", text="tiles on chip", size=st.SMALL)
    yb = y_top - len(FLOW) * rh - 1.5
    ax.text(1, yb, "P, dP and dS would take " + _mb(sz["p"]) + " each if stored; they exist only as tiles on chip. "
                   "Each backward kernel\nrecomputes P = exp(S − lse) and dS = P ∘ (dP − delta): the forward "
                   "keeps O and lse, never an S×S matrix.",
            fontsize=st.SMALL, va="top", linespacing=1.35)
    return fig


# ---- the loop orders --------------------------------------------------------------------------------------
N = 6                                   # blocks of queries and of keys in the schematic


def _grid(ax, x0, y0, c, *, column=None, row=None):
    """The causal block grid: query blocks i down, key blocks j across; blocks with j > i are never visited."""
    for i in range(N):
        for j in range(N):
            x, y = x0 + j * c, y0 + (N - 1 - i) * c
            if j > i:
                fc, ec = "white", st.light(st.GRID, 0.7)
            elif (column is not None and j == column) or (row is not None and i == row):
                fc, ec = (st.light(st.SCORES, 0.35) if i == j else st.SCORES), "black"
            else:
                fc, ec = st.light(st.SCORES, 0.8), st.light(st.GRID, 0.5)
            st.box(ax, x, y, c, c, fc=fc, ec=ec, lw=0.6)
    ax.add_patch(patches.Rectangle((x0, y0), N * c, N * c, fill=False, edgecolor=st.GRID, lw=1.0))
    ax.text(x0 + N * c / 2, y0 + N * c + 1, "key block j →", ha="center", va="bottom", fontsize=st.SMALL,
            color=st.MUTED)
    ax.text(x0 - 1, y0 + N * c / 2, "← query block i", ha="right", va="center", rotation=90, fontsize=st.SMALL,
            color=st.MUTED)


def loops() -> Figure:
    fig = Figure(figsize=(7.4, 4.9))
    ax = st.blank_axes(fig, xlim=(0, 148), ylim=(0, 98))
    c, y0 = 7, 46
    # left: dK, dV with the keys outer
    x0, j = 8, 2
    ax.text(1, 95, "dK, dV: a program owns key block j", fontsize=st.TITLE, weight="bold", va="center")
    _grid(ax, x0, y0, c, column=j)
    xj = x0 + (j + 0.5) * c
    ax.annotate("", xy=(xj, y0 + 0.8), xytext=(xj, y0 + (N - j) * c - 0.8),
                arrowprops=dict(arrowstyle="-|>", color="black", lw=1.4))
    xq = x0 + N * c + 6
    for i in range(j, N):                                   # dQ by atomics: each visited block adds to dQ_i
        y = y0 + (N - 1 - i + 0.5) * c
        ax.annotate("", xy=(xq, y), xytext=(xj + 1.2, y),
                    arrowprops=dict(arrowstyle="-|>", color=st.Q, lw=0.9, ls="--"))
    st.box(ax, xq, y0, 5, (N - j) * c, fc=st.light(st.Q, 0.6), ec=st.Q, lw=0.8)
    ax.text(xq + 6, y0 + (N - j) * c / 2, "dQ_i\n(atomics,\nfp32)", fontsize=st.SMALL, va="center",
            color=st.Q, linespacing=1.2)
    st.box(ax, x0 + j * c, y0 - 7, c, 5, fc=st.K, ec="black", lw=1.0)
    ax.text(x0 + (j + 1) * c + 1.5, y0 - 4.5, "dK_j, dV_j: written once", fontsize=st.SMALL, va="center")
    ax.text(1, 35, "keeps K_j, V_j and the fp32 dK_j, dV_j on chip;\n"
                   "per query block i: loads Q_i, dO_i, lse_i, delta_i,\n"
                   "recomputes Sᵀ = K_j Q_iᵀ, Pᵀ, dPᵀ = V_j dO_iᵀ, dSᵀ;\n"
                   "dV_j += Pᵀ dO_i, dK_j += dSᵀ Q_i: 4 matmuls.\n"
                   "Dashed: dQ_i += dS K_j by fp32 atomics (a 5th);\n"
                   "or none, and a second pass (right)",
            fontsize=st.SMALL, va="top", linespacing=1.35)

    # right: dQ with the queries outer (the second pass)
    x1, i = 89, 4
    ax.text(80, 95, "dQ pass: a program owns query block i", fontsize=st.TITLE, weight="bold", va="center")
    _grid(ax, x1, y0, c, row=i)
    yi = y0 + (N - 1 - i + 0.5) * c
    ax.annotate("", xy=(x1 + (i + 1) * c - 0.8, yi), xytext=(x1 + 0.8, yi),
                arrowprops=dict(arrowstyle="-|>", color="black", lw=1.4))
    st.box(ax, x1 + N * c + 2, y0 + (N - 1 - i) * c, 5, c, fc=st.Q, ec="black", lw=1.0)
    ax.text(x1 + N * c + 1, y0 + (N - 1 - i) * c - 1.5, "dQ_i:\nwritten\nonce", fontsize=st.SMALL, va="top",
            linespacing=1.2)
    ax.text(80, 35, "keeps Q_i, dO_i, lse_i, delta_i and the fp32\n"
                    "dQ_i on chip; per key block j ≤ i: loads K_j, V_j,\n"
                    "recomputes S = Q_i K_jᵀ, P, dP = dO_i V_jᵀ, dS;\n"
                    "dQ_i += dS K_j: 3 matmuls, 2 of them done\n"
                    "already by the dK, dV kernel: 7 in all, not 5",
            fontsize=st.SMALL, va="top", linespacing=1.35)
    # legend of the blocks
    for k, (fc, label) in enumerate([(st.SCORES, "this program's blocks"),
                                     (st.light(st.SCORES, 0.35), "its diagonal block (masked)"),
                                     (st.light(st.SCORES, 0.8), "other programs'"),
                                     ("white", "never visited (causal)")]):
        x, y = 1 + (k % 2) * 74, 8 - (k // 2) * 6
        ax.add_patch(patches.Rectangle((x, y - 1.8), 3.6, 3.6, facecolor=fc, edgecolor=st.GRID, lw=0.6))
        ax.text(x + 5, y, label, fontsize=st.SMALL, va="center")
    return fig


DIAGRAMS = {
    "ch08_dataflow": dataflow,
    "ch08_loops": loops,
}
