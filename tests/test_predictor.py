"""The Python API (carb.load_model(...).predict(knobs)): knobs in, predictions, intervals, domain flags and
decision inputs out in one call, as carb-screen computes them; on a test-only analytic model."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.predictor import Predictor
from carb.analysis.screening import screen
from carb.design.arch import ArchConfig
from carb.design.features import grid_features
from carb.errors import ConfigError
from carb.model.domain import fit_domain
from carb.model.intervals import conformal_bounds
from tests.test_screening import AnalyticModel

KNOBS = pd.DataFrame({"block": ["basic", "basic", "bottleneck", "basic"], "depth": [18, 34, 50, 18],
                      "width_mult": [1.0, 0.5, 1.0, 1.0], "input_size": [64, 64, 128, 64],
                      "batch_size": [8, 8, 16, 128], "precision": ["fp32", "fp32", "fp32", "fp16"],
                      "early_downsample": [True, True, True, True], "top1": [0.70, 0.73, 0.76, 0.70]},
                     index=[10, 11, 12, 13])


def _calibration(n: int) -> dict:
    r = list(np.linspace(-0.2, 0.2, n))
    lo, hi = conformal_bounds(r, 0.9)
    entry = {"lower": lo, "upper": hi, "n": n, "coverage": 0.9, "log_ratios": r}
    return {"coverage": 0.9, "energy_J": dict(entry), "latency_ms": dict(entry), "peak_memory_MB": dict(entry)}


@pytest.fixture
def model():
    m = AnalyticModel()
    m.intervals_ = _calibration(199)
    m.domain_ = fit_domain(grid_features(KNOBS.drop(columns="top1").iloc[:3]))   # fp32, batch <= 16
    return Predictor(m, "models:/test@champion")


def test_predict_takes_knobs_and_returns_one_frame(model):
    out = model.predict(KNOBS)
    assert out.index.tolist() == [10, 11, 12, 13]                          # input order and index
    assert model.predict(KNOBS.set_axis([0, 0, 1, 1]))["top1"].tolist() == KNOBS["top1"].tolist()
    for t in ("energy_J", "latency_ms", "peak_memory_MB"):
        assert (out[f"lo_{t}"] < out[f"pred_{t}"]).all() and (out[f"pred_{t}"] < out[f"hi_{t}"]).all()
    assert out["top1"].tolist() == KNOBS["top1"].tolist()                  # extra columns pass through
    assert out["in_domain"].tolist() == [True, True, True, False]
    assert "precision fp16" in out.loc[13, "outside"] and out.loc[13, "never_measured"]
    assert not out["unbounded"].any()
    assert "flops" not in out and "avg_sm_util" not in out                  # no feature columns by default
    assert "flops" in model.predict(KNOBS, features=True)
    assert "decision" not in out                                            # no budget, no decision
    # the fitted attributes read through; the cascade is there for feature-level work
    assert model.targets_ == model.cascade.targets_ and "test@champion" in repr(model)


def test_predict_with_a_budget_decides_as_carb_screen_does(model):
    budget = {"energy_J": 1.5, "latency_ms": 5.0}
    out = model.predict(KNOBS, budget=budget)
    for c in ("p_within_energy_J", "p_within_latency_ms", "p_feasible", "margin_energy_J", "feasible",
              "decision", "decision_reason"):
        assert c in out, c
    assert out["p_feasible"].between(0, 1).all()
    assert np.allclose(out["p_feasible"], out["p_within_energy_J"] * out["p_within_latency_ms"])
    assert out.loc[13, "decision"] in ("unverified", "reject")               # outside the domain: never accept
    ref = screen(grid_features(KNOBS.drop(columns="top1")), model.cascade, budget).scored
    assert out["decision"].tolist() == ref["decision"].tolist()
    assert np.allclose(out["p_feasible"], ref["p_feasible"])


def test_predict_takes_configs_and_dicts(model):
    a = model.predict([ArchConfig(block="basic", depth=18, input_size=64, batch_size=8)])
    b = model.predict([{"block": "basic", "depth": 18, "input_size": 64, "batch_size": 8}])
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 1 and a["pred_energy_J"].iloc[0] > 0


def test_unbounded_interval_is_flagged_and_never_accepted():
    m = AnalyticModel()
    m.intervals_ = _calibration(9)      # too few rows for a finite 90 % interval
    out = Predictor(m).predict(KNOBS.iloc[:2], budget={"energy_J": 1e6})
    assert out["unbounded"].all() and np.isinf(out["hi_energy_J"]).all()
    assert out["decision"].eq("unverified").all()
    assert out["decision_reason"].str.contains("energy_J interval unbounded").all()
    full = Predictor(m).predict(KNOBS.iloc[:2], features=True)   # one flag, the one intervals set per target
    flags = full.filter(like="interval_unbounded_").to_numpy(dtype=bool)
    assert flags.shape[1] >= 1 and (full["unbounded"].to_numpy() == flags.any(axis=1)).all()


def test_bad_input_is_a_config_error(model):
    with pytest.raises(ConfigError, match="block"):
        model.predict(KNOBS.assign(block="dense"))
    with pytest.raises(ConfigError, match="screen.budget.power_W"):
        model.predict(KNOBS, budget={"power_W": 3})


def test_screening_functions_take_what_load_model_returns(model):
    """The route the README showed before (featurize, then score) keeps working with a Predictor."""
    from carb.analysis.screening import score

    F = grid_features(KNOBS.drop(columns="top1"))
    pd.testing.assert_frame_equal(score(model, F), score(model.cascade, F))
    a = screen(F, model, {"energy_J": 1.5}).scored
    b = screen(F, model.cascade, {"energy_J": 1.5}).scored
    assert a["decision"].tolist() == b["decision"].tolist()
