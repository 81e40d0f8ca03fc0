"""The built book as a reader sees it: checks on the HTML of every page of `jupyter-book build`.

The book is built once per session (tests/book_build.py, shared with tests/test_book.py). Each check is a
function that returns what it finds in one page, and each has a negative control: a small synthetic page it
must flag, so that none of them can pass by finding nothing.

* Markdown tables left as text: a paragraph of pipes and dashes (`| a | b |` / `|---|---|`), which is what a
  table becomes when the parser that reads it has no tables.
* Formulas from the network: a `<script src="https://…">` for MathJax or from a CDN. The book must read
  offline (book/_ext/offline_mathjax.py copies MathJax into _static/).
* Macros inside `\\text{…}` of a formula, which MathJax 3 (without its textmacros package) prints literally.
* Noise in outputs: warnings, ipywidgets' messages, tracebacks and error outputs, paths of the machine that
  ran the notebook (/tmp/, /root/, site-packages), nbval's markers.
* One printout, one block: consecutive prints of a cell to the same stream are not shown as separate boxes.
* Wide output: the theme (pydata-sphinx-theme, sphinx-book-theme, myst-nb) gives `pre` `overflow: auto` and
  myst-nb's `div.cell_output .output` `overflow-x: auto`, so an output line wider than the content column
  (about 103 characters of the 12-px monospace book/_static/flashtutor.css sets, in a 1280-pixel window,
  measured in Chromium; cells tagged wrap-output wrap instead) scrolls inside its block instead of being
  cut off. Because it scrolls, no line-length limit is needed; what is tested is that it
  scrolls: for every output `<pre>` and every table, the stylesheets the page loads are cascaded onto the
  element and its ancestors, and a box that scrolls sideways (overflow-x auto or scroll) must come before any
  box that clips (hidden or clip). A theme update or a custom rule that clipped output would fail here.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest

# Requirements of the CPU tier (requirements.txt); the offline GPU host has neither, and there this module only
# has to be collected (`pytest -m gpu` deselects it), so absence is a skip there instead of a collection error.
soupsieve = pytest.importorskip("soupsieve")
BeautifulSoup = pytest.importorskip("bs4").BeautifulSoup

from book_build import built_once


@pytest.fixture(scope="session")
def built_book(tmp_path_factory):
    """The repository's book, built once per session and shared with tests/test_book.py."""
    return built_once(tmp_path_factory)


# ---------------------------------------------------------------- the checks, one page at a time ----
MARKDOWN_RULE = re.compile(r"\|\s*:?-{3,}:?\s*\|")            # |---| or | :--- | of a table's header rule


def raw_markdown_tables(soup: BeautifulSoup) -> list[str]:
    """Paragraphs that hold a markdown table as text."""
    return [p.get_text()[:120] for p in soup.find_all("p") if MARKDOWN_RULE.search(p.get_text())]


NETWORK = re.compile(r"^\s*(https?:)?//", re.I)


def network_math(soup: BeautifulSoup) -> list[str]:
    """Scripts loaded from the network that are MathJax or come from a CDN."""
    found = []
    for script in soup.find_all("script", src=True):
        src = script["src"]
        if NETWORK.match(src) and re.search(r"mathjax|cdn|unpkg", src, re.I):
            found.append(src)
    return found


TEXT_MACRO = re.compile(r"\\text\{[^{}]*\\[^{}]*\}")


def literal_macros_in_math(soup: BeautifulSoup) -> list[str]:
    """Macros inside \\text{…} of a formula: MathJax 3 as the book loads it (no textmacros) prints them as they
    are, so $\\text{TILE\\_M}$ shows a backslash."""
    return [m.group(0) for el in soup.select(".math") for m in TEXT_MACRO.finditer(el.get_text())]


NOISE = {
    "warning": re.compile(r"\w*Warning: "),
    "ipywidgets": re.compile(r"ipywidgets|Widget Javascript not detected|HBox\(children="),
    "traceback": re.compile(r"Traceback \(most recent call last\)"),
    "/tmp/ path": re.compile(r"(?<![\w.~])/tmp/"),
    "/root/ path": re.compile(r"(?<![\w.~])/root/"),
    "installed-package path": re.compile(r"(site|dist)-packages"),
    "nbval marker": re.compile(r"NBVAL"),
}


def output_noise(soup: BeautifulSoup) -> list[str]:
    """What a reader would trip over in a page's cell outputs (nbval markers in the code too)."""
    found = []
    for out in soup.select("div.cell_output"):
        text = out.get_text()
        found += [f"{name}: {text[max(m.start() - 60, 0):m.end() + 60]!r}"
                  for name, pattern in NOISE.items() for m in pattern.finditer(text)]
        found += [f"error output: {e.get_text()[:120]!r}" for e in out.select(".output.error, .output.traceback")]
    for cell_input in soup.select("div.cell_input"):
        if NOISE["nbval marker"].search(cell_input.get_text()):
            found.append(f"nbval marker in code: {cell_input.get_text()[:120]!r}")
    return found


