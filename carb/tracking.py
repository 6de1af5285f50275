"""MLflow tracking: the only module in CARB that imports ``mlflow``.

Everything a command records goes through here: runs (one experiment per kind of command), params,
metrics, figures and tables as artifacts, datasets as run inputs, the fitted cascade as an MLflow
model in the registry, and alias resolution for ``models:/<name>@<alias>`` URIs.

The default store is embedded: ``sqlite:///<CARB_HOME>/mlruns/mlflow.db`` (:func:`carb.resources.carb_home`) with artifacts under ``mlruns/artifacts``
(MLflow 3 refuses the plain file store). A tracking server URL (``http://host:5000``) works the same.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from carb.errors import ModelError, TrackingError
from carb.files import locked

#: Experiment names, one per kind of command, so runs of one kind sit side by side in the UI.
EXPERIMENTS = {
    "collect": "carb-collect",
    "train": "carb-train",
    "tune": "carb-tune",
    "characterize": "carb-characterize",
    "screen": "carb-screen",
    "promote": "carb-promote",
    "import": "carb-import",
    "calibrate": "carb-calibrate",
    "probe": "carb-probe",
}

#: The description of each experiment (shown in the MLflow UI; tag ``mlflow.note.content``).
DESCRIPTIONS = {
    "carb-collect": "Measurement runs: one run per carb-collect (shard), with the device fingerprint, "
                    "row counts by status, repeated contention windows and the dataset as an input.",
    "carb-train": "Fitted cascades: test and extrapolation accuracy beside the FLOPs-only baseline B1, "
                  "sanity of screening predictions; each run registers a model version unless it is a sweep.",
    "carb-tune": "Optuna studies: one parent run per study, one nested run per trial.",
    "carb-characterize": "Dataset characterizations: per-knob costs, correlations, energy-latency divergence, "
                         "efficiency and cross-device transfer tables and figures.",
    "carb-screen": "Screenings of candidate grids against a budget with registered models: shortlist, Pareto "
                   "front, borderline flags.",
    "carb-promote": "Alias changes of registered models.",
    "carb-import": "Outside measurements brought into CARB datasets (timm, optimum-benchmark, CSV): counts, "
                   "unmapped rows, provenance and the dataset as an input.",
    "carb-probe": "Device probes: single-convolution timings per precision of one CPU (plan, median GMAC/s per "
                  "precision, the table and a figure); carb-train predicts a precision the device's dataset lacks "
                  "from them.",
    "carb-calibrate": "Few-shot transfers of a registered model to a new device from K measured rows: the "
                      "transfer per target, held-out accuracy beside the uncalibrated source and a FLOPs-only "
                      "fit on the same rows; each run registers the target device's model.",
}

_MAX_PARAM_LEN = 500


def _mlflow():
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    import logging
    import warnings

    import mlflow

    # MLflow's own chatter (schema hints, pickle advice, DB migrations) is not the user's concern here.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"mlflow(\.|$)")
    for name in ("mlflow.sklearn", "mlflow.store.db.utils", "mlflow.models.model", "alembic"):
        logging.getLogger(name).setLevel(logging.ERROR)

    return mlflow


def artifact_root_for(tracking_uri: str, artifact_root: str | None = None) -> str | None:
    """Artifact location for new experiments: ``artifact_root`` if given, else ``<db dir>/artifacts``
    for a SQLite store, else None (the server decides)."""
    if artifact_root:
        return Path(artifact_root).resolve().as_uri()
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///"):])
        return (db.resolve().parent / "artifacts").as_uri()
    return None


def configure(tracking_uri: str, artifact_root: str | None = None) -> None:
    """Point MLflow at ``tracking_uri`` (creating the SQLite folder if needed)."""
    global _CONFIGURED_URI
    mlflow = _mlflow()
    if tracking_uri.startswith(("http://", "https://")):
        check_server(tracking_uri)
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    _CONFIGURED_URI = tracking_uri
    if tracking_uri.startswith("sqlite:///"):
        _init_sqlite(Path(tracking_uri[len("sqlite:///"):]).resolve())
    global _ARTIFACT_ROOT
    _ARTIFACT_ROOT = artifact_root_for(tracking_uri, artifact_root)


_ARTIFACT_ROOT: str | None = None
_INITIALIZED: set[str] = set()
#: The store :func:`configure` last pointed MLflow at (None: never configured in this process).
_CONFIGURED_URI: str | None = None


def check_server(uri: str, timeout_s: float = 5.0) -> None:
    """One-line :class:`TrackingError` within ``timeout_s`` when no MLflow server answers at ``uri``
    (``/health``), instead of MLflow's minutes of retries."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout_s) as r:
            if r.status >= 500:
                raise TrackingError(f"tracking.uri={uri}: the MLflow server answers /health with HTTP {r.status}")
    except TrackingError:
        raise
    except urllib.error.HTTPError as e:
        if e.code >= 500:
            raise TrackingError(f"tracking.uri={uri}: the MLflow server answers /health with HTTP {e.code}") from None
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise TrackingError(f"tracking.uri={uri}: no MLflow server answers within {timeout_s:g} s ({reason}); start "
                            f"one (mlflow server ...) or use the embedded store (drop tracking.uri)") from None


