"""Wrong chapter-8 submissions: the solution with one realistic backward-pass bug each, and the verdict the grader
must give (the causes the report names, and a phrase its explanation contains). Mutating the solution keeps every
wrong kernel in step with it; each is written into a folder of its own as a learner's attention.py would be."""
from __future__ import annotations

from pathlib import Path

from flashtutor.chapters import get_chapter

CH = get_chapter("08")

# name -> (expected causes, a phrase of the explanation, [(old, new), ...] on attention.py, what the bug is)
MUTATIONS: dict[str, tuple[set, str, list, str]] = {
    "no_rowsum_term": (
        {"wrong"}, "softmax correction",
        [("dsT = pT * (dpT - delta[None, :])", "dsT = pT * dpT")],
        "dS = P ∘ dP: the softmax Jacobian's correction term rowsum(dO ∘ O) is left out (dV stays right)"),
    "no_causal_mask_in_backward": (
        {"wrong", "nan"}, "causal mask",          # large logits: e^(s - lse) of an unmasked future key overflows
        [("keep = keep & (offs_m[None, :] >= offs_n[:, None])", "keep = keep")],
        "the dK/dV loop does not mask future queries: right without causal, wrong with it"),
    "stale_lse": (
        {"wrong", "nan"}, "not from one kept from a forward call",
        [("    return o, lse\n", "    _LAST['lse'] = lse\n    return o, lse\n"),
         ("    do = do.contiguous()", "    if _LAST.get('lse') is not None and _LAST['lse'].shape == lse.shape:\n"
                                    "        lse = _LAST['lse']       # the forward's, kept: not this call's argument\n"
                                    "    do = do.contiguous()"),
         ("LOG2E = 1.4426950408889634", "_LAST = {}\nLOG2E = 1.4426950408889634")],
        "the backward uses the lse the last forward computed (kept in a global), not the one it is given"),
    "lse_in_base_2": (
        {"wrong"}, "forward",
        [("lse = (m_i + tl.log2(l_i)) * 0.6931471805599453", "lse = m_i + tl.log2(l_i)")],
        "the forward stores lse in base 2: its own backward would be consistent, the lse it returns is not"),
    "dq_race_without_atomics": (
        {"wrong"}, "lost updates when programs add to one row",   # gradients.explain's line when only dQ fails
        [("    Q, K, V, DO, DK, DV,              # [B, H, S, D] fp16 ×6",
          "    Q, K, V, DO, DK, DV,              # [B, H, S, D] fp16 ×6\n"
          "    DQ_ACC,                           # [B, H, S, D] fp32, zeroed: dQ accumulated by every key block"),
         ("        dk = tl.dot(dsT.to(q.dtype), q, dk)                    # [BLOCK_N, D] += dSᵀ Q\n",
          "        dk = tl.dot(dsT.to(q.dtype), q, dk)                    # [BLOCK_N, D] += dSᵀ Q\n"
          "        dsT = tl.where(kv_ok[:, None], dsT, 0.0)               # keys past S: P may be inf, inf·0 is NaN\n"
          "        dq = tl.dot(tl.trans(dsT).to(k.dtype), k) * sm_scale   # [BLOCK_M, D] fp32: our share of dQ_i\n"
          "        dq_ptrs = DQ_ACC + head + offs_m[:, None] * stride_s + offs_d[None, :]\n"
          "        dq_old = tl.load(dq_ptrs, mask=q_ok[:, None], other=0.0)   # read ...\n"
          "        tl.store(dq_ptrs, dq_old + dq, mask=q_ok[:, None])     # ... add, write: no tl.atomic_add\n"),
         ("    pre = cfg[\"PRE\"]\n",
          "    dq_acc = torch.zeros((B, H, S, D), dtype=torch.float32, device=q.device)   # every key block adds here\n"
          "    pre = cfg[\"PRE\"]\n"),
         ("q, k, v, do, dk, dv, lse, delta,", "q, k, v, do, dk, dv, dq_acc, lse, delta,"),
         ("    c = cfg[\"DQ\"]\n"
          "    bwd_dq_kernel[(triton.cdiv(S, c[\"BLOCK_M\"]), B * H)](\n"
          "        q, k, v, do, dq, lse, delta, D ** -0.5, H, S, *strides, D=D, CAUSAL=causal, **c)\n"
          "    return dq, dk, dv\n",
          "    return dq_acc.to(q.dtype), dk, dv          # dQ folded into the dK/dV kernel: no second pass\n")],
        "dQ folded into the dK/dV kernel (keys outer) with a plain load + add + store on an fp32 buffer instead of "
        "tl.atomic_add: programs owning different key blocks overwrite each other's partial sums of the same rows "
        "(lost updates, dQ too small). Right under the interpreter, whose programs run one after another: only "
        "a GPU shows the race (GPU_ONLY)"),
}

# Bugs that only a GPU shows: right under Triton's interpreter, where programs run one at a time (no two programs'
# read-modify-writes interleave), so the CPU grades them "pass" (tests/test_grade_ch08.py checks that it does).
GPU_ONLY = {"dq_race_without_atomics"}


def materialize(name: str, folder: Path) -> Path:
    """Write the mutated submission into ``folder``; return the path of its attention.py."""
    edits = MUTATIONS[name][2]
    folder.mkdir(parents=True, exist_ok=True)
    text = (CH.solution_dir / CH.entry).read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, (name, old)
        text = text.replace(old, new)
    path = folder / CH.entry
    path.write_text(text, encoding="utf-8")
    return path
