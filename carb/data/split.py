"""The stratified train/validation/test split of one device's dataset (by batch tier and depth tier).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from carb.data.tiers import batch_tier, strata_key
from carb.errors import DatasetError


@dataclass(frozen=True)
class Split:
    """Row-index partition of a dataset (positions into the frame passed to :func:`split_dataset`)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def frames(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        return (df.iloc[self.train].reset_index(drop=True), df.iloc[self.val].reset_index(drop=True),
                df.iloc[self.test].reset_index(drop=True))


def split_dataset(df: pd.DataFrame, seed: int = 0, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
                  min_rows: int = 20) -> Split:
    """Seeded stratified train/val/test split on :func:`strata_key`.

    Within each stratum rows are shuffled with ``seed`` and cut at the fractions (rounded), so every
    regime is represented proportionally; strata with fewer than 4 rows are pooled by batch tier, and
    what is still below 4 rows is pooled together. Raises :class:`DatasetError` when the frame has fewer
    than ``min_rows`` rows or the validation/test part would be empty.
    """
    n = len(df)
    if n < min_rows:
        raise DatasetError(f"too few rows for a stratified {fractions} split: {n} rows, need at least "
                           f"{min_rows}")
    if abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) < 0:
        raise DatasetError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    key = pd.Series(strata_key(df))
    coarse = pd.Series(batch_tier(df["batch_size"]))
    counts = key.map(key.value_counts())
    key = key.where(counts >= 4, coarse)
    counts = key.map(key.value_counts())
    key = key.where(counts >= 4, "pooled")
    rng = np.random.default_rng(seed)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    for k in sorted(key.unique()):
        idx = np.flatnonzero((key == k).to_numpy())
        rng.shuffle(idx)
        m = len(idx)
        n_val = int(round(fractions[1] * m))
        n_test = int(round(fractions[2] * m))
        n_train = m - n_val - n_test
        parts[0].extend(idx[:n_train])
        parts[1].extend(idx[n_train:n_train + n_val])
        parts[2].extend(idx[n_train + n_val:])
    tr, va, te = (np.sort(np.array(p, dtype=int)) for p in parts)
    if len(va) == 0 or len(te) == 0:
        raise DatasetError(f"too few rows per stratum for a {fractions} split: validation has {len(va)}, "
                           f"test {len(te)} rows")
    return Split(tr, va, te)
