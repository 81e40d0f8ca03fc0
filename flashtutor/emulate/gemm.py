"""Chapter 5's CUTLASS GEMMs on a CPU: references that take the same call as a compiled
:class:`flashtutor.loaders.cutlass.Gemm` — the same tensors, strides, checks (:func:`~flashtutor.loaders.cutlass.validate`),
dtypes in and out — and compute it in fp32 with numpy.

The CUTLASS GEMMs are built by nvcc for sm_90a, so nothing of them can run on a CPU; when the emulation is
active (:func:`flashtutor.emulate.activate`), :func:`flashtutor.loaders.cutlass.build_gemms` returns a
:class:`ReferenceGemms` instead, and only the learner's own kernels (the softmax) are emulated. numpy rather
than torch does the products, so that the worker's trace of the call (which fails a submission whose own
code calls a torch matmul) does not show them.
"""
from __future__ import annotations

from ..loaders.cutlass import GemmTable, _dedupe


class ReferenceGemm:
    """``D[l] = alpha · A[l]·op(B[l])`` for ``l < L``, as the configuration's CUTLASS GEMM computes it: ``qk``
    reads B as N×K (Kᵀ is never formed) and writes fp32; ``pv`` reads B as K×N and writes fp16."""

    def __init__(self, config):
        self.config = config
        self.calls = 0

    def __repr__(self) -> str:
        return f"ReferenceGemm({self.config.short()}, CPU)"

    def __call__(self, a, b, d, *, M: int, N: int, K: int, L: int, lda: int, batch_a: int, ldb: int,
                 batch_b: int, ldd: int, batch_d: int, alpha: float = 1.0):
        import numpy as np
        import torch

        from ..loaders.cutlass import validate
        op = self.config.op
        validate(op, a, b, d, M=M, N=N, K=K, L=L, lda=lda, batch_a=batch_a, ldb=ldb, batch_b=batch_b, ldd=ldd,
                 batch_d=batch_d, device_type="cpu", where=str(self))
        A = torch.as_strided(a, (L, M, K), (batch_a, lda, 1)).numpy().astype(np.float32)
        if op == "qk":
            B = torch.as_strided(b, (L, N, K), (batch_b, ldb, 1)).numpy().astype(np.float32).transpose(0, 2, 1)
        else:
            B = torch.as_strided(b, (L, K, N), (batch_b, ldb, 1)).numpy().astype(np.float32)
        out = np.matmul(A, B)
        out *= np.float32(alpha)
        torch.as_strided(d, (L, M, N), (batch_d, ldd, 1)).copy_(torch.from_numpy(out))
        self.calls += 1
        return d


class ReferenceGemms(GemmTable):
    """Stands in for a :class:`flashtutor.loaders.cutlass.GemmLibrary`: ``lib[config]`` is a :class:`ReferenceGemm`."""

    path = "(CPU reference GEMMs: flashtutor.emulate.gemm)"
    report = None

    def __init__(self, configs):
        self.configs = _dedupe(configs)
        self._gemms = {c: ReferenceGemm(c) for c in self.configs}

    def __repr__(self) -> str:
        return f"ReferenceGemms({len(self.configs)} configurations, CPU)"
