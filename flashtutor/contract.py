"""A chapter's exercise contract, printed by every chapter before its exercise: what passing takes, from the grader's
own rules (``flashtutor/chapters.py``) and the results files — one function, so the seven chapters say it the same
way (it sits above the grader's rules and the machine description it reads, which docs.py, below them, cannot);
and the try-it cell after it: ``try_it`` grades the learner's file at one shape in a subprocess, as a terminal would,
and ``compile_error`` shows what a broken copy of the solution gets."""
from __future__ import annotations

import json
import re
from pathlib import Path

from .chapters import ROOT, get_chapter
from .check import RATIO
from .docs import WIDTH, wrap
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
        f"+ 1 fp16 ulp of the row's largest |reference|; NaN or Inf anywhere fails; q, k, v unchanged"
        if ch.mode == "forward" else
        f"correct: each case runs backward(q, k, v, o, lse, do) on the grader's own o and lse, then forward(q, k, v); "
        f"on every row of dq, dk, dv and o, max |yours - float64| <= {RATIO:g} x SDPA's own fp16 backward error on that "
        f"row + 1 fp16 ulp of the row's largest |reference| (+ for dq and dk what o's fp16 rounding moves "
        f"rowsum(dO o)); lse (natural log, fp32) within 2^-12 + 2^-16 |lse|; NaN, Inf or a never-written element "
        f"fails; the inputs unchanged",
        f"  on {shapes} shapes (the {', '.join(ch.check_sets)} sets)" + (", causal and not" if ch.causal else "")
        + f", {ch.seeds} draw{'s' if ch.seeds != 1 else ''} of fresh random inputs each"
        + (", plus large logits" if ch.large_logits else ""),
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


# ---------------------------------------------------------------- trying an exercise from its page ------
# What `flashtutor grade`'s exit code says, in the words of the command's epilog (flashtutor/cli.py).
EXIT_MEANING = {0: "pass", 1: "fail", 2: "usage error", 3: "not graded here", 4: "the grader failed"}

# The line each chapter's compile-error demonstration breaks in a copy of its solution: (file, the text, what it
# becomes, what that is). Chapter 1 loses a semicolon in its CUDA kernel; chapter 4 misspells a name inside its
# @triton.jit kernel.
BREAKS = {
    "01": ("attention.cu", "s[j] = dot * scale;", "s[j] = dot * scale", "its semicolon deleted"),
    "04": ("attention.py", "alpha = tl.exp2(m_i - m_new)", "alpha = tl.exp2(m_i - m_nwe)", "m_new misspelt m_nwe"),
}
BROKEN = "broken"        # the folder a broken copy is shown in: inside a temporary folder, never the learner's


def grade_command(key: str, path: str | None = None, *, gpu: bool) -> list[str]:
    """The arguments of ``flashtutor grade`` that try chapter ``key``'s file quickly, as the contract names them:
    one shape (the seed set), correctness only, on a GPU; the chapter's tiny CPU set without one."""
    sets = ["--sets", "seed", "--no-timing"] if gpu else ["--sets", "cpu"]
    return ["grade", key, *([path] if path else []), *sets, "--quiet"]


def _boxed_replace(text: str, old: str, new: str) -> str:
    """``text`` with ``old`` replaced by ``new``; a line of a drawn box that got shorter is padded back before its
    right edge, so the box stays closed (its words are not re-wrapped)."""
    out = []
    for line in text.splitlines():
        fixed = line.replace(old, new)
        if fixed != line and line.rstrip().endswith("│"):
            fixed = fixed.rstrip()[:-1] + " " * (len(line.rstrip()) - len(fixed.rstrip())) + "│"
        out.append(fixed)
    return "\n".join(out)


def run_grade(args: list[str], *, cwd: Path, folders: dict[str, str] | None = None, full: bool = False,
              timeout: float = 600) -> tuple[int, str]:
    """Run ``python -m flashtutor *args`` in a subprocess (this Python, in folder ``cwd``, lines as wide as the
    book's column) and return its exit code and what it printed, with the paths inside each absolute folder of
    ``folders`` shown under its short name ('': relative to it). Without ``full`` the report stops before its
    closing "checked: / not checked:" lines, which say what the grader did and did not check."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, COLUMNS=str(WIDTH), NO_COLOR="1")
    env.pop("FORCE_COLOR", None)
    r = subprocess.run([sys.executable, "-m", "flashtutor", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout)
    text = r.stdout.rstrip()
    for old, new in (folders or {}).items():
        text = _boxed_replace(text, old.rstrip("/") + "/", new + "/" if new else "")
    lines = text.splitlines()
    cut = next((i for i, line in enumerate(lines) if line.startswith("checked:")), None)
    if not full and cut is not None:
        text = "\n".join(lines[:cut] + ["(what was checked and what was not: the report's last lines, with full=True "
                                        "or in a terminal)"])
    return r.returncode, text


def exit_line(code: int) -> str:
    """'exit code 1: fail': ``flashtutor grade``'s exit code and what it means."""
    return f"exit code {code}: {EXIT_MEANING.get(code, 'unknown')}"


