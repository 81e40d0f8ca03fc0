"""The one runner of the chapters' benchmarks: ``flashtutor bench NN [--out FILE]``.

    flashtutor bench 03                     # results/bench03-h100-2026-11-25.json, stamped with the machine
    flashtutor bench 06 --skip sweeps       # leave a part out (each chapter's PARTS name them)
    flashtutor bench 04 --dry               # chapters 4 and 6: tiny shapes through Triton's interpreter, no GPU

The chapter manifest (:data:`flashtutor.chapters.BENCHES`) names the module that measures a chapter and
its results file; that module's ``run(r)`` does the measuring through the :class:`Run` it is given:
``r.part(key, fn)`` runs one part (a part that fails is logged and recorded, and the next one runs),
``r.doc`` is the JSON document, saved after every part with the environment stamp of
:func:`flashtutor.env.describe` (GPU, driver, torch/triton/cuDNN versions, date) under ``"env"``, and
``r.side(name)`` names a companion file beside it (``ncu03-h100-2026-11-25.txt``). A rich progress bar
counts the parts. Without a GPU nothing is measured: the command says so in one line (exit code 3),
except ``--dry`` where the chapter has one (a test of the script, written outside ``results/``).
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

from ..chapters import CHAPTERS, ROOT, get_chapter

RESULTS = ROOT / "results"


# ---------------------------------------------------------------- the stamp and the JSON --------
def save(rows: list[dict], path, **extra) -> dict:
    """``{"env": describe(), "rows": rows, **extra}`` written to ``path`` as JSON; returns the document."""
    from ..env import describe
    doc = {"env": describe(), "rows": rows, **extra}
    write_json(path, doc)
    return doc


def write_json(path, doc: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(doc, indent=1, default=str))


def load(path) -> dict:
    return json.loads(Path(path).read_text())


def env_line(env: dict) -> str:
    parts = [env.get("gpu", "?"), f"torch {env.get('torch')}"]
    if env.get("cudnn"):
        parts.append(f"cuDNN {env['cudnn']}")
    if env.get("triton"):
        parts.append(f"triton {env['triton']}")
    parts.append(str(env.get("date")))
    return " · ".join(parts)


def gpu_tag(name: str) -> str:
    """A GPU's short name as results files carry it: 'NVIDIA H100 80GB HBM3' → 'h100'."""
    m = re.search(r"\b([A-Z]{1,2}\d{1,4}[A-Z]?)\b", name or "")
    return m.group(1).lower() if m else (re.sub(r"[^a-z0-9]+", "-", (name or "").lower()).strip("-") or "nogpu")


def results_path(bench, env: dict, folder: Path = RESULTS) -> Path:
    """``results/<bench>-<gpu>-<date>.json``; a second run on the same day gets ``-2``, ``-3``…"""
    stem = f"{bench.name}-{gpu_tag(env.get('gpu', ''))}-{str(env.get('date', ''))[:10]}"
    path, n = folder / f"{stem}.json", 2
    while path.exists():
        path, n = folder / f"{stem}-{n}.json", n + 1
    return path


# ---------------------------------------------------------------- one run ------------------------
class Run:
    """One chapter's measurement: its results document, log, parts and progress (see the module's doc)."""

    def __init__(self, chapter, out, *, parts: dict[str, str] | None = None, dry: bool = False, skip=(),
                 budget_s: float | None = None, progress: bool = True, env: dict | None = None):
        from ..env import describe
        self.chapter = get_chapter(chapter)
        self.out = Path(out)
        self.parts = dict(parts or {})
        self.dry, self.skip, self.budget_s = dry, set(skip), budget_s
        self.skipped: set[str] = set()
        self.t0 = time.perf_counter()
        self.doc: dict = {"env": env or describe()}
        self.bar = None
        if progress and self.parts:
            from ..progress import Progress
            self.bar = Progress(len(self.parts), f"flashtutor bench {self.chapter.key}")

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def log(self, msg: str = "") -> None:
        print(f"[{self.elapsed():6.1f}s] {msg}", flush=True)

    def side(self, name: str, suffix: str = ".json") -> Path:
        """A companion file beside the results file: ``ncu03-h100-2026-11-25.txt`` for
        ``bench03-h100-2026-11-25.json`` (``<name>-<stem>`` when the results file is named otherwise)."""
        prefix = self.chapter.bench.name if self.chapter.bench else ""
        stem = self.out.stem
        tag = stem[len(prefix) + 1:] if prefix and stem.startswith(prefix + "-") else stem
        return self.out.with_name(f"{name}-{tag}{suffix}")

    def wants(self, key: str) -> bool:
        """Whether part ``key`` runs: not skipped, and not past the time budget (logged when not)."""
        title = self.parts.get(key, key)
        if key in self.skip:
            self.log(f"== {title}: skipped (--skip {key})")
        elif self.budget_s is not None and self.elapsed() > self.budget_s:
            self.log(f"== {title}: skipped, past the {self.budget_s:.0f} s budget")
        else:
            return True
        self.skipped.add(key)
        if self.bar:
            self.bar.advance()
        return False

    def part(self, key: str, fn: Callable[[], object], *, store: str | None = None):
        """Run one part: its result (stored in the document under ``store``), or None when it was skipped or
        failed (the traceback logged, the failure recorded under ``"failures"``). The document is saved after."""
        if not self.wants(key):
            return None
        self.log(f"== {self.parts.get(key, key)}")
        t = time.perf_counter()
        try:
            result = fn()
            if store:
                self.doc[store] = result
            return result
        except Exception as e:  # noqa: BLE001 — one failing part must not lose the others
            tb = traceback.format_exc()
            self.log(f"{key} failed:\n{tb}")
            self.doc.setdefault("failures", []).append(
                {"part": key, "error": f"{type(e).__name__}: {str(e)[:300]}", "traceback": tb})
            return None
        finally:
            self.doc.setdefault("phases", {})[f"{key}_s"] = round(time.perf_counter() - t, 1)
            self.save()
            if self.bar:
                self.bar.advance()

    def save(self) -> None:
        self.doc["wall_s"] = round(self.elapsed(), 1)
        write_json(self.out, self.doc)

    def close(self) -> None:
        if self.bar:
            self.bar.close()
            self.bar = None


