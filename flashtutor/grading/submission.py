"""A learner's submission: which files it is made of, what kernels they define, and how to import it.

The judge reads these files (it never runs them): the entry module, the local modules it imports
(``from helper import launch`` with ``helper.py`` beside it, recursively) and the CUDA sources of its
folder. The kernels *defined* in those files are the learner's own — the only kernels, besides
memory copies and fills, that may run during a call. The worker (and ``grade --sanitize``) imports
the entry module with :func:`load_module`, the one loader for learner code.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Decorators that make a Python function a GPU kernel (Triton): @triton.jit, @jit, @triton.autotune(...)
# over @triton.jit, @triton.heuristics(...).
_KERNEL_DECORATORS = {"jit", "autotune", "heuristics"}
_EXTERN_C = re.compile(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+'
                       r'(?:__launch_bounds__\([^)]*\)\s+)?(\w+)')
_GLOBAL = re.compile(r'__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)')


@dataclass
class Submission:
    entry: Path                               # the module exposing attention(q, k, v, *, causal=False)
    python: list[Path] = field(default_factory=list)   # entry + local modules it imports
    cuda: list[Path] = field(default_factory=list)     # .cu files beside it
    syntax_errors: list[str] = field(default_factory=list)

    @classmethod
    def at(cls, entry: str | Path, *, cuda_glob: bool = True) -> "Submission":
        entry = Path(entry).resolve()
        sub = cls(entry)
        todo, seen = [entry], set()
        while todo:
            p = todo.pop()
            if p in seen or not p.exists():
                continue
            seen.add(p)
            sub.python.append(p)
            try:
                tree = ast.parse(p.read_text(), filename=str(p))
            except SyntaxError as e:
                sub.syntax_errors.append(f"{p}:{e.lineno or 0}: syntax error: {e.msg}")
                continue
            todo += local_imports(tree, p.parent)
        if cuda_glob:
            sub.cuda = sub._cuda_sources()
        return sub

    def _cuda_sources(self) -> list[Path]:
        """The .cu files of the submission: those named like the entry (attention.cu beside attention.py)
        or named in its Python files; the folder's others only when the Python loads CUDA in a way that
        names no file. A Python file that never mentions CUDA sources has none (a Triton kernel among
        other files, as the course's own kernels in flashtutor/kernels are)."""
        folder = self.entry.parent
        every = sorted(folder.glob("*.cu"))
        text = "\n".join(p.read_text(errors="replace") for p in self.python if p.exists())
        own = [c for c in every if c.name.startswith(self.entry.stem) or c.name in text]
        if own:
            return own
        return every if re.search(r"\.cu\b|load_cuda|nvrtc|cpp_extension", text) else []

    @property
    def files(self) -> list[Path]:
        return self.python + self.cuda

    def kernel_names(self) -> set[str]:
        """Every kernel the files define: ``__global__`` functions of the .cu files and Triton
        ``@jit`` functions of the Python files. Read from the sources, never by running them."""
        names: set[str] = set()
        for cu in self.cuda:
            names |= cuda_kernel_names(cu)
        for py in self.python:
            names |= triton_kernel_names(py)
        return names


def local_imports(tree: ast.AST, folder: Path) -> list[Path]:
    """The files of ``import x`` / ``from x import y`` that exist in ``folder`` (absolute imports only)."""
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for n in names:
            for p in (folder / (n.replace(".", "/") + ".py"), folder / n.replace(".", "/") / "__init__.py"):
                if p.exists():
                    out.append(p.resolve())
    return out


def cuda_kernel_names(path: str | Path) -> set[str]:
    """The ``__global__`` functions a .cu file defines (``extern "C"`` or not), from its source."""
    src = Path(path).read_text(errors="replace")
    src = re.sub(r"//[^\n]*|/\*.*?\*/", "", src, flags=re.S)      # not the ones in comments
    return set(_EXTERN_C.findall(src)) | set(_GLOBAL.findall(src))


def triton_kernel_names(path: str | Path) -> set[str]:
    try:
        tree = ast.parse(Path(path).read_text())
    except (SyntaxError, OSError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                f = d.func if isinstance(d, ast.Call) else d
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in _KERNEL_DECORATORS:
                    out.add(node.name)
                    break
    return out


def load_module(path: str | Path):
    """Import the learner's entry module from its path (its folder first on sys.path, so its local
    modules import as they do in the learner's own runs). Runs the learner's code: call this only in
    a process that judges nothing (the grading worker, the sanitizer's child)."""
    path = Path(path).resolve()
    name = f"flashtutor_submission_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(mod)
    return mod
