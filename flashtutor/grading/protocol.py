"""What the judge and the worker agree on: the shared arena's layout and the messages they exchange.

The judge owns one block of memory shared with the worker (CUDA IPC on a GPU, shared memory on a
CPU), allocated from a pool of its own so that nothing else of the judge's lies in the mapped block.
It is cut into *slots*, one per call in flight: ``[q | k | v | out]``, each ``B·H·S·D`` fp16 values,
contiguous. The judge writes q, k, v (and fills out with NaN) before a call; the learner's output
lands in ``out`` (``flashtutor.output_like`` hands the slot to the kernel, so nothing is copied), and
the judge reads it back from there.

A chapter about the backward pass (``Chapter.mode == "backward"``) has larger slots:
``[q | k | v | do | o | lse | dq | dk | dv]``, where lse is ``B·H·S`` fp32 values (padded to 128 bytes) and the
others ``B·H·S·D`` fp16 each. For a call of the learner's ``backward`` the judge writes q, k, v, do and its own o and
lse (so that only the backward is timed, and on inputs the forward would have produced), and dq, dk, dv carry the
never-written pattern; for a call of ``forward`` the judge writes q, k, v and the pattern into o and lse.

Judge → worker messages are tuples (pickled: the worker trusts the judge); worker → judge messages
are JSON (:mod:`.evidence`), because the judge trusts nothing the worker sends.
"""
from __future__ import annotations

import math


TENSORS = ("q", "k", "v", "out")
MODES = ("forward", "backward")
BACKWARD_TENSORS = ("q", "k", "v", "do", "o", "lse", "dq", "dk", "dv")
BACKWARD_INPUTS = ("q", "k", "v", "do")          # random, written by the judge; o and lse: the judge's forward
LSE_ALIGN = 64                                   # fp16 units: the lse region is padded to 128 bytes


def numel(shape) -> int:
    return math.prod(int(x) for x in shape)


def lse_units(shape) -> int:
    """The fp16 units that a slot's lse (``B·H·S`` fp32 values) takes, padded to :data:`LSE_ALIGN`."""
    rows = numel(shape[:-1])
    return -(-2 * rows // LSE_ALIGN) * LSE_ALIGN


def parts(shape, mode: str = "forward") -> list[tuple[str, int, int]]:
    """A slot's tensors in order, as (name, first fp16 unit, fp16 units) from the slot's start."""
    n = numel(shape)
    if mode == "forward":
        return [(name, j * n, n) for j, name in enumerate(TENSORS)]
    if mode != "backward":
        raise ValueError(f"unknown slot layout {mode!r}; known: {', '.join(MODES)}")
    out, at = [], 0
    for name in BACKWARD_TENSORS:
        size = lse_units(shape) if name == "lse" else n
        out.append((name, at, size))
        at += size
    return out


def slot_elems(shape, mode: str = "forward") -> int:
    if mode == "forward":
        return 4 * numel(shape)
    name, at, size = parts(shape, mode)[-1]
    return at + size


def slots_that_fit(arena_elems: int, shape, mode: str = "forward") -> int:
    return arena_elems // slot_elems(shape, mode)


def views(arena, shape, slot: int, mode: str = "forward"):
    """The tensors of ``slot`` for problems of ``shape`` (views into the arena, contiguous): (q, k, v, out), or in
    the backward layout (q, k, v, do, o, lse, dq, dk, dv) with lse an fp32 ``[B, H, S]`` view."""
    size = slot_elems(shape, mode)
    base = slot * size
    if base + size > arena.numel():
        raise IndexError(f"slot {slot} of shape {tuple(shape)} does not fit the arena")
    if mode == "forward":
        n = numel(shape)
        return tuple(arena[base + j * n: base + (j + 1) * n].view(*shape) for j in range(4))
    import torch
    out = []
    for name, at, units in parts(shape, mode):
        if name == "lse":
            rows = numel(shape[:-1])
            out.append(arena[base + at: base + at + 2 * rows].view(torch.float32).view(*shape[:-1]))
        else:
            out.append(arena[base + at: base + at + units].view(*shape))
    return tuple(out)


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


UNWRITTEN_BITS32 = 0x7FC07E5A     # the same idea for fp32 outputs (lse): a quiet NaN whose payload nothing computes


def fill_unwritten(t) -> None:
    """Fill an fp16 (or fp32) tensor with the never-written pattern (in place, one fill kernel)."""
    import torch
    if t.dtype == torch.float32:
        t.view(torch.int32).fill_(UNWRITTEN_BITS32)
    else:
        t.view(torch.int16).fill_(UNWRITTEN_BITS)


def unwritten_mask(t):
    """A bool tensor: which elements of an fp16 (or fp32) tensor still carry the never-written pattern."""
    import torch
    if t.dtype == torch.float32:
        return t.contiguous().view(torch.int32) == UNWRITTEN_BITS32
    return t.contiguous().view(torch.int16) == UNWRITTEN_BITS


# ---------------------------------------------------------------- where an address lies (CPU arena) ----
# On a CPU the arena is shared memory whose last bytes are a guard: the judge allocates GUARD_BYTES more than the
# arena, places the arena so that it ends at a page boundary (:func:`cpu_layout`), and the worker makes the bytes
# after it inaccessible (PROT_NONE), so that an emulated kernel's access just past the last ``out`` faults instead
# of reading whatever the process maps next. Wide enough for a row stride's jump past the end.
GUARD_BYTES = 1 << 20


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
