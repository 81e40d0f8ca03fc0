"""`flashtutor bench NN`, the one runner of the chapters' benchmarks, as far as a CPU machine can see it.

* without a GPU it measures nothing and says so in one line, exit code 3 (`--dry` is offered where the
  chapter has one); a bad request is one line and exit code 2;
* a run writes one JSON file with the environment stamp, a part that fails is recorded and the next one
  runs, skipped parts are logged, companion files sit beside the results file;
* chapter 6's `--dry` run goes through the real runner end to end on tiny shapes (Triton's interpreter).
"""
from __future__ import annotations

import json

import pytest

from flashtutor.bench import runner, tables
from flashtutor.chapters import ROOT, get_chapter
from test_cli import flashtutor, one_line      # the command in a fresh process; its one line on stderr


def _gpu() -> bool:
    import torch
    return torch.cuda.is_available()


needs_no_gpu = pytest.mark.skipif(_gpu(), reason="checks what a machine without a GPU answers")


@needs_no_gpu
@pytest.mark.parametrize("chapter,dry_hint", [("02", False), ("06", True)])
def test_without_a_gpu_bench_says_so_in_one_line(tmp_path, chapter, dry_hint):
    p = flashtutor("bench", chapter, "--out", tmp_path / "out.json", cwd=tmp_path)
    line = one_line(p)
    assert p.returncode == 3, (p.returncode, line)
    assert line.startswith("flashtutor bench: no CUDA GPU visible to torch here") and "nothing was measured" in line
    assert ("--dry" in line) == dry_hint, line
    assert list(tmp_path.iterdir()) == []                 # no results file for what did not run


@pytest.mark.parametrize("args,words", [
    (("bench", "09"), ["unknown chapter '09'"]),
    (("bench", "01"), ["chapter 01 has no benchmark of its own", "02, 03, 04, 05, 06, 07"]),
    (("bench", "05", "--dry"), ["no --dry run", "04, 06"]),
    (("bench", "06", "--dry", "--skip", "nope"), ["no part 'nope'", "checks, launch, table, sweeps, grader"]),
])
def test_a_bad_request_is_one_line_and_exit_code_2(tmp_path, args, words):
    p = flashtutor(*args, cwd=tmp_path)
    line = one_line(p)
    assert p.returncode == 2, (p.returncode, line)
    for w in words:
        assert w in line, line


