"""``carb-train``: fit the CARB cascade on one device's dataset, evaluate it beside the baselines, and
log the run to MLflow (experiment ``carb-train``) with the fitted model registered as a new version of
``carb-<device-slug>``.

    carb-train                                   # shipped CPU reference dataset, model=carb, features=full
    carb-train data.path=<file|folder> model=carb_fast features=arch_only
    carb-train -m features=full,no_util,arch_only       # the ablation; or: carb-train +experiment=ablation
    carb-train +experiment=lobo                          # leave-one-batch-tier-out at bs <= 4, 8, 16

What a run records (:mod:`carb.commands.runinfo`): the params a person compares (at most 60) and the whole
config as ``config.yaml``; tags ``device``, ``device_slug``, ``device_id``, ``feature_set``, ``preset``,
``dataset_digest``, ``git_commit``; headline metrics grouped by prefix (``test/``, ``val/``, ``vs_b1/``, ``lobo/``,
``extrap/``, ``interval/``, ``budget/``, ``time/``) and every metric of :mod:`carb.analysis.evaluate` in the
table ``metrics.json``; figures under ``figures/`` (``extrapolation.png``: each extrapolation split's
predictions beside B1's); ``cascade_summary.json`` (log-space choice,
blend weights, corrector report) and ``importances.json``; the dataset as a run input; the model.

"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from carb.analysis.training import (  # noqa: F401 - save_fit, interval_summary: re-exported for their callers
    LOG_WEIGHT,
    Hooks,
    deferred_parts,
    fit_and_evaluate,
    interval_summary,
    load_fit,
    save_fit,
    split_frames,
    start_thread,
    train_plan,
)
from carb.commands.cli import hydra_command, hydra_run_dir, sweep_suffix, sweep_tags, to_dict, wrap_line
from carb.commands.progress import Progress
from carb.design.identity import model_input_kind
from carb.commands.runinfo import headline_metrics, metric_rows, split_metrics, train_params
from carb.data.io import load_training_frame, resolve_path
from carb.data.schema import TARGETS, device_slug, model_name
from carb.data.split import split_dataset
from carb.errors import CarbError, ConfigError, TrackingError
from carb.model.presets import build_cascade, resolve_auto


def served_model(cascade: Any, rows: Any, fallback: Any = None) -> tuple[Any, Any, Any]:
    """``(what to log, its input example, its signature's input columns)``, the three arguments every command
    gives :func:`carb.tracking.log_cascade`: the cascade wrapped to take knobs or model names
    (:class:`carb.analysis.predictor.ServedModel`, five of ``rows``' knob rows as the example; a ``stages``
    column that names no valid network, as synthetic rows may carry, left out) with
    :func:`carb.analysis.predictor.served_inputs` (the columns it reads, those with a default optional), or,
    where the knobs of the rows cannot be predicted from (imported rows without valid knobs, a transferred
    model the knobs do not serve), the cascade itself on ``fallback`` (default: ``rows``' feature columns)
    and None (MLflow infers the signature), as before."""
    from carb.analysis.predictor import ServedModel, knob_example, served_inputs
    from carb.design.identity import STAGES

    served = ServedModel(cascade, quiet=True)   # its other-CPU note is the trained model's, said where it is used
    try:
        example = knob_example(cascade, rows)
        attempts = [example, example.drop(columns=[STAGES], errors="ignore")]
    except Exception:  # noqa: BLE001 - rows without knob columns: logged as before
        attempts = []
    for attempt in attempts:
        try:
            out = served.predict(attempt)
            if len(out) and out.filter(like="pred_").notna().any().any():
                return served, attempt, served_inputs(cascade)
        except Exception:  # noqa: BLE001 - whatever fails here, the model is logged as it was before
            continue
    if fallback is not None:
        return cascade, fallback, None
    return cascade, rows[cascade.input_columns_].head(5).reset_index(drop=True), None


def should_register(register: Any) -> bool:
    """``register``: true/false as given; ``auto`` registers a single run, not a job of a multirun
    sweep (where the versions would take turns as champion on noise)."""
    if isinstance(register, bool):
        return register
    if register != "auto":
        raise ConfigError(f"register: {register!r} is not allowed; allowed: ['auto', true, false]")
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        return not (HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN)
    except ImportError:
        return True


def run_train(cfg: Any, defer: bool = False) -> dict[str, Any]:
    """Train, evaluate, save the fit locally, log and register. Returns ``{"metrics": {...},
    "registered_name", "version", "run_id", "model_uri", "run_name", "targets", "dropped_targets",
    "table", "preset", "fit_folder"}``. With ``log_only=<folder>`` it logs a saved fit instead. The steps
    are the library's (:mod:`carb.analysis.training`); this function reads the config and logs.

    ``defer``: leave out what neither screening nor ``carb-promote`` reads (the leave-one-batch-tier-out
    refit and the figures) and return it as ``"deferred"``; :func:`finish_deferred` runs it later and logs
    it to the same run (``carb-quickstart`` shows its shortlist first). Screening needs the rest: the
    extrapolation splits make the outside-domain intervals, the new-architecture folds the unseen-architecture
    ones; promote compares ``val_*`` metrics of the main fit."""
    from carb.commands.checks import check_config

    check_config('train', cfg)
    if cfg.get("log_only"):
        folder = Path(str(cfg.log_only))
        fit = load_fit(folder)
        print(f"carb-train: logging the fit saved in {folder} (no fitting)")
        return log_fit(fit, cfg, folder)
    data_path = str(cfg.data.get("path") or "reference")
    if zoo_estimator(cfg) == "zoo_latency":   # timm's GPU files: ZooLatencyModel (carb.model.zoo_predictor)
        return run_zoo_latency(cfg)
    full, device = load_training_frame(data_path, cfg.data.get("device"))
    seed, fractions = int(cfg.split.seed), tuple(float(f) for f in cfg.split.get("fractions", (0.7, 0.15, 0.15)))
    parts = split_frames(full, seed, fractions)
    model_cfg, preset = resolve_auto(to_dict(cfg.model), len(parts[0]))
    tune_tags = apply_tuned(model_cfg)
    cascade = build_cascade(model_cfg, to_dict(cfg.features), to_dict(cfg.prior))
    targets = [t for t in TARGETS if t in full.columns]
    ev, later = evaluate_settings(cfg, defer)
    n_measured = sum(bool(parts[0][t].notna().any()) for t in targets)
    prog = Progress.from_cfg("carb-train", train_plan(ev, full, n_measured, len(parts[2])), cfg, throttle=False)
    tags: dict[str, str] = {}
    with fit_and_evaluate(cascade, parts, full, targets, ev, seed, fractions, prog, say,
                          command_hooks(cfg, parts[0], tags)) as trained:
        fit = {"cascade": cascade, "metrics": trained.metrics, "extras": trained.extras, "full": full,
               "test": parts[3], "sizes": [len(p) for p in parts], "device": device, "data_path": data_path,
               "preset": preset, "split": f"seed={seed},fractions={','.join(f'{f:g}' for f in fractions)}",
               "config": to_dict(cfg), "sweep": sweep_tags()}
        fit.update(fit_labels(cfg, fit, {**tags, **tune_tags}))
        if trained.figure_files:   # workers draw them while this process logs the rest
            fit["figure_files"] = trained.figure_files
        folder = save_fit_or_warn(fit, fit_folder(cfg))
        prog.begin("logging to MLflow" + (" and registering" if fit["reg_name"] else ""), LOG_WEIGHT)
        out = log_fit(fit, cfg, folder, ev)
    prog.finish("fitted, evaluated and logged" + (f" ({', '.join(later)} to follow)" if later else ""))
    if later:
        fit.pop("figure_files", None)
        out["deferred"] = {"fit": fit, "cfg": cfg, "ev": to_dict(cfg.evaluate), "parts": list(later),
                           "run_id": out["run_id"]}
    return out


def zoo_estimator(cfg: Any) -> str:
    """What ``carb-train`` fits: ``cascade``, or for timm's file (``data.path=timm-zoo``) the estimator
    ``data.estimator`` names (:func:`carb.model.zoo_predictor.estimator_of`; ``auto``: ``zoo_latency`` on
    every file, GPUs and CPU). A bad value: one line naming the key, exit 2."""
    from carb.data.io import TIMM_ZOO
    from carb.data.importers.timm_zoo import FILE_DEVICES
    from carb.model.zoo_predictor import estimator_of

    value = cfg.data.get("estimator")
    if str(cfg.data.get("path") or "") != TIMM_ZOO:
        if value not in (None, "auto", "cascade"):
            raise ConfigError(f"data.estimator: {value!r} is only for data=timm_zoo (timm's files); allowed here: "
                              "auto, cascade")
        return "cascade"
    kinds = {name: kind for name, kind in FILE_DEVICES.values()}
    return estimator_of(value, kinds.get(str(cfg.data.get("device")), "gpu"))


def zoo_latency_conf() -> dict[str, Any]:
    """``conf/zoo_latency/default.yaml`` checked against its schema (:class:`carb.commands.schema.groups.ZooLatency`;
    a bad key or value: one :class:`ConfigError` line)."""
    import yaml
    from pydantic import ValidationError

    from carb.commands.schema.errors import error_line
    from carb.commands.schema.groups import ZooLatency
    from carb.resources import CONF_DIR

    conf = yaml.safe_load((CONF_DIR / "zoo_latency" / "default.yaml").read_text())
    try:
        ZooLatency.model_validate(conf)
    except ValidationError as e:
        raise ConfigError(f"conf/zoo_latency/default.yaml: {error_line(ZooLatency, conf, e.errors()[0])}") from None
    return conf


def zoo_digest(rows: Any) -> str:
    """The digest (:func:`carb.tracking.dataset_digest`) of the timm rows a zoo latency model was fitted and
    evaluated on (network, input size, batch, precision, latency), the ``dataset_digest`` tag ``carb-promote``
    compares versions on."""
    from carb import tracking

    cols = ["model", "input_size", "batch_size", "precision", "latency_ms"]
    return tracking.dataset_digest(rows[cols].reset_index(drop=True), "timm-zoo")


def run_zoo_latency(cfg: Any) -> dict[str, Any]:
    """``carb-train data=timm_zoo`` with ``ZooLatencyModel`` (:func:`carb.analysis.training.fit_zoo_latency`):
    fit, the family-grouped intervals, log the run and register the model as the cascade would be
    (``carb-<device>-timm-zoo``), so ``carb.load_model`` and ``carb-screen space=zoo`` take it. Returns what
    :func:`run_train` returns (``table`` the report's lines)."""
    import pandas as pd

    from carb import tracking
    from carb.analysis.training import fit_zoo_latency

    device = cfg.data.get("device")
    if not device:
        from carb.data.importers.timm_zoo import bench_devices, load_zoo_bench

        devices = ", ".join(bench_devices(load_zoo_bench()))
        raise ConfigError(f"data.device: timm's file needs one device; allowed: {devices}")
    coverage = float(cfg.evaluate.get("interval_coverage", 0.9))
    folds = int(cfg.data.get("interval_folds") or 5)
    model, rows, metrics = fit_zoo_latency(str(device), zoo_latency_conf(), coverage, folds, int(cfg.split.seed), say)
    slug = device_slug(model.device_name_)
    one = pd.DataFrame({"device_name": [model.device_name_], "device_id": [model.device_id_], "model_name": ["x"]})
    reg_name = model_name(one) if should_register(cfg.get("register", "auto")) else None
    run_name = cfg.get("run_name") or sweep_suffix("/".join([slug, "zoo_latency"] + (
        [str(cfg.run_suffix)] if cfg.get("run_suffix") else [])))
    tags = {"device": model.device_name_, "device_slug": slug, "device_id": model.device_id_,
            "estimator": "zoo_latency", "dataset_digest": zoo_digest(rows),
            "split": f"family_folds{folds}_seed{int(cfg.split.seed)}",
            "feature_set": "zoo_latency", "preset": "zoo_latency", "targets": "latency_ms", "dataset": "timm-zoo"}
    config = to_dict(cfg)
    with tracking.start_run("train", run_name, tracking_uri=cfg.tracking.uri, tags=tags, sweep=sweep_tags(),
                            artifact_root=cfg.tracking.get("artifact_root")) as run_id:
        tracking.log_config(config, train_params(config, {}, sweep_tags()))
        tracking.log_metrics(metrics)
        tracking.log_dict(model.summary(), "zoo_latency_summary.json")
        served, example, inputs = served_model(model, rows)
        meta = {"device": model.device_name_, "device_id": model.device_id_, "estimator": "zoo_latency",
                "targets": "latency_ms", "interval_families": str(model.interval_["families"])}
        info = tracking.log_cascade(served, example, registered_name=reg_name, metadata=meta, inputs=inputs)
    iv = model.interval_
    lines = [f"carb-train: {run_name}  (ZooLatencyModel, {len(rows)} rows of timm's file, "
             f"device {model.device_name_!r})",
             f"carb-train: families held out ({iv['folds']} folds of whole families): MAPE {iv['heldout_mape']:.2f} %, "
             f"{iv['families_within20']}/{iv['heldout_families']} families within 20 % "
             f"({iv['families5_within20']}/{iv['heldout_families5']} of those with at least 5 models)",
             f"carb-train: {100 * coverage:.0f} % intervals: x{math.exp(iv['lower']):.3f} to "
             f"x{math.exp(iv['upper']):.3f} "
             f"of the prediction (split-conformal on {iv['rows']} held-out rows of {iv['families']} families); "
             f"each fold's rows inside the other folds' band: "
             + ", ".join(f"{c:.3f}" for c in iv["fold_coverage"])]
    if cfg.get("print_table", True):
        print("\n".join(wrap_line(line) for line in lines))
        if info.get("version"):
            print(wrap_line(f"carb-train: registered {reg_name} version {info['version']} (run {run_id})"))
            print("\n".join(train_next(reg_name, info["version"], "zoo")))
    return {"metrics": metrics, "registered_name": reg_name, "version": info.get("version"), "run_id": run_id,
            "model_uri": info.get("model_uri"), "run_name": run_name, "targets": ["latency_ms"],
            "dropped_targets": {}, "table": "\n".join(lines), "preset": "zoo_latency", "fit_folder": None}


def evaluate_settings(cfg: Any, defer: bool) -> tuple[dict[str, Any], dict[str, bool]]:
    """``(evaluate settings, deferred parts)``: with ``defer``, the parts :func:`deferred_parts` names are
    switched off here (leave-one-batch-tier-out, figures) and returned to run later."""
    ev = to_dict(cfg.evaluate)
    later = deferred_parts(ev) if defer else {}
    if later:
        ev = {**ev, "lobo": {**dict(ev.get("lobo") or {}), "enabled": False}, "figures": False}
    return ev, later


def command_hooks(cfg: Any, train: Any, tags: dict[str, str]) -> Hooks:
    """What ``carb-train`` adds around the library's steps (:class:`carb.analysis.training.Hooks`): after the
    fit, the feature-set identity line and tags (into ``tags``); MLflow imported before the workers start;
    the store set up in a thread while they refit; the figures drawn by the workers (:mod:`carb.plots.tasks`)."""
    from carb.plots.tasks import first_figures, split_figures

    store = (str(cfg.tracking.uri), cfg.tracking.get("artifact_root"))
    return Hooks(fitted=lambda cascade: tags.update(feature_identity(cascade, train)), parallel=import_mlflow,
                 waiting=lambda: start_thread(prepare_store, *store), figures=(first_figures, split_figures))


def finish_deferred(deferred: dict[str, Any]) -> dict[str, float]:
    """Run what :func:`run_train` deferred (the leave-one-batch-tier-out refit, the figures) and log it to
    the training run; returns the metrics it added. The registered version is not changed: neither
    screening nor promote reads these."""
    from carb import tracking
    from carb.analysis.evaluate import lobo_or_skip
    from carb.analysis.refits import refit_model

    fit, cfg, ev = deferred["fit"], deferred["cfg"], deferred["ev"]
    cascade = fit["cascade"]
    added: dict[str, float] = {}
    if "leave-one-batch-tier-out" in deferred["parts"]:
        import warnings

        t0 = time.perf_counter()
        with warnings.catch_warnings():   # the main fit said what it drops
            warnings.simplefilter("ignore", UserWarning)
            added = lobo_or_skip(refit_model(cascade, ev.get("refits")), fit["full"], list(cascade.targets_),
                                 int((ev.get("lobo") or {}).get("max_batch", 8)), say)
        if added:
            added["lobo_fit_s"] = time.perf_counter() - t0
        fit["metrics"].update(added)
    if not deferred.get("run_id"):
        return added
    with tracking.start_run("train", fit["run_name"], tracking_uri=cfg.tracking.uri, run_id=deferred["run_id"]):
        numbers, counts, _ = split_metrics(added)
        if counts:
            tracking.log_params(counts)
        targets = list(cascade.targets_)
        tracking.log_metrics(headline_metrics(numbers, targets))       # lobo/<t>_r2, lobo/<t>_mape
        if numbers:   # the run's one metric table, now with the deferred rows
            tracking.log_table(metric_rows(split_metrics(fit["metrics"])[0], targets), "metrics.json")
        if "figures" in deferred["parts"]:
            log_figures(fit)
    return added


def import_mlflow() -> None:
    """Import MLflow here, before the main fit: :func:`prepare_store` later runs in a thread beside this
    one, and the two must never import the same modules at once (the fit imports its boosters lazily)."""
    from carb.tracking.store import mlflow_module

    try:
        mlflow_module()
    except Exception:  # noqa: BLE001 - the logging after the fits reports it in one line
        return


def prepare_store(uri: str, artifact_root: str | None = None) -> str:
    """Import MLflow (when :func:`import_mlflow` did not), create (or upgrade) the tracking store and the
    ``carb-train`` experiment, and set MLflow's model logging up (:func:`carb.tracking.warm_model_logging`),
    in a thread while the workers refit, so that logging after them starts on a ready store (MLflow's import
    and a fresh store's set-up were about a tenth of ``carb-train``). Started once this process only waits:
    a fresh store's migrations release the GIL about 1,200 times (SQLite syncs) and each time waited for a
    busy main thread. Returns "" or why not: then the logging meets the problem itself and says it in one
    line."""
    from carb.tracking.store import EXPERIMENTS, configure, experiment_id, store_read_only

    try:
        if store_read_only(uri):
            return "read-only store"
        configure(uri, artifact_root)
        experiment_id(EXPERIMENTS.get("train", "carb-train"))
        from carb.tracking import warm_model_logging

        warm_model_logging()
    except Exception as e:  # noqa: BLE001 - the logging after the fits reports store faults in one line
        return f"{type(e).__name__}: {e}"
    return ""


def apply_tuned(model_cfg: dict[str, Any]) -> dict[str, str]:
    """With ``model.tuned_from`` (``{"study", "storage"}``: an Optuna study of ``carb-tune``), merge the
    study's best per-target parameters into ``model_cfg["per_target"]`` (in place; ``tuned_from`` is
    removed) and return the run's tags naming the study; ``{}`` without it."""
    tuned = model_cfg.pop("tuned_from", None)
    if not tuned:
        return {}
    import json

    from carb.model.tuning import tuned_per_target

    per_target, prov = tuned_per_target(str(tuned["study"]), str(tuned["storage"]))
    model_cfg["per_target"] = {**dict(model_cfg.get("per_target") or {}), **per_target}
    print(wrap_line(f"carb-train: using the best parameters of study {tuned['study']!r} (trials {prov})"))
    return {"tuned_study": str(tuned["study"]), "tuned_storage": str(tuned["storage"]),
            "tuned_trials": json.dumps(prov)}


def say(line: str) -> None:
    """One line of the run's report (an evaluation step skipped, how intervals were calibrated)."""
    print(wrap_line(f"carb-train: {line}"))


def fit_labels(cfg: Any, fit: dict[str, Any], extra_tags: dict[str, str]) -> dict[str, Any]:
    """``run_name``, ``reg_name`` (the device's registered model, or None when this run does not
    register) and the run's ``tags`` of a fit."""
    cascade, device, preset = fit["cascade"], fit["device"], fit["preset"]
    slug = device_slug(device)
    run_name = cfg.get("run_name") or sweep_suffix("/".join(
        [slug, cascade.feature_set_, preset] + ([str(cfg.run_suffix)] if cfg.get("run_suffix") else [])))
    reg_name = model_name(fit["full"]) if should_register(cfg.get("register", "auto")) else None
    tags = {"device": device, "device_slug": slug, "device_id": cascade.device_id_ or "unknown",
            "feature_set": cascade.feature_set_, "preset": preset,
            "targets": ",".join(cascade.targets_), "dataset": fit["data_path"], **extra_tags}
    return {"run_name": run_name, "reg_name": reg_name, "tags": tags}


def feature_identity(cascade: Any, train: Any) -> dict[str, str]:
    """Tags of the columns the fit used (``feature_columns``) and of the other shipped feature sets that
    collapse to the same columns on this data (``feature_set_same_as``); prints
    ``feature sets X and Y are identical on this data: ...`` when there are any (an ablation on data
    without telemetry compares one model with itself)."""
    from carb.commands.runinfo import identical_feature_sets, identity_line

    used = list(cascade.feature_names_)
    same = identical_feature_sets(train, cascade.feature_set_, used)
    if same:
        print(wrap_line(f"carb-train: {identity_line(cascade.feature_set_, same, used, list(cascade.dropped_features_))}"))
    return {"feature_columns": ",".join(used), "feature_set_same_as": ",".join(same) or "none"}


def fit_folder(cfg: Any) -> Path:
    """Where a fit is saved before anything is logged: ``<run folder>/fit`` under Hydra, else
    ``<paths.output_dir>/train/fit-<UTC time>``."""
    from datetime import datetime, timezone

    run_dir = hydra_run_dir()
    if run_dir is not None:
        return run_dir / "fit"
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d_%H-%M-%S-%f")
    return Path(str(cfg.paths.output_dir)) / "train" / f"fit-{stamp}"


def save_fit_or_warn(fit: dict[str, Any], folder: Path) -> Path | None:
    """:func:`save_fit`, naming the folder as this run's finished work; when the disk refuses (full,
    read-only) a one-line warning and None: the fit is still logged to the store, which may have room."""
    import sys

    from carb.commands.cli import finished_work

    try:
        save_fit(fit, folder)
    except OSError as e:
        print(f"warning: could not save the fit in {folder} ({e.strerror or e}); logging it to the tracking "
              f"store only", file=sys.stderr)
        return None
    finished_work(folder, f"carb-train log_only={folder}")
    return folder


def log_figures(fit: dict[str, Any]) -> None:
    """Log a fit's figures (:func:`carb.plots.train.train_figures`) to the active run: the files a worker
    drew (``fit["figure_files"]``, :func:`render_figures`) when there are, else drawn here."""
    from carb import tracking

    pending = fit.get("figure_files")
    if pending is not None:   # each folder the workers drew into (figures/), in one upload
        folders = dict.fromkeys(Path(path).parent for job in pending for path in job.result().result)
        for folder in folders:
            tracking.log_artifact(folder, folder.name)
        return
    from carb.plots.train import train_figures

    extras = fit["extras"]
    for name, fig in train_figures(fit["test"], extras["pred"], extras["importances"], fit["cascade"].targets_,
                                   extras.get("extrapolation"), extras.get("extrapolation_predictions")).items():
        tracking.log_figure(fig, name)


def log_fit(fit: dict[str, Any], cfg: Any, folder: Path | None, ev: dict[str, Any] | None = None) -> dict[str, Any]:
    """Log a fit to MLflow, register it, print the tables. A tracking fault is one line that says where
    the fit is saved and how to log it later. ``ev``: the ``evaluate`` settings (default ``cfg.evaluate``)."""
    from carb import tracking
    from carb.analysis.evaluate import results_table

    cascade, metrics, extras, test = fit["cascade"], fit["metrics"], fit["extras"], fit["test"]
    ev = to_dict(cfg.evaluate) if ev is None else ev
    try:
        with tracking.start_run("train", fit["run_name"], tracking_uri=cfg.tracking.uri, tags=fit["tags"],
                                sweep=fit.get("sweep") or {}, artifact_root=cfg.tracking.get("artifact_root")) as run_id:
            numbers, counts, flags = split_metrics(metrics)
            refits = refit_settings(fit["config"])[1]   # how the refits ran: one tag, not four params
            tracking.log_config(fit["config"], train_params(fit["config"], counts, fit.get("sweep")))
            digest = log_inputs(fit)
            tracking.set_tags({"dataset_digest": digest, "split": fit["split"], "fit_folder": str(folder or "not saved"),
                               "evaluate_refits": refits, **flags})
            if getattr(cascade, "intervals_", None):
                tracking.log_dict({k: (interval_summary(v) if isinstance(v, dict) else v)
                                   for k, v in cascade.intervals_.items()}, "intervals.json")
            if getattr(cascade, "domain_", None):
                tracking.log_dict(cascade.domain_, "domain.json")
            tracking.log_metrics(headline_metrics(numbers, cascade.targets_))
            tracking.log_table(metric_rows(numbers, cascade.targets_), "metrics.json")
            tracking.log_dict(cascade.summary(), "cascade_summary.json")
            if extras.get("extrapolation") is not None:
                tracking.log_dict({"rows": extras["extrapolation"].to_dict("records")}, "extrapolation.json")
            tracking.log_dict({t: [[n, v] for n, v in items] for t, items in extras["importances"].items()},
                              "importances.json")
            if ev.get("figures", True):
                log_figures(fit)
            served, example, inputs = served_model(cascade, test)
            meta = {"device": fit["device"], "device_id": cascade.device_id_ or "unknown",
                    "device_fingerprint": cascade.device_fingerprint_ or "unknown",
                    "feature_set": cascade.feature_set_, "preset": fit["preset"],
                    "targets": ",".join(cascade.targets_), "dataset_digest": digest}
            descr = descriptions(fit, metrics, digest, run_id) if fit["reg_name"] else {}
            info = tracking.log_cascade(served, example, registered_name=fit["reg_name"], metadata=meta,
                                        inputs=inputs, **descr)
    except CarbError:
        raise
    except Exception as e:  # noqa: BLE001 - a store fault must not lose the fit
        first = " ".join(str(e).split())[:300] or type(e).__name__
        kept = (f"the fitted model and its metrics are saved in {folder}: log them later with carb-train "
                f"log_only={folder}" if folder else "the fit could not be saved locally either (see the warning)")
        raise TrackingError(f"tracking.uri={cfg.tracking.uri}: logging failed ({type(e).__name__}: {first}); "
                            f"{kept}") from None
    table = results_table(metrics, cascade.targets_)
    if cfg.get("print_table", True):
        print_fit(fit, table, info, run_id)
    logged = {r["metric"]: r["value"] for r in metric_rows(numbers, cascade.targets_)}
    return {"metrics": logged, "registered_name": fit["reg_name"], "version": info.get("version"),
            "run_id": run_id, "model_uri": info.get("model_uri"), "run_name": fit["run_name"],
            "targets": list(cascade.targets_), "dropped_targets": dict(cascade.dropped_targets_),
            "table": table, "preset": fit["preset"], "fit_folder": str(folder)}


def refit_settings(config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``(config without evaluate.refits, those settings as one tag value)``: how the refits ran is a tag
    (``light tree_share=0.3 max_learning_rate=0.3 workers=auto``), not four more params."""
    ev = dict(config.get("evaluate") or {})
    refits = dict(ev.pop("refits", None) or {})
    text = " ".join([("light" if refits.get("light") else "full")] +
                    [f"{k}={refits[k]}" for k in ("tree_share", "max_learning_rate", "workers") if k in refits])
    return ({**config, "evaluate": ev} if "evaluate" in config else dict(config)), text


def log_inputs(fit: dict[str, Any]) -> str:
    """Log the split's parts as the run's dataset inputs (``<data>.train`` / ``.val`` / ``.cal`` / ``.test``
    with contexts ``training``, ``validation``, ``calibration``, ``testing``; the split is recomputed from
    the cascade's seed and fractions, so a saved fit logs the same). Returns the whole dataset's digest."""
    from carb import tracking

    cascade, full = fit["cascade"], fit["full"]
    src = resolve_path(fit["data_path"])
    parts = split_dataset(full, seed=int(cascade.split_seed_), fractions=tuple(cascade.split_fractions_)).frames4(full)
    for part, context, frame in zip(("train", "val", "cal", "test"), SPLIT_CONTEXTS, parts):
        if len(frame):
            tracking.log_dataset(frame, name=f"{src.stem}.{part}", source=str(src), context=context)
    return tracking.dataset_digest(full, str(src))


#: MLflow input contexts of the split's train / val / cal / test parts.
SPLIT_CONTEXTS = ("training", "validation", "calibration", "testing")


def descriptions(fit: dict[str, Any], metrics: dict[str, float], digest: str, run_id: str) -> dict[str, Any]:
    """``description``, ``model_description`` and ``version_tags`` for :func:`carb.tracking.log_cascade`
    (:mod:`carb.commands.runinfo`)."""
    from carb.commands.runinfo import model_description, version_description, version_tags
    from carb.tracking import git_commit

    cascade = fit["cascade"]
    targets = list(cascade.targets_)
    info = {"data_path": fit["data_path"], "digest": digest, "rows": len(fit["full"]), "sizes": fit["sizes"],
            "split": fit["split"], "preset": fit["preset"], "feature_set": cascade.feature_set_,
            "columns": list(cascade.feature_names_), "dropped_targets": dict(cascade.dropped_targets_),
            "run_id": run_id, "run_name": fit["run_name"], "git_commit": git_commit(),
            "interval_nominal": metrics.get("interval_nominal")}
    return {"description": version_description(info, metrics, targets),
            "model_description": model_description(fit["reg_name"], fit["device"], cascade.device_id_,
                                                   cascade.device_fingerprint_, targets),
            "version_tags": {**version_tags(metrics, targets), "source_run": run_id}}


def print_fit(fit: dict[str, Any], table: str, info: dict[str, Any], run_id: str) -> None:
    """The terminal report: results table, sanity, extrapolation table, registration."""
    metrics, extras = fit["metrics"], fit["extras"]
    n_tr, n_va, n_ca, n_te = fit["sizes"]
    print(wrap_line(f"carb-train: {fit['run_name']}  ({n_tr}/{n_va}/{n_ca}/{n_te} train/val/cal/test rows, device {fit['device']!r})"))
    line = coverage_line(metrics)
    if line:
        print(wrap_line(line))
    print(table)
    san = {k: v for k, v in metrics.items() if k.startswith("sanity_") and k != "sanity_n"}
    if san:
        print(wrap_line(f"carb-train: physical sanity on {int(metrics.get('sanity_n', 0))} screening candidates: "
              + ", ".join(f"{k[7:]} {100 * v:.2f}%" for k, v in san.items())))
    xval = extras.get("extrapolation")
    if xval is not None:
        from carb.analysis.extrapolation import format_table, summary_line

        print(wrap_line("carb-train: extrapolation (train on the lower range, test on the upper; B1 = FLOPs-only):"))
        print(format_table(xval))
        if len(xval):
            print(wrap_line(f"carb-train: {summary_line(xval)}"))
    if info.get("version"):
        print(wrap_line(f"carb-train: registered {fit['reg_name']} version {info['version']} (run {run_id})"))
        print("\n".join(train_next(fit["reg_name"], info["version"], model_input_kind(fit["cascade"]))))
    from carb.commands.cli import say_run_page

    say_run_page(run_id, fit["config"].get("tracking", {}).get("uri"))


def train_next(name: str, version: Any, kind: str) -> list[str]:
    """The lines after registering ``version`` of model ``name``: screen with that version (``kind``:
    :func:`carb.design.identity.model_input_kind`; ``zoo`` adds ``space=zoo``, the default space being the
    ResNet grid) and make the best version ``@champion`` (a new model has none, so ``@champion`` in a URI
    fails until ``carb-promote`` runs), wrapped at 120 columns as copy-pastable commands
    (:func:`carb.commands.cli.wrap_command`)."""
    from carb.commands.cli import command_text, wrap_command

    space = " space=zoo" if kind == "zoo" else ""
    return ["carb-train: next:",
            *wrap_command("  screen        ", f"{command_text('carb-screen')}{space} "
                          f"screen.target=models:/{name}/{version} screen.budget.latency_ms=<ms>"),
            *wrap_command("  champion      ", f"{command_text('carb-promote')} promote.name={name}",
                          "   (then models:/" + name + "@champion)")]


def coverage_line(metrics: dict[str, Any]) -> str:
    """The report's line of interval coverage on the test split per target, each with its mean width as a
    share of the prediction (``interval_test_<t>_width``: mean of (hi - lo) / prediction), e.g.
    ``latency_ms 0.905 (mean width 70.0 % of the prediction)``; ``""`` without interval metrics."""
    cov = {k: v for k, v in metrics.items() if k.startswith("interval_test_") and k.endswith("_coverage")}
    if not cov:
        return ""
    return ("carb-train: interval coverage on the test split (nominal "
            f"{metrics.get('interval_nominal', float('nan')):.2f}): "
            + ", ".join(f"{k[14:-9]} {v:.3f} (mean width {100 * metrics.get(k[:-9] + '_width', float('nan')):.1f} % "
                        "of the prediction)" for k, v in cov.items()))


_hydra_main = hydra_command("train")(run_train)


def main() -> Any:
    """The ``carb-train`` console entry point (:func:`run_train` under Hydra). It starts the refit workers'
    fork server first (:func:`carb.analysis.refits.start_fork_server`: its imports overlap this process's
    start-up; this module imports little at the top for that reason). The process ends right after it, so the
    objects left are frozen (``gc.freeze``) for the interpreter's final garbage collection to skip: it took
    0.3 s idle (up to 1 s under load) to collect the fitted models and frames that exit frees anyway."""
    import gc

    from carb.analysis.refits import start_fork_server

    start_fork_server()
    try:
        return _hydra_main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    main()
