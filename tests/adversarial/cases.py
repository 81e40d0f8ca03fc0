"""The adversarial corpus: every wrong or cheating submission, with the verdict the grader must give.

A case is a file here (cheats/, torch/, ch01_race/, ch01_decoy/), a one-line mutation of the chapter-1
solution (ch01_mutations.py), or a submission written at test time (the helper-module control). ``cause``
is the failure cause the report must name; ``says`` a phrase its messages must contain (either may list
alternatives separated by "|"). ``gpu`` cases
need a CUDA GPU; the others also run on a CPU (plain PyTorch, or Triton's interpreter). ``attack`` names
the class of the trusted-verdicts issue a case stands for:

1 re-binding the grader through sys.modules    2 reading the grader's state (frames, gc)
3 slowing the SDPA baseline                    4 detecting (or stopping) the tracer
5 library attention on rarely profiled settings 6 submitting the course's own kernels
7 matmuls through another library op           8 shortcuts that show only with large logits at D = 128
9 forging the worker's evidence (frames, gc, classes, json, the pipe)
10 moving work between the calls of a timed batch (amortization, cross-call batching, timed-only garbage)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flashtutor.chapters import ROOT, Chapter, SpeedRule

HERE = Path(__file__).parent

# Plain-PyTorch cheats: anti-cheat on, no compiled kernel needed (elementwise ops and reductions allowed).
CHEAT_CH = Chapter(key="X", slug="adversarial", title="adversarial corpus (plain PyTorch)", kind="torch",
                   check_sets=("cpu",), causal=True, seeds=1, large_logits=True)
# The same, with a speed rule: for cheats aimed at the timing (classes 1, 3, 4). The honest elementwise
# control takes ~100× SDPA's time at these shapes; the rule asks for 3×.
CHEAT_TIMED_CH = Chapter(key="XT", slug="adversarial-timed", title="adversarial corpus (timed)", kind="torch",
                         check_sets=("cpu",), time_sets=("adversarial",), causal=True, seeds=1,
                         speed=SpeedRule(max_ratio_vs_sdpa=3.0, calibration="a test rule, not calibrated"))


@dataclass(frozen=True)
class Case:
    name: str
    cause: str                 # the cause the report must name ("" for a control that must pass)
    says: str                  # a phrase the failure messages must contain
    gpu: bool                  # needs a GPU
    file: str | None = None    # a submission file under tests/adversarial/
    mutation: str | None = None  # or a chapter-1 mutation (ch01_mutations.MUTATIONS)
    make: str | None = None    # or a submission written at test time (see MAKERS)
    chapter: object = None     # default: chapter 01 for CUDA sources, CHEAT_CH for plain PyTorch
    timing: bool = False       # the verdict comes from the timed phase
    sanitize: bool = False     # the verdict comes from compute-sanitizer (grade --sanitize)
    attack: int = 0            # the attack class (1-8) of the trusted-verdicts issue, 0 for none

    @property
    def control(self) -> bool:
        return not self.cause

    def path(self, tmp: Path) -> Path:
        safe = "".join(c if c.isalnum() else "_" for c in self.name)
        if self.file:
            return HERE / self.file
        if self.make:
            return MAKERS[self.make](tmp / safe)
        from adversarial.ch01_mutations import materialize
        return materialize(self.mutation, tmp / safe)


def write_helper_control(folder: Path) -> Path:
    """A correct chapter-4 submission split in two: helper.py is the chapter-4 solution (its kernel and its
    launch()), attention.py only imports from it. The kernel is the learner's own, in a local module."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "helper.py").write_text((ROOT / "solutions/04_triton_online_softmax/attention.py").read_text())
    (folder / "attention.py").write_text(
        '"""The kernel lives in helper.py beside this file."""\n'
        "from helper import CONFIGS, INTERPRETER_CONFIG, interpreting, launch\n\n\n"
        "def attention(q, k, v, *, causal=False):\n"
        "    cfg = INTERPRETER_CONFIG if interpreting() else CONFIGS[q.shape[-1]]\n"
        "    return launch(q, k, v, causal=causal, **cfg)\n")
    return folder / "attention.py"


def write_batcher(name: str):
    """A timing cheat of batchers/ beside the chapter-4 solution as helper.py (and the shared _into.py)."""
    def make(folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "helper.py").write_text((ROOT / "solutions/04_triton_online_softmax/attention.py").read_text())
        for f in ("_into.py", f"{name}.py"):
            (folder / f).write_text((HERE / "batchers" / f).read_text())
        (folder / "attention.py").write_text(f"from {name} import attention  # noqa: F401\n")
        return folder / "attention.py"
    return make


