"""The `flashtutor` command as a learner meets it: every bad input is one line on stderr with the exit code
of its kind (2 usage, 1 a failing submission), a traceback only with --debug; a CPU grading says how it
ran and what it did not grade; `flashtutor doctor` and the grader agree on what a chapter can do here."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flashtutor.chapters import ROOT
from flashtutor.env import capability

INTERFACE = "def attention(q, k, v, *, causal=False):\n    return q\n"


def flashtutor(*args, cwd=None, timeout=300):
    env = dict(os.environ, COLUMNS="400", PYTHONPATH=str(ROOT))      # wide: a headline is never wrapped
    return subprocess.run([sys.executable, "-m", "flashtutor", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=timeout)


def one_line(p) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and p.stdout == "", (p.stdout, p.stderr)
    return lines[0]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "notes.txt").write_text("attention is all you need\n")
    (tmp_path / "empty.py").write_text("import math\n\n\ndef helper(x):\n    return math.sqrt(x)\n")
    (tmp_path / "bad.py").write_text("import torch\n\ndef attention(q, k, v, *, causal=False)\n    return q\n")
    (tmp_path / "good.py").write_text(INTERFACE)
    return tmp_path


@pytest.mark.parametrize("args,code,words", [
    (("grade", "09"), 2, ["unknown chapter '09'", "01"]),
    (("grade", "04", "missing.py"), 2, ["no such file", "missing.py"]),
    (("grade", "04", "notes.txt"), 2, ["notes.txt is not a Python file"]),
    (("grade", "04", "good.py", "--no-such-option"), 2, ["--no-such-option"]),
    (("grade", "04", "good.py", "--sets", "huge"), 2, ["unknown shape set 'huge'"]),
    (("grade", "04", "empty.py"), 1, ["FAIL", "empty.py defines no function attention"]),
    (("grade", "04", "bad.py"), 1, ["FAIL", "bad.py:3", "syntax error"]),
])
def test_a_bad_input_is_one_line_and_its_exit_code(files, args, code, words):
    p = flashtutor(*args, cwd=files)
    line = one_line(p)
    assert p.returncode == code, (p.returncode, line)
    for w in words:
        assert w in line, line


def test_a_syntax_error_still_writes_the_json_report(files):
    p = flashtutor("grade", "01", "bad.py", "--json", "out.json", cwd=files)
    assert p.returncode == 1 and "bad.py:3" in one_line(p)
    d = json.loads((files / "out.json").read_text())
    assert d["verdict"] == "fail" and "bad.py:3" in d["headline"] and d["method"] == []
    assert any("stopped before the first case" in u for u in d["unchecked"])


def test_debug_shows_the_traceback(files):
    p = flashtutor("grade", "09", "--debug", cwd=files)
    assert p.returncode == 2 and "Traceback (most recent call last)" in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("flashtutor grade: unknown chapter")


def test_cpu_grade_of_chapter_4_says_it_was_interpreted_and_speed_not_graded(tmp_path):
    """The Triton interpreter on the CPU: a pass of correctness only, never a plain PASS."""
    pytest.importorskip("triton")
    p = flashtutor("grade", "04", "--solution", "--sets", "cpu", "--device", "cpu", "--quiet",
                   "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stdout + p.stderr
    head = next(line for line in p.stdout.splitlines() if "PASS" in line)
    assert "PASS (correctness only, interpreted on the CPU — speed not graded: no GPU)" in head, head
    assert "of the cpu set" in head
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["execution"] == "interpreted" and "speed not graded" in d["headline"]
    assert any(u.startswith("speed: not timed") for u in d["unchecked"])
    assert "None" not in p.stdout
    # doctor's word for chapter 4 on a machine without a GPU is the grader's
    assert capability("04", {"gpu": False, "triton": True}).execution == d["execution"]


# ---------------------------------------------------------------- what each chapter can do (doctor) --------
CPU = {"gpu": False, "cc": None, "triton": True, "nvrtc": True, "nvcc": True, "cutlass": True, "emulation": False}


def test_chapter_6_is_graded_for_correctness_on_a_cpu():
    cap = capability("06", CPU)
    assert cap.execution == "interpreted" and not cap.speed
    assert "Triton interpreter" in cap.note and "speed needs a GPU" in cap.note


def test_cuda_chapters_on_a_cpu_depend_on_the_emulation():
    assert capability("01", CPU).execution == "compiled only" and "g++" in capability("01", CPU).note
    emu = capability("02", dict(CPU, emulation=True))
    assert emu.execution == "emulated" and not emu.speed and "speed needs a GPU" in emu.note


def test_hopper_chapters_say_what_they_need():
    ampere = dict(CPU, gpu=True, cc=(8, 0))
    ch7 = capability("07", dict(CPU, emulation=True))
    assert ch7.execution == "compiled only" and "sm_90" in ch7.note
    assert capability("07", ampere).execution == "compiled only"
    assert capability("05", ampere).execution == "compiled only" and "sm_90a" in capability("05", ampere).note
    hopper = dict(CPU, gpu=True, cc=(9, 0))
    for key in ("01", "04", "05", "06", "07"):
        assert capability(key, hopper)[:2] == ("gpu", True), key


def test_doctor_gives_a_hint_for_every_no():
    from flashtutor.env import chapters_enabled, doctor
    rows = doctor()
    for what, ok, detail in rows:
        assert ok or len(detail) > 20, (what, detail)           # a "no" says what to do, not just "not found"
    sanitizer = next(d for w, ok, d in rows if w == "compute-sanitizer")
    assert Path(sanitizer).exists() or "--sanitize" in sanitizer
    caps = dict(chapters_enabled(rows))
    assert len(caps) == 8 and all(c.speed or "GPU" in c.note or "sm_90" in c.note for c in caps.values())


def test_a_failure_of_the_grader_itself_is_one_line_and_exit_4(files, monkeypatch, capsys):
    import flashtutor.grading
    from flashtutor.cli import main

    def broken(*args, **kwargs):
        raise RuntimeError("the grader's judge process died of signal 9\n(and a second line)")
    monkeypatch.setattr(flashtutor.grading, "grade", broken)
    monkeypatch.chdir(files)
    assert main(["grade", "04", "good.py", "--device", "cpu"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the grader failed: RuntimeError: the grader's judge process died" in err, err
    assert "--debug" in err


@pytest.mark.parametrize("key", ["01", "02", "03", "04", "05", "06", "07", "08"])
def test_doctor_and_the_grader_agree_on_a_cpu(key):
    """How the grader would run each chapter's solution here without a GPU is what doctor says it can do."""
    from flashtutor.chapters import get_chapter
    from flashtutor.env import machine
    from flashtutor.grading.judge import emulation
    from flashtutor.grading.submission import Submission
    ch = get_chapter(key)
    emulated, _ = emulation(ch, "cpu", Submission.at(ch.solution_path()))
    grader = "emulated" if emulated else {"triton": "interpreted", "torch": "cpu"}.get(ch.kind, "compiled only")
    assert capability(ch, dict(machine(), gpu=False, cc=None)).execution == grader


