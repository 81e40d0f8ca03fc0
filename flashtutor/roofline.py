"""Roofline floors: the least time any kernel can take for a problem on a given GPU.

A kernel must move at least ``Problem.min_bytes`` through HBM and do ``Problem.flops`` of
arithmetic, so it takes at least ``max(bytes / bandwidth, flops / peak)``.

One basis for the whole course (book/measuring.ipynb, "Percent of peak"): every "% of peak" and every
roofline floor uses the GPU's *datasheet* figures — the dense fp16 tensor-core rate (989.4 TFLOP/s on an
H100 SXM) and the HBM bandwidth — through :func:`basis_peaks`, so a percentage means the same thing on
every run and every machine. :func:`measure_peaks` measures what a large fp16 GEMM and a large copy
reach on this card; that is shown as its own named line (:func:`reached_line`), an attainable ceiling,
never as a second peak.
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


def basis_peaks(device_name: str | None = None) -> Peaks | None:
    """The course's one basis for "% of peak" and for roofline floors: the datasheet figures of
    ``device_name`` (default: this process's CUDA device), or None for a GPU the table does not know."""
    if device_name is None:
        import torch
        device_name = torch.cuda.get_device_name()
    return datasheet_peaks(device_name)


def peak_tflops(device_name: str | None = None) -> float | None:
    """The dense fp16 tensor-core peak every "% of peak" in the course divides by (TFLOP/s, datasheet)."""
    pk = basis_peaks(device_name)
    return pk.tensor_tflops if pk else None


def reached_line(measured: "Peaks", device_name: str | None = None) -> str:
    """What a large fp16 GEMM and a large copy reached on this GPU (``measure_peaks``), each against
    the datasheet basis: an attainable ceiling, named as such, not a peak."""
    pk = basis_peaks(device_name or measured.name)
    gemm = f"a large fp16 GEMM reached {measured.tensor_tflops:.0f} TFLOP/s"
    copy = f"a large device-to-device copy {measured.hbm_tbs:.2f} TB/s"
    if pk:
        gemm += f" = {100 * measured.tensor_tflops / pk.tensor_tflops:.0f}% of peak"
        copy += f" = {100 * measured.hbm_tbs / pk.hbm_tbs:.0f}% of the datasheet's {pk.hbm_tbs:g} TB/s"
    return f"{gemm}, {copy}, on this {pk.name if pk else measured.name}"


def measure_peaks(device=None, *, copy_bytes: int = 1 << 30, n: int = 8192) -> Peaks:
    """Measure this GPU's copy bandwidth and fp16 matmul rate with CUDA events (median of 10): what a
    large GEMM and a large copy reach (:func:`reached_line` prints them), not the basis of "% of peak"
    or of the floors, which is :func:`basis_peaks`.

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
