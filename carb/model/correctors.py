"""Regime correctors and the fitted cascade stage that applies them.

A corrector is a small ``HistGradientBoostingRegressor`` on a stage's out-of-fold residuals (in the
stage's fitting space), fitted for one regime: low batch (``batch_size <= 8``) or high load (SM or
memory utilization > 65 %). :class:`Stage` holds one target's blended specialists, its kept
correctors and its prediction floor.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from carb.data.tiers import hardware_stress, low_batch
from carb.errors import ConfigError
from carb.model.ensemble import BlendedRegressor, hist_predict

DEFAULT_CORRECTORS: dict[str, Any] = {
    "low_batch": {"enabled": True, "targets": None},
    "high_load": {"enabled": True, "targets": ["peak_memory_MB"]},
    "model": {"max_iter": 150, "max_depth": 3, "learning_rate": 0.05, "min_samples_leaf": 10,
              "l2_regularization": 1.0},
    "min_rows": 20,
    "min_gain": 0.0,
}
REGIMES = {"low_batch": low_batch, "high_load": hardware_stress}


def inverse_space(log_space: bool):
    """From the fitting space back to target units: ``exp`` in log space, identity otherwise."""
    return np.exp if log_space else (lambda v: v)


def forward_space(log_space: bool):
    """From target units to the fitting space: ``log`` in log space, identity otherwise."""
    return np.log if log_space else (lambda v: v)


def mae(y: np.ndarray, p: np.ndarray) -> float:
    """Mean absolute error (units of ``y``); NaN for no rows."""
    return float(np.mean(np.abs(y - p))) if len(y) else float("nan")


class Design:
    """A prediction's encoded design rows as one float matrix, shape (n, k), with named columns, built once
    (:func:`carb.model.encoding.encode`'s frame) and grown by each stage's prediction column: a stage takes
    its columns by position instead of a pandas column selection per stage and corrector (the same
    numbers). ``names``: the column names in order."""

    def __init__(self, frame: pd.DataFrame, extra: int = 0) -> None:
        self.names = [str(c) for c in frame.columns]
        self._pos = {c: i for i, c in enumerate(self.names)}
        self._values = np.empty((len(frame), len(self.names) + int(extra)))
        self._values[:, : len(self.names)] = frame.to_numpy(dtype=float)

    def __len__(self) -> int:
        return self._values.shape[0]

    def add(self, name: str, values: np.ndarray) -> None:
        """Append (or replace) column ``name`` (n,)."""
        if name not in self._pos:
            if len(self.names) == self._values.shape[1]:
                self._values = np.column_stack([self._values, np.empty(len(self))])
            self._pos[name] = len(self.names)
            self.names.append(name)
        self._values[:, self._pos[name]] = values

    def select(self, columns: list[str]) -> np.ndarray:
        """Columns ``columns`` as a C-ordered float matrix (n, len(columns)); KeyError naming a missing one."""
        return self._values[:, [self._pos[c] for c in columns]]


def _design(D: pd.DataFrame | Design, columns: list[str]) -> np.ndarray:
    """``columns`` of design rows ``D`` (a frame or a :class:`Design`) as a float matrix (n, len(columns))."""
    return D.select(columns) if isinstance(D, Design) else D[columns].to_numpy(float)


@dataclass
class Stage:
    """One fitted cascade stage: the blended specialists, its design columns (base features plus
    upstream predictions), the kept regime correctors and its fitting space."""

    target: str
    columns: list[str]
    model: BlendedRegressor
    log_target: bool
    correctors: list[tuple[str, Any]] = field(default_factory=list)
    #: Smallest value the stage returns (target units): half the smallest positive training target.
    #: Costs are positive; raw-space boosting plus correctors can otherwise extrapolate below zero.
    floor: float = 0.0
    #: Physics prior (:mod:`carb.model.physics`) or None. With a prior the specialists predict the
    #: log-ratio ``log(y / prior)`` and the stage returns ``prior * exp(ratio)``.
    prior: Any = None
    #: :class:`carb.model.shrink.Shrink` or None: how far the correction may move a row from the prior.
    shrink: Any = None

    def base_predict(self, D: pd.DataFrame | Design, X: pd.DataFrame, prior: np.ndarray | None = None) -> np.ndarray:
        """The specialists' prediction in target units, before correctors, for design rows ``D`` (a frame or
        a :class:`Design`); shape (n_rows,). ``prior``: the physics prior of ``X`` where the caller has it
        already (``self.prior.predict(X)``)."""
        raw = self.model.predict_matrix(_design(D, self.columns))
        if self.prior is None:
            return raw
        return (self.prior.predict(X) if prior is None else prior) * np.exp(raw)

    def row_floor(self, X: pd.DataFrame) -> np.ndarray | float:
        """Per-row lower bound (target units): the prior's physical floor (parameter bytes for
        memory) where it has one, else :attr:`floor`."""
        if self.prior is not None and hasattr(self.prior, "floor_MB"):
            return np.maximum(self.prior.floor_MB(X), self.floor)
        return self.floor

    def corrector_input(self, D: pd.DataFrame, base: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Corrector features: the stage's design columns plus its current prediction in the fitting
        space, shape (n_rows, n_columns + 1); ``rows`` (a mask): only those rows, shape (n_selected, ...)."""
        design, z = _design(D, self.columns), forward_space(self.log_target)(base)
        if rows is not None:
            design, z = design[rows], z[rows]
        return np.column_stack([design, z])

    def predict(self, D: pd.DataFrame, X: pd.DataFrame, prior: np.ndarray | None = None) -> np.ndarray:
        """Prediction (target units) for design rows ``D`` (which hold the upstream predictions) of
        raw rows ``X`` (for the regime masks); ``prior``: as :meth:`base_predict`. With a :attr:`shrink` the
        corrected prediction is pulled toward the prior where the rows lie far from the training rows."""
        if self.prior is not None and prior is None:
            prior = self.prior.predict(X)
        pred = self.apply_correctors(D, X, self.base_predict(D, X, prior))
        if self.shrink is not None and prior is not None:
            pred = self.shrink.apply(pred, prior, X)
        return np.maximum(pred, self.row_floor(X))

    def apply_correctors(self, D: pd.DataFrame, X: pd.DataFrame, base: np.ndarray,
                         upto: int | None = None) -> np.ndarray:
        """Apply the kept correctors in order (each sees the prediction corrected so far); each builds its
        input for its regime's rows only."""
        pred = np.asarray(base, dtype=float)
        for name, corr in self.correctors[:upto]:
            mask = REGIMES[name](X)
            if mask.any():
                z = forward_space(self.log_target)(pred).copy()
                z[mask] += hist_predict(corr, self.corrector_input(D, pred, mask))
                pred = inverse_space(self.log_target)(z)
        return pred


