"""What a run records: params, metrics, tags, files, figures, texts, dicts and datasets, each a no-op while a
record-only run on a read-only store is open (:func:`unlogged`)."""
from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from carb.tracking.store import mlflow_module

#: Longest param value MLflow is given (characters); longer ones are truncated.
_MAX_PARAM_LEN = 500
#: True while a record-only run on a read-only store is open: the log_* functions do nothing.
_UNLOGGED = False


@contextlib.contextmanager
def unlogged() -> Iterator[None]:
    """While open, the ``log_*`` functions and :func:`set_tags` do nothing."""
    global _UNLOGGED
    _UNLOGGED = True
    try:
        yield
    finally:
        _UNLOGGED = False


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings to dotted keys: ``{"a": {"b": 1}} -> {"a.b": 1}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def log_params(params: Mapping[str, Any]) -> None:
    """Log (nested) params flattened to dotted keys; values are stringified and truncated to 500."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow = mlflow_module()
    flat = {k: (json.dumps(v) if isinstance(v, (list, tuple)) else str(v))[:_MAX_PARAM_LEN]
            for k, v in flatten(params).items()}
    items = list(flat.items())
    for i in range(0, len(items), 100):
        mlflow.log_params(dict(items[i:i + 100]))


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> dict[str, float]:
    """Log finite numeric metrics; NaN/None values are skipped (a missing target is not a 0).

    Returns the dict actually logged."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return {}
    mlflow = mlflow_module()
    clean = {}
    for k, v in metrics.items():
        try:
            f = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(f):
            clean[k] = f
    if clean:
        mlflow.log_metrics(clean, step=step)
    return clean


def set_tags(tags: Mapping[str, Any]) -> None:
    """Set string tags on the active run."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow_module().set_tags({k: str(v) for k, v in tags.items()})


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """Upload a local file or folder to the active run's artifacts."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow = mlflow_module()
    p = Path(path)
    if p.is_dir():
        mlflow.log_artifacts(str(p), artifact_path=artifact_path)
    else:
        mlflow.log_artifact(str(p), artifact_path=artifact_path)


def log_figure(fig, filename: str) -> None:
    """Log a matplotlib figure as a PNG artifact (``filename`` like ``figures/pred_vs_meas.png``)."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow_module().log_figure(fig, filename)


def log_text(text: str, filename: str) -> None:
    """Log a text artifact."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow_module().log_text(text, filename)


def log_dict(d: Mapping[str, Any], filename: str) -> None:
    """Log a dict as a JSON/YAML artifact."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow_module().log_dict(dict(d), filename)


def log_dataset(df, name: str, source: str, context: str = "training", targets: str | None = None) -> str:
    """Record a DataFrame as an MLflow run input (name, digest, source, schema) with its ``context``
    (``training``, ``validation``, ``calibration``, ``testing``, ``candidates``, ...). Returns the digest."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return ""
    mlflow = mlflow_module()
    ds = mlflow.data.from_pandas(df, source=str(source), name=name, targets=targets)
    mlflow.log_input(ds, context=context)
    return ds.digest


def dataset_digest(df, source: str = "") -> str:
    """MLflow's digest of a DataFrame (the one :func:`log_dataset` records), without logging it."""
    return mlflow_module().data.from_pandas(df, source=str(source) or None).digest
