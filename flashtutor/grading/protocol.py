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


# ---------------------------------------------------------------- where an address lies (CPU arena) ----
# On a CPU the arena is shared memory whose last bytes are a guard: the judge allocates GUARD_BYTES more than the
# arena, places the arena so that it ends at a page boundary (:func:`cpu_layout`), and the worker makes the bytes
# after it inaccessible (PROT_NONE), so that an emulated kernel's access just past the last ``out`` faults instead
# of reading whatever the process maps next. Wide enough for a row stride's jump past the end.
GUARD_BYTES = 1 << 20
TENSORS = ("q", "k", "v", "out")


def cpu_layout(arena_elems: int, page: int) -> tuple[int, int]:
    """(size of the shared memory in bytes, byte offset of the arena in it) for an fp16 arena of
    ``arena_elems`` values that ends at a page boundary, followed by :data:`GUARD_BYTES`."""
    data = 2 * int(arena_elems)
    span = -(-data // page) * page
    return span + GUARD_BYTES, span - data


def locate(offset: int, arena_elems: int, shape, slot: int) -> dict | None:
    """Where the byte ``offset`` from the arena's start lies, for a call on ``slot`` with problems of ``shape``
    (fp16): ``{"tensor": "q"|"k"|"v"|"out", "slot": s, "index": (b, h, s, d), "element": flat}`` inside a slot;
    ``{"past_end": elements past the end of the slot's out}`` in the guard after the arena; None elsewhere
    (before the arena, past the guard, or in the arena's unused tail)."""
    offset, arena_elems, slot = int(offset), int(arena_elems), int(slot)
    n = numel(shape)
    if n <= 0 or offset < 0 or offset >= 2 * arena_elems + GUARD_BYTES:
        return None
    elem = offset // 2
    if elem >= arena_elems:
        return {"past_end": elem - (slot + 1) * 4 * n, "slot": slot}
    s, rel = divmod(elem, 4 * n)
    if s >= slots_that_fit(arena_elems, shape):
        return None
    j, flat = divmod(rel, n)
    index = []
    for size in reversed([int(x) for x in shape]):
        index.append(flat % size)
        flat //= size
    return {"tensor": TENSORS[j], "slot": s, "index": tuple(reversed(index)), "element": rel - j * n}
