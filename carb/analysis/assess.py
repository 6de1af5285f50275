"""Every metric of a fitted cascade in one call, for ``carb-train``: test metrics and regimes, budget
classification, baselines, residual correlation, leave-one-batch-tier-out, the extrapolation splits
(:mod:`carb.analysis.extrapolation`) and the physical sanity of screening-mode predictions on a grid.

It sits above :mod:`carb.analysis.evaluate`, :mod:`carb.analysis.extrapolation` and
:mod:`carb.analysis.screening`, which import nothing from here.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from carb.analysis.evaluate import (
    baseline_metrics,
    budget_metrics,
    budget_value,
    leave_one_batch_tier_out,
    prediction_metrics,
    residual_spearman,
    top_importances,
)
from carb.model.baselines import FlopsLinear, LatencyEnergyProxy


def evaluate_cascade(cascade, train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame,
                 full: pd.DataFrame, ev: dict[str, Any],
                 progress: Callable[[str], None] | None = None,
                 note: Callable[[str], None] | None = None) -> tuple[dict[str, float], dict[str, Any]]:
    """Every metric of a fitted cascade (test, regimes, budget, baselines, residual correlation,
    leave-one-batch-tier-out). Returns (metrics, extras with predictions and importances).
    ``progress``: called with a label as each refit (leave-one-batch-tier-out, each extrapolation split
    unless ``ev.extrapolation.progress`` is false) starts. ``note``: called with one line per refit
    skipped because the data has too few rows for it (small data: nothing after the main fit fails)."""
    targets = list(cascade.targets_)
    pred = cascade.predict(test)
    metrics: dict[str, float] = {}
    metrics.update(prediction_metrics(test, pred, "test", targets))
    for t in targets:
        metrics[f"val_{t}_mae"] = cascade.val_mae_.get(t, float("nan"))
        metrics[f"val_{t}_probe_mae_raw"] = cascade.probe_val_mae_.get(t, {}).get("raw", float("nan"))
        metrics[f"val_{t}_probe_mae_log"] = cascade.probe_val_mae_.get(t, {}).get("log", float("nan"))
        metrics[f"log_target_{t}"] = float(cascade.log_target_[t])
        for m, w in cascade.blend_weights_[t].items():
            metrics[f"weight_{t}_{m}"] = w
        for name, rep in cascade.corrector_report_.get(t, {}).items():
            metrics[f"corrector_{name}_{t}_kept"] = float(bool(rep.get("kept")))
    if getattr(cascade, "intervals_", None):
        from carb.model.intervals import coverage_report

        metrics["interval_nominal"] = float(cascade.intervals_.get("coverage", float("nan")))
        for t, r in coverage_report(cascade.intervals_, cascade, test, test[targets]).items():
            metrics[f"interval_test_{t}_coverage"] = r["coverage"]
            metrics[f"interval_test_{t}_width"] = r["mean_rel_width"]
            for g, rg in r.get("by_group", {}).items():   # GPU regimes: launch-bound, device-bound
                metrics[f"interval_test_{t}_{g}_coverage"] = rg["coverage"]
                metrics[f"interval_test_{t}_{g}_width"] = rg["mean_rel_width"]
    btarget, bvalue = budget_value(ev.get("budget") or {}, train)
    metrics.update(budget_metrics(test, pred, btarget, bvalue))
    b1 = FlopsLinear().fit(train, train[targets])
    b2 = None
    if "energy_J" in targets and train["latency_ms"].notna().sum() >= 2:
        b2 = LatencyEnergyProxy().fit(train, train["energy_J"])
    metrics.update(baseline_metrics(b1, b2, test))
    metrics.update(residual_spearman(test, pred, targets=targets))
    lobo_cfg = ev.get("lobo") or {}
    if lobo_cfg.get("enabled", True):
        t0 = time.perf_counter()
        if progress is not None:
            progress(f"leave-one-batch-tier-out refit (train bs > {int(lobo_cfg.get('max_batch', 8))})")
        lobo = lobo_or_skip(cascade, full, targets, int(lobo_cfg.get("max_batch", 8)), note)
        metrics.update(lobo)
        if lobo:
            metrics["lobo_fit_s"] = time.perf_counter() - t0
    xval, xval_preds = None, None
    xcfg = ev.get("extrapolation") or {}
    if xcfg.get("enabled", True):
        from sklearn.base import clone

        from carb.analysis.extrapolation import (
            concentration_metrics,
            default_splits,
            evaluate_splits,
            split_metrics,
            xval_predictions,
        )

        t0 = time.perf_counter()
        splits = default_splits(full, float(xcfg.get("train_share", 0.7)), int(xcfg.get("min_rows", 20)))
        if not splits and note is not None:
            note(f"extrapolation splits skipped: no knob or precision leaves {int(xcfg.get('min_rows', 20))} rows "
                 f"(evaluate.extrapolation.min_rows) on each side of a cut in {len(full)} rows")
        say = progress if xcfg.get("progress", True) else None
        cover = float(cascade.intervals_["coverage"]) if getattr(cascade, "intervals_", None) else None
        preds: dict = {}
        xval = evaluate_splits(lambda: clone(cascade), full, splits, targets, progress=say, interval_coverage=cover,
                               predictions=preds, note=note)
        metrics.update(split_metrics(xval))
        xval_preds = xval_predictions(preds)
        metrics.update(concentration_metrics(xval, preds))
        metrics["xval_fit_s"] = time.perf_counter() - t0
        if cover is not None:  # candidates outside the domain get intervals that saw extrapolation
            from carb.model.intervals import outside_calibration

            for t, extra in outside_calibration(xval.attrs.get("outside_log_ratios", {}), cover,
                                                xval.attrs.get("outside_precisions")).items():
                if isinstance(cascade.intervals_.get(t), dict):
                    cascade.intervals_[t]["outside"] = extra
    acfg = ev.get("architecture_intervals") or {}
    if acfg.get("enabled", True) and getattr(cascade, "intervals_", None):
        # a candidate of an architecture the model never saw errs more than the calibration rows (same networks)
        from sklearn.base import clone

        from carb.model.intervals import architecture_calibration

        t0 = time.perf_counter()
        arch = architecture_calibration(lambda: clone(cascade), train, train[targets],
                                        float(cascade.intervals_["coverage"]), int(acfg.get("folds", 5)),
                                        progress=progress, note=note)
        for t, entry in arch.items():
            if isinstance(cascade.intervals_.get(t), dict):
                cascade.intervals_[t]["new_arch"] = entry
                metrics[f"interval_new_arch_{t}_lower"] = entry["lower"]
                metrics[f"interval_new_arch_{t}_upper"] = entry["upper"]
        if arch:
            metrics["arch_interval_fit_s"] = time.perf_counter() - t0
    scfg = ev.get("sanity") or {}
    if scfg.get("enabled", True):
        from carb.analysis.extrapolation import sanity_report
        from carb.analysis.screening import featurize
        from carb.design.space import load_space

        metrics.update(sanity_report(cascade, featurize(load_space(str(scfg.get("space", "screening"))))))
    for k, v in cascade.fit_seconds_.items():
        metrics[f"fit_{k}_s"] = v
    imps = top_importances(cascade, int(ev.get("importances_top", 10)))
    return metrics, {"pred": pred, "importances": imps, "b1": b1, "b2": b2,
                     "budget": {"target": btarget, "value": bvalue}, "extrapolation": xval,
                     "extrapolation_predictions": xval_preds}


def lobo_or_skip(cascade, full: pd.DataFrame, targets: list[str], max_batch: int,
                 note: Callable[[str], None] | None, min_rows: int = 20) -> dict[str, float]:
    """:func:`carb.analysis.evaluate.leave_one_batch_tier_out` metrics, or ``{}`` with one line to
    ``note`` when either side of the batch cut has fewer than ``min_rows`` rows or the refit finds too
    little data (:class:`carb.errors.DatasetError`)."""
    from carb.errors import DatasetError

    above = int((full["batch_size"].to_numpy() > max_batch).sum())
    if min(above, len(full) - above) < min_rows:
        if note is not None:
            note(f"leave-one-batch-tier-out skipped: {above} rows with batch > {max_batch} and "
                 f"{len(full) - above} at or below, need at least {min_rows} on each side")
        return {}
    try:
        return leave_one_batch_tier_out(cascade, full, targets, max_batch, min_rows)[0]
    except DatasetError as e:
        if note is not None:
            note(f"leave-one-batch-tier-out skipped: {e}")
        return {}
