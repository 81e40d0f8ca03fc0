"""Chapter 7, step b: warp specialization — a producer warp issues TMA, two consumer warpgroups compute,
setmaxnreg moves registers to the consumers; causal masking skips whole tiles.

The kernel is ``k07b_warp_specialized.cu``: the chapter's solution (``solutions/07_hopper/attention.cu``)
without its exercise markers (tests/test_ch07.py keeps the two identical). This launcher is the
solution's, pointed at this file.
"""
from __future__ import annotations

from pathlib import Path

from flashtutor.api import check_inputs, output_like
from flashtutor.loaders import load_cuda, tma

from . import solution_module

SOURCE = Path(__file__).with_suffix(".cu")
_sol = solution_module("07_hopper")
KERNELS = _sol.KERNELS
Br, Bc, STAGES, THREADS, BOX, LOG2E = _sol.Br, _sol.Bc, _sol.STAGES, _sol.THREADS, _sol.BOX, _sol.LOG2E
shared_bytes = _sol.shared_bytes
require_hopper = _sol.require_hopper
_mod = None


def _module():
    global _mod
    if _mod is None:
        _mod = load_cuda(SOURCE, arch="sm_90a")
    return _mod


def attention(q, k, v, *, causal: bool = False):
    check_inputs(q, k, v)
    require_hopper()
    B, H, S, D = q.shape
    if B * H > 65535:
        raise ValueError(f"B·H = {B * H} exceeds the grid's y limit (65535)")
    o = output_like(q)                                                   # [B, H, S, D]
    rows = B * H * S
    tq = tma.tensor_map(q.view(rows, D), box_rows=Br, box_cols=BOX)      # boxes [Br, 64] of Q
    tk = tma.tensor_map(k.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of K
    tv = tma.tensor_map(v.view(rows, D), box_rows=Bc, box_cols=BOX)      # boxes [Bc, 64] of V
    tma.launch(_module().kernel(KERNELS[D]), grid=((S + Br - 1) // Br, B * H), block=(THREADS,),
               shared_mem=shared_bytes(D), args=(tq, tk, tv, o, S, D ** -0.5 * LOG2E, int(causal)))
    return o