def split_streams(soup: BeautifulSoup) -> list[str]:
    """Output blocks of one cell printed to the same stream one after the other: a table printed row by row
    that the page shows as a box per row (the stored outputs keep a stream chunk per flush; the book merges
    them with myst-nb's nb_merge_streams)."""
    found = []
    for out in soup.select("div.cell_output"):
        blocks = [c for c in out.children if getattr(c, "name", None)]
        for a, b in zip(blocks, blocks[1:]):
            kinds = [set(x.get("class") or ()) & {"stream", "stderr"} for x in (a, b)]
            if kinds[0] and kinds[0] == kinds[1]:
                found.append(f"{b.get_text()[:80]!r} is a block of its own after {a.get_text()[-80:]!r}")
    return found


# ---- wide output: does it scroll? A small cascade over the page's own stylesheets ----
SCROLLS, CLIPS = {"auto", "scroll"}, {"hidden", "clip"}
PROPS = ("overflow", "overflow-x", "overflow-y", "white-space")


def css_rules(css: str) -> list[tuple[str, dict[str, tuple[str, bool]]]]:
    """(selector list, {property: (value, important)}) of every style rule that declares one of PROPS, in
    source order; rules inside `@media print` and `@keyframes` are left out (screen is what a reader sees)."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules, stack, buf = [], [], []
    for ch in css:
        if ch == "{":
            stack.append("".join(buf).strip())
            buf = []
        elif ch == "}":
            body, buf = "".join(buf), []
            if not stack:
                continue
            prelude = stack.pop()
            context = " ".join(stack)
            if prelude.startswith("@") or "print" in context or "keyframes" in context:
                continue
            decls = {}
            for decl in body.split(";"):
                if ":" in decl:
                    prop, value = (x.strip() for x in decl.split(":", 1))
                    if prop.lower() in PROPS:
                        important = "!important" in value
                        decls[prop.lower()] = (value.replace("!important", "").strip().lower(), important)
            if decls:
                rules.append((prelude, decls))
        else:
            buf.append(ch)
    return rules


def split_selectors(selector_list: str) -> list[str]:
    """Split a selector list at its top-level commas (not those inside :is(…), :not(…))."""
    parts, depth, cur = [], 0, []
    for ch in selector_list:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur).strip())
    return [p for p in parts if p]


def specificity(selector: str) -> tuple[int, int, int]:
    s = re.sub(r":where\([^)]*\)", "", selector)
    ids = len(re.findall(r"#[\w-]+", s))
    classes = len(re.findall(r"\.[\w-]+|\[[^\]]*\]|(?<!:):(?!is\(|not\(|has\()[\w-]+", s))
    types = len(re.findall(r"(?:^|[\s>+~(])([a-zA-Z][\w-]*)", s))
    return ids, classes, types


@lru_cache(maxsize=None)
def _compiled(selector: str):
    if "::" in selector or re.search(r":(hover|focus|active|visited|before|after)", selector):
        return None                                          # never the plain element a reader sees
    try:
        return soupsieve.compile(selector)
    except Exception:                                        # a selector soupsieve does not know
        return None


class Cascade:
    """The PROPS of elements of one page under the stylesheets it loads (declared values, no inheritance:
    none of PROPS but white-space inherits, and white-space is read off the element itself)."""

    def __init__(self, sheets: list[str]):
        self.rules = []                                      # (selector, decls, order)
        for css in sheets:
            for selector_list, decls in css_rules(css):
                for sel in split_selectors(selector_list):
                    self.rules.append((sel, decls, len(self.rules)))

    def style(self, element) -> dict[str, str]:
        won: dict[str, tuple] = {}
        if element.name == "pre":
            won["white-space"] = ((0, (0, 0, 0), -1), "pre")     # the browser's default for <pre>
        for sel, decls, order in self.rules:
            compiled = _compiled(sel)
            if compiled is None or not compiled.match(element):
                continue
            for prop, (value, important) in decls.items():
                key = (int(important), specificity(sel), order)
                if prop not in won or key >= won[prop][0]:
                    won[prop] = (key, value)
        style = {prop: value for prop, (_, value) in won.items()}
        if "overflow" in style:                              # the shorthand: one value, or x then y
            parts = style["overflow"].split()
            over = won["overflow"][0]
            for axis, value in zip(("overflow-x", "overflow-y"), (parts[0], parts[-1])):
                if axis not in won or over >= won[axis][0]:
                    style[axis] = value
        x, y = style.get("overflow-x", "visible"), style.get("overflow-y", "visible")
        if x == "visible" and y not in ("visible", "clip"):
            x = "auto"                                       # CSS: visible beside a non-visible axis is auto
        style["overflow-x"] = x
        return style


def cut_off(element, cascade: Cascade) -> str | None:
    """None if the element's content wider than the column scrolls or wraps; else why it would be cut off."""
    node = element
    while node is not None and node.name not in (None, "[document]", "html"):
        style = cascade.style(node)
        if node is element and style.get("white-space", "normal") not in ("pre", "nowrap") and node.name == "pre":
            return None                                      # the lines wrap
        x = style["overflow-x"]
        if x in SCROLLS:
            return None
        if x in CLIPS:
            return f"<{node.name} class={node.get('class')}> clips it (overflow-x: {x})"
        node = node.parent
    return "nothing scrolls it sideways: it runs past the content column"


