"""The tracking store: where MLflow points (the embedded SQLite store or a server), one experiment per
kind of command, and the provenance every run records (the git commit).

The default store is embedded: ``sqlite:///<CARB_HOME>/mlruns/mlflow.db`` (:func:`carb.resources.carb_home`)
with artifacts under ``mlruns/artifacts`` (MLflow 3 refuses the plain file store). A tracking server URL
(``http://host:5000``) works the same. :func:`mlflow_module` is the one place MLflow is imported.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from carb.errors import TrackingError
from carb.files import locked, sqlite_problem
from carb.tracking.auth import (COMMAND_EXPERIMENTS, auth_failure_line, auth_status, mark_read_only,
                                read_only_for_user, user)

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

def mlflow_module():
    """The ``mlflow`` module, imported lazily, with its progress bars and chatter turned off."""
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
    global _CONFIGURED_URI, _ARTIFACT_ROOT
    mlflow = mlflow_module()
    if tracking_uri.startswith(("http://", "https://")):
        check_server(tracking_uri)
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)
    _CONFIGURED_URI = tracking_uri
    if tracking_uri.startswith("sqlite:///"):
        _init_sqlite(Path(tracking_uri[len("sqlite:///"):]).resolve())
    _ARTIFACT_ROOT = artifact_root_for(tracking_uri, artifact_root)


_ARTIFACT_ROOT: str | None = None
_INITIALIZED: set[str] = set()
#: The store :func:`configure` last pointed MLflow at (None: never configured in this process).
_CONFIGURED_URI: str | None = None


def configured_uri() -> str | None:
    """The store :func:`configure` last pointed MLflow at in this process (None: never configured)."""
    return _CONFIGURED_URI


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
    client = mlflow_module().MlflowClient()
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
    (joblib launcher) that start on a fresh store do not race on the schema migration. A new store starts as
    a copy of this MLflow version's empty store (:func:`seed_from_template`). On a read-only folder (an
    existing store shared read-only) it reads without the lock."""
    if str(db) in _INITIALIZED:
        return
    try:
        with locked(db):
            fresh = not db.exists()
            seeded = seed_from_template(db)
            try:
                mlflow_module().MlflowClient().search_experiments(max_results=1)
            except Exception:
                if seeded:   # a template MLflow refuses after all: neither it nor this copy is kept
                    _drop_template(db)
                raise
            if fresh and not seeded and db.exists():   # a store MLflow just made: its empty schema
                save_template(db)
            _hide_empty_default()
    except OSError:
        if not db.exists():
            raise TrackingError(f"tracking.uri=sqlite:///{db}: the store's folder is not writable and holds no "
                                f"store yet") from None
        mlflow_module().MlflowClient().search_experiments(max_results=1)
    _INITIALIZED.add(str(db))


def template_path() -> Path:
    """The empty store of this MLflow version that new SQLite stores are copied from:
    ``<cache>/mlflow-<version>-store.db`` (:func:`carb.resources.cache_dir`)."""
    from carb.resources import cache_dir

    return cache_dir() / f"mlflow-{mlflow_module().__version__}-store.db"


def seed_from_template(db: Path) -> bool:
    """Start a store that does not exist yet as a copy of :func:`template_path` (when there is one); returns
    whether it did. A new SQLite store otherwise runs MLflow's whole schema migration, about 1.2 s of CPU (a
    tenth of ``carb-train``'s CPU on two cores) and thousands of disk syncs; the copy takes milliseconds. The
    template holds only the migrated schema (no experiment: MLflow makes its Default experiment on opening,
    with this store's own paths), so the copy is what a migration makes. A template of another schema revision,
    or no SQLite file, is dropped here; one MLflow still refuses on opening is dropped by :func:`_init_sqlite`
    with the copy (the command fails once with MLflow's error, and the next run migrates)."""
    import shutil

    src = template_path()
    if db.exists() or not src.is_file():
        return False
    if not _template_ok(src):
        _drop_template(None)
        return False
    tmp = db.with_name(f".{db.name}.{os.getpid()}.seed")
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, tmp)
        os.replace(tmp, db)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def save_template(db: Path) -> None:
    """Keep the schema of ``db``, a store MLflow has just created and migrated, as :func:`template_path`:
    a consistent copy (SQLite's backup), its experiments removed. Silently nothing where the cache cannot be
    written."""
    import sqlite3
    from contextlib import closing

    dst = template_path()
    if dst.exists():
        return
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(db)) as src, closing(sqlite3.connect(tmp)) as out:
            src.backup(out)
            with out:   # one transaction, committed
                out.execute("DELETE FROM experiment_tags")
                out.execute("DELETE FROM experiments")
        os.replace(tmp, dst)
    except (OSError, sqlite3.Error):
        tmp.unlink(missing_ok=True)


