"""Decisions a reader can trust (issue 42, item 3): an ``unverified`` candidate is never on the Pareto front
and its probability is unknown (NaN, shown ``?``), not a confident 97 %; a percentage given for a fraction
column (``screen.require.top1=76``) is read as 0.76 with one line saying so, or refused with the unit."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_screening import AnalyticModel

from carb.analysis.screening import screen
from carb.commands.screen_table import format_table
from carb.design.features import grid_features
from carb.design.space import load_space
from carb.errors import ConfigError


@pytest.fixture(scope="module")
def grid():
    return grid_features(load_space("screening"))


def _calibrated_domain_model(grid):
    """The analytic model with a training domain (fp32, batch <= 16) and a calibration of every target."""
    from carb.model.domain import fit_domain
    from carb.model.intervals import conformal_bounds

    model = AnalyticModel()
    model.domain_ = fit_domain(grid[(grid["precision"] == "fp32") & (grid["batch_size"] <= 16)])
    r = list(np.linspace(-0.2, 0.2, 199))
    lo, hi = conformal_bounds(r, 0.9)
    model.intervals_ = {"coverage": 0.9, **{t: {"lower": lo, "upper": hi, "n": 199, "coverage": 0.9,
                                                "log_ratios": r} for t in model.targets_}}
    return model


def test_unverified_is_never_on_the_front_and_its_probability_is_unknown(grid):
    model = _calibrated_domain_model(grid)
    res = screen(grid, model, {"energy_J": 30.0, "latency_ms": 20.0})
    s = res.scored
    unv = s["decision"] == "unverified"
    assert unv.any() and (s["decision"] == "accept").any()
    assert not s.loc[unv, "pareto"].any()                     # before: unverified rows sat on the front
    assert s["pareto"].any() and s.loc[s["pareto"], "decision"].isin(["accept", "borderline"]).all()
    # the front of the verified rows alone: the unverified ones do not push a verified row off it
    ok = s["feasible"] & ~unv
    from carb.analysis.scale import pareto_mask

    v = s.loc[ok, ["pred_energy_J", "pred_peak_memory_MB"]].to_numpy()
    assert s.loc[ok, "pareto"].to_numpy().tolist() == pareto_mask(v).tolist()
    # the probability of an unverified row is unknown, not a confident number
    assert s.loc[unv, "p_feasible"].isna().all() and s.loc[unv, "p_within_energy_J"].isna().all()
    assert s.loc[~unv & (s["decision"] != "reject"), "p_feasible"].notna().all()
    table = format_table(s[unv].head(3), ["pred_energy_J"])
    p_col = table.splitlines()[0].split().index("P")
    assert all(line.split()[p_col] == "?" for line in table.splitlines()[1:])


def test_a_row_made_unverified_by_a_missing_requirement_value_has_no_probability(grid):
    model = _calibrated_domain_model(grid)
    g = grid.assign(top1=np.where(grid["depth"] == grid["depth"].max(), np.nan, 0.8))
    s = screen(g, model, {"energy_J": 1e9}, require={"top1": 0.5}).scored
    missing = s["top1"].isna()
    assert missing.any() and s.loc[missing, "decision"].eq("unverified").all()
    assert s.loc[missing, "p_feasible"].isna().all() and not s.loc[missing, "pareto"].any()


def test_require_top1_as_a_percentage_is_read_as_a_fraction_with_a_line(grid):
    model = AnalyticModel()
    rng = np.random.default_rng(0)
    g = grid.assign(top1=rng.uniform(0.6, 0.8, len(grid)))
    pct = screen(g, model, {"energy_J": 1e9}, require={"top1": 76})
    frac = screen(g, model, {"energy_J": 1e9}, require={"top1": 0.76})
    assert pct.require == frac.require == {"top1": (0.76, True)}
    assert pct.counts == frac.counts and 0 < pct.counts["n_accept"] < len(g)   # before: 76 rejected every row
    (note,) = [n for n in pct.notes if "top1" in n]
    assert "screen.require.top1=76 read as 0.76" in note and "\n" not in note
    with pytest.raises(ConfigError, match=r"screen.require.top1: 760 is out of range: the column is a fraction"):
        screen(g, model, {"energy_J": 1e9}, require={"top1": 760})
    # a column in percent keeps its limit as given
    pct_col = screen(g.assign(top1=g["top1"] * 100), model, {"energy_J": 1e9}, require={"top1": 76})
    assert pct_col.require == {"top1": (76.0, True)} and not [n for n in pct_col.notes if "top1" in n]
