"""Screening logic on an analytic test-only model: budget, Pareto, borderline flags, two-stage."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.errors import ConfigError
from carb.analysis.evaluate import budget_classification
from carb.analysis.screening import (check_budget, closest_candidates, pareto_mask, prioritize, screen, spearman, validate)
from carb.design.space import load_space
from carb.design.features import grid_features


class AnalyticModel:
    """Test-only stand-in with the fitted-cascade serving contract (targets_, telemetry_medians_,
    test_mae_, predict -> DataFrame of pred_<target>). Costs are simple functions of the features."""

    def __init__(self, scale: float = 1.0, targets=("peak_memory_MB", "energy_J", "latency_ms"), mae=None):
        self.targets_ = list(targets)
        self.scale = scale
        self.telemetry_medians_ = {"all": {"avg_sm_util": 50.0, "avg_mem_util": 40.0,
                                           "gpu_temp_C": 45.0, "kernel_launches": 100.0},
                                   "small": {"avg_sm_util": 20.0}}
        self.test_mae_ = dict(mae or {t: 1.0 for t in targets})
        self.seen = None

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        self.seen = X
        out = {}
        if "peak_memory_MB" in self.targets_:
            out["pred_peak_memory_MB"] = X["param_size_MB"] + 2 * X["max_activation_MB"]
        if "energy_J" in self.targets_:
            out["pred_energy_J"] = self.scale * X["flops"] / 1e9 + 1.0
        if "latency_ms" in self.targets_:
            out["pred_latency_ms"] = X["flops"] / 2e9 + 0.5
        return pd.DataFrame(out, index=X.index)


@pytest.fixture(scope="module")
def grid():
    return grid_features(load_space("screening"))


def test_pareto_mask_2d_and_nd():
    v = np.array([[1, 5], [2, 3], [3, 4], [4, 1], [2, 3], [5, 5]], dtype=float)
    assert pareto_mask(v).tolist() == [True, True, False, True, True, False]
    rng = np.random.default_rng(0)
    pts = rng.random((300, 2))
    fast = pareto_mask(pts)
    brute = np.array([not any((q <= p).all() and (q < p).any() for q in pts) for p in pts])
    assert (fast == brute).all()
    pts3 = rng.random((200, 3))
    brute3 = np.array([not any((q <= p).all() and (q < p).any() for q in pts3) for p in pts3])
    assert (pareto_mask(pts3) == brute3).all()


def test_prioritize_borderline_accept_reject():
    df = pd.DataFrame({"pred_energy_J": [10.0, 74.5, 75.5, 90.0]})
    out = prioritize(df, {"energy_J": 75.0}, {"energy_J": 1.0})
    assert out["decision"].tolist() == ["accept", "borderline", "borderline", "reject"]
    assert out["feasible"].tolist() == [True, True, False, False]


def test_screen_single_stage(grid):
    model = AnalyticModel()
    res = screen(grid, model, {"energy_J": 20.0, "peak_memory_MB": 200.0})
    s = res.scored
    assert len(s) == 3072
    feas = s["feasible"]
    assert ((s.loc[feas, "pred_energy_J"] <= 20) & (s.loc[feas, "pred_peak_memory_MB"] <= 200)).all()
    assert s.loc[s["pareto"], "feasible"].all() and s["pareto"].sum() >= 1
    assert res.axes == ["energy_J", "peak_memory_MB"] and res.objective == "energy_J"
    # shortlist starts with the front, ordered by the objective
    front = res.shortlist[res.shortlist["pareto"]]
    assert front["pred_energy_J"].is_monotonic_increasing
    # telemetry fixed to the model's medians by batch tier (small tier override, else 'all')
    seen = model.seen
    assert (seen.loc[seen["batch_size"] == 1, "avg_sm_util"] == 20.0).all()
    assert (seen.loc[seen["batch_size"] == 128, "avg_sm_util"] == 50.0).all()
    assert np.allclose(seen["util_product"], seen["avg_sm_util"] * seen["avg_mem_util"])


def test_screen_two_stage(grid):
    src, tgt = AnalyticModel(scale=0.5), AnalyticModel(scale=1.6)
    res = screen(grid, tgt, {"energy_J": 75.0, "peak_memory_MB": 500.0}, source_model=src, top_k=100)
    assert res.stages["stage1_kept"] == 100
    assert res.scored["stage1_kept"].sum() == 100
    assert res.scored.loc[~res.scored["stage1_kept"], "decision"].eq("reject").all()
    assert res.stages["spearman_source_target"] == pytest.approx(1.0)


def test_no_energy_model_ranks_latency(grid):
    model = AnalyticModel(targets=("peak_memory_MB", "latency_ms"))
    res = screen(grid, model, {"latency_ms": 5.0})
    assert res.objective == "latency_ms" and res.axes == ["peak_memory_MB", "latency_ms"]
    with pytest.raises(ConfigError, match="does not predict energy_J"):
        screen(grid, model, {"energy_J": 5.0})


def test_budget_errors():
    with pytest.raises(ConfigError, match="unknown target"):
        check_budget({"power_W": 3}, ["energy_J"])
    with pytest.raises(ConfigError, match="positive"):
        check_budget({"energy_J": -1}, ["energy_J"])


def test_impossible_budget_gives_closest(grid):
    res = screen(grid, AnalyticModel(), {"energy_J": 1e-6})
    assert res.shortlist.empty and not res.scored["feasible"].any()
    close = closest_candidates(res.scored, res.budget, 3)
    assert len(close) == 3 and close["worst_overshoot"].is_monotonic_increasing


def test_budget_classification_rates():
    m = np.array([10, 20, 80, 90, 70.0])
    p = np.array([12, 85, 70, 95, 74.0])
    r = budget_classification(m, p, 75.0)
    assert r["n_false_accept"] == 1 and r["n_false_reject"] == 1
    assert r["accuracy"] == pytest.approx(3 / 5)


def test_validate_uses_measured_telemetry(grid):
    model = AnalyticModel()
    df = grid.head(50).copy()
    for c, v in (("avg_sm_util", 77.0), ("avg_mem_util", 33.0), ("gpu_temp_C", 40.0), ("kernel_launches", 9.0)):
        df[c] = v
    df["energy_J"] = df["flops"] / 1e9 + 1.0
    out = validate(model, df, {"energy_J": float(df["energy_J"].median())})
    assert out["validate_energy_J_accuracy"] == 1.0 and out["validate_energy_J_mae"] == pytest.approx(0)
    assert (model.seen["avg_sm_util"] == 77.0).all()


def test_spearman():
    assert spearman(np.arange(10), np.arange(10) ** 2) == pytest.approx(1.0)
    assert spearman(np.arange(10), -np.arange(10)) == pytest.approx(-1.0)
