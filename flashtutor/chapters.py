"""The chapters the grader knows: where their files are, which shapes, which thresholds."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

ROOT = Path(os.environ.get("FLASHTUTOR_ROOT", Path(__file__).resolve().parent.parent))


@dataclass(frozen=True)
class SpeedRule:
    """A pass/fail speed threshold, calibrated on the GPU from the chapter's solution.

    ``max_ratio_vs_sdpa``: learner time / SDPA time must be at most this on every timed shape.
    ``min_speedup_vs``: the learner must be at least this many times faster than the module named by
    ``baseline`` (an earlier chapter's reference), timed in the same rounds. ``basis``: GPU time per call with
    the calls queued back to back ("stream"), or replayed from CUDA graphs on both sides ("graph": the
    GPU-side gaps between launches removed too, for chapters about small problems). Every rule is
    calibrated from the solution's grade report on a GPU (``calibrated_from``), with a margin of at least
    1.3; tests/test_calibration.py checks the numbers against those files."""
    max_ratio_vs_sdpa: float | None = None
    min_speedup_vs: float | None = None
    baseline: str | None = None    # "flashtutor.kernels.k01_naive_three_pass"
    basis: str = "stream"          # "stream": calls queued back to back; "graph": replayed from CUDA graphs
    calibration: str = ""          # where the number comes from (file and GPU), in words
    calibrated_from: tuple[str, ...] = ()   # results files (grade reports of the solution) the rule is checked against


@dataclass(frozen=True)
class SassRule:
    """What the compiled kernels must show (checked on the cubin, so also without a GPU)."""
    require: tuple[str, ...] = ()          # opcode families that must appear, e.g. ("HMMA",)
    no_spills: bool = False                # no local-memory spill instructions (STL/LDL of spills)


@dataclass(frozen=True)
class Chapter:
    key: str                       # "01"
    slug: str                      # "01_naive_cuda"
    title: str
    kind: str                      # "cuda" (NVRTC), "triton", "torch" (plain PyTorch: tests only)
    entry: str = "attention.py"    # the module exposing attention(q, k, v, *, causal=False)
    files: tuple[str, ...] = ("attention.py",)   # exercise files generated from the solution
    check_sets: tuple[str, ...] = ("seed", "small", "odd")
    time_sets: tuple[str, ...] = ("seed", "small")
    causal: bool = True
    seeds: int = 2                 # fresh inputs per shape
    large_logits: bool = True      # one extra case with logits large enough to overflow exp()
    graph_time: bool = False
    speed: SpeedRule = field(default_factory=SpeedRule)
    reference: str | None = None   # "flashtutor.kernels.k01_naive_three_pass": the chapter's reference
    excluded: str = ""             # which shape sets are left out, and why (shown in the report)
    anticheat: bool = True         # static scan + every call traced (flashtutor.grading.scan, .trace)
    allowed: frozenset = frozenset()          # names the static scan allows in this chapter
    allowed_kernels: str | None = None        # regex of library kernel names allowed at run time
    sass: SassRule | None = None
    setup_timeout: float | None = None        # seconds for compiling and importing (None: the grader's default)
    mode: str = "forward"          # "backward": the exercise is forward() -> (o, lse) and backward() -> (dq, dk, dv)

    @property
    def exercise_dir(self) -> Path:
        return ROOT / "chapters" / self.slug

    @property
    def solution_dir(self) -> Path:
        return ROOT / "solutions" / self.slug

    def exercise_path(self) -> Path:
        return self.exercise_dir / self.entry

    def solution_path(self) -> Path:
        return self.solution_dir / self.entry

    # The ladder's registry (below CHAPTERS): what bench, the tests, `doctor` and the book read.
    @property
    def short(self) -> str:
        """The chapter's name from its folder: "02 tiling"."""
        return f"{self.key} {self.slug.split('_', 1)[-1].replace('_', ' ')}"

    @property
    def steps(self) -> tuple["Step", ...]:
        """The chapter's rungs of the ladder, in order (:data:`STEPS`)."""
        return STEPS.get(self.key, ())

    def step(self, which: str) -> "Step":
        """One of :attr:`steps`, by id ("2a") or label ("a coalesced")."""
        for s in self.steps:
            if which in (s.id, s.label):
                return s
        raise KeyError(f"chapter {self.key} has no step {which!r}; steps: {', '.join(s.id for s in self.steps)}")

    @property
    def bench(self) -> "Bench | None":
        """What ``flashtutor bench NN`` runs for this chapter (:data:`BENCHES`), or None."""
        return BENCHES.get(self.key)

    @property
    def calibration_files(self) -> tuple[Path, ...]:
        """The results files the speed rule is calibrated from (``speed.calibrated_from``), as paths."""
        return tuple(ROOT / f for f in self.speed.calibrated_from)


CHAPTERS: dict[str, Chapter] = {
    "01": Chapter(
        key="01", slug="01_naive_cuda", title="Naive attention in CUDA", kind="cuda",
        files=("attention.py", "attention.cu"),
        reference="flashtutor.kernels.k01_naive_three_pass",
        excluded=("the 'large' set (S 4096/8192): a naive kernel needs seconds per call there and an fp32 "
                  "score matrix of up to 17 GB; chapter 2 onwards grade it"),
    ),
    "02": Chapter(
        key="02", slug="02_tiling", title="Tiling: shared memory, coalescing, online softmax", kind="cuda",
        files=("attention.py", "attention.cu"),
        speed=SpeedRule(min_speedup_vs=14.0, baseline="flashtutor.kernels.k01_naive_three_pass", calibration=(
            "21.24 / 1.5: the solution's smallest speed-up over chapter 1's reference, GPU time per call, was "
            "21.24× (B8 H16 S128 D64; 21–26× over the seed and small sets) on an NVIDIA H100 80GB HBM3 and 20.99× "
            "(the same shape) on an NVIDIA H200; both in the GPU tier's run (`pytest -m gpu`), torch 2.11, "
            "2026-11-26"),
            calibrated_from=("results/grade02-solution-h100-2026-11-26.json",
                             "results/grade02-solution-h200-2026-11-26.json")),
        reference="flashtutor.kernels.k02c_online_softmax",
        excluded="the 'large' set: scalar fp32 math needs up to a second per call there; chapter 3 grades it",
    ),
    "03": Chapter(
        key="03", slug="03_wmma", title="Tensor cores with WMMA", kind="cuda",
        files=("attention.py", "attention.cu"),
        check_sets=("seed", "small", "odd", "large", "odd_long"),
        speed=SpeedRule(max_ratio_vs_sdpa=16.2, calibration=(
            "1.5 × 10.79, the solution's worst ratio of GPU time per call to SDPA's (B32 H16 S512 D64; 7.46× at the "
            "seed shape) on an NVIDIA H100 80GB HBM3; 10.83× at the same shape on an NVIDIA H200; both in the GPU "
            "tier's run (`pytest -m gpu`), torch 2.11, cuDNN 9.19, 2026-11-26"),
            calibrated_from=("results/grade03-solution-h100-2026-11-26.json",
                             "results/grade03-solution-h200-2026-11-26.json")),
        sass=SassRule(require=("HMMA",), no_spills=True),
        reference="flashtutor.kernels.k03c_swizzle",
    ),
    "04": Chapter(
        key="04", slug="04_triton_online_softmax", title="FlashAttention-2 in Triton", kind="triton",
        files=("attention.py",),
        check_sets=("seed", "small", "odd", "large", "odd_long"), time_sets=("seed", "large"), causal=True,
        speed=SpeedRule(max_ratio_vs_sdpa=2.2, calibration=(
            "1.5 × 1.44, the solution's worst ratio of GPU time per call to SDPA's (B2 H32 S8192 D128; 1.43× at B4 "
            "H32 S4096 D128, 1.06× at the seed shape) on an NVIDIA H100 80GB HBM3; 1.41× at both D128 shapes on an "
            "NVIDIA H200; both in the GPU tier's run (`pytest -m gpu`), torch 2.11, cuDNN 9.19, triton 3.6, "
            "2026-11-26"),
            calibrated_from=("results/grade04-solution-h100-2026-11-26.json",
                             "results/grade04-solution-h200-2026-11-26.json")),
        reference="flashtutor.kernels.k04_triton_fa2_hopper",
    ),
    "05": Chapter(
        key="05", slug="05_cutlass_three_kernel", title="Three kernels: CUTLASS GEMMs and a softmax", kind="cutlass",
        files=("attention.py", "softmax.cu"),
        check_sets=("seed", "small", "odd"), time_sets=("seed", "small"),
        speed=SpeedRule(max_ratio_vs_sdpa=10.6, calibration=(
            "1.4 × 7.49 (rounded up), the solution's worst ratio of GPU time per call to SDPA's (B32 H16 S512 D64; "
            "5.29× at the seed shape) on an NVIDIA H100 80GB HBM3; 5.23× at the same shape on an NVIDIA H200, so "
            "the H100 sets the bound; both in the GPU tier's run (`pytest -m gpu`, every timed shape alone on the "
            "GPU), torch 2.11, cuDNN 9.19, 2026-11-26"),
            calibrated_from=("results/grade05-solution-h100-2026-11-26.json",
                             "results/grade05-solution-h200-2026-11-26.json")),
        sass=SassRule(no_spills=True),
        reference="flashtutor.kernels.k05_three_kernel",
        allowed_kernels=r"cutlass|flashtutor",
        setup_timeout=1800.0,      # the CUTLASS GEMMs compile with nvcc at setup: ~30 s on 16 cores, minutes on 4
    ),
    "06": Chapter(
        key="06", slug="06_batching", title="Small problems: batching, launch overhead, CUDA graphs", kind="triton",
        files=("attention.py",),
        check_sets=("seed", "small", "odd"), time_sets=("seed", "short"), graph_time=True,
        speed=SpeedRule(max_ratio_vs_sdpa=1.2, basis="graph", calibration=(
            "the solution took 0.64–0.79× SDPA's graph-replayed GPU time per call at S=128 (B 8–32) and 0.80× at "
            "the seed shape on an NVIDIA H100 80GB HBM3, 0.61–0.80× on an NVIDIA H200 (at most 0.80× on both); "
            "1.2 leaves a margin of 1.5; both in the GPU tier's run (`pytest -m gpu`), torch 2.11, cuDNN 9.19, "
            "triton 3.6, 2026-11-26"),
            calibrated_from=("results/grade06-solution-h100-2026-11-26.json",
                             "results/grade06-solution-h200-2026-11-26.json")),
        reference="flashtutor.kernels.k06_multihead",
    ),
    "07": Chapter(
        key="07", slug="07_hopper", title="Hopper: TMA, wgmma, warp specialization", kind="cuda",
        files=("attention.py", "attention.cu"),
        check_sets=("seed", "small", "odd", "large", "odd_long"), time_sets=("seed", "large"),
        speed=SpeedRule(max_ratio_vs_sdpa=1.7, calibration=(
            "1.4 × 1.21, the solution's worst ratio of GPU time per call to SDPA's (B4 H32 S4096 D64; 1.05× at the "
            "seed shape, 1.09–1.11× at D128) on an NVIDIA H100 80GB HBM3, and 1.21× (the same shape) on an NVIDIA "
            "H200; both in the GPU tier's run (`pytest -m gpu`), torch 2.11, cuDNN 9.19, 2026-11-26. The solution "
            "is step 7b; the chapter's goal, at most SDPA's time at D128, is its last step's (7c), so the rule "
            "bounds the exercise's solution, not that goal"),
            calibrated_from=("results/grade07-solution-h100-2026-11-26.json",
                             "results/grade07-solution-h200-2026-11-26.json")),
        sass=SassRule(require=("HGMMA", "UTMALDG"), no_spills=True),   # wgmma and TMA loads, as cuobjdump -sass prints them
        reference="flashtutor.kernels.k07b_warp_specialized",
    ),
    "08": Chapter(
        key="08", slug="08_backward", title="The backward pass: gradients from the log-sum-exp", kind="triton",
        files=("attention.py",), mode="backward", reference="flashtutor.kernels.k08b_backward_tuned",
        check_sets=("seed", "odd", "odd_long"), time_sets=("seed", "large"), seeds=1,
        speed=SpeedRule(max_ratio_vs_sdpa=2.1, calibration=(
            "1.5 × 1.40, the worst ratio of the solution's backward GPU time per call to SDPA's backward (cuDNN, "
            "torch.autograd.grad on SDPA's output; B2 H32 S8192 D128) with the tiles of its sweep "
            "(scripts/ch08_sweep.py), on an NVIDIA H100 80GB HBM3 in the GPU tier (torch 2.11, cuDNN 9.19, "
            "triton 3.6, 2026-11-27). On an NVIDIA H200 the swept tiles took 1.28–1.42× (results/"
            "grade08-solution-h200-2026-11-27.json, same day and software); the first tile guess took up to 3.26×"),
            calibrated_from=("results/gpu-tier-h100-2026-11-27-f/grade08-solution-h100-2026-11-27.json",)),
        excluded=("the 'small' set (S ≤ 512, B 8–32): the 'odd' set has shorter and longer rows with B and H > 1, and "
                  "every case here is two calls (backward, then forward) against a float64 reference"),
    ),
}


def get_chapter(key) -> Chapter:
    if isinstance(key, Chapter):
        return key
    k = str(key).zfill(2)
    for c in CHAPTERS.values():
        if k in (c.key, c.slug) or str(key) == c.slug:
            return c
    raise KeyError(f"unknown chapter {key!r}; known: {', '.join(CHAPTERS)}")


# ---------------------------------------------------------------- the ladder: every step, where it lives
@dataclass(frozen=True)
class Step:
    """One rung of the ladder: a module exposing ``attention(q, k, v, *, causal=False)``.

    ``id``: the chapter's number and the step's letter ("2a"); ``label``: the name the chapter's tables and
    results files give it ("a coalesced"); ``module``: the importable module, or the path of a Python file
    (relative to the course's root) for a step that is a solution file only; ``source``: the file holding
    the step's kernel and header when that is not the module's own file (a sibling ``.cu``, or the solution
    the module loads); ``solution``: the step is the chapter's solution. Its idea and its limitation are not
    typed here: :attr:`header` reads them from the headers of those files (DESIGN.md §2)."""
    id: str
    label: str
    module: str
    source: str | None = None
    solution: bool = False

    @property
    def chapter(self) -> str:
        return re.match(r"\d+", self.id).group().zfill(2)

    @property
    def path(self) -> Path:
        """The step's Python file."""
        if self.module.endswith(".py"):
            return ROOT / self.module
        return ROOT.joinpath(*self.module.split(".")).with_suffix(".py")

    @property
    def kernel(self) -> Path:
        """The file that holds the kernel (the Python file itself for a Triton step)."""
        return ROOT / self.source if self.source else self.path

    @property
    def header(self) -> "Header":
        return read_header(self.path, self.kernel)

    @property
    def idea(self) -> str:
        return self.header.idea

    @property
    def limitation(self) -> str:
        return self.header.limitation

    def load(self):
        """The step's module (imported on first use; a file-only step under a name of its own)."""
        import importlib
        import importlib.util
        import sys
        if not self.module.endswith(".py"):
            return importlib.import_module(self.module)
        name = f"flashtutor_step_{self.id}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, self.path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
        return sys.modules[name]


@dataclass(frozen=True)
class Bench:
    """What ``flashtutor bench NN`` runs (:mod:`flashtutor.bench.runner`): ``module``'s ``run(r)``, writing
    ``results/<name>-<gpu>-<date>.json``; the shape sets its correctness pass checks and its tables time, and
    the extra (B, H, S, D) shapes of its series; ``dry``: it can run on tiny shapes through Triton's
    interpreter without a GPU (a test of the script, not a measurement)."""
    module: str
    name: str
    check_sets: tuple[str, ...] = ()
    time_sets: tuple[str, ...] = ()
    shapes: tuple[tuple[int, int, int, int], ...] = ()
    dry: bool = False


_K = "flashtutor.kernels."
STEPS: dict[str, tuple[Step, ...]] = {
    "01": (Step("1a", "reference", _K + "k01_naive_three_pass", "flashtutor/kernels/k01_naive_three_pass.cu"),
           Step("1b", "solution", "solutions/01_naive_cuda/attention.py", "solutions/01_naive_cuda/attention.cu",
                solution=True)),
    "02": (Step("2a", "a coalesced", _K + "k02a_coalesced", "flashtutor/kernels/k02a_coalesced.cu"),
           Step("2b", "b smem tiles", _K + "k02b_smem_tiles", "flashtutor/kernels/k02b_smem_tiles.cu"),
           Step("2c", "c online softmax", _K + "k02c_online_softmax", "solutions/02_tiling/attention.cu",
                solution=True)),
    "03": (Step("3a", "a wmma", _K + "k03a_wmma", "solutions/03_wmma/attention.cu", solution=True),
           Step("3b", "b + cp.async", _K + "k03b_cp_async", "flashtutor/kernels/k03b_cp_async.cu"),
           Step("3c", "c + padding", _K + "k03c_swizzle", "flashtutor/kernels/k03c_swizzle.cu")),
    "04": (Step("4a", "teaching", _K + "k04_triton_fa2", "solutions/04_triton_online_softmax/attention.py",
                solution=True),
           Step("4b", "hopper", _K + "k04_triton_fa2_hopper")),
    "05": (Step("5", "3-kernel (reference)", _K + "k05_three_kernel", "flashtutor/kernels/k05_gemm.cu",
                solution=True),),
    "06": (Step("6a", "multihead", _K + "k06_multihead"),
           Step("6b", "split-KV", _K + "k06_split_kv"),
           Step("6c", "solution", "solutions/06_batching/attention.py", solution=True)),
    "07": (Step("7a", "7a", _K + "k07a_wgmma_tma", "flashtutor/kernels/k07a_wgmma_tma.cu"),
           Step("7b", "7b", _K + "k07b_warp_specialized", "solutions/07_hopper/attention.cu", solution=True),
           Step("7c", "7c", _K + "k07c_pingpong", "flashtutor/kernels/k07c_pingpong.cu")),
    "08": (Step("8a", "teaching", _K + "k08a_backward", "solutions/08_backward/attention.py", solution=True),
           Step("8b", "tuned", _K + "k08b_backward_tuned"),
           Step("8c", "TMA fold", _K + "k08c_backward_tma"),
           Step("8d", "warp-specialized", _K + "k08d_backward_ws", "flashtutor/kernels/k08d_backward_ws.cu")),
}
# Files of flashtutor/kernels/ that a chapter uses and that are not a step of their own.
KERNEL_FILES: dict[str, tuple[str, ...]] = {
    "07": ("flashtutor/kernels/k07_probes.py", "flashtutor/kernels/k07_probes.cu"),
}
BENCHES: dict[str, Bench] = {
    "02": Bench("flashtutor.bench.ch02", "bench02", check_sets=("seed", "small", "odd"), time_sets=("seed", "small")),
    "03": Bench("flashtutor.bench.ch03", "bench03", check_sets=("seed", "small", "odd", "large"),
                time_sets=("seed", "small", "large")),
    "04": Bench("flashtutor.bench.ch04", "bench04", check_sets=("cpu", "odd", "seed", "small", "large"),
                time_sets=("seed", "large"), dry=True),
    "05": Bench("flashtutor.bench.ch05", "bench05", check_sets=("seed", "small", "odd"), time_sets=("seed", "small"),
                shapes=tuple((1, 16, S, 64) for S in (512, 1024, 2048, 4096, 8192, 16384))),   # the crossover series
    "06": Bench("flashtutor.bench.ch06", "bench06", check_sets=("seed", "small", "odd"),
                shapes=tuple((B, 16, S, 64) for S in (128, 256, 512) for B in (8, 16, 32))
                + tuple((1, 16, S, 64) for S in (1024, 4096, 16384)), dry=True),    # the seeds' grid, then one sequence
    "07": Bench("flashtutor.bench.ch07", "bench07", time_sets=("seed", "large")),
}


def step(which: str) -> Step:
    """A step of any chapter by id ("3c")."""
    for steps in STEPS.values():
        for s in steps:
            if s.id == which:
                return s
    raise KeyError(f"no step {which!r}")


# ---------------------------------------------------------------- the steps' headers -------------
class Header(NamedTuple):
    idea: str           # the header's title, without its "Chapter N, step x:" prefix
    changed: str        # the first sentence after "What changed …:" ("" where the header has none)
    limitation: str     # the first sentence after "Limitation:"


_MARKERS = re.compile(r"(The idea(?::| is\b)|What changed[^:\n]*:|Limitation:)")


def _header_text(path: Path) -> str:
    """A file's header: a .py file's docstring, or the leading // comment block of a .cu file."""
    text = path.read_text()
    if path.suffix == ".py":
        import ast
        return ast.get_docstring(ast.parse(text)) or ""
    lines = []
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:].removeprefix(" "))
    return "\n".join(lines)


