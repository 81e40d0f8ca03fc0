"""Chapter 7's diagrams: a producer/consumer timeline per step (7a, 7b, 7c) and the 128-byte swizzle.

``DIAGRAMS`` maps an output stem to a function returning a matplotlib figure; book/diagrams/build.py
renders them to book/diagrams/svg/<stem>.svg:

    python book/diagrams/build.py ch07_timeline_7a ch07_timeline_7b ch07_timeline_7c ch07_swizzle

The timelines are schematic, not measurements: they come from a small simulation of each step's
schedule with made-up durations (a GEMM of one tile 2 units, its softmax 1.5, a K/V tile's copy 2),
so that the three steps can be compared on one time axis. What they show — where the tensor cores wait
— follows from the order of the instructions in the kernels, not from the numbers.
"""
from __future__ import annotations

from typing import Callable

from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

try:   # the book's shared colours and sizes (book/diagrams/style.py); the values below stand in without it
    import style as _st
except ImportError:
    _st = None


def _style(name: str, fallback):
    return getattr(_st, name, fallback) if _st is not None else fallback


FONT = _style("MIN_FONT_PT", 9.0)                  # every text of these figures, in points
TITLE = _style("NORMAL", 10.0)
WIDTH = min(7.4, _style("MAX_WIDTH_IN", 7.5))      # inches
GEMM, SOFTMAX, COPY = 2.0, 1.5, 2.0      # schematic durations: one tile's GEMM, its softmax, a K/V tile's copy
COLORS = {
    "S": _style("SCORES", "#cf6a2e"),      # S = Q·Kᵀ on the tensor cores (the scores)
    "PV": _style("O", "#8a5cc2"),          # O += P·V on the tensor cores (the output)
    "softmax": _style("STATE", "#c23b5a"),  # the online softmax (max, exp2, sum, rescale)
    "copy": _style("K", "#3c9a5f"),        # a TMA copy of a K/V tile landing in a ring slot
    "busy": _style("GPU", "#2e6fcf"),      # the tensor cores busy with any warpgroup's GEMM
    "idle": _style("IDLE", "#e4e4e4"),
    "grid": _style("GRID", "#555555"),
    "highlight": _style("HIGHLIGHT", "#c23b5a"),
}
LEGEND = [("S", "S = Q·Kᵀ (wgmma)"), ("PV", "O += P·V (wgmma)"), ("softmax", "online softmax"),
          ("copy", "TMA copy of K, V"), ("busy", "tensor cores busy")]


# ---------------------------------------------------------------- a tiny schedule simulator -----
class Sim:
    """Time-stepped model of one block: warpgroups run programs of ops; the tensor cores either share
    their rate among every GEMM in flight (``fifo=False``: warpgroups issue whenever they like) or run
    GEMMs one after another in issue order (``fifo=True``: the ping-pong's turns order them); one TMA
    engine copies tiles in order into a ring of ``stages`` slots, refilling a slot once every consumer
    released it."""

    def __init__(self, n_tiles: int, stages: int, consumers: int, *, fifo: bool, dt: float = 0.005):
        self.n, self.stages, self.consumers, self.fifo, self.dt = n_tiles, stages, consumers, fifo, dt
        self.t = 0.0
        self.ready: dict[int, float] = {}            # tile → time it landed
        self.released: dict[int, int] = {}           # tile → consumers done with it
        self.copies: list[tuple[float, float, int]] = []   # (start, end, tile)
        self.jobs: list[dict] = []                   # tensor-core work: {name, wg, work, start, end}
        self.spans: list[tuple[int, str, float, float, str]] = []   # (wg, kind, start, end, label)
        self.turn = 0

    # the producer: tile j may be copied once tile j - stages was released by every consumer
    def _producer(self):
        busy = self.copies and self.copies[-1][1] > self.t
        nxt = len(self.copies)
        if busy or nxt >= self.n:
            return
        if nxt >= self.stages and self.released.get(nxt - self.stages, 0) < self.consumers:
            return
        self.copies.append((self.t, self.t + COPY, nxt))
        self.ready[nxt] = self.t + COPY

    def _tensor_cores(self):
        live = [j for j in self.jobs if j["end"] is None]
        running = live[:1] if self.fifo else live
        for j in running:
            if j["start"] is None:
                j["start"] = self.t
            j["work"] -= self.dt / len(running)
            if j["work"] <= 1e-9:
                j["end"] = self.t + self.dt

    def run(self, programs: list[list[tuple]], t_max: float = 80.0):
        pcs = [0] * len(programs)
        state: list[dict] = [{} for _ in programs]
        while self.t < t_max and any(pc < len(p) for pc, p in zip(pcs, programs)):
            self._producer()
            for w, prog in enumerate(programs):
                while pcs[w] < len(prog):
                    op, *args = prog[pcs[w]]
                    st = state[w]
                    if op == "at":                                 # start no earlier than time args[0]
                        if self.t >= args[0]:
                            pcs[w] += 1
                            continue
                    elif op == "ready":                            # wait until tile args[0] landed
                        if self.ready.get(args[0], 1e9) <= self.t:
                            pcs[w] += 1
                            continue
                    elif op == "turn":                             # wait for this warpgroup's turn
                        if self.turn == w:
                            pcs[w] += 1
                            continue
                    elif op == "pass":                             # hand the turn to the other warpgroup
                        self.turn = 1 - w
                        pcs[w] += 1
                        continue
                    elif op == "issue":                            # queue a GEMM, do not wait
                        self.jobs.append({"name": args[0], "wg": w, "work": GEMM, "start": None, "end": None,
                                          "kind": args[1]})
                        pcs[w] += 1
                        continue
                    elif op == "join":                             # wait for an issued GEMM
                        job = next(j for j in self.jobs if j["name"] == args[0] and j["wg"] == w)
                        if job["end"] is not None and job["end"] <= self.t:
                            pcs[w] += 1
                            continue
                    elif op == "cpu":                              # softmax: busy for a fixed time
                        if "until" not in st:
                            st["until"] = self.t + SOFTMAX
                            self.spans.append((w, "softmax", self.t, st["until"], args[0]))
                        if st["until"] <= self.t:
                            del st["until"]
                            pcs[w] += 1
                            continue
                    elif op == "release":                          # done reading tile args[0]
                        self.released[args[0]] = self.released.get(args[0], 0) + 1
                        pcs[w] += 1
                        continue
                    break
            self._tensor_cores()
            self.t += self.dt
        for j in self.jobs:
            self.spans.append((j["wg"], j["kind"], j["start"], j["end"], j["name"]))
        return self

    def busy(self) -> list[tuple[float, float]]:
        """The union of the tensor cores' busy intervals."""
        out: list[list[float]] = []
        for s, e in sorted((j["start"], j["end"]) for j in self.jobs):
            if out and s <= out[-1][1] + 1e-6:
                out[-1][1] = max(out[-1][1], e)
            else:
                out.append([s, e])
        return [(s, e) for s, e in out]


