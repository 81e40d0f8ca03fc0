"""The adversarial corpus: every wrong or cheating submission, with the verdict the grader must give.

A case is a file here (cheats/, torch/, ch01_race/) or a one-line mutation of the chapter-1 solution
(ch01_mutations.py). ``cause`` is the failure cause the report must name; ``says`` a phrase its
message must contain. ``gpu`` cases need a CUDA GPU (CUDA kernels, streams, timing); the others also
run on a CPU through the grader's plain-PyTorch path.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flashtutor.chapters import Chapter

HERE = Path(__file__).parent

# The chapter used for plain-PyTorch cheats: anti-cheat on, no compiled kernel needed.
CHEAT_CH = Chapter(key="X", slug="adversarial", title="adversarial corpus (plain PyTorch)", kind="torch",
                   check_sets=("cpu",), causal=True, seeds=1, large_logits=True)


@dataclass(frozen=True)
class Case:
    name: str
    cause: str                 # the cause the report must name
    says: str                  # a phrase the failure message must contain
    gpu: bool                  # needs a GPU
    file: str | None = None    # a submission file under tests/adversarial/
    mutation: str | None = None  # or a chapter-1 mutation (ch01_mutations.MUTATIONS)
    timing: bool = False       # the verdict comes from the timed phase
    sanitize: bool = False     # the verdict comes from compute-sanitizer (grade --sanitize)

    def path(self, tmp: Path) -> Path:
        if self.file:
            return HERE / self.file
        from adversarial.ch01_mutations import materialize
        return materialize(self.mutation, tmp / "".join(c if c.isalnum() else "_" for c in self.name))


CASES = [
    # --- CUDA kernels (chapter 1): wrong answers and crashes -------------------------------------
    Case("compile error", "compile error", "attention.cu:", False, mutation="compile_error"),
    Case("out-of-bounds write", "illegal memory access", "illegal memory access", True, mutation="oob_write"),
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
    # --- cheats ----------------------------------------------------------------------------------
    Case("calls SDPA", "forbidden", "scaled_dot_product_attention", False, file="cheats/sdpa_direct.py"),
    Case("calls SDPA through an alias", "forbidden", "scaled_dot_product_attention", False, file="cheats/sdpa_alias.py"),
    Case("calls SDPA through torch.ops.aten", "forbidden", "aten", False, file="cheats/sdpa_aten.py"),
    Case("calls SDPA through strings", "forbidden", "aten::scaled_dot_product_attention", False,
         file="cheats/sdpa_hidden.py"),
    Case("torch.matmul + softmax", "forbidden", "matmul", False, file="cheats/matmul_softmax.py"),
    Case("returns the previous call's output", "unwritten", "NaN", False, file="cheats/previous_output.py"),
    Case("returns a stale answer when timed", "timed output wrong", "timed call is wrong", True,
         file="cheats/stale_when_timed.py", timing=True),
    Case("computes in fp16 throughout", "precision", "fp32", False, file="cheats/lower_precision.py"),
    Case("patches the timer", "forbidden", "torch.cuda.Event.elapsed_time", False, file="cheats/patch_timer.py"),
    Case("patches the timer through strings", "tampering", "torch.cuda.Event.elapsed_time", False,
         file="cheats/patch_timer_hidden.py"),
    Case("patches the checker through strings", "tampering", "flashtutor.check.row_bounds", False,
         file="cheats/patch_checker_hidden.py"),
    Case("launches on a side stream", "forbidden", "side stream", True, file="cheats/side_stream.py", timing=True),
    Case("modifies its inputs", "inputs modified", "modified its input", False, file="torch/modifies_inputs.py"),
    Case("hangs (Python)", "timeout", "no answer within", False, file="torch/hang.py"),
    Case("crashes (segfault)", "crash", "signal 11", False, file="torch/segfault.py"),
    Case("runs out of GPU memory", "out of memory", "out of memory", True, file="torch/oom.py"),
]
CONTROL = "cheats/honest_elementwise.py"


def chapter_for(case: Case):
    """Chapter-1 (CUDA) mutations and GPU cheats are graded as chapter 01; plain-PyTorch cheats
    under the adversarial chapter (the chapter-1 grader would reject them for lacking a kernel)."""
    if case.mutation or case.file in ("cheats/side_stream.py", "ch01_race/attention.py"):
        return "01"
    return CHEAT_CH


def found(report, case: Case) -> tuple[bool, str]:
    """Whether the report names the case's cause and phrase, and a summary of what it said."""
    items = report.checks + report.profile + report.timings
    causes = {c.get("cause") for c in items if not c.get("ok", True) or c.get("cause")}
    causes |= {x for c in items for x in c.get("causes", [])}
    if report.summary == "compile error":
        causes.add("compile error")
    if any(f["severity"] == "forbidden" for f in report.static):
        causes.add("forbidden")
    text = " ".join([report.summary] + report.failures)
    ok = report.verdict == "fail" and case.cause in causes and case.says in text
    return ok, f"verdict={report.verdict} causes={sorted(c for c in causes if c)}"
