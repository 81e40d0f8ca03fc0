"""Class 1 (timing): patches the timer through names the static scan cannot read — CUDA events report 1 ns —
and submits a slow honest kernel. The timing events are the grader's, in the grader's process."""
import time

import torch

from honest_elementwise import attention  # noqa: F401

setattr(getattr(torch, "cu" + "da").Event, "elapsed" + "_time", lambda self, end: 0.001)
setattr(time, "perf_" + "counter", lambda: 0.0)
