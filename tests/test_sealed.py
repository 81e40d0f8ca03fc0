"""The worker's sealed evidence path (flashtutor/grading/sealed.py): the audit hook refuses what reaches into
the worker to the learner's code and allows what libraries do on its behalf; the wire and the tracer are
untouched by patches made after they were built; a batch's fixed cost beyond the control is a verdict; every
output of a timed batch is checked on sampled rows. An audit hook cannot be removed, so each hook test runs
in a process of its own."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The learner's files install nothing: the harness installs the hook (with every learner file as "own"), then runs
# each file, which tries one thing; it prints, per file, "refused" or "allowed" and what the hook recorded.
HARNESS = textwrap.dedent("""
    import json, sys, runpy
    from flashtutor.grading import sealed
    got = []
    sys.addaudithook(sealed.audit_hook(sys.argv[1:], lambda what, where: got.append((what, where))))
    out = {}
    for f in sys.argv[1:]:
        got.clear()
        try:
            runpy.run_path(f, run_name="learner")
            out[f] = ["allowed", list(got), ""]
        except PermissionError as e:
            out[f] = ["refused", list(got), str(e)[:300]]
        except Exception as e:
            out[f] = ["error", list(got), f"{type(e).__name__}: {e}"[:300]]
    print(json.dumps(out))