def test_a_gpu_of_another_architecture_is_told_before_anything_runs(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA A100-SXM4-80GB")
    for key in ("05", "07"):
        with pytest.raises(runner.NotRun, match=r"need sm_90a?.*A100-SXM4-80GB\) is sm_80"):
            runner.where_it_runs(get_chapter(key), dry=False)
    runner.where_it_runs(get_chapter("03"), dry=False)     # any CUDA GPU runs chapter 3's


# ---------------------------------------------------------------- the Run ------------------------
def test_results_file_names():
    assert runner.gpu_tag("NVIDIA H100 80GB HBM3") == "h100" and runner.gpu_tag("NVIDIA H200") == "h200"
    assert runner.gpu_tag("NVIDIA A100-SXM4-80GB") == "a100" and runner.gpu_tag("none") == "none"
    bench = get_chapter("03").bench
    env = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-25 10:00 UTC"}
    assert runner.results_path(bench, env).relative_to(ROOT).as_posix() == "results/bench03-h100-2026-11-25.json"


def test_a_second_run_on_the_same_day_does_not_overwrite(tmp_path):
    bench, env = get_chapter("03").bench, {"gpu": "NVIDIA H200", "date": "2026-11-25 10:00 UTC"}
    first = runner.results_path(bench, env, tmp_path)
    first.write_text("{}")
    assert runner.results_path(bench, env, tmp_path).name == "bench03-h200-2026-11-25-2.json"


def test_a_run_stamps_saves_and_survives_a_failing_part(tmp_path, capsys):
    out = tmp_path / "bench03-h200-2026-11-25.json"
    r = runner.Run("03", out, parts={"a": "part a", "b": "part b", "c": "part c"}, skip=["c"], progress=False)
    assert r.part("a", lambda: [1, 2], store="a_rows") == [1, 2]
    assert r.part("b", lambda: 1 / 0) is None
    assert r.part("c", lambda: pytest.fail("a skipped part ran")) is None
    assert r.side("ncu03", ".txt").name == "ncu03-h200-2026-11-25.txt"
    assert runner.Run("03", tmp_path / "mine.json", progress=False).side("ncu03", ".txt").name == "ncu03-mine.txt"
    doc = json.loads(out.read_text())
    assert {"gpu", "driver", "torch", "triton", "cudnn", "date"} <= set(doc["env"])
    assert doc["a_rows"] == [1, 2] and set(doc["phases"]) == {"a_s", "b_s"} and doc["wall_s"] >= 0
    (fail,) = doc["failures"]
    assert fail["part"] == "b" and fail["error"].startswith("ZeroDivisionError") and "1 / 0" in fail["traceback"]
    log = capsys.readouterr().out
    assert "== part a" in log and "b failed" in log and "part c: skipped (--skip c)" in log
    assert r.skipped == {"c"}


def test_a_part_past_the_budget_is_skipped(tmp_path, capsys):
    r = runner.Run("06", tmp_path / "x.json", parts={"a": "part a"}, budget_s=0.0, progress=False)
    assert r.part("a", lambda: pytest.fail("ran past the budget")) is None
    assert "skipped, past the 0 s budget" in capsys.readouterr().out


def test_every_bench_module_declares_its_parts_and_a_run():
    import importlib
    from flashtutor.chapters import CHAPTERS
    for ch in CHAPTERS.values():
        if ch.bench:
            mod = importlib.import_module(ch.bench.module)
            assert callable(mod.run) and mod.PARTS, ch.key
            assert not hasattr(mod, "main"), f"{ch.bench.module}: one entry point, `flashtutor bench {ch.key}`"


# ---------------------------------------------------------------- end to end, on the CPU ----------
def test_chapter_6_dry_run_end_to_end(tmp_path):
    """`flashtutor bench 06 --dry`: the real runner and chapter module on tiny shapes through Triton's
    interpreter; one results file in the schema the chapter's readers expect, and its companions."""
    out = tmp_path / "bench06-dry.json"
    p = flashtutor("bench", "06", "--dry", "--out", out, "--skip", "sweeps", cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["env"]["gpu"] == "none" and doc["env"]["date"] and "failures" not in doc
    assert {"rows", "peaks", "checks", "l2_copy_tbs", "phases"} <= set(doc)
    assert all(c["ok"] for c in doc["checks"])
    steps = {r["step"] for r in doc["rows"]}
    assert steps == {"ch4 teaching", "ch4 tuned", "SDPA"} | {s.label for s in get_chapter("06").steps}
    assert {f.name for f in tmp_path.iterdir()} == {out.name, "launch06-dry.json", "grade06-notiming-dry.json"}
    assert json.loads((tmp_path / "grade06-notiming-dry.json").read_text())["verdict"] == "pass"
    assert "sweeps_s" not in doc["phases"] and "configuration sweeps (graph-replayed, L2 flushed): skipped" in p.stdout


# ---------------------------------------------------------------- each chapter's run, measurements faked --
# Chapters 2, 3, 5 and 7 have no dry run: their run(r) is driven here with the functions that need a GPU
# replaced, to check what they write (the keys and rows their readers expect) and that they read back.
def _peaks():
    from flashtutor.roofline import datasheet_peaks
    return datasheet_peaks("NVIDIA H100 80GB HBM3")


def _row(problem, step, us, sdpa_us=10.0):
    return {"problem": problem, "step": step, "median_us": us, "spread": 0.02, "time_vs_sdpa": us / sdpa_us,
            "pct_floor": 50.0}


def _run(key, tmp_path, name):
    from importlib import import_module
    mod = import_module(get_chapter(key).bench.module)
    r = runner.Run(key, tmp_path / name, parts=mod.PARTS, progress=False)
    code = mod.run(r)
    r.save()
    return code, json.loads((tmp_path / name).read_text())


def test_chapter_2_run_writes_what_its_readers_read(tmp_path, monkeypatch):
    from flashtutor.bench import ch02
    from flashtutor.grading import sanitize

    def child(args, timeout, log=print):
        res = args[args.index("--result") + 1]
        if args[0] == "--check":
            payload = [{"step": args[1], "problem": "B1 H16 S1024 D64", "ok": True}]
        else:
            steps = args[args.index("--steps") + 1].split("|")
            rows = [_row("B1 H16 S1024 D64", s, 100.0 if s == "ch1 reference" else 5.0) for s in steps]
            payload = {"rows": rows + [_row("B1 H16 S1024 D64", "SDPA", 10.0)], "speedups": ch02.speedups(rows),
                       "resources": {}}
        open(res, "w").write(json.dumps(payload))
        return 0, 0.1
    monkeypatch.setattr(ch02, "_child", child)
    monkeypatch.setattr(sanitize, "sanitize", lambda *a, **k: {"verdict": "clean", "summary": "fake", "tools": {}})
    code, doc = _run("02", tmp_path, "bench02-h100-2026-11-25.json")
    assert code == 0 and "failures" not in doc
    assert {"env", "rows", "speedups", "resources", "checks", "check_summary", "sanitize", "phases"} <= set(doc)
    assert {r["step"] for r in doc["rows"]} == set(ch02.STEPS) | {"SDPA"}
    assert doc["speedups"][0]["speedup"] == 20.0 and set(doc["sanitize"]) == set(ch02.SANITIZED)


def test_chapter_3_run_writes_what_its_readers_read(tmp_path, monkeypatch):
    from flashtutor import roofline
    from flashtutor.bench import ch03, ch07
    monkeypatch.setattr(ch03, "resources", lambda: {"a wmma: wmma_attention_d64": {"registers": 128}})
    monkeypatch.setattr(ch03, "check_all", lambda log=print: [{"step": "a wmma", "problem": "P", "ok": True}])
    monkeypatch.setattr(roofline, "measure_peaks", _peaks)
    us = {"a wmma": 30.0, "b + cp.async": 28.0, "c + padding": 14.0}
    monkeypatch.setattr(ch03, "steps_table", lambda sets, **kw: [_row(f"B1 H16 S1024 D64 {'+'.join(sets)}", s, t)
                                                                  for s, t in us.items()])
    monkeypatch.setattr(ch03, "ncu_bank_conflicts", lambda path, log=print: {"error": "ncu is not on PATH"})
    code, doc = _run("03", tmp_path, "bench03-h100-2026-11-25.json")
    assert code == 0 and "failures" not in doc
    assert {"env", "rows", "resources", "checks", "peaks", "ncu"} <= set(doc) and len(doc["rows"]) == 6
    src, gains = ch07._ch03_gains(tmp_path)       # chapter 7 reads chapter 3's gains from this file
    assert src.startswith("results/bench03-h100-2026-11-25.json") and gains["swizzle"] == [2.0, 2.0]


def test_chapter_5_run_writes_what_its_readers_read(tmp_path, monkeypatch):
    import types

    import torch

    from flashtutor import results_page, roofline
    from flashtutor.bench import ch05, tables
    props = types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132, L2_cache_size=50 << 20,
                                  total_memory=80 << 30)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a: props)
    monkeypatch.setattr(roofline, "measure_peaks", _peaks)
    monkeypatch.setattr(ch05, "build", lambda *a, **k: None)                  # no nvcc, no GEMM parts
    monkeypatch.setattr(ch05, "check_reference", lambda *a, **k: [{"problem": "P", "ok": True}])
    monkeypatch.setattr("flashtutor.kernels.k05_three_kernel.build", lambda **k: None)

    def versus(steps, probs, **kw):
        rows = [dict(_row(p.name, s, 20.0 if s == "SDPA FlashAttention-2 backend" else 50.0), problem_dict=p.to_dict())
                for p in probs for s in list(steps) + ["SDPA"]]
        return [r for r in rows if not (r["step"] == "ch4 Triton (Hopper)" and r["problem_dict"]["S"] != 1024)]
    monkeypatch.setattr(tables, "steps_table", versus)
    monkeypatch.setattr(ch05, "crossover", lambda: [{"S": S, "kernel": k, "us": S / 100 * (2 if k == "SDPA" else 1)}
                                                    for S in ch05.CROSSOVER_S for k in ("3-kernel (reference)", "SDPA")])
    code, doc = _run("05", tmp_path, "bench05-h100-2026-11-25.json")
    assert code == 0
    assert [f["part"] for f in doc.get("failures", [])] == ["extras"]        # it needs a GPU: recorded, not fatal
    assert {"env", "device", "peaks", "reference_configs", "checks", "versus", "seed_claims", "memory",
            "crossover", "crossings"} <= set(doc)
    assert (tmp_path / "crossover05-h100-2026-11-25.png").is_file()
    finding = results_page.claim_fa3(results_page.Results(tmp_path))      # the results page reads this file
    assert "2.50× its time" in finding.measured and finding.sources == ("bench05-h100-2026-11-25.json",)


