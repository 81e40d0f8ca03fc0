"""Class 1 (timing): patches the timer through names the static scan cannot follow — CUDA events report 1 ns,
the host clock stands still — and submits a slow honest kernel. The timing events are the grader's, recorded
in the grader's process, which never imports this file."""
import time

import torch

from honest_elementwise import attention  # noqa: F401

_put = [setattr][0]
_lib = {"events": getattr(torch, "cu" + "da").Event, "clock": time}
_put(_lib["events"], "elapsed" + "_time", lambda self, end: 0.001)
_put(_lib["clock"], "perf_" + "counter", lambda: 0.0)
