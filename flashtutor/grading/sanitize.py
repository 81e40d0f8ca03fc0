"""``flashtutor grade --sanitize``: the submission on small shapes under compute-sanitizer.

    result = sanitize("01", "my/attention.py")      # memcheck, racecheck, synccheck
    print(format_findings(result))

Each tool runs in a subprocess of its own (``compute-sanitizer --tool T python -m
flashtutor.grading.sanitize CHAPTER PATH``) with a timeout. The child imports the learner's file with the
grader does and calls ``attention`` on two small problems, causal and not; it calls neither SDPA
nor a reference, so the kernels under the tool are the learner's (and torch's copies). The tool's
report is parsed into :class:`Finding` objects — kind, kernel, the learner's file:line (the NVRTC
loader compiles with line info) — keeping only findings in the learner's own kernels, first ones
first, duplicates dropped.

Without a GPU or without compute-sanitizer the verdict is "not run", with the reason; this module
never raises for a submission's faults.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ..chapters import get_chapter
from ..sass import find_tool
from .submission import Submission

TOOLS = ("memcheck", "racecheck", "synccheck")
MARK = "[flashtutor-sanitize]"     # lines the child prints for the parent (not the tool's)
_DETAIL_LINES = 4


@dataclass
class Finding:
    """One report of a sanitizer tool, in the learner's terms."""
    tool: str           # memcheck | racecheck | synccheck
    kind: str           # "Invalid __global__ write of size 2 bytes", "race", "barrier error: …"
    kernel: str         # as the tool names it ("naive_attention")
    location: str       # "/path/attention.cu:42" when the tool gives a source line, else ""
    detail: str         # the first lines of the tool's report for it

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------- parsing ------------------------
# Device locations, as compute-sanitizer prints them:
#   2022.x and later:  "at naive_attention+0x2f0 in /tmp/x/attention.cu:47"  ("at kernel+0x2f0" without line info)
#   older releases:    "at 0x000002f0 in /tmp/x/attention.cu:47:naive_attention"  ("at 0x2f0 in kernel(int*)")
_AT_NEW = re.compile(r"\bat (?P<kernel>\S.*?)\+0x[0-9a-fA-F]+(?: in (?P<file>\S+?):(?P<line>\d+))?(?=\s|$)")
_AT_OLD = re.compile(r"\bat 0x[0-9a-fA-F]+ in (?:(?P<file>[^\s:]+):(?P<line>\d+):)?(?P<kernel>.+?)"
                     r"(?:\s+\[[\d,]+ hazards?\])?$")
_NOT_FINDINGS = re.compile(r"^(COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY|Program hit|"
                           r"Target application|Saved host backtrace|Host Frame|Process|Note|Internal|"
                           r"This (?:warning|error))", re.I)
_RACE_ANALYSIS = re.compile(r"^(?:(?P<sev>Error|Warning):\s*)?Race reported between (?P<a>\w+) access.*?"
                            r"(?:and (?P<b>\w+) access)?", re.I)
_RACE_HAZARD = re.compile(r"^(?:(?P<sev>Error|Warning|ERROR|WARNING):\s*)?Potential (?P<type>\w+) hazard detected", re.I)
_BARRIER = re.compile(r"^(?:Error:\s*)?Barrier error detected\.?\s*(?P<what>.*)$", re.I)
_SEV = re.compile(r"^(?:error|warning):\s*", re.I)


def _blocks(text: str) -> list[list[str]]:
    """The tool's reports: a header line ("========= X") and its indented lines ("=========     at …")."""
    blocks: list[list[str]] = []
    cur: list[str] | None = None
    for raw in text.splitlines():
        m = re.match(r"^={5,}(.*)$", raw.rstrip())
        if not m:
            continue                                   # the program's own output
        body = m.group(1)
        if not body.strip():
            cur = None                                 # "=========" alone ends a report
            continue
        if body.startswith(("  ", "\t")):
            if cur is not None:
                cur.append(body.strip())
            continue
        cur = [body.strip()]
        blocks.append(cur)
    return blocks


def _location(lines: list[str]) -> tuple[str, str]:
    """(kernel, "file:line" or "") of the first device location in a report."""
    kernel = ""
    for ln in lines:
        if ln.lower().startswith(("saved host backtrace", "host frame")):
            break
        m = _AT_NEW.search(ln) or _AT_OLD.search(ln)
        if m:
            k = m.group("kernel").strip()
            k = re.sub(r"\s+\[[\d,]+ hazards?\]$", "", k)
            if m.group("file"):
                return k, f"{m.group('file')}:{m.group('line')}"
            kernel = kernel or k
    return kernel, ""


