"""carb.model.shrink: a physics stage's correction is pulled toward its prior for rows far from every training
row (a family never measured), chosen by grouped cross-validation; rows without groups are unchanged.
Synthetic rows only (tests/synthetic.py)."""
from __future__ import annotations

import numpy as np
import pytest

from carb.data.schema import TARGETS
from carb.errors import ConfigError
from carb.model.cascade import CarbCascade
from carb.model.shrink import choose, factors, shrink_config
from tests.synthetic import synthetic_dataset

TINY = {"xgb": {"n_estimators": 15, "max_depth": 4},
        "lgbm": {"n_estimators": 15, "num_leaves": 15, "min_child_samples": 3},
        "et": {"n_estimators": 10, "min_samples_leaf": 2}}
#: Radius 1 and full strength only: every row within distance 1 of a training row keeps its whole correction.
FORCED = {"enabled": True, "alphas": [1.0], "radii": [1.0], "min_groups": 3, "folds": 3}


def test_choose_shrinks_where_far_groups_were_corrected_wrongly():
    """Out-of-group corrections right near the other groups (d <= 1) and wrong far away (d = 5): the chosen
    rule keeps the whole correction near and shrinks it far; where every group's correction is right it
    keeps it everywhere (alpha 1, no radius)."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(8), 20)
    far = groups >= 6
    d = np.where(far, 5.0, rng.uniform(0.0, 1.0, len(groups)))
    r = rng.normal(0.3, 0.05, len(groups))
    z = np.where(far, 0.0, r)   # far groups: the prior was right, the correction moves them away
    alpha, radius, rep = choose(z, r, d, groups, [0.0, 0.5, 1.0], [1.0, 2.0, None], 0.0)
    s = factors(d, alpha, radius)
    assert alpha == 1.0 and radius is not None
    assert s[~far].min() == pytest.approx(1.0) and s[far].max() < 0.2
    assert rep["cv_log_mae"] < rep["cv_log_mae_unshrunk"]
    alpha, radius, _ = choose(r, r, d, groups, [0.0, 0.5, 1.0], [1.0, 2.0, None], 0.0)
    assert (alpha, radius) == (1.0, None)


def test_unknown_shrink_key_is_one_line():
    with pytest.raises(ConfigError, match="model.shrink.radius: unknown key; allowed"):
        shrink_config({"radius": 2})


@pytest.fixture(scope="module")
def rows():
    df = synthetic_dataset(220, seed=5).sample(frac=1.0, random_state=0).reset_index(drop=True)
    df["family"] = df["block"].astype(str) + df["depth"].astype(str)
    return df.iloc[:180].reset_index(drop=True), df.iloc[180:].reset_index(drop=True)


def fit(tr, va, shrink):
    """A tiny cascade (memory stage only matters here) fitted on ``tr`` with validation ``va``."""
    return CarbCascade(specialists=TINY, probe_estimators=15, oof_folds=2, n_jobs=1, random_state=0,
                       shrink=shrink).fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])


def out_of_domain(tr):
    """Training rows made unlike every training row: 30x the work, activations and input size."""
    far = tr.head(5).copy()
    for c in ("flops", "total_activation_MB", "max_activation_MB", "input_size"):
        far[c] = far[c] * 30
    return far


def test_an_out_of_domain_row_keeps_closer_to_the_prior(rows):
    """Memory stage of the same cascade with and without shrink (same trees: the shrink is fitted after them):
    training rows (distance 0) predict alike; rows far from every training row move less from the prior."""
    tr, va = rows
    on, off = fit(tr, va, FORCED), fit(tr, va, {"enabled": False})
    t = "peak_memory_MB"
    assert on.shrink_report_[t]["kept"] and not off.shrink_report_[t]["kept"]
    assert on.stages_[t].shrink is not None and off.stages_[t].shrink is None
    p_on, p_off = (m.predict(tr.head(20), targets=[t])[f"pred_{t}"].to_numpy() for m in (on, off))
    assert np.allclose(p_on, p_off, rtol=1e-9)
    far = out_of_domain(tr)
    prior = on.prior_frame(far)[t].to_numpy()
    p_on, p_off = (m.predict(far, targets=[t])[f"pred_{t}"].to_numpy() for m in (on, off))
    moved_on, moved_off = np.abs(np.log(p_on / prior)), np.abs(np.log(p_off / prior))
    assert (moved_off > 1e-3).any()
    assert (moved_on <= moved_off + 1e-12).all() and (moved_on < 0.5 * moved_off).any()


def test_rows_without_families_are_unchanged(rows):
    """ResNet rows without a family column: no shrink is fitted, predictions equal the shrink-free cascade's."""
    tr, va = (f.drop(columns="family") for f in rows)
    on, off = fit(tr, va, FORCED), fit(tr, va, {"enabled": False})
    assert all(s.shrink is None for s in on.stages_.values())
    assert "no 'family' column" in on.shrink_report_["latency_ms"]["reason"]
    assert np.allclose(on.predict(va).to_numpy(), off.predict(va).to_numpy())
