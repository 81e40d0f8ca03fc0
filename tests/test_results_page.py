"""book/results.md is what results/ gives, and its numbers come from results/ (CPU tier, about a second).

* the committed page passes `python -m flashtutor.results_page --check`;
* cells of the ladder tables and of the other sections, recomputed here straight from the JSON (with code of
  this file's own, not the generator's helpers), appear in the page's rows;
* every number in the ladder tables is a number of a results file (at the precision printed) or a bound
  of flashtutor/chapters.py;
* negative controls: a tampered copy of a results file changes the page (and its number appears), a newer
  report replaces an older one and the page names both, a stale page makes `--check` fail;
* the claims: at most 15 words each, quoted exactly from their seed report (when ../shared/seeds is there),
  one of three verdicts, and only files that exist in results/ named as sources;
* the ladder chart: the page opens with it, the committed SVG is what the results give (and changes with them),
  its numbers are each kernel's time over SDPA's recomputed from the JSON, chapter 7 shows step 7b (the
  solution) and step 7c (the best step); a chapter with no grade report yet is said so, not drawn;
* the page fits a reader: the long material (the sources lists, the event-timed pairs row by row, the seed
  claims' table) is folded into collapsed blocks, the ladder's tables are not, and what shows unfolded is
  short (a negative control: the same page unfolded fails);
* chapter 8's backward ladder (event-timed, apart from the chart): each run's table recomputed from its JSON, a
  failed check counted in its caption, the runs' logs (.log, even one holding JSON) ignored;
* no number on the page has more than 3 significant digits, and every ratio to SDPA is the kernel's time over
  SDPA's (both checks fed a bad line too, to show they can fail).
"""
from __future__ import annotations