def _detail(lines: list[str]) -> str:
    keep = []
    for ln in lines:
        if ln.lower().startswith(("saved host backtrace", "host frame")):
            break
        keep.append(ln)
    return "\n".join(keep[:_DETAIL_LINES])


def parse(tool: str, text: str) -> list[Finding]:
    """Every finding in one tool's output, in order (no filtering, no deduplication)."""
    out: list[Finding] = []
    for block in _blocks(text):
        head = block[0]
        kernel, loc = _location(block)
        if _RACE_ANALYSIS.match(head) or _RACE_HAZARD.match(head):
            warning = head.lower().startswith("warning")
            m = _RACE_HAZARD.match(head)
            kind = ("race warning" if warning else "race") + (f" ({m.group('type')} hazard)" if m else "")
        elif _BARRIER.match(head):
            what = _BARRIER.match(head).group("what").strip().rstrip(".")
            kind = "barrier error" + (f": {what}" if what else "")
        elif _NOT_FINDINGS.match(head) or not kernel:
            continue                                   # summaries, host API errors, the tool's own messages
        else:
            kind = _SEV.sub("", head).rstrip(" :")
        out.append(Finding(tool, kind, kernel, loc, _detail(block)))
    return out


def _base_name(kernel: str) -> str:
    """'void ns::foo<int>(int*)' -> 'foo'; 'naive_attention' -> 'naive_attention'."""
    k = re.sub(r"^(?:void|__global__)\s+", "", kernel.strip())
    k = k.split("(", 1)[0]
    k = re.sub(r"<.*>$", "", k)
    return k.split("::")[-1].strip()


def is_learner_kernel(kernel: str, names) -> bool:
    base = _base_name(kernel)
    for n in names:
        if base == n or base == _base_name(n) or (n.startswith("_Z") and f"{len(base)}{base}" in n):
            return True
    return False


def select(findings: list[Finding], names=None, max_findings: int = 5) -> tuple[list[Finding], int]:
    """The learner's findings (kernel in ``names``; all of them when ``names`` is empty), first
    ``max_findings`` after dropping repeats (same kind and location). Also: how many were left out
    as not the learner's."""
    kept, seen, foreign = [], set(), 0
    for f in findings:
        if names and not is_learner_kernel(f.kernel, names):
            foreign += 1
            continue
        key = (f.kind, f.location or f.kernel)
        if key in seen:
            continue
        seen.add(key)
        kept.append(f)
    return kept[:max_findings], foreign


def _child_marks(text: str) -> tuple[set[str], str | None, bool, list[str]]:
    """What the child said: kernels it launched, the error it hit, whether it finished, the .cu
    files its kernels came from."""
    names: set[str] = set()
    files: list[str] = []
    error, done = None, False
    for ln in text.splitlines():
        if not ln.startswith(MARK):
            continue
        rest = ln[len(MARK):].strip()
        if rest.startswith("kernels:"):
            names |= {n for n in rest[len("kernels:"):].strip().split(",") if n}
        elif rest.startswith("files:"):
            files += [f for f in rest[len("files:"):].strip().split("\t") if f]
        elif rest.startswith("error:"):
            error = rest[len("error:"):].strip()
        elif rest.startswith("done"):
            done = True
    return names, error, done, files


def resolve_location(location: str, files) -> str:
    """compute-sanitizer prints the file name of the line table ("attention.cu:47"); give it the
    path of the learner's file of that name when there is one."""
    m = re.match(r"^(.*):(\d+)$", location)
    if not m or os.path.isabs(m.group(1)):
        return location
    name = m.group(1)
    for f in files:
        if Path(f).name == Path(name).name and (str(f).endswith("/" + name) or "/" not in name):
            return f"{f}:{m.group(2)}"
    return location


# ---------------------------------------------------------------- parent side --------------------
def _gpu_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def _cuda_files(path: Path) -> list[Path]:
    """The .cu files of a submission, as the grader finds them."""
    return Submission.at(path).cuda


def learner_kernels(path: Path) -> set[str]:
    """Names of the kernels in the submission's .cu files (from the cubin; the source as a fallback).
    Raises CompileError when a file does not compile."""
    from ..loaders import load_cuda
    from ..sass import disassemble
    from .submission import cuda_kernel_names
    names: set[str] = set()
    for cu in _cuda_files(path):
        mod = load_cuda(cu, arch="sm_90a")          # kernel names do not depend on the arch
        try:
            names |= set(disassemble(mod.cubin))
        except Exception:                           # no cuobjdump: read the declarations instead
            names |= cuda_kernel_names(cu)
    return names


