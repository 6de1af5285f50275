"""Evaluation metrics on arrays with known answers."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.evaluate import budget_classification, prediction_metrics, regression_metrics, residual_spearman


def test_regression_metrics_known_values():
    r = regression_metrics([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 6.0])
    assert r["mae"] == pytest.approx(0.5) and r["rmse"] == pytest.approx(1.0)
    assert r["mape"] == pytest.approx(12.5) and r["r2"] == pytest.approx(1 - 4 / 5)
    assert np.isnan(regression_metrics([np.nan], [1.0])["mae"])


def test_budget_rates():
    r = budget_classification([10, 20, 80, 90, 70], [12, 85, 70, 95, 74], 75.0)
    assert r["accuracy"] == pytest.approx(0.6)
    assert r["false_accept_rate"] == pytest.approx(0.2) and r["false_reject_rate"] == pytest.approx(0.2)


def test_prediction_metrics_regimes():
    df = pd.DataFrame({"batch_size": [1, 2, 64, 128], "depth": [20, 20, 50, 50], "avg_sm_util": [10, 90, 50, 95],
                       "avg_mem_util": [5, 5, 5, 5], "latency_ms": [1.0, 2.0, 3.0, 4.0]})
    pred = pd.DataFrame({"pred_latency_ms": [1.0, 2.0, 3.0, 5.0]})
    m = prediction_metrics(df, pred, "test", ["latency_ms"])
    assert m["test_latency_ms_mae"] == pytest.approx(0.25)
    assert m["test_low_batch_latency_ms_mae"] == pytest.approx(0.0)
    assert "test_energy_J_mae" not in m  # a target without predictions is not reported as 0


def test_residual_spearman_sign():
    rng = np.random.default_rng(0)
    u = rng.uniform(0, 100, 60)
    df = pd.DataFrame({"batch_size": 32, "depth": 20, "avg_sm_util": u, "avg_mem_util": 10.0,
                       "energy_J": 10 + 0.1 * u})
    pred = pd.DataFrame({"pred_energy_J": np.full(60, 10.0)})
    out = residual_spearman(df, pred, targets=["energy_J"])
    key = next(k for k in out if k.endswith("overall_energy_J"))
    assert out[key] == pytest.approx(1.0)
