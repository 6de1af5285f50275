"""The two baselines reported beside CARB (paper Table 6).

- B1 :class:`FlopsLinear`: per target, ordinary least squares on ``flops`` alone (``y = a * flops + b``),
  "compute volume is all you need".
- B2 :class:`LatencyEnergyProxy`: energy as a linear function of the *measured* latency
  (``energy_J = a * latency_ms + b``), "latency stands in for energy". It needs measured latency at
  prediction time, so it is an upper bound on what a latency proxy can do, and it exists only where
  energy is measured.

Both take raw dataset frames and return ``pred_<target>`` DataFrames, like the cascade.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import LinearRegression
from sklearn.utils.validation import check_is_fitted

from carb.data.schema import TARGETS
from carb.errors import DatasetError
from carb.model.encoding import pred_name


def _column(X: pd.DataFrame, feature: str, who: str) -> np.ndarray:
    """``X[feature]`` as floats (NaN where not numeric); a one-line :class:`DatasetError` when absent."""
    if not isinstance(X, pd.DataFrame) or feature not in X.columns:
        raise DatasetError(f"{who} needs column {feature!r}, which the data lacks")
    return pd.to_numeric(X[feature], errors="coerce").to_numpy(float)


def _predict_finite(model: LinearRegression, x: np.ndarray) -> np.ndarray:
    """``model`` on the finite entries of ``x`` (n,); NaN elsewhere."""
    out = np.full(len(x), np.nan)
    ok = np.isfinite(x)
    if ok.any():
        out[ok] = model.predict(x[ok].reshape(-1, 1))
    return out


def _xy(df: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """Finite (x, y) pairs: x as (n, 1), y as (n,)."""
    xv = pd.to_numeric(df[x], errors="coerce").to_numpy(float)
    yv = pd.to_numeric(df[y], errors="coerce").to_numpy(float)
    ok = np.isfinite(xv) & np.isfinite(yv)
    return xv[ok].reshape(-1, 1), yv[ok]


class FlopsLinear(RegressorMixin, BaseEstimator):
    """B1: one linear regression on ``flops`` per target.

    ``fit(X, y)``: X a frame with ``flops``; y a DataFrame of targets (NaN rows skipped per target,
    all-NaN targets skipped). Fitted: ``targets_``, ``models_`` (target -> LinearRegression)."""

    def __init__(self, feature: str = "flops"):
        self.feature = feature

    def fit(self, X: pd.DataFrame, y: pd.DataFrame) -> FlopsLinear:
        if self.feature not in X.columns:
            raise DatasetError(f"B1 needs column {self.feature!r}, which the data lacks")
        y = y.to_frame() if isinstance(y, pd.Series) else y
        self.models_ = {}
        for t in [t for t in TARGETS if t in y.columns]:
            f = pd.DataFrame({self.feature: X[self.feature].to_numpy(),
                              t: y[t].to_numpy()})
            xv, yv = _xy(f, self.feature, t)
            if len(yv) >= 2:
                self.models_[t] = LinearRegression().fit(xv, yv)
        if not self.models_:
            raise DatasetError("B1: no target with at least 2 measured rows")
        self.targets_ = list(self.models_)
        return self

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        check_is_fitted(self, "models_")
        x = _column(X, self.feature, "B1")
        return pd.DataFrame({pred_name(t): _predict_finite(m, x) for t, m in self.models_.items()}, index=X.index)


class LatencyEnergyProxy(RegressorMixin, BaseEstimator):
    """B2: ``energy_J = a * latency_ms + b`` fitted on measured latency (the latency-as-energy proxy).

    ``fit(X, y)``: X a frame with measured ``latency_ms``; y a Series/DataFrame with ``energy_J``.
    Fitted: ``model_``, ``targets_ == ["energy_J"]``."""

    def __init__(self, feature: str = "latency_ms"):
        self.feature = feature

    def fit(self, X: pd.DataFrame, y) -> LatencyEnergyProxy:
        if self.feature not in X.columns:
            raise DatasetError(f"B2 needs column {self.feature!r}, which the data lacks")
        e = y["energy_J"] if isinstance(y, pd.DataFrame) else y
        f = pd.DataFrame({self.feature: X[self.feature].to_numpy(), "energy_J": np.asarray(e, dtype=float)})
        xv, yv = _xy(f, self.feature, "energy_J")
        if len(yv) < 2:
            raise DatasetError("B2: needs at least 2 rows with measured energy_J and latency_ms")
        self.model_ = LinearRegression().fit(xv, yv)
        self.targets_ = ["energy_J"]
        return self

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        check_is_fitted(self, "model_")
        x = _column(X, self.feature, "B2")
        return pd.DataFrame({pred_name("energy_J"): _predict_finite(self.model_, x)}, index=X.index)
