"""A stream the worker never gated: the kernel goes to a side stream created at import, entered with
torch.cuda.stream (so the worker joins it at the end), but nothing makes it wait for the grader's gate: its
kernels run as soon as they are queued, during the gate's sleep, before the timed window opens. The traced
span of the batch's kernels exceeds the window: "outside the window" (and a time per call near zero)."""
import torch

import flashtutor as ft
from _into import launch_into

_side = torch.cuda.Stream() if torch.cuda.is_available() else None


def attention(q, k, v, *, causal=False):
    out = ft.output_like(q)
    if _side is None:
        return launch_into(q, k, v, out, causal)
    with torch.cuda.stream(_side):
        launch_into(q, k, v, out, causal)
    return out
