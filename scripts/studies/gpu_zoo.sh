#!/usr/bin/env bash
# The model zoo on a lent GPU in one device call (issue 43 item 2). From the repository root, as the command
# of one device `run` call with timeout_s 420 (about 8 minutes of device time with the machine's start):
#
#   bash scripts/studies/gpu_zoo.sh            # [MINUTES (default 6)] [SEED (default 0)] [more gpu_run options]
#
# Writes $OUT/zoo/ (one folder down, at most 8 flat files): dataset.parquet (zoo schema), counter_trace.csv,
# period.json, provenance.json (device, fingerprint, refused names with reasons, torchvision/timm versions),
# run.log and nvidia-smi.txt. The plan is conf/gpu_run.yaml's `zoo` block over conf/space/zoo.yaml's names;
# names the machine's torchvision/timm lack are refused there (provenance `refused`, run.log), not a crash.
# Back here: carb-import importer=gpu_run importer.path=<files_at>/zoo importer.seed=SEED \
#   importer.keep=scripts/data out=carb/data/zoo-<gpu>.parquet     (docs/MEASUREMENT.md, "Zoo networks")
# Another SEED measures the networks in another order (the same sampled configurations).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR="${OUT:?set OUT (the device tool sets it)}/zoo"
MINUTES=${1:-6}
SEED=${2:-0}
shift $(( $# < 2 ? $# : 2 ))   # the rest goes to gpu_run (tests: --fake-device --config FILE)
PY=${PY:-python3}
mkdir -p "$OUT_DIR"
nvidia-smi >"$OUT_DIR/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed" >>"$OUT_DIR/nvidia-smi.txt"
PYTHONUNBUFFERED=1 "$PY" -m carb.measure.gpu_run --minutes "$MINUTES" --space zoo --seed "$SEED" --out "$OUT_DIR" "$@"
