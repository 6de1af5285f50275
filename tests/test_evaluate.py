"""carb.analysis.evaluate and carb.model.baselines on hand-made arrays and exactly linear synthetic rows
(tests/synthetic.py) with known answers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from synthetic import linear_dataset

from carb.analysis import evaluate as E
from carb.errors import DatasetError
from carb.model.baselines import FlopsLinear, LatencyEnergyProxy


def test_regression_metrics_known_values():
    m = E.regression_metrics([1, 2, 3, 4], [1, 2, 3, 5])
    assert m["mae"] == pytest.approx(0.25)
    assert m["rmse"] == pytest.approx(0.5)
    assert m["mape"] == pytest.approx(6.25)  # 100 * mean(0, 0, 0, 1/4)
    assert m["r2"] == pytest.approx(0.8)  # 1 - 1 / 5
    perfect = E.regression_metrics([1.0, 2.0], [1.0, 2.0])
    assert perfect == {"r2": 1.0, "mae": 0.0, "rmse": 0.0, "mape": 0.0}


def test_regression_metrics_skip_nan_and_degenerate_cases():
    m = E.regression_metrics([1, np.nan, 3, 4], [1, 2, np.nan, 5])
    assert m["mae"] == pytest.approx(0.5) and m["rmse"] == pytest.approx(np.sqrt(0.5))
    assert np.isnan(E.regression_metrics([2.0], [3.0])["r2"])  # one row: no R^2
    assert np.isnan(E.regression_metrics([2.0, 2.0], [2.0, 3.0])["r2"])  # constant truth
    assert all(np.isnan(v) for v in E.regression_metrics([np.nan], [1.0]).values())
    assert np.isnan(E.regression_metrics([0.0, 0.0], [1.0, 1.0])["mape"])  # no non-zero truth


def test_budget_false_accept_and_false_reject_rates():
    # budget 2.5: predicted within = [T, F, T, F], measured within = [T, T, F, F]
    r = E.budget_classification([1, 2, 3, 4], [1, 3, 2, 5], budget=2.5)
    assert r["accuracy"] == pytest.approx(0.5)
    assert r["false_accept_rate"] == pytest.approx(0.25)  # row 2: predicted ok, measured over
    assert r["false_reject_rate"] == pytest.approx(0.25)  # row 1: predicted over, measured ok
    assert r["n"] == 4
    assert r["accuracy"] + r["false_accept_rate"] + r["false_reject_rate"] == pytest.approx(1.0)
    r = E.budget_classification([1, 2, np.nan], [5, 5, 1], budget=3)
    assert r["n"] == 2 and r["false_reject_rate"] == 1.0 and r["false_accept_rate"] == 0.0
    assert np.isnan(E.budget_classification([], [], 1.0)["accuracy"])


def test_budget_metrics_names():
    df = linear_dataset()
    pred = pd.DataFrame({"pred_energy_J": df["energy_J"] * 1.0})
    out = E.budget_metrics(df, pred, "energy_J", float(df["energy_J"].median()))
    assert out["budget_accuracy"] == 1.0 and out["budget_false_accept_rate"] == 0.0
    assert out["budget_energy_J"] == pytest.approx(df["energy_J"].median())
    assert E.budget_metrics(df, pred.rename(columns=str.upper), "energy_J", 1.0) == {}
    assert E.budget_metrics(df, pred, "energy_J", float("nan")) == {}


def test_prediction_metrics_names_and_regimes():
    df = linear_dataset()
    pred = pd.DataFrame({"pred_latency_ms": df["latency_ms"] + 1.0})
    m = E.prediction_metrics(df, pred, "test", ("peak_memory_MB", "latency_ms"))
    assert m["test_latency_ms_mae"] == pytest.approx(1.0)
    assert "test_peak_memory_MB_mae" not in m  # not predicted: skipped
    assert m["test_low_batch_n"] == float((df["batch_size"] <= 8).sum())
    assert m["test_large_batch_n"] == float((df["batch_size"] > 16).sum())
    assert m["test_high_load_n"] == float(((df["avg_sm_util"] > 65) | (df["avg_mem_util"] > 65)).sum())
    for r in E.REGIMES:
        assert m[f"test_{r}_latency_ms_mae"] == pytest.approx(1.0)
    assert not any(k.startswith("test_low") for k in E.prediction_metrics(df, pred, regimes=False))


def test_residual_spearman():
    df = linear_dataset(48)
    # residual = measured - predicted grows with utilization: rho = +1 overall and in every regime
    pred = pd.DataFrame({"pred_latency_ms": df["latency_ms"] - df["avg_sm_util"] / 10})
    out = E.residual_spearman(df, pred, targets=("latency_ms",))
    assert out["resid_spearman_sm_overall_latency_ms"] == pytest.approx(1.0)
    assert out["resid_spearman_sm_low_batch_latency_ms"] == pytest.approx(1.0)
    # opposite sign: -1
    pred = pd.DataFrame({"pred_latency_ms": df["latency_ms"] + df["avg_sm_util"] / 10})
    out = E.residual_spearman(df, pred, targets=("latency_ms",))
    assert out["resid_spearman_sm_overall_latency_ms"] == pytest.approx(-1.0)
    # no telemetry: NaN, not an error
    out = E.residual_spearman(df.drop(columns=["avg_sm_util"]), pred, targets=("latency_ms",))
    assert np.isnan(out["resid_spearman_sm_overall_latency_ms"])


def test_leave_one_batch_tier_out_with_b1():
    df = linear_dataset(80)
    out, model = E.leave_one_batch_tier_out(FlopsLinear(), df, ["peak_memory_MB", "latency_ms"],
                                            max_batch=8, min_rows=10)
    assert out["lobo_n_train"] == float((df["batch_size"] > 8).sum())
    assert out["lobo_n_test"] == float((df["batch_size"] <= 8).sum())
    assert out["lobo_max_batch"] == 8.0
    # the targets are exactly linear in flops: the linear baseline transfers across batch tiers
    assert out["lobo_latency_ms_r2"] == pytest.approx(1.0) and out["lobo_peak_memory_MB_mae"] < 1e-6
    assert model.targets_ == ["peak_memory_MB", "latency_ms"]
    assert E.leave_one_batch_tier_out(FlopsLinear(), df, ["latency_ms"], min_rows=1000) == ({}, None)


def test_baselines_b1_b2():
    df = linear_dataset(60)
    b1 = FlopsLinear().fit(df, df[["peak_memory_MB", "energy_J", "latency_ms"]])
    p = b1.predict(df)
    assert list(p.columns) == ["pred_peak_memory_MB", "pred_energy_J", "pred_latency_ms"]
    np.testing.assert_allclose(p["pred_latency_ms"], df["latency_ms"])
    b2 = LatencyEnergyProxy().fit(df, df["energy_J"])
    assert b2.model_.coef_[0] == pytest.approx(3.0) and b2.model_.intercept_ == pytest.approx(1.0)
    m = E.baseline_metrics(b1, b2, df)
    assert m["b1_latency_ms_r2"] == pytest.approx(1.0) and m["b2_energy_J_r2"] == pytest.approx(1.0)
    assert not any(k.startswith("b2_latency") for k in m)
    # B2 needs measured latency at prediction time; rows without it get NaN
    q = b2.predict(df.assign(latency_ms=np.where(df.index < 5, np.nan, df["latency_ms"])))
    assert q["pred_energy_J"].isna().sum() == 5
    with pytest.raises(DatasetError, match="flops"):
        FlopsLinear().fit(df.drop(columns=["flops"]), df[["latency_ms"]])
    with pytest.raises(DatasetError, match="no target"):
        FlopsLinear().fit(df, df[["energy_J"]] * np.nan)
    with pytest.raises(DatasetError, match="energy_J"):
        LatencyEnergyProxy().fit(df, df["energy_J"] * np.nan)


def test_results_table():
    m = {"test_latency_ms_r2": 0.91234, "test_latency_ms_mae": 1.5, "test_latency_ms_mape": 4.2,
         "b1_latency_ms_r2": 0.5, "lobo_latency_ms_r2": float("nan")}
    table = E.results_table(m)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["target", "CARB", "R2"] and len(lines) == 2
    assert lines[1].startswith("latency_ms") and "0.9123" in lines[1] and "0.5000" in lines[1]
    assert lines[1].rstrip().endswith("-")  # NaN LOBO shown as '-'


def test_refits_without_rows_are_skipped_with_one_line_each():
    """Small data: a leave-out split whose refit finds too few rows, and a batch cut with too few rows on
    one side, each give one line and no metrics; nothing raises."""
    from carb.analysis.assess import lobo_or_skip
    from carb.analysis.extrapolation import Split, evaluate_splits

    from sklearn.base import BaseEstimator

    class TooSmall(BaseEstimator):
        def fit(self, X, y):
            raise DatasetError(f"too few rows to fit the cascade: {len(X)} rows, need at least 99")

    df = linear_dataset(40)
    lines: list[str] = []
    big = df["batch_size"].to_numpy() > 16
    table = evaluate_splits(TooSmall, df, [Split("batch", ~big, big, "train batch <= 16")], ["latency_ms"],
                            note=lines.append)
    assert len(table) == 0 and lines == ["extrapolation split batch skipped: too few rows to fit the cascade: "
                                         "25 rows, need at least 99"]
    lines.clear()
    assert lobo_or_skip(TooSmall(), df, ["latency_ms"], 8, lines.append) == {}
    assert lobo_or_skip(TooSmall(), df, ["latency_ms"], 4, lines.append) == {}
    assert lines == ["leave-one-batch-tier-out skipped: too few rows to fit the cascade: 20 rows, need at least 99",
                     "leave-one-batch-tier-out skipped: 25 rows with batch > 4 and 15 at or below, need at least "
                     "20 on each side"]
