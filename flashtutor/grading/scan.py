"""The static scan: the learner's sources read (never run) for what a submission may not do.

An early, friendly warning, not the defence: the defence is that the learner's code runs in a worker
process that holds nothing the verdict depends on, and that every call is traced (:mod:`.trace`). The
scan reads the submitted file and the local modules it imports for library attention/matmul/softmax
calls, the ``@`` operator, ``torch.ops.aten``, ``torch.backends``, imports of the grader or of the course's
kernels, paths to the course's solutions, and assignments to library attributes (monkeypatching).
Names hidden in strings count too. Reaching into the interpreter fails the ``source`` criterion with the
reason: frames (``sys._getframe``, ``f_back``, ``tb_frame`` …), the garbage collector's object lists, trace
and profile functions, ``sys.modules``, ``ctypes``/``cffi``, functions' ``__code__``/``__closure__``/
``__globals__``, torch's private C bindings (``torch._C``, ``torch.cuda._set_stream_by_id``), and assignments
to modules or classes the file imported. The worker that runs the submission is the learner's process: what
these reach there is the machinery that reports on the calls (:mod:`.sealed`), not the attention.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

# Calls that compute attention, a matrix product or a softmax for the learner.
FORBIDDEN_NAMES = {
    "scaled_dot_product_attention": "PyTorch's SDPA",
    "multi_head_attention_forward": "PyTorch's attention",
    "flash_attn_func": "FlashAttention's library", "flash_attn_qkvpacked_func": "FlashAttention's library",
    "memory_efficient_attention": "xformers",
    "matmul": "a library matmul", "mm": "a library matmul", "bmm": "a library matmul",
    "baddbmm": "a library matmul", "addmm": "a library matmul", "addbmm": "a library matmul",
    "einsum": "a library matmul", "tensordot": "a library matmul", "linear": "a library matmul",
    "chain_matmul": "a library matmul", "softmax": "a library softmax", "log_softmax": "a library softmax",
    "_softmax": "a library softmax",
}
FORBIDDEN_MODULES = {
    "flash_attn": "FlashAttention's library", "xformers": "xformers",
    "flashtutor.grading": "the grader", "flashtutor.check": "the grader's checker",
    "flashtutor.timing": "the grader's timer", "flashtutor.problems": "the grader's reference",
    "flashtutor.kernels": "the course's reference kernels", "solutions": "the course's solutions",
}
SUSPICIOUS_ATTRS = {
    "aten": "reaches torch.ops.aten directly",
    "backends": "changes torch.backends settings",
    "elapsed_time": "touches CUDA event timing",
}
# Reaching into the interpreter (the worker's): attribute -> what it does, for the module roots it is read on.
INTROSPECTION = {"_getframe": "reads stack frames", "get_objects": "walks the garbage collector's objects",
                 "get_referrers": "walks the garbage collector's referrers",
                 "get_referents": "walks the garbage collector's referents",
                 "modules": "reaches into sys.modules", "currentframe": "reads stack frames",
                 "stack": "reads stack frames", "trace": "reads stack frames", "getouterframes": "reads stack frames",
                 "getinnerframes": "reads stack frames", "walk_stack": "reads stack frames",
                 "walk_tb": "reads stack frames", "_current_frames": "reads every thread's stack frames",
                 "settrace": "installs a trace function", "setprofile": "installs a profile function",
                 "addaudithook": "adds an audit hook", "monitoring": "installs monitoring callbacks",
                 "CDLL": "loads a native library (ctypes)", "cdll": "loads a native library (ctypes)",
                 "PyDLL": "loads a native library (ctypes)", "pydll": "loads a native library (ctypes)",
                 "pythonapi": "calls the interpreter's C API (ctypes)", "dlopen": "loads a native library"}
INTROSPECTION_ROOTS = ("sys", "gc", "inspect", "ctypes", "traceback", "threading", "cffi", "_thread")
# Attributes that are the interpreter's internals wherever they are read.
INTERNALS = {"f_back", "f_locals", "f_globals", "f_code", "tb_frame", "gi_frame", "cr_frame", "ag_frame",
             "__code__", "__closure__", "__globals__", "cell_contents", "co_consts"}
PRIVATE_TORCH = {"_C": "calls torch's private C bindings (torch._C)",
                 "_set_stream_by_id": "switches streams through a private setter (torch.cuda._set_stream_by_id)",
                 "_cuda_setStream": "switches streams through a private setter"}
NATIVE_MODULES = {"ctypes": "loads native code through ctypes", "cffi": "loads native code through cffi",
                  "_ctypes": "loads native code through ctypes"}
DYNAMIC = {"getattr", "setattr", "__import__", "exec", "eval", "compile", "globals", "vars", "import_module"}
LIBRARY_ROOTS = {"torch", "triton", "flashtutor", "F", "nn", "np", "numpy", "time"}
_IDENT = re.compile(r"^[A-Za-z_][\w.]*$")   # a name as getattr/import_module would take it (not prose)
_COURSE_PATH = re.compile(r"^[\w./-]*(solutions/|flashtutor/kernels)[\w./-]*$")   # a path, not prose
CUDA_FORBIDDEN = re.compile(r"#\s*include\s*[<\"](cublas|cublasLt|cudnn|cutlass/gemm|cute/)", re.I)


@dataclass
class Finding:
    file: str
    line: int
    what: str
    severity: str = "forbidden"        # forbidden: fails the grade; notice: reported only

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.what}"

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _root(node) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _is_sys_modules(node) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "modules" and _root(node) == "sys"


def scan_python(path: Path, allowed: frozenset = frozenset()) -> list[Finding]:
    src = path.read_text()
    try:
        tree = ast.parse(src, filename=str(path))
    except SyntaxError as e:
        return [Finding(str(path), e.lineno or 0, f"syntax error: {e.msg}")]
    found: list[Finding] = []

    def add(node, what, severity="forbidden"):
        found.append(Finding(str(path), getattr(node, "lineno", 0), what, severity))

    local = {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}
    imported = set(LIBRARY_ROOTS)        # names bound to modules or objects this file imported (not its own)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] not in local:
                    imported.add(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] not in local:
            imported.update(a.asname or a.name for a in node.names)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_NAMES and node.attr not in allowed:
                add(node, f"calls {node.attr} ({FORBIDDEN_NAMES[node.attr]}): write the computation yourself")
            elif node.attr in SUSPICIOUS_ATTRS and node.attr not in allowed:
                add(node, f"{SUSPICIOUS_ATTRS[node.attr]} ({node.attr})")
            elif INTROSPECTION.get(node.attr) and _root(node) in INTROSPECTION_ROOTS:
                add(node, f"{INTROSPECTION[node.attr]} ({ast.unparse(node)}): a submission may not reach into the "
                          "process that runs it (the grading worker's evidence lives there)")
            elif node.attr in INTERNALS:
                add(node, f"reads the interpreter's internals ({ast.unparse(node)}): frames, code objects, closures "
                          "and globals of code that is not yours are off limits")
            elif node.attr in PRIVATE_TORCH and _root(node) == "torch":
                add(node, f"{PRIVATE_TORCH[node.attr]} ({ast.unparse(node)})")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES and node.id not in allowed \
                and isinstance(node.ctx, ast.Load):
            add(node, f"calls {node.id} ({FORBIDDEN_NAMES[node.id]}): write the computation yourself")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult) and "@" not in allowed:
            add(node, "uses the @ operator (a library matmul)")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                mods += [f"{node.module}.{a.name}" for a in node.names]
                for a in node.names:
                    if a.name in FORBIDDEN_NAMES and a.name not in allowed:
                        add(node, f"imports {a.name} ({FORBIDDEN_NAMES[a.name]})")
            for m in mods:
                for bad, what in FORBIDDEN_MODULES.items():
                    if m == bad or m.startswith(bad + "."):
                        add(node, f"imports {m} ({what})")
                        break
                else:
                    if m.split(".")[0] in NATIVE_MODULES:
                        add(node, f"imports {m}: {NATIVE_MODULES[m.split('.')[0]]}, which can rewrite anything in "
                                  "the process that runs it")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and _root(t) in imported:
                    add(node, f"assigns to {ast.unparse(t)}: patching a module or class you imported (not your own "
                              "code) is not allowed")
                elif isinstance(t, ast.Subscript) and _is_sys_modules(t.value):
                    add(node, f"writes into sys.modules ({ast.unparse(t)})")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            if name in ("setattr", "delattr") and node.args and _root(node.args[0]) in imported:
                add(node, f"{name} on {ast.unparse(node.args[0])}: patching a module or class you imported (not "
                          "your own code) is not allowed")
            elif name in DYNAMIC:
                add(node, f"dynamic access ({name}): the run-time checks watch what it reaches", "notice")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _IDENT.match(node.value):
            for bad in ("scaled_dot_product", "flash_attn", "matmul", "einsum", "softmax", "aten"):
                if bad in node.value and bad not in allowed:
                    add(node, f"the string {node.value!r} names {bad}: hiding a forbidden call in a string "
                              f"is still a forbidden call")
                    break
            else:
                if node.value.startswith("flashtutor.kernels") or node.value.startswith("flashtutor.grading"):
                    add(node, f"the string {node.value!r} names the course's own code: import your own")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _COURSE_PATH.match(node.value):
            add(node, f"the string {node.value!r} points into the course's solutions or kernels: a submission "
                      "must be your own code")
    return found


def scan(sub, allowed: frozenset = frozenset()) -> list[Finding]:
    """Static findings for a submission (:class:`~.submission.Submission`): its entry module, the local
    modules it imports, its .cu files."""
    found: list[Finding] = []
    for p in sub.python:
        found += scan_python(p, allowed)
    for cu in sub.cuda:
        for n, line in enumerate(Path(cu).read_text().splitlines(), 1):
            if CUDA_FORBIDDEN.search(line):
                found.append(Finding(str(cu), n, f"includes a library ({line.strip()}): write the kernel yourself"))
    return found
