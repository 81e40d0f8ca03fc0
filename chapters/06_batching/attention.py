"""Chapter 6 exercise: attention for many small problems — a persistent tile loop, split keys, a CUDA graph.

The idea: at S = 128 one (batch, head) is a few microseconds of work, so the cost of the call itself
(the host issuing launches, programs starting and ending, waves that leave SMs idle) is as large as
the attention. Three changes go after it:

1. **A persistent tile loop.** The work is a list of *tiles*: (batch·head, query block, key chunk).
   A program does not own one tile; it loops over tiles ``pid, pid + P, pid + 2P, …`` of the P
   programs in the grid. With P = the number of tiles this is chapter 4's grid; with fewer, each
   program handles several heads one after another, and the compiler can fetch the next tile's
   Q, K, V while the current one computes.
2. **Split keys (flash-decoding).** When B·H·⌈S/BLOCK_M⌉ tiles cannot fill the GPU (one sequence,
   16 heads), each tile takes only a chunk of the keys and writes a partial result (acc, m_i, l_i);
   a second small kernel combines the chunks of each row. More, smaller tiles; same answer.
3. **A CUDA graph.** The first call with given tensors is captured into a graph; later calls replay
   it with one host call (``flashtutor.graphs``), skipping Triton's launcher and its argument handling.

Two details from chapter 4's Hopper kernel matter as much as the three changes at these sizes:

* **No masks on full key blocks** (``EVEN_N``). When S is a multiple of BLOCK_N every key block is
  full, and the kernel is compiled without the key mask on the loads and the scores. Chapter 4's
  teaching kernel masks every block; measured, that mask was the largest single cost at S = 256 and
  512 (see the comment on ``CONFIGS``).
* **TMA copies** (``Config.tma``): where the table says so, Q, K and V tiles arrive through tensor
  descriptors (one bulk copy per tile) instead of per-thread pointer loads.

What changed since chapter 4: the grid is a loop, the key range of a tile is a chunk, full key blocks
carry no mask, the launch is a graph replay. The online-softmax update (``_kv_block``) is chapter 4's,
with the scale folded into the exponent as in chapter 4's Hopper kernel.
Limitation: a graph replays fixed addresses, so ``attention`` returns the *same output tensor* for the
same inputs (overwritten by the next call); see ``flashtutor/graphs.py``. The tile configuration comes
from a small table (no autotuning at call time) measured on one GPU; ``flashtutor.kernels.k06_multihead``
times others. Causal calls still mask every key block (the diagonal blocks need it; the others could
skip it, as chapter 4's Hopper kernel does).

You write the tile loop in ``multihead_kernel`` and the capture path in ``attention``. Grade it with
``flashtutor grade 06`` or, in the notebook, ``flashtutor.grade("06")``. Without a GPU the kernels run
through Triton's interpreter on CPU tensors (``TRITON_INTERPRET=1``, set before Triton compiles this
file), and no graph is captured.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

import flashtutor as ft
from flashtutor import graphs

LOG2E = 1.4426950408889634    # log2(e) = 1/ln 2: e^x = 2^(x·log2 e), and 2^x is one instruction (MUFU.EX2)


# ---- the kernels ---------------------------------------------------------------------------------
@triton.jit
def _load_tile(src, row0, start, hi, BLOCK: tl.constexpr, D: tl.constexpr, TMA: tl.constexpr,
               MASKED: tl.constexpr):
    """Rows ``start … start + BLOCK`` of one slab (the slab begins at row ``row0`` of the [B·H·S, D]
    view): a TMA copy through a tensor descriptor, or plain pointer loads. With MASKED, rows at or past
    ``hi`` read as 0 (TMA instead reads whatever rows follow — the next head's, or zeros past the end of
    the tensor — and the callers mask their scores and their stores, so those rows never count)."""
    if TMA:
        return src.load([row0 + start, 0])                             # [BLOCK, D], one bulk copy
    else:
        offs = start + tl.arange(0, BLOCK)                             # [BLOCK] positions in the slab
        # 64-bit element offsets: B·H·S·D can pass 2^31 even when the row count does not.
        ptrs = src + (row0.to(tl.int64) + offs)[:, None] * D + tl.arange(0, D)[None, :]   # [BLOCK, D]
        if MASKED:
            return tl.load(ptrs, mask=(offs < hi)[:, None], other=0.0)
        else:
            return tl.load(ptrs)                                       # a full block: no mask


@triton.jit
def _kv_block(acc, l_i, m_i, q, K, V, row0, offs_m, start_n, hi, qk_scale,
              D: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, MASK_KV: tl.constexpr,
              TMA: tl.constexpr):
    """Chapter 4's online-softmax step for the keys ``start_n … start_n + BLOCK_N``. MASK_KV: the
    block may run past ``hi`` (a partial last block), so keys ≥ hi are masked; without it (EVEN_N)
    the loads and the scores carry no mask at all."""
    offs_kv = start_n + tl.arange(0, BLOCK_N)                          # [BLOCK_N] key positions
    k = _load_tile(K, row0, start_n, hi, BLOCK_N, D, TMA, MASK_KV)     # [BLOCK_N, D]
    v = _load_tile(V, row0, start_n, hi, BLOCK_N, D, TMA, MASK_KV)     # [BLOCK_N, D]
    scores = tl.dot(q, tl.trans(k))                                    # [BLOCK_M, BLOCK_N] fp32, unscaled
    if MASK_KV or CAUSAL:
        keep = offs_kv[None, :] < hi                                   # [1, BLOCK_N]
        if CAUSAL:
            keep = keep & (offs_kv[None, :] <= offs_m[:, None])        # [BLOCK_M, BLOCK_N] key j ≤ query i
        scores = tl.where(keep, scores, float("-inf"))
    # The scale folded into the exponent (chapter 4's Hopper kernel): max(c·s) = c·max(s) for c > 0,
    # so one multiply-add per score, s·c − m, in base-2 units.
    m_new = tl.maximum(m_i, tl.max(scores, axis=1) * qk_scale)         # [BLOCK_M]
    p = tl.exp2(scores * qk_scale - m_new[:, None])                    # [BLOCK_M, BLOCK_N]; masked → 0
    alpha = tl.exp2(m_i - m_new)                                       # [BLOCK_M] rescales the old sums
    l_i = l_i * alpha + tl.sum(p, axis=1)                              # [BLOCK_M]
    acc = tl.dot(p.to(tl.float16), v, acc * alpha[:, None])            # [BLOCK_M, D] fp32
    return acc, l_i, m_new


@triton.jit
def _attend(q, K, V, row0, offs_m, lo, hi, qk_scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr, ONE_BLOCK: tl.constexpr, EVEN_N: tl.constexpr,
            TMA: tl.constexpr):
    """Online softmax of the query tile ``q`` against the keys ``[lo, hi)`` of the slab at ``row0``.
    Returns (acc, l_i, m_i); an empty range gives (0, 0, -inf)."""
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)                # [BLOCK_M] running max (base 2)
    l_i = tl.zeros([BLOCK_M], tl.float32)                              # [BLOCK_M] running sum
    acc = tl.zeros([BLOCK_M, D], tl.float32)                           # [BLOCK_M, D] running Σ p·v
    if ONE_BLOCK:
        # Every key fits in one block (S ≤ BLOCK_N, no split): no K/V loop at all, so the tile loop
        # around this is the innermost loop and the compiler can pipeline it across tiles.
        acc, l_i, m_i = _kv_block(acc, l_i, m_i, q, K, V, row0, offs_m, 0, hi, qk_scale,
                                  D, BLOCK_N, CAUSAL, not EVEN_N, TMA)
    else:
        for start_n in range(lo, hi, BLOCK_N):
            acc, l_i, m_i = _kv_block(acc, l_i, m_i, q, K, V, row0, offs_m, start_n, hi, qk_scale,
                                      D, BLOCK_N, CAUSAL, not EVEN_N, TMA)
    return acc, l_i, m_i


@triton.jit
def _store_tile(O, W, acc, l_i, m_i, row0, offs_m, row_ok, split, rows, n_split,
                D: tl.constexpr, SPLIT: tl.constexpr):
    """Write a finished tile: O = acc / l_i; with SPLIT, the partial (acc, m_i, l_i) of key chunk
    ``split`` into the fp32 workspace W = [acc: n_split × rows × D | m: n_split × rows | l: n_split × rows]."""
    offs_d = tl.arange(0, D)                                           # [D]
    r = row0.to(tl.int64) + offs_m                                     # [BLOCK_M] rows of the [B·H·S, D] view
    if SPLIT:
        part = tl.cast(split, tl.int64) * rows + r                     # [BLOCK_M] row of this chunk's partials
        tl.store(W + part[:, None] * D + offs_d[None, :], acc, mask=row_ok[:, None])
        ml = W + tl.cast(n_split, tl.int64) * rows * D                 # start of the m block, then the l block
        tl.store(ml + part, m_i, mask=row_ok)
        tl.store(ml + tl.cast(n_split, tl.int64) * rows + part, l_i, mask=row_ok)
    else:
        tl.store(O + r[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty),
                 mask=row_ok[:, None])


@triton.jit(do_not_specialize=["S", "n_tiles", "n_m", "n_split", "chunk"])   # one binary for every S
def multihead_kernel(
    Q, K, V,                          # [B, H, S, D] fp16, contiguous, seen as [B·H·S, D] matrices:
                                      # pointers, or TMA tensor descriptors on those views (TMA)
    O,                                # [B, H, S, D] fp16 output (a pointer)
    W,                                # fp32 workspace for split partials (unused without SPLIT)
    qk_scale,                         # (1/sqrt(D))·log2(e)
    S,                                # sequence length
    n_tiles,                          # B·H · n_split · n_m: the work list
    n_m,                              # query blocks per (b, h): ceil(S / BLOCK_M)
    n_split,                          # key chunks per query block (1: no split)
    chunk,                            # keys per chunk, a multiple of BLOCK_M and of BLOCK_N
    D: tl.constexpr,                  # head dim (64 or 128)
    BLOCK_M: tl.constexpr,            # Br: query rows per tile
    BLOCK_N: tl.constexpr,            # Bc: keys per step of the K/V loop
    CAUSAL: tl.constexpr,
    SPLIT: tl.constexpr,              # n_split > 1: write partials for combine_kernel
    ONE_BLOCK: tl.constexpr,          # S ≤ BLOCK_N and no split: the K/V loop has one step
    EVEN_N: tl.constexpr,             # S % BLOCK_N == 0: every key block is full, no key mask anywhere
    TMA: tl.constexpr,                # Q, K, V are tensor descriptors (Hopper's bulk copies)
):
    pid = tl.program_id(0)                                             # this program: 0 … P-1
    nprog = tl.num_programs(0)                                         # P, the grid size
    rows = (n_tiles // (n_m * n_split)) * S                            # B·H·S: rows of the [B·H·S, D] view
    # TODO: loop over the tiles pid, pid + nprog, … < n_tiles; split each into (query block, key
    #       chunk, b·h) with the query block fastest (causal: heaviest first), load its [BLOCK_M, D]
    #       Q tile with _load_tile (masked past S), call _attend on its key range [lo, hi) and
    #       _store_tile.
    pass


@triton.jit(do_not_specialize=["rows", "n_split"])
def combine_kernel(W, O, rows, n_split, D: tl.constexpr, BLOCK_R: tl.constexpr):
    """O[r] = Σ_s 2^(m_s - m)·acc_s / Σ_s 2^(m_s - m)·l_s with m = max_s m_s, for BLOCK_R rows r."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)             # [BLOCK_R]
    ok = r < rows
    offs_d = tl.arange(0, D)                                           # [D]
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)                  # [BLOCK_R]
    l = tl.zeros([BLOCK_R], tl.float32)                                # [BLOCK_R]
    acc = tl.zeros([BLOCK_R, D], tl.float32)                           # [BLOCK_R, D]
    ml = W + tl.cast(n_split, tl.int64) * rows * D
    for s in range(0, n_split):
        part = tl.cast(s, tl.int64) * rows + r                         # [BLOCK_R]
        m_s = tl.load(ml + part, mask=ok, other=0.0)                   # -inf for an empty chunk
        l_s = tl.load(ml + tl.cast(n_split, tl.int64) * rows + part, mask=ok, other=0.0)
        a_s = tl.load(W + part[:, None] * D + offs_d[None, :], mask=ok[:, None], other=0.0)   # [BLOCK_R, D]
        # Chunk 0 holds key 0, which every query sees: after it m is finite, so no -inf - -inf.
        m_new = tl.maximum(m, m_s)
        alpha = tl.exp2(m - m_new)                                     # the sums so far, moved to m_new
        beta = tl.exp2(m_s - m_new)                                    # this chunk's, moved to m_new
        l = l * alpha + l_s * beta
        acc = acc * alpha[:, None] + a_s * beta[:, None]
        m = m_new
    l = tl.where(ok, l, 1.0)                                           # rows past the end: no 0/0
    tl.store(O + r.to(tl.int64)[:, None] * D + offs_d[None, :], (acc / l[:, None]).to(O.dtype.element_ty),
             mask=ok[:, None])


