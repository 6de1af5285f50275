"""The model registry: logging a fitted cascade as an MLflow model, registering its versions, resolving and
setting aliases, and loading ``models:/<name>@<alias>`` URIs back (also from a read-only store)."""
from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from carb.errors import ModelError
from carb.tracking.runs import active_run_id
from carb.tracking.store import configure, configured_uri, mlflow_module

def _pip_requirements() -> list[str]:
    """Pinned versions of the libraries a loaded cascade needs (the model's ``requirements.txt``)."""
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


def warm_model_logging() -> None:
    """Do ahead what the first :func:`log_cascade` of a process spends on set-up, not on the model (a
    command calls it while other work runs; the logged model is the same): import MLflow's sklearn flavour
    and its signature inference, and build MLflow's map of the installed packages that it checks the
    model's requirements against (about 0.5 s; MLflow keeps it for the process, a private function: skipped
    when it is not there)."""
    mlflow = mlflow_module()
    from mlflow.models import infer_signature  # noqa: F401

    mlflow.sklearn.log_model   # noqa: B018 - the lazily loaded flavour module is imported here
    with contextlib.suppress(Exception):
        from mlflow.utils import requirements_utils

        requirements_utils._init_modules_to_packages_map()


def log_cascade(model, input_example, registered_name: str | None = None,
                metadata: Mapping[str, Any] | None = None, description: str | None = None,
                model_description: str | None = None, version_tags: Mapping[str, Any] | None = None,
                inputs: Sequence[tuple[str, str, bool]] | None = None) -> dict[str, Any]:
    """Log a fitted cascade as an MLflow (sklearn-flavour) model in the active run, with signature
    and input example, and register it as a new version of ``registered_name`` (no alias). The commands
    log it wrapped (:class:`carb.analysis.predictor.ServedModel`, with a knob ``input_example``), so the
    signature and MLflow's pyfunc take knobs or model names; :func:`load_cascade` unwraps it.

    The version gets ``metadata`` and ``version_tags`` as tags, ``description`` as its description and
    the active run as its source run; ``model_description`` becomes the registered model's description
    (set on every registration, so it describes the newest version's device). Registration prints
    nothing (MLflow's own "Registered model ... already exists" lines are not printed; the command
    says what it registered).

    ``inputs``: the signature's input columns ``[(column, type, required)]`` (type an MLflow column type,
    ``string``, ``long``, ``double``, ``boolean``, or ``any``;
    :func:`carb.analysis.predictor.served_inputs`), where some are optional or null on some rows; None: the
    input schema MLflow infers from ``input_example`` (every column required).

    Returns ``{"model_uri", "registered_name", "version"}`` (version None if not registered)."""
    mlflow = mlflow_module()
    from mlflow.models import ModelSignature, infer_signature

    signature = infer_signature(input_example, _plain_frame(model.predict(input_example)))
    if inputs is not None:
        signature = ModelSignature(inputs=input_schema(inputs), outputs=signature.outputs)
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


def input_schema(inputs: Sequence[tuple[str, str, bool]]) -> Any:
    """MLflow's input ``Schema`` of the columns ``inputs`` (``[(column, type, required)]``, type ``any`` for a
    column of any values, MLflow's ``AnyType``). Raises :class:`ModelError` for an unknown type."""
    from mlflow.types import ColSpec, DataType, Schema
    from mlflow.types.schema import AnyType

    specs = []
    for name, typ, required in inputs:
        if typ != "any" and typ not in DataType.__members__:
            raise ModelError(f"signature column {name!r}: type {typ!r} is not an MLflow column type")
        specs.append(ColSpec(AnyType() if typ == "any" else typ, name, required=bool(required)))
    return Schema(specs)


def _plain_frame(frame: Any) -> Any:
    """A prediction frame with object columns of text as ``str`` (MLflow's schema inference takes no mixed
    object columns; a served model's ``outside`` reasons are text)."""
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        return frame
    out = frame.copy()
    for c in out.columns:
        if out[c].dtype == object or pd.api.types.is_string_dtype(out[c].dtype):   # a combined model: NaN names
            out[c] = out[c].map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else v)
    return out


def register_version(name: str, model_uri: str, model_id: str | None, run_id: str | None,
                     tags: Mapping[str, str], description: str | None = None,
                     model_description: str | None = None) -> str:
    """Create (if needed) the registered model ``name`` and a new version of it from a logged model,
    linked to its source run and logged model, silently. Returns the version number."""
    mlflow = mlflow_module()
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
    client = mlflow_module().MlflowClient()
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

    mlflow = mlflow_module()
    if tracking_uri:
        configure(tracking_uri)
    elif configured_uri() is None and not os.environ.get("MLFLOW_TRACKING_URI"):
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
    if getattr(type(model), "WRAPS_CASCADE", False) and getattr(model, "cascade", None) is not None:
        model = model.cascade   # logged as carb.analysis.predictor.ServedModel: CARB works on the cascade
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
    mlflow = mlflow_module()
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
    version (``tags``: the run's own tags, e.g. ``dataset_digest`` and ``split``). A metric logged under a
    prefix is there under both names (:func:`with_flat_names`: ``val/energy_J_mae`` and ``val_energy_J_mae``),
    so versions logged before and after the prefixes compare on one name."""
    mlflow = mlflow_module()
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
        out.append({"version": str(mv.version), "run_id": mv.run_id, "metrics": with_flat_names(metrics),
                    "aliases": aliases, "tags": {k: v for k, v in dict(tags).items() if not k.startswith("mlflow.")}})
    return sorted(out, key=lambda r: int(r["version"]))


def with_flat_names(metrics: Mapping[str, float]) -> dict[str, float]:
    """``metrics`` plus, for each name grouped by a prefix, its flat name: ``<group>/<rest>`` ->
    ``<group>_<rest>`` (``val/energy_J_mae`` -> ``val_energy_J_mae``), ``time/<rest>`` -> ``<rest>``; a flat
    name already there is kept."""
    out = dict(metrics)
    for k, v in metrics.items():
        group, sep, rest = k.partition("/")
        if sep:
            out.setdefault(rest if group == "time" else f"{group}_{rest}", v)
    return out


def get_alias(name: str, alias: str) -> str | None:
    """Version number the alias points to, or None."""
    client = mlflow_module().MlflowClient()
    try:
        return str(client.get_model_version_by_alias(name, alias).version)
    except Exception:
        return None


def set_alias(name: str, alias: str, version: str) -> None:
    """Point ``name@alias`` at ``version``."""
    mlflow_module().MlflowClient().set_registered_model_alias(name, alias, str(version))


def registered_models() -> list[str]:
    """Names of all registered models in the store."""
    client = mlflow_module().MlflowClient()
    return sorted(m.name for m in client.search_registered_models())
