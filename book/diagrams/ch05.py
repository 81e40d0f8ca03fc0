"""Chapter 5 diagram: the bytes each of the three kernels moves, against a fused kernel, and how the
totals grow with S.

The byte counts split flashtutor.kernels.k05_three_kernel.bytes_moved(problem) by kernel (the test
checks that the three parts add up to it): per score, the QKᵀ GEMM writes 4 bytes (fp32), the softmax
reads 4 and writes 2 (fp16 P over the same memory), the PV GEMM reads 2; the score rows are
ld = S rounded up to 8 long. A fused kernel's floor is Q, K, V read and O written once
(Problem.min_bytes). Shapes: the chapter's, B = 1, H = 16, D = 64, S from 512 to 16384. L2 sizes are
the ones the chapter's table uses (H100 50 MiB, H200 60 MiB).
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullFormatter

import style as st

B, H, D = 1, 16, 64
SEED_S = 1024
CROSSOVER_S = (512, 1024, 2048, 4096, 8192, 16384)     # the manifest's series: flashtutor.bench.ch05.CROSSOVER_S
MiB = 2 ** 20
L2 = {"H100": 50 * MiB, "H200": 60 * MiB}


def padded(S: int) -> int:
    """ld: the score rows' stride, S rounded up to a multiple of 8 (k05_three_kernel.padded)."""
    return -(-S // 8) * 8


def per_kernel(S: int, *, B: int = B, H: int = H, D: int = D, causal: bool = False) -> dict[str, dict[str, int]]:
    """Bytes each kernel reads and writes, split into Q/K/V/O traffic and score (S or P) traffic."""
    one = B * H * S * D * 2                          # one of Q, K, V, O in fp16
    n = B * H * S * padded(S)                        # score elements
    kept = n // 2 if causal else n                   # the softmax reads only the unmasked scores
    return {
        "QKᵀ GEMM": {"qkvo": 2 * one, "scores_read": 0, "scores_write": 4 * n},
        "softmax": {"qkvo": 0, "scores_read": 4 * kept, "scores_write": 2 * n},
        "PV GEMM": {"qkvo": 2 * one, "scores_read": 2 * n, "scores_write": 0},
    }


def pipeline_bytes(S: int, **kw) -> int:
    return sum(sum(k.values()) for k in per_kernel(S, **kw).values())


def score_matrix_bytes(S: int, *, B: int = B, H: int = H) -> int:
    """The fp32 score matrix [B·H, S, ld] (k05_three_kernel.score_bytes)."""
    return 4 * B * H * S * padded(S)


def fused_bytes(S: int, *, B: int = B, H: int = H, D: int = D) -> int:
    return 4 * B * H * S * D * 2


def bytes_figure() -> Figure:
    fig = Figure(figsize=(7.5, 4.3))
    ax = fig.add_axes((0.2, 0.27, 0.38, 0.61))
    kernels = per_kernel(SEED_S)
    rows = [(name, parts) for name, parts in kernels.items()]
    total = {k: sum(p[k] for _, p in rows) for k in ("qkvo", "scores_read", "scores_write")}
    rows.append(("3 kernels, total", total))
    rows.append(("fused (the floor)", {"qkvo": fused_bytes(SEED_S), "scores_read": 0, "scores_write": 0}))
    segs = [("qkvo", "Q, K, V read, O written", st.Q, None),
            ("scores_read", "scores / P read", st.light(st.SCORES, 0.5), None),
            ("scores_write", "scores / P written", st.SCORES, None)]
    ys = list(range(len(rows)))[::-1]
    for y, (name, parts) in zip(ys, rows):
        left = 0.0
        for key, label, col, hatch in segs:
            w = parts[key] / MiB
            if w:
                ax.barh(y, w, left=left, color=col, edgecolor="white", lw=0.6, height=0.62,
                        label=label if y == ys[3] else None)
            left += w
        ax.text(left + 4, y, f"{left:.0f} MiB", va="center", fontsize=st.SMALL)
    ax.set_yticks(ys)
    ax.set_yticklabels([name for name, _ in rows], fontsize=st.SMALL)
    ax.set_xlim(0, 250)
    ax.set_xlabel("MiB moved (nothing kept in L2)", fontsize=st.SMALL)
    ax.tick_params(labelsize=st.SMALL)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title(f"B = {B}, H = {H}, S = {SEED_S}, D = {D}", fontsize=st.NORMAL, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(-0.45, -0.17), ncol=1, fontsize=st.SMALL, frameon=False,
              handlelength=1.2, borderaxespad=0.0)

    bx = fig.add_axes((0.7, 0.27, 0.28, 0.61))
    xs = list(CROSSOVER_S)
    bx.plot(xs, [pipeline_bytes(S) / MiB for S in xs], "o-", color=st.SCORES, lw=1.6, ms=4,
            label="3 kernels: bytes moved")
    bx.plot(xs, [score_matrix_bytes(S) / MiB for S in xs], "^--", color=st.SCORES, lw=1.2, ms=4,
            label="fp32 score matrix: size")
    bx.plot(xs, [fused_bytes(S) / MiB for S in xs], "s-", color=st.Q, lw=1.6, ms=4, label="fused: Q, K, V, O once")
    for gpu, size in L2.items():
        bx.axhline(size / MiB, color=st.MUTED, lw=0.8, ls=":")
    bx.text(xs[-1], L2["H100"] / MiB * 0.8, "L2 size:\nH100, H200", fontsize=st.SMALL, color=st.MUTED,
            va="top", ha="right")
    bx.set_xscale("log", base=2)
    bx.set_yscale("log")
    bx.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}".replace(",", " ")))   # no 10ⁿ: small
    bx.yaxis.set_minor_formatter(NullFormatter())
    bx.set_xticks(xs)
    bx.set_xticklabels([f"{S // 1024}K" if S >= 1024 else str(S) for S in xs], fontsize=st.SMALL)
    bx.tick_params(labelsize=st.SMALL)
    bx.set_xlabel("S", fontsize=st.SMALL)
    bx.set_ylabel("MiB", fontsize=st.SMALL)
    bx.spines[["top", "right"]].set_visible(False)
    bx.set_title("growth with S", fontsize=st.NORMAL, loc="left")
    bx.legend(loc="upper left", bbox_to_anchor=(-0.38, -0.17), ncol=1, fontsize=st.SMALL, frameon=False,
              handlelength=2.0, borderaxespad=0.0)
    return fig


DIAGRAMS = {"ch05_bytes": bytes_figure}
