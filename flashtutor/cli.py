"""The ``flashtutor`` command: grade, doctor, exercises, sass."""
from __future__ import annotations

import argparse
import sys


def _grade(a) -> int:
    from .grading import grade
    report = grade(a.chapter, a.path, solution=a.solution, timing=not a.no_timing, graph=a.graph or None,
                   reference=a.reference, sets=tuple(a.sets.split(",")) if a.sets else None,
                   time_sets=tuple(a.time_sets.split(",")) if a.time_sets else None,
                   device=a.device, progress=not a.quiet, sanitize=a.sanitize)
    report.print()
    if a.json:
        report.save_json(a.json)
    return report.exit_code


def _doctor(_a) -> int:
    from rich.console import Console
    from rich.table import Table

    from .env import chapters_enabled, doctor
    rows = doctor()
    t = Table(title="flashtutor doctor")
    for c in ("check", "ok", "detail"):
        t.add_column(c)
    for what, ok, detail in rows:
        t.add_row(what, "[green]yes[/]" if ok else "[red]no[/]", detail)
    c = Table(title="what you can do here")
    c.add_column("chapters")
    c.add_column("status")
    for name, state in chapters_enabled(rows):
        c.add_row(name, state)
    con = Console()
    con.print(t)
    con.print(c)
    return 0


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

    from .loaders import CompileError, load_cuda
    from .sass import classify, disassemble, histogram, predication
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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="flashtutor", description="fast attention kernels: grade, inspect, check setup")
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grade", help="grade an exercise against SDPA")
    g.add_argument("chapter", help="chapter number, e.g. 01")
    g.add_argument("path", nargs="?", help="the module with attention(q, k, v, *, causal=False) "
                                           "(default: the chapter's exercise file)")
    g.add_argument("--solution", action="store_true", help="grade the course's solution")
    g.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    g.add_argument("--no-timing", action="store_true", help="correctness only")
    g.add_argument("--graph", action="store_true", help="also time CUDA-graph replay")
    g.add_argument("--reference", action="store_true", help="also time the chapter's reference kernel")
    g.add_argument("--sets", help="comma-separated shape sets checked for correctness (seed, small, large, odd, cpu)")
    g.add_argument("--time-sets", help="comma-separated shape sets timed (default: the chapter's)")
    g.add_argument("--device", choices=("cuda", "cpu"), help="default: cuda if a GPU is visible")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    g.add_argument("--sanitize", action="store_true",
                   help="also run the submission on small shapes under compute-sanitizer (memcheck, racecheck, synccheck)")
    g.set_defaults(fn=_grade)
    d = sub.add_parser("doctor", help="what this machine can do")
    d.set_defaults(fn=_doctor)
    e = sub.add_parser("exercises", help="(authors) check or regenerate exercises from solutions")
    e.add_argument("--write", action="store_true")
    e.add_argument("--check", action="store_true", help="the default")
    e.set_defaults(fn=_exercises)
    s = sub.add_parser("sass", help="compile a .cu and report registers, spills and an instruction histogram")
    s.add_argument("path")
    s.add_argument("--arch", help="default: this GPU, or sm_90a without one")
    s.add_argument("--top", type=int, default=10, help="also list the N most frequent opcodes (0: none)")
    s.add_argument("--dump", action="store_true", help="print the SASS")
    s.set_defaults(fn=_sass)
    a = p.parse_args(argv)
    return a.fn(a)


if __name__ == "__main__":
    sys.exit(main())
