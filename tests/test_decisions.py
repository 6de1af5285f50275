"""Budget decisions (carb.analysis.decisions): every combination of test-made intervals against a budget,
the probability of meeting a budget read off the intervals at all coverages, the joint probability, the
"profile next" list, and the wiring into screen() and the screen config."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from carb.analysis.decisions import (PROB_COVERAGES, add_probabilities, decide, interval_ladder, joint_probability,
                                     prob_within, profile_next)
from carb.model.intervals import conformal_bounds

#: Test-made interval per case for a limit of 10 (target's unit): (lo, pred, hi).
CASES = {"within": (5.0, 7.0, 9.0), "crosses": (8.0, 9.5, 12.0), "over": (11.0, 13.0, 15.0),
         "unbounded": (8.0, 9.0, math.inf), "over_unbounded": (11.0, 20.0, math.inf)}
LIMIT = 10.0


def _row(case_a: str, case_b: str, domain: bool, measured: bool) -> dict:
    (lo_a, p_a, hi_a), (lo_b, p_b, hi_b) = CASES[case_a], CASES[case_b]
    return {"pred_latency_ms": p_a, "lo_latency_ms": lo_a, "hi_latency_ms": hi_a,
            "pred_energy_J": p_b, "lo_energy_J": lo_b, "hi_energy_J": hi_b,
            "in_domain": domain, "never_measured": not measured}


def _expected(cases: tuple[str, str], domain: bool, measured: bool) -> str:
    """The rule written out: certainly over anywhere -> reject; else cannot vouch -> unverified; else all
    certainly within -> accept; else borderline."""
    if any(c.startswith("over") for c in cases):
        return "reject"
    if not domain or not measured or "unbounded" in cases:
        return "unverified"
    return "accept" if all(c == "within" for c in cases) else "borderline"


def test_every_combination_of_intervals_and_flags():
    combos = list(itertools.product(CASES, CASES, [True, False], [True, False]))
    df = pd.DataFrame([_row(*c) for c in combos])
    out = decide(df, {"latency_ms": LIMIT, "energy_J": LIMIT}, {})
    want = [_expected((a, b), d, m) for a, b, d, m in combos]
    assert out["decision"].tolist() == want
    assert set(want) == {"accept", "borderline", "unverified", "reject"}
    # the point prediction still decides `feasible` (what rank and the Pareto front use)
    assert out["feasible"].tolist() == [CASES[a][1] <= LIMIT and CASES[b][1] <= LIMIT for a, b, _, _ in combos]
    assert np.allclose(out["margin_latency_ms"], LIMIT - df["pred_latency_ms"])
    # the reasons name the target and the numbers
    reason = dict(zip(map(tuple, combos), out["decision_reason"]))
    assert reason[("within", "within", True, True)] == ""
    assert reason[("over", "within", True, True)] == "certainly over: latency_ms >= 11 > 10"
    assert reason[("crosses", "within", True, True)] == "latency_ms [8, 12] crosses 10"
    assert reason[("within", "unbounded", True, True)] == "energy_J interval unbounded"
    assert reason[("within", "within", False, False)] == "outside the training domain; precision never measured"


def test_over_on_one_target_rejects_even_when_another_crosses():
    """The issue's case: a latency interval of [3469, 9177] ms against 20 ms is no borderline call."""
    df = pd.DataFrame({"pred_latency_ms": [5600.0], "lo_latency_ms": [3469.0], "hi_latency_ms": [9177.0],
                       "pred_peak_memory_MB": [900.0], "lo_peak_memory_MB": [800.0], "hi_peak_memory_MB": [1100.0]})
    out = decide(df, {"latency_ms": 20.0, "peak_memory_MB": 1024.0}, {})
    assert out["decision"].tolist() == ["reject"]


def test_no_budget_accepts_what_the_model_vouches_for():
    df = pd.DataFrame([_row("within", "within", d, True) for d in (True, False)])
    assert decide(df, {}, {})["decision"].tolist() == ["accept", "unverified"]


def test_without_intervals_one_mae_plays_the_interval():
    df = pd.DataFrame({"pred_energy_J": [10.0, 74.5, 75.5, 90.0]})
    out = decide(df, {"energy_J": 75.0}, {"energy_J": 1.0})
    assert out["decision"].tolist() == ["accept", "borderline", "borderline", "reject"]


def _uniform_calibration(n: int = 199, half_width: float = 0.2) -> dict:
    r = list(np.linspace(-half_width, half_width, n))
    lo, hi = conformal_bounds(r, 0.9)
    return {"coverage": 0.9, "energy_J": {"lower": lo, "upper": hi, "n": n, "coverage": 0.9, "log_ratios": r}}


def _ctx(n: int) -> dict:
    return {"outside": np.zeros(n, bool), "groups": None, "precision": None, "new_arch": np.zeros(n, bool)}


