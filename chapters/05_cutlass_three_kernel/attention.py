"""Chapter 5 exercise: attention as three kernels — a CUTLASS GEMM, your softmax, a CUTLASS GEMM.

    S = Q·Kᵀ / sqrt(D)   CUTLASS 3 GEMM for Hopper (sm_90a): fp32 scores [B·H, S, ld], scale in the epilogue
    P = softmax(S)       softmax.cu beside this file (you write it): one warp per row, fp16 P in place
    O = P·V              CUTLASS 3 GEMM: reads P with a row stride of 2·ld halves, writes O in fp16

The idea: let a library do the matrix products and write only what it does not provide. What changed
since chapter 4: the scores leave the chip. Limitation: they cost 12 bytes of memory traffic per
score (4 written, 4 read, 2 + 2 for P), an S² term per head that fused kernels (chapter 4, SDPA) do
not pay; the causal mask zeroes half of P but the GEMMs still multiply all of it.

You write two things:
* the kernel body in ``softmax.cu``;
* ``gemm_configs`` below: which CUTLASS configuration (tile, cluster, schedule, epilogue) runs each
  product — the notebook's sweep measures the candidates.

The GEMMs compile with nvcc on first use (a minute or more; a progress bar shows it) and are cached.
Grade with ``flashtutor grade 05`` or, in the notebook, ``flashtutor.grade("05")``.
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

import flashtutor as ft
from flashtutor.loaders.cutlass import GemmConfig, build_gemms

WARPS_PER_BLOCK = 4        # softmax_rows: one warp per row, 4 rows per 128-thread block
ROW_ALIGN = 8              # ld, the score matrix's row stride, is S rounded up to 8 (16 bytes of fp16 P)
_KERNEL_FILE = next(Path(__file__).parent.glob("*.cu"))   # softmax.cu: the one CUDA file beside this one
_rows_module = None
_libraries: dict = {}      # configurations -> their compiled GemmLibrary
_chosen: dict = {}         # head dim -> gemm_configs(D), asked once
_built = None              # the library of both head dims' configurations


def gemm_configs(D: int) -> tuple[GemmConfig, GemmConfig]:
    """The (QKᵀ, PV) CUTLASS configurations for head dim ``D`` (64 or 128).

    QKᵀ: M = N = S (queries × keys), K = D, and it writes 4 bytes per score: its time is mostly the
    epilogue's stores. PV: M = S, N = D, K = S: a long mainloop over P, and a thin output (N = D).
    """
    # TODO: return (GemmConfig("qk", tile=..., cluster=..., schedule=..., epilogue=...),
    #       GemmConfig("pv", ...)), one of the fastest pairs in the notebook's sweep.
    raise NotImplementedError("attention.py: TODO")


def build(verbose: bool = True):
    """Compile the GEMMs of both head dims now, in one parallel build (the first attention() call
    does it otherwise). Returns the GemmLibrary; later calls return it at once."""
    global _built
    if _built is None:
        _built = _library(tuple(c for D in ft.api.SUPPORTED_HEAD_DIMS for c in _configs(D)), verbose)
    return _built


def _configs(D: int) -> tuple[GemmConfig, GemmConfig]:
    if D not in _chosen:
        _chosen[D] = gemm_configs(D)
    return _chosen[D]


def _library(configs: tuple, verbose: bool = True):
    lib = _libraries.get(configs)
    if lib is None:
        lib = _libraries[configs] = build_gemms(list(configs), verbose=verbose)
    return lib


def _row_kernels():
    global _rows_module
    if _rows_module is None:
        _rows_module = ft.load_cuda(_KERNEL_FILE)      # NVRTC, cached
    return _rows_module


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(D)) v for q, k, v of shape [B, H, S, D] in fp16 (SDPA's semantics)."""
    ft.check_inputs(q, k, v)
    qk, pv = _configs(q.shape[-1])
    return three_kernel(q, k, v, causal=causal, qk=qk, pv=pv, lib=build())


def three_kernel(q, k, v, *, causal: bool = False, qk: GemmConfig, pv: GemmConfig, lib=None) -> torch.Tensor:
    """The pipeline with explicit configurations (the sweep calls this). ``lib``: a GemmLibrary that
    holds both configurations (default: built, or found in the cache, for just these two)."""
    B, H, S, D = q.shape
    L = B * H                                           # one GEMM per (batch, head): CUTLASS's batch mode
    ld = -(-S // ROW_ALIGN) * ROW_ALIGN                 # row stride of the scores, in floats
    lib = lib or _library((qk, pv))
    if ld != S:
        # TMA moves whole 16-byte units, so CUTLASS needs every contiguous extent to be a multiple of 8
        # halves: P's rows (K of the PV product) must be ld long, so K and V get ld - S rows of zeros.
        # Their scores are 0 and the softmax masks them (columns j ≥ S).
        k = F.pad(k.view(L, S, D), (0, 0, 0, ld - S))   # [L, ld, D]
        v = F.pad(v.view(L, S, D), (0, 0, 0, ld - S))   # [L, ld, D]
    scores = torch.empty((L, S, ld), dtype=torch.float32, device=q.device)   # [B·H, S, ld] fp32, then P
    o = ft.output_like(q)                                                    # [B, H, S, D]

    # 1. S = Q·Kᵀ/sqrt(D): M = S queries, N = ld keys, K = D, per head; the scale is the epilogue's alpha.
    lib[qk](q, k, scores, M=S, N=ld, K=D, L=L, lda=D, batch_a=S * D, ldb=D, batch_b=ld * D,
            ldd=ld, batch_d=S * ld, alpha=D ** -0.5)
    # 2. P = softmax(S), row by row, fp16 P over the first half of each row's bytes.
    rows = L * S
    _row_kernels().softmax_rows(grid=(-(-rows // WARPS_PER_BLOCK),), block=(32 * WARPS_PER_BLOCK,),
                            args=(scores, rows, S, ld, int(causal)))
    # 3. O = P·V: P is the fp16 view [L, S, 2·ld] of the same buffer, of which the first ld columns are P.
    p16 = scores.view(torch.float16)                                         # [B·H, S, 2·ld]
    lib[pv](p16, v, o, M=S, N=D, K=ld, L=L, lda=2 * ld, batch_a=2 * S * ld, ldb=D, batch_b=ld * D,
            ldd=D, batch_d=S * D)
    return o