# ---------------------------------------------------------------- `flashtutor bench NN` ----------
class NotRun(Exception):
    """Why ``flashtutor bench`` measures nothing, in one line; ``usage``: a bad request (else: not here)."""

    def __init__(self, message: str, *, usage: bool = False):
        super().__init__(message)
        self.usage = usage


def bench_of(key: str):
    """The chapter and its benchmark (the manifest's :class:`~flashtutor.chapters.Bench`), or :class:`NotRun`."""
    try:
        ch = get_chapter(key)
    except KeyError:
        raise NotRun(f"unknown chapter {key!r} (chapters: {', '.join(CHAPTERS)})", usage=True) from None
    if ch.bench is None:
        with_bench = [c.key for c in CHAPTERS.values() if c.bench]
        raise NotRun(f"chapter {ch.key} has no benchmark of its own (`flashtutor grade {ch.key} --solution "
                     f"--reference` times its solution and reference; benchmarks: {', '.join(with_bench)})",
                     usage=True)
    return ch, ch.bench


def where_it_runs(ch, *, dry: bool) -> None:
    """:class:`NotRun` unless this machine can run the chapter's benchmark (a GPU, of the architecture the
    chapter needs; or ``dry`` where the chapter has a dry run)."""
    if dry:
        if not ch.bench.dry:
            dries = ", ".join(c.key for c in CHAPTERS.values() if c.bench and c.bench.dry)
            raise NotRun(f"chapter {ch.key}'s benchmark has no --dry run (chapters with one: {dries})", usage=True)
        return
    import torch

    from ..env import needs_arch
    dry_hint = (f"; `flashtutor bench {ch.key} --dry` runs its code on tiny shapes through Triton's interpreter"
                if ch.bench.dry else "")
    if not torch.cuda.is_available():
        raise NotRun(f"no CUDA GPU visible to torch here: chapter {ch.key}'s benchmark times kernels on a GPU, "
                     f"nothing was measured{dry_hint}")
    arch = needs_arch(ch)
    cc = torch.cuda.get_device_capability()
    if arch and cc != (9, 0):
        raise NotRun(f"chapter {ch.key}'s kernels need {arch} (H100/H200); this GPU "
                     f"({torch.cuda.get_device_name()}) is sm_{cc[0]}{cc[1]}: nothing was measured")


def run(key: str, *, out=None, dry: bool = False, skip=(), budget_s: float | None = None,
        progress: bool = True) -> int:
    """``flashtutor bench NN``: measure chapter ``key`` into ``out`` (default :func:`results_path`);
    returns the chapter's exit code (0: everything ran and passed). :class:`NotRun` when nothing can run."""
    import importlib
    ch, bench = bench_of(key)
    where_it_runs(ch, dry=dry)
    if dry:
        os.environ["TRITON_INTERPRET"] = "1"      # before Triton compiles anything the chapter imports
    mod = importlib.import_module(bench.module)
    parts = getattr(mod, "PARTS", {})
    bad = sorted(set(skip) - set(parts))
    if bad:
        raise NotRun(f"chapter {ch.key}'s benchmark has no part {', '.join(map(repr, bad))} "
                     f"(parts: {', '.join(parts)})", usage=True)
    from ..env import describe, format_env
    env = describe()
    if out is None:
        out = (Path(tempfile.gettempdir()) / "flashtutor-bench" / f"{bench.name}-dry.json" if dry
               else results_path(bench, env))
    budget = budget_s if budget_s is not None else getattr(mod, "BUDGET_S", None)
    r = Run(ch, out, parts=parts, dry=dry, skip=skip, budget_s=budget, progress=progress, env=env)
    r.log(f"flashtutor bench {ch.key}{' --dry' if dry else ''}: {format_env(env)}")
    try:
        code = mod.run(r) or 0
    finally:
        r.save()
        r.close()
    failed = [f["part"] for f in r.doc.get("failures", [])]
    r.log(f"wrote {r.out}" + (f"; failed parts: {', '.join(failed)}" if failed else ""))
    return 1 if failed and not code else code