def _sub(i: int) -> str:
    return str(i).translate(str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉"))


def _serial_program(n: int) -> list[tuple]:
    """Steps 7a and 7b: per tile, S_j, softmax, P_j·V_j, each waited for, then release the slot."""
    prog = []
    for j in range(n):
        prog += [("ready", j), ("issue", f"S{_sub(j)}", "S"), ("join", f"S{_sub(j)}"), ("cpu", str(j)),
                 ("issue", f"P{_sub(j)}V{_sub(j)}", "PV"), ("join", f"P{_sub(j)}V{_sub(j)}"), ("release", j)]
    return prog


def _pingpong_program(n: int) -> list[tuple]:
    """Step 7c: S_j issued with P_{j-1}·V_{j-1} in this warpgroup's turn; the softmax of S_j runs while
    P_{j-1}·V_{j-1} is still on the tensor cores."""
    prog = [("ready", 0), ("turn",), ("issue", "S₀", "S"), ("pass",), ("join", "S₀"), ("cpu", "0")]
    for j in range(1, n):
        s, pv = f"S{_sub(j)}", f"P{_sub(j - 1)}V{_sub(j - 1)}"
        prog += [("ready", j), ("turn",), ("issue", s, "S"), ("issue", pv, "PV"), ("pass",), ("join", s),
                 ("cpu", str(j)), ("join", pv), ("release", j - 1)]
    last = f"P{_sub(n - 1)}V{_sub(n - 1)}"
    prog += [("turn",), ("issue", last, "PV"), ("pass",), ("join", last), ("release", n - 1)]
    return prog


# ---------------------------------------------------------------- drawing ------------------------
def _timeline(sim: Sim, lanes: list[str], wg_lane: dict, title: str, t_end: float) -> Figure:
    """Lanes top to bottom; wg_lane[(wg, kind)] → lane index for that warpgroup's GEMMs or softmax."""
    n = len(lanes)
    fig = Figure(figsize=(WIDTH, 0.42 * n + 1.35))
    ax = fig.subplots()
    h = 0.7

    def bar(lane, s, e, color, label="", text_color="white"):
        y = n - 1 - lane
        ax.add_patch(Rectangle((s, y - h / 2), e - s, h, facecolor=color, edgecolor="white", linewidth=0.8))
        if label and e - s >= 0.9:
            ax.text((s + e) / 2, y, label, ha="center", va="center", fontsize=FONT, color=text_color)

    copy_lane = lanes.index("TMA copies")
    for s, e, j in sim.copies:
        bar(copy_lane, s, e, COLORS["copy"], f"K{_sub(j)}V{_sub(j)}")
    for wg, kind, s, e, label in sim.spans:
        lane = wg_lane[(wg, "gemm" if kind in ("S", "PV") else "softmax")]
        bar(lane, s, e, COLORS[kind], label)
    busy_lane = lanes.index("tensor cores")
    for s, e in sim.busy():
        bar(busy_lane, s, e, COLORS["busy"])
    ax.set_xlim(0, t_end)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_yticks(range(n))
    ax.set_yticklabels(list(reversed(lanes)), fontsize=FONT)
    ax.set_xticks([])
    ax.set_xlabel("time (schematic: the durations are made up, the order is the kernel's)", fontsize=FONT)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    fig.suptitle(title, fontsize=TITLE, x=0.01, ha="left")
    handles = [Patch(facecolor=COLORS[k], label=lab) for k, lab in LEGEND]
    fig.legend(handles=handles, loc="lower center", ncol=5, fontsize=FONT, frameon=False,
               bbox_to_anchor=(0.5, 0.0), handlelength=1.2, columnspacing=1.0)
    fig.tight_layout(rect=(0, 0.09, 1, 1))
    return fig


N_TILES = 4    # K/V tiles per consumer warpgroup in every timeline


def _sim_7a() -> Sim:
    return Sim(N_TILES, stages=2, consumers=1, fifo=False).run([_serial_program(N_TILES)])


def _sim_7b() -> Sim:
    late = [("at", COPY + 0.8)] + _serial_program(N_TILES)     # the second warpgroup happens to start later
    return Sim(N_TILES, stages=2, consumers=2, fifo=False).run([_serial_program(N_TILES), late])


def _sim_7c() -> Sim:
    return Sim(N_TILES, stages=3, consumers=2, fifo=True).run([_pingpong_program(N_TILES)] * 2)


def _t_end() -> float:
    """One time axis for the three timelines, so that their lengths compare."""
    return max(e for sim in (_sim_7a(), _sim_7b(), _sim_7c()) for *_, e, _ in sim.spans) + 0.3


TWO_CONSUMERS = ["TMA copies", "consumer 1: wgmma", "consumer 1: softmax", "consumer 2: wgmma",
                 "consumer 2: softmax", "tensor cores"]
TWO_LANES = {(0, "gemm"): 1, (0, "softmax"): 2, (1, "gemm"): 3, (1, "softmax"): 4}


def timeline_7a() -> Figure:
    lanes = ["TMA copies", "warpgroup: wgmma", "warpgroup: softmax", "tensor cores"]
    return _timeline(_sim_7a(), lanes, {(0, "gemm"): 1, (0, "softmax"): 2},
                     "7a: one warpgroup (64 query rows) does everything in turn", _t_end())


def timeline_7b() -> Figure:
    return _timeline(_sim_7b(), TWO_CONSUMERS, TWO_LANES,
                     "7b: a producer warp and two consumer warpgroups (128 rows), in no set order", _t_end())


def timeline_7c() -> Figure:
    return _timeline(_sim_7c(), TWO_CONSUMERS, TWO_LANES,
                     "7c: ping-pong turns, and each softmax under a P·V", _t_end())


def swizzle() -> Figure:
    """Where the 16-byte chunks of 8 tile rows land among the 8 groups of 4 banks: rows of 128 bytes
    as they are, padded to 144 bytes (chapter 3), and with the 128-byte swizzle (chapter 7)."""
    layouts = [("rows of 128 B, as they are", lambda r, c: c),
               ("padded to 144 B (chapter 3)", lambda r, c: (c + r) % 8),
               ("128-byte swizzle (TMA, wgmma)", lambda r, c: c ^ r)]
    fig = Figure(figsize=(WIDTH, 3.3))
    axes = fig.subplots(1, 3)
    for ax, (title, where) in zip(axes, layouts):
        for r in range(8):
            for c in range(8):
                g = where(r, c)
                hit = c == 5
                ax.add_patch(Rectangle((g, 7 - r), 1, 1, facecolor=COLORS["highlight"] if hit else COLORS["idle"],
                                       edgecolor=COLORS["grid"], linewidth=0.6))
                ax.text(g + 0.5, 7.5 - r, str(c), ha="center", va="center", fontsize=FONT,
                        color="white" if hit else "black")
        ax.set_xlim(0, 8)
        ax.set_ylim(0, 8)
        ax.set_aspect("equal")
        ax.set_xticks([i + 0.5 for i in range(8)])
        ax.set_xticklabels([str(i) for i in range(8)], fontsize=FONT)
        ax.set_yticks([7.5 - r for r in range(8)])
        ax.set_yticklabels([str(r) for r in range(8)], fontsize=FONT)
        ax.tick_params(length=0)
        ax.set_title(title, fontsize=FONT)
        banks = len({where(r, 5) for r in range(8)})
        ax.set_xlabel(f"bank group (4 banks)\nchunk 5: {banks} group{'s' if banks > 1 else ''}, "
                      f"{8 // banks} pass{'es' if 8 // banks > 1 else ''}", fontsize=FONT, linespacing=1.5)
    axes[0].set_ylabel("tile row", fontsize=FONT)
    fig.suptitle("Which bank group each 16-byte chunk (the number in the cell) of rows 0–7 lands in",
                 fontsize=TITLE)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


DIAGRAMS: dict[str, Callable[[], Figure]] = {
    "ch07_timeline_7a": timeline_7a,
    "ch07_timeline_7b": timeline_7b,
    "ch07_timeline_7c": timeline_7c,
    "ch07_swizzle": swizzle,
}

