"""Regime correctors and the fitted cascade stage that applies them.

A corrector is a small ``HistGradientBoostingRegressor`` on a stage's out-of-fold residuals (in the
stage's fitting space), fitted for one regime: low batch (``batch_size <= 8``) or high load (SM or
memory utilization > 65 %). :class:`Stage` holds one target's blended specialists, its kept
correctors and its prediction floor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from carb.data.tiers import hardware_stress, low_batch
from carb.model.ensemble import BlendedRegressor

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
    return np.exp if log_space else (lambda v: v)


def forward_space(log_space: bool):
    return np.log if log_space else (lambda v: v)


def mae(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean(np.abs(y - p))) if len(y) else float("nan")


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

    def _corrector_input(self, D: pd.DataFrame, base: np.ndarray) -> np.ndarray:
        return np.column_stack([D[self.columns].to_numpy(float), forward_space(self.log_target)(base)])

    def predict(self, D: pd.DataFrame, X: pd.DataFrame) -> np.ndarray:
        """Prediction (target units) for design rows ``D`` (which hold the upstream predictions) of
        raw rows ``X`` (for the regime masks)."""
        base = self.model.predict(D[self.columns])
        return np.maximum(self.apply_correctors(D, X, base), self.floor)

    def apply_correctors(self, D: pd.DataFrame, X: pd.DataFrame, base: np.ndarray,
                         upto: int | None = None) -> np.ndarray:
        """Apply the kept correctors in order (each sees the prediction corrected so far)."""
        pred = np.asarray(base, dtype=float)
        for name, corr in self.correctors[:upto]:
            mask = REGIMES[name](X)
            if mask.any():
                z = forward_space(self.log_target)(pred).copy()
                z[mask] += corr.predict(self._corrector_input(D, pred)[mask])
                pred = inverse_space(self.log_target)(z)
        return pred
