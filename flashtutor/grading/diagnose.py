"""Where in the learner's files an error comes from: the kernel's line, not the launch's.

A Triton kernel that does not compile raises at the launch (``kernel[grid](...)``): the traceback of a
``CompilationError`` ends in Triton's compiler, and the innermost frame in the learner's files is the launch
line, often far from the line that is wrong. The error itself carries that line: ``node.lineno`` counts from
the ``def`` of the ``@triton.jit`` function whose source is ``src``. Under Triton's interpreter
(``TRITON_INTERPRET=1``) the kernel runs as Python: the interpreter re-raises an ``InterpreterError`` from the
launch, and the original exception (its ``__cause__``) has the kernel's frame in its traceback.

:func:`error_location` gives ``"file:line"`` of the learner's line for both, and for any other exception the
innermost traceback frame in the learner's files (what the worker reported before).
"""
from __future__ import annotations

import traceback
from pathlib import Path


def _resolved(files) -> dict[str, str]:
    """{resolved path: path as given} of the learner's files."""
    out = {}
    for f in files or ():
        try:
            out[str(Path(f).resolve())] = str(f)
        except OSError:
            pass
    return out


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (``__cause__``, ``__context__``), outermost first."""
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        out.append(exc)
        seen.add(id(exc))
        exc = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    return out


def _is_compilation_error(exc: BaseException) -> bool:
    return any(c.__name__ == "CompilationError" for c in type(exc).__mro__) and hasattr(exc, "node")


def _innermost_frame(exc: BaseException, files: dict[str, str]) -> str:
    best = ""
    for fr in traceback.extract_tb(exc.__traceback__):
        try:
            if str(Path(fr.filename).resolve()) in files:
                best = f"{fr.filename}:{fr.lineno}"
        except OSError:
            pass
    return best


def _jit_functions(exc: BaseException):
    """The Triton JIT functions that the frames of ``exc``'s traceback were compiling (``ASTSource.fn``,
    ``CodeGenerator.jit_fn``, a ``fn`` argument), innermost first."""
    found = []
    tb = exc.__traceback__
    while tb is not None:
        loc = tb.tb_frame.f_locals
        for cand in (loc.get("fn"), getattr(loc.get("self"), "fn", None), getattr(loc.get("self"), "jit_fn", None),
                     getattr(loc.get("src"), "fn", None)):
            if cand is not None and hasattr(cand, "def_file_line_number") and hasattr(cand, "file_name"):
                found.append(cand)
        tb = tb.tb_next
    return list(reversed(found))


def _compilation_location(exc: BaseException, files: dict[str, str]) -> str:
    """``file:line`` of a Triton CompilationError's node, in the learner's files ('' if not found there)."""
    node = getattr(exc, "node", None)
    lineno = getattr(node, "lineno", None)
    src = getattr(exc, "src", None)
    if not lineno or not src:
        return ""
    # 1. The JIT function being compiled, from the traceback: its file and the line of its `def`.
    for fn in _jit_functions(exc):
        fsrc = getattr(fn, "src", None) or getattr(fn, "_src", None)
        if fsrc == src:
            try:
                path = str(Path(fn.file_name).resolve())
            except OSError:
                continue
            if path in files:
                return f"{files[path]}:{fn.def_file_line_number + lineno - 1}"
    # 2. Without frames (the error crossed a process, or Triton dropped them): the `def` line of ``src`` in the
    # learner's files, found by its text.
    first = src.lstrip().splitlines()[0].strip() if src.strip() else ""
    body = [ln.strip() for ln in src.splitlines()]
    for path, shown in files.items():
        try:
            lines = Path(path).read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for i, line in enumerate(lines):
            if line.strip() == first and [x.strip() for x in lines[i:i + len(body)]] == body:
                return f"{shown}:{i + lineno}"
    return ""


def error_location(exc: BaseException, files) -> str:
    """``"file:line"`` in the learner's ``files`` where ``exc`` comes from ('' when no line of theirs is in it).

    A Triton ``CompilationError`` (anywhere in the exception's chain): the kernel's line it carries. Otherwise
    the innermost traceback frame in ``files``, looking first at the exceptions the error was raised from (the
    interpreter's ``InterpreterError`` wraps the kernel's own exception, whose traceback passes through the
    kernel), then at the error itself (whose innermost frame of the learner's is the launch)."""
    files = _resolved(files)
    chain = _chain(exc)
    for e in chain:
        if _is_compilation_error(e):
            where = _compilation_location(e, files)
            if where:
                return where
    for e in reversed(chain):            # the innermost cause first
        where = _innermost_frame(e, files)
        if where:
            return where
    return ""


def error_summary(exc: BaseException) -> str:
    """One line for a Triton error: a CompilationError's message ("at 48:17: <the source>\\n<error>") read as
    its error, not its first line; an InterpreterError as the error it wraps. Other exceptions: their first line."""
    for e in _chain(exc):
        if _is_compilation_error(e) and getattr(e, "error_message", None):
            return f"{type(e).__name__}: {str(e.error_message).strip().splitlines()[-1]}"
    inner = _chain(exc)[-1]
    text = f"{type(inner).__name__}: {inner}".strip()
    return text.splitlines()[0] if text else type(inner).__name__
