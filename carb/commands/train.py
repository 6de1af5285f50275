"""``carb-train``: fit the CARB cascade on one device's dataset, evaluate it beside the baselines, and
log the run to MLflow (experiment ``carb-train``) with the fitted model registered as a new version of
``carb-<device-slug>``.

    carb-train                                   # shipped CPU reference dataset, model=carb, features=full
    carb-train data.path=<file|folder> model=carb_fast features=arch_only
    carb-train -m features=full,no_util,arch_only       # the ablation; or: carb-train +experiment=ablation
    carb-train +experiment=lobo                          # leave-one-batch-tier-out at bs <= 4, 8, 16

What a run records: the flattened config as params; tags ``device``, ``device_slug``, ``device_id``, ``feature_set``,
``preset``, ``dataset_digest``, ``git_commit``; the metrics of :mod:`carb.analysis.evaluate` (``test_*``,
``val_<t>_mae``, ``budget_*``, ``lobo_*``, ``b1_*``, ``b2_*``, ``resid_spearman_sm_*``) plus
``fit_<t>_s``/``fit_total_s``; figures under ``figures/``; ``cascade_summary.json`` (log-space choice,
blend weights, corrector report) and ``importances.json``; the dataset as a run input; the model.

"""
from __future__ import annotations

from typing import Any

from carb.analysis.assess import evaluate_cascade
from carb.commands.cli import hydra_command, sweep_suffix, sweep_tags, to_dict
from carb.data.io import load_training_frame, resolve_path
from carb.data.schema import TARGETS, device_slug, model_name
from carb.data.split import split_dataset
from carb.errors import ConfigError
from carb.model.presets import build_cascade, resolve_auto
from carb.plots.train import train_figures


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


def run_train(cfg: Any) -> dict[str, Any]:
    """Train, evaluate, log and register. Returns ``{"metrics": {...}, "registered_name", "version",
    "run_id", "model_uri", "run_name", "targets", "dropped_targets"}``."""
    from carb.commands.checks import check_config

    check_config('train', cfg)
    from carb import tracking
    from carb.analysis.evaluate import results_table

    data_path = str(cfg.data.get("path") or "reference")
    full, device = load_training_frame(data_path, cfg.data.get("device"))
    split = split_dataset(full, seed=int(cfg.split.seed))
    train, val, test = split.frames(full)
    model_cfg, preset = resolve_auto(to_dict(cfg.model), len(train))
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
    metrics, extras = evaluate_cascade(cascade, train, val, test, full, ev)

    slug = device_slug(device)
    run_name = cfg.get("run_name") or sweep_suffix("/".join(
        [slug, cascade.feature_set_, preset] + ([str(cfg.run_suffix)] if cfg.get("run_suffix") else [])))
    reg_name = model_name(full) if should_register(cfg.get("register", "auto")) else None
    tags = {"device": device, "device_slug": slug, "device_id": cascade.device_id_ or "unknown",
            "feature_set": cascade.feature_set_, "preset": preset,
            "targets": ",".join(cascade.targets_), "dataset": data_path, **tune_tags}
    with tracking.start_run("train", run_name, tracking_uri=cfg.tracking.uri, tags=tags, sweep=sweep_tags(),
                            artifact_root=cfg.tracking.get("artifact_root")) as run_id:
        tracking.log_params(to_dict(cfg))
        src = resolve_path(data_path)
        digest = tracking.log_dataset(full, name=src.stem, source=str(src), context="training")
        tracking.set_tags({"dataset_digest": digest, "split": f"seed={int(cfg.split.seed)}"})
        logged = tracking.log_metrics(metrics)
        tracking.log_dict(cascade.summary(), "cascade_summary.json")
        if extras.get("extrapolation") is not None:
            tracking.log_dict({"rows": extras["extrapolation"].to_dict("records")}, "extrapolation.json")
        tracking.log_dict({t: [[n, v] for n, v in items] for t, items in extras["importances"].items()},
                          "importances.json")
        if ev.get("figures", True):
            for name, fig in train_figures(test, extras["pred"], extras["importances"], cascade.targets_).items():
                tracking.log_figure(fig, name)
        example = test[cascade.input_columns_].head(5).reset_index(drop=True)
        meta = {"device": device, "device_id": cascade.device_id_ or "unknown",
                "device_fingerprint": cascade.device_fingerprint_ or "unknown",
                "feature_set": cascade.feature_set_, "preset": preset,
                "targets": ",".join(cascade.targets_), "dataset_digest": digest}
        info = tracking.log_cascade(cascade, example, registered_name=reg_name, metadata=meta)
    table = results_table(metrics, cascade.targets_)
    if cfg.get("print_table", True):
        print(f"carb-train: {run_name}  ({len(train)}/{len(val)}/{len(test)} train/val/test rows, "
              f"device {device!r})")
        print(table)
        san = {k: v for k, v in metrics.items() if k.startswith("sanity_") and k != "sanity_n"}
        if san:
            print(f"carb-train: physical sanity on {int(metrics.get('sanity_n', 0))} screening candidates: "
                  + ", ".join(f"{k[7:]} {100 * v:.2f}%" for k, v in san.items()))
        xval = extras.get("extrapolation")
        if xval is not None:
            from carb.analysis.extrapolation import format_table, summary_line

            print("carb-train: extrapolation (train on the lower range, test on the upper; B1 = FLOPs-only):")
            print(format_table(xval))
            if len(xval):
                print(f"carb-train: {summary_line(xval)}")
        if info.get("version"):
            print(f"carb-train: registered {reg_name} version {info['version']} (run {run_id})")
    return {"metrics": dict(logged), "registered_name": reg_name, "version": info.get("version"),
            "run_id": run_id, "model_uri": info.get("model_uri"), "run_name": run_name,
            "targets": list(cascade.targets_), "dropped_targets": dict(cascade.dropped_targets_),
            "table": table, "preset": preset}


main = hydra_command("train")(run_train)


if __name__ == "__main__":
    main()
