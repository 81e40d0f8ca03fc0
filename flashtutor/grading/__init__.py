"""The grader, as a learner's code and the judgment of it in separate processes.

    report = grade("01")                         # chapters/01_naive_cuda/attention.py
    report = grade("01", "my_attention.py")      # any file with the same interface
    report = grade("01", solution=True)          # the course's solution

Who does what (imports point down; the judge's side never imports learner code):

* :mod:`.judge`     — plans the cases, writes the inputs, computes the references, times, decides;
* :mod:`.worker`    — a spawned process that imports the submission and runs its ``attention`` on
                      the judge's inputs, under a tracer; it judges nothing;
* :mod:`.protocol`, :mod:`.evidence` — the shared arena's layout, the typed records and the JSON the
                      worker answers in;
* :mod:`.timing`    — GPU time per call from gated batches (events only the judge records);
* :mod:`.trace`     — whose kernels ran; :mod:`.scan` — the static scan of the sources;
* :mod:`.rules`     — evidence into a verdict; :mod:`.report` — renders it (terminal, notebook, JSON);
* :mod:`.submission` — which files a submission is, and the one loader of learner code (used by the
                      worker and by :mod:`.sanitize`).
"""
from .evidence import Cause, Verdict
from .judge import grade
from .report import Report

__all__ = ["Cause", "Report", "Verdict", "grade"]
