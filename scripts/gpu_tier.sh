#!/usr/bin/env bash
# The GPU tier on a lent GPU host, with everything a calibration or a timing question needs kept in ONE file:
# $OUT/res.tgz (the lent machine returns only a few files; on 2026-11-26 four grade reports were lost that way).
#
#   bash scripts/gpu_tier.sh [SECONDS]      # SECONDS: the tier's time limit (default 450)
#
# Inside res/: gpu.txt (GPU, driver, torch, triton, cuDNN), tier.log, grade<NN>-solution-<gpu>-<date>.json per
# chapter (the files the speed rules cite), grade03-contended-*.json, corpus.json, gpu-tier-timeline.json,
# batches-tier.jsonl (FLASHTUTOR_BATCH_LOG: every timed batch's sleep, window, gate and issue time), summary.txt,
# and warm02.{json,log}: one warm grading of chapter 2 from the command line, timed (not with WARM02=0).
set -u
LIMIT=${1:-450}
. "$(dirname "$0")/lent_gpu.sh"
collect_in res
# every thread's stack into $R/hang-dump.txt 15 s before the limit (tests/conftest.py), should the tier be cut
( sleep $((LIMIT - 15)); pkill -USR1 -f "^python3 -m pytest -m gpu" ) >/dev/null 2>&1 &
DUMPER=$!
FLASHTUTOR_BATCH_LOG=$R/batches-tier.jsonl FLASHTUTOR_CORPUS_JSON=$R/corpus.json FLASHTUTOR_RESULTS_DIR=$R \
    timeout -s INT "$LIMIT" python3 -m pytest -m gpu tests/ -q -rfEs -p no:cacheprovider --durations=12 \
    > "$R/tier.log" 2>&1
kill $DUMPER 2>/dev/null
tail -20 "$R/tier.log"
python3 scripts/grade_summary.py "$R"/grade*.json > "$R/summary.txt" 2>&1
grep -E "^/" "$R/summary.txt" | cut -c1-240
[ "${WARM02:-1}" = 0 ] && exit 0      # WARM02=0: skip it (the tier alone needs ~540 s of a 600 s call since 2026-11-27)
/usr/bin/time -f "warm02 %e s wall" python3 -m flashtutor grade 02 --solution --json "$R/warm02.json" \
    > "$R/warm02.log" 2>&1
tail -2 "$R/warm02.log"
