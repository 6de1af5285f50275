"""Every metric of a fitted cascade in one call, for ``carb-train``: test metrics and regimes, budget
classification, baselines, residual correlation, leave-one-batch-tier-out, the extrapolation splits
(:mod:`carb.analysis.extrapolation`) and the physical sanity of screening-mode predictions on a grid.

It sits above :mod:`carb.analysis.evaluate`, :mod:`carb.analysis.extrapolation` and
:mod:`carb.analysis.screening`, which import nothing from here.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from carb.analysis.evaluate import (
    baseline_metrics,
    budget_metrics,
    budget_value,
    lobo_or_skip,  # noqa: F401  (re-exported: callers import it from here)
    prediction_metrics,
    residual_spearman,
    top_importances,
)
from carb.design.identity import RESNET, ZOO, architecture_unit, kinds_of_input, model_input_kind
from carb.model.baselines import FlopsLinear, LatencyEnergyProxy


def evaluate_cascade(cascade, train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame,
                 full: pd.DataFrame, ev: dict[str, Any],
                 progress: Callable[[str], None] | None = None,
                 note: Callable[[str], None] | None = None,
                 refits: tuple[dict[str, Any], dict[tuple[str, int], Any]] | None = None,
                 first: tuple[dict[str, float], dict[str, Any]] | None = None,
                 combined: tuple[pd.DataFrame, dict[str, Any]] | None = None
                 ) -> tuple[dict[str, float], dict[str, Any]]:
    """Every metric of a fitted cascade (test, regimes, budget, baselines, residual correlation,
    leave-one-batch-tier-out). Returns (metrics, extras with predictions and importances).
    ``refits``: ``(plan, {(kind, index): Done})`` of :mod:`carb.analysis.refits`, when the command ran
    them beside the main fit; None runs them here, one after another (:func:`run_refits`).
    ``first``: what :func:`main_fit_metrics` returned for this cascade (the command computes it while the
    refits are run); None computes it here. ``combined``: ``(table, predictions)`` of
    :func:`carb.analysis.extrapolation.combine_splits` on these refits' splits when the command made them
    already (for the extrapolation figure); None combines them here.
    ``progress``: called with a label as each refit (leave-one-batch-tier-out, each extrapolation split
    unless ``ev.extrapolation.progress`` is false) starts. ``note``: called with one line per refit
    skipped because the data has too few rows for it (small data: nothing after the main fit fails)."""
    first_metrics, first_extras = first if first is not None else main_fit_metrics(cascade, train, test, ev)
    metrics = dict(first_metrics)
    plan, done = refits if refits is not None else run_refits(cascade, train, full, ev, progress, note)
    if plan["lobo"]:
        lobo = done[("lobo", 0)]
        metrics.update(lobo.result)
        if lobo.result:
            metrics["lobo_fit_s"] = lobo.seconds
    xval, xval_preds = None, None
    if plan["splits"] is not None:
        from carb.analysis.extrapolation import combine_splits, concentration_metrics, split_metrics, xval_predictions

        runs = [done[("split", i)] for i in range(len(plan["splits"]))]
        cover = plan["coverage"]
        preds: dict = {}
        if combined is not None:
            xval, preds = combined
        else:
            xval = combine_splits([r.result for r in runs], cover, predictions=preds)
        metrics.update(split_metrics(xval))
        xval_preds = xval_predictions(preds)
        metrics.update(concentration_metrics(xval, preds))
        metrics["xval_fit_s"] = sum(r.seconds for r in runs)
        if cover is not None and getattr(cascade, "intervals_", None):   # outside the domain: intervals that saw extrapolation
            from carb.model.intervals import outside_calibration

            for t, extra in outside_calibration(xval.attrs.get("outside_log_ratios", {}), cover,
                                                xval.attrs.get("outside_precisions")).items():
                if isinstance(cascade.intervals_.get(t), dict):
                    cascade.intervals_[t]["outside"] = extra
    if plan["arch"] is not None and getattr(cascade, "intervals_", None):
        # a candidate of an architecture the model never saw errs more than the calibration rows (same networks)
        from carb.model.intervals import architecture_entries

        k, n_groups = plan["arch"]
        runs = [done[("arch", i)] for i in range(k)]
        parts: dict[str, list] = {}
        for r in runs:
            for t, part in r.result.items():
                parts.setdefault(t, []).append(part)
        arch = architecture_entries(parts, float(cascade.intervals_["coverage"]), k, n_groups,
                                    unit=architecture_unit(model_input_kind(cascade)))
        for t, entry in arch.items():
            if isinstance(cascade.intervals_.get(t), dict):
                cascade.intervals_[t]["new_arch"] = entry
                metrics[f"interval_new_arch_{t}_lower"] = entry["lower"]
                metrics[f"interval_new_arch_{t}_upper"] = entry["upper"]
        if arch:
            metrics["arch_interval_fit_s"] = sum(r.seconds for r in runs)
    scfg = ev.get("sanity") or {}
    if ("sanity", 0) in done:      # a worker checked it beside the refits
        metrics.update(done[("sanity", 0)].result)
    elif scfg.get("enabled", True):
        metrics.update(sanity_metrics(cascade, str(scfg.get("space", "screening"))))
    for k, v in cascade.fit_seconds_.items():
        metrics[f"fit_{k}_s"] = v
    return metrics, {**first_extras, "extrapolation": xval, "extrapolation_predictions": xval_preds}


def main_fit_metrics(cascade, train: pd.DataFrame, test: pd.DataFrame, ev: dict[str, Any]
                     ) -> tuple[dict[str, float], dict[str, Any]]:
    """The metrics of :func:`evaluate_cascade` that need no refit (test, regimes, intervals on the test
    rows, budget, baselines, residual correlation), in its order, and ``extras`` with the test predictions
    (``pred``), the top importances (``importances``), the baselines (``b1``, ``b2``) and the ``budget``."""
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
    imps = top_importances(cascade, int(ev.get("importances_top", 10)))
    return metrics, {"pred": pred, "importances": imps, "b1": b1, "b2": b2,
                     "budget": {"target": btarget, "value": bvalue}}


def sanity_metrics(cascade, space: str = "screening", note: Callable[[str], None] | None = None) -> dict[str, float]:
    """:func:`carb.analysis.extrapolation.sanity_report` of a fitted cascade on the grids of the kinds it
    predicts (:func:`carb.design.identity.kinds_of_input` of its ``input_kind_``): the ResNet grid ``space``
    (``conf/space/<space>.yaml``) for ResNet rows, its own networks at every batch knot
    (:func:`zoo_sanity_grid`) for zoo rows; a combined model both, joined by :func:`worst_sanity`. A
    top-level function, so a worker process can run it."""
    from carb.analysis.extrapolation import sanity_report
    from carb.analysis.screening import featurize
    from carb.design.space import load_space

    kinds = kinds_of_input(model_input_kind(cascade))
    parts = []
    if RESNET.name in kinds:
        parts.append(sanity_report(cascade, featurize(load_space(space))))
    if ZOO.name in kinds:
        grid = zoo_sanity_grid(cascade)
        if len(grid) or len(kinds) == 1:
            parts.append(sanity_report(cascade, grid))
    return worst_sanity(parts)


def worst_sanity(parts: list[dict[str, float]]) -> dict[str, float]:
    """One sanity report of several grids' (:func:`carb.analysis.extrapolation.sanity_report`, one per kind
    of network): ``sanity_n`` summed, every share the worst (largest finite) of the grids' (a share NaN
    where no grid has one)."""
    import math

    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            if k == "sanity_n":
                out[k] = out.get(k, 0.0) + float(v)
            elif not math.isfinite(out.get(k, math.nan)) or (math.isfinite(v) and v > out[k]):
                out[k] = float(v)
    return out


def zoo_sanity_grid(cascade) -> pd.DataFrame:
    """The featurized grid a zoo model's sanity check predicts: every network it was trained on
    (``domain_["models"]``) at each input size measured for it, each training batch size and precision."""
    import itertools

    from carb.design.zoo_inputs import zoo_features_frame

    dom = getattr(cascade, "domain_", None) or {}
    batches = [int(b) for b in dom.get("batch_sizes", [1])]
    precisions = dom.get("categorical", {}).get("precision", ["fp32"])
    rows = [(m, s, b, p) for m, sizes in dom.get("models", {}).items()
            for s, b, p in itertools.product(sizes, batches, precisions)]
    knobs = pd.DataFrame(rows, columns=["model_name", "input_size", "batch_size", "precision"])
    if not len(knobs):   # a domain without its networks (a combined model fitted before they were kept)
        return knobs
    F = zoo_features_frame(knobs)
    return F[F["refused"] == ""].drop(columns="refused").reset_index(drop=True)


def run_refits(cascade, train: pd.DataFrame, full: pd.DataFrame, ev: dict[str, Any],
               progress: Callable[[str], None] | None = None, note: Callable[[str], None] | None = None
               ) -> tuple[dict[str, Any], dict[tuple[str, int], Any]]:
    """The evaluation refits of a fitted ``cascade`` (:func:`carb.analysis.refits.plan_refits`) run in
    this process, one after another: ``(plan, results)`` for :func:`evaluate_cascade`."""
    from carb.analysis.refits import RefitRunner, plan_refits

    tasks, plan = plan_refits(cascade, train, full, ev, list(cascade.targets_),
                              calibrated=bool(getattr(cascade, "intervals_", None)), note=note)
    with RefitRunner(1).start(tasks) as runner:
        return plan, runner.collect(progress, note)