def _hide_empty_default() -> None:
    """Delete MLflow's "Default" experiment (id 0, made with every new store) while it holds no run:
    CARB files every run under a named experiment, so an empty Default is only clutter in the UI. A
    Default that someone used is left alone; a deleted one stays restorable (``mlflow experiments
    restore``)."""
    client = _mlflow().MlflowClient()
    try:
        exp = client.get_experiment("0")
        if exp.name != "Default" or exp.lifecycle_stage != "active":
            return
        if not client.search_runs(["0"], max_results=1, run_view_type=3):   # ViewType.ALL
            client.delete_experiment("0")
    except Exception:  # noqa: BLE001 - a store that refuses (read-only, older schema) keeps its Default
        return


def _init_sqlite(db: Path) -> None:
    """Create the SQLite store's tables once, under a file lock, so parallel workers of a multirun
    (joblib launcher) that start on a fresh store do not race on the schema migration. On a read-only
    folder (an existing store shared read-only) it reads without the lock."""
    if str(db) in _INITIALIZED:
        return
    try:
        with locked(db):
            _mlflow().MlflowClient().search_experiments(max_results=1)
            _hide_empty_default()
    except OSError:
        if not db.exists():
            raise TrackingError(f"tracking.uri=sqlite:///{db}: the store's folder is not writable and holds no "
                                f"store yet") from None
        _mlflow().MlflowClient().search_experiments(max_results=1)
    _INITIALIZED.add(str(db))


def _experiment_id(name: str) -> str:
    mlflow = _mlflow()
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    loc = f"{_ARTIFACT_ROOT}/{name}" if _ARTIFACT_ROOT else None
    try:
        note = DESCRIPTIONS.get(name, f"CARB runs of {name}")
        return mlflow.create_experiment(name, artifact_location=loc, tags={"mlflow.note.content": note})
    except Exception:  # created concurrently by another worker
        exp = mlflow.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id


