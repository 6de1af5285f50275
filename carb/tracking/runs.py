"""MLflow runs: opening one per command (nested, resumed, grouped under a sweep, or unlogged on a
read-only store) and finding earlier runs by their tags."""
from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

from carb.errors import TrackingError
from carb.tracking.auth import read_only_for_user
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
from carb.tracking.sweeps import sweep_job_finished, sweep_parent

#: When the command now running started (ms since the epoch; :func:`command_started`); None: not marked.
_COMMAND_START_MS: int | None = None


def command_started(at_s: float | None = None) -> None:
    """Mark that a command starts now (or at ``at_s``, seconds since the epoch): the next run it opens
    starts there, not when its logging begins (a 14-minute ``carb-train`` logs in its last seconds).
    :func:`carb.commands.checks.check_config`, the first step of every command, calls it."""
    global _COMMAND_START_MS
    _COMMAND_START_MS = int(1000 * (time.time() if at_s is None else at_s))


def _take_command_start() -> int:
    """The marked command start (ms), cleared so that a later command that does not mark starts its run
    when it opens it; now when nothing is marked."""
    global _COMMAND_START_MS
    start, _COMMAND_START_MS = _COMMAND_START_MS, None
    now = int(time.time() * 1000)
    return start if start is not None and start <= now else now


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

    Times: a new top-level run starts when the command started (:func:`command_started`) and ends when
    this block exits; a sweep's parent run spans its jobs (first job's start to last job's end).
    """
    mlflow = mlflow_module()
    if not nested:
        configure(tracking_uri, artifact_root)
    if not nested and store_read_only(tracking_uri):
        yield from _unlogged_run(kind, tracking_uri)
        return
    exp_id = experiment_id(experiment or EXPERIMENTS.get(kind, f"carb-{kind}"))
    start_ms = None if nested or run_id else _take_command_start()
    sweep_pid = None
    all_tags = {"carb.kind": kind, "git_commit": git_commit()}
    all_tags.update({k: str(v) for k, v in (tags or {}).items()})
    if sweep and not nested:
        all_tags.update({k: str(v) for k, v in sweep.items()})
        if sweep.get("sweep") and not parent_run_id:
            parent_run_id = sweep_pid = sweep_parent(exp_id, kind, sweep, start_ms)
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    if run_id:
        with mlflow.start_run(run_id=run_id) as run:
            yield run.info.run_id
        return
    if nested:
        run = mlflow.start_run(experiment_id=exp_id, run_name=run_name, nested=True, tags=all_tags)
    else:
        run = _start_at(mlflow, exp_id, run_name, all_tags, start_ms)
    status = "FINISHED"
    try:
        yield run.info.run_id
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: what was logged stays, the run says it was killed
        status = "KILLED"
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        mlflow.end_run(status)
        if sweep_pid:
            sweep_job_finished(sweep_pid)


def _start_at(mlflow, exp_id: str, run_name: str, tags: Mapping[str, str], start_ms: int):
    """Create a run that started at ``start_ms`` (with the context tags ``mlflow.start_run`` adds: user,
    source) and make it the active run."""
    from mlflow.tracking.context.registry import resolve_tags

    created = mlflow.MlflowClient().create_run(exp_id, start_time=start_ms, tags=resolve_tags(dict(tags)),
                                               run_name=run_name or None)
    return mlflow.start_run(run_id=created.info.run_id)



def _unlogged_run(kind: str, tracking_uri: str) -> Iterator[str]:
    """Yield ``""`` (no run id) for a record-only command on a read-only store, saying so on stderr;
    refuse (one line) any command whose run is its product."""
    if kind not in RECORD_ONLY_KINDS:
        raise TrackingError(f"tracking.uri={tracking_uri}: the store is read-only; carb-{kind} writes to it "
                            f"(use a writable store, or a copy of this one)")
    why = read_only_for_user(tracking_uri)
    if why:
        print(f"carb-{kind}: {why} on {tracking_uri}: this run is not logged; its files are written", file=sys.stderr)
    else:
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


