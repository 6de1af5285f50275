"""Space-filling choice of K configurations to measure (or K rows to use) for few-shot calibration.

Greedy maximin design on standardized cost axes: the first pick is the row nearest the centre, each next
pick the row farthest from everything picked so far. The axes are what moves cost: log FLOPs per batch
(``flops``), log activations per batch (``total_activation_MB``), log parameters, log batch size, input
size and the precision. Deterministic
(ties broken by row order), so a calibration says exactly which configurations it used.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from carb.errors import ConfigError

#: Columns used as axes when present (log-scaled: the ``LOG_AXES``).
AXES: tuple[str, ...] = ("flops", "total_activation_MB", "params", "batch_size", "input_size")
LOG_AXES: frozenset[str] = frozenset({"flops", "total_activation_MB", "params", "batch_size"})


def axes_matrix(frame: pd.DataFrame, axes: Sequence[str] = AXES) -> np.ndarray:
    """The raw cost axes of ``frame`` (n rows x len(axes); log where :data:`LOG_AXES`; 0 for an absent
    column), not standardized: a fixed set of columns for models fitted on one frame and applied to another."""
    cols = []
    for a in axes:
        v = pd.to_numeric(frame[a], errors="coerce").to_numpy(float) if a in frame.columns else np.zeros(len(frame))
        cols.append(np.log(np.maximum(v, 1e-12)) if a in LOG_AXES and a in frame.columns else v)
    M = np.column_stack(cols) if cols else np.zeros((len(frame), 0))
    return np.where(np.isfinite(M), M, 0.0)


def design_matrix(frame: pd.DataFrame, axes: Sequence[str] = AXES) -> np.ndarray:
    """The standardized design matrix (n rows x axes present + one column per precision) of ``frame``."""
    cols = []
    for a in axes:
        if a in frame.columns:
            v = pd.to_numeric(frame[a], errors="coerce").to_numpy(float)
            cols.append(np.log(np.maximum(v, 1e-12)) if a in LOG_AXES else v)
    if "precision" in frame.columns and frame["precision"].nunique() > 1:
        for p in sorted(frame["precision"].astype(str).unique()):
            cols.append((frame["precision"].astype(str) == p).to_numpy(float) * 2.0)
    if not cols:
        return np.zeros((len(frame), 1))
    M = np.column_stack(cols)
    M = np.where(np.isfinite(M), M, np.nanmedian(M, axis=0))
    sd = M.std(axis=0)
    return (M - M.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def space_filling(frame: pd.DataFrame, k: int, axes: Sequence[str] = AXES) -> list[int]:
    """Positions (0-based, in pick order) of ``k`` rows of ``frame`` chosen by greedy maximin.
    Raises :class:`ConfigError` when ``k`` is not in ``1..len(frame)``."""
    n = len(frame)
    if not 1 <= int(k) <= n:
        raise ConfigError(f"k: must be between 1 and the {n} candidate configurations, got {k}")
    M = design_matrix(frame, axes)
    first = int(np.argmin(((M - np.median(M, axis=0)) ** 2).sum(axis=1)))
    picked = [first]
    dist = ((M - M[first]) ** 2).sum(axis=1)
    while len(picked) < int(k):
        dist[picked] = -1.0
        nxt = int(np.argmax(dist))
        picked.append(nxt)
        dist = np.minimum(dist, ((M - M[nxt]) ** 2).sum(axis=1))
    return picked
