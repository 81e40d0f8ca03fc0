"""Chapter 8's warp-specialized backward in CUDA (flashtutor/kernels/k08d_backward_ws.cu): the CPU tier compiles it for sm_90a and reads what ptxas made — one kernel per head dim, no local
memory, setmaxnreg honoured and no wgmma serialized, the wgmma count of its five products, TMA loads of its four
operands, the bulk reduce of dQ — and checks that the launcher asks for the shared memory the kernel indexes."""
from __future__ import annotations

import io
import re

import pytest

from flashtutor.chapters import ROOT
from flashtutor.loaders import load_cuda
from flashtutor.loaders.nvrtc import course_include_dir, cuda_include_dir
from flashtutor.sass import disassemble, histogram

SOURCE = ROOT / "flashtutor/kernels/k08d_backward_ws.cu"
BLOCK_MAX = 227 * 1024


@pytest.fixture(scope="module")
def built():
    return load_cuda(SOURCE, arch="sm_90a")


def test_one_kernel_per_head_dim_without_local_memory(built):
    res = built.resources()
    assert set(res) == {"ws_backward_d64", "ws_backward_d128"}
    for name, r in res.items():
        assert r["spill_instructions"] == 0 and r["local_bytes"] == 0 and r["stack_bytes"] == 0, (name, r)


def test_setmaxnreg_honoured_and_wgmma_not_serialized():
    from cuda.core import Program, ProgramOptions
    opts = ProgramOptions(name=str(SOURCE), arch="sm_90a", std="c++17",
                          include_path=[str(SOURCE.parent), course_include_dir(), cuda_include_dir()])
    log = io.StringIO()
    Program(SOURCE.read_text(), "c++", opts).compile("cubin", logs=log)
    text = log.getvalue().replace("\x00", "")
    assert "C7508" not in text and "C7510" not in text and "warning" not in text.lower(), text


def test_the_sass_holds_its_five_products_tma_and_the_bulk_reduce(built):
    from flashtutor.kernels import k08d_backward_ws as d
    for name, instrs in disassemble(built.cubin).items():
        D = int(re.search(r"_d(\d+)$", name).group(1))
        h = histogram(instrs)
        # Sᵀ and dPᵀ: D/16 steps each; dV, dK: Br/16 each; dQ: one step per 16 keys, over the block's 128 keys
        # at D = 128 (each consumer 64 of its columns), over a consumer's own 64 keys at D = 64
        dq_keys = d.Bc if D == 128 else 64
        assert h["HGMMA"] == 2 * D // 16 + 2 * d.Br // 16 + dq_keys // 16, (name, h["HGMMA"])
        assert h["UTMALDG"] == 4 * D // 64, (name, h["UTMALDG"])          # K, V, Q, dO: one box per 64 columns
        assert h["USETMAXREG"] == 2 and h["UBLKRED"] >= 1, (name, h)


def test_the_launcher_allocates_what_the_kernel_indexes():
    from flashtutor.kernels import k08d_backward_ws as d
    text = SOURCE.read_text()
    assert f"constexpr int Br = {d.Br};" in text and f"constexpr int STAGES = {d.STAGES};" in text
    assert "constexpr int Bc = 64 * CONSUMERS;" in text and d.Bc == 64 * d.CONSUMERS
    for D in (64, 128):
        assert d.shared_bytes(D) <= BLOCK_MAX, D


def test_without_a_hopper_gpu_it_says_so():
    import torch
    from flashtutor.kernels import k08d_backward_ws as d
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    q = torch.zeros(1, 1, 64, 64, dtype=torch.float16)
    with pytest.raises((ValueError, RuntimeError), match="(?i)cuda|gpu|hopper"):
        d.backward(q, q, q, q, torch.zeros(1, 1, 64), q)

