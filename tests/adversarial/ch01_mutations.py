"""Wrong chapter-1 submissions: the solution with one realistic bug each, and the verdict the
grader must give. Each is materialised into a folder of its own (attention.py + attention.cu), as
a learner's files would be. Mutating the solution keeps every wrong kernel in step with it."""
from __future__ import annotations

from pathlib import Path

from flashtutor.chapters import get_chapter

CH = get_chapter("01")

# name -> (expected cause in the report, {file: [(old, new), ...]}, what the bug is)
MUTATIONS: dict[str, tuple[str, dict, str]] = {
    "compile_error": ("compile error",
                      {"attention.cu": [("m = fmaxf(m, s[j]);", "m = fmaxf(m, s[j])")]},
                      "a missing semicolon: the report must name attention.cu and the line"),
    "unwritten_tail": ("tail",
                       {"attention.py": [("grid=((rows + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK,)",
                                          "grid=(rows // ROWS_PER_BLOCK,)")]},
                       "the grid is rounded down, so the rows of the last partial block are never written"),
    "nan_no_max": ("nan",
                   {"attention.cu": [("const float p = expf(s[j] - m);", "const float p = expf(s[j]);")]},
                   "no max subtraction: exp() overflows to inf for large logits, and inf/inf is NaN"),
    "wrong_scale": ("scale",
                    {"attention.py": [("D ** -0.5", "1.0 / D")]},
                    "scale 1/D instead of 1/sqrt(D)"),
    "ignores_causal": ("causal",
                       {"attention.cu": [("const int n_keys = causal ? i + 1 : S;", "const int n_keys = S;")]},
                       "the causal flag is ignored"),
    "oob_write": ("illegal memory access",
                  {"attention.cu": [("O[(size_t)r * D + d]", "O[(size_t)r * S * D + d]")]},
                  "a row stride of S·D instead of D: writes land far past the output"),
    "oob_read_k": ("crash",
                   {"attention.cu": [("const __half* k = K + bh * S * D; ",
                                      "const __half* k = K + (size_t)r * S * D;")]},
                   "K's block taken at the query row instead of its (batch, head): reads run far past the end of K"),
    "oob_key_bound": ("crash",
                      {"attention.cu": [("const int n_keys = causal ? i + 1 : S;",
                                         "const int n_keys = causal ? i + 1 : S + 1;")]},
                      "one key too many: reads past the end of K (into V) and writes past each row of the scores, "
                      "the last row's past the scratch tensor (the heap)"),
    "oob_write_next_row": ("crash",
                           {"attention.cu": [("O[(size_t)r * D + d]", "O[(size_t)(r + 1) * D + d]")]},
                           "each row stored one row down: the last row lands just past the end of the output"),
    "device_assert": ("device-side assert",
                      {"attention.cu": [("if (r >= rows) return;",
                                         "assert(S % 16 == 0);   // NVRTC has assert built in; 'S is always a multiple of 16'\n"
                                         "    if (r >= rows) return;")]},
                      "an assertion that does not hold for S = 113: the kernel aborts"),
    "first_batch_only": ("batch",
                         {"attention.py": [("    rows = B * H * S\n", "    rows = H * S   # forgot the batch\n")]},
                         "the grid covers one batch element: right only for B = 1"),
    "fp16_accumulator": ("precision",
                         {"attention.cu": [("acc += s[j] * __half2float(v[(size_t)j * D + d]);",
                                            "acc = __half2float(__float2half(acc + s[j] * __half2float(v[(size_t)j * D + d])));")]},
                         "the PV sum is rounded to fp16 at every step: lower precision that changes the result"),
    "hang": ("timeout",
             {"attention.cu": [("if (r >= rows) return;", "while (r >= rows) { }   // waits for work that never comes")]},
             "threads past the last row spin forever when the last block is partial"),
}


def materialize(name: str, folder: Path) -> Path:
    """Write the mutated submission into ``folder``; return the path of its attention.py."""
    _, edits, _ = MUTATIONS[name]
    folder.mkdir(parents=True, exist_ok=True)
    for fname in CH.files:
        text = (CH.solution_dir / fname).read_text()
        for old, new in edits.get(fname, []):
            assert text.count(old) == 1, f"mutation {name}: {old!r} not found once in {fname}"
            text = text.replace(old, new)
        (folder / fname).write_text(text)
    return folder / CH.entry
