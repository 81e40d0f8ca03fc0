"""Numbers the prose quotes from a run (a kernel header, a page's markdown, a rule's calibration note) are the run's:
each is recomputed here from the results file or the stored output it was read from, so a re-run or a typo that
leaves the sentence behind fails this test instead of the reader."""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
import statistics

from flashtutor.chapters import ROOT, get_chapter

LOG_C = ROOT / "results/ch08-time-h100-2026-11-27-c.json"
LOG_D = ROOT / "results/ch08-time-h100-2026-11-27-d.json"         # 8a, 8c and 8d in one run
PARTS_8D = ROOT / "results/ch08-8d-h100-2026-11-27-d"               # 8d's backward in parts, the same device call
LOG_E = ROOT / "results/ch08-time-h100-2026-11-27-e.json"         # 8a and 8d after 8d's last change: the final run
NCU_8C = ROOT / "results/ch08-8c-h100-2026-11-27"


def _markdown(path) -> str:
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
                     if c["cell_type"] == "markdown")


def _outputs(path) -> str:
    text = []
    for c in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for o in c.get("outputs", []):
            text.append("".join(o.get("text", "")))
            text += ["".join(o.get("data", {}).get(k, "")) for k in ("text/plain", "text/markdown")]
    return "\n".join(text)


def _span(xs) -> str:
    return f"{min(xs):.2f}–{max(xs):.2f}×"


def _bwd(log, step, D, S=None):
    """The backward-alone timing records of ``step`` in a ch08_gpu run, at head dim D (and sequence length S)."""
    recs = json.loads(log.read_text())["records"]
    return [r for r in recs if r["kind"] == "time" and r["mode"] == "bwd"
            and r["step"] == step and r["D"] == D and (S is None or r["S"] == S)]


def _ratios_c(step, D, S=None):
    """Backward-alone time ÷ SDPA-cuDNN's of ``step`` in the -c run, at head dim D (and sequence length S)."""
    return [r["ratio_vs_SDPA-cudnn"] for r in _bwd(LOG_C, step, D, S)]


def _ratios_d(step, D, S=None):
    """The same in the -d run (8a, 8c and 8d side by side), which the measurements page's later section shows."""
    return [r["ratio_vs_SDPA-cudnn"] for r in _bwd(LOG_D, step, D, S)]


def _ratios_e(step, D, S=None):
    """The same in the -e run (8a and 8d, after 8d's last change), which the pages quote for 8d's standing."""
    return [r["ratio_vs_SDPA-cudnn"] for r in _bwd(LOG_E, step, D, S)]


def _span1(xs, unit="×") -> str:
    """A span as the prose writes it: one figure when both ends round alike."""
    lo, hi = (f"{min(xs):.2f}", f"{max(xs):.2f}") if unit == "×" else \
        (f"{100 * (min(xs) - 1):.0f}", f"{100 * (max(xs) - 1):.0f}")
    sep = "" if unit == "×" else " "
    return f"{lo}{sep}{unit}" if lo == hi else f"{lo}–{hi}{sep}{unit}"


def test_step_8c_s_measured_ratios_in_its_header_and_on_the_page():
    """8c's header quotes its own run (-c); the measurements page quotes the later run (-d) it tables."""
    from flashtutor.kernels import k08c_backward_tma as k08c
    quoted = [_span(_ratios_c("8c", 128)), _span(_ratios_c("8a", 128)),
              _span(_ratios_c("8c", 64, 4096)), _span(_ratios_c("8a", 64, 4096))]
    assert quoted == ["1.72–1.88×", "1.40–1.49×", "1.51–1.56×", "1.37–1.38×"], quoted
    header = " ".join(k08c.__doc__.split())
    for q in quoted:
        assert q.rstrip("×") in header, q
    page = " ".join(_markdown(ROOT / "chapters/08_backward/backward_measurements.ipynb").split())
    c128, a128, c64, a64 = (_span(_ratios_d("8c", 128)), _span(_ratios_d("8a", 128)),
                            _span(_ratios_d("8c", 64, 4096)), _span(_ratios_d("8a", 64, 4096)))
    assert (f"{c128} cuDNN's backward time at $D = 128$, where 8a takes {a128}, and {c64} at $D = 64$ "
            f"($S = 4096$), where 8a takes {a64}") in page
    # "slower than 8a at every shape of the later run"
    for c in [r for D in (64, 128) for r in _bwd(LOG_D, "8c", D)]:
        a = next(r for r in _bwd(LOG_D, "8a", c["D"], c["S"]) if (r["B"], r["H"], r["causal"])
                 == (c["B"], c["H"], c["causal"]))
        assert c["median_us"] > a["median_us"], c


