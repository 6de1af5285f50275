"""The pieces of one cascade stage that :class:`carb.model.cascade.CarbCascade` fits in turn: its blend of
specialists (configured per target), its physics prior and the space the specialists fit in, and the
out-of-fold predictions that feed the next stage and the regime correctors.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.model_selection import KFold

from carb.errors import ConfigError
from carb.model.ensemble import MEMBERS, BlendedRegressor


def stage_estimator(target: str, specialists: Mapping[str, Mapping[str, Any]] | None,
                    per_target: Mapping[str, Mapping[str, Any]] | None, members: Sequence[str], log_target: Any,
                    probe_estimators: int, n_jobs: int | None, random_state: int) -> BlendedRegressor:
    """The unfitted blend of one stage: ``specialists`` with the target's ``per_target`` overrides
    (the parameters of :class:`carb.model.cascade.CarbCascade`)."""
    base = {m: dict((specialists or {}).get(m) or {}) for m in MEMBERS}
    over = dict((per_target or {}).get(target) or {})
    unknown = set(over) - set(MEMBERS) - {"weights", "log_target"}
    if unknown:
        raise ConfigError(f"model.per_target.{target}: unknown key(s) {sorted(unknown)}; allowed: "
                          f"{list(MEMBERS) + ['weights', 'log_target']}")
    for m in MEMBERS:
        base[m].update(dict(over.get(m) or {}))
    lt = log_target.get(target, "auto") if isinstance(log_target, Mapping) else log_target
    lt = over.get("log_target", lt)
    return BlendedRegressor(xgb=base["xgb"], lgbm=base["lgbm"], et=base["et"], members=tuple(members),
                            weights=over.get("weights"), log_target=lt, probe_estimators=probe_estimators,
                            n_jobs=n_jobs, random_state=random_state)


def fit_prior(target: str, settings: Mapping[str, Any] | None, X: pd.DataFrame, X_val: pd.DataFrame,
              y: np.ndarray, y_val: np.ndarray, measured: np.ndarray, latency: np.ndarray | None):
    """``(prior, z, z_val)``: the target's physics prior (:func:`carb.model.physics.make_prior` with
    ``settings``) fitted on the ``measured`` training rows (the energy prior also reads their measured
    ``latency``, ms, shape (n,)), and what the specialists fit: ``log(y / prior)`` on the training and
    validation rows."""
    from carb.model.physics import make_prior

    prior = make_prior(target, **dict(settings or {}))
    fit_kw = {"latency": latency[measured]} if (target == "energy_J" and latency is not None) else {}
    prior = prior.fit(X.loc[measured], y[measured], **fit_kw)
    return prior, np.log(y / prior.predict(X)), np.log(y_val / prior.predict(X_val))


def to_units(prior, r: np.ndarray, X: pd.DataFrame) -> np.ndarray:
    """A stage's fitting-space output ``r`` in target units: ``prior(X) * exp(r)`` with a physics prior,
    ``r`` itself without one (None)."""
    return r if prior is None else prior.predict(X) * np.exp(r)


def out_of_fold(est: BlendedRegressor, model: BlendedRegressor, D: pd.DataFrame, cols: list[str], z: np.ndarray,
                measured: np.ndarray, folds: int, random_state: int) -> np.ndarray:
    """Out-of-fold predictions (fitting space, shape (n,)) of a stage on its ``measured`` training rows:
    seeded ``KFold`` refits of ``est`` with the fitted ``model``'s weights and space; the other rows get
    ``model``'s own predictions."""
    base_oof = model.predict(D[cols])
    rows = np.flatnonzero(measured)
    k = int(min(max(2, folds), len(rows)))
    fold_est = clone(est).set_params(weights=list(model.weights_), log_target=bool(model.log_target_))
    for tr_i, te_i in KFold(n_splits=k, shuffle=True, random_state=random_state).split(rows):
        fm = clone(fold_est).fit(D.iloc[rows[tr_i]][cols], z[rows[tr_i]])
        base_oof[rows[te_i]] = fm.predict(D.iloc[rows[te_i]][cols])
    return base_oof
