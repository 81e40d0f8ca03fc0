#!/usr/bin/env bash
# Chosen gradings and tests on a lent GPU host, kept in ONE file ($OUT/chk.tgz): each grading's JSON report and
# log with its wall time, then the pytest files named after "--" with their log.
#
#   bash scripts/gpu_checks.sh NAME:CHAPTER ... [-- TEST_FILE ...]
#   e.g. bash scripts/gpu_checks.sh warm02a:02 warm02b:02 grade05:05 -- tests/test_messages_gpu.py
set -u
. "$(dirname "$0")/lent_gpu.sh"
collect_in chk
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    name=${1%%:*}; ch=${1#*:}; shift
    /usr/bin/time -f "$name %e s wall" python3 -m flashtutor grade "$ch" --solution --json "$R/$name.json" \
        > "$R/$name.log" 2>&1
    tail -1 "$R/$name.log"; python3 scripts/grade_summary.py "$R/$name.json" | cut -c1-300
done
[ "${1:-}" = "--" ] && shift
if [ $# -gt 0 ]; then
    python3 -m pytest -m gpu "$@" -q -rfEs -p no:cacheprovider > "$R/tests.log" 2>&1
    tail -15 "$R/tests.log"
fi