def test_step_8d_s_ratios_on_the_measurements_page_and_in_the_take_away():
    """Every figure the two pages quote about step 8d, from the file the sentence cites: its standing from the final
    run's JSON (-e: 8a and 8d after 8d's last change), its parts from 8d's parts files of the -d device call (the
    JSONs, and the lines its README quotes as printed for the shapes whose files did not come back), which the page
    must say were measured on the kernel before that change."""
    for d in _bwd(LOG_D, "8d", 128):    # the course's best step: the fastest of the -d run's steps at every D = 128 shape
        same = [r for step in ("8a", "8c") for r in _bwd(LOG_D, step, 128)
                if (r["B"], r["H"], r["S"], r["causal"]) == (d["B"], d["H"], d["S"], d["causal"])]
        assert len(same) == 2 and all(d["median_us"] < r["median_us"] for r in same), d
    assert not [r for r in json.loads(LOG_E.read_text())["records"] if r["kind"] == "check" and not r["ok"]]

    d128, a128 = _bwd(LOG_E, "8d", 128), _bwd(LOG_E, "8a", 128)
    assert len(d128) == 4
    assert [(a["B"], a["S"], a["causal"]) for a in a128] == [(d["B"], d["S"], d["causal"]) for d in d128]
    x = [r["ratio_vs_SDPA-cudnn"] for r in d128]
    over = {r["causal"]: [] for r in d128}                                  # time ÷ the time the target allows
    for r in d128:
        over[r["causal"]].append(0.9 * r["ratio_vs_SDPA-cudnn"])
    assert max(over[True]) <= 1 < min(over[False])                          # met with the mask, missed without
    faster = [a["median_us"] / d["median_us"] for a, d in zip(a128, d128)]
    e_big = [(d["ratio_vs_SDPA-cudnn"], a["ratio_vs_SDPA-cudnn"], d["causal"])
             for d, a in zip(_bwd(LOG_E, "8d", 64, 4096), _bwd(LOG_E, "8a", 64, 4096))]
    level = next(e for e in e_big if not e[2])
    ahead = next(e for e in e_big if e[2])
    assert f"{level[0]:.2f}" == f"{level[1]:.2f}" and abs(level[0] / level[1] - 1) < 0.01, level
    assert ahead[0] < ahead[1], ahead
    assert min(_ratios_e("8d", 64, 1024)) > max(_ratios_e("8a", 64, 1024))

    alone, extra_ms, extra_x, host = [], [], [], []
    for line in (PARTS_8D / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.search(r"8d backward\(\)\s+[\d.]+ µs\s+÷ cuDNN [\d.]+\s+kernel alone\s+[\d.]+ µs\s+÷ cuDNN ([\d.]+)",
                      line)
        if m:
            alone.append(float(m.group(1)))
    for path in sorted(PARTS_8D.glob("parts-*.json")):
        run = json.loads(path.read_text())
        p = {k: v["median_us"] for k, v in run["parts"].items()}
        rest = p["delta (preprocess)"] + p["zero dQ buffer"] + p["dQ convert"]
        alone.append(p["kernel alone"] / p["SDPA-cudnn bwd"])
        extra_ms.append(f"{rest / 1e3:.2f}")
        extra_x.append(rest / p["SDPA-cudnn bwd"])
        host.append(run["host_us_per_backward_call"]["median"] / 1e3)
    assert len(alone) == 4 and len(set(extra_ms)) == 1, (alone, extra_ms)
    small = [r["median_us"] / 1e3 for r in _bwd(LOG_D, "SDPA-cudnn", 64, 1024)]      # the parts' own device call
    assert min(host) > max(small)

    page = " ".join(_markdown(ROOT / "chapters/08_backward/backward_measurements.ipynb").split())
    for quote in (
            f"In the final run, `{LOG_E.relative_to(ROOT).with_suffix('.log')}` (steps 8a and 8d; the cell above), "
            f"it takes {_span(x)} cuDNN's backward time at $D = 128$, where 8a takes {_span(_ratios_e('8a', 128))} "
            f"({_span(faster)} 8d's time)",
            f"So the second target is met on the two causal shapes ({_span1(over[True])} the time allowed) and missed "
            f"on the two others, by {_span1(over[False], '%')} ({_span1(over[False])} the time allowed)",
            f"At $D = 64$, in the same run, 8d is level with 8a at B4 H32 S4096 D64 ({level[0]:.2f}× cuDNN's time, "
            f"both), ahead of it with the causal mask ({ahead[0]:.2f}× against {ahead[1]:.2f}×), and slower at "
            f"B1 H16 S1024 D64 ({_span(_ratios_e('8d', 64, 1024))} against {_span(_ratios_e('8a', 64, 1024))})",
            "Timed in parts on the kernel before its last change (the section below, in the later run's device "
            f"call): the kernel alone took {_span(alone)} cuDNN's time",
            f"converting it added {extra_ms[0]} ms, {min(extra_x):.2f}–{max(extra_x):.2f}× cuDNN's time",
            f"backward cost {min(host):.2f}–{max(host):.2f} ms on the host",
            f"cuDNN's whole backward at that small shape in the later run ({min(small):.2f}–{max(small):.2f} ms)",
            f"(`{PARTS_8D.relative_to(ROOT)}/`), on the kernel before its last change"):
        assert quote in page, quote

    text = " ".join(_markdown(ROOT / "chapters/08_backward/backward.ipynb").split())
    assert (f"$D = 128$: {_span(x)} cuDNN's backward time, where the solution takes {_span(_ratios_e('8a', 128))} "
            f"(`{LOG_E.relative_to(ROOT).with_suffix('.log')}`); the target, at most {1 / 0.9:.2f}×, is met on the two "
            f"causal shapes and missed by {_span1(over[False], '%')} on the two others.") in text


def test_step_8c_s_profile_numbers_are_the_profile_s():
    from flashtutor.kernels import k08c_backward_tma as k08c
    kernels = json.loads((NCU_8C / "ncu-backward-summary.json").read_text())["kernels"]
    tensor = {k["kernel"]: k["tensor"]["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]
              for k in kernels[:7]}                   # 8a's three kernels, then 8c's four (the reduce variant after)
    rows = list(csv.reader(io.StringIO(gzip.decompress((NCU_8C / "ncu-backward-raw.csv.gz").read_bytes()).decode())))
    col = rows[0].index("derived__local_spilling_requests")
    spills = {r[rows[0].index("Kernel Name")]: float(r[col].replace(",", "")) for r in rows[2:9]}
    fused = [k["time_us"] for k in kernels if k["kernel"] == "bwd_fused_kernel"]
    header = " ".join(k08c.__doc__.split())
    assert f"{spills['bwd_fused_kernel'] / 1e6:.0f} M local-memory spill requests" in header
    assert f"(8a's dK/dV kernel: {spills['bwd_dkdv_kernel'] / 1e6:.2f} M)" in header
    assert f"busy {tensor['bwd_fused_kernel']:.0f} % of the time" in header
    assert f"(8a's kernels: {tensor['bwd_dkdv_kernel']:.0f} % and {tensor['bwd_dq_kernel']:.0f} %)" in header
    assert f"cost another {100 * (fused[1] / fused[0] - 1):.0f} %" in header


def test_chapter_8_s_rule_cites_its_h200_grade():
    report = json.loads((ROOT / "results/grade08-solution-h200-2026-11-27.json").read_text())
    ratios = [t["ratio"] for t in report["timings"]]
    assert f"took {_span(ratios)}" in get_chapter("08").speed.calibration


def _q(xs, f):
    """scripts/ch08_train.py's quantile: the sorted list's element at int(f · n)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * len(xs)))]


def test_the_training_prose_quotes_the_runs():
    """The chapter's take-away quotes the three runs' loss gaps and the interleaved step-time ratio; the measurements page's training prose quotes
    all three runs' gaps and sequential step-time ratios, and the newest run's interleaved per-pair ratio (median and
    p10–p90, events and wall time alike), recomputed here from its per-step times."""
    runs = [json.loads((ROOT / f"results/ch08-train-h100-2026-11-27{s}.json").read_text()) for s in ("", "-b", "-c")]
    gaps = [r["summary"]["gap"] for r in runs]
    text = " ".join(_markdown(ROOT / "chapters/08_backward/backward.ipynb").split())
    assert f"final losses {abs(gaps[0]):.3f}, {abs(gaps[1]):.3f} and {abs(gaps[2]):.4f} apart" in text

    page = " ".join(_markdown(ROOT / "chapters/08_backward/backward_measurements.ipynb").split())
    assert (f"The final losses are {abs(gaps[2]):.4f} apart in this run and {abs(gaps[1]):.4f} and "
            f"{abs(gaps[0]):.4f} apart in the two before it") in page
    seq = [r["summary"]["step_time_ratio"] for r in runs]
    assert f"put step 8a at {seq[2]:.2f}×, {seq[1]:.2f}× and {seq[0]:.2f}× SDPA's step time" in page
    assert f"The same run's sequential medians said {seq[2]:.2f}× for the same kernels" in page

    timing = runs[2]["interleaved"]
    rec, pairs = timing["runs"], timing["pairs"]
    quoted = {}
    for kind in ("event_ms", "wall_ms"):
        assert len(rec["sdpa"][kind]) == len(rec["8a"][kind]) == pairs
        ratios = [y / x for x, y in zip(rec["sdpa"][kind], rec["8a"][kind])]       # 8a / SDPA, pair by pair
        quoted[kind] = (f"{_q(ratios, 0.5):.2f}", f"{_q(ratios, 0.1):.2f}–{_q(ratios, 0.9):.2f}")
        assert abs(_q(ratios, 0.5) - timing[kind]["pair_ratio"]["median"]) < 1e-12, kind
    assert quoted["event_ms"] == quoted["wall_ms"], quoted        # the prose: "by events and by wall clock alike"
    median, p10_p90 = quoted["event_ms"]
    assert f"{pairs} pairs of steps" in page
    assert f"Per pair, step 8a's step took {median}× SDPA's time" in page
    assert f"p10–p90 of the ratio {p10_p90}" in page
    met = _q([y / x for x, y in zip(rec["sdpa"]["event_ms"], rec["8a"]["event_ms"])], 0.5) <= 1.10
    assert ("is met by this run, narrowly" in page) == met
    assert f"interleaved pairs, its training step took {median}× SDPA's" in text
    assert ("narrowly within the 1.10× target" in text) == met


def test_the_measuring_page_quotes_its_own_table():
    nb = ROOT / "book/measuring.ipynb"
    out, text = _outputs(nb), " ".join(_markdown(nb).split())
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if "do_bench" in line and parts[0] == "B1":
            rows["pin held" if "triton do_bench" in line else "per call"] = float(parts[-1])
        if line.startswith("matmul 8192"):
            host, events = float(parts[-2]), float(parts[-1])
    assert f"{rows['pin held'] - rows['per call']:.1f} µs the faster" in text
    assert f"by about {100 * (events / host - 1):.0f} %" in text
    assert "3.00 TB/s" in out and "3.00 TB/s for a large device-to-device copy" in " ".join(
        _markdown(ROOT / "chapters/05_cutlass_three_kernel/cutlass_three_kernel_5b_kernels.ipynb").split())


def test_chapter_5_quotes_its_reference_pair_from_the_gemm_table():
    nb = ROOT / "chapters/05_cutlass_three_kernel/cutlass_three_kernel_5b_kernels.ipynb"
    cells = {}
    for line in _outputs(nb).splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if len(parts) == 6 and parts[5].endswith("×"):
            cells[(parts[0], parts[1])] = parts[5]
    pair = [cells[(f"{op} B1 H16 S1024 D{D}", f"128×{n}×64 1×1 coop tma")]
            for D, op, n in ((64, "qk", 128), (64, "pv", 64), (128, "qk", 128), (128, "pv", 128))]
    text = " ".join(_markdown(nb).split())
    assert (f"takes {pair[0]} ($QK^\\top$) and {pair[1]} ($PV$) cuBLAS's time at the seed shape, "
            f"and {pair[2]} and {pair[3]} at $D = 128$") in text, pair


def test_step_8d_s_page_and_header_quote_their_runs():
    """Step 8d's page and its kernel's header quote the first version's run, the variants' A/Bs, the parts, the
    profile and the final run: each figure is recomputed from the file it came from."""
    res = ROOT / "results"
    first = [r["ratio_vs_SDPA-cudnn"] for r in _bwd(res / "ch08-8d-h100-2026-11-27/8d-time.json", "8d", 128)]
    final, a_final = (_span([r["ratio_vs_SDPA-cudnn"] for r in _bwd(LOG_E, s, 128)]) for s in ("8d", "8a"))
    c8 = _span([r["ratio_vs_SDPA-cudnn"] for r in _bwd(LOG_D, "8c", 128)])

    def ab(path, name):       # (variant, kept build) ÷ cuDNN in one A/B file
        v = json.loads((res / path).read_text())["variants"]
        ref = v["SDPA-cudnn bwd"]["median_us"]
        return v[name]["median_us"] / ref, v["default"]["median_us"] / ref

    unsplit, kept = ab("ch08-8d-h100-2026-11-27-c/ab-d128.json", "FT_SPLIT_DQ=0")
    one_bar, _ = ab("ch08-8d-h100-2026-11-27-c/ab-d128.json", "FT_EPI_BARS=1")
    late, kept_late = ab("ch08-8d-h100-2026-11-27-c/parts-d128.json", "FT_DEFER_DQ=1")
    half = [ab(f"ch08-8d-h100-2026-11-27-e/ab3-{n}.json", "FT_DS_HALF_P=1") for n in
            ("4_32_4096_128", "4_32_4096_128--causal", "2_32_8192_128", "2_32_8192_128--causal")]
    fused = [ab(f"ch08-8d-h100-2026-11-28/ab4-{n}.json", "FT_FUSED_DQ=1") for n in
             ("4_32_4096_128", "4_32_4096_128--causal")]
    warp, warp_kept = ab("ch08-8d-h100-2026-11-28/ab5-4_32_4096_128.json", "FT_DQ_WARP=1")
    parts = [json.loads(p.read_text()) for p in sorted((res / "ch08-8d-h100-2026-11-27-c").glob("parts-d128*.json"))
             + sorted((res / "ch08-8d-h100-2026-11-27-d").glob("parts-*.json"))]
    around = [sum(p["parts"][n]["median_us"] for n in ("delta (preprocess)", "zero dQ buffer", "dQ convert"))
              / p["parts"]["SDPA-cudnn bwd"]["median_us"] for p in parts]
    host = [json.loads(p.read_text())["host_us_per_backward_call"]["median"] / 1e3
            for p in (res / "ch08-8d-h100-2026-11-27-c").glob("parts-*.json")] + [
            p["host_us_per_backward_call"]["median"] / 1e3 for p in parts]
    tensor = re.search(r"ws_backward_d128.*?tensor_cycles_active\.avg\.pct_of_peak_sustained_active = ([\d.]+)",
                       (res / "ch08-8d-h100-2026-11-27-d/ncu-8d-summary.txt").read_text(), re.S).group(1)

    page = " ".join(_markdown(ROOT / "chapters/08_backward/backward_ws.ipynb").split())
    a8 = [r["ratio_vs_SDPA-cudnn"] for r in _bwd(LOG_E, "8a", 128)]
    for quote in (f"about {min(a8):.1f}–{max(a8):.1f}× cuDNN's backward time", f"took {_span(first)} cuDNN's time",
                  f"({unsplit:.2f}× cuDNN's time against {kept:.2f}×", f"overlap it with the next $S^\\top$ ({late:.2f}×)",
                  f"took {c8} cuDNN's time at $D = 128$", f"tensor pipe active {float(tensor):.0f} %",
                  f"{min(host):.1f}–{max(host):.1f} ms on the H100's host"):
        assert quote in page, quote

    header = " ".join((ROOT / "flashtutor/kernels/k08d_backward_ws.cu").read_text().replace("//", " ").split())
    for quote in (f"takes {final} cuDNN's time at D = 128", f"took {_span(first)}",
                  f"overlapping the next Sᵀ ({late:.2f}× against {kept_late:.2f}×)", f"own 64 keys ({unsplit:.2f}×)",
                  f"issuing it ({one_bar:.2f}×)",
                  f"dS from the fp16 P ({_span([h for h, _ in half])} against {_span([k for _, k in half])})",
                  f"converts it ({min(around):.2f}–{max(around):.2f}× cuDNN's time)",
                  f"(results/ch08-8d-h100-2026-11-28: {fused[0][0]:.2f}× against {fused[0][1]:.2f}× not causal, "
                  f"{fused[1][0]:.2f}× against {fused[1][1]:.2f}× causal)",
                  f"converting completed tiles ({warp:.2f}× against {warp_kept:.2f}×",
                  f"({min(host):.1f}–{max(host):.1f} ms per backward() call"):
        assert quote in header, quote
    py = " ".join((ROOT / "flashtutor/kernels/k08d_backward_ws.py").read_text().split())
    assert f"on the H100, {final} cuDNN's backward time at D = 128" in py
    assert a_final in " ".join(_markdown(ROOT / "chapters/08_backward/backward.ipynb").split())


def test_issue_28_s_findings_quote_their_runs():
    """Step 7c's three consumers at D = 64, the descriptor increments and the last-round probe (H100, 2026-11-28):
    the ratios in the launcher's comment, the kernel's header and the chapter's take-aways, from the results files."""
    folder = ROOT / "results/ch07-issue28-h100-2026-11-28"

    def ab(name):
        cases = json.loads((folder / name).read_text())["cases"]
        return {(tuple(c["shape"]), c["causal"]): {b: v["ratio_vs_sdpa"] for b, v in c["builds"].items()}
                for c in cases}
    wide = ab("3-d64-consumers-ab.json")
    three = lambda causal: "consumers_d64=3,schedule=dynamic" if causal else "consumers_d64=3"   # noqa: E731
    pair = lambda shape, causal, sep: (f"{wide[(shape, causal)]['7c']:.3f}{sep}"                 # noqa: E731
                                       f"{wide[(shape, causal)][three(causal)]:.3f}")
    py = " ".join((ROOT / "flashtutor/kernels/k07c_pingpong.py").read_text().replace("#", "").split())
    for shape, causal in (((2, 32, 16384, 64), False), ((2, 32, 16384, 64), True), ((2, 32, 8192, 64), False),
                          ((4, 32, 4096, 64), False), ((2, 16, 2048, 64), False)):
        assert pair(shape, causal, " → ") in py, (shape, causal)
    takeaways = " ".join(_markdown(ROOT / "chapters/07_hopper/hopper.ipynb").split())
    assert (f"from {pair((2, 32, 8192, 64), False, ' to ')} of SDPA's time on the H100, and "
            f"{pair((2, 32, 8192, 64), True, ' to ')} with causal masking") in takeaways

    seed = {r["variant"]: r["us"] for r in json.loads((folder / "3-d64-consumers-sweep.json").read_text())["sweep"]["records"]
            if r["kind"] == "stream" and r["problem"] == "B1 H16 S1024 D64"}
    assert f"15.7 → 18.4 µs" == f"{seed['default']:.1f} → {seed['d64 3 consumers']:.1f} µs" and "15.7 → 18.4 µs" in py
    page = " ".join(_markdown(ROOT / "chapters/07_hopper/hopper_7c_pingpong.ipynb").split())
    assert f"{seed['default']:.1f} µs with two consumers, {seed['d64 3 consumers']:.1f} with three" in page

    desc = ab("1-desc-inc-ab.json")
    slower = [100 * (r["desc_inc=1"] / r["7c"] - 1) for (shape, _), r in desc.items() if shape[3] == 64]
    assert f"made $D = 64$ {min(slower):.0f}–{max(slower):.0f} % slower" in takeaways
    same = ab("2-pvtrim-3wg-ab.json")        # at D = 128 "consumers_d64=3" is the default build: a noise floor
    apart = max(abs(r["consumers_d64=3"] / r["7c"] - 1) for (shape, _), r in same.items() if shape[3] == 128)
    assert f"differed by up to {100 * apart:.1f} %" in takeaways

    split = ab("7-split-tail-ab.json")
    for (shape, causal), r in split.items():
        if shape[0] > 1:                                   # the large shapes (the last one checks the split)
            assert f"{r['7c']:.3f} → {r['split_tail=1']:.3f}" in py, shape
    r = split[((4, 32, 4096, 128), False)]
    assert f"from {r['7c']:.3f} to {r['split_tail=1']:.3f} of SDPA's time there" in takeaways

    end = ab("11-end-align-ab.json")[((4, 32, 4096, 64), True)]
    assert f"from {end['7c']:.3f} to {end['end_align=1']:.3f} (events" in py
    assert f"({end['7c']:.3f} to {end['end_align=1']:.3f} of SDPA's time at B4 H32 S4096 causal" in takeaways
    sweep = {(r["variant"], r["problem"]): r["ratio"] for r in
             json.loads((folder / "11-end-align-sweep.json").read_text())["sweep"]["records"] if r["kind"] == "stream"}
    pair_s = [sweep[(v, "B4 H32 S4096 D64 causal")] for v in ("default", "end align")]
    assert f"the course's protocol {pair_s[0]:.3f} → {pair_s[1]:.3f}" in py
    ncu = json.loads((folder / "10-ncu/4_32_4096_64-causal/ncu07-summary.json").read_text())["kernels"]
    gmma = [k["tensor"]["sm__inst_executed_pipe_tensor.sum"] for k in ncu]
    assert f"found {100 * (gmma[0] / gmma[1] - 1):.0f} % more wgmma instructions than cuDNN's" in py
    assert f"ncu counted {100 * (gmma[0] / gmma[1] - 1):.0f} % more `wgmma` than" in takeaways

    probe = {tuple(c["shape"]): c for c in json.loads((folder / "5-tail-probe.json").read_text())["cases"]}
    gains = [probe[(1, 132, 4096, 128)]["builds"][b]["median_us"] / 132 * 128 /
             probe[(4, 32, 4096, 128)]["builds"][b]["median_us"] for b in ("7c", "SDPA (cudnn)")]
    gains = [100 * (1 / g - 1) for g in gains]                    # more TFLOP/s with every round full
    assert all(4 <= g < 5.5 for g in gains), gains
    header = " ".join((ROOT / "flashtutor/kernels/k07c_pingpong.cu").read_text().replace("//", "").split())
    assert "both this kernel and SDPA ran at 4-5% more TFLOP/s" in header
    assert "both step 7c and SDPA ran 4–5 % more TFLOP/s" in takeaways


def test_issue_28_s_final_standing_quotes_its_runs():
    """Where step 7c stands after issue 28 (H100 and H200, 2026-11-28, both protocols in one call each), what did not
    pay (a second Q buffer, the narrow last key tile) and the seed shape against chapter 6, as the chapter's take-aways
    quote them, from the results files."""
    h100 = ROOT / "results/ch07-issue28-h100-2026-11-28"
    h200 = ROOT / "results/ch07-issue28-h200-2026-11-28"

    def ab(path):
        return {(tuple(c["shape"]), c["causal"]): {b: v["ratio_vs_sdpa"] for b, v in c["builds"].items()}
                for c in json.loads(path.read_text())["cases"]}

    def both(folder):       # (shape, causal) → (events, the course's bench), step 7c's time ÷ SDPA's
        events = ab(folder / "ab.json")
        bench = {r["problem"]: r["ratio"] for r in json.loads((folder / "bench.json").read_text())["steps"]["7c"]["records"]
                 if r["kind"] == "stream"}
        name = lambda s, c: f"B{s[0]} H{s[1]} S{s[2]} D{s[3]}" + (" causal" if c else "")   # noqa: E731
        return {key: (r["7c"], bench[name(*key)]) for key, r in events.items()}

    takeaways = " ".join(_markdown(ROOT / "chapters/07_hopper/hopper.ipynb").split())
    worst = ((4, 32, 4096, 128), False)
    r100, r200 = both(h100 / "16-final-both"), both(h200)
    for r in (r100, r200):
        assert len(r) == 12
        every = [x for pair in r.values() for x in pair]
        assert f"{min(every):.2f}–{max(every):.2f}" in takeaways, (min(every), max(every))
        # "the most at B4 H32 S4096 D128": its two ratios add up to the largest sum (the H100's single largest ratio is
        # S16384 D128's bench, 0.982 at a spread of 0.14, whose events, 0.936, are below S4096's 0.975)
        assert max(r, key=lambda key: sum(r[key])) == worst
    assert f"B4 H32 S4096 D128 ({r100[worst][0]:.3f} / {r100[worst][1]:.3f} by the event loop" in takeaways
    assert f"{r200[worst][0]:.3f} / {r200[worst][1]:.3f} on the H200" in takeaways

    q = ab(h100 / "13/ab.json")[((4, 32, 4096, 64), True)]
    assert f"({q['7c']:.3f} to {q['q_slots_d64=2']:.3f} at S4096 causal, within the noise" in takeaways
    assert abs(q["q_slots_d64=2"] / q["7c"] - 1) < 0.015            # under the 1.5 % two identical builds differed by
    narrow = ab(h100 / "14/ab.json")
    assert all(v["narrow_last=1"] > v["7c"] for v in narrow.values())             # slower on every shape
    n = narrow[worst]
    assert f"slower on every shape, {n['7c']:.3f} to {n['narrow_last=1']:.3f} at S4096 $D = 128$" in takeaways

    seed = {c["causal"]: c["median_us"] for c in json.loads((h100 / "16-final-both/seed.json").read_text())["cases"]}
    plain, masked = seed[False], seed[True]
    assert f"without masking ({plain['7c']:.2f} µs against {plain['6c']:.2f})" in takeaways
    assert f"ahead with it ({masked['7c']:.2f} against {masked['6c']:.2f})" in takeaways
    ncu = {k["target"]: k for k in json.loads((h100 / "15-ncu/seed/ncu07-summary.json").read_text())["kernels"]}
    assert f"{ncu['7c']['time_us']:.1f} µs against {ncu['6c']['time_us']:.1f} for the same number of" in takeaways
    gmma = {t: k["tensor"]["sm__inst_executed_pipe_tensor.sum"] for t, k in ncu.items()}
    assert len(set(gmma.values())) == 1, gmma
    active = ncu["7c"]["tensor"]["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]
    assert f"the tensor pipe {active:.0f} % active" in takeaways


def test_issue_28_s_clock_finding_quotes_its_runs():
    """A profiled call is an isolated call: the 700 TFLOP/s question at B2 H32 S16384 D128 (H100, 2026-11-28), the
    profiler's figure, the chapter's tables' range and the clocks of isolated and back-to-back calls, from the files."""
    folder = ROOT / "results/ch07-issue28-h100-2026-11-28"
    takeaways = " ".join(_markdown(ROOT / "chapters/07_hopper/hopper.ipynb").split())
    ncu = {k["target"]: k for k in json.loads((folder / "15-ncu/long/ncu07-summary.json").read_text())["kernels"]}
    assert f"$D = 128$ at {ncu['7c']['tflops']:.0f} TFLOP/s" in takeaways
    clocks = json.loads((folder / "18-clocks/clocks.json").read_text())["results"]
    alone, packed = clocks["7c isolated"], clocks["7c sustained"]
    mhz = lambda r: round(statistics.median(r["sm_mhz_after"]), -1)       # noqa: E731
    assert mhz(alone) > mhz(packed) + 200                                  # the power limit's drop, not noise
    assert f"runs at ~{mhz(alone):.0f} MHz ({alone['tflops']:.0f} TFLOP/s by events)" in takeaways
    assert f"back to back at ~{mhz(packed):.0f} MHz" in takeaways
    assert f"holds the clock ({packed['tflops']:.0f} TFLOP/s;" in takeaways
    # the timed loops: from call 16's course's bench (the lowest) to call 18's back-to-back calls (the highest)
    bench = [r["tflops"] for r in json.loads((folder / "16-final-both/bench.json").read_text())["steps"]["7c"]["records"]
             if r["kind"] == "stream" and r["problem"] == "B2 H32 S16384 D128"]
    assert f"timed loops beside it at {bench[0]:.0f}–{packed['tflops']:.0f}:" in takeaways
