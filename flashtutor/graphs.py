"""Capture a call in a CUDA graph once, replay it afterwards: launch cost for small problems.

A CUDA graph records the kernels a piece of code launches (with their grids and arguments) instead
of running them; replaying the graph launches all of them with one host call. For an attention call
of a few microseconds of GPU work, the host cost of issuing it from Python (the framework, Triton's
launcher, the driver) can be larger than the work itself; a replay costs one driver call.

    from flashtutor import graphs
    cache = graphs.GraphCache(maxsize=16)

    def attention(q, k, v, *, causal=False):
        if graphs.capturing():                       # someone is capturing *us*: just launch
            out = torch.empty_like(q); launch_into(q, k, v, out, causal); return out
        key = graphs.call_key(q, k, v, causal=causal)
        hit = cache.get(key)
        if hit is None:                              # first call with these tensors: capture it
            out = torch.empty_like(q)
            hit = cache.put(key, graphs.capture(lambda: launch_into(q, k, v, out, causal)), out)
        return hit.replay()                          # later calls: one replay

(:func:`graphed` wraps exactly this around a ``launch_into(q, k, v, out, causal)`` function.)

What a graph fixes, and so the limits of this cache:

* **Addresses.** The kernels' pointer arguments are baked into the graph. The cache key therefore
  holds every input's data pointer (and shape, dtype, device): a replay reads whatever is *now* at
  those addresses. Refreshing the inputs in place (``q.copy_(new)``) is fine and is how a graph is
  meant to be fed; new tensors at other addresses are a cache miss, and a new capture (milliseconds:
  a warm-up call, the capture, the graph's instantiation; chapter 6's remedies page times one).
* **The output is static.** The graph writes into the buffer it was captured with, so every call
  with the same key returns *the same tensor*, overwritten. Keep a result across calls with
  ``out.clone()``. Do not pass a returned output back in as an input of the same key's call.
* **Scalars are baked in too**: the sequence length, the causal flag, the grid. Everything that
  changes the launch must be in the key (``call_key(..., causal=causal)`` and the shapes).
* **No host work in the captured code.** Python runs only at capture time; a replay repeats the GPU
  work only. Anything that must happen per call on the host (a check, a counter) does not happen.
  Host synchronisation, ``.item()`` and CPU→GPU copies of new data are not allowed while capturing.
* **Nested capture.** A graph cannot be replayed, nor another one captured, inside a capture in
  progress. When the caller is itself capturing (a grader timing calls replayed from its own
  graph, or ``torch.compile``'s cudagraphs), :func:`capturing` is true and the call must launch its
  kernels directly — they then become part of the caller's graph.
* **Memory.** Each entry keeps its output buffer (and the graph's own memory pool) alive. The cache
  is bounded by ``maxsize`` entries and ``max_bytes`` of outputs; the least recently used entry is
  dropped first.

Under the grader an element the captured kernels do not write keeps the last replay's value, which the
grader's check finds wrong (a fill before each replay would cost a kernel in every timed call, and the
grader's checked and timed calls must be the same calls).
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable



def capturing() -> bool:
    """Whether the current CUDA stream is being captured into a graph (False without CUDA)."""
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
    except Exception:   # no CUDA build, no driver
        return False


def tensor_key(t) -> tuple:
    """What a captured kernel bakes in about one tensor argument: address, shape, strides, dtype, device."""
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device.index)


def call_key(*tensors, **flags) -> tuple:
    """The cache key of a call: every tensor's :func:`tensor_key`, then the flags, sorted by name."""
    return tuple(tensor_key(t) for t in tensors) + tuple(sorted(flags.items()))


_side_streams: dict = {}


def _side_stream(device):
    """One side stream per device to capture on (capture is not allowed on the legacy default stream)."""
    import torch
    s = _side_streams.get(device)
    if s is None:
        s = _side_streams[device] = torch.cuda.Stream(device=device)
    return s


