"""flashtutor.docs: docstrings shown in the book as Markdown, not as reST."""
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
