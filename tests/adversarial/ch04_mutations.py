"""Wrong chapter-4 submissions: the Triton solution with one realistic bug each, and the verdict the
grader must give. Each is written into a folder of its own as a learner's attention.py would be;
mutating the solution keeps every wrong kernel in step with it."""
from __future__ import annotations

from pathlib import Path

from flashtutor.chapters import get_chapter

CH = get_chapter("04")

# name -> (expected causes in the report, [(old, new), ...] on attention.py, what the bug is)
MUTATIONS: dict[str, tuple[set, list, str]] = {
    "batch_stride": (
        {"batch"},
        [("head = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h",
          "head = h.to(tl.int64) * stride_h   # forgot the batch")],
        "the batch stride is ignored: every batch element reads and writes batch 0's slab"),
    "tutorial_row_offset": (
        {"batch"},
        [("head = b.to(tl.int64) * stride_b + h.to(tl.int64) * stride_h",
          "head = (b + h * S).to(tl.int64) * stride_s   # row offset b + h·S instead of (b·H + h)·S")],
        "the row offset of a (b, h) slab computed as b + h·S: right whenever B = 1, wrong for B > 1"),
    "no_key_mask": (
        {"wrong", "precision", "tail"},
        [("keep = kv_ok[None, :]", "keep = (offs_kv >= 0)[None, :]   # every key of the block counts")],
        "keys past S are not masked: their zero scores add e^(0 - m) to the sum (S = 37, 70 fail)"),
    "no_rescale": (
        {"wrong", "precision"},
        [("        acc = acc * alpha[:, None]\n", "")],
        "the accumulator is not rescaled when the running max grows: right only with a single key block"),
}


def materialize(name: str, folder: Path) -> Path:
    """Write the mutated submission into ``folder``; return the path of its attention.py."""
    _, edits, _ = MUTATIONS[name]
    folder.mkdir(parents=True, exist_ok=True)
    text = (CH.solution_dir / CH.entry).read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"mutation {name}: {old!r} not found once in {CH.entry}"
        text = text.replace(old, new)
    (folder / CH.entry).write_text(text)
    return folder / CH.entry
