"""Every speed rule is calibrated from the solution's own grade report on a GPU: the numbers the rule's
words cite are the ones in the results files it names, the rule leaves the solution a margin of at least
1.3 on every timed shape there, and the words name the GPU and the date of each file."""
import json
import re

import pytest

from flashtutor.chapters import CHAPTERS, ROOT

MIN_MARGIN = 1.3
RULED = [c for c in CHAPTERS.values() if c.speed.max_ratio_vs_sdpa or c.speed.min_speedup_vs]


@pytest.mark.parametrize("ch", [c for c in RULED if c.speed.calibrated_from], ids=lambda c: c.key)
def test_rule_matches_its_results_files(ch):
    rule = ch.speed
    for rel in rule.calibrated_from:
        d = json.loads((ROOT / rel).read_text())
        assert d["chapter"] == ch.key and d["verdict"] == "pass" and d["path"].endswith(f"solutions/{ch.slug}/attention.py")
        timed = [t for t in d["timings"] if t["times"]]
        assert timed and {t["basis"] for t in timed} == {rule.basis}
        gpu, date = d["env"]["gpu"], d["env"]["date"][:10]
        assert gpu in rule.calibration and date in rule.calibration, (gpu, date, rule.calibration)
        if rule.max_ratio_vs_sdpa:
            worst = max(t["ratio"] for t in timed)
            assert rule.max_ratio_vs_sdpa / worst >= MIN_MARGIN, (worst, rule.max_ratio_vs_sdpa)
            cited = [float(x) for x in re.findall(r"(\d+\.\d+)×", rule.calibration)]
            assert any(abs(x - worst) < 0.006 for x in cited) or f"{worst:.2f}" in rule.calibration, (worst, cited)
        if rule.min_speedup_vs:
            worst = min(t["speedup_vs_baseline"] for t in timed)
            assert worst / rule.min_speedup_vs >= MIN_MARGIN, (worst, rule.min_speedup_vs)
            assert f"{worst:.2f}" in rule.calibration, (worst, rule.calibration)


def test_rules_not_yet_calibrated_with_gpu_time_say_so():
    for ch in RULED:
        if not ch.speed.calibrated_from:
            assert "to be re-calibrated" in ch.speed.calibration, ch.key
