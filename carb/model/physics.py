"""Analytical priors of the cascade's stages: what physics says a configuration costs on one device,
with a handful of non-negative coefficients fitted to that device's measurements.

Trees learn a bounded correction and cannot extrapolate; a prior that is linear in the work done
can. Each stage of :class:`carb.model.cascade.CarbCascade` predicts ``prior(x) * exp(r(x))`` where
the ensemble learns the log-ratio ``r = log(y / prior)``; outside the measured range the prior carries
the scaling and the correction stays within what it saw.

Priors (all coefficients >= 0, fitted by non-negative least squares on relative error, so a 1 ms and
a 1 s configuration weigh alike; units of the inputs in MB = 2**20 bytes and fvcore FLOPs):

- :class:`MemoryPrior` (``peak_memory_MB``): ``c0 + c_p * param_size_MB + c_a * max_activation_MB +
  c_i * input_MB``: parameters, the peak live activations (a multiple of the largest layer output,
  which is for the whole batch) and the input batch. The final memory prediction is never below
  the parameter bytes (:meth:`MemoryPrior.floor_MB`).
- :class:`RooflinePrior` (``latency_ms`` and ``energy_J``): a per-device roofline summed over the
  forward, ``c0 + sum_p flops_p / rate_p + c_b * bytes_MB + c_l * n_conv`` with one FLOP rate per
  precision ``p`` (``flops_p`` = flops where the row's precision is ``p``, else 0), a memory term on
  parameter + activation bytes and a per-layer launch cost. For energy the same form reads as
  energy per FLOP per precision, per byte moved, per launch and a static share; a precision never
  measured borrows the rate of the nearest measured one in bits (flagged outside the domain by
  screening).

Every prior is monotone non-decreasing in batch size, FLOPs and activation bytes by construction
(non-negative coefficients on non-decreasing inputs).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import PRECISION_BITS
from carb.errors import DatasetError

#: Raw columns the priors read.
PRIOR_INPUTS: tuple[str, ...] = ("flops", "param_size_MB", "max_activation_MB", "total_activation_MB", "n_conv",
                                 "batch_size", "input_size", "precision")
#: Smallest value a prior returns (target units): costs are positive.
TINY = 1e-9


def _num(X: pd.DataFrame, col: str) -> np.ndarray:
    if col not in X.columns:
        raise DatasetError(f"physics prior needs column {col!r}; the data lacks it")
    return pd.to_numeric(X[col], errors="coerce").to_numpy(float)


def input_MB(X: pd.DataFrame) -> np.ndarray:
    """Bytes of the input batch ``(B, 3, H, H)`` at the row's precision, MB; shape (n,)."""
    bits = X["precision"].astype(str).map(PRECISION_BITS).to_numpy(float)
    size = _num(X, "input_size")
    return _num(X, "batch_size") * 3.0 * size * size * bits / 8.0 / 2.0**20


