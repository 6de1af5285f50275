#!/usr/bin/env bash
# Re-collect the shipped CPU reference dataset in one quiet window (nothing else may run on the machine:
# no test suites, no builds, no other sessions). Writes everything under OUT (default data/reference-run):
#   reference.parquet   the new dataset (space=reference, then space=reference_fp16, one protocol)
#   window.log          load average and the busiest processes before, between and after the steps
#   recheck-new.txt     40 configurations of the new file measured again (same machine, minutes later)
#   recheck-old.txt     40 configurations of the previous shipped file measured on this machine
#   collect-*.log       the collector's output (progress, repeated windows, counts)
# Usage: bash scripts/studies/collect_reference.sh [OUT] [MAIN_MINUTES] [FP16_MINUTES]
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-data/reference-run}
MAIN_MIN=${2:-40}
FP16_MIN=${3:-6}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
snap() {
  { echo "== $1 $(date -u +%FT%TZ)"; cat /proc/loadavg; ps -eo pcpu,pid,etime,comm --sort=-pcpu | head -8; } >>"$OUT/window.log"
}
snap start
git show HEAD:carb/data/cpu-reference.parquet >"$OUT/previous-reference.parquet" 2>/dev/null || true
$PY -m carb.collect space=reference device=cpu measure=cpu out="$OUT/reference.parquet" seed=0 \
  max_minutes="$MAIN_MIN" run_name=cpu-reference progress.enabled=true 2>&1 | tee "$OUT/collect-reference.log" | tail -3
snap after-reference
$PY -m carb.collect space=reference_fp16 device=cpu measure=cpu out="$OUT/reference.parquet" seed=0 \
  max_minutes="$FP16_MIN" run_name=cpu-reference-fp16 progress.enabled=true 2>&1 | tee "$OUT/collect-fp16.log" | tail -3
snap after-fp16
$PY scripts/studies/recheck.py --data "$OUT/reference.parquet" --n 40 --seed 0 \
  --out "$OUT/recheck-new.parquet" 2>&1 | grep -v -i warn | tee "$OUT/recheck-new.txt"
if [[ -s "$OUT/previous-reference.parquet" ]]; then
  $PY scripts/studies/recheck.py --data "$OUT/previous-reference.parquet" --n 40 --seed 0 \
    --out "$OUT/recheck-old.parquet" 2>&1 | grep -v -i warn | tee "$OUT/recheck-old.txt"
fi
snap end
