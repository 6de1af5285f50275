# Two set-up commands (README): `make quickstart` and `make test`. Both create .venv and install
# everything themselves. torch is pinned here (the CPU wheel on CPU hosts); hydra-core in pyproject.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
# torchvision's release for that torch (the zoo's models; on a GPU host pass both, e.g. TORCH=torch==2.11.0
# TORCHVISION=torchvision==0.26.0)
TORCHVISION ?= torchvision==0.28.0

.PHONY: venv quickstart test test-slow test-all bench clean ui scale-out postgres

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" "$(TORCHVISION)"
	$(BIN)/pip install -q -e ".[test,zoo]"
	touch $@

venv: $(BIN)/.installed

# the scale-out extras (slurm: the submitit launcher; postgres: the PostgreSQL driver): only the slow
# tests (tests/test_scale_out.py) and scale-out need them, the fast suite runs without
$(BIN)/.scale-out: $(BIN)/.installed
	$(BIN)/pip install -q -e ".[test,zoo,slurm,postgres]"
	touch $@

quickstart: venv  ## train (if no champion) -> promote -> screen, on the shipped dataset
	$(BIN)/carb-quickstart

# the fast suite runs on TEST_WORKERS processes (pytest-xdist), a test file each at a time, so a file's shared
# fitted fixtures are made once; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2

test: venv  ## the fast test suite (pyproject addopts deselect `slow` and `gpu`), on TEST_WORKERS processes
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

postgres:  ## PostgreSQL server binaries for the scale-out test (Debian's package when initdb is absent)
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql)

scale-out: $(BIN)/.scale-out postgres  ## PostgreSQL + mlflow server + 2 tune workers + submitit shards + train/promote/screen
	$(BIN)/python -m pytest -q -m slow tests/test_scale_out.py

test-slow: $(BIN)/.scale-out postgres  ## only the tests marked slow (CI runs them after `make test`: .ci/run)
	$(BIN)/python -m pytest -q -m "slow and not gpu"

test-all: $(BIN)/.scale-out  ## fast + slow (+ gpu, skipped without an NVIDIA GPU)
	$(BIN)/python -m pytest -q -m "slow or not slow"

bench: venv
	$(BIN)/python scripts/bench/features.py

ui: venv  ## MLflow UI on the local store
	@echo "open http://127.0.0.1:5000/#/?workflowType=machine_learning (Model training; each command prints its run's page)"
	MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=1 MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow ui --workers 1 --backend-store-uri sqlite:///mlruns/mlflow.db

clean:
	rm -rf $(VENV) outputs multirun
