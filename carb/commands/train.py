"""``carb-train``: fit the CARB cascade on one device's dataset, evaluate it beside the baselines, and
log the run to MLflow (experiment ``carb-train``) with the fitted model registered as a new version of
``carb-<device-slug>``.

    carb-train                                   # shipped CPU reference dataset, model=carb, features=full
    carb-train data.path=<file|folder> model=carb_fast features=arch_only
    carb-train -m features=full,no_util,arch_only       # the ablation; or: carb-train +experiment=ablation
    carb-train +experiment=lobo                          # leave-one-batch-tier-out at bs <= 4, 8, 16

What a run records: the flattened config as params; tags ``device``, ``device_slug``, ``feature_set``,
``preset``, ``dataset_digest``, ``git_commit``; the metrics of :mod:`carb.analysis.evaluate` (``test_*``,
``val_<t>_mae``, ``budget_*``, ``lobo_*``, ``b1_*``, ``b2_*``, ``resid_spearman_sm_*``) plus
``fit_<t>_s``/``fit_total_s``; figures under ``figures/``; ``cascade_summary.json`` (log-space choice,
blend weights, corrector report) and ``importances.json``; the dataset as a run input; the model.

"""
from __future__ import annotations

import math
import time
from typing import Any

import pandas as pd

from carb.commands.cli import hydra_command, to_dict
from carb.data.io import load_training_frame, resolve_path
from carb.data.schema import TARGETS, device_slug
from carb.data.split import split_dataset
from carb.errors import ConfigError
from carb.model.presets import build_cascade


def _budget_value(cfg_budget: dict[str, Any], train: pd.DataFrame) -> tuple[str, float]:
    target = str(cfg_budget.get("target") or "energy_J")
    if target not in TARGETS:
        raise ConfigError(f"evaluate.budget.target: {target!r} is not allowed; allowed: {list(TARGETS)}")
    value = cfg_budget.get("value")
    if value is None:
        v = train[target].median() if target in train.columns else float("nan")
        return target, float(v) if pd.notna(v) else float("nan")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"evaluate.budget.value: must be a positive number or null, got {value!r}")
    return target, value


