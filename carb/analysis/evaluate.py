"""Evaluation of a fitted predictor (paper Sections 5.2, 5.4, 6.1, 7.3), as pure functions that return
flat ``{metric_name: value}`` dicts with the same self-explaining names in every run.

Metric names (``<t>`` is a target: ``peak_memory_MB``, ``energy_J``, ``latency_ms``):

- ``test_<t>_{r2,mae,rmse,mape}``: test split, all rows (MAE/RMSE in the target's unit, MAPE in %);
- ``test_<regime>_<t>_{r2,mae}`` for regimes ``low_batch`` (bs <= 8), ``high_load`` (SM or memory
  utilization > 65 %), ``large_batch`` (bs > 16), plus ``test_<regime>_n`` rows;
- ``budget_{accuracy,false_accept_rate,false_reject_rate}`` at an energy (or other target) budget;
  rates are fractions of all scored rows, so the three add up to 1;
- ``lobo_<t>_{r2,mae,rmse,mape}``: leave-one-batch-tier-out (train on bs > 8, test on bs <= 8);
- ``<prefix>_<t>_...`` for the baselines (``b1``, ``b2``);
- ``resid_spearman_sm_<regime>_<t>``: Spearman rank correlation of test residuals (measured minus
  predicted) with ``avg_sm_util`` (residual correctability, Section 5.4).

NaN means "not measurable here" (no rows, no energy, no telemetry); the tracker skips NaN metrics.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.data.schema import TARGETS
from carb.data.tiers import LOW_BATCH_MAX, hardware_stress, low_batch
from carb.errors import ConfigError

#: Evaluation regimes (``overall`` is reported without a regime infix).
REGIMES: tuple[str, ...] = ("low_batch", "high_load", "large_batch")
#: Batch sizes above this are the large-batch regime (the paper's "large" tier, bs > 16).
LARGE_BATCH_MIN = 16


def regime_masks(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Boolean row masks: ``overall``, ``low_batch`` (bs <= 8), ``high_load`` (utilization > 65 %),
    ``large_batch`` (bs > 16)."""
    return {"overall": np.ones(len(df), dtype=bool), "low_batch": low_batch(df),
            "high_load": hardware_stress(df),
            "large_batch": df["batch_size"].to_numpy() > LARGE_BATCH_MIN}


def regression_metrics(y_true, y_pred) -> dict[str, float]:
    """``r2``, ``mae``, ``rmse`` (target units) and ``mape`` (%) over rows where both are finite.
    NaN for fewer than 1 row (``r2`` needs 2 rows and a non-constant truth)."""
    y, p = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    ok = np.isfinite(y) & np.isfinite(p)
    y, p = y[ok], p[ok]
    nan = float("nan")
    if len(y) == 0:
        return {"r2": nan, "mae": nan, "rmse": nan, "mape": nan}
    e = y - p
    ss = float(np.sum((y - y.mean()) ** 2))
    nz = y != 0
    return {"r2": (1.0 - float(np.sum(e ** 2)) / ss) if len(y) >= 2 and ss > 0 else nan,
            "mae": float(np.mean(np.abs(e))), "rmse": float(np.sqrt(np.mean(e ** 2))),
            "mape": float(100.0 * np.mean(np.abs(e[nz] / y[nz]))) if nz.any() else nan}


def prediction_metrics(df: pd.DataFrame, pred: pd.DataFrame, prefix: str = "test",
                       targets: Sequence[str] = TARGETS, regimes: bool = True) -> dict[str, float]:
    """Metrics of ``pred`` (``pred_<t>`` columns) against the measured columns of ``df`` (same row
    order): ``<prefix>_<t>_{r2,mae,rmse,mape}`` and, with ``regimes``, ``<prefix>_<regime>_<t>_{r2,mae}``
    and ``<prefix>_<regime>_n``. Targets absent from ``pred`` or ``df`` are skipped."""
    out: dict[str, float] = {}
    masks = regime_masks(df) if regimes else {"overall": np.ones(len(df), dtype=bool)}
    for name in REGIMES if regimes else ():
        out[f"{prefix}_{name}_n"] = float(masks[name].sum())
    for t in targets:
        col = f"pred_{t}"
        if col not in pred.columns or t not in df.columns:
            continue
        y, p = df[t].to_numpy(float), pred[col].to_numpy(float)
        for k, v in regression_metrics(y, p).items():
            out[f"{prefix}_{t}_{k}"] = v
        for name in REGIMES if regimes else ():
            m = masks[name]
            r = regression_metrics(y[m], p[m])
            out[f"{prefix}_{name}_{t}_r2"] = r["r2"]
            out[f"{prefix}_{name}_{t}_mae"] = r["mae"]
    return out


