"""The stratified train/validation/(calibration/)test split of one device's dataset (by batch tier and
depth tier). Three fractions give train/val/test; four give train/val/cal/test, where ``cal`` is kept
apart for interval calibration (:mod:`carb.model.intervals`) and used for nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass, field

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
    cal: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))

    def frames(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """``(train, val, test)`` frames (rows of ``df`` by position, index reset)."""
        return (df.iloc[self.train].reset_index(drop=True), df.iloc[self.val].reset_index(drop=True),
                df.iloc[self.test].reset_index(drop=True))

    def cal_frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """The calibration rows of ``df`` (empty when the split has no calibration part)."""
        return df.iloc[self.cal].reset_index(drop=True)

    def frames4(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """``(train, val, cal, test)`` frames (``cal`` empty for a three-part split)."""
        train, val, test = self.frames(df)
        return train, val, self.cal_frame(df), test


def split_dataset(df: pd.DataFrame, seed: int = 0, fractions: tuple[float, ...] = (0.7, 0.15, 0.15),
                  min_rows: int = 20) -> Split:
    """Seeded stratified train/val/test split on :func:`strata_key`; with four ``fractions``
    (train, val, cal, test) also a calibration part (``Split.cal``, ``Split.frames4``).

    Within each stratum rows are shuffled with ``seed`` and cut at the fractions (rounded: validation,
    held-out, train the rest), so every regime is represented proportionally; the held-out rows are
    then shuffled and cut into calibration and test, which makes those two exchangeable; strata with fewer than 4 rows are pooled by batch tier, and
    what is still below 4 rows is pooled together. Raises :class:`DatasetError` when the frame has fewer
    than ``min_rows`` rows or the validation/test part would be empty.
    """
    n = len(df)
    if n < min_rows:
        raise DatasetError(f"too few rows for a stratified {fractions} split: {n} rows, need at least "
                           f"{min_rows}")
    fractions = tuple(float(f) for f in fractions)
    if len(fractions) not in (3, 4):
        raise DatasetError(f"split fractions: 3 (train, val, test) or 4 (train, val, cal, test) values, got "
                           f"{list(fractions)}")
    if abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) < 0:
        raise DatasetError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    key = pd.Series(strata_key(df))
    coarse = pd.Series(batch_tier(df["batch_size"]))
    counts = key.map(key.value_counts())
    key = key.where(counts >= 4, coarse)
    counts = key.map(key.value_counts())
    key = key.where(counts >= 4, "pooled")
    rng = np.random.default_rng(seed)
    # per stratum: val and the held-out part (cal + test) rounded, train the rest
    held_share = sum(fractions[2:])
    parts: list[list[int]] = [[], [], []]
    for k in sorted(key.unique()):
        idx = np.flatnonzero((key == k).to_numpy())
        rng.shuffle(idx)
        sizes = [int(round(fractions[1] * len(idx))), int(round(held_share * len(idx)))]
        cuts = np.cumsum([len(idx) - sum(sizes)] + sizes)
        for j, chunk in enumerate(np.split(idx, cuts[:-1])):
            parts[j].extend(chunk)
    held = np.array(parts[2], dtype=int)
    if len(fractions) == 4:
        # cal and test drawn at random from one held-out pool, so they are exchangeable (the premise of
        # conformal coverage). Cut per stratum instead, rounding sends the cal rows to the large strata
        # only (a stratum needs 6 rows to give one at 10 %), and on the H200 its rows erred ~15 % more
        # than the test rows': 96 % coverage at 90 % nominal over 6 seeds.
        rng.shuffle(held)
        n_cal = int(round(fractions[2] / held_share * len(held))) if held_share > 0 else 0
        cal, te = np.sort(held[:n_cal]), np.sort(held[n_cal:])
    else:
        cal, te = np.zeros(0, dtype=int), np.sort(held)
    tr, va = np.sort(np.array(parts[0], dtype=int)), np.sort(np.array(parts[1], dtype=int))
    if len(va) == 0 or len(te) == 0 or (len(fractions) == 4 and len(cal) == 0):
        raise DatasetError(f"too few rows per stratum for a {fractions} split: validation has {len(va)}, "
                           f"calibration {len(cal)}, test {len(te)} rows")
    return Split(tr, va, te, cal)
