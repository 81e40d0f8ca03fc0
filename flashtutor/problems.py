"""The attention problem: shapes, inputs, the high-precision reference, and its cost.

Everything else in flashtutor (the checker, the timer, the roofline, the grader) speaks in terms
of :class:`Problem`. Shapes follow SDPA: q, k, v are ``[B, H, S, D]``, the scale is ``1/sqrt(D)``
and causal attention masks key ``j > i`` for query ``i`` (top-left aligned, S_q == S_k).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict

import torch


@dataclass(frozen=True)
class Problem:
    B: int
    H: int
    S: int
    D: int
    causal: bool = False
    dtype: torch.dtype = torch.float16
    # Standard deviation of the random q and k entries. 1.0 gives scores ~ N(0, 1) after the
    # 1/sqrt(D) scale; larger values give large logits, where a softmax without max subtraction
    # overflows (exp(x) is inf in fp32 for x > 88.7).
    qk_std: float = 1.0

    @property
    def name(self) -> str:
        s = f"B{self.B} H{self.H} S{self.S} D{self.D}"
        if self.causal:
            s += " causal"
        if self.qk_std != 1.0:
            s += f" logits×{self.qk_std**2:g}"
        return s

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.B, self.H, self.S, self.D)

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.D)

    def replace(self, **kw) -> "Problem":
        d = asdict(self)
        d.update(kw)
        return Problem(**d)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["dtype"] = str(self.dtype).replace("torch.", "")
        d["name"] = self.name
        return d

    # ---- inputs -------------------------------------------------------------------------
    def inputs(self, seed: int, device: str | torch.device = "cpu"):
        """Fresh random q, k, v (never zeros: zeros hide unwritten outputs and wrong indexing)."""
        g = torch.Generator(device="cpu").manual_seed(seed)
        q, k, v = (torch.randn(self.shape, generator=g, dtype=torch.float32) for _ in range(3))
        q, k = q * self.qk_std, k * self.qk_std
        return tuple(t.to(device=device, dtype=self.dtype).contiguous() for t in (q, k, v))

    # ---- cost model ----------------------------------------------------------------------
    @property
    def flops(self) -> float:
        """4·B·H·S²·D: two matmuls (QKᵀ and PV) of 2·S²·D each; causal does about half."""
        f = 4.0 * self.B * self.H * self.S * self.S * self.D
        return f / 2 if self.causal else f

    @property
    def min_bytes(self) -> int:
        """Q, K, V read once and O written once: the least traffic any kernel must move."""
        return 4 * self.B * self.H * self.S * self.D * torch.finfo(self.dtype).bits // 8

    @property
    def score_bytes(self) -> int:
        """Bytes of an fp32 S×S score matrix per (b, h) — what a non-fused kernel writes and reads."""
        return self.B * self.H * self.S * self.S * 4


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
              dtype: torch.dtype | None = None) -> torch.Tensor:
    """Attention in high precision: fp64 on the CPU, fp32 with TF32 off on a GPU.

    Computed one (b, h) slab group at a time so that the S×S scores and probabilities of a large problem
    never need more than ~512 MiB at once (gradings side by side on one GPU each compute one). Returns a
    tensor in the high-precision dtype.
    """
    if dtype is None:
        dtype = torch.float64 if q.device.type == "cpu" else torch.float32
    B, H, S, D = q.shape
    out = torch.empty((B, H, S, D), dtype=dtype, device=q.device)
    scale = 1.0 / math.sqrt(D)
    per_slab = 2 * S * S * torch.finfo(dtype).bits // 8                # s and p alive at once
    step = max(1, (512 << 20) // max(per_slab, 1))
    qf, kf, vf = (t.reshape(B * H, S, D) for t in (q, k, v))
    of = out.view(B * H, S, D)
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        mask = None
        if causal:
            mask = torch.ones(S, S, dtype=torch.bool, device=q.device).triu_(1)
        for i in range(0, B * H, step):
            qs, ks, vs = (t[i:i + step].to(dtype) for t in (qf, kf, vf))
            s = torch.matmul(qs, ks.transpose(-1, -2)) * scale          # [n, S, S]
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            p = torch.softmax(s, dim=-1)                                # [n, S, S]
            of[i:i + step] = torch.matmul(p, vs)                        # [n, S, D]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
    return out


def sdpa(q, k, v, *, causal: bool = False):
    """PyTorch's fused attention with the same semantics (the baseline in every comparison)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


# ---- named shape sets ---------------------------------------------------------------------
def _set(*problems: Problem) -> tuple[Problem, ...]:
    return tuple(problems)


SHAPE_SETS: dict[str, tuple[Problem, ...]] = {
    # The shape of the seed reports: one sequence of 1024 tokens, 16 heads of 64.
    "seed": _set(Problem(1, 16, 1024, 64)),
    # Many short sequences: the regime where launch overhead and memory dominate.
    "small": _set(*(Problem(B, 16, S, 64) for S in (128, 256, 512) for B in (8, 16, 32))),
    # The shortest sequences of the small set: a few µs of work, where launches and latency decide.
    "short": _set(*(Problem(B, 16, 128, 64) for B in (8, 16, 32))),
    # Long sequences, both head dims: compute-bound.
    "large": _set(Problem(4, 32, 4096, 64), Problem(4, 32, 4096, 128),
                  Problem(2, 32, 8192, 64), Problem(2, 32, 8192, 128)),
    # Sequence lengths that are no multiple of any tile, with B > 1 and H > 1 (indexing bugs).
    "odd": _set(Problem(2, 3, 1, 64), Problem(2, 3, 113, 64), Problem(3, 2, 1023, 64),
                Problem(2, 3, 113, 128), Problem(1, 2, 1023, 128)),
    # Long sequences that are no multiple of any tile (a tail tile after many full ones), both head dims:
    # checked wherever a chapter grades the large set.
    "odd_long": _set(Problem(1, 3, 4097, 64), Problem(1, 2, 4097, 128)),
    # The adversarial corpus on a GPU: partial tiles, B > 1, H > 1, both in few cases.
    "adversarial": _set(Problem(2, 3, 113, 64), Problem(3, 2, 1023, 64)),
    # Small enough for a CPU (the Triton interpreter, the grader's own tests).
    "cpu": _set(Problem(2, 2, 1, 64), Problem(2, 3, 37, 64), Problem(1, 2, 70, 128)),
    # CUDA kernels emulated on a CPU (flashtutor.emulate: one fiber per CUDA thread, so keep it small): odd S
    # (a partial tile; two query blocks of 64 at S = 70), B > 1 and H > 1, both head dims, a one-token sequence.
    "emulated": _set(Problem(2, 3, 37, 64), Problem(1, 2, 70, 128), Problem(2, 2, 1, 64)),
}


def shape_set(name: str) -> tuple[Problem, ...]:
    try:
        return SHAPE_SETS[name]
    except KeyError:
        raise KeyError(f"unknown shape set {name!r}; known: {', '.join(SHAPE_SETS)}") from None