# ---- configurations --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Config:
    """One way to run the kernel. ``per_sm`` > 0: a persistent grid of per_sm × (number of SMs)
    programs; otherwise ⌈tiles / per_prog⌉ programs (per_prog = 1: one tile each, chapter 4's grid).
    ``tma``: Q, K, V tiles arrive through TMA tensor descriptors (Hopper and newer; pointer loads elsewhere)."""
    BLOCK_M: int
    BLOCK_N: int
    num_warps: int
    num_stages: int
    per_sm: int = 0
    per_prog: int = 1
    tma: bool = False


# Per head dim: rows (largest S, fewest tiles per SM, configuration); the first row whose S bound covers
# the call's S and whose tiles, B·H·⌈S/BLOCK_M⌉, give at least that many per SM is used.
# Measured on an NVIDIA H200 (132 SMs), 2026-11-21, graph-replayed with the L2 flushed (triton 3.6):
# * S ≤ 128, many heads (B·H ≥ 3 per SM, e.g. B = 32, H = 16): one persistent 8-warp program per SM
#   walks its ~4 heads with 3 stages, so the next heads' Q, K, V (TMA copies) arrive while this one
#   computes — the tile loop is the pipelined loop (ONE_BLOCK). Fewer heads (B = 8, 16): too few tiles
#   per program to pipeline; chapter 4's 64×64 tiles, one per program, were fastest.
# * S = 256: 64×64 tiles on a persistent grid of 4 programs per SM (a little ahead of one tile per
#   program at B = 16, 32; a little behind at B = 8). S = 512: one 64×64 tile per program.
# * Longer S (one sequence, 16 heads, S = 1024): 64×128 with TMA, the best of the sweep; no split
#   (FILL_WAVES below).
# What mattered most was not the table but EVEN_N: the same 64×64 kernel masking every key block (as
# chapter 4's teaching kernel does) took 19–35 % longer at S = 256 and 512, B = 8, 16, 32.
CONFIGS: dict[int, tuple[tuple[int, float, Config], ...]] = {
    64: ((128, 3, Config(128, 128, 8, 3, per_sm=1, tma=True)),
         (128, 0, Config(64, 64, 4, 3)),
         (256, 0, Config(64, 64, 4, 3, per_sm=4)),
         (512, 0, Config(64, 64, 4, 3)),
         (1 << 30, 0, Config(64, 128, 4, 3, tma=True))),
    # D = 128 is checked, not timed, in this chapter: one configuration that compiles without spills.
    128: ((1 << 30, 0, Config(64, 64, 4, 2)),),
}
# Under the interpreter (CPU): small tiles and a persistent grid of 4 programs, so that the course's
# small CPU shapes still span several tiles per program and exercise every mask.
INTERPRETER_CONFIG = Config(16, 16, 4, 1, per_sm=1)
INTERPRETER_SMS = 4
# Split the keys when the tiles would give fewer than FILL_WAVES programs per SM (one sequence, few
# heads). Measured on the H200 above: at B = 1, H = 16, S = 1024 (256 tiles of 64 rows for 132 SMs) every
# split tried (2 chunks, 4 tile shapes, with and without TMA) was slower than none, by 35 % or more —
# the partials' extra traffic and the second launch cost more than the idle SMs — so only a grid that
# cannot give every SM one tile is split.
FILL_WAVES = 1
MAX_SPLIT = 8                 # bounds the fp32 workspace (n_split × B·H·S × (D + 2)) and the combine's loop
COMBINE_ROWS = 64             # BLOCK_R: rows per program of combine_kernel ([64, D] fp32 accumulator)