def test_ch05_seed_claims_read_graph_replayed_times_never_mixed_with_event_timed():
    from flashtutor.bench import ch05
    seed = ch05.SEED.name

    def rows(graph):
        out = [_row(seed, "3-kernel (reference)", 150.0), _row(seed, "SDPA", 17.0),
               _row(seed, "SDPA FlashAttention-2 backend", 30.0)]
        for r, g in zip(out, graph):
            if g:
                r["graph_us"] = g
        return out

    claims = {c["claim"]: c for c in ch05.seed_claims(rows([85.0, 16.0, 25.0]))}
    assert set(claims) >= {ch05.CLAIM_SDPA, ch05.CLAIM_FA3} and ch05.CLAIM_SDPA == "1.02× SDPA's time"
    pct = claims[ch05.CLAIM_SDPA]                          # a time ratio: the pipeline's time / SDPA's
    assert pct["basis"] == "graph-replayed" and abs(pct["value"] - 85 / 16) < 1e-9 and not pct["holds"]
    assert abs(claims["1.65 µs/head"]["value"] - 85 / 16) < 1e-9
    assert abs(claims[ch05.CLAIM_FA3]["value"] - 85 / 25) < 1e-9
    assert "3-kernel 150.0 µs" in claims["(context) event-timed, one call at a time"]["measured"]
    mixed = {c["claim"]: c for c in ch05.seed_claims(rows([85.0, None, 25.0]))}   # SDPA not captured
    assert mixed[ch05.CLAIM_SDPA]["basis"] == "event-timed" and abs(mixed[ch05.CLAIM_SDPA]["value"] - 150 / 17) < 1e-9
    assert "(context) event-timed, one call at a time" not in mixed
    fa = {c["claim"]: c for c in ch05.seed_claims(rows([85.0, 16.0, None]))}[ch05.CLAIM_FA3]
    assert fa["basis"] == "event-timed" and abs(fa["value"] - 150 / 30) < 1e-9
    holds = {c["claim"]: c for c in ch05.seed_claims([_row(seed, "3-kernel (reference)", 17.3),
                                                        _row(seed, "SDPA", 17.0)])}
    assert holds[ch05.CLAIM_SDPA]["holds"]                 # 1.018× SDPA's time: within 5% of the claim


