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
}


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
