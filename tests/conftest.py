"""Shared pytest fixtures and the gpu-marker skip. Puts tests/ on ``sys.path`` so every test module can
``from synthetic import ...`` (the one builder of synthetic rows, tests/synthetic.py) under any import mode."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
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


def pytest_configure(config):
    """Every test (and every process it starts, which inherits the environment) uses a temporary
    ``CARB_HOME``: the default MLflow store, Optuna storage and user probes are never the checkout's
    ``mlruns/`` or the user's own. Set when pytest starts, before test modules are imported, so an
    environment a module copies at import (``ENV = {**os.environ, ...}``) has it too; tests that need
    another home set ``CARB_HOME`` themselves."""
    home = os.path.realpath(tempfile.mkdtemp(prefix="carb-home-"))
    config._carb_home = (home, os.environ.get("CARB_HOME"), os.environ.get("CARB_CACHE"))
    os.environ["CARB_HOME"] = home
    os.environ["CARB_CACHE"] = os.path.join(home, "cache")   # the session's store template, not the user's


def pytest_unconfigure(config):
    home, before, cache = getattr(config, "_carb_home", (None, None, None))
    if home is None:
        return
    for name, value in (("CARB_HOME", before), ("CARB_CACHE", cache)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _stores_from_a_template(tmp_path_factory):
    """A fresh MLflow SQLite store costs a schema migration: about 1 s of CPU and, on a disk, several
    seconds of syncs. Inside the test process every new store therefore starts as a copy of one store
    migrated once per session (made by the real :func:`carb.tracking.store._init_sqlite`, lazily, so
    tests that never track pay nothing); the real set-up then runs on the copy as on any existing store.
    Processes that tests start (the commands as users run them) create their stores for real, from the
    session's own template cache (``CARB_CACHE``, :func:`carb.tracking.store.seed_from_template`), and a folder
    where the copy cannot be written (read-only) falls through to the real code and its error."""
    mp = pytest.MonkeyPatch()
    store = sys.modules.get("carb.tracking.store")
    if store is None:
        import carb.tracking.store as store
    real = store._init_sqlite
    made: list[Path] = []

    def template() -> Path:
        if not made:
            mlflow = store.mlflow_module()
            uris = mlflow.get_tracking_uri(), mlflow.get_registry_uri()
            db = tmp_path_factory.mktemp("template-store") / "mlflow.db"
            mlflow.set_tracking_uri(f"sqlite:///{db}")
            mlflow.set_registry_uri(f"sqlite:///{db}")
            try:
                real(db)
            finally:
                mlflow.set_tracking_uri(uris[0])
                mlflow.set_registry_uri(uris[1])
            made.append(db)
        return made[0]

    def init_from_template(db: Path) -> None:
        if str(db) not in store._INITIALIZED and not db.exists():
            try:
                with store.locked(db):
                    if not db.exists():
                        tmp = db.with_name(f".{db.name}.template")
                        shutil.copyfile(template(), tmp)
                        os.replace(tmp, db)
            except OSError:
                pass
        real(db)

    mp.setattr(store, "_init_sqlite", init_from_template)
    template.real = real   # the real set-up, for the tests of the product's own template (test_store_template.py)
    yield template
    mp.undo()


@pytest.fixture(scope="session")
def template_store(_stores_from_a_template) -> Path:
    """The empty MLflow store that in-process stores start from (made once by CARB's real set-up); copy
    it, never change it."""
    return _stores_from_a_template()


@pytest.fixture(autouse=True)
def _clean_mlflow_env(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.delenv("MLFLOW_REGISTRY_URI", raising=False)   # mlflow.set_registry_uri sets it (MLflow 3)
    yield
    try:
        import mlflow

        while mlflow.active_run():
            mlflow.end_run()
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _warnings_format_restored(monkeypatch):
    """A command's ``concise_warnings()`` replaces ``warnings.formatwarning`` for the whole process; each test
    gets it back as it found it, so a later test on the same xdist worker sees Python's default."""
    import warnings

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)
    yield


def has_exe(name: str) -> bool:
    return shutil.which(name) is not None
