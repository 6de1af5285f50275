"""The per-target specialist blend (XGBoost + LightGBM + ExtraTrees) and scikit-learn's estimator checks."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from carb.model.ensemble import BlendedRegressor, simplex_weights

TINY = dict(xgb={"n_estimators": 15, "max_depth": 3}, lgbm={"n_estimators": 15, "num_leaves": 7, "min_child_samples": 2},
            et={"n_estimators": 10}, probe_estimators=10, n_jobs=1)


def data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.1, 3, (n, 4))
    y = np.exp(X[:, 0]) * X[:, 1] + 0.2 * X[:, 2] + rng.normal(0, 0.02, n) + 0.5
    return X, y


def test_fit_predict_weights():
    X, y = data()
    m = BlendedRegressor(**TINY).fit(X[:200], y[:200], X[200:], y[200:])
    assert m.predict(X).shape == (300,)
    w = m.weights_by_member()
    assert set(w) == {"xgb", "lgbm", "et"} and min(w.values()) >= 0 and sum(w.values()) == pytest.approx(1)
    assert m.val_mae_ <= max(m.member_val_mae_.values()) + 1e-9
    assert isinstance(m.log_target_, bool) and set(m.probe_val_mae_) == {"raw", "log"}
    assert m.log_target_ == (m.probe_val_mae_["log"] < m.probe_val_mae_["raw"])


def test_deterministic():
    X, y = data()
    a = BlendedRegressor(**TINY, random_state=3).fit(X, y).predict(X)
    b = BlendedRegressor(**TINY, random_state=3).fit(X, y).predict(X)
    assert np.array_equal(a, b)


def test_simplex_weights_recover_mixture():
    rng = np.random.default_rng(1)
    P = rng.normal(size=(500, 3))
    y = P @ np.array([0.7, 0.3, 0.0])
    w = simplex_weights(P, y)
    assert np.allclose(w, [0.7, 0.3, 0.0], atol=1e-3)


def test_bad_params():
    X, y = data(50)
    with pytest.raises(ValueError, match="members"):
        BlendedRegressor(**TINY, members=("xgb", "catboost")).fit(X, y)
    with pytest.raises(ValueError, match="weights"):
        BlendedRegressor(**TINY, weights=[1.0]).fit(X, y)


@parametrize_with_checks([BlendedRegressor(**{**TINY, "log_target": False}),
                          BlendedRegressor(**TINY)])
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.parametrize("params", [
    {"n_estimators": 30, "max_features": 1.0, "min_samples_leaf": 2, "bootstrap": False, "random_state": 0},
    {"n_estimators": 7, "max_features": 0.5, "min_samples_leaf": 1, "bootstrap": True, "random_state": 3},
    {"n_estimators": 5, "max_depth": 4, "random_state": None, "n_jobs": 2},
])
def test_lean_extra_trees_grow_the_same_forest_as_scikit_learn(params):
    from sklearn.base import clone
    from sklearn.ensemble import ExtraTreesRegressor

    from carb.model.ensemble import LeanExtraTrees

    rng = np.random.default_rng(1)
    X, y = rng.random((300, 6)), rng.random(300)
    if params["random_state"] is None:   # an unseeded forest differs run to run: compare the seeds drawn instead
        np.random.seed(5)
        a = ExtraTreesRegressor(**params).fit(X, y)
        np.random.seed(5)
        b = LeanExtraTrees(**params).fit(X, y)
    else:
        a, b = ExtraTreesRegressor(**params).fit(X, y), LeanExtraTrees(**params).fit(X, y)
    assert [t.random_state for t in a.estimators_] == [t.random_state for t in b.estimators_]
    assert [t.get_params() for t in a.estimators_] == [t.get_params() for t in b.estimators_]
    a.n_jobs = b.n_jobs = 1   # threads add the trees' predictions in any order: compare one-thread sums
    assert np.array_equal(a.predict(X), b.predict(X))
    assert "_tree_params" not in vars(b) and type(clone(b)) is LeanExtraTrees