def _command(tool_path: str, tool: str, chapter_key: str, path: Path) -> list[str]:
    # --report-api-errors no: torch and cuda.core probe driver entry points at start-up
    # (cuGetProcAddress → CUDA_ERROR_INVALID_VALUE, dozens of times); reported, they fill the print
    # limit before the first kernel runs.
    cmd = [tool_path, "--tool", tool, "--print-limit", "20", "--show-backtrace", "device",
           "--report-api-errors", "no"]
    if tool == "racecheck":
        # "analysis" gives one line per race with both accesses' file:line (the default, named here).
        cmd += ["--racecheck-report", "analysis"]
    return cmd + [sys.executable, "-m", "flashtutor.grading.sanitize", chapter_key, str(path)]


def _env() -> dict:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:
        parts.insert(0, root)
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["PYTHONUNBUFFERED"] = "1"
    # One cudaMalloc per tensor: memcheck then sees each tensor's bounds, not a cached 2 MB block.
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    env.pop("FLASHTUTOR_POISON_OUTPUTS", None)
    return env


def _run_tool(tool_path: str, tool: str, chapter_key: str, path: Path, names: set[str], timeout: float,
              max_findings: int, keep_output: bool) -> dict:
    t0 = time.monotonic()
    res: dict = {"ran": False, "findings": [], "error": None, "seconds": 0.0}
    cmd = _command(tool_path, tool, chapter_key, path)
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=_env(), start_new_session=True)
    except OSError as e:
        res["error"] = f"could not start compute-sanitizer: {e}"
        return res
    try:
        text, _ = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)    # the tool and the Python child under it
        except OSError:
            proc.kill()
        text, _ = proc.communicate()
        timed_out = True
    res["seconds"] = round(time.monotonic() - t0, 2)
    if keep_output:
        res["output"] = text
    launched, child_error, done, cu_files = _child_marks(text)
    found, foreign = select(parse(tool, text), names | launched, max_findings)
    known = cu_files + [str(f) for f in _cuda_files(path)]
    for f in found:
        f.location = resolve_location(f.location, known)
    res["findings"] = [f.to_dict() for f in found]
    if foreign:
        res["ignored"] = foreign
    tool_ran = "COMPUTE-SANITIZER" in text or re.search(r"^=+ (ERROR|RACECHECK) SUMMARY", text, re.M)
    res["ran"] = bool(found) or bool(tool_ran and done and not timed_out)
    if timed_out:
        res["error"] = (f"timed out after {timeout:.0f} s under {tool} (the tools slow kernels down 10-100×; "
                        f"a kernel that hangs never finishes)")
    elif not found and child_error:
        res["error"] = f"the submission failed under {tool}: {child_error}"
    elif not found and not done:
        tail = "\n".join(ln for ln in text.strip().splitlines()[-8:])
        res["error"] = f"{tool} did not finish (exit code {proc.returncode}); its last lines:\n{tail}"
    return res


def _result(tools: dict, verdict: str, summary: str, **extra) -> dict:
    return {"tools": tools, "verdict": verdict, "summary": summary, **extra}


def sanitize(chapter, path=None, *, solution: bool = False, tools=TOOLS, timeout: float = 300.0,
             max_findings: int = 5, parallel: bool = True, keep_output: bool = False) -> dict:
    """Run ``path`` (default: the chapter's exercise, or its solution) under each tool.

    Returns {"tools": {tool: {"ran", "findings", "error", "seconds"}}, "verdict": "clean" |
    "findings" | "not run", "summary": str}. ``parallel`` runs the tools at once (each is a separate
    process on the same GPU); ``keep_output`` keeps each tool's raw output under "output".
    """
    tools = tuple(tools)
    empty = {t: {"ran": False, "findings": [], "error": None, "seconds": 0.0} for t in tools}
    try:
        ch = get_chapter(chapter)
    except KeyError as e:
        return _result(empty, "not run", str(e))
    if path is None:
        path = ch.solution_path() if solution else ch.exercise_path()
    path = Path(path).resolve()
    extra = {"chapter": ch.key, "path": str(path)}
    bad = [t for t in tools if t not in TOOLS]
    if bad:
        return _result(empty, "not run", f"unknown tool(s) {', '.join(bad)}; known: {', '.join(TOOLS)}", **extra)
    if not path.exists():
        return _result(empty, "not run", f"no submission at {path}", **extra)
    tool_path = find_tool("compute-sanitizer")
    if tool_path is None:
        from ..env import SANITIZER_HINT
        return _result(empty, "not run", f"compute-sanitizer not found: {SANITIZER_HINT}", **extra)
    if not _gpu_available():
        return _result(empty, "not run", "no CUDA GPU here: compute-sanitizer runs the kernels, so it needs one",
                       **extra)
    names: set[str] = set()
    if ch.kind == "cuda":
        try:
            names = learner_kernels(path)
        except Exception as e:  # CompileError: the learner's file and line are in the message
            return _result(empty, "not run", f"{type(e).__name__}: {e}", **extra)

    def one(tool):
        return tool, _run_tool(tool_path, tool, ch.key, path, names, timeout, max_findings, keep_output)

    if parallel and len(tools) > 1:
        with ThreadPoolExecutor(len(tools)) as ex:
            results = dict(ex.map(one, tools))
    else:
        results = dict(map(one, tools))
    results = {t: results[t] for t in tools}
    n = {t: len(r["findings"]) for t, r in results.items()}
    errors = {t: r["error"] for t, r in results.items() if r["error"] and not r["findings"]}
    if any(n.values()):
        verdict = "findings"
        summary = "compute-sanitizer found " + ", ".join(
            f"{k} {t} finding{'s' if k > 1 else ''}" for t, k in n.items() if k)
        if errors:
            summary += "; " + "; ".join(f"{t} did not finish" for t in errors)
    elif errors:
        verdict = "not run"
        summary = "; ".join(f"{t}: {e.splitlines()[0]}" for t, e in errors.items())
    else:
        verdict = "clean"
        summary = f"clean under {', '.join(tools)} (2 small shapes, causal and not)"
    return _result(results, verdict, summary, **extra)


