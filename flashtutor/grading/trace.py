"""The judge's reading of a trace: whose kernels ran, and what that means for the verdict.

Every kernel the trace shows is one of:

* **yours** — its name is one your files define (a ``__global__`` function of your .cu files, a Triton
  ``@jit`` function of your module or the local modules it imports), exactly; for CUDA kernels the
  judge also compiled your source itself, and the kernel's registers per thread must match that compile
  (a library kernel renamed, or the course's kernel of the same name, does not);
* **a helper** — a memory copy, a memset, a fill, a dtype cast (allocating, padding, copying and casting are
  not attention);
* **allowed** by the chapter (chapter 5: the CUTLASS GEMMs its loader builds from your configuration);
* **a library kernel** — anything else: cuDNN/FlashAttention attention, cuBLAS (including Hopper's
  ``nvjet`` kernels) and CUTLASS GEMMs, convolutions, softmax, reductions and arithmetic from PyTorch.
  Any of them fails the grade, on every call, checked or timed.

Names that look like library kernels (``cudnn…``, ``nvjet…``, C++ names with ``::``) are not accepted as
yours even when your file defines them: otherwise a decoy kernel could vouch for a library call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .evidence import Cause, Trace

# PyTorch's copies: same dtype (direct_copy_kernel) and its fp32 → fp16/bf16/fp8 casts (float16_copy_kernel_cuda, ...):
# an fp32 accumulator cast to the output's dtype (chapter 8's dQ by atomics) is a copy, not arithmetic.
HELPER = re.compile(r"^Memcpy (DtoD|HtoD)|^Memset|FillFunctor|fill_kernel|(direct|float16|bfloat16|float8)_copy_kernel|"
                    r"CatArrayBatchedCopy")
DTOH_LIMIT = 64 << 10     # bytes a call may copy back to the host (a flag, a count), not its inputs
# Library kernels by family (names as cuDNN, cuBLAS, CUTLASS, FlashAttention and PyTorch give them).
FAMILIES = (("attention", re.compile(r"cudnn\w*(sdpa|fmha|flash|attn)|fmha|flash_fwd|flash_fprop|flash_bwd|pytorch_flash|"
                                     r"efficient_attention|mem_eff|attention_kernel<|sdpa", re.I)),
            ("convolution", re.compile(r"conv|winograd|implicit_convolve|cudnn::|fft", re.I)),
            ("GEMM", re.compile(r"gemm|gemv|nvjet|cublas|cutlass|xmma|matmul|sm\d\d_|ampere_|hopper_", re.I)),
            ("softmax", re.compile(r"softmax", re.I)),
            ("reduction", re.compile(r"reduce_kernel|Reduce|norm_kernel|argmax", re.I)),
            ("elementwise", re.compile(r"elementwise|at::native|Functor", re.I)))
RESERVED = re.compile(r"^(cudnn|cublas|cutlass|nvjet|xmma|fmha|sm\d\d_|ampere_|hopper_|ncclKernel|void\s)|::", re.I)
# aten ops that do the work for the learner (CPU traces: the Triton interpreter, plain-PyTorch chapters)
ATEN_FORBIDDEN = re.compile(
    r"^aten::(_?scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*|_cudnn_attention\w*|"
    r"matmul|mm|bmm|baddbmm|addmm|addbmm|einsum|_?softmax|_?log_softmax|linear|tensordot|_addmm_activation|"
    r"convolution|_convolution|conv\w*|cudnn_convolution\w*)$")


@dataclass(frozen=True)
class Policy:
    """What a chapter allows at run time."""
    own: frozenset                  # kernel names defined by the learner's files
    registers: dict                 # name -> {registers per thread of each judge compile}
    allowed: re.Pattern | None = None   # library kernels the chapter allows (chapter 5's CUTLASS GEMMs)
    allow_torch_math: bool = False  # plain-PyTorch chapters (the grader's self-tests): elementwise/reductions ok
    need_own: bool = True           # every call must run one of the learner's kernels
    need_registers: bool = False    # a kernel with the learner's name must come with its registers (CUPTI, on a GPU)


@dataclass
class Finding:
    cause: Cause
    message: str


def family(name: str) -> str:
    for fam, rx in FAMILIES:
        if rx.search(name):
            return fam
    return "other"


def classify(name: str, policy: Policy) -> str:
    """'own', 'helper', 'allowed' or a library family."""
    if name in policy.own and not RESERVED.search(name):
        return "own"
    if policy.allowed is not None and policy.allowed.search(name):
        return "allowed"
    if HELPER.search(name):
        return "helper"
    fam = family(name)
    if policy.allow_torch_math and fam in ("elementwise", "reduction"):
        return "helper"
    return fam


def judge(trace: Trace, policy: Policy, *, calls: int) -> list[Finding]:
    """Findings for the kernels (or aten ops) of ``calls`` calls."""
    out: list[Finding] = []
    if not trace.ok:
        return [Finding(Cause.UNTRACED, f"the calls could not be traced ({trace.error or 'no reason given'}); "
                                       "every call is traced, and an untraced call is not graded as correct")]
    bad_ops = sorted({op for op in trace.ops if ATEN_FORBIDDEN.match(op)})
    if bad_ops:
        out.append(Finding(Cause.LIBRARY_KERNEL, f"calls {', '.join(bad_ops)} at run time (a library does the work)"))
    libs: dict[str, list[str]] = {}
    own_launches = 0
    to_host = sum(k.bytes or 0 for k in trace.kernels if k.name.startswith("Memcpy DtoH"))
    if to_host > DTOH_LIMIT * max(calls, 1):
        out.append(Finding(Cause.LIBRARY_KERNEL, f"your call copied {to_host / calls / 1e6:.2f} MB per call from the GPU "
                           "to the host: attention must be computed on the GPU"))
    for k in trace.kernels:
        if k.name.startswith(("Memcpy DtoH", "Memcpy HtoH")):
            continue
        kind = classify(k.name, policy)
        if kind == "own":
            regs = policy.registers.get(k.name)
            if regs and k.registers is None and policy.need_registers:
                out.append(Finding(Cause.UNTRACED, f"the trace of {k.name} carries no register count, so it cannot "
                                   "be matched to the kernel compiled from your file"))
            elif regs and k.registers is not None and k.registers not in regs:
                out.append(Finding(Cause.NOT_OWN, f"a kernel named {k.name} ran with {k.registers} registers per "
                                   f"thread, but {k.name} compiled from your source uses "
                                   f"{' or '.join(str(r) for r in sorted(regs))}: it was not built from your file"))
            own_launches += k.count
        elif kind not in ("helper", "allowed"):
            libs.setdefault(kind, []).append(k.name)
    for fam, names in sorted(libs.items()):
        shown = ", ".join(sorted({n[:90] for n in names})[:3])
        if fam == "other":
            defined = ", ".join(sorted(policy.own)) or ("no kernel: the grader reads the .cu files in the folder "
                                                        "of your attention.py")
            out.append(Finding(Cause.NOT_OWN, f"a kernel not compiled from your files ran during your call: {shown} "
                               f"(your files define: {defined})"))
        else:
            out.append(Finding(Cause.LIBRARY_KERNEL, f"a library's {fam} kernel ran during your call: {shown} — only "
                               "kernels compiled from your own files (and memory copies or fills) may run"))
    if policy.need_own:
        if own_launches == 0:
            looked = ", ".join(sorted(policy.own)) or "none found in your files"
            out.append(Finding(Cause.NO_KERNEL, f"none of your kernels ran during the call (your files define: {looked})"))
        elif own_launches < calls:
            out.append(Finding(Cause.UNTRACED, f"{calls} calls, but the trace shows only {own_launches} launches of "
                               "your kernels: some calls ran work the tracer did not see"))
    return out


def reserved_names(names) -> list[str]:
    """Your kernel names that are reserved for libraries (reported before anything runs)."""
    return sorted(n for n in names if RESERVED.search(n))
