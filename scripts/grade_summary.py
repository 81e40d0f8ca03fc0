"""One line per grading report (JSON from `flashtutor grade --json`), then its timed shapes: for GPU logs."""
import json
import sys

for path in sys.argv[1:]:
    try:
        d = json.load(open(path))
    except Exception as e:  # noqa: BLE001
        print(f"{path}: unreadable ({e})")
        continue
    print(f"{path}: {d['verdict'].upper()} ch{d['chapter']} in {d['seconds']} s — {d['summary'][:160]}")
    for f in d["failures"][:4]:
        print("   !", f.splitlines()[0][:200])
    for t in d["timings"]:
        ts = t["times"]
        cells = "  ".join(f"{n} {m['median_us']:.2f} [{m['p10_us']:.2f}-{m['p90_us']:.2f}] host {m['host_us'] or 0:.0f}"
                          for n, m in ts.items())
        ratio = f"{t['ratio']:.2f}x" if t.get("ratio") else "-"
        extra = f" speedup {t['speedup_vs_baseline']:.1f}x" if t.get("speedup_vs_baseline") else ""
        print(f"   {t['problem']:<26} {t['basis']:<6} {ratio:>7}{extra}  {cells}  n={ts.get('learner', {}).get('batch')}"
              f" busy {t.get('busy_fraction') or 0:.2f} {t.get('disturbed', '')}{t.get('skipped', '')} "
              f"{' '.join(t.get('causes', []))}")