def test_probability_follows_the_calibrated_distribution():
    """Log-ratios uniform on [-0.2, 0.2]: P(measured <= p * e^x) = (x + 0.2) / 0.4 inside the range,
    clipped to the resolution of the widest finite interval outside it."""
    cal = _uniform_calibration()
    pred = pd.DataFrame({"pred_energy_J": [1.0, 2.0]})
    lo, hi = interval_ladder(cal, pred, _ctx(2))["energy_J"]
    assert lo.shape == hi.shape == (2, len(PROB_COVERAGES))
    assert (np.diff(lo, axis=1) <= 0).all() and (np.diff(hi, axis=1) >= 0).all()   # nested
    for x in (-0.15, -0.05, 0.0, 0.1, 0.17):
        p = prob_within(lo, hi, PROB_COVERAGES, math.exp(x))
        assert p[0] == pytest.approx((x + 0.2) / 0.4, abs=0.02)
        assert p[1] < p[0]                         # the same limit is harder for a costlier candidate
    c_max = max(PROB_COVERAGES)
    assert prob_within(lo, hi, PROB_COVERAGES, 100.0)[0] == pytest.approx((1 + c_max) / 2)
    assert prob_within(lo, hi, PROB_COVERAGES, 0.01)[0] == pytest.approx((1 - c_max) / 2)
    limits = np.linspace(0.7, 1.4, 30)
    assert (np.diff([prob_within(lo, hi, PROB_COVERAGES, v)[0] for v in limits]) >= 0).all()


def test_probability_with_a_small_calibration_is_clipped_where_it_ends():
    """19 rows resolve coverages up to 0.9: the probability never claims more than 0.95."""
    cal = _uniform_calibration(n=19)
    lo, hi = interval_ladder(cal, pd.DataFrame({"pred_energy_J": [1.0]}), _ctx(1))["energy_J"]
    assert np.isinf(hi[0, -1]) and np.isfinite(hi[0, PROB_COVERAGES.index(0.9)])
    assert prob_within(lo, hi, PROB_COVERAGES, 1e6)[0] == pytest.approx(0.95)
    none = prob_within(np.zeros((1, 2)), np.full((1, 2), np.inf), (0.5, 0.9), 1.0)
    assert np.isnan(none[0])


def test_add_probabilities_and_joint(grid_model):
    model, df = grid_model
    out = add_probabilities(model, df, {"energy_J": 1.0, "latency_ms": 5.0})
    assert out["p_within_energy_J"].between(0, 1).all()
    assert out["p_within_latency_ms"].isna().all()          # no calibration of latency: no probability
    assert out["p_feasible"].isna().all()
    only = add_probabilities(model, df, {"energy_J": 1.0})
    assert np.allclose(only["p_feasible"], only["p_within_energy_J"])
    # the cheaper the prediction, the likelier within the same budget
    order = np.argsort(only["pred_energy_J"].to_numpy())
    assert (np.diff(only["p_within_energy_J"].to_numpy()[order]) <= 1e-12).all()
    two = pd.DataFrame({"p_within_energy_J": [0.5, 0.9], "p_within_latency_ms": [0.5, 1.0]})
    assert joint_probability(two, {"energy_J": 1, "latency_ms": 1}).tolist() == [0.25, 0.9]


@pytest.fixture
def grid_model():
    class Model:
        intervals_ = _uniform_calibration()
        domain_ = None
        stages_: dict = {}

    df = pd.DataFrame({"pred_energy_J": np.linspace(0.7, 1.4, 15), "pred_latency_ms": np.linspace(1, 9, 15),
                       "precision": "fp32"})
    return Model(), df


def test_profile_next_ranks_borderline_by_probability_times_objective():
    df = pd.DataFrame({"decision": ["borderline", "borderline", "accept", "borderline", "reject", "borderline"],
                       "p_feasible": [0.9, 0.5, 0.99, 0.8, 0.01, np.nan],
                       "obj": [2.0, 1.0, 0.5, 1.0, 0.1, 1.0]})
    nxt = profile_next(df, df["obj"].to_numpy(), 3)
    # scores: 0.9 * 1/2 = 0.45, 0.5 * 1 = 0.5, 0.8 * 1 = 0.8, no probability -> 0.5 * 1 = 0.5
    assert nxt.index.tolist() == [3, 1, 5] and nxt["profile_rank"].tolist() == [1, 2, 3]
    assert nxt["profile_score"].tolist() == pytest.approx([0.8, 0.5, 0.5])
    assert (nxt["decision"] == "borderline").all()
    assert profile_next(df, df["obj"].to_numpy(), 0).empty
    assert profile_next(df.assign(decision="accept"), df["obj"].to_numpy(), 3).empty


def test_screen_gives_probabilities_and_a_short_profile_list():
    from carb.analysis.screening import screen
    from carb.design.features import grid_features
    from carb.design.space import load_space
    from tests.test_screening import AnalyticModel

    grid = grid_features(load_space("screening"))
    model = AnalyticModel()
    model.intervals_ = _uniform_calibration()
    res = screen(grid, model, {"energy_J": 20.0})
    s = res.scored
    border = s["decision"] == "borderline"
    assert border.sum() > 10
    assert len(res.profile) == 10 == res.counts["n_profile_next"]           # short by default
    assert (res.profile["decision"] == "borderline").all()
    assert res.profile["profile_score"].is_monotonic_decreasing
    assert s["profile_rank"].notna().sum() == 10
    assert (s.loc[s["decision"] == "accept", "p_within_energy_J"] >= 0.95 - 1e-9).all()
    assert (s.loc[s["decision"] == "reject", "p_within_energy_J"] <= 0.05 + 1e-9).all()
    assert s.loc[border, "p_feasible"].between(0.05 - 1e-9, 0.95 + 1e-9).all()
    assert len(screen(grid, model, {"energy_J": 20.0}, profile_size=3).profile) == 3


def test_profile_next_is_a_screen_setting():
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.errors import ConfigError

    assert compose("screen").screen.profile_next == 10
    check_config("screen", compose("screen", ["screen.profile_next=0"]))
    with pytest.raises(ConfigError, match="screen.profile_next"):
        check_config("screen", compose("screen", ["screen.profile_next=-1"]))