def budget_classification(y_true, y_pred, budget: float) -> dict[str, float]:
    """Feasibility decisions ``pred <= budget`` against the truth ``true <= budget``.

    ``accuracy``: share of rows classified right; ``false_accept_rate``: share predicted within budget
    but measured over it (the operationally critical error); ``false_reject_rate``: share predicted over
    but measured within. Shares of all ``n`` rows with both values finite (they sum to 1); the counts
    behind them: ``n_false_accept``, ``n_false_reject`` and ``n_measured_feasible``."""
    y, p = np.asarray(y_true, dtype=float), np.asarray(y_pred, dtype=float)
    ok = np.isfinite(y) & np.isfinite(p)
    y, p = y[ok], p[ok]
    n = len(y)
    pin, tin = p <= budget, y <= budget
    counts = {"n": n, "n_false_accept": int(np.sum(pin & ~tin)), "n_false_reject": int(np.sum(~pin & tin)),
              "n_measured_feasible": int(np.sum(tin))}
    if n == 0:
        nan = float("nan")
        return {"accuracy": nan, "false_accept_rate": nan, "false_reject_rate": nan, **counts}
    return {"accuracy": float(np.mean(pin == tin)), "false_accept_rate": float(np.mean(pin & ~tin)),
            "false_reject_rate": float(np.mean(~pin & tin)), **counts}


def budget_metrics(df: pd.DataFrame, pred: pd.DataFrame, target: str, budget: float) -> dict[str, float]:
    """``budget_{accuracy,false_accept_rate,false_reject_rate,n}`` and ``budget_<target>`` (the limit)
    for one target; empty when the target is not predicted or not measured."""
    col = f"pred_{target}"
    if col not in pred.columns or target not in df.columns or not np.isfinite(budget):
        return {}
    res = budget_classification(df[target].to_numpy(float), pred[col].to_numpy(float), budget)
    out = {f"budget_{k}": float(res[k]) for k in ("accuracy", "false_accept_rate", "false_reject_rate", "n")}
    out[f"budget_{target}"] = float(budget)
    return out


def residual_spearman(df: pd.DataFrame, pred: pd.DataFrame, column: str = "avg_sm_util",
                      targets: Sequence[str] = TARGETS, min_rows: int = 5) -> dict[str, float]:
    """``resid_spearman_sm_<regime>_<t>``: Spearman rho of (measured - predicted) with ``column`` per
    regime (``overall`` included). NaN with fewer than ``min_rows`` rows or no telemetry."""
    from scipy.stats import spearmanr

    out: dict[str, float] = {}
    u = pd.to_numeric(df[column], errors="coerce").to_numpy(float) if column in df.columns \
        else np.full(len(df), np.nan)
    masks = regime_masks(df)
    for t in targets:
        col = f"pred_{t}"
        if col not in pred.columns or t not in df.columns:
            continue
        r = df[t].to_numpy(float) - pred[col].to_numpy(float)
        for name, m in masks.items():
            ok = m & np.isfinite(r) & np.isfinite(u)
            rho = float("nan")
            if ok.sum() >= min_rows and np.ptp(u[ok]) > 0 and np.ptp(r[ok]) > 0:
                rho = float(spearmanr(r[ok], u[ok]).statistic)
            out[f"resid_spearman_sm_{name}_{t}"] = rho
    return out


