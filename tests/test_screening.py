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


# --------------------------------------------------------------------------- domain and intervals

def _domain_model(grid, **kw):
    """AnalyticModel with a training domain: fp32 only, batch <= 16."""
    from carb.model.domain import fit_domain

    model = AnalyticModel(**kw)
    model.domain_ = fit_domain(grid[(grid["precision"] == "fp32") & (grid["batch_size"] <= 16)])
    return model


def test_outside_flag_drop_only(grid):
    model = _domain_model(grid)
    flag = screen(grid, model, {"energy_J": 20.0})
    s = flag.scored
    assert len(s) == 3072 and {"in_domain", "outside"} <= set(s.columns)
    n_in = int(s["in_domain"].sum())
    assert flag.counts["n_in_domain"] == n_in and flag.counts["n_outside"] == 3072 - n_in and 0 < n_in < 3072
    assert s.loc[~s["in_domain"], "outside"].str.len().gt(0).all()
    assert s.loc[s["in_domain"], "outside"].eq("").all()
    drop = screen(grid, model, {"energy_J": 20.0}, outside="drop")
    assert len(drop.scored) == n_in and drop.scored["in_domain"].all()
    only = screen(grid, model, {"energy_J": 20.0}, outside="only")
    assert len(only.scored) == 3072 - n_in and not only.scored["in_domain"].any()
    assert only.counts["n_in_domain"] == n_in        # counts describe the whole grid
    with pytest.raises(ConfigError, match=r"screen.outside: 'keep' is not allowed; allowed: \['flag', 'drop', 'only'\]"):
        screen(grid, model, {"energy_J": 20.0}, outside="keep")


def test_never_measured_precision_is_never_accept(grid):
    model = _domain_model(grid)
    res = screen(grid, model, {"energy_J": 1e9, "peak_memory_MB": 1e9})   # everything feasible
    s = res.scored
    unseen = s["precision"] != "fp32"
    assert unseen.any()
    assert not s.loc[unseen, "decision"].eq("accept").any()
    assert s.loc[unseen, "decision"].eq("unverified").all()
    inside = ~unseen & s["in_domain"]
    assert s.loc[inside, "decision"].eq("accept").all()
    # outside the training domain (batch > 16) is never accept either: unverified, with the reason
    assert s.loc[~unseen & ~s["in_domain"], "decision"].eq("unverified").all()
    assert res.counts["n_unverified"] == int((~inside).sum())
    assert s.loc[unseen, "decision_reason"].str.contains("precision never measured").all()
    assert s.loc[~s["in_domain"], "decision_reason"].str.contains("outside the training domain").all()


def test_model_without_domain_or_intervals_says_so_once(grid):
    res = screen(grid, AnalyticModel(), {"energy_J": 20.0})
    assert res.scored["in_domain"].all() and res.counts["n_outside"] == 0
    assert len(res.notes) == 2
    assert any("no training domain" in n for n in res.notes)
    assert any("one test-set MAE" in n for n in res.notes)


def test_borderline_follows_the_interval(grid):
    from carb.model.intervals import conformal_bounds

    model = AnalyticModel(mae={"energy_J": 1e-9, "peak_memory_MB": 1e-9, "latency_ms": 1e-9})
    log_ratios = list(np.linspace(-0.2, 0.2, 199))
    lo, hi = conformal_bounds(log_ratios, 0.9)
    model.intervals_ = {"coverage": 0.9, "energy_J": {"lower": lo, "upper": hi, "n": 199, "coverage": 0.9,
                                                       "log_ratios": log_ratios}}
    limit = 20.0
    res = screen(grid, model, {"energy_J": limit})
    s = res.scored
    p, lo_c, hi_c = s["pred_energy_J"], s["lo_energy_J"], s["hi_energy_J"]
    assert np.allclose(lo_c, p * np.exp(lo)) and np.allclose(hi_c, p * np.exp(hi))
    crosses = (lo_c <= limit) & (limit < hi_c)
    assert crosses.any()
    assert (s["decision"] == "borderline").eq(crosses).all()
    assert s.loc[~crosses & (p <= limit), "decision"].eq("accept").all()
    assert not any("MAE" in n for n in res.notes)
    # a wider coverage widens the band
    wide = screen(grid, model, {"energy_J": limit}, coverage=0.99)
    assert wide.counts["n_borderline"] >= res.counts["n_borderline"]
    assert (wide.scored["hi_energy_J"] >= s["hi_energy_J"]).all()


