"""A rich progress bar on stderr (a terminal, or a notebook with ipywidgets), or nothing where rich
cannot draw one: long gradings, compiles and benchmarks show how far they are."""
from __future__ import annotations


class Progress:
    def __init__(self, total: int, label: str):
        self.p = None
        from .switches import in_notebook_without_widgets
        if in_notebook_without_widgets():   # rich would only warn there, and draw nothing
            return
        try:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as _P, TextColumn, TimeElapsedColumn
            self.p = _P(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        transient=True)
            self.p.start()
            self.t = self.p.add_task(label, total=total)
        except Exception:  # noqa: BLE001
            self.p = None

    def advance(self, *_):
        if self.p:
            self.p.advance(self.t)

    def close(self):
        if self.p:
            self.p.stop()
