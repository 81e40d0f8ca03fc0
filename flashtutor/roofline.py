"""Roofline floors: the least time any kernel can take for a problem on a given GPU.

A kernel must move at least ``Problem.min_bytes`` through HBM and do ``Problem.flops`` of
arithmetic, so it takes at least ``max(bytes / bandwidth, flops / peak)``. Datasheet peaks are
the default; :func:`measure_peaks` replaces them with what the card actually reaches (a large
device-to-device copy and a large fp16 matmul), which is the honest ceiling to report against.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .problems import Problem


@dataclass(frozen=True)
class Peaks:
    name: str
    tensor_tflops: float   # dense fp16/bf16 tensor-core rate, TFLOP/s
    fp32_tflops: float     # plain fp32 FMA rate on the CUDA cores, TFLOP/s
    hbm_tbs: float         # memory bandwidth, TB/s (bytes read + written)
    source: str = "datasheet"

    def floor_us(self, p: Problem, *, tensor_cores: bool = True) -> dict:
        """The memory floor, the compute floor and the floor (their max), in microseconds."""
        mem = p.min_bytes / (self.hbm_tbs * 1e12) * 1e6
        rate = self.tensor_tflops if tensor_cores else self.fp32_tflops
        comp = p.flops / (rate * 1e12) * 1e6
        return {"memory_us": mem, "compute_us": comp, "floor_us": max(mem, comp),
                "bound": "memory" if mem >= comp else "compute"}


# Vendor datasheet figures (dense, no sparsity). Keys are matched against
# torch.cuda.get_device_name() in order, so the more specific names come first.
DATASHEET: tuple[tuple[str, Peaks], ...] = (
    ("H100 PCIe", Peaks("H100 PCIe", 756.0, 51.2, 2.0)),
    ("H100 NVL", Peaks("H100 NVL", 835.0, 60.0, 3.9)),
    ("H100", Peaks("H100 SXM", 989.4, 66.9, 3.35)),
    ("H200", Peaks("H200 SXM", 989.4, 66.9, 4.8)),
    ("A100-SXM4-80GB", Peaks("A100 SXM 80GB", 312.0, 19.5, 2.039)),
    ("A100 80GB PCIe", Peaks("A100 PCIe 80GB", 312.0, 19.5, 1.935)),
    ("A100", Peaks("A100 40GB", 312.0, 19.5, 1.555)),
    ("L4", Peaks("L4", 121.0, 30.3, 0.3)),
)


def datasheet_peaks(device_name: str) -> Peaks | None:
    for key, peaks in DATASHEET:
        if key.lower() in device_name.lower():
            return peaks
    return None


def measure_peaks(device=None, *, copy_bytes: int = 1 << 30, n: int = 8192) -> Peaks:
    """Measure this GPU's copy bandwidth and fp16 matmul rate with CUDA events (median of 10).

    Bandwidth counts bytes read plus bytes written of a device-to-device copy; the matmul is
    n×n×n fp16 on random data (zeros run faster than real data on some cards).
    """
    import torch

    from .timing import event_times

    device = torch.device(device or "cuda")
    name = torch.cuda.get_device_name(device)
    src = torch.empty(copy_bytes // 2, dtype=torch.float16, device=device).normal_()
    dst = torch.empty_like(src)
    t_copy = event_times(lambda: dst.copy_(src), reps=10, flush_l2=False).median_us
    a = torch.randn(n, n, dtype=torch.float16, device=device)
    b = torch.randn(n, n, dtype=torch.float16, device=device)
    t_mm = event_times(lambda: torch.mm(a, b), reps=10, flush_l2=False).median_us
    base = datasheet_peaks(name) or Peaks(name, float("nan"), float("nan"), float("nan"))

    return replace(base, name=name, tensor_tflops=2 * n**3 / (t_mm * 1e-6) / 1e12,
                   hbm_tbs=2 * copy_bytes / (t_copy * 1e-6) / 1e12, source="measured")


def percent_of_floor(time_us: float, floor_us: float) -> float:
    """How close a measured time is to the floor: 100% means at the floor."""
    return 100.0 * floor_us / time_us if time_us > 0 else float("nan")
