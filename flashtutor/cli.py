"""The ``flashtutor`` command: grade, doctor, exercises, sass, bench.

Every answer the command gives on a bad input is one line on stderr, and its exit code says what kind
of answer it is (:data:`~flashtutor.grading.report.EXIT_CODES`): 0 pass, 1 fail, 2 usage error (an
unknown chapter, a missing file, not a .py file, a bad option), 3 not graded here (no GPU and no
emulation, a chapter that needs sm_90, timing disturbed: re-run), 4 the grader itself failed. No
traceback unless ``--debug``.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

INTERFACE = "attention(q, k, v, *, causal=False)"


class CliError(Exception):
    """An answer of one line, with the exit code it ends in."""

    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad option answered in one line (not the usage block and then the error)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: {message} (see `{self.prog} --help`)\n")


# ---------------------------------------------------------------- grade: the checks before grading
def _shown(path: Path) -> str:
    """A path as the learner would type it: relative to the current folder when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _chapter(key: str):
    from .chapters import CHAPTERS, get_chapter
    from .grading.report import EXIT_USAGE
    try:
        return get_chapter(key)
    except KeyError:
        raise CliError(f"unknown chapter {key!r} (chapters: {', '.join(CHAPTERS)})", EXIT_USAGE)


def _submission(a, ch) -> Path:
    from .grading.report import EXIT_USAGE
    if a.path and a.solution:
        raise CliError("give a file or --solution, not both", EXIT_USAGE)
    path = Path(a.path) if a.path else (ch.solution_path() if a.solution else ch.exercise_path())
    if not path.exists():
        raise CliError(f"no such file: {a.path or path}", EXIT_USAGE)
    if path.is_dir():
        raise CliError(f"{a.path or path} is a folder: give the .py file that defines {INTERFACE}", EXIT_USAGE)
    if path.suffix != ".py":
        raise CliError(f"{a.path or path} is not a Python file: give the .py file that defines {INTERFACE}"
                       + (" (the .cu beside it is found on its own)" if path.suffix in (".cu", ".cuh") else ""),
                       EXIT_USAGE)
    return path


