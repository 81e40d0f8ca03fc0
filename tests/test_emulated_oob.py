"""An emulated kernel's access past the grader's memory is a verdict that names the kernel, the thread and where the
address lies (issue 27, "crashes say what they probably are"): the CPU arena ends at a guard page (protocol.py,
the worker's mprotect), the emulation's fault handler writes one line (flashtutor/emulate/fault.h), and the judge
maps its address to the call's q, k, v and out (spawn.fault_place). The log is the learner's: a forged line gives
at worst a wrong hint, never an exception."""
from __future__ import annotations

import pytest

from flashtutor.grading.protocol import GUARD_BYTES, cpu_layout, locate
from flashtutor.grading.spawn import Abort, Fault, crash_message, fault_line, fault_place

SHAPE = (2, 3, 37, 64)
N = 2 * 3 * 37 * 64                  # 14208 values per tensor
ARENA = 71680                        # the emulated set's largest slot (1×2×70×128 × 4): one slot of SHAPE, a tail


def _grade(tmp_path, name):
    from adversarial.ch01_mutations import materialize

    from flashtutor import grade
    r = grade("01", materialize(name, tmp_path / name), device="cpu", progress=False)
    if r.execution != "emulated":
        pytest.skip(f"no CPU emulation of CUDA here ({r.headline})")
    assert r.verdict == "fail" and "crash" in r.causes, r.headline
    text = "\n".join(r.failures)
    assert "wrote nothing" not in text and "USDT" not in text and "most likely read or wrote" not in text, text
    return text


def test_a_read_far_past_k_names_the_kernel_the_thread_and_the_address(tmp_path):
    text = _grade(tmp_path, "oob_read_k")
    assert "the emulated kernel naive_attention (block " in text and " thread " in text, text
    assert "read past the end of a buffer (an index out of bounds)" in text, text
    assert "past its end (out is 2×3×37×64" in text and " of k, " in text and "guard page" in text, text


def test_a_write_just_past_the_output_names_out(tmp_path):
    text = _grade(tmp_path, "oob_write_next_row")
    assert "naive_attention" in text and "wrote past the end of a buffer (an index out of bounds)" in text, text
    assert "element 17920 of out, just past its end (out is 1×2×70×128 = 17920 fp16 values)" in text, text
    # the smaller shapes' overruns land in the arena's slack after their output, before the guard page: the judge
    # fills it with the never-written pattern and finds it changed
    assert "wrote past the end of its output: 64 elements of the memory right after it changed, from its very end" \
        in text, text


def test_abort_lines_a_failed_assert_and_an_abort_after_a_kernel():
    assert fault_line("x\nflashtutor-emulate: abort in kernel k1 (block 0,1,0 thread 2,0,0)\n") == \
        Abort("k1", (0, 1, 0), (2, 0, 0))
    after = fault_line("flashtutor-emulate: abort after kernel k1\n")
    assert after == Abort("k1")
    for bad in ("flashtutor-emulate: abort in kernel k1", "flashtutor-emulate: abort after kernel k1 (block 0,1,0 "
                "thread 2,0,0)", "flashtutor-emulate: abort after kernel 1k"):
        assert fault_line(bad) is None, bad
    failed = crash_message(-6, "a.cu:3: void k1(): Assertion `x' failed.\n", emulated=True,
                           fault=Abort("k1", (0, 1, 0), (2, 0, 0)))
    assert "k1 (block 0,1,0 thread 2,0,0) aborted, most likely a failed assert()" in failed and "Assertion" in failed
    assert "past the end" not in failed
    plain = crash_message(-6, "", emulated=True, fault=after)
    assert "the last emulated kernel to run was k1" in plain and "heap" not in plain
    assert "k1" not in crash_message(-11, "", emulated=True, fault=after)      # an abort line, a segfault: generic
    assert fault_place(after, "4096", ARENA, SHAPE, 0) == ""


def test_an_address_maps_to_its_slot_tensor_and_index():
    size, offset = cpu_layout(ARENA, 4096)
    assert (offset + 2 * ARENA) % 4096 == 0 and size == offset + 2 * ARENA + GUARD_BYTES
    assert locate(0, ARENA, SHAPE, 0) == {"tensor": "q", "slot": 0, "index": (0, 0, 0, 0), "element": 0}
    last_k = 2 * (2 * N - 1)
    assert locate(last_k, ARENA, SHAPE, 0) == {"tensor": "k", "slot": 0, "index": (1, 2, 36, 63), "element": N - 1}
    assert locate(last_k + 1, ARENA, SHAPE, 0)["tensor"] == "k"                 # the second byte of the same value
    assert locate(2 * (3 * N + 64 * 37 + 5), ARENA, SHAPE, 0)["index"] == (0, 1, 0, 5)
    assert locate(2 * ARENA, ARENA, SHAPE, 0) == {"past_end": ARENA - 4 * N, "slot": 0}
    assert locate(2 * 4 * N, ARENA, SHAPE, 0) is None                          # the arena's unused tail
    assert locate(-2, ARENA, SHAPE, 0) is None and locate(2 * ARENA + GUARD_BYTES, ARENA, SHAPE, 0) is None
    small = (1, 1, 2, 64)                                                       # many slots: another call's
    assert locate(2 * (4 * 128 * 3 + 128 + 70), ARENA, small, 1) == {
        "tensor": "k", "slot": 3, "index": (0, 0, 1, 6), "element": 70}
    f = Fault(0x1000 + 2 * (4 * N), "write", "k1", (0, 0, 0), (1, 0, 0))        # just past this slot's out
    assert fault_place(f, str(0x1000), 4 * N, SHAPE, 0).startswith("the address is element 14208 of out, just past")


def test_a_forged_fault_line_gives_at_worst_a_wrong_hint():
    forged = "hello\nflashtutor-emulate: fault at address 0x0000000000000010 (a read) in kernel evil (block 1,2,3 " \
             "thread 4,5,6)\n"
    f = fault_line(forged)
    assert f == Fault(16, "read", "evil", (1, 2, 3), (4, 5, 6))
    place = fault_place(f, str(1 << 40), ARENA, SHAPE, 0)                      # far below the arena
    msg = crash_message(-11, forged, emulated=True, fault=f, place=place)
    assert "outside the grader's input and output buffers" in msg, msg
    for name in ("of out", "of q", "of k", "of v", "out[", "k["):
        assert name not in msg, name
    assert "flashtutor-emulate:" not in msg and "hello" in msg
    # Lines that do not parse, or parse to nonsense, give nothing or no place; never an exception.
    for bad in ("flashtutor-emulate: fault at address 0xZZ (a read) in kernel k (block 1,2,3 thread 4,5,6)",
                "flashtutor-emulate: fault at address 0x10 (a read) in kernel k; rm -rf (block 1,2,3 thread 4,5,6)",
                "flashtutor-emulate: fault at address 0x" + "f" * 40
                + " (a read) in kernel k (block 1,2,3 thread 4,5,6)",
                "x" * 100000):
        assert fault_line(bad) is None, bad
    for base in (None, "", "-5", "12abc", "9" * 40, 7):
        assert fault_place(f, base, ARENA, SHAPE, 0) == ""
    assert fault_place(f, "16", ARENA, SHAPE, None) == ""
    # A forged line in a process that did not die of a memory signal: no fault verdict.
    exited = crash_message(1, forged, emulated=True, fault=f)
    assert "past the end of a buffer" not in exited and "evil" not in exited