def test_chapter_7_run_writes_what_its_readers_read(tmp_path, monkeypatch):
    from flashtutor import roofline
    from flashtutor.bench import ch07
    monkeypatch.setattr(roofline, "measure_peaks", _peaks)

    def measure(probs, peaks, log=print):
        return [dict(ch07._row(s, p.name, 10.0, 9.0), basis="events", event_us=10.0, sdpa_event_us=9.0,
                     event_ratio=1.1, spread=0.01, sdpa_backend="cudnn", pct_peak=50.0, pct_floor=40.0)
                for p in probs for s in ch07.STEPS]
    monkeypatch.setattr(ch07, "measure", measure)
    code, doc = _run("07", tmp_path, "bench07-h100-2026-11-25.json")
    assert code == 0 and "failures" not in doc and len(doc["rows"]) == 3 * len(ch07.problems())
    (run,) = ch07.stored(tmp_path)                                         # read back as the chapter reads it
    assert run["kind"] == "bench07" and run["file"] == "results/bench07-h100-2026-11-25.json"
    assert len(run["rows"]) == len(doc["rows"]) and run["peaks"]["tensor_tflops"] == _peaks().tensor_tflops


def test_ch07_latest_keeps_the_newest_run_per_gpu_and_kind():
    from flashtutor.bench import ch07
    runs = [{"gpu": g, "kind": k, "date": d, "file": f"{g}-{k}-{d}"}
            for g, k, d in (("H100", "ch07", "2026-11-23"), ("H100", "ch07", "2026-11-26"), ("H100", "grade", "2026-11-23"),
                            ("H200", "grade", "2026-11-26"), ("H200", "grade", "2026-11-23"))]
    assert [r["file"] for r in ch07.latest(runs)] == ["H100-ch07-2026-11-26", "H100-grade-2026-11-23",
                                                       "H200-grade-2026-11-26"]