def capture(fn: Callable[[], object], *, warmup: int = 1):
    """Run ``fn`` ``warmup`` times (compilation, module loading and lazy initialisation must not happen
    inside a capture), then capture one call of it into a new ``torch.cuda.CUDAGraph`` and return it.

    The capture runs on a side stream that first waits for the current one; the graph is replayed on
    whatever stream is current at replay time. Unlike ``with torch.cuda.graph(g):``, this does not
    synchronise the device or run the garbage collector: a miss costs a capture, not a stall.
    Memory that ``fn`` allocates during the capture comes from the graph's private pool and lives as
    long as the graph.
    """
    import torch

    if capturing():
        raise RuntimeError("graphs.capture() called while the current stream is being captured; "
                           "launch directly instead (see graphs.capturing())")
    for _ in range(warmup):
        fn()
    g = torch.cuda.CUDAGraph()
    cur = torch.cuda.current_stream()
    side = _side_stream(cur.device)
    side.wait_stream(cur)
    with torch.cuda.stream(side):
        g.capture_begin(capture_error_mode="thread_local")
        try:
            fn()
        except BaseException:
            try:
                g.capture_end()       # leave the stream usable; the capture itself is invalid
            except Exception:
                pass
            raise
        g.capture_end()
    cur.wait_stream(side)
    return g


class Captured:
    """One cache entry: a captured graph and the static output it writes."""

    __slots__ = ("graph", "out", "nbytes", "replays", "keep")

    def __init__(self, graph, out, keep=()):
        self.graph, self.out, self.keep = graph, out, tuple(keep)
        self.nbytes = out.numel() * out.element_size() + sum(t.numel() * t.element_size() for t in self.keep)
        self.replays = 0

    def replay(self):
        """Launch the graph on the current stream; returns the (static) output tensor. An element the graph does
        not write keeps the last replay's value (under the grader: a wrong value, found as such)."""
        self.graph.replay()
        self.replays += 1
        return self.out


class GraphCache:
    """A bounded, least-recently-used map from call keys to :class:`Captured` graphs."""

    def __init__(self, maxsize: int = 16, max_bytes: int = 1 << 30):
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize, self.max_bytes = maxsize, max_bytes
        self._d: OrderedDict = OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._d.values())

    def get(self, key):
        """The entry for ``key`` (now the most recently used), or None."""
        e = self._d.get(key)
        if e is None:
            self.misses += 1
            return None
        self._d.move_to_end(key)
        self.hits += 1
        return e

    def put(self, key, graph, out=None, keep=()) -> Captured:
        """Store a captured graph with its static output (and any buffers it needs kept alive);
        drop the least recently used entries beyond the bounds. Returns the new entry. ``graph`` may
        also be a ready :class:`Captured`."""
        e = graph if isinstance(graph, Captured) else Captured(graph, out, keep)
        self._d[key] = e
        self._d.move_to_end(key)
        while len(self._d) > self.maxsize or (len(self._d) > 1 and self.nbytes > self.max_bytes):
            self._d.popitem(last=False)
            self.evictions += 1
        return e

    def clear(self) -> None:
        self._d.clear()

    def stats(self) -> dict:
        return {"entries": len(self), "bytes": self.nbytes, "hits": self.hits, "misses": self.misses,
                "evictions": self.evictions}


def graphed(launch_into: Callable, *, maxsize: int = 16, max_bytes: int = 1 << 30) -> Callable:
    """Turn ``launch_into(q, k, v, out, causal)`` (launches kernels writing ``out``) into
    ``attention(q, k, v, *, causal=False)`` that replays a cached graph per (tensors, causal).

    CPU tensors (Triton's interpreter) and calls made while the caller is capturing launch directly
    into a fresh :func:`flashtutor.output_like` buffer. The returned function has the cache as its
    ``cache`` attribute.
    """
    from .api import output_like

    cache = GraphCache(maxsize, max_bytes)

    def attention(q, k, v, *, causal: bool = False):
        if q.device.type != "cuda" or capturing():
            out = output_like(q)
            launch_into(q, k, v, out, causal)
            return out
        key = call_key(q, k, v, causal=causal)
        hit = cache.get(key)
        if hit is None:
            import torch
            out = torch.empty_like(q)
            hit = cache.put(key, capture(lambda: launch_into(q, k, v, out, causal)), out)
        return hit.replay()

    attention.cache = cache
    return attention
