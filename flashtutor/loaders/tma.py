"""TMA tensor maps for the Hopper kernels of chapter 7, and launching kernels that take them.

A TMA ("tensor memory accelerator") copy is described by a *tensor map*: 128 opaque bytes that the
driver encodes on the host (``cuTensorMapEncodeTiled``) from the matrix's address, sizes and strides,
the box (tile) one request copies, and the shared-memory swizzle. The kernel receives it by value as
a ``const __grid_constant__ CUtensorMap`` parameter and names it in ``cp.async.bulk.tensor``.

    q2 = q.view(B * H * S, D)                         # the [B·H·S, D] matrix of every head's rows
    tq = tensor_map(q2, box_rows=64)                  # boxes of [64 rows, 64 fp16] = 64 × 128 bytes
    launch(kernel, grid=..., block=..., args=(tq, tk, tv, o, S, scale), shared_mem=...)

* :func:`plan_2d` is the arithmetic alone (sizes, byte strides, box, checks) and runs anywhere.
* :func:`encode` / :func:`tensor_map` call the driver, so they need a GPU (:func:`driver_reason` says
  why not).
* :func:`launch` passes a map to the kernel: cuda.core's own ``launch`` (1.2) accepts only numbers,
  pointers and its own descriptor type, so this goes through ``cuda.bindings.driver.cuLaunchKernel``,
  whose ``(values, types)`` form takes a ``CUtensorMap`` as it is (its ``getPtr()`` is the address of
  the 128 bytes the driver copies into the kernel's parameters) — no bytes are packed by hand here.
  Everything else is as in :func:`flashtutor.loaders.nvrtc.launch`: torch's current stream, the opt-in
  for more than 48 KB of dynamic shared memory, Python ints and floats sized by the kernel's parameters.
"""
from __future__ import annotations

import ctypes
from collections import OrderedDict
from dataclasses import dataclass

SWIZZLES = (0, 32, 64, 128)     # bytes per swizzled row span; 0 = no swizzle
ELEMENT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}
MAX_BOX = 256                   # elements per box dimension
MAX_RANK = 5


class TensorMapError(ValueError):
    """The requested map breaks one of the driver's rules (said in words, before the driver is asked)."""


@dataclass(frozen=True)
class Plan2D:
    """What ``cuTensorMapEncodeTiled`` gets for a row-major ``[rows, cols]`` matrix, and what one
    TMA request then copies. The driver lists dimensions innermost first: (cols, rows)."""
    rows: int
    cols: int
    elem_bytes: int
    box_rows: int
    box_cols: int
    swizzle: int                 # 0, 32, 64 or 128 bytes

    @property
    def global_dim(self) -> tuple[int, int]:
        return (self.cols, self.rows)

    @property
    def global_strides(self) -> tuple[int]:
        """Bytes from one row to the next (the innermost dimension's stride is the element, implied)."""
        return (self.cols * self.elem_bytes,)

    @property
    def box_dim(self) -> tuple[int, int]:
        return (self.box_cols, self.box_rows)

    @property
    def element_strides(self) -> tuple[int, int]:
        return (1, 1)

    @property
    def box_row_bytes(self) -> int:
        return self.box_cols * self.elem_bytes

    @property
    def box_bytes(self) -> int:
        """Bytes one request writes to shared memory — and counts off the mbarrier, rows outside the
        matrix included (they arrive as zeros)."""
        return self.box_rows * self.box_row_bytes

    @property
    def smem_alignment(self) -> int:
        """The shared-memory destination's alignment the kernel must keep: 128 bytes always, and with a
        swizzle the whole pattern (8 rows of the swizzle span) so that it starts at its row 0."""
        return max(128, 8 * self.swizzle)

    def check(self, address: int | None = None) -> "Plan2D":
        """Raise :class:`TensorMapError` if the driver would refuse this map; returns self."""
        def bad(msg):
            raise TensorMapError(msg)
        if self.elem_bytes not in (1, 2, 4, 8):
            bad(f"element size {self.elem_bytes} bytes: TMA moves 1, 2, 4 or 8-byte elements")
        if not (1 <= self.rows <= 2 ** 32 and 1 <= self.cols <= 2 ** 32):
            bad(f"matrix [{self.rows}, {self.cols}]: each size must be in [1, 2^32]")
        if self.global_strides[0] % 16 or self.global_strides[0] >= 2 ** 40:
            bad(f"row stride {self.global_strides[0]} bytes: must be a multiple of 16 below 2^40 "
                f"(cols · {self.elem_bytes} bytes; pad the rows)")
        if not (1 <= self.box_rows <= MAX_BOX and 1 <= self.box_cols <= MAX_BOX):
            bad(f"box [{self.box_rows}, {self.box_cols}]: each size must be in [1, {MAX_BOX}]")
        if self.box_row_bytes % 16:
            bad(f"box rows of {self.box_row_bytes} bytes: must be a multiple of 16")
        if self.swizzle not in SWIZZLES:
            bad(f"swizzle {self.swizzle}: one of {SWIZZLES} bytes")
        if self.swizzle and self.box_row_bytes > self.swizzle:
            bad(f"box rows of {self.box_row_bytes} bytes exceed the {self.swizzle}-byte swizzle span; "
                f"load a wide tile as several boxes of at most {self.swizzle // self.elem_bytes} elements")
        if address is not None and address % 16:
            bad(f"global address {address:#x} is not 16-byte aligned")
        return self