def interpreting() -> bool:
    """Whether Triton runs kernels through its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def table_config(BH: int, S: int, D: int, sms: int) -> Config:
    """The table's configuration for B·H slabs of length S on a GPU with ``sms`` SMs."""
    return next(c for bound, per_sm, c in CONFIGS[D]
                if S <= bound and BH * triton.cdiv(S, c.BLOCK_M) >= per_sm * sms)


def config_for(BH: int, S: int, D: int, device) -> Config:
    """The configuration for a call: the table's on a GPU, the interpreter's on a CPU."""
    if interpreting():
        return INTERPRETER_CONFIG
    return table_config(BH, S, D, num_sms(device))


def has_tma(device) -> bool:
    """TMA needs compute capability 9.0 (Hopper) or newer; the interpreter emulates it."""
    if device.type != "cuda":
        return interpreting()
    return torch.cuda.get_device_capability(device)[0] >= 9


_sms: dict = {}


def num_sms(device) -> int:
    """Streaming multiprocessors of the device (asked once); a small number under the interpreter."""
    if device.type != "cuda":
        return INTERPRETER_SMS
    i = device.index if device.index is not None else torch.cuda.current_device()
    if i not in _sms:
        _sms[i] = torch.cuda.get_device_properties(i).multi_processor_count
    return _sms[i]