MAKERS = {"helper_control": write_helper_control,
          **{n: write_batcher(n) for n in ("amortize", "timed_garbage", "cross_call_frames", "ungated_stream")}}

CASES = [
    # --- CUDA kernels (chapter 1): wrong answers and crashes -------------------------------------
    Case("compile error", "compile error", "attention.cu:", False, mutation="compile_error"),
    # Where a far out-of-bounds write lands depends on what else the GPU holds: past every mapping, the driver
    # reports an illegal address, a misaligned one or a failed launch (or the worker dies); inside the judge's
    # arena (the other slots of a large one: H100, 2026-11-24), nothing faults and the rows the kernel should have
    # written stay NaN — and the memory right after the output, which the judge fills with the never-written
    # pattern, changes ("wrote past the end of its output"). Either way a failure that says what went wrong; the
    # memcheck case below pins the write.
    Case("out-of-bounds write", "illegal memory access|misaligned address|kernel crashed (unspecified launch failure)"
         "|crash|tail|unwritten|memory error",
         "illegal memory access|misaligned address|unspecified launch failure|never written|the process"
         "|wrote past the end", True, mutation="oob_write"),
    Case("unwritten tail", "tail", "never written", True, mutation="unwritten_tail"),
    Case("NaN without max subtraction", "nan", "max", True, mutation="nan_no_max"),
    Case("wrong scale", "scale", "1/sqrt(D)", True, mutation="wrong_scale"),
    Case("ignores causal", "causal", "causal", True, mutation="ignores_causal"),
    Case("right only for B = 1", "batch", "(batch, head)", True, mutation="first_batch_only"),
    Case("fp16 accumulator (lower precision)", "precision", "fp32", True, mutation="fp16_accumulator"),
    Case("device-side assert (crash)", "device-side assert", "device-side assert", True, mutation="device_assert"),
    Case("hang", "timeout", "no answer within", True, mutation="hang"),
    Case("race (missing __syncthreads)", "race", "attention.cu:", True, file="ch01_race/attention.py", sanitize=True),
    Case("out-of-bounds write, found by memcheck", "memory error", "Invalid __global__ write", True,
         mutation="oob_write", sanitize=True),
    # --- library calls ---------------------------------------------------------------------------
    Case("calls SDPA", "forbidden", "scaled_dot_product_attention", False, file="cheats/sdpa_direct.py"),
    Case("calls SDPA through an alias", "forbidden", "scaled_dot_product_attention", False, file="cheats/sdpa_alias.py"),
    Case("calls SDPA through torch.ops.aten", "forbidden", "aten", False, file="cheats/sdpa_aten.py"),
    Case("calls SDPA through strings", "library kernel", "library", False, file="cheats/sdpa_hidden.py"),
    Case("torch.matmul + softmax", "forbidden", "matmul", False, file="cheats/matmul_softmax.py"),
    # --- stale, lazy, or imprecise answers ----------------------------------------------------------
    Case("returns the previous call's output", "unwritten|wrong", "NaN|pre-fill|expected", False,
         file="cheats/previous_output.py"),
    Case("returns a stale answer when timed", "timed output wrong", "timed call is wrong", True,
         file="cheats/stale_when_timed.py", timing=True),
    Case("computes in fp16 throughout", "precision", "fp32", False, file="cheats/lower_precision.py"),
    Case("patches the timer", "forbidden", "torch.cuda.Event.elapsed_time", False, file="cheats/patch_timer.py"),
    # --- the attack classes of the trusted-verdicts issue ------------------------------------------
    Case("re-binds the checker and rules through sys.modules, during calls only", "precision", "fp32", False,
         file="cheats/patch_grader_modules.py", attack=1),
    Case("patches the timer through strings, and is slow", "too slow", "SDPA's time", True,
         file="cheats/patch_timer_slow.py", chapter=CHEAT_TIMED_CH, timing=True, attack=1),
    Case("looks for the reference in frames and gc", "tampering|forbidden", "stack frames", False,
         file="cheats/steal_reference.py", attack=2),
    Case("slows SDPA down in its own process, and is slow", "too slow|forbidden", "SDPA's time|torch._C", True,
         file="cheats/slow_sdpa_baseline.py", chapter=CHEAT_TIMED_CH, timing=True, attack=3),
    Case("stops the tracer, then calls SDPA", "untraced", "could not be traced", False,
         file="cheats/stop_profiler_then_sdpa.py", attack=4),
    Case("calls SDPA whenever no profiler watches", "too slow", "SDPA's time", True,
         file="cheats/profiler_aware.py", chapter=CHEAT_TIMED_CH, timing=True, attack=4),
    Case("library attention only when causal, D = 128 or long", "library kernel", "library", False,
         file="cheats/library_on_rare_settings.py", attack=5),
    Case("imports the course's tuned kernel", "import error", "course's kernels", False,
         file="cheats/course_kernel_import.py", chapter="04", attack=6),
    Case("loads the chapter-4 solution by path", "not your kernel", "not compiled from your files", True,
         file="cheats/solution_by_path.py", chapter="04", attack=6),
    Case("launches the course's CUDA kernel behind a decoy of the same name", "not your kernel",
         "not built from your file", True, file="ch01_decoy/attention.py", chapter="01", attack=6),
    Case("the course's kernel on a side stream", "not your kernel", "not compiled from your files", True,
         file="cheats/side_stream.py", chapter="01", attack=6),
    Case("matmuls as convolutions, with a decoy kernel named conv", "library kernel", "conv", False,
         file="cheats/conv_matmul.py", attack=7),
    Case("skips the max subtraction at D = 128 only", "nan", "max", False, file="cheats/large_logits_d128.py",
         attack=8),
    # --- evidence the learner's code cannot forge (the worker is the learner's process) -------------
    # Each route of the red team's, on the CPU under the plain-PyTorch chapter (a forged trace would PASS there:
    # SDPA's op is the only thing it has to hide) and on a GPU under chapter 4 (where the forger renames
    # SDPA's kernels to a Triton kernel of its own). Either the forgery is refused (tampering) or it reaches
    # nothing the judge receives (library kernel).
    *[Case(f"forges the trace: {what}{where}", cause, says, gpu, file=f"forgers/{f}.py",
           chapter=ch, attack=9) for f, what, cause, says in (
        ("trace_frame", "wraps the tracer found through a stack frame", "tampering", "reads stack frames"),
        ("gc_walk", "walks gc's objects for the tracer", "tampering", "garbage collector"),
        ("trace_class", "re-binds the worker's tracer and encoders through sys.modules", "library kernel",
         "library"),
        ("profiler_classes", "patches torch's profiler classes", "library kernel", "library"),
        ("json_encoder", "patches json's encoder", "library kernel", "library"),
        ("pipe", "rewrites the pipe (Connection.send_bytes)", "library kernel", "library"))
      for gpu, ch, where in ((False, None, ""), (True, "04", " (chapter 4, GPU)"))],
    # Moving work between the calls of a timed batch (chapter 4's kernel, driven by a cheat).
    Case("computes the whole arena on a batch's first call", "calls not independent|below floor",
         "not independent|roofline", True, make="amortize", chapter="04", timing=True, attack=10),
    Case("returns unwritten outputs on half of a timed batch's calls", "timed output wrong", "timed call", True,
         make="timed_garbage", chapter="04", timing=True, attack=10),
    Case("finds the batch's other slots in the worker's frame", "tampering", "stack frames", False,
         make="cross_call_frames", chapter="04", attack=10),
    Case("runs its kernel on a side stream the gate does not hold", "outside the window|below floor",
         "before the gate|roofline", True, make="ungated_stream", chapter="04", timing=True, attack=10),
    # --- the grader itself survives ---------------------------------------------------------------
    Case("modifies its inputs", "inputs modified", "modified its input", False, file="torch/modifies_inputs.py"),
    Case("hangs (Python)", "timeout", "no answer within", False, file="torch/hang.py"),
    Case("crashes (segfault)", "crash", "signal 11", False, file="torch/segfault.py"),
    Case("runs out of GPU memory", "out of memory", "out of memory", True, file="torch/oom.py"),
    # --- controls: they must pass ------------------------------------------------------------------
    Case("control: honest, no library ops", "", "", False, file="cheats/honest_elementwise.py"),
    Case("control: the kernel in a helper module", "", "", False, make="helper_control", chapter="04"),
]


def chapter_for(case: Case):
    """Chapter-1 mutations are graded as chapter 01; plain-PyTorch cheats under the adversarial chapter."""
    if case.chapter is not None:
        return case.chapter
    if case.mutation or case.file == "ch01_race/attention.py":
        return "01"
    return CHEAT_CH


def found(report, case: Case) -> tuple[bool, str]:
    """Whether the report gives the case its verdict (names its cause and phrase; a control passes)."""
    said = f"verdict={report.verdict} causes={sorted(report.causes)}"
    if case.control:
        return report.verdict == "pass", said
    text = " ".join([report.summary] + report.failures)
    ok = (report.verdict == "fail" and any(c in report.causes for c in case.cause.split("|"))
          and any(s in text for s in case.says.split("|")))
    return ok, said