def test_ch07_stored_leaves_out_a_file_without_step_timings(tmp_path):
    from flashtutor.bench import ch07
    env = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-26T17:00:00+00:00"}
    rec = {"kind": "time", "problem": "B1 H16 S1024 D64", "ms": 0.016, "sdpa_ms": 0.016}
    (tmp_path / "ch07-h100-2026-11-26.json").write_text(json.dumps({"environment": env,
                                                                    "steps": {"7c": {"records": [rec]}}}))
    (tmp_path / "ch07-sweep-h100-2026-11-26.json").write_text(json.dumps({"environment": env, "sweeps": []}))
    runs = ch07.stored(tmp_path)
    assert [r["file"] for r in runs] == ["results/ch07-h100-2026-11-26.json"]
    assert runs[0]["rows"][0]["step"] == "7c"


def test_ch03_ncu_counters_as_a_markdown_table():
    from flashtutor.bench import ch03
    ld, st = list(ch03.NCU_LABELS)[:2]
    res = {"metrics": [ld, st], "kernels": {"wmma_attention_d64": {ld: 18321840.0, st: 3506176.0},
                                            "wmma_padded_d64": {ld: 27659.0}}}
    md = ch03.ncu_markdown(res).splitlines()
    assert md[0] == "| kernel | ld bank conflicts | st bank conflicts |"
    assert md[2] == "| wmma_attention_d64 | 18,321,840 | 3,506,176 |"
    assert md[3] == "| wmma_padded_d64 | 27,659 | — |"                   # a counter ncu did not give: a dash
    assert ch03.ncu_markdown({"error": "ncu not found"}) == "no ncu numbers: ncu not found"


