"""flashtutor.docs: docstrings shown in the book as Markdown, not as reST."""

import re

import pytest

from flashtutor import docs


def _sample():
    """Lead line with ``literal`` and :func:`flashtutor.graphs.capture`.

    An example:

        cache = GraphCache(maxsize=16)

        def f():
            return 1

    * **A bullet** with :class:`~flashtutor.graphs.GraphCache`,
      continued on an indented line.
    """


def test_docstring_becomes_markdown():
    md = docs.markdown(_sample)
    assert "``literal``" not in md and ":func:" not in md and ":class:" not in md
    assert "`literal`" in md and "`flashtutor.graphs.capture`" in md and "`flashtutor.graphs.GraphCache`" in md
    assert "```python\ncache = GraphCache(maxsize=16)\n\ndef f():\n    return 1\n```" in md
    assert "  continued on an indented line." in md           # a bullet's continuation is no code block


def test_graphs_module_doc_renders_its_example_as_code():
    import pytest
    pytest.importorskip("torch")
    from flashtutor import graphs
    md = docs.markdown(graphs)
    assert md.count("```python") == 1 and ":func:" not in md
    assert docs.markdown(lambda: None) == ""


def test_long_printed_lines_wrap_to_the_column_and_keep_their_list_shape():
    line = "* results/ch07-h100-2026-11-26.json: NVIDIA H100 80GB HBM3, 2026-11-26; steps 7a, 7b, 7c, 14 shapes; " \
           "timed with scripts/ch07_gpu.py: triton.testing.do_bench (median, L2 flushed before each call)"
    out = docs.wrap(line + "\nshort line")
    lines = out.splitlines()
    assert all(len(x) <= docs.WIDTH for x in lines) and len(lines) >= 3
    assert lines[0].startswith("* results/") and all(x.startswith("    ") for x in lines[1:-1])
    assert lines[-1] == "short line" and " ".join(x.strip() for x in lines[:-1]) == line
    todo = docs.wrap(" 132: // TODO: wait until slot s holds tile j — kv_full[s] (address sm.kv_full + 8·s), "
                     "parity (j / STAGES) & 1, and give up when the producer has aborted")
    assert todo.splitlines()[1].startswith("       ")                    # past "NNN: "


def test_table_is_markdown_with_one_cell_per_value():
    md = docs.table(["shape", "µs | GPU"], [["B1 H16 S1024 D64 causal", 14.5], ["a|b", None]])
    lines = md.splitlines()
    assert lines[0] == r"| shape | µs \| GPU |"
    assert lines[1] == "|---|---|"
    assert lines[2] == "| B1\u00a0H16\u00a0S1024\u00a0D64 causal | 14.5 |"     # a shape never breaks inside
    assert lines[3] == r"| a\|b | — |"              # an escaped pipe stays inside its cell; None shows as a dash
    # every row has as many unescaped separators as the header
    count = lambda s: len(re.findall(r"(?<!\\)\|", s))    # noqa: E731
    assert len({count(l) for l in lines}) == 1


def test_environment_line_breaks_between_items_at_the_book_width():
    from flashtutor.env import format_env
    d = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "cudnn": 91900, "triton": "3.6.0",
         "driver": "580.159.04", "date": "2026-11-26 13:47 UTC"}
    one = format_env(d)
    assert "\n" not in one and len(one) > docs.WIDTH                 # the H100's line: 115 characters
    lines = format_env(d, width=docs.WIDTH).splitlines()
    assert len(lines) == 2 and all(len(x) <= docs.WIDTH for x in lines)
    assert " ".join(lines).replace(" · ", "·").replace("·", " · ") == one   # the same items, in the same order
    assert lines[0].endswith(" ·") and lines[1] == "2026-11-26 13:47 UTC"
    assert format_env(d, width=200) == one


def test_a_listing_is_a_highlighted_numbered_code_block_of_the_right_lines(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text("// header\n__device__ int f(int x) {\n    if (x) {\n        return 1;\n    }\n    return 0;\n}\n"
                   "int g = 3;  // one statement\nint h;\n")
    out = docs.listing(src, "int f(", root=tmp_path)
    lines = out.splitlines()
    assert lines[0] == "```{code-block} cuda" and lines[-1] == "```"
    assert ":caption: k.cu, lines 2–7" in lines and ":lineno-start: 2" in lines
    assert lines[lines.index("") + 1:-1] == src.read_text().splitlines()[1:7]       # the brace block, whole
    one = docs.listing(src, "int g", root=tmp_path)                                     # one statement: one line
    assert one.count("\n") == 5 and ":caption: k.cu, line 8" in one
    assert ":caption: k.cu, lines 1–3" in docs.listing(src, "int f(", "if (x)", context=1)
    py = docs.code("x = '```'\n", "python")
    assert py.startswith("````{code-block} python") and py.endswith("\n````")       # a fence longer than any inside
    with pytest.raises(ValueError, match="no line contains"):
        docs.listing(src, "nowhere")


def test_a_listing_of_a_template_starts_at_its_template_line(tmp_path):
    """Issue 26 item 6: listings cut before their `template` line showed declarations the compiler rejects."""
    from flashtutor import docs
    src = tmp_path / "k.cu"
    src.write_text("#include <x>\n"
                   "static int n = 0;\n"
                   "template <int BLOCK_M, int BLOCK_N,\n"
                   "          bool CAUSAL>\n"
                   "__global__ void kernel(const half* q) {\n"
                   "    body();\n"
                   "}\n"
                   "__device__ int plain(int x) {\n"
                   "    return x;\n"
                   "}\n")
    lines = src.read_text().splitlines()
    assert docs.span(lines, "__global__ void kernel") == (2, 6)            # from `template` to the closing brace
    assert docs.span(lines, "__device__ int plain") == (7, 9)              # no template: unchanged
    assert "template <int BLOCK_M" in docs.listing(src, "__global__ void kernel")


def test_a_step_diff_shows_code_only_and_an_exercise_excerpt_shows_the_todo(tmp_path):
    """The helpers the chapters' section pages share (once copied into two notebooks each)."""
    from flashtutor import docs
    from flashtutor.chapters import ROOT
    a, b = tmp_path / "a.cu", tmp_path / "b.cu"
    a.write_text("// header a\n#include <x>\n// BEGIN SOLUTION\nint f() { return 1; }\n// END SOLUTION\n")
    b.write_text("// header b\n#include <x>\nint f() { return 2; }\n")
    diff = docs.source_diff(a, b, context=0)
    assert "-int f() { return 1; }" in diff and "+int f() { return 2; }" in diff
    assert "// header" not in diff and "SOLUTION" not in diff
    text = docs.exercise_excerpt(ROOT / "solutions/08_backward/attention.py", "def bwd_preprocess_kernel(",
                                 "    pass", "the exercise's kernel")
    assert "@triton.jit" in text and "TODO" in text and "BEGIN SOLUTION" not in text
