"""What a run records: params, metrics, tags, files, figures, texts, dicts and datasets, each a no-op while a
record-only run on a read-only store is open (:func:`unlogged`)."""
from __future__ import annotations

import contextlib
import fnmatch
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from carb.tracking.store import mlflow_module

#: Longest param value MLflow is given (characters); longer ones are truncated.
_MAX_PARAM_LEN = 500
#: Most params one run gets (a runs table a person can read; the rest of a config goes in ``config.yaml``,
#: :func:`log_config`). Params past it are written to the artifact ``params_overflow.json`` instead.
MAX_PARAMS = 60
#: Params logged per run id by this process (for :data:`MAX_PARAMS`).
_PARAM_KEYS: dict[str, set[str]] = {}
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
    """Log (nested) params flattened to dotted keys; values are stringified and truncated to 500. A run
    gets at most :data:`MAX_PARAMS`: the keys past it go to the artifact ``params_overflow.json``."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow = mlflow_module()
    flat = {k: (json.dumps(v) if isinstance(v, (list, tuple)) else str(v))[:_MAX_PARAM_LEN]
            for k, v in flatten(params).items()}
    run = mlflow.active_run()
    have = _PARAM_KEYS.setdefault(run.info.run_id, set(run.data.params)) if run else set()
    room = max(0, MAX_PARAMS - len(have))
    new = [k for k in flat if k not in have]
    keep = {k: v for k, v in flat.items() if k in have or k in new[:room]}
    if len(new) > room:
        mlflow.log_dict({k: flat[k] for k in new[room:]}, "params_overflow.json")
    have.update(keep)
    if keep:
        mlflow.log_params(keep)


def select_params(config: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """The entries of ``config`` (flattened, :func:`flatten`) whose dotted key matches one of ``keys``
    (``fnmatch`` patterns: ``model.specialists.*.n_estimators``), in the config's order."""
    pats = list(keys)
    return {k: v for k, v in flatten(config).items() if any(fnmatch.fnmatchcase(k, p) for p in pats)}


def log_config(config: Mapping[str, Any], params: Mapping[str, Any], filename: str = "config.yaml") -> None:
    """Log the whole resolved ``config`` as one YAML artifact (``config.yaml``) and ``params`` (the few
    values a person compares across runs, e.g. from :func:`select_params`) as the run's params."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    import yaml

    text = yaml.safe_dump(json.loads(json.dumps(dict(config), default=str)), sort_keys=False)
    mlflow_module().log_text(text, filename)
    log_params(params)


def log_table(rows, filename: str) -> None:
    """Log a table (a DataFrame or a list of row dicts) as one MLflow table artifact: ``filename`` (``.json``)
    in the layout of ``mlflow.log_table`` (``{"columns": [...], "data": [[...], ...]}``, read back by
    ``MlflowClient.load_table``) and listed in the run's ``mlflow.loggedArtifacts`` tag, so the UI shows it
    as a table. Numbers keep every digit (``mlflow.log_table`` writes 10 decimals: 6.8e-03 kept 8 digits)."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    import pandas as pd

    mlflow = mlflow_module()
    frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    data = frame.astype(object).where(frame.notna(), None).to_numpy().tolist()
    mlflow.log_text(json.dumps({"columns": [str(c) for c in frame.columns], "data": data}, default=str), filename)
    key = "mlflow.loggedArtifacts"
    client, run_id = mlflow.MlflowClient(), mlflow.active_run().info.run_id
    listed = json.loads(client.get_run(run_id).data.tags.get(key, "[]"))
    if {"path": filename, "type": "table"} not in listed:
        client.set_tag(run_id, key, json.dumps([*listed, {"path": filename, "type": "table"}]))


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
    if len(df) > SCHEMA_ROWS:
        ds.__dict__["schema"] = column_schema(df)   # the cached property, set: the same schema, seconds sooner
    mlflow.log_input(ds, context=context)
    return ds.digest


#: Rows above which :func:`log_dataset` infers the schema column by column from distinct values.
SCHEMA_ROWS = 50_000


def column_schema(df) -> Any:
    """MLflow's inferred schema of ``df`` (``mlflow.types.Schema``: a type and a required flag per column),
    computed from each column's distinct values: the same result as inferring over every row (a type and a
    "has no missing value" flag depend only on the set of values), without MLflow's Python loop over every
    cell (a million screened candidates: 8 s of carb-screen's logging). None where MLflow infers none;
    a column whose values cannot be hashed is inferred whole."""
    from mlflow.types import Schema
    from mlflow.types.utils import _infer_schema

    specs = []
    try:
        for c in df.columns:
            try:
                part = df[[c]].drop_duplicates()
            except TypeError:        # unhashable values (lists): every row
                part = df[[c]]
            specs.extend(_infer_schema(part).inputs)
        return Schema(specs)
    except Exception:                # as MLflow's own property: no schema rather than no run input
        return None


def dataset_digest(df, source: str = "") -> str:
    """MLflow's digest of a DataFrame (the one :func:`log_dataset` records), without logging it."""
    return mlflow_module().data.from_pandas(df, source=str(source) or None).digest