def try_it(key: str, path: str | None = None, *, full: bool = False) -> None:
    """Grade chapter ``key``'s exercise file (or ``path``) quickly, as ``flashtutor grade`` does in a terminal and
    in a subprocess: one shape on a GPU, the chapter's tiny CPU set without one (emulation or Triton's
    interpreter, as :func:`flashtutor.env.capability` says). Prints the command, how the chapter runs on this
    machine, the report and what its exit code means (:func:`run_grade` returns them instead). A chapter that
    cannot run here at all is not run: one line says why."""
    from .chapters import ROOT, get_chapter
    from .env import capability, machine
    ch = get_chapter(key)
    info = machine()
    cap = capability(ch, info)
    args = grade_command(ch.key, path, gpu=info["gpu"])
    print(f"$ flashtutor {' '.join(args)}")
    if cap.execution == "none":
        print(wrap(f"not run: chapter {ch.key} cannot be checked on this machine: {cap.note}"))
        return
    if not info["gpu"]:
        print(wrap(f"(on this machine, without a GPU: {cap.note})"))
    code, text = run_grade(args, cwd=ROOT, folders={str(ROOT): ""}, full=full)
    print(text)
    print(exit_line(code))


def broken_copy(key: str, folder: Path, file: str | None = None, line: str | None = None,
                broken: str | None = None) -> tuple[Path, int]:
    """Copy chapter ``key``'s solution files into ``folder``/broken and break one line of ``file`` there: the first
    line that contains ``line`` gets ``broken`` in its place (:data:`BREAKS` has each demonstration's). Returns the
    copy's launcher (the chapter's first file) and the number of the broken line. The course's files are only read."""
    import shutil
    from .chapters import get_chapter
    ch = get_chapter(key)
    default = BREAKS.get(ch.key, (None, None, None, None))
    file, line = file or default[0], line or default[1]
    broken = default[2] if broken is None else broken
    if file is None or line is None or broken is None:
        raise ValueError(f"chapter {ch.key} has no line to break by default: give file, line and broken")
    dest = Path(folder) / BROKEN
    dest.mkdir(parents=True, exist_ok=True)
    for name in ch.files:
        shutil.copyfile(ch.solution_dir / name, dest / name)
    lines = (dest / file).read_text(encoding="utf-8").split("\n")
    n = next((i for i, text in enumerate(lines) if line in text), None)
    if n is None:
        raise ValueError(f"no line of solutions/{ch.slug}/{file} contains {line!r}")
    lines[n] = lines[n].replace(line, broken, 1)
    (dest / file).write_text("\n".join(lines), encoding="utf-8")
    return dest / ch.files[0], n + 1


def _without_comment(line: str, limit: int) -> str:
    """A source line as a listing shows it: its trailing comment dropped when the line is longer than ``limit``."""
    if len(line) <= limit:
        return line
    return re.split(r"\s{2,}(?://|#)", line, maxsplit=1)[0].rstrip()


def compile_error(key: str, *, full: bool = False) -> None:
    """What a compile error looks like: chapter ``key``'s solution copied into a temporary folder, one line broken
    there (:data:`BREAKS`), and the copy graded as :func:`try_it` grades (one shape on a GPU, the CPU set without
    one). Prints the broken line and the line after it, the report and what its exit code means. Nothing of the
    course is modified."""
    import tempfile
    import torch
    from .chapters import get_chapter
    ch = get_chapter(key)
    file, _, _, what = BREAKS[ch.key]
    with tempfile.TemporaryDirectory(prefix="ft-") as tmp:
        py, n = broken_copy(ch.key, Path(tmp))
        lines = (py.parent / file).read_text(encoding="utf-8").split("\n")
        print(wrap(f"{BROKEN}/ holds a copy of solutions/{ch.slug}/; line {n} of {BROKEN}/{file} is broken ({what}):"))
        for i in range(n - 1, min(n + 1, len(lines))):
            print(f"{'>' if i == n - 1 else ' '}{i + 1:>5} | {_without_comment(lines[i], WIDTH - 9)}")
        args = grade_command(ch.key, f"{BROKEN}/{py.name}", gpu=torch.cuda.is_available())
        print(f"$ flashtutor {' '.join(args)}")
        real = str(Path(tmp).resolve())
        code, text = run_grade(args, cwd=Path(tmp), folders={real: "", tmp: ""}, full=full)
    print(text)
    print(exit_line(code))