""")

REFUSED = {
    "getframe": "import sys\nf = sys._getframe(0)",
    "inspect_currentframe": "import inspect\ninspect.currentframe()",
    "inspect_stack": "import inspect\ninspect.stack()",
    "traceback_walk_stack": "import traceback\nnext(traceback.walk_stack(None))",
    "tb_frame": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame",
    "gen_frame": "def g():\n    yield 1\ng().gi_frame",
    "current_frames": "import sys\nsys._current_frames()",
    "gc_objects": "import gc\ngc.get_objects()",
    "gc_referrers": "import gc\ngc.get_referrers(gc)",
    "settrace": "import sys\nsys.settrace(lambda *a: None)\nsys.settrace(None)",
    "setprofile": "import sys\nsys.setprofile(lambda *a: None)\nsys.setprofile(None)",
    "ctypes": "import ctypes\nctypes.CDLL(None)",
    "code_replace": "def f():\n    pass\nf.__code__.replace(co_name='g')",
    "code_assign": "def f():\n    pass\nf.__code__ = (lambda: 0).__code__",
    "compile_as_library": "import json\ncompile('x = 1', json.__file__, 'exec')",
    "exec_string_frames": "exec('import sys\\nsys._getframe(0)')",
    "compile_as_frozen": "compile('x = 1', '<frozen importlib._bootstrap_external>', 'exec')",
    "marshal": "import marshal\nmarshal.loads(marshal.dumps(compile('x = 1', 'x', 'exec')))",
    # bytecode crafted to claim logging's findCaller (a function the hook lets take a frame): imported from a .pyc,
    # its frame's code names logging's file, but its module's globals name the .pyc the learner wrote
    "crafted_bytecode": (
        "import importlib.util, logging, marshal, os, sys, tempfile\n"
        "lib = logging.__file__\n"
        "fake = '/tmp/' + 'A' * (len(lib) - 5)\n"
        "src = 'import sys\\ndef findCaller():\\n    return sys._getframe(0)\\nfindCaller()\\n'\n"
        "data = marshal.dumps(compile(src, fake, 'exec')).replace(fake.encode(), lib.encode())\n"
        "d = tempfile.mkdtemp()\n"
        "open(os.path.join(d, 'crafted.pyc'), 'wb').write(importlib.util.MAGIC_NUMBER + bytes(12) + data)\n"
        "sys.path.insert(0, d)\n"
        "import crafted"),
    "write_into_site_packages": "import torch, os\nopen(os.path.join(os.path.dirname(torch.__file__), 'x.py'), 'w')",
    "addaudithook": "import sys\nsys.addaudithook(lambda *a: None)",
}
ALLOWED = {
    "namedtuple": "import collections\ncollections.namedtuple('P', 'x y')(1, 2)",
    "typing": "import typing\nT = typing.TypeVar('T')\nclass N(typing.NamedTuple):\n    x: int",
    "enum_functional": "import enum\nenum.Enum('Color', 'RED GREEN')",
    "dataclass": "import dataclasses\n@dataclasses.dataclass\nclass D:\n    x: int = 0\nD()",
    "logging": "import logging\nlogging.getLogger('x').warning('a warning from the learner')",
    "print_exc": "import traceback\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    traceback.print_exc()",
    "format_stack": "import traceback\ntraceback.format_stack()",
    "inspect_signature": "import inspect\ninspect.signature(lambda a, b=1: None)",
    "torch_op": "import torch\ntorch.zeros(3).add_(1).sum().item()",
    "write_elsewhere": "import tempfile, os\nd = tempfile.mkdtemp()\nopen(os.path.join(d, 'x.txt'), 'w').write('x')",
    "library_ctypes": "from flashtutor import emulate\nemulate.available()",
    "import_stdlib": "import colorsys, wave, this",
}


@pytest.fixture(scope="module")
def hooked(tmp_path_factory):
    """Every learner file above, run in one process under the hook: {name: [status, records, message]}."""
    tmp = tmp_path_factory.mktemp("hook")
    files = {}
    for name, src in {**REFUSED, **ALLOWED}.items():
        f = tmp / f"learner_{name}.py"            # (not named like a module it imports)
        f.write_text(src + "\n")
        files[str(f)] = name
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", HARNESS, *files], capture_output=True, text=True, env=env, cwd=tmp,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return {files[f]: v for f, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_hook_refuses_the_learners_reach(hooked, name):
    status, records, message = hooked[name]
    # refused with an exception (an added audit hook's refusal is swallowed by Python: the record is the verdict)
    assert status == "refused" or (name == "addaudithook" and records), (status, records, message)
    where = {"exec_string_frames": "<string>:", "crafted_bytecode": "logging/__init__.py:"}.get(
        name, f"learner_{name}.py:")
    assert records and where in records[0][1], records    # the record names the learner's file and line


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_the_hook_allows_what_libraries_do(hooked, name):
    assert hooked[name][:2] == ["allowed", []], hooked[name]


def _other_python() -> str | None:
    """A Python of another minor version than this one's (3.12 beside 3.11): the GPU host runs 3.12, and the
    audit events the hook relies on must exist there too."""
    import glob
    import shutil
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for v in ("3.12", "3.11", "3.13"):
        if v == here:
            continue
        for exe in [shutil.which(f"python{v}")] + sorted(glob.glob(str(Path.home() / f".pyenv/versions/{v}*/bin/python{v}"))):
            if exe and subprocess.run([exe, "-c", "import json"], capture_output=True).returncode == 0:
                return exe
    return None


def test_the_hook_behaves_the_same_on_another_python(tmp_path):
    """The torch-free cases above under another minor version of Python (audit events differ between versions:
    3.12 names a namedtuple's module with sys._getframemodulename, and importing ctypes there opens a library)."""
    exe = _other_python()
    if exe is None:
        pytest.skip("no other Python 3.x on this machine")
    cases = {n: s for n, s in {**REFUSED, **ALLOWED}.items() if "torch" not in s and "flashtutor" not in s}
    files = {}
    for name, src in cases.items():
        f = tmp_path / f"learner_{name}.py"
        f.write_text(src + "\n")
        files[str(f)] = name
    r = subprocess.run([exe, "-c", HARNESS, *files], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stderr[-2000:]
    got = {files[f]: v for f, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}
    for name, (status, records, _) in got.items():
        if name in REFUSED:
            assert status == "refused" or (name == "addaudithook" and records), (exe, name, status, records)
        else:
            assert status == "allowed" and not records, (exe, name, status, records)


def test_the_wire_and_the_tracer_ignore_later_patches():
    """Built first, then json, builtins, the profiler's classes and os.write's module attribute are patched:
    what goes on the wire is still the true trace (CPU ops), encoded as the judge parses it."""
    import builtins
    import json as json_mod

    import torch
    from flashtutor.grading import sealed
    from flashtutor.grading.evidence import parse_message
    r, w = os.pipe()
    send, _, record = sealed.wire(w)
    start, stop, _ = sealed.tracer(torch, cuda=False)
    A = torch._C._autograd
    saved = (json_mod.dumps, builtins.len, A._KinetoEvent.name, os.write, A._ProfilerResult.events)
    try:
        json_mod.dumps = lambda *a, **k: "{}"
        A._KinetoEvent.name = lambda self: "aten::add"
        A._ProfilerResult.events = lambda self: []
        os.write = lambda fd, b: len(b)
        start("nonce-1")
        torch.nn.functional.softmax(torch.randn(4, 4), dim=-1)
        trace = stop()
        record("reads stack frames", "attention.py:3")
        send(trace)
    finally:
        json_mod.dumps, builtins.len, A._KinetoEvent.name, os.write, A._ProfilerResult.events = saved
    os.close(w)
    raw = os.read(r, 1 << 20)
    os.close(r)
    n = int.from_bytes(raw[:4], "big", signed=True)
    msg = parse_message(raw[4:4 + n])
    assert msg["op"] == "trace" and msg["trace"].ok
    assert any("softmax" in op for op in msg["trace"].ops), msg["trace"].ops
    assert msg["tampering"] == [("reads stack frames", "attention.py:3")]
    json.loads(raw[4:4 + n])                      # plain JSON


def test_a_batch_with_a_fixed_cost_beyond_the_control_is_not_independent():
    """A stand-in worker whose batch of n calls costs what the honest one does plus 2 ms once per batch (the
    other calls' outputs computed on the first): the slope hides it, the control batch does not."""
    import random

    from flashtutor.grading import timing as tm

    class Bench:
        def __init__(self, extra_us):
            self.extra_us, self.label, self.gate, self.judge_enqueue_us = extra_us, "", {}, 500.0
            self.jitter = random.Random(7)

        def batch(self, cand, problem, n, *, seed, sleep_us, **kw):
            extra = self.extra_us if n else 0.0
            return tm.BatchRun(287.0 + extra + 40.0 * n + self.jitter.uniform(-1, 1), True, 30.0, issued_us=1000.0)

    honest = tm.measure_shape(Bench(0.0), None, {"learner": "remote"}, rounds=5, rng=random.Random(3))
    cheat = tm.measure_shape(Bench(2000.0), None, {"learner": "remote"}, rounds=5, rng=random.Random(3))
    for run in (honest, cheat):
        assert run.times["learner"].median_us == pytest.approx(40.0, abs=2.0)   # the slope cannot tell them apart
    assert tm.fixed_cost_excess(honest.times["learner"]) == ""
    assert cheat.times["learner"].fixed_us == pytest.approx(2000.0, abs=10.0)
    why = tm.fixed_cost_excess(cheat.times["learner"])
    assert "not independent" in why and "no call" in why, why


def test_every_output_of_a_batch_is_checked_on_sampled_rows():
    import torch

    from flashtutor.grading.protocol import fill_unwritten, views
    from flashtutor.grading.timing import sampled_rows_check
    shape = (2, 3, 37, 64)
    n = 4 * 2 * 3 * 37 * 64
    arena = torch.empty(6 * n, dtype=torch.float16)
    slots = [5, 1, 3]
    for causal in (False, True):
        for s in range(6):
            q, k, v, o = views(arena, shape, s)
            for t in (q, k, v):
                t.copy_(torch.randn(shape))
            ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
            o.copy_(ref.half())
        assert sampled_rows_check(arena, shape, slots, causal) == ""
        fill_unwritten(views(arena, shape, 3)[3][:, :, 20:])      # call 3 of the batch left its last rows unwritten
        why = sampled_rows_check(arena, shape, slots, causal, rows=37)
        assert why.startswith("call 3 of a batch of 3") and "never written" in why, why
        views(arena, shape, 1)[3].mul_(1.5)                      # call 2: a wrong value everywhere
        why = sampled_rows_check(arena, shape, slots, causal, rows=37)
        assert why.startswith("call 2 of a batch of 3") and "off by" in why, why


def test_work_outside_the_window_is_a_verdict_and_honest_work_is_not():
    """A timed batch's kernels all run between the judge's gate and the worker's end event: their traced span fits
    the window. Work on a stream the worker neither gated nor joined ran during the gate's sleep (1.5 ms and more
    before the window) or after it."""
    from flashtutor.grading import timing as tm
    from flashtutor.grading.evidence import parse_trace
    assert tm.outside_window(2480.0, 2500.0) == ""               # honest: inside
    assert tm.outside_window(2700.0, 2500.0) == ""               # clocks and the window's jitter: within the margin
    assert tm.outside_window(None, 2500.0) == ""                 # no device activity traced (a CPU, a control batch)
    why = tm.outside_window(2500.0 + 1800.0, 2500.0)             # ungated kernels during the gate's sleep
    assert "before the gate" in why and "4300 µs" in why, why
    assert parse_trace({"op": "trace", "ops": [], "kernels": [], "span_us": 123.5}).span_us == 123.5
