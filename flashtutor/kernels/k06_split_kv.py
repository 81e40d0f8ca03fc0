"""Chapter 6 reference: split the keys (flash-decoding) when the tiles cannot fill the GPU.

The idea: with one sequence and 16 heads, chapter 4's grid has B·H·⌈S/BLOCK_M⌉ programs — 256 at
S = 1024 with 64-row query blocks, 128 with 128-row blocks — for 132 SMs that each want several
programs resident to hide latency. The online softmax is associative over keys: the keys of a row can
be cut into chunks, each chunk summarised by its own (acc, m_i, l_i), and the summaries merged:

    m = max_s m_s,   l = Σ_s 2^(m_s − m)·l_s,   acc = Σ_s 2^(m_s − m)·acc_s,   O = acc / l.

So the work list gets a third index, the key chunk: ``n_split`` times more tiles, each a chunk of
keys for a block of queries. Each tile writes its partial (acc, m_i, l_i) in fp32 to a workspace
(``n_split × B·H·S × (D + 2)`` floats — it stays in L2 at these sizes), and a second small kernel,
``combine_kernel``, merges the chunks of each row. Flash-decoding (Dao et al., 2023) uses this for
decoding, where a single query row would otherwise leave all but a few SMs idle; the same argument
holds whenever B·H·⌈S/BLOCK_M⌉ is below a few programs per SM.

The kernels are the chapter's solution's (``solutions/06_batching/attention.py``: ``multihead_kernel``
with ``SPLIT=True`` and ``combine_kernel``), loaded from that file so they exist in one place. The
solution splits by itself when the tiles would fill fewer than ``FILL_WAVES`` programs per SM; this
module exposes the split with an explicit ``n_split`` and the partials for teaching.
What changed since the multi-head kernel: a tile's key range is a chunk; a second kernel combines.
Limitation: the partials cost extra traffic (written and read once, in fp32) and a second launch, so a
split only pays where the first kernel's time is dominated by idle SMs; chunks are aligned to whole
blocks, so a split never cuts a block and every non-empty chunk contains a key every query of its
block may see (no row is ever all −∞).
"""
from __future__ import annotations

from .k06_multihead import Config, config_for, launch_into, make_plan, num_sms, solution

combine_kernel = solution.combine_kernel
multihead_kernel = solution.multihead_kernel
choose_split = solution.choose_split
FILL_WAVES = solution.FILL_WAVES
MAX_SPLIT = solution.MAX_SPLIT

_plans: dict = {}


def plan(q, causal: bool, n_split: int | None = None, cfg=None):
    """The launch plan for q's shape with ``n_split`` key chunks (None: the solution's heuristic,
    which may choose 1 where the tiles already fill the GPU)."""
    B, H, S, D = q.shape
    cfg = cfg or config_for(B * H, S, D, q.device)
    key = (tuple(q.shape), bool(causal), q.device, cfg, n_split)
    p = _plans.get(key)
    if p is None:
        p = _plans[key] = make_plan(B, H, S, D, causal, q.device, cfg, n_split)
    return p


def launch(q, k, v, *, causal=False, n_split=None, BLOCK_M=None, BLOCK_N=None, num_warps=None, num_stages=None,
           per_sm=None, per_prog=None, tma=None):
    """Direct launch with ``n_split`` chunks (None: heuristic); tile fields default to the table's."""
    from ..api import check_inputs, output_like
    check_inputs(q, k, v, device_type=None)
    B, H, S, D = q.shape
    base = config_for(B * H, S, D, q.device)
    cfg = Config(*(x if x is not None else d for x, d in zip(
        (BLOCK_M, BLOCK_N, num_warps, num_stages, per_sm, per_prog, tma),
        (base.BLOCK_M, base.BLOCK_N, base.num_warps, base.num_stages, base.per_sm, base.per_prog, base.tma))))
    return launch_into(q, k, v, output_like(q), causal, plan(q, causal, n_split, cfg))


def attention(q, k, v, *, causal: bool = False):
    """softmax(q kᵀ / sqrt(D)) v with the keys split where the tiles cannot fill the GPU (direct launch)."""
    return launch(q, k, v, causal=causal)


def n_split_for(q, causal: bool = False) -> int:
    """How many key chunks :func:`attention` uses for q's shape on this device."""
    return plan(q, causal).args[4]


def partials(q, k, v, *, causal=False, n_split=2, cfg=None):
    """Run only the split kernel and return its partials as tensors: acc ``[n_split, B, H, S, D]``,
    m and l ``[n_split, B, H, S]`` (fp32, base-2 units), and the chunk length (for teaching)."""
    import torch
    B, H, S, D = q.shape
    p = plan(q, causal, n_split, cfg)
    if not p.split:
        raise ValueError(f"S={S} gives a single chunk with these blocks; use a longer sequence or smaller blocks")
    ns = p.args[4]
    ws = torch.empty(p.ws_elems, device=q.device, dtype=torch.float32)
    out = torch.empty_like(q)
    multihead_kernel[p.grid](*solution._sources(q, k, v, p.rows, p.meta), out, ws, *p.args, **p.meta)
    rows = B * H * S
    acc = ws[:ns * rows * D].view(ns, B, H, S, D)
    m = ws[ns * rows * D: ns * rows * (D + 1)].view(ns, B, H, S)
    l = ws[ns * rows * (D + 1):].view(ns, B, H, S)
    return acc, m, l, p.args[5]


def combine_reference(acc, m, l):
    """The combine step in PyTorch (what ``combine_kernel`` does): O = Σ 2^(m_s−m)·acc_s / Σ 2^(m_s−m)·l_s."""
    import torch
    m_all = m.amax(dim=0)                                        # [B, H, S]
    w = torch.exp2(m - m_all)                                    # [n_split, B, H, S]; empty chunk: 2^-inf = 0
    return (w[..., None] * acc).sum(0) / (w * l).sum(0)[..., None]


__all__ = ["attention", "launch", "plan", "partials", "combine_reference", "n_split_for", "choose_split",
           "combine_kernel", "multihead_kernel", "num_sms", "FILL_WAVES", "MAX_SPLIT"]
