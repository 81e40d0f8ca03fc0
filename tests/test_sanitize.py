"""`flashtutor grade --sanitize` (flashtutor/grading/sanitize.py): the parser on compute-sanitizer's report
format, the plumbing with a stand-in tool, the "not run" paths (CPU); on the GPU, the solution is
clean, a planted out-of-bounds write and a missing __syncthreads() are found at their source line,
and the same tiled kernel with its barriers is clean and passes the grader."""
import json
import os
import stat
import sys
from pathlib import Path

import pytest

import flashtutor.grading.sanitize as san
from flashtutor.chapters import get_chapter
from flashtutor.loaders import load_cuda
from flashtutor.grading.sanitize import Finding, format_findings, parse, sanitize, select

from adversarial.ch01_mutations import materialize

ADV = Path(__file__).resolve().parent / "adversarial"
RACE = ADV / "ch01_race" / "attention.py"
TILED_OK = ADV / "ch01_tiled_ok" / "attention.py"
CU = "attention.cu"      # compute-sanitizer 2025.3 prints the file name of the line table, not its path

# ---------------------------------------------------------------- sample reports (hand-written) ---
MEMCHECK = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 2 bytes
=========     at naive_attention+0x2f0 in /tmp/x/attention.cu:47
=========     by thread (5,0,0) in block (3,0,0)
=========     Access to 0x7f3a1c0e4a0a is out of bounds
=========     and is 9,437,706 bytes after the nearest allocation at 0x7f3a1b600000 of size 86,784 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f3a1f] in libcuda.so.1
=========
========= Invalid __global__ write of size 2 bytes
=========     at naive_attention+0x2f0 in /tmp/x/attention.cu:47
=========     by thread (6,0,0) in block (3,0,0)
=========     Access to 0x7f3a1c0f0a0a is out of bounds
=========
========= Invalid __global__ read of size 4 bytes
=========     at void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int, T2)+0x1a0 in /pytorch/aten/src/ATen/native/cuda/CUDALoops.cuh:71
=========     by thread (0,0,0) in block (0,0,0)
=========
[flashtutor-sanitize] error: AcceleratorError: CUDA error: unspecified launch failure
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x2ef045] in libcuda.so.1
=========
[flashtutor-sanitize] kernels: naive_attention
========= Error: process didn't terminate successfully
========= Target application returned an error
========= ERROR SUMMARY: 4 errors
"""

RACECHECK_ANALYSIS = f"""\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at tiled_k_attention+0x1c0 in {CU}:47
=========     and Read access at tiled_k_attention+0x3b0 in {CU}:53 [8192 hazards]
=========     and Read access at tiled_k_attention+0x3f0 in {CU}:53 [8192 hazards]
=========
========= Error: Race reported between Read access at tiled_k_attention+0x3b0 in {CU}:53
=========     and Write access at tiled_k_attention+0x1c0 in {CU}:47 [4096 hazards]
=========
========= Warning: Race reported between Read access at tiled_k_attention+0x3b0 in {CU}:53
=========     and Write access at tiled_k_attention+0x1c0 in {CU}:47 [12 hazards]
=========
[flashtutor-sanitize] kernels: tiled_k_attention
[flashtutor-sanitize] done
========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)
"""

RACECHECK_HAZARD = f"""\
========= COMPUTE-SANITIZER
========= Error: Potential RAW hazard detected at __shared__ 0x80 in block (1,0,0) :
=========     Write Thread (33,0,0) at tiled_k_attention+0x1c0 in {CU}:47
=========     Read Thread (2,0,0) at tiled_k_attention+0x3b0 in {CU}:53
=========     Current Value : 0, Incoming Value : 15360
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

SYNCCHECK = f"""\
========= COMPUTE-SANITIZER
========= Barrier error detected. Divergent thread(s) in block
=========     at tiled_k_attention+0x2d0 in {CU}:50
=========     by thread (10,0,0) in block (1,0,0)
=========
========= ERROR SUMMARY: 1 error
"""

OLD_FORMAT_NO_LINES = """\
========= Invalid __shared__ read of size 4 bytes
=========     at 0x00000070 in /home/u/k.cu:6:bad_kernel(int*)
=========     by thread (0,0,0) in block (0,0,0)
=========
========= Invalid __global__ write of size 2 bytes
=========     at naive_attention+0x2f0
=========     by thread (1,0,0) in block (0,0,0)
=========
"""

