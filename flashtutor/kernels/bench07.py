from flashtutor.bench.ch07 import *  # moved; notebooks are updated at the next re-execution
from flashtutor.bench.ch07 import _gpu_short  # noqa: F401 — flashtutor/results_page.py reads it
