"""Benchmarks: every step of a chapter beside SDPA, on one GPU, saved as JSON under ``results/``.

    flashtutor bench 02 [--out FILE]        # one chapter's measurements (the runner: flashtutor.bench.runner)

    from flashtutor import bench            # the tables the chapters' notebooks build
    rows = bench.steps_table({"ch1 reference": "flashtutor.kernels.k01_naive_three_pass"}, bench.problems("seed"))
    bench.markdown(rows)

One module per chapter (``ch02`` … ``ch07``; ``launch_cost`` for what a call costs), all run by
:mod:`flashtutor.bench.runner`, which stamps each results file with the machine it ran on. The steps
they time come from the chapter manifest (:mod:`flashtutor.chapters`), the kernels from
:mod:`flashtutor.kernels`; nothing in ``kernels`` imports this package.
"""
from __future__ import annotations

from .runner import env_line, load, save
from .tables import check_steps, markdown, problems, steps_table

__all__ = ["check_steps", "env_line", "load", "markdown", "problems", "save", "steps_table"]
