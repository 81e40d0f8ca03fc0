"""The chapters the grader knows: where their files are, which shapes, which thresholds."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(os.environ.get("FLASHTUTOR_ROOT", Path(__file__).resolve().parent.parent))


@dataclass(frozen=True)
class SpeedRule:
    """A pass/fail speed threshold. ``max_ratio_vs_sdpa``: learner time / SDPA time must be at most
    this (median, same process) on every timed shape. Calibrated on the GPU from the solution."""
    max_ratio_vs_sdpa: float | None = None
    calibration: str = ""          # where the number comes from (file and GPU)


@dataclass(frozen=True)
class Chapter:
    key: str                       # "01"
    slug: str                      # "01_naive_cuda"
    title: str
    kind: str                      # "cuda" (NVRTC), "triton", "torch" (plain PyTorch: tests only)
    entry: str = "attention.py"    # the module exposing attention(q, k, v, *, causal=False)
    files: tuple[str, ...] = ("attention.py",)   # exercise files generated from the solution
    check_sets: tuple[str, ...] = ("seed", "small", "odd")
    time_sets: tuple[str, ...] = ("seed", "small")
    causal: bool = True
    seeds: int = 2                 # fresh inputs per shape
    large_logits: bool = True      # one extra case with logits large enough to overflow exp()
    graph_time: bool = False
    speed: SpeedRule = field(default_factory=SpeedRule)
    reference: str | None = None   # "flashtutor.kernels.k01_naive_three_pass": the chapter's reference
    excluded: str = ""             # which shape sets are left out, and why (shown in the report)
    anticheat: bool = True         # static scan + run-time trace rules (flashtutor.anticheat)
    allowed: frozenset = frozenset()          # names the static scan allows in this chapter
    allowed_kernels: str | None = None        # regex of library kernel names allowed at run time

    @property
    def exercise_dir(self) -> Path:
        return ROOT / "chapters" / self.slug

    @property
    def solution_dir(self) -> Path:
        return ROOT / "solutions" / self.slug

    def exercise_path(self) -> Path:
        return self.exercise_dir / self.entry

    def solution_path(self) -> Path:
        return self.solution_dir / self.entry


CHAPTERS: dict[str, Chapter] = {
    "01": Chapter(
        key="01", slug="01_naive_cuda", title="Naive attention in CUDA", kind="cuda",
        files=("attention.py", "attention.cu"),
        reference="flashtutor.kernels.k01_naive_three_pass",
        excluded=("the 'large' set (S 4096/8192): a naive kernel needs seconds per call there and an fp32 "
                  "score matrix of up to 17 GB; chapter 2 onwards grade it"),
    ),
    "04": Chapter(
        key="04", slug="04_triton_online_softmax", title="FlashAttention-2 in Triton", kind="triton",
        files=("attention.py",),
        check_sets=("seed", "small", "odd", "large"), time_sets=("seed", "large"), causal=True,
        speed=SpeedRule(max_ratio_vs_sdpa=2.3, calibration=(
            "1.5 × 1.55, the solution's worst time ratio to SDPA (B2 H32 S8192 D128, `flashtutor grade 04 "
            "--solution` on an NVIDIA H200, torch 2.11, cuDNN 9.19, triton 3.6, 2026-11-21)")),
        reference="flashtutor.kernels.k04_triton_fa2_hopper",
    ),
}


def get_chapter(key) -> Chapter:
    if isinstance(key, Chapter):
        return key
    k = str(key).zfill(2)
    for c in CHAPTERS.values():
        if k in (c.key, c.slug) or str(key) == c.slug:
            return c
    raise KeyError(f"unknown chapter {key!r}; known: {', '.join(CHAPTERS)}")