def plan_2d(rows: int, cols: int, *, box_rows: int, box_cols: int = 64, elem_bytes: int = 2,
            swizzle: int = 128) -> Plan2D:
    """The checked plan for a row-major ``[rows, cols]`` matrix and ``[box_rows, box_cols]`` boxes."""
    return Plan2D(rows, cols, elem_bytes, box_rows, box_cols, swizzle).check()


def swizzled_offset(offset: int, swizzle: int = 128) -> int:
    """Where byte ``offset`` of a box, counted row-major without swizzle, lands in shared memory.

    The swizzle XORs the 16-byte chunk index (bits 4+) with the row index within the pattern
    (bits 7+ for 128 bytes): with 128-byte rows, chunk c of row r goes to chunk c ^ (r % 8)."""
    if swizzle == 0:
        return offset
    span_bits = {32: 1, 64: 2, 128: 3}[swizzle]          # how many chunk-index bits are XORed
    mask = (1 << span_bits) - 1
    row_in_pattern = (offset >> (4 + span_bits)) & mask
    return offset ^ (row_in_pattern << 4)


# ---------------------------------------------------------------- the driver side ----------------
def driver_reason() -> str | None:
    """None when maps can be encoded here, else why not (no driver, no GPU, not Hopper or later)."""
    try:
        from cuda.bindings import driver
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return f"cuInit failed ({err.name}): no usable GPU"
        err, n = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or n == 0:
            return "no CUDA device"
    except Exception as e:   # the driver library itself is missing on a CPU machine
        return f"the CUDA driver is not available ({type(e).__name__}: {str(e)[:120]})"
    try:
        import torch
        if torch.cuda.is_available() and torch.cuda.get_device_capability() < (9, 0):
            return f"TMA needs compute capability 9.0 or later; this GPU is {torch.cuda.get_device_name()}"
    except Exception:
        pass
    return None


class TensorMap:
    """An encoded map (``cuda.bindings.driver.CUtensorMap``) with its plan. It keeps the tensor it
    describes alive: the map holds a raw address, and a freed tensor's memory could be reused."""

    def __init__(self, cu_map, plan: Plan2D, tensor):
        self.cu_map, self.plan, self.tensor = cu_map, plan, tensor

    def __repr__(self) -> str:
        p = self.plan
        return (f"TensorMap([{p.rows}, {p.cols}] x {p.elem_bytes} B, box [{p.box_rows}, {p.box_cols}], "
                f"swizzle {p.swizzle} B)")


def _dtype_enum(driver, dtype):
    import torch
    table = {torch.float16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
             torch.bfloat16: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             torch.float32: driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}
    if dtype not in table:
        raise TensorMapError(f"dtype {dtype}: tensor maps here are for fp16, bf16 or fp32")
    return table[dtype]


def _swizzle_enum(driver, swizzle: int):
    S = driver.CUtensorMapSwizzle
    return {0: S.CU_TENSOR_MAP_SWIZZLE_NONE, 32: S.CU_TENSOR_MAP_SWIZZLE_32B,
            64: S.CU_TENSOR_MAP_SWIZZLE_64B, 128: S.CU_TENSOR_MAP_SWIZZLE_128B}[swizzle]


def encode_args(driver, plan: Plan2D, dtype, address: int) -> tuple:
    """``cuTensorMapEncodeTiled``'s arguments for ``plan``, in the driver's sized integer types (the
    bindings refuse plain ints for ``cuuint32_t``/``cuuint64_t`` parameters)."""
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t
    return (_dtype_enum(driver, dtype), u32(2), address,
            [u64(x) for x in plan.global_dim], [u64(x) for x in plan.global_strides],
            [u32(x) for x in plan.box_dim], [u32(x) for x in plan.element_strides],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, _swizzle_enum(driver, plan.swizzle),
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)   # NONE: out-of-range reads are 0


