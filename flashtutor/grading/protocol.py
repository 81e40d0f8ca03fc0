"""What the judge and the worker agree on: the shared arena's layout and the messages they exchange.

The judge owns one block of memory shared with the worker (CUDA IPC on a GPU, shared memory on a
CPU), allocated from a pool of its own so that nothing else of the judge's lies in the mapped block.
It is cut into *slots*, one per call in flight: ``[q | k | v | out]``, each ``B·H·S·D`` fp16 values,
contiguous. The judge writes q, k, v (and fills out with NaN) before a call; the learner's output
lands in ``out`` (``flashtutor.output_like`` hands the slot to the kernel, so nothing is copied), and
the judge reads it back from there.

Judge → worker messages are tuples (pickled: the worker trusts the judge); worker → judge messages
are JSON (:mod:`.evidence`), because the judge trusts nothing the worker sends.
"""
from __future__ import annotations

import math


def numel(shape) -> int:
    return math.prod(int(x) for x in shape)


def slot_elems(shape) -> int:
    return 4 * numel(shape)


def slots_that_fit(arena_elems: int, shape) -> int:
    return arena_elems // slot_elems(shape)


def views(arena, shape, slot: int):
    """(q, k, v, out) of ``slot`` for problems of ``shape`` (views into the arena, contiguous)."""
    n = numel(shape)
    base = slot * 4 * n
    if base + 4 * n > arena.numel():
        raise IndexError(f"slot {slot} of shape {tuple(shape)} does not fit the arena")
    return tuple(arena[base + j * n: base + (j + 1) * n].view(*shape) for j in range(4))


def inputs_view(arena, shape, slot: int):
    """q, k and v of a slot as one flat view (they are contiguous): one kernel writes all three."""
    n = numel(shape)
    base = slot * 4 * n
    return arena[base: base + 3 * n]


# ---------------------------------------------------------------- the "never written" pattern -------
# Every output buffer the judge hands out is filled with this fp16 bit pattern: a quiet NaN with a payload
# (0x7E5A) that no arithmetic produces (a GPU's NaN from 0/0 or inf-inf is 0x7FFF, x86's converts to 0xFE00),
# so an element that still carries it was never written, and a NaN with any other bits was computed.
UNWRITTEN_BITS = 0x7E5A


def fill_unwritten(t) -> None:
    """Fill an fp16 tensor with the never-written pattern (in place, one fill kernel)."""
    import torch
    t.view(torch.int16).fill_(UNWRITTEN_BITS)


def unwritten_mask(t):
    """A bool tensor: which elements of an fp16 tensor still carry the never-written pattern."""
    import torch
    return t.contiguous().view(torch.int16) == UNWRITTEN_BITS