def git_commit() -> str:
    """Short git commit of the working tree, or 'unknown'."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


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
    mlflow = _mlflow()
    if not nested:
        configure(tracking_uri, artifact_root)
    if not nested and store_read_only(tracking_uri):
        yield from _unlogged_run(kind, tracking_uri)
        return
    exp_id = _experiment_id(experiment or EXPERIMENTS.get(kind, f"carb-{kind}"))
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


#: Parent run id per (experiment, sweep id) made or found by this process.
_SWEEP_PARENTS: dict[tuple[str, str], str] = {}


def sweep_parent(exp_id: str, kind: str, sweep: Mapping[str, str]) -> str:
    """Id of the parent run of a multirun sweep in experiment ``exp_id``: found by its tags
    (``carb.sweep_parent``, ``sweep``) or created, named ``<kind>/sweep/<sweep id>`` and left
    FINISHED; the job's overrides are added to its description (``mlflow.note.content``) and as tag
    ``job.<n>``. Works across processes (launchers that run jobs in parallel find the same parent)."""
    mlflow = _mlflow()
    client = mlflow.MlflowClient()
    sid = str(sweep["sweep"])
    key = (exp_id, sid)
    pid = _SWEEP_PARENTS.get(key)
    if pid is None:
        pid = _first_sweep_parent(client, exp_id, sid)
        if pid is None:
            run = client.create_run(exp_id, run_name=f"{kind}/sweep/{sid}",
                                    tags={"carb.kind": kind, "carb.sweep_parent": "true", "sweep": sid,
                                          "git_commit": git_commit()})
            pid = run.info.run_id
            client.set_terminated(pid, "FINISHED")
            # parallel jobs that searched at the same time made parents too: all keep the first one
            first = _first_sweep_parent(client, exp_id, sid) or pid
            if first != pid:
                client.delete_run(pid)
                pid = first
        _SWEEP_PARENTS[key] = pid
    job, overrides = str(sweep.get("sweep_job", "")), str(sweep.get("sweep_overrides", ""))
    run = client.get_run(pid)
    note = run.data.tags.get("mlflow.note.content") or f"Multirun sweep {sid} of carb-{kind}: one child run per job."
    line = f"\n- job {job}: {overrides or '(no overrides)'}"
    if line not in note:
        client.set_tag(pid, "mlflow.note.content", note + line)
    if job:
        client.set_tag(pid, f"job.{job}", overrides or "(no overrides)")
    return pid


def _first_sweep_parent(client, exp_id: str, sid: str) -> str | None:
    """Id of the oldest parent run of sweep ``sid`` in experiment ``exp_id`` (ties: the smallest id)."""
    found = client.search_runs([exp_id], filter_string=f"tags.`carb.sweep_parent` = 'true' and tags.sweep = '{sid}'",
                               max_results=50)
    return min(found, key=lambda r: (r.info.start_time, r.info.run_id)).info.run_id if found else None


#: Commands whose run only records what they did: on a read-only store they work without logging it.
RECORD_ONLY_KINDS: frozenset[str] = frozenset({"screen"})
#: True while a record-only run on a read-only store is open: the log_* functions do nothing.
_UNLOGGED = False


def store_read_only(tracking_uri: str) -> bool:
    """True when ``tracking_uri`` is an existing SQLite store this process may not write (the file or
    its folder, where SQLite puts its journal, is read-only)."""
    if not tracking_uri.startswith("sqlite:///"):
        return False
    db = Path(tracking_uri[len("sqlite:///"):]).resolve()
    return db.exists() and not (os.access(db, os.W_OK) and os.access(db.parent, os.W_OK))


def _unlogged_run(kind: str, tracking_uri: str) -> Iterator[str]:
    """Yield ``""`` (no run id) for a record-only command on a read-only store, saying so on stderr;
    refuse (one line) any command whose run is its product."""
    import sys

    global _UNLOGGED
    if kind not in RECORD_ONLY_KINDS:
        raise TrackingError(f"tracking.uri={tracking_uri}: the store is read-only; carb-{kind} writes to it "
                            f"(use a writable store, or a copy of this one)")
    print(f"carb-{kind}: the store {tracking_uri} is read-only: this run is not logged "
          f"(its files are written as usual)", file=sys.stderr)
    _UNLOGGED = True
    try:
        yield ""
    finally:
        _UNLOGGED = False


def find_runs(kind: str, tags: Mapping[str, Any], experiment: str | None = None) -> list[str]:
    """Run ids (oldest first) in the experiment for ``kind`` whose tags equal ``tags``."""
    mlflow = _mlflow()
    exp = mlflow.get_experiment_by_name(experiment or EXPERIMENTS.get(kind, f"carb-{kind}"))
    if exp is None:
        return []
    flt = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
    runs = mlflow.search_runs([exp.experiment_id], filter_string=flt, output_format="list",
                              order_by=["attributes.start_time ASC"])
    return [r.info.run_id for r in runs]


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
    mlflow = _mlflow()
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
    mlflow = _mlflow()
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
    _mlflow().set_tags({k: str(v) for k, v in tags.items()})


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    """Upload a local file or folder to the active run's artifacts."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    mlflow = _mlflow()
    p = Path(path)
    if p.is_dir():
        mlflow.log_artifacts(str(p), artifact_path=artifact_path)
    else:
        mlflow.log_artifact(str(p), artifact_path=artifact_path)


def log_figure(fig, filename: str) -> None:
    """Log a matplotlib figure as a PNG artifact (``filename`` like ``figures/pred_vs_meas.png``)."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    _mlflow().log_figure(fig, filename)


def log_text(text: str, filename: str) -> None:
    """Log a text artifact."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    _mlflow().log_text(text, filename)


def log_dict(d: Mapping[str, Any], filename: str) -> None:
    """Log a dict as a JSON/YAML artifact."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return
    _mlflow().log_dict(dict(d), filename)


def log_dataset(df, name: str, source: str, context: str = "training", targets: str | None = None) -> str:
    """Record a DataFrame as an MLflow run input (name, digest, source, schema) with its ``context``
    (``training``, ``validation``, ``calibration``, ``testing``, ``candidates``, ...). Returns the digest."""
    if _UNLOGGED:  # a record-only run on a read-only store (see start_run)
        return ""
    mlflow = _mlflow()
    ds = mlflow.data.from_pandas(df, source=str(source), name=name, targets=targets)
    mlflow.log_input(ds, context=context)
    return ds.digest


def dataset_digest(df, source: str = "") -> str:
    """MLflow's digest of a DataFrame (the one :func:`log_dataset` records), without logging it."""
    return _mlflow().data.from_pandas(df, source=str(source) or None).digest