def corrector_config(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """:data:`DEFAULT_CORRECTORS` with ``overrides`` merged in (nested dicts key by key). Raises
    :class:`ConfigError` naming an unknown key and the allowed ones."""
    cfg = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in DEFAULT_CORRECTORS.items()}
    for k, v in (overrides or {}).items():
        if k not in cfg:
            raise ConfigError(f"model.correctors.{k}: unknown key; allowed: {list(cfg)}")
        cfg[k] = {**cfg[k], **dict(v)} if isinstance(cfg[k], dict) and isinstance(v, Mapping) else v
    return cfg


def fit_correctors(stage: Stage, ccfg: Mapping[str, Any], train: tuple, val: tuple, has_util: bool,
                   random_state: int = 0) -> tuple[dict[str, dict[str, Any]], np.ndarray, np.ndarray]:
    """Fit the regime correctors of one stage greedily (low batch, then high load), keeping each only
    when it lowers the stage's validation MAE; kept ones are appended to ``stage.correctors``.

    ``train`` / ``val``: ``(D, X, y, measured_mask, base_prediction)`` with ``D`` the design rows,
    ``X`` the raw rows (for the regime masks), ``y`` the target (target units, NaN where unmeasured) and
    the stage's out-of-fold (train) or fitted (validation) predictions. Returns ``(report, train
    predictions, validation predictions)`` after the kept correctors; ``report[regime]`` says whether the
    corrector was kept and why."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    D, X, y, m, cur_oof = train
    Dv, Xv, yv, mv, cur_val = val
    cur_oof, cur_val = np.array(cur_oof, dtype=float), np.array(cur_val, dtype=float)
    t = stage.target
    fwd, inv = forward_space(stage.log_target), inverse_space(stage.log_target)
    report: dict[str, dict[str, Any]] = {}
    for name in ("low_batch", "high_load"):
        spec = ccfg[name]
        wanted = spec.get("targets")
        entry: dict[str, Any] = {"kept": False}
        report[name] = entry
        if not spec.get("enabled", True) or (wanted is not None and t not in list(wanted)):
            entry["reason"] = "not enabled for this target"
            continue
        if name == "high_load" and not has_util:
            entry["reason"] = "feature set has no utilization telemetry"
            continue
        rm, rmv = REGIMES[name](X) & m, REGIMES[name](Xv) & mv
        entry.update(n_train=int(rm.sum()), n_val=int(rmv.sum()))
        if rm.sum() < int(ccfg["min_rows"]) or rmv.sum() == 0:
            entry["reason"] = (f"too few regime rows (train {int(rm.sum())} < {ccfg['min_rows']} or "
                               f"validation {int(rmv.sum())} = 0)")
            continue
        Xc = stage.corrector_input(D, cur_oof)
        resid = fwd(y[rm]) - fwd(cur_oof[rm])
        corr = HistGradientBoostingRegressor(**dict(ccfg["model"]), random_state=random_state)
        corr.fit(Xc[rm], resid)
        before = mae(yv[mv], cur_val[mv])
        zv = fwd(cur_val).copy()
        zv[rmv] += corr.predict(stage.corrector_input(Dv, cur_val)[rmv])
        new_val = inv(zv)
        after = mae(yv[mv], new_val[mv])
        entry.update(val_mae_before=before, val_mae_after=after)
        if after < before * (1.0 - float(ccfg["min_gain"])):
            entry.update(kept=True, reason="lowers validation MAE")
            stage.correctors.append((name, corr))
            z = fwd(cur_oof).copy()
            z[rm] += corr.predict(Xc[rm])
            cur_oof, cur_val = inv(z), new_val
        else:
            entry["reason"] = "does not lower validation MAE"
    return report, cur_oof, cur_val