def leave_one_batch_tier_out(estimator, df: pd.DataFrame, targets: Sequence[str],
                             max_batch: int = LOW_BATCH_MAX, min_rows: int = 20) -> tuple[dict[str, float], Any]:
    """Fit a clone of ``estimator`` on rows with ``batch_size > max_batch`` (internal validation split)
    and test on the withheld rows with ``batch_size <= max_batch``.

    Returns (``lobo_<t>_{r2,mae,rmse,mape}`` plus ``lobo_n_train``/``lobo_n_test``, the fitted clone);
    (``{}``, None) when either side has fewer than ``min_rows`` rows."""
    from sklearn.base import clone

    bs = df["batch_size"].to_numpy()
    train, test = df[bs > max_batch].reset_index(drop=True), df[bs <= max_batch].reset_index(drop=True)
    if len(train) < min_rows or len(test) < min_rows:
        return {}, None
    ts = [t for t in targets if t in df.columns]
    model = clone(estimator).fit(train, train[ts])
    pred = model.predict(test)
    out = {"lobo_n_train": float(len(train)), "lobo_n_test": float(len(test)),
           "lobo_max_batch": float(max_batch)}
    for t in ts:
        if f"pred_{t}" in pred.columns:
            for k, v in regression_metrics(test[t], pred[f"pred_{t}"]).items():
                out[f"lobo_{t}_{k}"] = v
    return out, model


def lobo_or_skip(cascade, full: pd.DataFrame, targets: list[str], max_batch: int,
                 note: Callable[[str], None] | None, min_rows: int = 20) -> dict[str, float]:
    """:func:`leave_one_batch_tier_out` metrics, or ``{}`` with one line to
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


def top_importances(model, k: int = 10) -> dict[str, list[tuple[str, float]]]:
    """Top-``k`` LightGBM split importances per target of a fitted cascade:
    ``{target: [(feature, splits), ...]}``."""
    return {t: [(str(n), float(v)) for n, v in s.items()] for t, s in model.importances(top=k).items()}


def baseline_metrics(b1, b2, df: pd.DataFrame) -> dict[str, float]:
    """Test metrics of the fitted baselines (``b2`` may be None): ``b1_<t>_*`` and ``b2_energy_J_*``."""
    out: dict[str, float] = {}
    if b1 is not None:
        out.update(prediction_metrics(df, b1.predict(df), prefix="b1", regimes=False))
    if b2 is not None:
        out.update(prediction_metrics(df, b2.predict(df), prefix="b2", targets=("energy_J",),
                                      regimes=False))
    return out


def results_table(metrics: Mapping[str, float], targets: Sequence[str] = TARGETS) -> str:
    """A short text table: one row per target with CARB / B1 / B2 test R^2 and MAE, validation MAE
    and leave-one-batch-tier-out R^2 (``-`` where absent)."""
    def f(key: str, fmt: str = "{:.4g}") -> str:
        v = metrics.get(key)
        return fmt.format(v) if v is not None and np.isfinite(v) else "-"

    head = ["target", "CARB R2", "CARB MAE", "MAPE %", "B1 R2", "B1 MAE", "B2 R2", "B2 MAE", "val MAE",
            "LOBO R2"]
    rows = [head]
    for t in targets:
        if f"test_{t}_mae" not in metrics:
            continue
        rows.append([t, f(f"test_{t}_r2", "{:.4f}"), f(f"test_{t}_mae"), f(f"test_{t}_mape", "{:.2f}"),
                     f(f"b1_{t}_r2", "{:.4f}"), f(f"b1_{t}_mae"), f(f"b2_{t}_r2", "{:.4f}"),
                     f(f"b2_{t}_mae"), f(f"val_{t}_mae"), f(f"lobo_{t}_r2", "{:.4f}")])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def budget_value(cfg_budget: dict[str, Any], train: pd.DataFrame) -> tuple[str, float]:
    """The budget of the budget-classification metrics: ``(target, limit)`` from ``{"target", "value"}``
    (``evaluate.budget`` of conf/train.yaml); a null value means the target's training median."""
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
