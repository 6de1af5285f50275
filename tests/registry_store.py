"""A fresh MLflow store with one registered model whose versions carry only what the code under test reads (the
version's tags, its run's metrics; no model behind them): for the tests of carb-calibrate's alias and
carb-promote (test code only)."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from carb import tracking


def one_model_store(tmp_path: Path, name: str, command: str) -> tuple[str, Callable[..., str]]:
    """A SQLite store at ``tmp_path/registry.db`` (configured as the tracking store) holding the registered model
    ``name``; returns its URI and ``add(tags=None, metrics=None)``, which logs one ``command`` run named ``name``
    (with ``metrics``) and registers the next version from it (with the version ``tags``), returning its number."""
    import mlflow

    uri = f"sqlite:///{tmp_path}/registry.db"
    tracking.configure(uri)
    client = mlflow.MlflowClient()
    client.create_registered_model(name)

    def add(tags: dict[str, str] | None = None, metrics: dict[str, float] | None = None) -> str:
        with tracking.start_run(command, name, uri) as run_id:
            if metrics:
                tracking.log_metrics(metrics)
        return str(client.create_model_version(name, source=f"runs:/{run_id}/model", run_id=run_id,
                                               tags=tags).version)

    return uri, add