def test_ch07_versus_sdpa_is_a_table_per_run_without_a_run_column(tmp_path):
    from flashtutor.bench import ch07
    env = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-26T17:00:00+00:00"}
    rec = {"kind": "time", "problem": "B4 H32 S4096 D128 causal", "ms": 1.0, "sdpa_ms": 1.1}
    for day in ("23", "26"):
        (tmp_path / f"ch07-h100-2026-11-{day}.json").write_text(json.dumps(
            {"environment": {**env, "date": f"2026-11-{day}"}, "steps": {"7c": {"records": [rec]}}}))
    md = ch07.versus_sdpa_table(ch07.stored(tmp_path))
    heads = [line for line in md.splitlines() if line.startswith("**")]
    assert heads == ["**H100, 2026-11-23** (ch07, `results/ch07-h100-2026-11-23.json`):",
                     "**H100, 2026-11-26** (ch07, `results/ch07-h100-2026-11-26.json`):"]
    rows = [line for line in md.splitlines() if line.startswith("| B4")]
    assert len(rows) == 2 and all(r.count(" | ") == 7 for r in rows)       # 8 columns, no run column
    assert rows[0].startswith("| B4\u00a0H32\u00a0S4096\u00a0D128 causal | 7c | 1.00 ms")


def test_graph_vs_sdpa_divides_the_replayed_times_where_both_exist():
    rows = [dict(_row("P", "mine", 50.0), graph_us=14.0), dict(_row("P", "other", 30.0)),
            dict(_row("P", "SDPA", 10.0), graph_us=16.0)]
    tables.graph_ratios(rows)
    assert rows[0]["graph_vs_sdpa"] == 14.0 / 16.0 and "graph_vs_sdpa" not in rows[1]
    md = tables.markdown(rows, columns=("median", "graph", "graph vs SDPA", "vs SDPA"))
    assert "| P | mine | 50.0 µs | 14.0 µs | 0.88× | 5.00× |" in md and "| P | other | 30.0 µs | — | — | 3.00× |" in md


def test_ch07_targets_show_a_near_miss_with_three_digits_and_count_shapes_right():
    from flashtutor.bench import ch07
    rows = [{"step": "7c", "problem": "B4 H32 S4096 D128", "ratio": 1.003},
            {"step": "7c", "problem": "B2 H32 S8192 D128", "ratio": 0.95},
            {"step": "7c", "problem": "B1 H16 S1024 D64", "ratio": 0.90}]
    d128, d64, seed = ch07.targets(rows)
    assert "missed on 1 of 2 shapes (worst 1.003× at B4 H32 S4096 D128)" in d128     # not "worst 1.00×"
    assert d64.endswith("no 7c timing") and "met (worst 0.90× at B1 H16 S1024 D64)" in seed
    one = ch07.targets([dict(rows[0])])[0]
    assert "missed on 1 of 1 shape (" in one


def test_ch07_stored_reads_the_graders_way_where_a_file_has_it(tmp_path):
    """A --stream file holds do_bench's 'time' records and the grader's-way 'stream' ones: the rows (and so the
    chapter's tables and targets) are the stream ones, with do_bench's time beside them; an older file keeps
    its do_bench rows."""
    from flashtutor.bench import ch07
    env = {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-11-26T17:00:00+00:00"}
    time = {"kind": "time", "problem": "B4 H32 S4096 D64", "ms": 1.38, "sdpa_ms": 1.24}
    stream = {"kind": "stream", "problem": "B4 H32 S4096 D64", "us": 1244.6, "sdpa_us": 1274.4, "basis": "back-to-back"}
    (tmp_path / "ch07-h100-2026-11-26.json").write_text(json.dumps(
        {"environment": env, "steps": {"7c": {"records": [time, stream]}}}))
    (tmp_path / "ch07-h100-2026-11-23.json").write_text(json.dumps(
        {"environment": env, "steps": {"7c": {"records": [time]}}}))
    old, new = ch07.stored(tmp_path)
    (row,) = new["rows"]
    assert row["us"] == 1244.6 and row["ratio"] < 1 and row["event_us"] == 1380.0 and "--stream" in new["protocol"]
    assert old["rows"][0]["us"] == 1380.0 and "do_bench" in old["protocol"]
