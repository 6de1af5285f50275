#!/usr/bin/env bash
# Prepared GPU run: on a machine with an NVIDIA GPU and this repository checked out,
#   bash experiments/gpu/run_gpu.sh --minutes 7 --out gpu-run
# 1. creates .venv-gpu and installs the project (PyPI's default torch there is a CUDA build);
# 2. runs the gpu-marked tests;
# 3. measures the NVML energy counter's update period (-> <out>/nvml_energy_update_period.json);
# 4. collects the `paper` space until the budget is spent (-> <out>/dataset.parquet, resumable);
# 5. writes <out>/provenance.json. Fits a 9-minute call with --minutes 7 (collection gets what is left
#    of the budget after install and tests; it stops itself before a config would pass the deadline).
set -euo pipefail
MINUTES=7
OUT=gpu-run
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) MINUTES="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "usage: $0 [--minutes M] [--out DIR]" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)   # absolute: the script changes to the repository root next
cd "$(dirname "$0")/../.."
LOG="$OUT/run_gpu.log"
START=$(date +%s)
log() { echo "[run_gpu $(date -u +%H:%M:%S)] $*" | tee -a "$LOG"; }
# Minutes left of the budget, less 0.4 min for the collector's start-up and the provenance file.
left_min() { python3 -c "print(round($MINUTES - ($(date +%s) - $START)/60 - 0.4, 2))"; }
# Hard end: budget + 1 min; every step's timeout is capped so that 45 s remain for the provenance file
# (with --minutes 7 the script ends within ~8 min whatever hangs, inside a 9-minute call).
HARD_END=$(( START + MINUTES * 60 + 60 ))
cap() { local left=$(( HARD_END - $(date +%s) - 45 )); (( left < 1 )) && left=1; (( left < $1 )) && echo $left || echo $1; }

log "budget ${MINUTES} min, output $OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$LOG" || true
# The venv sees the machine's own packages (a device image's CUDA torch is reused as is).
if [[ ! -x .venv-gpu/bin/python ]]; then python3 -m venv --system-site-packages .venv-gpu; fi
PY=.venv-gpu/bin/python
if [[ -d .whl ]] && ls .whl/*.whl >/dev/null 2>&1; then
  # Offline machine: the project's dependencies travel as wheels in .whl/ (python 3.12, manylinux x86_64).
  timeout $(cap 180) $PY -m pip install -q --no-index --no-deps --find-links .whl .whl/*.whl >>"$LOG" 2>&1 || log "wheel install failed"
  timeout $(cap 60) $PY -m pip install -q --no-index --no-deps --no-build-isolation -e . >>"$LOG" 2>&1 || log "editable install failed; using PYTHONPATH"
else
  timeout $(cap 60) $PY -m pip install -q --upgrade pip >>"$LOG" 2>&1 || true
  # torch only when the machine has none with CUDA: PyPI's default build there is a CUDA one.
  $PY -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || timeout $(cap 240) $PY -m pip install -q "torch>=2.4,<2.14" >>"$LOG" 2>&1 || log "torch install failed"
  # hydra-core and the launchers stay pinned by pyproject.toml
  timeout $(cap 180) $PY -m pip install -q -e ".[test]" >>"$LOG" 2>&1 || log "project install failed (offline?); using PYTHONPATH"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
log "installed: $($PY -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())')"

log "gpu tests"
timeout $(cap 120) $PY -m pytest -q -m gpu tests/ 2>&1 | tail -5 | tee -a "$LOG" || log "gpu tests failed (collection continues)"

log "NVML energy counter update period"
timeout $(cap 60) $PY experiments/gpu/gpu_helpers.py period "$OUT" 2>&1 | tee -a "$LOG" || log "period measurement failed"

M=$(left_min)
COLLECT=(space=paper device=cuda measure=gpu)
if python3 -c "import sys; sys.exit(0 if $M >= 0.5 else 1)"; then
  log "collecting the paper space for ${M} min (collector deadline max_minutes=${M})"
  # The collector stops before a config that would pass max_minutes; timeout is the hard stop 0.5 min later
  # (a killed run keeps every finished row).
  timeout $(cap $(python3 -c "print(int(($M + 0.5) * 60))")) $PY -m carb.collect "${COLLECT[@]}" \
    out="$OUT/dataset.parquet" max_minutes="$M" tracking.uri="sqlite:///$OUT/mlflow.db" run_name=gpu-paper \
    hydra.run.dir="$OUT/hydra" 2>&1 | tr '\r' '\n' | { grep -v -i warn || true; } | tail -20 | tee -a "$LOG" \
    || log "collection ended early (rows so far are kept)"
else
  log "only ${M} min left after install and tests: collection skipped"
fi

timeout 40 $PY experiments/gpu/gpu_helpers.py provenance "$OUT" "$MINUTES" "$LOG" 2>&1 | tee -a "$LOG" \
  || log "provenance failed"
log "done in $(( $(date +%s) - START )) s"
