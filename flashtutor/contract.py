"""A chapter's exercise contract, printed by every chapter before its exercise: what passing takes, from the grader's
own rules (``flashtutor/chapters.py``) and the results files — one function, so the seven chapters say it the same
way (it sits above the grader's rules and the machine description it reads, which docs.py, below them, cannot)."""
from __future__ import annotations

import json
from pathlib import Path

from .chapters import ROOT, get_chapter
from .check import RATIO
from .docs import wrap
from .env import capability
from .grading.rules import describe_speed_rule
from .problems import SHAPE_SETS


def _grading_times(key: str, root: Path) -> list[str]:
    """How long grading the chapter's solution took, from results files: on an H100 (the newest grade report of the
    solution, a GPU tier's run) and on the course's CPU machine (``results/cpu-grading-*.json``)."""
    lines = []
    reports = [(json.loads(p.read_text()), p) for p in root.glob(f"results/**/grade{key}-solution-h100-*.json")]
    reports = sorted((r.get("env", {}).get("date", ""), str(p), r, p) for r, p in reports
                     if r.get("seconds") and r.get("verdict") == "pass")   # a disturbed one re-timed its shapes
    if reports:
        *_, rep, path = reports[-1]                      # the newest passing grading, by the date the report gives
        lines.append(f"grading takes: {rep['seconds']:.0f} s on an H100 for the solution ({path.relative_to(root)}: "
                     "in a GPU tier's run, other chapters' gradings sharing the GPU; alone and warm it is shorter)")
    for path in sorted(root.glob("results/cpu-grading-*.json"))[-1:]:
        doc = json.loads(path.read_text())
        got = [(run["caches"], g) for run in doc.get("runs", []) for g in run["gradings"] if g["chapter"] == key]
        if got:
            m = doc["machine"]
            secs = ", ".join(f"{g['wall_s']:.0f} s with {caches} caches" for caches, g in got)
            lines.append(f"  and {secs}, with --sets cpu ({got[0][1]['execution']}), on a {m['cores']}-core "
                         f"{m['cpu']} without a GPU ({path.relative_to(root)})")
    return lines


def contract(key: str, root: Path | None = None) -> str:
    """What passing chapter ``key`` takes, printed from the grader's own rules (``flashtutor/chapters.py``): the files
    the learner writes, when an output counts as correct, the SASS rule, the speed rule and its calibration, what a
    machine without a GPU checks, how long grading took, and the commands to try one shape and to grade it all."""
    root = root or ROOT
    ch = get_chapter(key)
    shapes = len({p.name for s in ch.check_sets for p in SHAPE_SETS[s]})
    no_gpu = dict(gpu=False, cc=None, triton=True, nvrtc=True, nvcc=False, cutlass=False, emulation=True)
    lines = [
        "you write: " + ", ".join(f"chapters/{ch.slug}/{f}" for f in ch.files),
        f"correct: on every output row, max |yours - reference| <= {RATIO:g} x SDPA's fp16 error on that row "
        f"+ 1 fp16 ulp of the row's largest |reference|; NaN or Inf anywhere fails; q, k, v unchanged",
        f"  on {shapes} shapes (the {', '.join(ch.check_sets)} sets)" + (", causal and not" if ch.causal else "")
        + f", {ch.seeds} fresh random inputs each" + (", plus large logits" if ch.large_logits else ""),
    ]
    if ch.sass:
        lines.append("compiled code: " + "; ".join(([" and ".join(ch.sass.require) + " in the SASS"]
                                                    if ch.sass.require else [])
                                                   + (["no spills"] if ch.sass.no_spills else [])))
    lines.append("fast enough: " + (describe_speed_rule(ch.speed) or "no speed rule in this chapter: your time "
                 "against SDPA's is reported") + f"; timed on the {', '.join(ch.time_sets)} sets, on a GPU")
    lines += ["without a GPU: " + capability(ch.key, no_gpu).note]
    lines += _grading_times(ch.key, root)
    lines += ["", f"try one shape:   flashtutor grade {ch.key} --sets seed --no-timing",
              f"without a GPU:   flashtutor grade {ch.key} --sets cpu",
              f"the full grade:  flashtutor grade {ch.key}    (or: pytest chapters/{ch.slug})"]
    return wrap("\n".join(lines))
