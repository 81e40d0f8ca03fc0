"""book/results.md is what results/ gives, and its numbers come from results/ (CPU tier, about a second).

* the committed page passes `python -m flashtutor.results_page --check`;
* cells of the ladder tables and of the other sections, recomputed here straight from the JSON (with code of
  this file's own, not the generator's helpers), appear in the page's rows;
* every number in the ladder tables is a number of a results file (at the precision printed) or a bound
  of flashtutor/chapters.py;
* negative controls: a tampered copy of a results file changes the page (and its number appears), a newer
  report replaces an older one and the page names both, a stale page makes `--check` fail;
* the claims: at most 15 words each, quoted exactly from their seed report (when ../shared/seeds is there),
  one of three verdicts, and only files that exist in results/ named as sources.
"""
from __future__ import annotations

import json
import re
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


def _newest(gpu: str, key: str, folder: Path = RESULTS) -> Path:
    names = sorted(p for p in folder.glob(f"grade{key}-solution-{gpu}-*.json")
                   if re.fullmatch(rf"grade{key}-solution-{gpu}-\d{{4}}-\d\d-\d\d\.json", p.name))
    return names[-1]


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
    for key in CHAPTERS:
        d = json.loads(_newest(gpu, key).read_text())
        t = next(x for x in d["timings"] if x["problem"] == SEED)
        me, sd = t["times"]["learner"], t["times"]["sdpa"]
        row = _ladder_row(page, gpu, key)
        assert row[1] == f"{me['median_us']:.1f} µs ({me['p10_us']:.1f}–{me['p90_us']:.1f})", (gpu, key, row)
        assert row[2] == f"{sd['median_us']:.1f} µs ({sd['p10_us']:.1f}–{sd['p90_us']:.1f})", (gpu, key, row)
        assert row[3] == f"{me['median_us'] / sd['median_us']:.2f}×", (gpu, key, row)
        assert row[4] == f"{me['host_us']:.1f} / {sd['host_us']:.1f}", (gpu, key, row)
        ratios = {x["problem"]: x["times"]["learner"]["median_us"] / x["times"]["sdpa"]["median_us"]
                  for x in d["timings"] if x.get("times")}
        worst, best = max(ratios, key=ratios.get), min(ratios, key=ratios.get)
        assert row[5] == f"{ratios[worst]:.2f}× ({worst})" and row[6] == f"{ratios[best]:.2f}× ({best})", row
        assert row[7] == "/".join(sorted({x["basis"] for x in d["timings"]}))
        rule = CHAPTERS[key].speed
        if rule.max_ratio_vs_sdpa:
            assert f"≤ {rule.max_ratio_vs_sdpa:g}× SDPA" in row[8]
            assert row[9].startswith("yes" if max(ratios.values()) <= rule.max_ratio_vs_sdpa else "no"), row
        if rule.min_speedup_vs:
            least = min(x["speedup_vs_baseline"] for x in d["timings"])
            assert row[9].startswith("yes" if least >= rule.min_speedup_vs else "no") and f"{least:.2f}×" in row[9]
        assert f"results/{_newest(gpu, key).name}" in _section(page, f"### {GPUS[gpu]}")


def test_environment_line_from_the_reports(page):
    for gpu in GPUS:
        envs = [json.loads(_newest(gpu, k).read_text())["env"] for k in CHAPTERS]
        line = _section(page, f"### {GPUS[gpu]}").strip().splitlines()[0]
        for field in ("driver", "torch"):
            for v in {e[field] for e in envs}:
                assert v in line, (gpu, field, line)
        for e in envs:
            assert e["date"] in line or min(x["date"] for x in envs) <= e["date"] <= max(x["date"] for x in envs)
        assert str(min(e["date"] for e in envs)) in line and str(max(e["date"] for e in envs)) in line


def _numbers_of(obj, out: set[str]) -> set[str]:
    """Every number of a JSON document, as the page may print it (0, 1 or 2 decimals, or :g)."""
    if isinstance(obj, dict):
        for v in obj.values():
            _numbers_of(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _numbers_of(v, out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out.update({f"{obj:.0f}", f"{obj:.1f}", f"{obj:.2f}", f"{obj:g}"})
    return out


def test_every_number_in_the_ladder_tables_comes_from_a_results_file(page):
    allowed: set[str] = set()
    for gpu in GPUS:
        for key in CHAPTERS:
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
    assert row[3] == f"{o['median_us']:.1f} µs" and row[4].startswith(f"{n['median_us']:.1f} µs *")
    assert f"results/{_newest('h200', '02').name}" in files[row[0]]
    assert files[row[0]].startswith(f"{o['median_us']:.1f} µs ({o['p10_us']:.1f}–{o['p90_us']:.1f})")
    assert row[5] == f"{o['median_us'] - n['median_us']:+.1f} µs" and row[6] == f"{o['median_us'] / n['median_us']:.2f}×"
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
    pct = 100 * t["times"]["sdpa"]["median_us"] / t["times"]["learner"]["median_us"]
    row = next(r for r in _rows(text) if "98% of PyTorch SDPA efficiency" in r[1])
    assert f"H100: {pct:.0f}% of SDPA's speed" in row[2] and row[3] == "**does not hold**"
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
    assert "123.4 µs with both" in note and "host-cost-h100-2099-01-01.json" in note
    for f in results_copy.glob("host-cost-*.json"):
        f.unlink()
    assert rp.host_cost_note(rp.Results(results_copy)) == ""          # no probe file: no claim about it