def _source_line(location: str) -> str:
    m = re.match(r"^(.*):(\d+)$", location)
    if not m:
        return ""
    try:
        lines = Path(m.group(1)).read_text(errors="replace").splitlines()
        n = int(m.group(2))
        return f"{n} | {lines[n - 1].strip()}" if 0 < n <= len(lines) else ""
    except OSError:
        return ""


def format_findings(result: dict) -> str:
    """A plain-text summary for the terminal."""
    out = [f"sanitize: {result['verdict'].upper()} — {result['summary']}"]
    for tool, r in result.get("tools", {}).items():
        secs = f"{r.get('seconds', 0.0):.1f} s"
        if r.get("findings"):
            out.append(f"  {tool} ({secs}): {len(r['findings'])} finding(s)")
            for f in r["findings"]:
                where = f" at {f['location']}" if f["location"] else ""
                out.append(f"    - {f['kind']} in {f['kernel'] or '?'}{where}")
                src = _source_line(f["location"]) if f["location"] else ""
                if src:
                    out.append(f"        {src}")
                for ln in f["detail"].splitlines()[1:]:
                    out.append(f"        {ln}")
            if r.get("error"):
                out.append(f"    ({r['error'].splitlines()[0]})")
        elif r.get("error"):
            out.append(f"  {tool} ({secs}): not run — {r['error']}")
        elif r.get("ran"):
            out.append(f"  {tool} ({secs}): clean")
        else:
            out.append(f"  {tool}: not run")
    return "\n".join(out)


# ---------------------------------------------------------------- child side ---------------------
def _child(chapter_key: str, path: str) -> int:
    """Run under compute-sanitizer: the learner's attention() on small problems, nothing else on the GPU."""
    import gc

    import torch

    from ..api import set_poisoning
    from ..loaders.nvrtc import CudaModule
    from ..problems import Problem
    from .submission import load_module

    ch = get_chapter(chapter_key)
    set_poisoning(False)
    problems = (Problem(2, 3, 113, 64), Problem(1, 2, 64, 128))
    status = 0
    try:
        fn = getattr(load_module(Path(path)), "attention", None)
        if not callable(fn):
            raise TypeError(f"{Path(path).name} defines no function attention(q, k, v, *, causal=False)")
        for p in problems:
            for causal in ((False, True) if ch.causal else (False,)):
                q, k, v = p.inputs(0, "cuda")
                fn(q, k, v, causal=causal)
                torch.cuda.synchronize()
    except BaseException as e:  # noqa: BLE001 — reported to the parent; the tool's own report says more
        first = (str(e).strip().splitlines() or [""])[0][:300]
        print(f"{MARK} error: {type(e).__name__}: {first}", flush=True)
        status = 2
    finally:
        launched, files = set(), []
        for o in gc.get_objects():
            if issubclass(type(o), CudaModule):   # type(): no attribute look-ups on lazy module proxies
                launched |= set(o._kernels)
                files.append(o.path)
        print(f"{MARK} kernels: {','.join(sorted(launched))}", flush=True)
        print(f"{MARK} files: {chr(9).join(files)}", flush=True)
    if status == 0:
        print(f"{MARK} done", flush=True)
    return status


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m flashtutor.grading.sanitize CHAPTER PATH  (run under compute-sanitizer)", file=sys.stderr)
        sys.exit(64)
    sys.exit(_child(sys.argv[1], sys.argv[2]))