import json
import math
import re
import statistics
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from flashtutor import results_page as rp
from flashtutor.chapters import CHAPTERS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
PAGE = ROOT / "book" / "results.md"
SEEDS = ROOT.parent / "shared" / "seeds"
SEED = "B1 H16 S1024 D64"
GPUS = {"h100": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200"}


def _sig(x: float) -> str:
    """x to 3 significant digits, trailing zeros kept (written apart from the generator's formatter)."""
    if x == 0:
        return "0"
    exp = math.floor(math.log10(abs(x)))
    text = f"{float(f'{x:.2e}'):.{max(0, 2 - exp)}f}"
    return text


def _time(us: float) -> tuple[float, str]:
    return (us / 1000, "ms") if us >= 1000 else (us, "µs")


def _spread(m: dict) -> str:
    v, unit = _time(m["median_us"])
    k = 1000 if unit == "ms" else 1
    return f"{_sig(v)} {unit} ({_sig(m['p10_us'] / k)}–{_sig(m['p90_us'] / k)})"


def _plain(text: str) -> str:
    return text.replace("\u00a0", " ").replace("\u2060", "")


def _section(page: str, heading: str) -> str:
    """The text under ``heading`` (a markdown heading line) up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    start = page.index(heading + "\n")
    rest = page[start + len(heading) + 1:]
    m = re.search(rf"^#{{1,{len(level)}}} ", rest, re.M)
    return rest[: m.start()] if m else rest


def _rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("|---")]


def _grades(gpu: str, key: str, folder: Path = RESULTS) -> list[Path]:
    return sorted(p for p in folder.glob(f"grade{key}-solution-{gpu}-*.json")
                  if re.fullmatch(rf"grade{key}-solution-{gpu}-\d{{4}}-\d\d-\d\d\.json", p.name))


def _newest(gpu: str, key: str, folder: Path = RESULTS) -> Path:
    return _grades(gpu, key, folder)[-1]


def _graded(gpu: str) -> list[str]:
    """The chapters with a grade report of their solution on ``gpu`` (a new chapter may have none yet)."""
    return [key for key in CHAPTERS if _grades(gpu, key)]


def _ladder_row(page: str, gpu: str, key: str) -> list[str]:
    """A chapter's cells from the GPU's two ladder tables, in one list: chapter, solution, SDPA, ratio, host,
    worst, best, basis, rule, passes."""
    rows = [r for r in _rows(_section(_plain(page), f"### {GPUS[gpu]}")) if re.match(rf"\{{doc\}}`{key} ", r[0])]
    ratios, times = rows          # the ratios-and-rule table's row, then the seed shape's times
    assert len(ratios) == 5 and len(times) == 5, rows
    rule, _, passes = ratios[4].partition(" — ")       # a chapter without a speed rule has no outcome
    return [ratios[0], times[1], times[2], ratios[1], times[3], ratios[2], ratios[3], times[4], rule, passes]


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text()


def test_committed_page_is_current():
    result = subprocess.run([sys.executable, "-m", "flashtutor.results_page", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, (result.stdout + result.stderr
                                    + "\nregenerate it: python -m flashtutor.results_page")


def test_the_page_is_in_the_table_of_contents():
    assert re.search(r"^\s*- file: book/results\s*$", (ROOT / "_toc.yml").read_text(), re.M)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_ladder_cells_recomputed_from_the_json(page, gpu):
    assert len(_graded(gpu)) >= 7
    for key in CHAPTERS:
        if key not in _graded(gpu):           # no report yet: the row says so, with nothing else in it
            rows = [r for r in _rows(_section(_plain(page), f"### {GPUS[gpu]}")) if re.match(rf"\{{doc\}}`{key} ", r[0])]
            assert rows and rows[0][1] == "no grade report in results/" and rows[0][2:4] == ["", ""], rows
            continue
        d = json.loads(_newest(gpu, key).read_text())
        t = next(x for x in d["timings"] if x["problem"] == SEED)
        me, sd = t["times"]["learner"], t["times"]["sdpa"]
        row = _ladder_row(page, gpu, key)
        assert row[1] == _spread(me), (gpu, key, row)
        assert row[2] == _spread(sd), (gpu, key, row)
        assert row[3] == f"{_sig(me['median_us'] / sd['median_us'])}×", (gpu, key, row)     # yours ÷ SDPA's
        assert row[4] == f"{_sig(me['host_us'])} / {_sig(sd['host_us'])}", (gpu, key, row)
        ratios = {x["problem"]: x["times"]["learner"]["median_us"] / x["times"]["sdpa"]["median_us"]
                  for x in d["timings"] if x.get("times")}
        worst, best = max(ratios, key=ratios.get), min(ratios, key=ratios.get)
        assert row[5] == f"{_sig(ratios[worst])}× ({worst})" and row[6] == f"{_sig(ratios[best])}× ({best})", row
        assert row[7] == "/".join(sorted({x["basis"] for x in d["timings"]}))
        rule = CHAPTERS[key].speed
        if rule.max_ratio_vs_sdpa:
            assert f"≤ {rule.max_ratio_vs_sdpa:g}× SDPA" in row[8]
            assert row[9].startswith("yes" if max(ratios.values()) <= rule.max_ratio_vs_sdpa else "no"), row
        if rule.min_speedup_vs:
            least = min(x["speedup_vs_baseline"] for x in d["timings"])
            assert row[9].startswith("yes" if least >= rule.min_speedup_vs else "no") and f"{_sig(least)}×" in row[9]
        assert f"results/{_newest(gpu, key).name}" in _section(page, f"### {GPUS[gpu]}")


def test_environment_line_from_the_reports(page):
    for gpu in GPUS:
        envs = [json.loads(_newest(gpu, k).read_text())["env"] for k in _graded(gpu)]
        line = _section(page, f"### {GPUS[gpu]}").strip().splitlines()[0]
        for field in ("driver", "torch"):
            for v in {e[field] for e in envs}:
                assert v in line, (gpu, field, line)
        for e in envs:
            assert e["date"] in line or min(x["date"] for x in envs) <= e["date"] <= max(x["date"] for x in envs)
        assert str(min(e["date"] for e in envs)) in line and str(max(e["date"] for e in envs)) in line


def _numbers_of(obj, out: set[str]) -> set[str]:
    """Every number of a JSON document, as the page may print it: 3 significant digits, of a time in µs also in
    ms, or as :g (the rules' bounds)."""
    if isinstance(obj, dict):
        for v in obj.values():
            _numbers_of(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _numbers_of(v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and math.isfinite(obj):   # NaN: nothing printed
        out.update({f"{obj:g}", _sig(obj), _sig(obj / 1000)})
    return out


def test_every_number_in_the_ladder_tables_comes_from_a_results_file(page):
    allowed: set[str] = set()
    for gpu in GPUS:
        for key in _graded(gpu):
            _numbers_of(json.loads(_newest(gpu, key).read_text()), allowed)
    for ch in CHAPTERS.values():      # the speed rules' bounds
        for v in (ch.speed.max_ratio_vs_sdpa, ch.speed.min_speedup_vs):
            if v:
                allowed.add(f"{v:g}")
    checked = 0
    for gpu in GPUS:
        for row in _rows(_section(_plain(page), f"### {GPUS[gpu]}"))[1:]:
            for cell in row[1:]:                           # the first cell is the chapter's name
                cell = re.sub(r"B\d+ H\d+ S\d+ D\d+", "", cell)
                for tok in re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", cell):
                    checked += 1
                    assert tok in allowed, f"{gpu}: {tok!r} in {row[0]!r} is in no results file"
    assert checked > 100


def test_event_section_pairs_recomputed(page):
    text = _plain(_section(page, "## Event-timed vs GPU time per call"))
    old = json.loads((RESULTS / "bench02-h200-2026-11-21.json").read_text())
    new = json.loads(_newest("h200", "02").read_text())
    o = next(r for r in old["rows"] if r["problem"] == SEED and r["step"] == "SDPA")
    n = next(t for t in new["timings"] if t["problem"] == SEED)["times"]["sdpa"]
    files = dict(re.findall(r"^(\d+)\. (.*)$", text, re.M))          # the files under the table, by row number
    row = next(r for r in _rows(text) if r[1] == SEED and r[2] == "SDPA (cuDNN)"
               and "results/bench02-h200-2026-11-21.json" in files[r[0]])
    assert row[3] == f"{_sig(o['median_us'])} µs" and row[4].startswith(f"{_sig(n['median_us'])} µs *")
    assert f"results/{_newest('h200', '02').name}" in files[row[0]]
    assert files[row[0]].startswith(_spread(o))
    assert row[5] == f"{o['median_us'] - n['median_us']:+.1f} µs" and row[6] == f"{_sig(o['median_us'] / n['median_us'])}×"
    # only pairs where both exist: chapter 6's solution is timed at the seed shape, not at B32 H16 S512 D64
    assert not [r for r in _rows(text) if r[2] == "chapter 6's solution" and r[1] != SEED]


def test_claims_are_short_exact_quotes_with_a_verdict_and_real_sources():
    seeds_here = SEEDS.is_dir()

    def norm(s: str) -> str:
        return re.sub(r"\s+", " ", s.replace("**", "")).strip()

    def readings(raw: str):        # two seeds were saved with their UTF-8 decoded as Mac Roman or cp1252
        yield raw
        for enc in ("mac_roman", "cp1252"):
            yield raw.encode(enc, errors="ignore").decode("utf-8", errors="ignore")

    res = rp.Results(RESULTS)
    for c in rp.CLAIMS:
        assert len(c.quote.split()) <= 15, c.quote
        assert c.chapter in CHAPTERS or (ROOT / f"{c.chapter}.ipynb").exists() or (ROOT / f"{c.chapter}.md").exists()
        if seeds_here:
            raw = (SEEDS / c.seed).read_text(encoding="utf-8")
            assert any(norm(c.quote) in norm(r) for r in readings(raw)), (c.seed, c.quote)
        f = c.measure(res)
        assert f.verdict in (rp.HOLDS, rp.FAILS, rp.UNMEASURED), f
        for name in f.sources:
            assert (RESULTS / name).is_file(), name
        if f.verdict != rp.UNMEASURED:
            assert f.sources, c.quote


def test_a_claim_recomputed(page):
    text = _plain(_section(page, "## Appendix: seed claims vs measured"))
    t = next(x for x in json.loads(_newest("h100", "05").read_text())["timings"] if x["problem"] == SEED)
    x = t["times"]["learner"]["median_us"] / t["times"]["sdpa"]["median_us"]
    row = next(r for r in _rows(text) if "98% of PyTorch SDPA efficiency" in r[1])
    assert f"H100: {_sig(x)}× SDPA's time" in row[2] and row[3] == "**does not hold**"
    row = next(r for r in _rows(text) if "1.51× faster than FlashAttention-3" in r[1])
    assert row[3] == "**not measured yet**"           # FlashAttention-3 is in no results file


# ---------------------------------------------------------------- negative controls ----------------
@pytest.fixture
def results_copy(tmp_path) -> Path:
    dest = tmp_path / "results"
    dest.mkdir()
    for p in RESULTS.glob("*.json"):
        shutil.copy(p, dest / p.name)
    return dest


def _set_seed_time(path: Path, median: float) -> None:
    d = json.loads(path.read_text())
    t = next(x for x in d["timings"] if x["problem"] == SEED)
    t["times"]["learner"]["median_us"] = median
    t["ratio"] = median / t["times"]["sdpa"]["median_us"]
    path.write_text(json.dumps(d))


def test_a_tampered_results_file_changes_the_page(results_copy, page):
    assert rp.render(results_copy) == page                  # the copy alone gives the committed page
    _set_seed_time(results_copy / _newest("h100", "04").name, 99.9)
    changed = rp.render(results_copy)
    assert changed != page
    assert _ladder_row(changed, "h100", "04")[1].startswith("99.9 µs")
    assert not _ladder_row(page, "h100", "04")[1].startswith("99.9 µs")


def test_the_newest_report_is_used_and_named(results_copy):
    old = results_copy / _newest("h100", "04").name
    newer = results_copy / "grade04-solution-h100-2099-01-01.json"
    shutil.copy(old, newer)
    _set_seed_time(newer, 77.7)
    text = rp.render(results_copy)
    assert _ladder_row(text, "h100", "04")[1].startswith("77.7 µs")
    sources = _section(text, "### NVIDIA H100 80GB HBM3")
    assert f"`results/{newer.name}`" in sources and f"older: `results/{old.name}`" in sources   # the next newest first


def test_a_stale_page_fails_the_check(tmp_path, results_copy, page):
    stale = tmp_path / "results.md"
    stale.write_text(page)
    (tmp_path / rp.CHART).parent.mkdir(parents=True)
    shutil.copy(PAGE.parent / rp.CHART, tmp_path / rp.CHART)              # the chart beside the page
    assert rp.main(["--check", "--results", str(results_copy), "--page", str(stale)]) == 0
    stale.write_text(page.replace("## The ladder against SDPA", "## The ladder against SDPA (edited)"))
    assert rp.main(["--check", "--results", str(results_copy), "--page", str(stale)]) == 1
    stale.write_text(page)
    _set_seed_time(results_copy / _newest("h200", "03").name, 55.5)     # the results moved on, the page did not
    assert rp.main(["--check", "--results", str(results_copy), "--page", str(stale)]) == 1
    assert rp.main(["--results", str(results_copy), "--page", str(stale)]) == 0     # regenerating fixes it
    assert rp.main(["--check", "--results", str(results_copy), "--page", str(stale)]) == 0


def test_host_cost_note_reads_the_newest_probe(results_copy):
    probe = json.loads(next(RESULTS.glob("host-cost-*.json")).read_text())
    probe["median_host_us_per_call"]["judge"] = 123.4
    (results_copy / "host-cost-h100-2099-01-01.json").write_text(json.dumps(probe))
    note = rp.host_cost_note(rp.Results(results_copy))
    assert "123 µs with both" in _plain(note) and "host-cost-h100-2099-01-01.json" in note
    for f in results_copy.glob("host-cost-*.json"):
        f.unlink()
    assert rp.host_cost_note(rp.Results(results_copy)) == ""          # no probe file: no claim about it


# ---------------------------------------------------------------- the chart ------------------------
def test_the_page_opens_with_the_chart(page):
    body = re.sub(r"<!--.*?-->", "", page, flags=re.S).split("\n", 1)[1].lstrip()     # after the title
    assert body.startswith(f"```{{figure}} {rp.CHART}\n"), body[:200]
    figure = body[: body.index("\n```\n")]
    assert "|" not in figure and "\n#" not in figure                 # nothing (no table, no section) before it
    assert (PAGE.parent / rp.CHART).is_file()
    caption = _plain(figure)
    for gpu in GPUS.values():                                          # the GPUs, versions and dates: in the caption
        assert gpu in caption
    assert "driver" in caption and "torch" in caption and re.search(r"\d{4}-\d\d-\d\d", caption)
    files = _plain(_section(page, "## The ladder at a glance"))          # the files it draws: under its table
    for gpu in GPUS:
        for key in _graded(gpu):
            assert re.search(rf"grade(?:{key}|\{{[\d,]*\b{key}\b[\d,]*\}})-solution-{gpu}-", files), (gpu, key)
    assert rp.ladder_chart_data(rp.Results(RESULTS))["h100"]["best"]["07"]["file"] in files
    svg = (PAGE.parent / rp.CHART).read_text()
    assert rp.CHART_TITLE in svg and "SDPA" in svg
    texts = " ".join(re.findall(r"<text[^>]*>([^<]*)</text>", svg))
    assert "SDPA" in texts and "driver" not in texts and not re.search(r"\d{4}-\d\d", texts)   # no environment in it


def test_the_committed_chart_is_what_the_results_give_and_changes_with_them(results_copy):
    assert rp.chart_svg(rp.Results(results_copy)) == (PAGE.parent / rp.CHART).read_bytes()
    _set_seed_time(results_copy / _newest("h100", "07").name, 1.0)       # chapter 7's solution at 1 µs
    assert rp.chart_svg(rp.Results(results_copy)) != (PAGE.parent / rp.CHART).read_bytes()


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_chart_numbers_are_yours_over_sdpa_recomputed_from_the_json(gpu):
    everything = rp.ladder_chart_data(rp.Results(RESULTS))
    data = everything[gpu]
    ungraded = [k for k in CHAPTERS if not any(_grades(g, k) for g in GPUS)]
    assert rp.drawn_chapters(everything) == [k for k in CHAPTERS if k not in ungraded]     # no empty slot drawn
    for key in _graded(gpu):
        d = json.loads(_newest(gpu, key).read_text())
        mine = [t["times"]["learner"]["median_us"] / t["times"]["sdpa"]["median_us"] for t in d["timings"]
                if t.get("times")]
        st = data["solution"][key]
        assert st["file"] == _newest(gpu, key).name
        assert st["median"] == pytest.approx(statistics.median(mine), rel=1e-9), (gpu, key)
        assert (st["lo"], st["hi"]) == pytest.approx((min(mine), max(mine)), rel=1e-9)
    ref = [t["times"]["reference"]["median_us"] / t["times"]["sdpa"]["median_us"]
           for t in json.loads(_newest(gpu, "01").read_text())["timings"]]
    assert data["best"]["01"]["step"] == "1a" and data["best"]["01"]["median"] == pytest.approx(statistics.median(ref))


def test_chapter_7_shows_the_solution_7b_and_the_best_step_7c(page):
    text = _plain(_section(page, "## The ladder at a glance"))
    rows = _rows(text)
    at = next(i for i, r in enumerate(rows) if r[0].startswith("{doc}`07 "))
    ch7 = rows[at:at + 3]
    assert ch7[0][1] == "7b, the solution" and ch7[1][1] == "7c, the best step", ch7
    # 7c recomputed from the newest chapter-7 run on the H100, at the grader's shapes it timed back to back
    runs = sorted(RESULTS.glob("ch07-h100-*.json"), key=lambda f: json.loads(f.read_text())["environment"]["date"])
    run = json.loads(runs[-1].read_text())
    graded = {t["problem"] for t in json.loads(_newest("h100", "07").read_text())["timings"]}
    xs = [r["us"] / r["sdpa_us"] for r in run["steps"]["7c"]["records"]
          if r["kind"] == "stream" and r["problem"] in graded and r["basis"] == "back-to-back"]
    assert ch7[1][2] == f"{_sig(statistics.median(xs))}× ({_sig(min(xs))}–{_sig(max(xs))})", ch7[1]
    assert ch7[1][3] == "not timed"                      # no chapter-7 run on the H200: said, not drawn
    assert runs[-1].name in text                          # the files under the table name the run
    d7 = json.loads(_newest("h100", "07").read_text())
    sol = [t["ratio"] for t in d7["timings"]]
    assert ch7[0][2].startswith(f"{_sig(statistics.median(sol))}×")


# ---------------------------------------------------------------- the page fits a reader ----------
def _blocks(page: str) -> tuple[str, list[tuple[str, str]]]:
    """(what shows unfolded, [(title, body)] of every collapsed block); fails on an unclosed block, a block in a
    block, or a heading inside one (a folded heading would vanish from the page's contents)."""
    shown, blocks, inside = [], [], None
    for line in page.splitlines():
        if line.startswith(":::{dropdown}"):
            assert inside is None, "a block in a block"
            inside = (line.split("}", 1)[1].strip(), [])
        elif line == ":::" and inside is not None:
            blocks.append((inside[0], "\n".join(inside[1])))
            inside = None
        elif inside is not None:
            assert not line.startswith("#"), f"a heading folded away: {line}"
            inside[1].append(line)
        else:
            shown.append(line)
    assert inside is None, "a block is not closed"
    return "\n".join(shown), blocks


def folding_problems(page: str) -> list[str]:
    """What a reader would have to scroll through: long material unfolded, or the ladder's tables folded away."""
    shown, blocks = _blocks(page)
    out = []
    rows = [line for line in shown.splitlines() if line.startswith("| ") and not line.startswith("|---")]
    if len(rows) > 60:
        out.append(f"{len(rows)} table rows unfolded")
    words = len(re.sub(r"<!--.*?-->", "", shown, flags=re.S).split())
    if words > 4000:
        out.append(f"{words} words unfolded")
    claims = _section(shown, "## Appendix: seed claims vs measured")
    if any(line.startswith("| `00") for line in claims.splitlines()):
        out.append("the seed claims' table is unfolded")
    if re.search(r"^\* chapter \d\d: ", shown, re.M):
        out.append("a sources list is unfolded")
    if re.search(r"^\d+\. .*results/", shown, re.M):
        out.append("the event-timed pairs' files are unfolded")
    for gpu in GPUS.values():                   # the ladder's tables: unfolded, under their GPU's heading
        if not [r for r in _rows(_section(shown, f"### {gpu}")) if r[0].startswith("{doc}`")]:
            out.append(f"the {gpu} ladder tables are folded away")
    if not _rows(_section(shown, "## The ladder at a glance")):
        out.append("the chart's table is folded away")
    return out


def test_the_long_material_is_folded(page):
    assert folding_problems(page) == []
    shown, blocks = _blocks(page)
    titles = [t for t, _ in blocks]
    assert len(blocks) >= 5 and all(t and len(t) <= 90 for t in titles), titles
    assert any("claims" in t for t, _ in blocks) and sum("Sources" in t for t in titles) == len(GPUS)
    for _, body in blocks:
        assert body.strip()


def test_the_folding_check_fails_on_the_page_unfolded(page):
    unfolded = "\n".join(line for line in page.splitlines() if not line.startswith(":::"))
    problems = folding_problems(unfolded)
    assert "the seed claims' table is unfolded" in problems and "a sources list is unfolded" in problems
    assert "the event-timed pairs' files are unfolded" in problems
    with pytest.raises(AssertionError):
        _blocks(page.replace("\n:::\n", "\n", 1))                     # a block left open


# ---------------------------------------------------------------- precision and direction ---------
def _shown_numbers(text: str) -> list[str]:
    """The numbers a reader sees on the page, less those that are names: shapes, dates, versions, file names,
    code, link targets, and the seeds' own words (quoted as they are)."""
    t = _plain(text)
    t = re.sub(r"<!--.*?-->", "", t, flags=re.S)
    t = re.sub(r"^(```|:\w+:).*$", "", t, flags=re.M)            # the figure's fences and options
    for pattern in (r"`[^`]*`", r"<[^>]*>", r"“[^”]*”", r"B\d+ H\d+ S\d+ D\d+", r"\d{4}-\d\d-\d\d(?: \d\d:\d\d)?",
                    r"\d+(?:\.\d+){2,}\S*", r"results/\S+"):
        t = re.sub(pattern, " ", t)
    return re.findall(r"(?<![\w./])[-+]?\d+(?:\.\d+)?(?![\w/]|\.\d)", t)


def _significant(token: str) -> int:
    digits = token.lstrip("+-")
    digits = digits.replace(".", "").lstrip("0") if "." in digits else digits.lstrip("0").rstrip("0")
    return len(digits)


def too_precise(text: str) -> list[str]:
    return [tok for tok in _shown_numbers(text) if _significant(tok) > 3]


def test_no_number_on_the_page_has_more_than_3_significant_digits(page):
    assert len(_shown_numbers(page)) > 500
    assert too_precise(page) == []


def test_the_digit_check_fails_on_a_bad_row(page):
    bad = "| {doc}`01 Naive </x>` | 1090.23× | 18288.7 µs (18273.5–⁠18312.0) | 0.8234 | B1 H16 S1024 D64 |"
    assert too_precise(page + "\n" + bad) == ["1090.23", "18288.7", "18273.5", "18312.0", "0.8234"]
    assert too_precise("1090× 1.09× 0.823 18300 µs +0.8 µs -474 µs, graded 2026-11-26, torch 2.11.0+cu130") == []
    assert _significant("100.0") == 4 and _significant("0.800") == 3 and _significant("1090") == 3


# SDPA's time over yours (a speed), said in the ways this page would say it.
INVERSE = (r"\d×\s+(?:SDPA's|its|FlashAttention-\d's)\s+speed", r"SDPA's (?:GPU )?time(?: per call)? over (?:the|your|its)",
           r"speed-?up (?:over|against|vs\.?) SDPA", r"SDPA (?:is|was|ran) [\d.]+× faster", r"× faster than SDPA\b(?! is)")


def inverse_ratios(text: str) -> list[str]:
    return [m.group(0) for pat in INVERSE for m in re.finditer(pat, _plain(text))]


def test_every_ratio_to_sdpa_is_yours_over_sdpas(page):
    assert inverse_ratios(page) == []
    assert "the kernel's time divided by SDPA's" in page and "below 1× the kernel is faster" in page
    for bad in ("chapter 5's reference ran at 0.27× its speed", "SDPA's GPU time per call over the solution's",
                "no kernel can be more than 3.01× faster than SDPA here"):
        assert inverse_ratios(page + "\n" + bad), bad


# ---------------------------------------------------------------- chapter 8's backward ladder -----
CH08 = "## Chapter 8's backward ladder (event-timed)"


def _ch08_tables(page: str) -> dict[str, tuple[list[list[str]], str]]:
    """{file name: (the table's rows, header first; its caption)} of the chapter-8 section, folded runs included."""
    out, table = {}, []
    for line in _plain(_section(page, CH08)).splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif m := re.match(r"^`results/(ch08-time-[^`]+)`", line):
            out[m.group(1)] = (table, line)
            table = []
    return out


def _ch08_expected(d: dict) -> tuple[list[str], dict[str, list[str]], int]:
    """From a run's JSON, with this file's own code: its shape columns, {row label: cells} and failed checks."""
    bwd = [r for r in d["records"] if r["kind"] == "time" and r["mode"] == "bwd"]
    name = lambda r: f"B{r['B']} H{r['H']} S{r['S']} D{r['D']}" + (" causal" if r["causal"] else "")   # noqa: E731
    shapes = []
    for r in bwd:
        if name(r) not in shapes:
            shapes.append(name(r))
    cudnn_us = {name(r): r["median_us"] for r in bwd if r["step"] == "SDPA-cudnn"}
    labels = {s.id: f"{s.id} {s.label}" + (", the solution" if s.solution else "") for s in rp.STEPS["08"]}
    who = [s.id for s in rp.STEPS["08"] if any(r["step"] == s.id for r in bwd)] + ["SDPA-flash"]
    rows = {}
    for w in who:
        mine = {name(r): r for r in bwd if r["step"] == w}
        cells = []
        for sh in shapes:
            x = mine[sh]["median_us"] / cudnn_us[sh]
            assert x == pytest.approx(mine[sh]["ratio_vs_SDPA-cudnn"], rel=1e-9)       # the run's own ratio
            cells.append(f"{_sig(x)}×")
        fl = [r["tflops"] for r in mine.values() if r["D"] == 128]
        cells.append(f"{_sig(min(fl))}–{_sig(max(fl))}" if _sig(min(fl)) != _sig(max(fl)) else _sig(min(fl)))
        rows[labels.get(w, "SDPA, FLASH backend")] = cells
    failed = sum(1 for r in d["records"] if r["kind"] == "check" and r["ok"] is False)
    return shapes, rows, failed


def test_ch08_section_numbers_are_the_json_records(page):
    files = sorted(RESULTS.glob("ch08-time-*.json"))
    assert len(files) >= 3
    emitted = rp.render(RESULTS)                   # what the generator gives now (the committed page: the check above)
    tables = _ch08_tables(emitted)
    assert sorted(tables) == [f.name for f in files]                  # every run, none other
    for f in files:
        d = json.loads(f.read_text())
        shapes, rows, failed = _ch08_expected(d)
        table, caption = tables[f.name]
        assert table[0] == ["step", *shapes, "TFLOP/s at D = 128"], table[0]
        assert {r[0]: r[1:] for r in table[1:]} == rows, f.name
        assert [r[0] for r in table[1:]] == list(rows), f.name            # the chapter's order, SDPA FLASH last
        assert f"{failed} of " in caption and d["env"]["gpu"] in caption and d["env"]["torch"] in caption
        assert d["env"]["triton"] in caption and d["env"]["date"].replace("T", " ")[:16] in caption
    # newest first by the date each run records
    order = [n for n in tables]
    dates = [json.loads((RESULTS / n).read_text())["env"]["date"] for n in order]
    assert dates == sorted(dates, reverse=True)
    assert [r[0][:2] for r in tables["ch08-time-h100-2026-11-27-d.json"][0][1:]] == ["8a", "8c", "8d", "SD"]
    assert all("08" not in g["best"] for g in rp.ladder_chart_data(rp.Results(RESULTS)).values())   # not in the chart
    assert _ch08_tables(page) == tables                                  # and the committed page shows them


def test_ch08_a_failed_check_is_counted(results_copy, page):
    d = json.loads((RESULTS / "ch08-time-h100-2026-11-27-e.json").read_text())
    assert "0 of 114 checks failed;" in _ch08_tables(page)["ch08-time-h100-2026-11-27-e.json"][1]
    checks = [r for r in d["records"] if r["kind"] == "check" and r["step"] == "8d"]
    for r in checks[:3]:
        r["ok"] = False
    d["env"]["date"] = "2099-01-01T00:00:00"
    (results_copy / "ch08-time-h100-2099-01-01.json").write_text(json.dumps(d))
    text = rp.render(results_copy)
    table, caption = _ch08_tables(text)["ch08-time-h100-2099-01-01.json"]
    assert f"3 of {len(d['records']) - sum(r['kind'] == 'time' for r in d['records'])} checks failed (step 8d)" in caption
    assert next(iter(_ch08_tables(text))) == "ch08-time-h100-2099-01-01.json"          # the newest, first


def test_ch08_logs_without_json_are_ignored(results_copy, page):
    for p in RESULTS.glob("ch08-time-*.log"):                           # the runs' logs, the -partial ones too
        shutil.copy(p, results_copy / p.name)
    d = json.loads((RESULTS / "ch08-time-h100-2026-11-27-e.json").read_text())
    for r in d["records"]:
        if r.get("kind") == "time":
            r["median_us"] *= 3
    d["env"]["date"] = "2099-01-01T00:00:00"
    (results_copy / "ch08-time-h100-2099-01-01.log").write_text(json.dumps(d))     # JSON, but a log by its name
    assert rp.render(results_copy) == page
    assert ".log" not in _section(page, CH08)
