"""MLflow runs: opening one per command (nested, resumed, grouped under a sweep, or unlogged on a
read-only store) and finding earlier runs by their tags."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from carb.errors import TrackingError
from carb.tracking.log import unlogged
from carb.tracking.store import (
    EXPERIMENTS,
    RECORD_ONLY_KINDS,
    configure,
    experiment_id,
    git_commit,
    mlflow_module,
    store_read_only,
)
from carb.tracking.sweeps import sweep_parent

@contextlib.contextmanager
def start_run(kind: str, run_name: str, tracking_uri: str, tags: Mapping[str, Any] | None = None,
              nested: bool = False, artifact_root: str | None = None,
              experiment: str | None = None, parent_run_id: str | None = None,
              run_id: str | None = None, sweep: Mapping[str, str] | None = None) -> Iterator[str]:
    """Open an MLflow run in the experiment for ``kind`` (see :data:`EXPERIMENTS`); yield its run id.

    A nested run (``nested=True``) goes under the currently active run (e.g. Optuna trials under the
    study's parent run). ``parent_run_id`` nests the run under a parent started by another process
    (e.g. another tuning worker); ``run_id`` resumes an existing run. Tags ``carb.kind`` and
    ``git_commit`` are always set; ``sweep`` (``{"sweep": <id>, "sweep_overrides": ...}`` from
    :func:`carb.commands.cli.sweep_tags`) tags a multirun job and nests it under the sweep's parent
    run (:func:`sweep_parent`) so the UI groups a sweep's runs. A new experiment gets its description from :data:`DESCRIPTIONS`.
    """
    mlflow = mlflow_module()
    if not nested:
        configure(tracking_uri, artifact_root)
    if not nested and store_read_only(tracking_uri):
        yield from _unlogged_run(kind, tracking_uri)
        return
    exp_id = experiment_id(experiment or EXPERIMENTS.get(kind, f"carb-{kind}"))
    all_tags = {"carb.kind": kind, "git_commit": git_commit()}
    all_tags.update({k: str(v) for k, v in (tags or {}).items()})
    if sweep and not nested:
        all_tags.update({k: str(v) for k, v in sweep.items()})
        if sweep.get("sweep") and not parent_run_id:
            parent_run_id = sweep_parent(exp_id, kind, sweep)
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    if run_id:
        with mlflow.start_run(run_id=run_id) as run:
            yield run.info.run_id
        return
    run = mlflow.start_run(experiment_id=exp_id, run_name=run_name, nested=nested, tags=all_tags)
    try:
        yield run.info.run_id
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what was logged stays, the run says it was killed
        mlflow.end_run("KILLED")
        raise
    except BaseException:
        mlflow.end_run("FAILED")
        raise
    mlflow.end_run("FINISHED")



def _unlogged_run(kind: str, tracking_uri: str) -> Iterator[str]:
    """Yield ``""`` (no run id) for a record-only command on a read-only store, saying so on stderr;
    refuse (one line) any command whose run is its product."""
    if kind not in RECORD_ONLY_KINDS:
        raise TrackingError(f"tracking.uri={tracking_uri}: the store is read-only; carb-{kind} writes to it "
                            f"(use a writable store, or a copy of this one)")
    print(f"carb-{kind}: the store {tracking_uri} is read-only: this run is not logged "
          f"(its files are written as usual)", file=sys.stderr)
    with unlogged():
        yield ""


def find_runs(kind: str, tags: Mapping[str, Any], experiment: str | None = None) -> list[str]:
    """Run ids (oldest first) in the experiment for ``kind`` whose tags equal ``tags``."""
    mlflow = mlflow_module()
    exp = mlflow.get_experiment_by_name(experiment or EXPERIMENTS.get(kind, f"carb-{kind}"))
    if exp is None:
        return []
    flt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = mlflow.search_runs([exp.experiment_id], filter_string=flt, output_format="list",
                              order_by=["attributes.start_time ASC"])
    return [r.info.run_id for r in runs]


def active_run_id() -> str | None:
    """Id of the active run, or None outside a run."""
    run = mlflow_module().active_run()
    return run.info.run_id if run else None


