"""Errors cite the learner's kernel line, not the launch (issue 27 item 4): chapter 4's kernel with
`tl.dot(q, k)` (no transpose of k) run through Triton's interpreter, and compiled for sm_90 without a GPU
(Triton's front end runs on the CPU), both point at the `tl.dot` line, which is far from the launch."""
import importlib.util
import sys

import pytest

from flashtutor.chapters import get_chapter
from flashtutor.grading.diagnose import error_location, error_summary

WRONG = "scores = tl.dot(q, k) * qk_scale"


@pytest.fixture
def wrong_kernel(tmp_path):
    ch = get_chapter("04")
    text = (ch.solution_dir / ch.entry).read_text()
    old = "scores = tl.dot(q, tl.trans(k)) * qk_scale"
    assert text.count(old) == 1
    path = tmp_path / "attention.py"
    path.write_text(text.replace(old, WRONG))
    lines = path.read_text().splitlines()
    dot = next(i + 1 for i, ln in enumerate(lines) if WRONG in ln)
    launch = next(i + 1 for i, ln in enumerate(lines) if "flash_attention_kernel[grid](" in ln)
    assert launch - dot > 20                          # the launch is far from the wrong line
    return path, dot, launch


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _run(code: str, path, **env) -> list[str]:
    """``code`` in a fresh Python with the wrong kernel's folder as argv[1]: its two lines of output."""
    import os
    import subprocess

    from flashtutor.chapters import ROOT
    e = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    e.update(env, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code, str(path.parent)], capture_output=True, text=True, env=e,
                       timeout=120)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and len(lines) == 2, (p.stdout, p.stderr[-2000:])
    return lines


COMPILE = """
import pickle, sys
import triton
from triton.backends.compiler import GPUTarget
from flashtutor.grading.diagnose import error_location, error_summary
sys.path.insert(0, sys.argv[1])
import attention
sig = {"Q": "*fp16", "K": "*fp16", "V": "*fp16", "O": "*fp16", "qk_scale": "fp32", "H": "i32", "S": "i32",
       "stride_b": "i64", "stride_h": "i64", "stride_s": "i64", "D": "constexpr", "BLOCK_M": "constexpr",
       "BLOCK_N": "constexpr", "CAUSAL": "constexpr"}
src = triton.compiler.ASTSource(attention.flash_attention_kernel, sig,
                                constexprs={"D": 128, "BLOCK_M": 64, "BLOCK_N": 64, "CAUSAL": False})
try:
    triton.compile(src, target=GPUTarget("cuda", 90, 32))     # the front end needs no GPU
    print("compiled")
except Exception as err:
    bare = pickle.loads(pickle.dumps(err))                     # as across a process: no traceback
    files = [attention.__file__]
    print(type(err).__name__, error_location(err, files), error_location(bare, files),
          bare.__traceback__ is None, error_location(bare, ["other.py"]) == "", sep="|")
    print(error_summary(err))
"""


def test_a_compilation_error_names_the_kernel_line_not_the_launch(wrong_kernel):
    """Compiled (Triton's front end, for sm_90, no GPU needed) in a process of its own: Triton's interpreter and
    its compiler do not share one process well (each leaves triton.language patched for the other)."""
    path, dot, launch = wrong_kernel
    lines = _run(COMPILE, path, TRITON_DEFAULT_FP_FUSION="1")
    kind, where, where_bare, no_tb, elsewhere = lines[0].split("|")
    assert kind == "CompilationError"
    assert where == f"{path}:{dot}" and where != f"{path}:{launch}"
    assert where_bare == f"{path}:{dot}" and no_tb == "True" and elsewhere == "True"
    assert lines[1] == "CompilationError: input and other must have equal reduction dimensions"


INTERPRET = """
import sys
import torch
from flashtutor.grading.diagnose import error_location, error_summary
sys.path.insert(0, sys.argv[1])
import attention
q = torch.randn(1, 2, 37, 128, dtype=torch.float16)   # D = 128 ≠ BLOCK_N: the reduction dims differ
try:
    attention.attention(q, q, q)
    print("ran")
except Exception as err:
    print(type(err).__name__, error_location(err, [attention.__file__]),
          error_location(err, [attention.__file__ + ".other"]) == "", sep="|")
    print(error_summary(err))
"""


def test_an_interpreter_error_names_the_kernel_line_not_the_launch(wrong_kernel):
    """Through Triton's interpreter (TRITON_INTERPRET=1, read when @triton.jit decorates the kernel), in a process
    of its own as a grading's worker is."""
    path, dot, launch = wrong_kernel
    lines = _run(INTERPRET, path, TRITON_INTERPRET="1")
    kind, where, elsewhere = lines[0].split("|")
    assert kind == "InterpreterError"
    assert where == f"{path}:{dot}" and where != f"{path}:{launch}" and elsewhere == "True"
    assert "reduction dimensions" in lines[1]


def test_other_errors_keep_the_innermost_frame_in_the_learners_files(tmp_path):
    f = tmp_path / "mine.py"
    f.write_text("def inner():\n    raise ValueError('bad')\n\n\ndef outer():\n    inner()\n")
    mod = _load(f, "mine_for_diagnose")
    with pytest.raises(ValueError) as e:
        mod.outer()
    assert error_location(e.value, [f]) == f"{f}:2"
    assert error_summary(e.value) == "ValueError: bad"