def wide_output_cut_off(soup: BeautifulSoup, cascade: Cascade) -> list[str]:
    """Output blocks and tables whose too-wide content would be cut off rather than scrolled."""
    found, seen = [], set()
    for element in soup.select("div.cell_output pre") + soup.select("table"):
        chain = tuple((n.name, tuple(n.get("class") or ())) for n in [element, *element.parents])
        if chain in seen:                                    # the same place in the page: the same answer
            continue
        seen.add(chain)
        why = cut_off(element, cascade)
        if why:
            found.append(f"<{element.name}> in {'/'.join(c[1][0] if c[1] else c[0] for c in chain[1:4])}: {why}")
    return found


def stylesheets(page: Path, soup: BeautifulSoup) -> list[str]:
    """The text of every local stylesheet the page links, with their @imports inlined, in order."""
    def read(path: Path, depth=0) -> str:
        text = path.read_text(errors="replace")
        if depth < 3:
            text = re.sub(r'@import\s+(?:url\()?["\']?([^"\')]+)["\']?\)?\s*;',
                          lambda m: read(path.parent / m.group(1), depth + 1) if (path.parent / m.group(1)).is_file()
                          else "", text)
        return text
    sheets = []
    for link in soup.find_all("link", href=True):
        if "stylesheet" in (link.get("rel") or []) and not NETWORK.match(link["href"]):
            path = page.parent / link["href"].split("?")[0]
            if path.is_file():
                sheets.append(read(path))
    return sheets


# ---------------------------------------------------------------- negative controls --------------------
def _soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


OUTPUT_HTML = ('<div class="bd-content"><div class="cell"><div class="cell_output docutils container">'
               '<div class="output stream"><div class="highlight"><pre>{}</pre></div></div></div></div></div>')


def test_each_check_flags_a_bad_page():
    assert raw_markdown_tables(_soup("<p>| a | b |\n|---|---|\n| 1 | 2 |</p>"))
    assert raw_markdown_tables(_soup("<p>| a | b | | :--- | ---: |</p>"))
    assert not raw_markdown_tables(_soup("<table><tr><td>a</td></tr></table><p>a | b, not a table</p>"))

    assert literal_macros_in_math(_soup(r'<span class="math notranslate">\(\text{TILE\_M} \times 2\)</span>'))
    assert not literal_macros_in_math(_soup(r'<span class="math">\(\text{acc}_i \leftarrow \alpha_i\)</span>'))

    assert network_math(_soup('<script defer src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js">'
                              '</script>'))
    assert network_math(_soup('<script src="//cdnjs.cloudflare.com/ajax/libs/mathjax/2.7.7/MathJax.js"></script>'))
    assert not network_math(_soup('<script defer src="../_static/mathjax/tex-mml-chtml.js"></script>'))

    for text in ("/x/site-packages/torch/profiler.py:224: UserWarning: Warning: Profiler clears events",
                 "Traceback (most recent call last):\n  File \"/root/x.py\"", "saved to /tmp/tmpab12/k.cubin",
                 "Widget Javascript not detected. It may not be installed or enabled properly.",
                 "# NBVAL_IGNORE_OUTPUT"):
        assert output_noise(_soup(OUTPUT_HTML.format(text))), text
    assert output_noise(_soup('<div class="cell_input"><pre># NBVAL_CHECK_OUTPUT\nprint(1)</pre></div>'))
    assert output_noise(_soup('<div class="cell_output"><div class="output traceback"><pre>x</pre></div></div>'))
    assert not output_noise(_soup(OUTPUT_HTML.format("B1 H16 S1024 D64   19.0 µs   ok")))

    row = '<div class="output stream highlight-myst-ansi notranslate"><div class="highlight"><pre>{}</pre></div></div>'
    assert split_streams(_soup(f'<div class="cell_output">{row.format("a b")}{row.format("1 2")}</div>'))
    assert not split_streams(_soup(f'<div class="cell_output">{row.format("a b")}<img src="x.png"/>'
                                   f'{row.format("1 2")}</div>'))

    wide = _soup(OUTPUT_HTML.format("x" * 300))
    clipped = Cascade(["pre { overflow: visible; white-space: pre } .bd-content { overflow: hidden }"])
    assert "clips it" in "".join(wide_output_cut_off(wide, clipped))
    spills = Cascade(["pre { overflow: visible }"])
    assert "nothing scrolls it" in "".join(wide_output_cut_off(wide, spills))
    overridden = Cascade(["pre { overflow: auto }", "div.cell_output .highlight pre { overflow-x: hidden }"])
    assert wide_output_cut_off(wide, overridden)                # the more specific rule wins
    printed = Cascade(["pre { overflow: hidden } @media print { pre { overflow: auto } }"])
    assert wide_output_cut_off(wide, printed)                   # print styles are not what a reader sees
    # ... and what the theme does passes: basic.css's pre, and myst-nb's scrolling output box.
    assert not wide_output_cut_off(wide, Cascade(["pre { overflow: auto; overflow-y: hidden; }"]))
    assert not wide_output_cut_off(wide, Cascade(["pre { overflow: visible } div.cell_output .output "
                                                  "{ max-width: 100%; overflow-x: auto }"]))
    assert not wide_output_cut_off(wide, Cascade(["pre { white-space: pre-wrap } .bd-content { overflow: hidden }"]))


