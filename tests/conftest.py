"""Shared pytest fixtures and the gpu-marker skip. Puts tests/ on ``sys.path`` so every test module can
``from synthetic import ...`` (the one builder of synthetic rows, tests/synthetic.py) under any import mode."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


def _has_gpu() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        n = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
        return n > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if any("gpu" in item.keywords for item in items) and not _has_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU with NVML (none found)")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def tracking_uri(tmp_path):
    """A fresh SQLite MLflow store in tmp_path."""
    return f"sqlite:///{tmp_path}/mlruns/mlflow.db"


@pytest.fixture
def no_cuda(monkeypatch):
    """Pretend there is no CUDA device."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return True


@pytest.fixture(scope="session", autouse=True)
def _temporary_carb_home(tmp_path_factory):
    """Every test (and every process it starts, which inherits the environment) uses a temporary
    ``CARB_HOME``: the default MLflow store, Optuna storage and user probes are never the checkout's
    ``mlruns/`` or the user's own. Session-wide, so module fixtures see it too; tests that need another
    home set ``CARB_HOME`` themselves."""
    mp = pytest.MonkeyPatch()
    mp.setenv("CARB_HOME", str(tmp_path_factory.mktemp("carb-home")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _clean_mlflow_env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    yield
    try:
        import mlflow

        while mlflow.active_run():
            mlflow.end_run()
    except ImportError:
        pass


def has_exe(name: str) -> bool:
    return shutil.which(name) is not None