def _clean(text: str) -> str:
    """One line of markdown: rst literals as code, whitespace collapsed, table pipes escaped."""
    text = re.sub(r"``([^`]+)``", r"`\1`", " ".join(text.split()))
    return text.replace("|", "\\|")


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s+(?=[A-Z`*(])", text.strip(), maxsplit=1)[0].strip()


def _block(text: str, marker: str) -> str:
    """What follows ``marker`` up to the next marker or the end of its paragraph."""
    for m in _MARKERS.finditer(text):
        if m.group().startswith(marker):
            rest = text[m.end():]
            nxt = _MARKERS.search(rest)
            para = rest[:nxt.start()] if nxt else rest
            para = re.split(r"\n\s*\n", para.lstrip("\n"), maxsplit=1)[0]
            return _clean(_first_sentence(para))
    return ""


def read_header(*files: Path) -> Header:
    """The idea, what changed and the limitation of a step, from the headers of its files (the first file's
    title is the idea; the first file that states a limitation or a change gives it)."""
    texts = [_header_text(f) for f in dict.fromkeys(files) if f.exists()]
    title = re.split(r"\n\s*\n", texts[0].strip(), maxsplit=1)[0] if texts else ""
    idea = _clean(_first_sentence(re.sub(r"^Chapter \d+[^:—]*[:—]\s*", "", title)))
    changed = next((b for t in texts if (b := _block(t, "What changed"))), "")
    limitation = next((b for t in texts if (b := _block(t, "Limitation"))), "")
    return Header(idea[:1].upper() + idea[1:], changed, limitation[:1].upper() + limitation[1:])


# ---------------------------------------------------------------- flashtutor/kernels/README.md ---
KERNELS_README = ROOT / "flashtutor" / "kernels" / "README.md"


def _link(path: Path) -> str:
    rel = os.path.relpath(path, KERNELS_README.parent)
    return f"[`{path.relative_to(ROOT)}`]({rel})"


def ladder_markdown() -> str:
    """flashtutor/kernels/README.md: the whole ladder (step, files, idea, limitation), from :data:`STEPS` and the
    steps' headers; then the other kernel files and the modules that moved out of this folder."""
    lines = ["# The ladder", "",
             "Every step of the course, where its files live, its idea and its limitation. Generated from the chapter",
             "manifest (`flashtutor/chapters.py`: `STEPS`) and the header of each step's files by",
             "`python -m flashtutor.chapters --write-readme`; `tests/test_ladder.py` fails when it is out of date.",
             "This folder holds the steps alone: the benchmarks that time them are in `flashtutor/bench/`",
             "(`flashtutor bench NN`), the grader in `flashtutor/grading/`, and nothing here imports either.", "",
             "| step | files | idea | limitation |", "|---|---|---|---|"]
    for ch in CHAPTERS.values():
        for s in ch.steps:
            role = [r for r, yes in (("solution", s.solution), ("reference", s.module == ch.reference))
                    if yes and r not in s.label]
            name = f"**{s.id}**" + (f" {s.label}" if s.label != s.id else "")
            name += f" ({', '.join(role)})" if role else ""
            files = " · ".join(_link(p) for p in dict.fromkeys((s.path, s.kernel)))
            h = s.header
            lines.append(f"| {name} | {files} | {h.idea} | {h.limitation or '—'} |")
    lines += ["", "Other files here, used by a chapter but not a step of their own:", ""]
    for key, files in KERNEL_FILES.items():
        paths = [ROOT / f for f in files]
        for stem in dict.fromkeys(p.stem for p in paths):       # a .py and its .cu: one line, the .py's header
            mine = sorted((p for p in paths if p.stem == stem), key=lambda p: p.suffix != ".py")
            lines.append(f"- {' · '.join(_link(p) for p in mine)} (chapter {int(key)}): {read_header(mine[0]).idea}")
    moved = sorted(p.name for p in KERNELS_README.parent.glob("*.py")
                   if p.read_text().startswith("from flashtutor.bench."))
    if moved:
        lines += ["", "Moved to `flashtutor/bench/`, kept here as one-line re-exports until the notebooks are "
                  "re-executed: " + ", ".join(f"`{m}`" for m in moved) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    import argparse
    ap = argparse.ArgumentParser(prog="python -m flashtutor.chapters", description="the chapter manifest")
    ap.add_argument("--write-readme", action="store_true", help=f"write {KERNELS_README.relative_to(ROOT)}")
    ap.add_argument("--check", action="store_true", help="exit 1 when the README is out of date")
    a = ap.parse_args(argv)
    text = ladder_markdown()
    if a.write_readme:
        KERNELS_README.write_text(text)
        print(f"wrote {KERNELS_README.relative_to(ROOT)}")
        return 0
    if a.check:
        current = KERNELS_README.read_text() if KERNELS_README.exists() else ""
        if current != text:
            print(f"{KERNELS_README.relative_to(ROOT)} is out of date: python -m flashtutor.chapters --write-readme")
            return 1
        print(f"{KERNELS_README.relative_to(ROOT)} is current")
        return 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