RACECHECK_CLEAN = """\
========= COMPUTE-SANITIZER
[flashtutor-sanitize] kernels: naive_attention
[flashtutor-sanitize] files: /w/solutions/01_naive_cuda/attention.cu
[flashtutor-sanitize] done
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

CLEAN = """\
========= COMPUTE-SANITIZER
[flashtutor-sanitize] kernels: naive_attention
[flashtutor-sanitize] done
========= ERROR SUMMARY: 0 errors
"""


# ---------------------------------------------------------------- parser --------------------------
def test_memcheck_report_parsed_filtered_and_deduplicated():
    found = parse("memcheck", MEMCHECK)
    assert [f.kind for f in found] == ["Invalid __global__ write of size 2 bytes"] * 2 + \
        ["Invalid __global__ read of size 4 bytes"]          # "Program hit …" and the summary are no findings
    f = found[0]
    assert (f.tool, f.kernel, f.location) == ("memcheck", "naive_attention", "/tmp/x/attention.cu:47")
    assert "by thread (5,0,0) in block (3,0,0)" in f.detail and "out of bounds" in f.detail
    assert "Host Frame" not in f.detail
    assert found[2].location.endswith("CUDALoops.cuh:71")
    kept, foreign = select(found, {"naive_attention"})
    assert [k.location for k in kept] == ["/tmp/x/attention.cu:47"] and foreign == 1   # torch's kernel left out
    kept, _ = select(found, set())                             # learner's kernels unknown: keep everything
    assert len(kept) == 2
    assert san._child_marks(MEMCHECK) == ({"naive_attention"},
                                          "AcceleratorError: CUDA error: unspecified launch failure", False, [])


def test_racecheck_analysis_report():
    found = parse("racecheck", RACECHECK_ANALYSIS)
    assert [f.kind for f in found] == ["race", "race", "race warning"]
    assert [f.location for f in found] == [f"{CU}:47", f"{CU}:53", f"{CU}:53"]
    assert all(f.kernel == "tiled_k_attention" for f in found)
    assert f"Read access at tiled_k_attention+0x3b0 in {CU}:53" in found[0].detail
    kept, _ = select(found, {"tiled_k_attention"}, max_findings=2)
    assert len(kept) == 2
    assert san._child_marks(RACECHECK_ANALYSIS)[2] is True
    assert san._child_marks(RACECHECK_CLEAN)[3] == ["/w/solutions/01_naive_cuda/attention.cu"]


def test_file_names_resolved_to_the_learners_paths():
    files = ["/a/ch01_race/attention.cu", "/a/ch01_race/helpers.cu"]
    assert san.resolve_location("attention.cu:47", files) == "/a/ch01_race/attention.cu:47"
    assert san.resolve_location("helpers.cu:3", files) == "/a/ch01_race/helpers.cu:3"
    assert san.resolve_location("other.cu:3", files) == "other.cu:3"
    assert san.resolve_location("/abs/attention.cu:9", files) == "/abs/attention.cu:9"
    assert san.resolve_location("", files) == ""


def test_racecheck_hazard_report():
    (f,) = parse("racecheck", RACECHECK_HAZARD)
    assert f.kind == "race (RAW hazard)" and f.location == f"{CU}:47" and f.kernel == "tiled_k_attention"
    assert "Read Thread (2,0,0)" in f.detail


def test_synccheck_report():
    (f,) = parse("synccheck", SYNCCHECK)
    assert f.kind == "barrier error: Divergent thread(s) in block"
    assert (f.kernel, f.location) == ("tiled_k_attention", f"{CU}:50")


def test_older_format_and_no_line_info():
    a, b = parse("memcheck", OLD_FORMAT_NO_LINES)
    assert (a.kind, a.kernel, a.location) == ("Invalid __shared__ read of size 4 bytes", "bad_kernel(int*)",
                                              "/home/u/k.cu:6")
    assert (b.kernel, b.location) == ("naive_attention", "")
    assert select([a, b], {"bad_kernel"})[0] == [a]


def test_kernel_name_matching():
    assert san.is_learner_kernel("void ns::my_kernel<64>(const __half *, int)", {"my_kernel"})
    assert san.is_learner_kernel("my_kernel(int*)", {"_Z9my_kernelPi"})
    assert not san.is_learner_kernel("void at::native::elementwise_kernel<128, 2>(int)", {"naive_attention"})


def test_format_findings_names_file_line_and_source(tmp_path):
    cu = tmp_path / "attention.cu"
    cu.write_text("\n".join(f"// line {i}" for i in range(1, 60)))
    f = Finding("memcheck", "Invalid __global__ write of size 2 bytes", "naive_attention", f"{cu}:47",
                "Invalid __global__ write of size 2 bytes\nat naive_attention+0x2f0\nby thread (5,0,0) in block (3,0,0)")
    res = {"verdict": "findings", "summary": "compute-sanitizer found 1 memcheck finding",
           "tools": {"memcheck": {"ran": True, "findings": [f.to_dict()], "error": None, "seconds": 12.5},
                     "racecheck": {"ran": True, "findings": [], "error": None, "seconds": 20.0},
                     "synccheck": {"ran": False, "findings": [], "error": "timed out after 300 s", "seconds": 300.0}}}
    text = format_findings(res)
    assert f"at {cu}:47" in text and "47 | // line 47" in text and "by thread (5,0,0)" in text
    assert "racecheck (20.0 s): clean" in text and "synccheck (300.0 s): not run — timed out" in text
    json.dumps(res)


# ---------------------------------------------------------------- "not run" and plumbing ----------
def test_not_run_without_tool_or_gpu(monkeypatch):
    monkeypatch.setattr(san, "find_tool", lambda name: None)
    r = sanitize("01", solution=True)
    assert r["verdict"] == "not run" and "compute-sanitizer not found" in r["summary"]
    assert set(r["tools"]) == {"memcheck", "racecheck", "synccheck"}
    assert not any(t["ran"] for t in r["tools"].values())
    monkeypatch.setattr(san, "find_tool", lambda name: "/usr/local/cuda/bin/compute-sanitizer")
    monkeypatch.setattr(san, "_gpu_available", lambda: False)
    r = sanitize("01", solution=True)
    assert r["verdict"] == "not run" and "no CUDA GPU" in r["summary"]
    assert "NOT RUN" in format_findings(r)
    assert sanitize("01", "/nonexistent/attention.py")["verdict"] == "not run"
    assert sanitize("01", solution=True, tools=("initcheck2",))["verdict"] == "not run"


@pytest.mark.skipif(san._gpu_available(), reason="checks a machine without a GPU")
def test_not_run_here_without_gpu():
    r = sanitize("01", solution=True)           # never raises, whatever this machine has
    assert r["verdict"] == "not run"


def _fake_tool(tmp_path, reports: dict, sleep: float = 0.0) -> str:
    """A stand-in compute-sanitizer: prints a canned report for the --tool it is given."""
    for tool, text in reports.items():
        (tmp_path / f"{tool}.txt").write_text(text)
    script = tmp_path / "compute-sanitizer"
    script.write_text(f"#!/bin/sh\nsleep {sleep}\ncat {tmp_path}/$2.txt\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_sanitize_pipeline_with_stand_in_tool(monkeypatch, tmp_path):
    sol = get_chapter("01").solution_path()
    memcheck = MEMCHECK.replace("/tmp/x/attention.cu", "attention.cu")      # as the tool prints it
    fake = _fake_tool(tmp_path, {"memcheck": memcheck, "racecheck": RACECHECK_CLEAN, "synccheck": CLEAN})
    monkeypatch.setattr(san, "find_tool", lambda name: fake)
    monkeypatch.setattr(san, "_gpu_available", lambda: True)
    r = sanitize("01", solution=True, keep_output=True)
    assert r["verdict"] == "findings", r
    m = r["tools"]["memcheck"]
    assert m["ran"] and len(m["findings"]) == 1 and m["ignored"] == 1      # torch's kernel left out
    assert m["findings"][0]["location"] == f"{sol.with_suffix('.cu')}:47"
    assert r["tools"]["racecheck"] == {**r["tools"]["racecheck"], "ran": True, "findings": [], "error": None}
    text = format_findings(r)
    assert "naive_attention" in text and "attention.cu:47" in text
    json.dumps(r)
    r = sanitize("01", solution=True, tools=("racecheck", "synccheck"))
    assert r["verdict"] == "clean", r


def test_sanitize_timeout_is_a_result(monkeypatch, tmp_path):
    fake = _fake_tool(tmp_path, {"memcheck": CLEAN}, sleep=30)
    monkeypatch.setattr(san, "find_tool", lambda name: fake)
    monkeypatch.setattr(san, "_gpu_available", lambda: True)
    r = sanitize("01", solution=True, tools=("memcheck",), timeout=1)
    assert r["verdict"] == "not run" and "timed out" in r["summary"]
    assert r["tools"]["memcheck"]["seconds"] < 15


def test_command_line():
    cmd = san._command("/cs", "racecheck", "01", Path("/a/attention.py"))
    assert cmd[:3] == ["/cs", "--tool", "racecheck"] and "--racecheck-report" in cmd
    assert cmd[cmd.index("--report-api-errors") + 1] == "no"     # else start-up probes fill the print limit
    assert cmd[-5:] == [sys.executable, "-m", "flashtutor.grading.sanitize", "01", "/a/attention.py"]


@pytest.mark.parametrize("defines", [None, {"RACE_FIXED": 1}], ids=["race", "fixed"])
def test_race_kernels_compile_for_sm90a(defines):
    from flashtutor.sass import disassemble
    m = load_cuda(RACE.with_suffix(".cu"), arch="sm_90a", defines=defines)
    sass = disassemble(m.cubin)["tiled_k_attention"]
    barriers = sum(1 for i in sass if i.split()[0].startswith("BAR"))
    assert barriers == (2 if defines else 0)      # the two __syncthreads() are the only difference


def test_race_launchers_share_one_source():
    assert "RACE_FIXED" in TILED_OK.read_text() and "ch01_race" in TILED_OK.read_text()
    assert "#ifdef RACE_FIXED" in RACE.with_suffix(".cu").read_text()


# ---------------------------------------------------------------- GPU tier ------------------------
def _dump(name: str, result: dict):
    d = os.environ.get("SANITIZE_DUMP")
    if d:
        Path(d).mkdir(parents=True, exist_ok=True)
        Path(d, f"{name}.json").write_text(json.dumps({**result, "formatted": format_findings(result)}, indent=1))


@pytest.mark.usefixtures("gpu_shared")
@pytest.mark.gpu
def test_solution_is_clean():
    r = sanitize("01", solution=True, keep_output=True)
    _dump("solution", r)
    assert r["verdict"] == "clean", format_findings(r)
    assert all(t["ran"] for t in r["tools"].values())


@pytest.mark.usefixtures("gpu_shared")
@pytest.mark.gpu
def test_oob_write_found_at_its_line(tmp_path):
    path = materialize("oob_write", tmp_path / "oob")
    r = sanitize("01", path, tools=("memcheck",), keep_output=True)
    _dump("oob_write", r)
    fs = r["tools"]["memcheck"]["findings"]
    assert r["verdict"] == "findings", (format_findings(r), r["tools"]["memcheck"].get("output", "")[-3000:])
    assert fs[0]["kind"].startswith("Invalid __global__ write") and fs[0]["kernel"] == "naive_attention"
    assert "attention.cu:" in fs[0]["location"], fs
    line = int(fs[0]["location"].rsplit(":", 1)[1])
    assert "O[(size_t)r * S * D + d]" in path.with_suffix(".cu").read_text().splitlines()[line - 1]


@pytest.mark.usefixtures("gpu_shared")
@pytest.mark.gpu
def test_missing_syncthreads_found_by_racecheck():
    r = sanitize("01", RACE, tools=("racecheck", "synccheck"), keep_output=True)
    _dump("race", r)
    fs = r["tools"]["racecheck"]["findings"]
    assert fs and fs[0]["kind"].startswith("race"), (format_findings(r), r["tools"]["racecheck"].get("output", "")[-3000:])
    assert "ch01_race/attention.cu:" in fs[0]["location"] and fs[0]["kernel"] == "tiled_k_attention"


@pytest.mark.gpu
def test_tiled_kernel_with_barriers_is_clean_and_passes():
    from flashtutor import grade
    r = sanitize("01", TILED_OK, keep_output=True)
    _dump("tiled_ok", r)
    assert r["verdict"] == "clean", format_findings(r)
    rep = grade("01", str(TILED_OK), timing=False, sets=("seed", "odd"), seeds=1, progress=False)
    assert rep.verdict == "pass", rep.failures[:5]