def _binds_attention(tree: ast.Module) -> bool:
    """Whether the module may define ``attention`` — read, never run. Anything that could bind the name in
    a way not visible here (``from x import *``, a module ``__getattr__``, the name in a string) counts as
    yes: the worker, which imports the module, has the last word."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and \
                node.name in ("attention", "__getattr__"):
            return True
        if isinstance(node, ast.Name) and node.id == "attention" and isinstance(node.ctx, ast.Store):
            return True
        if isinstance(node, ast.alias) and (node.asname or node.name).split(".")[-1] in ("attention", "*"):
            return True
        if isinstance(node, ast.Constant) and node.value == "attention":
            return True
    return False


def _read_submission(path: Path, shown: str) -> tuple[str, str] | None:
    """(cause, one line) when the file cannot be a submission: it does not parse, or defines no ``attention``."""
    from .grading.report import EXIT_USAGE
    try:
        src = path.read_bytes().decode()
    except UnicodeDecodeError:
        raise CliError(f"{shown} is not a Python file (not UTF-8 text)", EXIT_USAGE)
    except OSError as e:
        raise CliError(f"cannot read {shown}: {e.strerror or e}", EXIT_USAGE)
    try:
        tree = ast.parse(src, filename=shown)
    except SyntaxError as e:
        return "import error", f"{shown}:{e.lineno or 0}: syntax error: {e.msg}"
    except ValueError as e:          # a NUL byte
        return "import error", f"{shown}: not Python source: {e}"
    if not _binds_attention(tree):
        return "error", f"{shown} defines no function {INTERFACE}"
    return None


def _failed_before_grading(a, ch, path: Path, cause: str, message: str) -> int:
    """A submission that fails before anything runs: one line; with --json, the report of it too."""
    from .grading.report import EXIT_CODES
    from .grading.evidence import Cause, Verdict
    if a.json:
        from dataclasses import asdict

        from .grading.report import Report
        from .grading.rules import decide
        r = Report(chapter=ch.key, title=ch.title, path=str(path.resolve()), device="", excluded=ch.excluded,
                   speed_rule=asdict(ch.speed), sass_rule=ch.sass)
        r.set_error(Cause(cause), message)
        r.describe(ch)
        r.method = []                     # the file was only parsed: no check ran
        decide(r, ch)
        r.save_json(a.json)
    raise CliError(f"FAIL: {message}", EXIT_CODES[Verdict.FAIL])


def _check_options(a) -> None:
    from .grading.report import EXIT_CODES, EXIT_USAGE
    from .grading.evidence import Verdict
    names = [s for opt in (a.sets, a.time_sets) if opt for s in opt.split(",")]
    if names:
        from .problems import SHAPE_SETS
        bad = [s for s in names if s not in SHAPE_SETS]
        if bad:
            raise CliError(f"unknown shape set {', '.join(map(repr, bad))} (sets: {', '.join(SHAPE_SETS)})", EXIT_USAGE)
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            raise CliError("--device cuda: no CUDA GPU visible to torch here (`flashtutor doctor` says what can "
                           "be graded on this machine)", EXIT_CODES[Verdict.NOT_RUN])


def _grade(a) -> int:
    ch = _chapter(a.chapter)
    path = _submission(a, ch)
    shown = _shown(path)
    bad = _read_submission(path, shown)
    if bad:
        return _failed_before_grading(a, ch, path, *bad)
    _check_options(a)
    from .grading import grade
    report = grade(ch, path, solution=a.solution, timing=not a.no_timing, graph=a.graph or None,
                   reference=a.reference, sets=tuple(a.sets.split(",")) if a.sets else None,
                   time_sets=tuple(a.time_sets.split(",")) if a.time_sets else None,
                   device=a.device, progress=not a.quiet, sanitize=a.sanitize)
    report.print()
    if a.json:
        report.save_json(a.json)
    return report.exit_code


# ---------------------------------------------------------------- doctor
def _doctor(_a) -> int:
    from rich.console import Console
    from rich.table import Table

    from .env import chapters_enabled, doctor
    rows = doctor()
    t = Table(title="flashtutor doctor")
    t.add_column("check", no_wrap=True)
    t.add_column("ok", no_wrap=True)
    t.add_column("detail", overflow="fold")           # a long path folds onto the next line, never cut with "…"
    for what, ok, detail in rows:
        t.add_row(what, "[green]yes[/]" if ok else "[red]no[/]", detail)
    c = Table(title="what each chapter can do here")
    c.add_column("chapter", no_wrap=True)
    c.add_column("correctness", no_wrap=True)
    c.add_column("speed", no_wrap=True)
    c.add_column("how, and what it would take", ratio=1)
    short = {"gpu": "[green]on the GPU[/]", "interpreted": "[green]Triton interpreter[/]",
             "cpu": "[green]on the CPU[/]", "emulated": "[green]CPU emulation[/]",
             "compiled only": "[red]no[/] (compile only)", "none": "[red]no[/]"}
    for name, cap in chapters_enabled(rows):
        c.add_row(name, short.get(cap.execution, cap.execution), "[green]yes[/]" if cap.speed else "[red]no[/]",
                  cap.note)
    con = Console()
    if not con.is_terminal:      # into a file or a pipe (rich's width is then 80): wide enough for every path
        widest = max(len(what) for what, _, _ in rows) + max(len(w) for _, _, d in rows for w in d.split()) + 16
        con = Console(width=max(con.width, min(widest, 400)))
    con.print(t)
    con.print(c)
    return 0


# ---------------------------------------------------------------- exercises, sass
def _exercises(a) -> int:
    from . import exercises
    if a.write:
        for line in exercises.write():
            print(line)
        return 0
    bad = exercises.stale()
    for b in bad:
        print(f"out of date: {b} (run `flashtutor exercises --write`)")
    if not bad:
        print("all exercises match their solutions")
    return 1 if bad else 0


def _sass(a) -> int:
    from rich.console import Console
    from rich.table import Table

    from .grading.report import EXIT_USAGE
    from .loaders import CompileError, load_cuda
    from .sass import classify, disassemble, histogram, predication
    if not Path(a.path).is_file():
        raise CliError(f"no such file: {a.path}", EXIT_USAGE)
    try:
        mod = load_cuda(a.path, arch=a.arch)
    except CompileError as e:
        print(e, file=sys.stderr)
        return 1
    con = Console()
    res = mod.resources()
    for name, instrs in disassemble(mod.cubin).items():
        r = res.get(name, {})
        con.print(f"[bold]{name}[/] ({mod.arch}): {r.get('registers')} registers, {r.get('shared_bytes')} B static "
                  f"shared, {r.get('stack_bytes')} B stack, {r.get('spill_instructions')} spill instructions (LDL/STL)")
        t = Table(title=f"{name}: {len(instrs)} instructions")
        t.add_column("class")
        t.add_column("count", justify="right")
        for cls, n in classify(instrs).items():
            t.add_row(cls, str(n))
        pr = predication(instrs)
        t.add_row("predicated (@P…)", str(pr["predicated"]))
        t.add_row("predicated branches", str(pr["predicated branches"]))
        con.print(t)
        if a.top:
            top = Table(title="most frequent opcodes")
            top.add_column("opcode")
            top.add_column("count", justify="right")
            for op, n in histogram(instrs).most_common(a.top):
                top.add_row(op, str(n))
            con.print(top)
        if a.dump:
            con.print("\n".join(instrs), markup=False, highlight=False)
    return 0


# ---------------------------------------------------------------- bench
def _bench(a) -> int:
    """``flashtutor bench NN``: the chapter's benchmark (flashtutor.bench.runner); without a GPU, one line
    and exit code 3 (nothing is measured; ``--dry`` runs chapters 4 and 6 through Triton's interpreter)."""
    from .bench.runner import NotRun, run
    from .grading.evidence import Verdict
    from .grading.report import EXIT_CODES, EXIT_USAGE
    try:
        return run(a.chapter, out=Path(a.out) if a.out else None, dry=a.dry,
                   skip=[s for s in (a.skip or "").split(",") if s], budget_s=a.budget_s)
    except NotRun as e:
        raise CliError(str(e), EXIT_USAGE if e.usage else EXIT_CODES[Verdict.NOT_RUN])


# ---------------------------------------------------------------- the command line
def parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the Python traceback of an error (FLASHTUTOR_DEBUG=1 also logs the judge's steps)")
    p = _Parser(prog="flashtutor", description="fast attention kernels: grade, inspect, check setup",
                epilog="exit codes: 0 pass, 1 fail, 2 usage error, 3 not graded here (no GPU for this chapter, "
                       "needs sm_90, the GPU's memory taken by other processes, timing disturbed: re-run), 4 the grader failed", parents=[common])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade an exercise against SDPA", parents=[common])
    g.add_argument("chapter", help="chapter number, e.g. 01")
    g.add_argument("path", nargs="?", help=f"the module with {INTERFACE} (default: the chapter's exercise file)")
    g.add_argument("--solution", action="store_true", help="grade the course's solution")
    g.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    g.add_argument("--no-timing", action="store_true", help="correctness only")
    g.add_argument("--graph", action="store_true", help="also time CUDA-graph replay")
    g.add_argument("--reference", action="store_true", help="also time the chapter's reference kernel")
    g.add_argument("--sets", help="comma-separated shape sets checked for correctness (seed, small, short, large, odd, odd_long, cpu, "
                        "emulated)")
    g.add_argument("--time-sets", help="comma-separated shape sets timed (default: the chapter's)")
    g.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if a GPU is visible")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--sanitize", action="store_true",
                   help="also run the submission on small shapes under compute-sanitizer (memcheck, racecheck, synccheck)")
    g.set_defaults(fn=_grade)
    d = sub.add_parser("doctor", help="what this machine can do", parents=[common])
    d.set_defaults(fn=_doctor)
    e = sub.add_parser("exercises", help="(authors) check or regenerate exercises from solutions", parents=[common])
    e.add_argument("--write", action="store_true")
    e.add_argument("--check", action="store_true", help="the default")
    e.set_defaults(fn=_exercises)
    s = sub.add_parser("sass", help="compile a .cu and report registers, spills and an instruction histogram",
                       parents=[common])
    s.add_argument("path")
    s.add_argument("--arch", help="default: this GPU, or sm_90a without one")
    s.add_argument("--top", type=int, default=10, help="also list the N most frequent opcodes (0: none)")
    s.add_argument("--dump", action="store_true", help="print the SASS")
    s.set_defaults(fn=_sass)
    b = sub.add_parser("bench", help="measure a chapter's steps against SDPA on this GPU (JSON under results/)",
                       parents=[common])
    b.add_argument("chapter", help="chapter number, e.g. 03")
    b.add_argument("--out", metavar="FILE", help="the results file (default: results/benchNN-<gpu>-<date>.json)")
    b.add_argument("--skip", metavar="PARTS", help="comma-separated parts to leave out (each chapter's PARTS)")
    b.add_argument("--budget-s", type=float, help="skip parts that would start after this many seconds")
    b.add_argument("--dry", action="store_true", help="chapters 4 and 6: tiny shapes through Triton's interpreter, "
                   "no GPU (tests the script; written outside results/ unless --out)")
    b.set_defaults(fn=_bench)
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    debug = getattr(a, "debug", False)
    try:
        return a.fn(a)
    except CliError as e:
        if debug:
            import traceback
            traceback.print_exc()
        print(f"flashtutor {a.cmd}: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print(f"flashtutor {a.cmd}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 — the grader's own failure: one line, the traceback with --debug
        from .grading.report import EXIT_INTERNAL
        if debug:
            import traceback
            traceback.print_exc()
        what = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"flashtutor {a.cmd}: the grader failed: {type(e).__name__}{': ' + what if what else ''}"
              + ("" if debug else " (run again with --debug for the traceback)"), file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