def _template_ok(src: Path) -> bool:
    """Whether ``src`` is an SQLite store of MLflow's current schema revision (the one it migrates to)."""
    import sqlite3
    from contextlib import closing

    try:
        with closing(sqlite3.connect(f"{src.as_uri()}?mode=ro", uri=True)) as c:
            rows = c.execute("SELECT version_num FROM alembic_version").fetchall()
    except sqlite3.Error:
        return False
    try:
        from mlflow.store.db.utils import _get_latest_schema_revision
    except ImportError:   # MLflow moved it: it checks the revision itself when it opens the copy
        return len(rows) == 1
    return rows == [(_get_latest_schema_revision(),)]


def _drop_template(db: Path | None) -> None:
    """Remove a store seeded from a template MLflow refused (``db``), and the template."""
    for p in (db, template_path()):
        try:
            if p is not None:
                p.unlink(missing_ok=True)
        except OSError:
            pass


#: The experiment tag MLflow 3 reads for an experiment's type, and CARB's value: model training
#: ("Machine learning": the runs table), not GenAI development (traces). MLflow 3.0-3.4 open an experiment
#: by this tag; later UIs (3.17 checked) follow their sidebar switch instead, which :func:`experiment_url`
#: sets with ``?workflowType=machine_learning``.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
#: Experiments whose kind this process has checked (id per tracking URI), so it is set once.
_KIND_CHECKED: set[tuple[str, str]] = set()


def experiment_id(name: str) -> str:
    """Id of experiment ``name``, created (with its description from :data:`DESCRIPTIONS`, its kind
    :data:`EXPERIMENT_KIND` and its artifact folder under the configured artifact root) if it does not exist
    yet; an existing experiment without that kind gets it on first use."""
    mlflow = mlflow_module()
    exp = mlflow.get_experiment_by_name(name)
    if exp is not None:
        _ensure_kind(exp)
        return exp.experiment_id
    loc = f"{_ARTIFACT_ROOT}/{name}" if _ARTIFACT_ROOT else None
    try:
        note = DESCRIPTIONS.get(name, f"CARB runs of {name}")
        return mlflow.create_experiment(name, artifact_location=loc,
                                        tags={"mlflow.note.content": note, EXPERIMENT_KIND[0]: EXPERIMENT_KIND[1]})
    except Exception:  # created concurrently by another worker
        exp = mlflow.get_experiment_by_name(name)
        if exp is None:
            raise
        _ensure_kind(exp)
        return exp.experiment_id


def _ensure_kind(exp) -> None:
    """Tag an experiment made before CARB set :data:`EXPERIMENT_KIND` (once per process and experiment)."""
    key = (mlflow_module().get_tracking_uri(), exp.experiment_id)
    if key in _KIND_CHECKED:
        return
    if (exp.tags or {}).get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1] and exp.lifecycle_stage == "active":
        try:
            mlflow_module().MlflowClient().set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
        except Exception:  # noqa: BLE001 - a store that refuses writes (read-only) keeps its experiments as they are
            return
    _KIND_CHECKED.add(key)


def experiment_url(experiment: str, ui: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI address of an experiment's runs table (``experiment``: a name or an id) in the
    "Machine learning" view: ``<ui>/#/experiments/<id>/runs?workflowType=machine_learning`` (MLflow 3's
    UI otherwise opens the GenAI view, traces, until its sidebar switch is turned)."""
    if str(experiment).isdigit():
        eid = str(experiment)
    else:
        try:
            exp = mlflow_module().get_experiment_by_name(experiment)
        except Exception:  # noqa: BLE001 - an address is a courtesy: a store that cannot answer gives the UI's root
            exp = None
        if exp is None:
            return f"{ui.rstrip('/')}/#/?workflowType=machine_learning"
        eid = exp.experiment_id
    return f"{ui.rstrip('/')}/#/experiments/{eid}/runs?workflowType=machine_learning"


def ui_base(tracking_uri: str | None = None) -> str:
    """The MLflow UI's address for a tracking URI: the server itself for ``http(s)://`` (its UI is served
    there), else ``http://127.0.0.1:5000`` (what ``mlflow ui`` / ``make ui`` serves a local store on)."""
    uri = str(tracking_uri or "")
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return "http://127.0.0.1:5000"


def run_url(run_id: str, tracking_uri: str | None = None, experiment: str | None = None) -> str:
    """The MLflow UI address of one run's page in the "Model training" view:
    ``<ui>/#/experiments/<id>/runs/<run_id>?workflowType=machine_learning`` (without the query MLflow 3
    shows the GenAI sidebar). ``experiment``: the run's experiment id, else asked of the store; "" for no
    run (an unlogged run on a read-only store) or a store that cannot say."""
    if not run_id:
        return ""
    eid = str(experiment) if experiment and str(experiment).isdigit() else None
    if eid is None:
        try:
            eid = mlflow_module().get_run(run_id).info.experiment_id
        except Exception:  # noqa: BLE001 - an address is a courtesy: no address rather than a fault
            return ""
    return f"{ui_base(tracking_uri)}/#/experiments/{eid}/runs/{run_id}?workflowType=machine_learning"


