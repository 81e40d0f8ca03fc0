"""What every exercise uses: input validation with clear errors, and output allocation.

``output_like(q)`` is ``torch.empty_like(q)`` — except under the grader. There it returns the buffer
the grader reads your answer from (so nothing has to be copied, and the time of a copy is not added to
yours). The grader fills that buffer with a NaN pattern before every call, checked or timed, so any element
a kernel forgets to write fails; a second buffer asked for in the same call is filled with the same pattern.
"""
from __future__ import annotations

import os

import torch

SUPPORTED_HEAD_DIMS = (64, 128)
_POISON_ENV = "FLASHTUTOR_POISON_OUTPUTS"


def poisoning() -> bool:
    """Whether this process runs under the grader (its worker): the same for checked and timed calls."""
    return os.environ.get(_POISON_ENV) == "1"


def set_poisoning(on: bool) -> None:
    os.environ[_POISON_ENV] = "1" if on else "0"


# The grading worker's output buffer(s) of the call in progress, by the address of its q (empty outside grading,
# and between calls: the worker sets it just before each call). Each is handed out once: for a backward call the
# worker sets a list, [dq, dk, dv], handed out in that order; an output_like(q) beyond them gets a buffer of its own.
_grader_outputs: dict[int, "torch.Tensor | list[torch.Tensor]"] = {}


def output_like(q: torch.Tensor) -> torch.Tensor:
    """An output buffer shaped like q: under the grader, the first one of a call is the grader's own
    buffer (NaN-filled while it checks correctness); otherwise ``torch.empty_like(q)``. In a backward pass
    (chapter 8) the first three of a call are the grader's dq, dk and dv buffers, in that order: ask for them in
    that order (a tensor returned in another position is copied, which the timing then counts)."""
    out = _grader_outputs.pop(q.data_ptr(), None) if _grader_outputs else None
    if isinstance(out, list):
        first = out.pop(0) if out else None
        if out:
            _grader_outputs[q.data_ptr()] = out
        out = first
    if out is not None and out.shape == q.shape and out.dtype == q.dtype and out.device == q.device:
        return out                      # the grader's buffer, already filled with the never-written pattern
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if poisoning() and out.dtype == torch.float16:
        from .grading.protocol import fill_unwritten
        fill_unwritten(out)
    return out


def check_inputs(q, k, v, *, head_dims=SUPPORTED_HEAD_DIMS, dtype=torch.float16, device_type: str | None = "cuda"):
    """Raise a ValueError naming the problem if q, k, v are not what the kernels expect. Where CUDA kernels
    are emulated on the CPU (:func:`flashtutor.emulate.activate`), ``device_type="cuda"`` means CPU tensors."""
    if device_type == "cuda":
        from .switches import emulation_active
        if emulation_active():
            device_type = "cpu"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D [B, H, S, D], got shape {tuple(t.shape)}")
        if t.dtype != dtype:
            raise ValueError(f"{name} must be {dtype}, got {t.dtype}")
        if device_type and t.device.type != device_type:
            raise ValueError(f"{name} is on {t.device}; these kernels run on {device_type} tensors")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous (call .contiguous()); its strides are {t.stride()}")
    if not (q.shape == k.shape == v.shape):
        raise ValueError(f"q, k, v must have the same shape [B, H, S, D]; got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")
    if head_dims and q.shape[-1] not in head_dims:
        raise ValueError(f"head dim D={q.shape[-1]} is not supported here; supported: {head_dims}")
