"""Chapter 7, step c: step b plus the two overlaps of FlashAttention-3 — ping-pong between the consumer
warpgroups (named-barrier turns) and, within each, the next Q·Kᵀ issued before the previous P·V and the
softmax run under the P·V — with K and V in rings of their own, wider key tiles where nothing is masked,
and a persistent grid (one block per SM walking the work tiles; with causal masking each block takes
the next tile from a counter in global memory, heaviest tiles first); three consumer warpgroups at D = 64
where the problem has enough work tiles, and, without masking at D = 128, the grid's last partial round
split along the keys over the idle SMs.

The kernel is ``k07c_pingpong.cu`` (its header explains the reordering and the turn counting). The
launcher picks the key-tile width per head dim and masking (``TILES``, passed to the kernel as defines),
the schedule (``SCHEDULE``, ``WIDE_SCHEDULE``), the consumer warpgroups (``consumers``), the work order's
head groups (``group_heads``) and the split of the last round (``split_parts``), and sizes the grid.
``variant(...)`` builds the same kernel with other choices (scripts/ch07_gpu.py --sweep times them).
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda, tma

SOURCE = Path(__file__).with_suffix(".cu")
KERNELS = {64: "pingpong_d64", 128: "pingpong_d128"}
Br = 128                        # query rows per work tile with two consumer warpgroups (64 each, wgmma's M)
# Consumer warpgroups: two at D = 128 (a 176-key tile's S, P and O take 196 registers a thread; a third
# warpgroup would leave each 160). At D = 64, three (Br = 192: the .cu's CONSUMERS_D64 = 3, FlashAttention-3's
# choice there) wherever the wider work tile does not cost more in the last, partly filled round of tiles
# than it gains (``consumers``): where the softmax is as long as the GEMMs, a third warpgroup keeps the tensor
# cores fed while two of them are in their softmax. H100, 2026-11-28, time ÷ SDPA's, events, one process
# (results/ch07-issue28-h100-2026-11-28/3-d64-consumers-ab.log): B2 H32 S16384 D64 0.970 → 0.909 (causal
# 0.981 → 0.899), S 8192 0.972 → 0.898, B4 H32 S4096 0.976 → 0.942; B2 H16 S2048 1.005 → 1.054 (fewer, wider
# tiles: three rounds of them instead of four); at the seed shape B1 H16 S1024, graph-replayed, 15.7 → 18.4 µs
# (3-d64-consumers-sweep.log: one work tile per SM either way, of 192 rows instead of 128).
WIDE_D64 = 3
WIDE_GAIN = 1.05                # the wider tiles' throughput over the narrow ones', less a margin (1.05-1.07 above)
BOX = 64                        # fp16 columns per TMA box (128 bytes: the swizzle span)
ALIGN = 1024                    # the kernel aligns its tiles to a swizzle atom itself
LOG2E = 1.4426950408889634      # log2(e): exp(x) = exp2(x · log2 e)
BLOCK_SMEM = 227 * 1024         # the most dynamic shared memory a block may have (H100/H200)
# Keys per K/V tile, (D, causal) → Bc: the .cu file's defaults (BC_D64, BC_D64_CAUSAL, BC_D128, BC_D128_CAUSAL).
TILES = {(64, False): 128, (64, True): 128, (128, False): 176, (128, True): 176}
Bc = TILES[(128, False)]        # the widest (D 128 without masking); tile(D, causal) gives each
MAX_STAGES = 4                  # K and V ring slots at most
# (D, causal) → how blocks get their work tiles: "grid" one block per tile (the hardware hands out blocks),
# "static" one block per SM taking every gridDim-th tile, "dynamic" one block per SM taking the next tile
# from a counter (where the tiles differ in length: causal masking). H100, 2026-11-26, time / SDPA's with
# masking, one process (results/ch07-schedule-ab-h100-2026-11-26.txt): D 128 at S 4096 grid 1.016 (the
# previous file), dynamic 0.948; D 64 at S 4096 grid 1.166, static 1.041, dynamic 1.047,
# at S 8192 grid 1.124, static 0.999, dynamic 0.992. Dynamic at D = 128 (it balances the long sequences,
# results/ch07-h100-2026-11-26-dynamic.json), static at D = 64 (a counter compiled into that kernel cost
# 2-3% without masking).
SCHEDULE = {(64, False): "static", (64, True): "static", (128, False): "static", (128, True): "dynamic"}
# The same for three consumer warpgroups at D = 64 (causal → how): with 192-row work tiles the static walk
# hands some blocks only the longest tiles (at S = 4096, 22 query blocks per head and 132 = 6 · 22 SMs: every
# block gets the same query block each time), 1.71× SDPA's time against the counter's 1.006 (same file).
WIDE_SCHEDULE = {False: "static", True: "dynamic"}
# With masking, the three-consumer kernel's query blocks end at S (the .cu's END_ALIGN_WIDE): 4096 rows make 21
# blocks of 192 and one of 64, and that partial block's two padding warpgroups cost one key tile each at the start
# of the sequence instead of all of them at its end. Nsight Compute had found 9 % more wgmma instructions than
# cuDNN's at B4 H32 S4096 D64 causal (results/ch07-issue28-h100-2026-11-28/10-ncu); time ÷ SDPA's there went
# from 1.003 to 0.963 (events, 11-end-align-ab.log; the course's protocol 1.000 → 0.990).
# Without masking, a static walk's last round of work tiles is a partial one wherever their number is not a
# multiple of the grid (4096 tiles on 132 SMs: 31 full rounds, then 4 tiles on 4 SMs). Where SPLIT_TAIL says so
# (the .cu's SPLIT_TAIL_D64 / _D128), the launcher splits each tile of that round along the keys into as many
# parts as there are idle blocks for (``split_parts``), and the last part to finish adds them up. H100,
# 2026-11-28, time ÷ SDPA's, events, one process (results/ch07-issue28-h100-2026-11-28/7-split-tail-ab.log):
# B4 H32 S4096 D128 1.001 → 0.968, B2 H32 S8192 0.967 → 0.936, B2 H32 S16384 0.958 → 0.940; at D = 64 no gain
# (0.928 → 0.918, 0.886 → 0.896, 0.894 → 0.902), and the seed shape, which never splits, ran slower in the
# kernel built with it (7-split-tail-sweep.log): D = 128 only.
SPLIT_TAIL = {64: False, 128: True}
TAIL_KEYS = 3                   # key tiles per part of a split tile, at least
L2_SHARE = 0.5                  # the work order groups heads whose K and V fill at most this share of L2
EXP2_FMA_EVERY = 0              # 0: every exp2 on MUFU; k: one score in k on the FMA pipe (the .cu's EXP2_FMA_EVERY)
SOFTMAX_SPLIT = 4               # partial row maxima and sums per thread and row (the .cu's SOFTMAX_SPLIT)


def consumers(D: int, S: int, heads: int, sms: int) -> int:
    """Consumer warpgroups for ``heads`` (B·H) heads of ``S`` rows at head dim ``D``: three at D = 64 where
    rounds × rows per tile ÷ WIDE_GAIN is smaller with 192-row tiles than with 128-row ones (a round: one
    work tile per SM), else two."""
    if D != 64:
        return 2

    def rounds(rows):
        return -(-(-(-S // rows) * heads) // sms)

    return WIDE_D64 if rounds(64 * WIDE_D64) * 64 * WIDE_D64 / WIDE_GAIN < rounds(Br) * Br else 2


def tile(D: int, causal: bool = False) -> int:
    return TILES[(D, bool(causal))]


def _defines(tiles: dict, max_stages: int, exp2_fma_every: int, row_split: int) -> dict:
    return {"BC_D64": tiles[(64, False)], "BC_D64_CAUSAL": tiles[(64, True)], "BC_D128": tiles[(128, False)],
            "BC_D128_CAUSAL": tiles[(128, True)], "MAX_STAGES": max_stages, "EXP2_FMA_EVERY": exp2_fma_every,
            "SOFTMAX_SPLIT": row_split}


def _stages(D: int, bc: int, max_stages: int = MAX_STAGES, rows: int = Br, q_slots: int = 1) -> int:
    """K (and V) ring slots: as many as fit in 227 KB, at most ``max_stages`` (Tiles<D, BC>::STAGES); ``rows``:
    query rows per work tile; ``q_slots``: Q buffers."""
    q = rows * D * 2
    fit = (BLOCK_SMEM - ALIGN - q_slots * q - 8 * (3 * q_slots + 4 * max_stages)) // (2 * bc * D * 2)
    return min(fit, max_stages)


def stages(D: int, causal: bool = False) -> int:
    """Slots of each of the K and V rings at this head dim (without masking, unless ``causal``), two consumers."""
    return _stages(D, tile(D, causal))


def _bytes(D: int, bc: int, max_stages: int = MAX_STAGES, rows: int = Br, q_slots: int = 1) -> int:
    s = _stages(D, bc, max_stages, rows, q_slots)
    # the Q buffers, the K and V rings, the barriers, a work slot per Q buffer
    return q_slots * rows * D * 2 + 2 * s * bc * D * 2 + 8 * (2 * q_slots + 4 * s) + 8 * q_slots


def shared_bytes(D: int, *, tiles: dict | None = None, max_stages: int = MAX_STAGES, n_consumers: int = 2,
                 q_slots: int = 1) -> int:
    """Dynamic shared memory per block: ``Layout<D>::BYTES`` of the .cu file (the larger of its masked and
    unmasked configurations) + ALIGN bytes of slack."""
    tiles = tiles or TILES
    return max(_bytes(D, tiles[(D, c)], max_stages, 64 * n_consumers, q_slots) for c in (False, True)) + ALIGN


def require_hopper() -> None:
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("chapter 7's kernels need an NVIDIA Hopper GPU (sm_90: H100/H200); no CUDA GPU here")
    cc = torch.cuda.get_device_capability()
    if cc != (9, 0):
        raise RuntimeError(f"chapter 7's kernels need sm_90 (H100/H200): wgmma and setmaxnreg exist only on "
                           f"sm_90a; this GPU, {torch.cuda.get_device_name()}, is sm_{cc[0]}{cc[1]}")


_props: dict[int, tuple[int, int]] = {}


def _device_index(device) -> int:
    import torch
    return device.index if device.index is not None else torch.cuda.current_device()


def _stream_key(device) -> tuple[int, int]:
    """(device, stream): launches on one stream run one after another, so per-launch scratch can be kept per key."""
    import torch
    return _device_index(device), torch.cuda.current_stream(device).cuda_stream


def _device_props(device) -> tuple[int, int]:
    """(SMs, L2 bytes) of ``device``, read once."""
    import torch
    i = _device_index(device)
    if i not in _props:
        pr = torch.cuda.get_device_properties(i)
        _props[i] = (pr.multi_processor_count, pr.L2_cache_size)
    return _props[i]


def group_heads(S: int, D: int, l2_bytes: int, heads: int) -> int:
    """Heads per group of the work order: as many as have their K and V (fp16) in ``L2_SHARE`` of L2."""
    per_head = 2 * S * D * 2
    return max(1, min(heads, int(L2_SHARE * l2_bytes) // per_head))


_counters: dict[tuple[int, int], object] = {}


def _counter(device):
    """Two zeroed int32 per (device, stream) for the dynamic schedule: the next work tile and the blocks done.
    The kernel's last block resets them, and kernels on one stream run one after another, so one pair
    serves every launch on that stream."""
    import torch
    key = _stream_key(device)
    if key not in _counters:
        _counters[key] = torch.zeros(2, dtype=torch.int32, device=device)
    return _counters[key]


_tails: dict[tuple[int, int], tuple] = {}


def _tail_buffers(device, floats: int, ints: int):
    """The split last round's workspace (the parts' O, m and l, fp32) and zeroed counters, per (device, stream), grown as
    needed. The kernel's last part of each tile's rows resets its counter, so the zeros serve the next launch."""
    import torch
    key = _stream_key(device)
    ws, counts = _tails.get(key, (None, None))
    if ws is None or ws.numel() < floats:
        ws = torch.empty(floats, dtype=torch.float32, device=device)
    if counts is None or counts.numel() < ints:
        counts = torch.zeros(ints, dtype=torch.int32, device=device)
    _tails[key] = (ws, counts)
    return ws, counts


def split_parts(n_work: int, grid: int, n_key_tiles: int) -> int:
    """Parts per tile of the static walk's last, partial round (0: not split) — as many as the idle blocks allow,
    with TAIL_KEYS key tiles each at least."""
    tail = n_work % grid
    if n_work <= grid or tail == 0:
        return 0
    split = min(grid // tail, n_key_tiles // TAIL_KEYS)
    return split if split > 1 else 0


def variant(*, tiles: dict | None = None, schedule: dict | None = None, grouped: bool = True,
            max_stages: int = MAX_STAGES, exp2_fma_every: int = EXP2_FMA_EVERY, row_split: int = SOFTMAX_SPLIT,
            desc_inc: bool = False, q_slots_d64: int = 1, end_align: bool = True, split_tail: dict | None = None,
            consumers_d64: int | None = None, wide_schedule: dict | None = None):
    """``attention(q, k, v, *, causal)`` with other choices than the defaults:

    * ``tiles`` ((D, causal) → Bc); ``schedule`` ((D, causal) → "grid" / "static" / "dynamic", with two consumer
      warpgroups) and ``wide_schedule`` (causal → the same, three at D = 64); ``grouped`` (causal work in head
      groups, heaviest first; else head-major); ``max_stages``, ``exp2_fma_every``, ``row_split``;
    * ``desc_inc``: the wgmma descriptors built once per tile and stepped by adds (FT_DESC_INC);
    * ``q_slots_d64``: Q buffers at D = 64, 2 loads the next work tile's Q while this one runs (within the noise on
      the H100, results/ch07-issue28-h100-2026-11-28/13);
    * ``end_align``: with masking, the three-consumer kernel's query blocks end at S (END_ALIGN_WIDE);
    * ``split_tail`` (D → whether, without masking, the last partial round of work tiles is split along the keys
      over the idle SMs);
    * ``consumers_d64``: 2 or 3 consumer warpgroups at D = 64 whatever the problem (None: ``consumers`` decides).

    Compiled on first use: one module per count of consumer warpgroups at D = 64 (``module(n)``; its D = 128 kernel
    is the same in both)."""
    tiles = {**TILES, **(tiles or {})}
    schedule = {**SCHEDULE, **(schedule or {})}
    wide_schedule = {**WIDE_SCHEDULE, **(wide_schedule or {})}
    base = _defines(tiles, max_stages, exp2_fma_every, row_split)
    if desc_inc:
        base["FT_DESC_INC"] = 1
    base["END_ALIGN_WIDE"] = int(end_align)
    if q_slots_d64 != 1:
        base["Q_SLOTS_D64"] = q_slots_d64
    split_tail = {**SPLIT_TAIL, **(split_tail or {})}
    base.update({f"SPLIT_TAIL_D{D}": int(split_tail[D]) for D in (64, 128)})

    def how(D: int, causal: bool, n: int) -> str:                            # the schedule of a kernel
        return wide_schedule[causal] if D == 64 and n == WIDE_D64 else schedule[(D, causal)]

    modules = {}

    def module(n: int = 2):
        """The module whose D = 64 kernel has ``n`` consumer warpgroups."""
        if n not in modules:
            defines = {**base, "CONSUMERS_D64": n}
            defines.update({f"DYNAMIC_D{D}": int(any(how(D, c, n) == "dynamic" for c in (False, True)))
                            for D in (64, 128)})
            modules[n] = load_cuda(SOURCE, arch="sm_90a", defines=defines)
        return modules[n]

    def attention(q, k, v, *, causal: bool = False):
        check_inputs(q, k, v)
        require_hopper()
        B, H, S, D = q.shape
        o = output_like(q)                                                   # [B, H, S, D]
        rows = B * H * S
        sms, l2 = _device_props(q.device)
        n = consumers_d64 or consumers(D, S, B * H, sms) if D == 64 else 2    # consumer warpgroups
        br = 64 * n                                                          # query rows per work tile
        bc = tiles[(D, bool(causal))]
        n_work = (S + br - 1) // br * B * H                                  # work tiles: Br query rows of one head
        if n_work + 1024 >= 2 ** 31:
            raise ValueError(f"{n_work} work tiles: more than the kernel's int indices hold")
        walk = how(D, bool(causal), n)
        grid = n_work if walk == "grid" else min(n_work, sms)
        sched = _counter(q.device) if walk == "dynamic" and n_work > grid else 0    # 0: a null pointer
        group = group_heads(S, D, l2, B * H) if causal and grouped else 1
        split, ws, counts = 0, 0, 0                                          # 0: null pointers
        if split_tail[D] and walk == "static" and not causal:
            split = split_parts(n_work, grid, (S + bc - 1) // bc)
            if split:
                parts = n_work % grid * split
                ws, counts = _tail_buffers(q.device, parts * n * (D // 2 + 4) * 128, parts // split * n * 4)
        tq = tma.tensor_map(q.view(rows, D), box_rows=br, box_cols=BOX)      # boxes [Br, 64] of Q
        tk = tma.tensor_map(k.view(rows, D), box_rows=bc, box_cols=BOX)      # boxes [Bc, 64] of K
        tv = tma.tensor_map(v.view(rows, D), box_rows=bc, box_cols=BOX)      # boxes [Bc, 64] of V
        tma.launch(module(n).kernel(KERNELS[D]), grid=(grid,), block=(128 * (1 + n),),
                   shared_mem=shared_bytes(D, tiles=tiles, max_stages=max_stages, n_consumers=n,
                                           q_slots=q_slots_d64 if D == 64 else 1),
                   args=(tq, tk, tv, o, S, B * H, D ** -0.5 * LOG2E, int(causal), sched, group,
                         (S + br - 1) // br, n_work, split, ws, counts))
        return o

    attention.module = module
    attention.config = {"tiles": tiles, "schedule": schedule, "wide_schedule": wide_schedule, "grouped": grouped,
                        "max_stages": max_stages, "exp2_fma_every": exp2_fma_every, "row_split": row_split,
                        "consumers_d64": consumers_d64, "split_tail": split_tail}
    return attention


attention = variant()


def _module():
    return attention.module()