#: Commands whose run only records what they did: on a read-only store they work without logging it.
RECORD_ONLY_KINDS: frozenset[str] = frozenset({"screen"})


def check_store(tracking_uri: str, command: str) -> None:
    """Before a command does any work: one-line :class:`TrackingError` when its store cannot serve it: no
    server answers (:func:`check_server`), or a SQLite store is damaged, cannot be created, or is read-only
    while ``carb-<command>`` writes to it (all but :data:`RECORD_ONLY_KINDS`). Reads only; seconds."""
    if tracking_uri.startswith(("http://", "https://")):
        refuse_password_in_uri("tracking.uri", tracking_uri)
        configure(tracking_uri)   # check_server first: no answer is one line in seconds
        check_access(tracking_uri, command, record_only=command in RECORD_ONLY_KINDS)
        return
    if not tracking_uri.startswith("sqlite:///"):
        return
    db = Path(tracking_uri[len("sqlite:///"):]).expanduser().absolute()
    why = sqlite_problem(db, writes=command not in RECORD_ONLY_KINDS)
    if why is None:
        return
    if "damaged" in why:
        fix = f"move it aside (mv {db} {db}.damaged) and run again to start a new store, or restore a backup"
    elif "does not exist" in why:
        fix = "set CARB_HOME=<a writable folder> or tracking.uri=sqlite:///<a writable folder>/mlflow.db"
    elif "read-only" in why:
        fix = f"carb-{command} writes to it: use a writable store (tracking.uri=...) or a copy of this one"
    else:
        fix = "check the file and its folder (permissions, another file system), or use another store"
    raise TrackingError(f"tracking.uri={tracking_uri}: the store cannot be used: {why}; nothing was done: {fix}")


def check_access(uri: str, command: str, record_only: bool) -> None:
    """Before any work, on a tracking server at ``uri`` (configured): the credentials are accepted and the
    user may write the runs ``carb-<command>`` logs. Raises a one-line :class:`carb.errors.TrackingError` on
    a 401, and on a 403 unless ``record_only`` (then the run goes unlogged: :func:`carb.tracking.auth.read_only_for_user`)."""
    kinds = [k for k in (command, *COMMAND_EXPERIMENTS.get(command, ())) if k in EXPERIMENTS]
    mlflow = mlflow_module()
    for kind in kinds:
        name = EXPERIMENTS[kind]
        try:
            exp = mlflow.get_experiment_by_name(name)
        except Exception as e:  # noqa: BLE001 - only a 401 / 403 is translated here
            line = auth_failure_line(e, uri, f"READ on experiment {name}")
            if line is None:
                raise
            raise TrackingError(line) from None
        try:
            if exp is None:
                experiment_id(name)   # created now, as the command's run would create it
            else:                     # the kind tag, set to the value it has: a write needing what runs/create needs
                mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND[0],
                                                         (exp.tags or {}).get(EXPERIMENT_KIND[0], EXPERIMENT_KIND[1]))
        except Exception as e:  # noqa: BLE001
            status = auth_status(e)
            if status is None:
                raise
            if status == 403 and record_only:
                mark_read_only(uri, f"user {user() or '(none)'!r} may only read experiment {name} (HTTP 403)")
                continue
            raise TrackingError(auth_failure_line(e, uri, f"EDIT on experiment {name}")) from None


def refuse_password_in_uri(field: str, uri: str) -> None:
    """One-line :class:`TrackingError` when ``uri`` (the value of ``field``) carries a password
    (``scheme://user:password@host``): it would reach the run's logged config. Credentials come from the
    environment: ``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` for MLflow, ``PGPASSWORD`` or
    ``~/.pgpass`` for PostgreSQL."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(str(uri))
        password = parts.password
    except ValueError:
        return
    if password:
        where = ("MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD" if parts.scheme.startswith("http")
                 else "PGPASSWORD or ~/.pgpass (the database's own client settings)")
        safe = f"{parts.scheme}://{parts.username}@{parts.hostname}" + (f":{parts.port}" if parts.port else "") + parts.path
        raise TrackingError(f"{field}: the URL carries a password ({safe} with ':***'); it would be logged with the "
                            f"run's config: drop it from the URL and give it through {where} in the environment")


def store_read_only(tracking_uri: str) -> bool:
    """True when ``tracking_uri`` is an existing SQLite store this process may not write (the file or
    its folder, where SQLite puts its journal, is read-only), or a tracking server on which this process's
    user may only read (:func:`carb.tracking.auth.read_only_for_user`)."""
    if tracking_uri.startswith(("http://", "https://")):
        return read_only_for_user(tracking_uri) is not None
    if not tracking_uri.startswith("sqlite:///"):
        return False
    db = Path(tracking_uri[len("sqlite:///"):]).resolve()
    return db.exists() and not (os.access(db, os.W_OK) and os.access(db.parent, os.W_OK))


def git_commit() -> str:
    """Short git commit of the working tree, or 'unknown'."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=5, cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"
