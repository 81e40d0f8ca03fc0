"""The judge's reading of a trace (flashtutor.grading.trace.judge), on hand-made traces: each rule rejects
its wrong trace and accepts the right one."""
from flashtutor.grading.evidence import Cause, KernelRecord, Trace
from flashtutor.grading.trace import Policy, judge

OWN = Policy(own=frozenset({"naive_attention"}), registers={"naive_attention": {40}}, need_registers=True)


def _k(name, regs=None, nbytes=None, count=1):
    return KernelRecord(name, 7, count, 10.0, regs, 0, nbytes)


def causes(trace, policy=OWN, calls=1):
    return {f.cause for f in judge(trace, policy, calls=calls)}


def test_own_kernel_with_the_judges_registers_passes():
    assert causes(Trace([_k("naive_attention", 40)])) == set()


def test_same_name_other_registers_is_not_yours():
    assert causes(Trace([_k("naive_attention", 32)])) == {Cause.NOT_OWN}


def test_missing_registers_on_a_gpu_is_untraced_but_not_where_none_are_reported():
    assert causes(Trace([_k("naive_attention", None)])) == {Cause.UNTRACED}
    emulated = Policy(own=OWN.own, registers=OWN.registers, need_registers=False)   # the CPU emulation
    assert causes(Trace([_k("naive_attention", None)]), emulated) == set()


def test_large_copies_to_the_host_fail():
    ok = Trace([_k("naive_attention", 40), _k("Memcpy DtoH (Device -> Pageable)", nbytes=4096)])
    bad = Trace([_k("naive_attention", 40), _k("Memcpy DtoH (Device -> Pageable)", nbytes=1 << 20)])
    assert causes(ok) == set() and causes(bad) == {Cause.LIBRARY_KERNEL}


def test_a_library_kernel_or_a_stranger_fails():
    lib = Trace([_k("naive_attention", 40), _k("cudnn_generated_fort_native_sdpa_sm90_flash_fprop")])
    other = Trace([_k("naive_attention", 40), _k("flash_attention_kernel")])
    assert Cause.LIBRARY_KERNEL in causes(lib) and causes(other) == {Cause.NOT_OWN}


def test_a_cast_to_the_outputs_dtype_is_a_copy_but_arithmetic_is_a_library_kernel():
    """Chapter 8's dQ accumulated in fp32 by atomics, then cast to fp16 by PyTorch: a copy (it failed a correct
    fold as "a library's elementwise kernel" on the H100, 2026-11-27); a PyTorch multiply is still arithmetic."""
    cast = ("void at::native::vectorized_elementwise_kernel<8, at::native::float16_copy_kernel_cuda("
            "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, T2, T3)")
    mul = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
           "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, T2, T3)")
    assert causes(Trace([_k("naive_attention", 40), _k(cast)])) == set()
    assert causes(Trace([_k("naive_attention", 40), _k(mul)])) == {Cause.LIBRARY_KERNEL}
