#!/usr/bin/env bash
# Execute notebooks on a lent GPU host and bring them back in ONE file, $OUT/nb.tgz (the lent machine returns only
# a few files): the executed notebooks at their course paths, nb-report.json (wall time and error per notebook)
# and gpu.txt (GPU, driver, torch, triton, cuDNN).
#
#   bash scripts/gpu_notebooks.sh SECONDS NOTEBOOK...     # SECONDS: limit for all of them together
#
# A notebook is written back only when its run ends, so one cut off by the limit keeps its previous outputs.
set -u
LIMIT=$1; shift
. "$(dirname "$0")/lent_gpu.sh"
collect_in nb
NB_REPORT=$R/nb-report.json timeout -s INT "$LIMIT" python3 scripts/execute_notebooks.py "$@"
for nb in "$@"; do mkdir -p "$R/$(dirname "$nb")"; cp "$nb" "$R/$nb"; done