def evaluate_all(cascade, train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame,
                 full: pd.DataFrame, ev: dict[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """Every metric of a fitted cascade (test, regimes, budget, baselines, residual correlation,
    leave-one-batch-tier-out). Returns (metrics, extras with predictions and importances)."""
    from carb.analysis import evaluate as E
    from carb.model.baselines import FlopsLinear, LatencyEnergyProxy

    targets = list(cascade.targets_)
    pred = cascade.predict(test)
    metrics: dict[str, float] = {}
    metrics.update(E.prediction_metrics(test, pred, "test", targets))
    for t in targets:
        metrics[f"val_{t}_mae"] = cascade.val_mae_.get(t, float("nan"))
        metrics[f"val_{t}_probe_mae_raw"] = cascade.probe_val_mae_.get(t, {}).get("raw", float("nan"))
        metrics[f"val_{t}_probe_mae_log"] = cascade.probe_val_mae_.get(t, {}).get("log", float("nan"))
        metrics[f"log_target_{t}"] = float(cascade.log_target_[t])
        for m, w in cascade.blend_weights_[t].items():
            metrics[f"weight_{t}_{m}"] = w
        for name, rep in cascade.corrector_report_.get(t, {}).items():
            metrics[f"corrector_{name}_{t}_kept"] = float(bool(rep.get("kept")))
    btarget, bvalue = _budget_value(ev.get("budget") or {}, train)
    metrics.update(E.budget_metrics(test, pred, btarget, bvalue))
    b1 = FlopsLinear().fit(train, train[targets])
    b2 = None
    if "energy_J" in targets and train["latency_ms"].notna().sum() >= 2:
        b2 = LatencyEnergyProxy().fit(train, train["energy_J"])
    metrics.update(E.baseline_metrics(b1, b2, test))
    metrics.update(E.residual_spearman(test, pred, targets=targets))
    lobo_cfg = ev.get("lobo") or {}
    if lobo_cfg.get("enabled", True):
        t0 = time.perf_counter()
        lobo, _ = E.leave_one_batch_tier_out(cascade, full, targets, int(lobo_cfg.get("max_batch", 8)))
        metrics.update(lobo)
        if lobo:
            metrics["lobo_fit_s"] = time.perf_counter() - t0
    for k, v in cascade.fit_seconds_.items():
        metrics[f"fit_{k}_s"] = v
    imps = E.top_importances(cascade, int(ev.get("importances_top", 10)))
    return metrics, {"pred": pred, "importances": imps, "b1": b1, "b2": b2,
                     "budget": {"target": btarget, "value": bvalue}}


def _figures(test: pd.DataFrame, pred: pd.DataFrame, imps: dict, targets: list[str]) -> dict[str, Any]:
    from carb.plots import train as P

    return {"figures/pred_vs_measured.png": P.pred_vs_measured(test, pred, targets),
            "figures/importances.png": P.importances_figure(imps),
            "figures/residuals_by_batch_tier.png": P.residuals_by_tier(test, pred, targets)}


def run_train(cfg: Any) -> dict[str, Any]:
    """Train, evaluate, log and register. Returns ``{"metrics": {...}, "registered_name", "version",
    "run_id", "model_uri", "run_name", "targets", "dropped_targets"}``."""
    from carb import tracking
    from carb.analysis.evaluate import results_table

    data_path = str(cfg.data.get("path") or "reference")
    full, device = load_training_frame(data_path, cfg.data.get("device"))
    split = split_dataset(full, seed=int(cfg.split.seed))
    train, val, test = split.frames(full)
    model_cfg = to_dict(cfg.model)
    preset = str(model_cfg.get("name", "custom"))
    tuned = model_cfg.pop("tuned_from", None)
    tune_tags: dict[str, str] = {}
    if tuned:
        import json

        from carb.model.tuning import tuned_per_target

        per_target, prov = tuned_per_target(str(tuned["study"]), str(tuned["storage"]))
        model_cfg["per_target"] = {**dict(model_cfg.get("per_target") or {}), **per_target}
        tune_tags = {"tuned_study": str(tuned["study"]), "tuned_storage": str(tuned["storage"]),
                     "tuned_trials": json.dumps(prov)}
        print(f"carb-train: using the best parameters of study {tuned['study']!r} (trials {prov})")
    features = to_dict(cfg.features)
    cascade = build_cascade(model_cfg, features)
    targets = [t for t in TARGETS if t in full.columns]
    cascade.fit(train, train[targets], val, val[targets])
    for t, reason in cascade.dropped_targets_.items():
        print(f"carb-train: {reason}")
    cascade.record_test_mae(test, test[targets])
    ev = to_dict(cfg.evaluate)
    metrics, extras = evaluate_all(cascade, train, val, test, full, ev)

    slug = device_slug(device)
    run_name = cfg.get("run_name") or "/".join(
        [slug, cascade.feature_set_, preset] + ([str(cfg.run_suffix)] if cfg.get("run_suffix") else []))
    reg_name = f"carb-{slug}" if cfg.get("register", True) else None
    tags = {"device": device, "device_slug": slug, "feature_set": cascade.feature_set_, "preset": preset,
            "targets": ",".join(cascade.targets_), "dataset": data_path, **tune_tags}
    with tracking.start_run("train", run_name, tracking_uri=cfg.tracking.uri, tags=tags,
                            artifact_root=cfg.tracking.get("artifact_root")) as run_id:
        tracking.log_params(to_dict(cfg))
        src = resolve_path(data_path)
        digest = tracking.log_dataset(full, name=src.stem, source=str(src), context="training")
        tracking.set_tags({"dataset_digest": digest})
        logged = tracking.log_metrics(metrics)
        tracking.log_dict(cascade.summary(), "cascade_summary.json")
        tracking.log_dict({t: [[n, v] for n, v in items] for t, items in extras["importances"].items()},
                          "importances.json")
        if ev.get("figures", True):
            for name, fig in _figures(test, extras["pred"], extras["importances"], cascade.targets_).items():
                tracking.log_figure(fig, name)
        example = test[cascade.input_columns_].head(5).reset_index(drop=True)
        meta = {"device": device, "feature_set": cascade.feature_set_, "preset": preset,
                "targets": ",".join(cascade.targets_), "dataset_digest": digest}
        info = tracking.log_cascade(cascade, example, registered_name=reg_name, metadata=meta)
    table = results_table(metrics, cascade.targets_)
    if cfg.get("print_table", True):
        print(f"carb-train: {run_name}  ({len(train)}/{len(val)}/{len(test)} train/val/test rows, "
              f"device {device!r})")
        print(table)
        if info.get("version"):
            print(f"carb-train: registered {reg_name} version {info['version']} (run {run_id})")
    return {"metrics": dict(logged), "registered_name": reg_name, "version": info.get("version"),
            "run_id": run_id, "model_uri": info.get("model_uri"), "run_name": run_name,
            "targets": list(cascade.targets_), "dropped_targets": dict(cascade.dropped_targets_),
            "table": table}


main = hydra_command("train")(run_train)


if __name__ == "__main__":
    main()