def nnls_relative(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative ``c`` minimising ``sum(((A @ c) / y - 1) ** 2)``: least squares on relative error.
    A: (n, k) non-negative design, y: (n,) positive targets. Columns are scaled before solving."""
    from scipy.optimize import nnls

    ok = np.isfinite(y) & (y > 0) & np.isfinite(A).all(axis=1)
    if ok.sum() < 2:
        raise DatasetError(f"physics prior: too few measured rows to fit ({int(ok.sum())})")
    Ar = A[ok] / y[ok, None]
    scale = np.sqrt((Ar ** 2).mean(axis=0))
    scale[~(scale > 0)] = 1.0
    c, _ = nnls(Ar / scale, np.ones(int(ok.sum())), maxiter=50 * A.shape[1])
    return c / scale


class _Prior:
    """Shared contract: ``fit(X, y) -> self``; ``predict(X) -> (n,) array`` in target units;
    ``coef_`` the fitted coefficients by name; ``train_mape_`` the prior alone on its training rows."""

    names: tuple[str, ...] = ()

    def design(self, X: pd.DataFrame) -> np.ndarray:
        raise NotImplementedError

    def fit(self, X: pd.DataFrame, y: Any) -> "_Prior":
        yv = np.asarray(y, dtype=float)
        self._learn_columns(X)
        A = self.design(X)
        self.coef_values_ = nnls_relative(A, yv)
        self.coef_ = dict(zip(self.column_names(), map(float, self.coef_values_)))
        ok = np.isfinite(yv) & (yv > 0)
        self.train_mape_ = float(np.mean(np.abs(self.predict(X)[ok] / yv[ok] - 1.0)))
        return self

    def _learn_columns(self, X: pd.DataFrame) -> None:
        """Hook for priors whose design depends on the data (the precisions seen)."""

    def column_names(self) -> list[str]:
        return list(self.names)

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        return np.maximum(self.design(X) @ self.coef_values_, TINY)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, "coef": dict(self.coef_), "train_mape": self.train_mape_}


class MemoryPrior(_Prior):
    """Peak memory (MB) = c0 + c_p * param_size_MB + c_a * max_activation_MB + c_i * input_MB."""

    names = ("const_MB", "per_param_MB", "per_max_activation_MB", "per_input_MB")

    def design(self, X: pd.DataFrame) -> np.ndarray:
        n = len(X)
        return np.column_stack([np.ones(n), _num(X, "param_size_MB"), _num(X, "max_activation_MB"), input_MB(X)])

    @staticmethod
    def floor_MB(X: pd.DataFrame) -> np.ndarray:
        """Parameter bytes (MB): no forward needs less memory than its weights; shape (n,)."""
        return _num(X, "param_size_MB")


class RooflinePrior(_Prior):
    """Cost = c0 + sum_p flops_p * k_p + c_b * (param_size_MB + total_activation_MB) + c_l * n_conv,
    with one FLOP coefficient per precision seen in training (``k_p`` = 1 / rate for latency)."""

    def _learn_columns(self, X: pd.DataFrame) -> None:
        self.precisions_ = sorted(X["precision"].astype(str).unique())

    def column_names(self) -> list[str]:
        return ["const", *[f"per_flop_{p}" for p in self.precisions_], "per_MB", "per_conv"]

    def design(self, X: pd.DataFrame) -> np.ndarray:
        n = len(X)
        flops = _num(X, "flops")
        prec = X["precision"].astype(str).to_numpy()
        cols = [np.ones(n)]
        for p in self.precisions_:
            cols.append(np.where(prec == p, flops, 0.0))
        cols.append(_num(X, "param_size_MB") + _num(X, "total_activation_MB"))
        cols.append(_num(X, "n_conv"))
        return np.column_stack(cols)

    def stand_in(self, precision: str) -> str:
        """The measured precision whose per-FLOP cost an unmeasured one borrows: the nearest in bits
        (ties: the costlier). Nothing in the data says how fast an unmeasured precision runs (on
        this CPU fp16 is 30x slower than fp32, on a GPU with tensor cores it is faster), so
        screening flags such rows as outside the domain."""
        bits = PRECISION_BITS.get(precision, 32)
        k = dict(zip(self.precisions_, self.coef_values_[1:1 + len(self.precisions_)]))
        return min(self.precisions_, key=lambda p: (abs(PRECISION_BITS.get(p, 32) - bits), -k[p]))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Cost per row; a precision not seen in training uses :meth:`stand_in`'s per-FLOP cost."""
        prec = X["precision"].astype(str).to_numpy()
        unseen = ~np.isin(prec, self.precisions_)
        if unseen.any():
            X = X.copy()
            X["precision"] = [self.stand_in(p) if u else p for p, u in zip(prec, unseen)]
        return np.maximum(self.design(X) @ self.coef_values_, TINY)


#: Which prior each target uses.
PRIORS: dict[str, type[_Prior]] = {"peak_memory_MB": MemoryPrior, "energy_J": RooflinePrior,
                                   "latency_ms": RooflinePrior}


def make_prior(target: str) -> _Prior:
    """An unfitted prior for ``target`` (see :data:`PRIORS`)."""
    if target not in PRIORS:
        raise DatasetError(f"no physics prior for target {target!r}; known: {list(PRIORS)}")
    return PRIORS[target]()