# ---------------------------------------------------------------- the book ----------------------------
def _pages(html: Path) -> list[Path]:
    return sorted(p for p in html.rglob("*.html")
                  if p.relative_to(html).parts[0] not in ("_static", "_sources", "_images")
                  and p.name not in ("genindex.html", "search.html"))


def test_built_pages_read_cleanly(built_book):
    assert built_book.returncode == 0, f"jupyter-book build failed:\n{built_book.log[-4000:]}"
    pages = _pages(built_book.html)
    assert any(p.name == "naive_cuda.html" for p in pages) and len(pages) >= 12, pages
    problems, outputs_seen, cascades = [], 0, {}
    for page in pages:
        soup = BeautifulSoup(page.read_text(errors="replace"), "html.parser")
        outputs_seen += len(soup.select("div.cell_output pre"))
        sheets = stylesheets(page, soup)
        key = tuple(hash(s) for s in sheets)
        cascade = cascades.setdefault(key, Cascade(sheets))
        name = page.relative_to(built_book.html)
        problems += [f"{name}: markdown table as text: {t!r}" for t in raw_markdown_tables(soup)]
        problems += [f"{name}: script from the network: {s}" for s in network_math(soup)]
        problems += [f"{name}: a macro MathJax prints as text: {m}" for m in literal_macros_in_math(soup)]
        problems += [f"{name}: {n}" for n in output_noise(soup)]
        problems += [f"{name}: output split into blocks: {n}" for n in split_streams(soup)]
        problems += [f"{name}: wide output cut off: {w}" for w in wide_output_cut_off(soup, cascade)]
    assert outputs_seen > 100, f"only {outputs_seen} output blocks: are the stored outputs in the book?"
    assert not problems, "\n".join(problems)


def test_short_table_cells_keep_their_line(built_book):
    """book/_ext/table_cells.py marks a body cell of at most SHORT characters (a time with its unit, a spread)
    ft-nowrap, and the book's stylesheet keeps such a cell on one line; longer cells may wrap."""
    import importlib.util
    from flashtutor.chapters import ROOT
    spec = importlib.util.spec_from_file_location("table_cells", ROOT / "book/_ext/table_cells.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    assert built_book.returncode == 0
    seen = {True: 0, False: 0}
    for page in _pages(built_book.html):
        for td in BeautifulSoup(page.read_text(errors="replace"), "html.parser").select("table tbody td"):
            if td.select_one("span.math"):          # a formula's source is longer in HTML (its \( \) delimiters)
                continue
            short = len(td.get_text().strip()) <= ext.SHORT
            assert ("ft-nowrap" in td.get("class", [])) == short, (page.name, td.get_text()[:60])
            seen[short] += 1
    assert seen[True] > 100 and seen[False] > 100, seen
    css = (ROOT / "book/_static/flashtutor.css").read_text()
    assert re.search(r"td\.ft-nowrap\s*\{\s*white-space:\s*nowrap", css)


def test_one_search_control_where_the_sidebar_shows():
    """The sidebar's search field and the header's search button open the same search (issue 26 item 8: 'a second
    search box'): the stylesheet hides the header's where the sidebar is shown, and only there."""
    css = (Path(__file__).resolve().parents[1] / "book/_static/flashtutor.css").read_text()
    rule = re.search(r"@media \(min-width: (\d+)px\) \{\s*\.article-header-buttons \.search-button,\s*"
                     r"\.bd-header \.search-button-field \{\s*display: none !important;", css)
    assert rule and int(rule.group(1)) == 960, "the header's search button is not hidden beside the sidebar"
