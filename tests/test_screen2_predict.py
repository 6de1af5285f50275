"""The faster prediction path of screening (issue 32 item 3) gives the same numbers: the one-check forest
evaluation equals scikit-learn's own ``predict`` bit for bit, a member of blend weight 0 is skipped without
changing the blend, and a cascade asked for fewer targets (and for its priors) predicts what it predicts in
full."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import ExtraTreesRegressor, RandomForestRegressor

from carb.model.ensemble import BlendedRegressor, forest_predict, member_predict
from tests.test_screenscale_chunks import model  # noqa: F401  (the fitted cascade with intervals)


@pytest.mark.parametrize("cls, kw", [(ExtraTreesRegressor, {"min_samples_leaf": 2}),
                                     (RandomForestRegressor, {"max_depth": 6})])
def test_forest_fast_path_is_sklearn(cls, kw):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6)) * [1, 10, 100, 1e3, 1e-3, 1]
    y = X[:, 0] * 3 + np.sin(X[:, 1]) + rng.normal(size=300)
    est = cls(n_estimators=25, random_state=0, n_jobs=1, **kw).fit(X, y)
    Xt = rng.normal(size=(777, 6)) * [1, 10, 100, 1e3, 1e-3, 1]
    assert np.array_equal(forest_predict(est, Xt), est.predict(Xt))
    assert np.array_equal(member_predict(est, Xt), est.predict(Xt))
    Xn = Xt.copy()
    Xn[::7, 2] = np.nan      # trees fitted without NaN send it right, as sklearn's own predict does
    assert np.array_equal(forest_predict(est, Xn), est.predict(Xn))
    with pytest.raises(ValueError):   # the forest's own input check, once
        forest_predict(est, Xt[:, :5])


def test_zero_weight_member_is_skipped_with_the_same_blend():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 4))
    y = np.exp(X[:, 0] + 0.3 * X[:, 1])
    small = {"n_estimators": 10}
    full = BlendedRegressor(xgb=small, lgbm={**small, "verbose": -1}, et=small, weights=[0.6, 0.4, 0.0],
                            log_target=True, n_jobs=1).fit(X, y)
    assert list(full.weights_) == [0.6, 0.4, 0.0]
    Xt = rng.normal(size=(150, 4))
    expect = np.exp(np.column_stack([full.members_[m].predict(Xt) for m in full.members_]) @ full.weights_)
    calls = []
    et = full.members_["et"]
    et.predict = lambda Z: calls.append(1) or np.zeros(len(Z))   # noqa: E731 (must not be called)
    assert np.array_equal(full.predict(Xt), expect) and not calls


def test_cascade_predicts_fewer_targets_and_hands_out_its_priors(model):  # noqa: F811
    from tests.synthetic import synthetic_dataset

    X = synthetic_dataset(60, seed=11)
    full = model.predict(X)
    priors: dict[str, np.ndarray] = {}
    part = model.predict(X, targets=["energy_J"], priors=priors)
    assert list(part.columns) == ["pred_peak_memory_MB", "pred_energy_J"]
    pd.testing.assert_frame_equal(part, full[part.columns], check_exact=True)
    frame = model.prior_frame(X)
    assert set(priors) == {"peak_memory_MB", "energy_J"} <= set(frame.columns)
    for t, v in priors.items():
        assert np.array_equal(v, frame[t].to_numpy())
    assert list(model.predict(X, targets=["latency_ms"]).columns) == list(full.columns)


def test_members_side_by_side_are_the_same_numbers(model):  # noqa: F811
    """Inside member_threads the blends' members and the telemetry models predict on several threads;
    the predictions are the same, bit for bit."""
    from carb.model.ensemble import member_threads, side_by_side
    from carb.model.intervals import screening_features
    from tests.synthetic import synthetic_dataset

    X = synthetic_dataset(80, seed=12)
    alone = model.predict(X), screening_features(model, X)
    with member_threads(3):
        both = model.predict(X), screening_features(model, X)
        assert side_by_side(lambda v: v * 2, [1, 2, 3]) == [2, 4, 6]   # in order
    pd.testing.assert_frame_equal(alone[0], both[0], check_exact=True)
    pd.testing.assert_frame_equal(alone[1], both[1], check_exact=True)