def test_validate_also_reports_the_screening_path(grid):
    model = AnalyticModel()
    model.intervals_ = {"coverage": 0.9, "energy_J": {"lower": -0.1, "upper": 0.1, "n": 100, "coverage": 0.9,
                                                       "log_ratios": []}}
    df = grid.head(50).copy()
    for c, v in (("avg_sm_util", 77.0), ("avg_mem_util", 33.0), ("gpu_temp_C", 40.0), ("kernel_launches", 9.0)):
        df[c] = v
    df["energy_J"] = df["flops"] / 1e9 + 1.0
    out = validate(model, df, {"energy_J": float(df["energy_J"].median())})
    assert out["validate_energy_J_mae"] == pytest.approx(0)
    assert out["validate_screening_energy_J_mae"] == pytest.approx(0)     # energy ignores telemetry here
    assert out["validate_screening_energy_J_interval_coverage"] == 1.0
    assert "validate_screening_energy_J_accuracy" in out


class LaunchBoundModel(AnalyticModel):
    """A GPU-like stand-in: a batch costs a fixed 2 J of launch overhead plus 1 mJ per image (per-batch
    energy hardly moves from batch 1 to 32, per-image energy falls with the batch)."""

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        out = super().predict(X)
        out["pred_energy_J"] = 2.0 + 1e-3 * X["batch_size"].to_numpy(float) * X["depth"].to_numpy(float) / 50
        return out


def test_per_image_objective_ranks_by_cost_per_image(grid):
    model = LaunchBoundModel()
    per_batch = screen(grid, model, {"peak_memory_MB": 500.0})
    per_image = screen(grid, model, {"peak_memory_MB": 500.0}, objective="energy_J_per_image")
    s = per_image.scored
    assert per_image.objective == "energy_J_per_image"
    assert np.allclose(s["pred_energy_J_per_image"], s["pred_energy_J"] / s["batch_size"])
    feas = s[s["feasible"]]
    best = feas.loc[feas["rank"] == 1].iloc[0]
    assert best["pred_energy_J_per_image"] == feas["pred_energy_J_per_image"].min()
    assert per_batch.shortlist.iloc[-1]["batch_size"] == 1          # per batch: batch 1 ranks first
    rest = per_image.shortlist[~per_image.shortlist["pareto"]]
    assert rest["pred_energy_J_per_image"].is_monotonic_increasing and (rest["batch_size"] == 128).all()
    assert per_image.axes == ["energy_J_per_image", "peak_memory_MB"]   # the front trades it against memory
    with pytest.raises(ConfigError, match=r"allowed: \['peak_memory_MB', 'latency_ms', 'latency_ms_per_image'\]"):
        screen(grid, AnalyticModel(targets=("peak_memory_MB", "latency_ms")), objective="energy_J_per_image")


def test_printed_table_shows_the_interval_that_decides_borderline():
    """carb-screen's terminal table: a prediction with its [lo, hi] where the frame has them (what the
    borderline call reads), the plain prediction where it does not (e.g. the per-image objective)."""
    from carb.commands.screen import format_table

    df = pd.DataFrame({"block": ["basic", "bottleneck"], "depth": [14, 50], "pred_energy_J": [0.26, 12.0],
                       "lo_energy_J": [0.198, 9.5], "hi_energy_J": [0.383, 15.2], "pred_energy_J_per_image": [0.002, 0.09],
                       "decision": ["accept", "borderline"]})
    out = format_table(df, ["pred_energy_J", "pred_energy_J_per_image"], ["decision"])
    head, first, second = out.splitlines()
    assert "energy J" in head and "J/image" in head and "lo_energy_J" not in head
    assert "0.26 [0.2,0.38]" in first and "12 [9.5,15]" in second and "0.002 " in first + " "