def active_run_id() -> str | None:
    run = _mlflow().active_run()
    return run.info.run_id if run else None


# --------------------------------------------------------------------------- models and registry

def _pip_requirements() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    reqs = []
    for pkg in ("scikit-learn", "xgboost", "lightgbm", "pandas", "numpy", "scipy"):
        try:
            reqs.append(f"{pkg}=={version(pkg)}")
        except PackageNotFoundError:
            if pkg == "xgboost":
                try:
                    reqs.append(f"xgboost-cpu=={version('xgboost-cpu')}")
                except PackageNotFoundError:
                    pass
    return reqs


def log_cascade(model, input_example, registered_name: str | None = None,
                metadata: Mapping[str, Any] | None = None, description: str | None = None,
                model_description: str | None = None, version_tags: Mapping[str, Any] | None = None
                ) -> dict[str, Any]:
    """Log a fitted cascade as an MLflow (sklearn-flavour) model in the active run, with signature
    and input example, and register it as a new version of ``registered_name`` (no alias).

    The version gets ``metadata`` and ``version_tags`` as tags, ``description`` as its description and
    the active run as its source run; ``model_description`` becomes the registered model's description
    (set on every registration, so it describes the newest version's device). Registration prints
    nothing (MLflow's own "Registered model ... already exists" lines are not printed; the command
    says what it registered).

    Returns ``{"model_uri", "registered_name", "version"}`` (version None if not registered)."""
    mlflow = _mlflow()
    from mlflow.models import infer_signature

    signature = infer_signature(input_example, model.predict(input_example))
    info = mlflow.sklearn.log_model(
        sk_model=model, name="model", signature=signature, input_example=input_example,
        pip_requirements=_pip_requirements(), metadata=dict(metadata or {}), serialization_format="cloudpickle",
    )
    version = None
    if registered_name:
        tags = {**{k: str(v)[:5000] for k, v in (metadata or {}).items()},
                **{k: str(v)[:5000] for k, v in (version_tags or {}).items()}}
        version = register_version(registered_name, info.model_uri, getattr(info, "model_id", None),
                                   active_run_id(), tags, description, model_description)
    return {"model_uri": info.model_uri, "registered_name": registered_name,
            "version": None if version is None else str(version)}


def register_version(name: str, model_uri: str, model_id: str | None, run_id: str | None,
                     tags: Mapping[str, str], description: str | None = None,
                     model_description: str | None = None) -> str:
    """Create (if needed) the registered model ``name`` and a new version of it from a logged model,
    linked to its source run and logged model, silently. Returns the version number."""
    mlflow = _mlflow()
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    try:
        client.create_registered_model(name, description=model_description)
    except MlflowException as e:
        if "ALREADY_EXISTS" not in str(e.error_code):
            raise
        if model_description:
            client.update_registered_model(name, description=model_description)
    mv = client.create_model_version(name, source=model_uri, run_id=run_id, tags=dict(tags),
                                     description=description, model_id=model_id)
    if model_id:  # the logged model's link to its registered versions (what MLflow's register_model does)
        with contextlib.suppress(Exception):
            key = "mlflow.modelVersions"
            old = client.get_logged_model(model_id).tags.get(key)
            links = (json.loads(old) if old else []) + [{"name": mv.name, "version": mv.version}]
            client.set_logged_model_tags(model_id, {key: json.dumps(links)})
    return str(mv.version)


def registered_model_info(name: str, version: str | None = None) -> dict[str, Any]:
    """The registered model's description and tags, and, with ``version``, that version's
    ``version_description``, ``version_tags`` and ``run_id``."""
    client = _mlflow().MlflowClient()
    rm = client.get_registered_model(name)
    out: dict[str, Any] = {"description": rm.description or "", "tags": dict(rm.tags or {})}
    if version is not None:
        mv = client.get_model_version(name, str(version))
        out.update({"version_description": mv.description or "", "version_tags": dict(mv.tags or {}),
                    "run_id": mv.run_id})
    return out