def encode(t, *, box_rows: int, box_cols: int = 64, swizzle: int = 128) -> TensorMap:
    """Encode a tiled map of the 2-D, contiguous CUDA tensor ``t`` (rows past the end read as zeros)."""
    if t.dim() != 2 or not t.is_contiguous():
        raise TensorMapError(f"a 2-D contiguous tensor is expected, got shape {tuple(t.shape)} "
                             f"with strides {t.stride()} (view [B, H, S, D] as [B·H·S, D])")
    if t.device.type != "cuda":
        raise TensorMapError(f"the tensor is on {t.device}; tensor maps describe GPU memory")
    plan = Plan2D(t.shape[0], t.shape[1], t.element_size(), box_rows, box_cols, swizzle).check(t.data_ptr())
    from cuda.bindings import driver
    from cuda.core import Device
    Device(t.device.index).set_current()   # the primary context, shared with torch
    err, cu_map = driver.cuTensorMapEncodeTiled(*encode_args(driver, plan, t.dtype, t.data_ptr()))
    if err != driver.CUresult.CUDA_SUCCESS:
        raise TensorMapError(f"cuTensorMapEncodeTiled refused {plan}: {err.name}")
    return TensorMap(cu_map, plan, t)


_cache: OrderedDict = OrderedDict()
CACHE_SIZE = 64


def tensor_map(t, *, box_rows: int, box_cols: int = 64, swizzle: int = 128) -> TensorMap:
    """:func:`encode`, remembered: a map is a pure function of (address, shape, dtype, box, swizzle),
    so the same key always encodes the same 128 bytes. Saves the encode (a few µs of host time) when a
    caller passes the same tensors again, as benchmarks and CUDA-graph replays do."""
    key = (t.data_ptr(), tuple(t.shape), t.dtype, t.device.index, box_rows, box_cols, swizzle)
    m = _cache.get(key)
    if m is None:
        m = encode(t, box_rows=box_rows, box_cols=box_cols, swizzle=swizzle)
        _cache[key] = m
        if len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    else:
        _cache.move_to_end(key)
        m.tensor = t          # the caller's tensor now (the same memory), kept alive as long as the map
    return m


def clear_cache() -> None:
    """Forget every remembered map, and so the tensors they keep alive (a grading worker calls this before it
    ends: the tensors it was given belong to another process, which counts the ones still held)."""
    _cache.clear()


# ---------------------------------------------------------------- launching ----------------------
def kernel_params(args, sizes) -> tuple[tuple, tuple]:
    """``cuLaunchKernel``'s (values, ctypes types) pair for ``args``; ``sizes`` are the kernel's
    parameter sizes in bytes. A map goes in with type None (the driver copies ``getPtr()``'s 128
    bytes); tensors as their device address; ints and floats with the width of their parameter."""
    if len(args) != len(sizes):
        raise TypeError(f"the kernel takes {len(sizes)} arguments, {len(args)} given")
    values, types = [], []
    for i, (a, size) in enumerate(zip(args, sizes)):
        if isinstance(a, TensorMap):
            if size != 128:
                raise TypeError(f"argument {i} is a tensor map but the kernel's parameter {i} has {size} bytes "
                                f"(declare it `const __grid_constant__ CUtensorMap`)")
            values.append(a.cu_map); types.append(None)
        elif hasattr(a, "data_ptr") and hasattr(a, "device"):            # a torch tensor
            if a.device.type != "cuda":
                raise ValueError(f"argument {i} is a tensor on {a.device}; kernels need CUDA tensors")
            if not a.is_contiguous():
                raise ValueError(f"argument {i} is not contiguous; call .contiguous() first")
            values.append(a.data_ptr()); types.append(ctypes.c_void_p)
        elif isinstance(a, bool) or isinstance(a, int):
            values.append(int(a)); types.append({1: ctypes.c_bool, 4: ctypes.c_int32, 8: ctypes.c_int64}[size])
        elif isinstance(a, float):
            values.append(a); types.append(ctypes.c_float if size == 4 else ctypes.c_double)
        else:
            raise TypeError(f"argument {i}: unsupported type {type(a).__name__}")
    return tuple(values), tuple(types)


def launch(kernel, *, grid, block, args=(), shared_mem: int = 0) -> None:
    """Launch a :class:`flashtutor.loaders.nvrtc.CudaKernel` whose arguments may include
    :class:`TensorMap` values, on torch's current stream."""
    import torch
    from cuda.bindings import driver
    from .nvrtc import _allow_dynamic_shared

    values, types = kernel_params(args, kernel.param_sizes)
    grid = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    block = tuple(block) if isinstance(block, (tuple, list)) else (block,)
    grid, block = (grid + (1, 1))[:3], (block + (1, 1))[:3]
    if shared_mem > max(48 * 1024, kernel._smem_opt_in):
        _allow_dynamic_shared(kernel, shared_mem)
    h = kernel.kernel._handle                                   # a CUkernel (cuda.core loads libraries)
    f = driver.CUfunction(int(h))                               # cuLaunchKernel accepts a CUkernel as a CUfunction
    stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    (err,) = driver.cuLaunchKernel(f, *grid, *block, shared_mem, stream, (values, types), 0)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"launching {kernel.name} (grid {grid}, block {block}, {shared_mem} B shared) "
                           f"failed: {err.name}")