def choose_split(BH: int, S: int, cfg: Config, sms: int, fill_waves: int = FILL_WAVES) -> int:
    """How many key chunks per query block: enough tiles for ``fill_waves`` programs per SM, at most
    MAX_SPLIT, and never a chunk shorter than one block."""
    tiles = BH * triton.cdiv(S, cfg.BLOCK_M)
    if tiles >= fill_waves * sms:
        return 1
    align = max(cfg.BLOCK_M, cfg.BLOCK_N)
    return max(1, min(MAX_SPLIT, triton.cdiv(fill_waves * sms, tiles), S // align))


@dataclass(frozen=True)
class Plan:
    """Everything a launch needs that depends only on the shape: computed once per shape."""
    grid: tuple
    args: tuple               # (qk_scale, S, n_tiles, n_m, n_split, chunk): the kernel's scalar arguments
    meta: dict                # constexprs, num_warps, num_stages
    split: bool
    ws_elems: int             # fp32 elements of the split workspace (0 without split)
    combine_grid: tuple
    rows: int


_plans: dict = {}


def make_plan(B: int, H: int, S: int, D: int, causal: bool, device, cfg: Config | None = None,
              n_split: int | None = None) -> Plan:
    """Grid and arguments for one shape. ``cfg`` / ``n_split`` override the table and the heuristic."""
    cfg = cfg or config_for(B * H, S, D, device)
    sms = num_sms(device)
    if n_split is None:
        n_split = choose_split(B * H, S, cfg, sms)
    align = max(cfg.BLOCK_M, cfg.BLOCK_N)
    chunk = triton.cdiv(triton.cdiv(S, max(1, n_split)), align) * align   # keys per chunk, block-aligned
    n_split = triton.cdiv(S, chunk)                                         # no empty trailing chunk
    n_m = triton.cdiv(S, cfg.BLOCK_M)
    n_tiles = B * H * n_m * n_split
    programs = min(n_tiles, cfg.per_sm * sms) if cfg.per_sm else triton.cdiv(n_tiles, cfg.per_prog)
    split = n_split > 1
    meta = dict(D=D, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=bool(causal), SPLIT=split,
                ONE_BLOCK=(not split) and S <= cfg.BLOCK_N, EVEN_N=S % cfg.BLOCK_N == 0,   # chunk: whole blocks
                TMA=cfg.tma and has_tma(device), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    rows = B * H * S
    return Plan(grid=(programs,), args=(D ** -0.5 * LOG2E, S, n_tiles, n_m, n_split, chunk), meta=meta, split=split,
                ws_elems=n_split * rows * (D + 2) if split else 0,
                combine_grid=(triton.cdiv(rows, COMBINE_ROWS),), rows=rows)


def plan_for(q, causal: bool) -> Plan:
    """The cached :class:`Plan` for q's shape (a dict lookup after the first call)."""
    key = (tuple(q.shape), bool(causal), q.device)
    p = _plans.get(key)
    if p is None:
        B, H, S, D = q.shape
        p = _plans[key] = make_plan(B, H, S, D, causal, q.device)
    return p


def _sources(q, k, v, rows: int, meta: dict):
    """What the kernel reads Q, K, V through: the tensors themselves, or (TMA) tensor descriptors on
    their [B·H·S, D] views whose block is one tile: [BLOCK_M, D] for Q, [BLOCK_N, D] for K and V.
    A descriptor is a small host-side struct (address, shape, strides, tile) passed by value."""
    if not meta["TMA"]:
        return q, k, v
    D = q.shape[-1]
    blocks = (meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_N"])
    return tuple(TensorDescriptor(t.view(rows, D), [rows, D], [D, 1], [b, D]) for t, b in zip((q, k, v), blocks))


def launch_into(q, k, v, out, causal: bool, plan: Plan | None = None):
    """Launch the kernels for one call, writing ``out`` (no allocation but the split workspace)."""
    plan = plan or plan_for(q, causal)
    ws = torch.empty(plan.ws_elems, device=q.device, dtype=torch.float32) if plan.split else out
    meta = plan.meta
    if meta["TMA"] and any(t.data_ptr() % 16 for t in (q, k, v)):
        meta = {**meta, "TMA": False}                    # a TMA copy needs a 16-byte-aligned base
    multihead_kernel[plan.grid](*_sources(q, k, v, plan.rows, meta), out, ws, *plan.args, **meta)
    if plan.split:
        combine_kernel[plan.combine_grid](ws, out, plan.rows, plan.args[4], D=q.shape[-1], BLOCK_R=COMBINE_ROWS,
                                          num_warps=4)
    return out


def launch(q, k, v, *, causal=False, cfg: Config | None = None, n_split: int | None = None):
    """One direct launch (no graph) into a fresh output; ``cfg``/``n_split`` override the defaults."""
    ft.check_inputs(q, k, v, device_type=None)
    if q.device.type != "cuda" and not interpreting():
        raise ValueError("CPU tensors run only through Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before this file is imported (or move q, k, v to a GPU)")
    B, H, S, D = q.shape
    plan = plan_for(q, causal) if cfg is None and n_split is None else \
        make_plan(B, H, S, D, causal, q.device, cfg, n_split)
    return launch_into(q, k, v, ft.output_like(q), causal, plan)


_GRAPHS = graphs.GraphCache(maxsize=16)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics).

    On a GPU the call is replayed from a CUDA graph captured at the first call with these tensors:
    the output is then the same tensor at every call with the same inputs (overwritten)."""
    ft.check_inputs(q, k, v, device_type=None)
    if q.device.type != "cuda" and not interpreting():
        raise ValueError("CPU tensors run only through Triton's interpreter: set TRITON_INTERPRET=1 "
                         "before this file is imported (or move q, k, v to a GPU)")
    # TODO: the capture path. On CPU tensors, or while the caller is capturing a graph
    #       (graphs.capturing()), launch directly into ft.output_like(q) with launch_into. Otherwise
    #       look the call up in _GRAPHS under graphs.call_key(q, k, v, causal=causal); on a miss
    #       allocate the static output (torch.empty_like), capture launch_into with graphs.capture
    #       and _GRAPHS.put it; return the entry's replay().
    raise NotImplementedError("attention.py: TODO")