def test_the_package_reaches_its_submodules_as_attributes_without_importing_them_first():
    # chapter 5's solution calls ft.api.SUPPORTED_HEAD_DIMS after a bare `import flashtutor as ft`; run alone
    # (flashtutor bench 05 on the H100, 2026-11-26) that raised AttributeError where the notebook had imported api
    code = ("import flashtutor as ft, sys\n"
            "assert 'flashtutor.api' not in sys.modules\n"
            "print(ft.api.SUPPORTED_HEAD_DIMS)\n"
            "try:\n    ft.no_such_module\nexcept AttributeError as e:\n    print('AttributeError', e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "64" in run.stdout and "AttributeError module 'flashtutor' has no attribute 'no_such_module'" in run.stdout


def test_doctor_agrees_with_the_readme_and_prints_whole_paths():
    """The emulation row names the chapters the README names (1–3 and 5 emulated, 4, 6 and 8 interpreted), and no
    path is cut at rich's default 80 columns when the output goes to a pipe."""
    from flashtutor.env import cpu_chapters, doctor
    on_cpu = cpu_chapters()
    assert on_cpu["emulated"] == "1–3 and 5" and on_cpu["interpreted"] == "4, 6 and 8", on_cpu
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"chapters {on_cpu['emulated']} run through a CPU emulation" in readme
            and f"chapters {on_cpu['interpreted']} through Triton's interpreter" in readme)
    env = dict(os.environ, COLUMNS="80", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "flashtutor", "doctor"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "…" not in p.stdout
    paths = [w.strip("()") for _, _, d in doctor() for w in d.split() if w.strip("()").startswith("/")]
    assert paths and all(x in p.stdout for x in paths), [x for x in paths if x not in p.stdout]
    if "CPU emulation (g++)" in p.stdout and "yes" in p.stdout.split("CPU emulation (g++)")[1][:20]:
        row = " ".join(p.stdout.split("CPU emulation (g++)")[1].split("└")[0].replace("│", " ").split())
        assert "chapters 1–3 and 5" in row and "chapters 4, 6 and 8" in row, row
