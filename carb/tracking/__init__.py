"""MLflow tracking: the only package in CARB that imports ``mlflow``.

Everything a command records goes through here: runs (one experiment per kind of command), params,
metrics, figures and tables as artifacts, datasets as run inputs, the fitted cascade as an MLflow
model in the registry, and alias resolution for ``models:/<name>@<alias>`` URIs. Split by concern:

- :mod:`carb.tracking.store`: where MLflow points (embedded SQLite store or server), experiments, git commit;
- :mod:`carb.tracking.auth`: a protected server (basic-auth): credentials from the environment, 401 / 403 as
  one line before any work, a READ-only user's screen unlogged;
- :mod:`carb.tracking.runs`: opening runs (nested, resumed, unlogged on a read-only store), finding runs;
- :mod:`carb.tracking.sweeps`: the parent run grouping a multirun sweep's jobs;
- :mod:`carb.tracking.log`: params, metrics, tags, artifacts and datasets of the active run;
- :mod:`carb.tracking.registry`: logging, registering, aliasing and loading fitted cascades.

Callers use the names re-exported here (``from carb import tracking; tracking.start_run(...)``).
"""
from __future__ import annotations

from carb.tracking.auth import auth_failure_line, auth_status, read_only_for_user
from carb.tracking.log import (
    _MAX_PARAM_LEN,
    MAX_PARAMS,
    dataset_digest,
    flatten,
    log_artifact,
    log_config,
    log_dataset,
    log_dict,
    log_figure,
    log_metrics,
    log_params,
    log_table,
    log_text,
    select_params,
    set_tags,
)
from carb.tracking.registry import (
    get_alias,
    load_cascade,
    log_cascade,
    model_versions,
    register_version,
    registered_model_info,
    registered_models,
    resolve_version,
    set_alias,
    warm_model_logging,
)
from carb.tracking.runs import RECORD_ONLY_KINDS, active_run_id, command_started, find_runs, start_run
from carb.tracking.store import (
    _INITIALIZED,
    DESCRIPTIONS,
    EXPERIMENT_KIND,
    EXPERIMENTS,
    artifact_root_for,
    check_access,
    check_server,
    check_store,
    configure,
    configured_uri,
    experiment_url,
    run_url,
    ui_base,
    git_commit,
    refuse_password_in_uri,
    store_read_only,
)
from carb.tracking.sweeps import _SWEEP_PARENTS, sweep_parent

__all__ = [
    "DESCRIPTIONS", "EXPERIMENTS", "auth_failure_line", "auth_status", "check_access", "read_only_for_user",
    "refuse_password_in_uri", "EXPERIMENT_KIND", "MAX_PARAMS", "RECORD_ONLY_KINDS", "active_run_id",
    "artifact_root_for", "check_server", "check_store", "command_started", "configure", "configured_uri",
    "dataset_digest", "experiment_url", "find_runs", "flatten", "get_alias", "git_commit", "load_cascade",
    "log_artifact", "log_cascade", "log_config", "log_dataset", "log_dict", "log_figure", "log_metrics",
    "log_params", "log_table", "log_text", "model_versions", "register_version", "registered_model_info",
    "run_url", "ui_base",
    "registered_models", "resolve_version", "select_params", "set_alias", "set_tags", "start_run",
    "store_read_only", "sweep_parent", "warm_model_logging", "_INITIALIZED", "_MAX_PARAM_LEN", "_SWEEP_PARENTS",
]