def load_cascade(uri: str, tracking_uri: str | None = None):
    """Load a fitted cascade from ``models:/name@alias``, ``models:/name/<version>``,
    ``runs:/<run_id>/model`` or a local path. Without ``tracking_uri`` (and no ``MLFLOW_TRACKING_URI``,
    and no store configured in this process) it reads the commands' default store
    (:func:`carb.resources.default_tracking_uri`). Raises :class:`ModelError` with one line if the
    store, name, version, alias or run does not resolve."""
    import os

    from carb.resources import default_tracking_uri

    mlflow = _mlflow()
    if tracking_uri:
        configure(tracking_uri)
    elif _CONFIGURED_URI is None and not os.environ.get("MLFLOW_TRACKING_URI"):
        configure(default_tracking_uri())
    try:
        try:
            model = mlflow.sklearn.load_model(uri)
        except OSError as e:
            if not _read_only_fault(e):
                raise
            model = _load_copied(mlflow, uri)
    except ModuleNotFoundError as e:
        if (e.name or "").startswith("carb."):  # pickled by a release with another module layout
            raise ModelError(f"model {uri!r} was saved by an older CARB (module {e.name!r} no longer "
                             f"exists); retrain it with this version (carb-train) and promote it again") from None
        raise ModelError(f"cannot load model {uri!r}: missing module {e.name!r}") from None
    except Exception as e:  # MLflow raises several types (MlflowException, OSError, ...)
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"cannot load model {uri!r} from {mlflow.get_tracking_uri()!r}: {msg}") from None
    model.model_uri_ = uri
    return model


def _read_only_fault(e: OSError) -> bool:
    """True for the errors of writing into a read-only store (permission denied, read-only file system)."""
    import errno

    return e.errno in (errno.EACCES, errno.EPERM, errno.EROFS)


def _load_copied(mlflow, uri: str):
    """Load ``uri`` from a copy of its files in a temporary folder: MLflow writes ``registered_model_meta``
    next to the files of a ``models:/`` URI it loads, which fails on a read-only artifact folder."""
    source = uri
    if uri.startswith("models:/"):
        info = resolve_version(uri)
        source = mlflow.MlflowClient().get_model_version_download_uri(info["name"], info["version"])
    with tempfile.TemporaryDirectory(prefix="carb-model-") as tmp:
        local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=tmp)
        return mlflow.sklearn.load_model(local)


def resolve_version(uri: str) -> dict[str, Any]:
    """For a ``models:/`` URI, return ``{"name", "version", "run_id"}``; ``{}`` for other URIs."""
    if not uri.startswith("models:/"):
        return {}
    mlflow = _mlflow()
    client = mlflow.MlflowClient()
    rest = uri[len("models:/"):]
    try:
        if "@" in rest:
            name, alias = rest.split("@", 1)
            mv = client.get_model_version_by_alias(name, alias)
        else:
            name, version = rest.rsplit("/", 1)
            mv = client.get_model_version(name, version)
    except Exception as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"cannot resolve {uri!r}: {msg}") from None
    return {"name": mv.name, "version": str(mv.version), "run_id": mv.run_id}


def model_versions(name: str) -> list[dict[str, Any]]:
    """All versions of a registered model with their run's metrics:
    ``[{"version", "run_id", "metrics": {...}, "aliases": [...], "tags": {...}}, ...]`` sorted by
    version (``tags``: the run's own tags, e.g. ``dataset_digest`` and ``split``)."""
    mlflow = _mlflow()
    client = mlflow.MlflowClient()
    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except Exception as e:
        raise ModelError(f"cannot list versions of {name!r}: {str(e).splitlines()[0]}") from None
    try:  # search_model_versions leaves aliases empty on some stores: read them from the model
        by_version: dict[str, list[str]] = {}
        for alias, v in (client.get_registered_model(name).aliases or {}).items():
            by_version.setdefault(str(v), []).append(alias)
    except Exception:  # noqa: BLE001 - no registered model: no aliases
        by_version = {}
    out = []
    for mv in versions:
        run = client.get_run(mv.run_id) if mv.run_id else None
        metrics = run.data.metrics if run is not None else {}
        tags = run.data.tags if run is not None else {}
        aliases = sorted(set(getattr(mv, "aliases", []) or []) | set(by_version.get(str(mv.version), [])))
        out.append({"version": str(mv.version), "run_id": mv.run_id, "metrics": dict(metrics),
                    "aliases": aliases, "tags": {k: v for k, v in dict(tags).items() if not k.startswith("mlflow.")}})
    return sorted(out, key=lambda r: int(r["version"]))


def get_alias(name: str, alias: str) -> str | None:
    """Version number the alias points to, or None."""
    client = _mlflow().MlflowClient()
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except Exception:
        return None


def set_alias(name: str, alias: str, version: str) -> None:
    """Point ``name@alias`` at ``version``."""
    _mlflow().MlflowClient().set_registered_model_alias(name, alias, str(version))


def registered_models() -> list[str]:
    """Names of all registered models in the store."""
    client = _mlflow().MlflowClient()
    return sorted(m.name for m in client.search_registered_models())


def temp_dir() -> tempfile.TemporaryDirectory:
    """A temporary folder for artifacts written before upload."""
    return tempfile.TemporaryDirectory(prefix="carb-")
