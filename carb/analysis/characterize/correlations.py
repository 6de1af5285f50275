"""Feature correlations (paper Table 4): Pearson |r| of every numeric feature with each target.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.characterize.common import (
    NOT_MEASURED,
    SORT_PREFERENCE,
    is_measured,
    numeric,
    ok_only,
)
from carb.data.schema import INTERACTION_FEATURES, RUNTIME_FEATURES, TARGETS
from carb.design.arch import PRECISION_BITS
from carb.design.features import STATIC_FEATURES
from carb.design.identity import BLOCK, DEPTH, STEM, WIDTH


def numeric_features(df: pd.DataFrame) -> pd.DataFrame:
    """Numeric feature matrix for correlations: numeric knobs, ``precision_bits`` (32/16),
    ``is_bottleneck`` (0/1), ``early_downsample`` (0/1), the static, runtime and interaction features
    present. Targets and measurement-record columns are not features."""
    ok = ok_only(df)
    out = pd.DataFrame(index=ok.index)
    for c in (DEPTH, WIDTH, "input_size", "batch_size"):
        if c in ok.columns:
            out[c] = numeric(ok, c)
    if "precision" in ok.columns:
        out["precision_bits"] = ok["precision"].map(PRECISION_BITS).astype("float64")
    if BLOCK in ok.columns:
        out["is_bottleneck"] = (ok[BLOCK] == "bottleneck").astype("float64").where(ok[BLOCK].notna())
    if STEM in ok.columns:
        out[STEM] = pd.to_numeric(ok[STEM].astype(object).map(
            lambda v: float(bool(v)) if isinstance(v, (bool, np.bool_)) else np.nan), errors="coerce")
    for c in (*STATIC_FEATURES, *RUNTIME_FEATURES, *INTERACTION_FEATURES):
        if c in ok.columns:
            out[c] = numeric(ok, c)
    return out


def _pearson(x: np.ndarray, y: np.ndarray) -> tuple[float, int]:
    m = np.isfinite(x) & np.isfinite(y)
    n = int(m.sum())
    if n < 3 or np.std(x[m]) == 0 or np.std(y[m]) == 0:
        return np.nan, n
    return float(np.corrcoef(x[m], y[m])[0, 1]), n


def feature_correlations(df: pd.DataFrame, targets: Sequence[str] = TARGETS,
                         sort_by: str | None = None) -> pd.DataFrame:
    """Pearson |r| of every numeric feature (:func:`numeric_features`) with each target.

    Wide table, one row per feature: ``feature``, ``feature_status`` ('ok' | 'not measured' |
    'constant'), then ``abs_r_<target>`` per target: a float, or the string 'not measured' in every
    row for a target the dataset lacks. Sorted by |r| with ``sort_by`` (default: the first measured of
    energy_J, latency_ms, peak_memory_MB), descending; features with no correlation last."""
    ok = ok_only(df)
    X = numeric_features(ok)
    measured = [t for t in targets if is_measured(ok, t)]
    rows = []
    for f in X.columns:
        x = X[f].to_numpy(float)
        fin = np.isfinite(x)
        status = NOT_MEASURED if not fin.any() else ("constant" if np.nanstd(x) == 0 else "ok")
        row: dict[str, Any] = {"feature": f, "feature_status": status}
        for t in targets:
            if t in measured:
                r, _ = _pearson(x, numeric(ok, t).to_numpy(float))
                row[f"abs_r_{t}"] = abs(r) if np.isfinite(r) else np.nan
            else:
                row[f"abs_r_{t}"] = NOT_MEASURED
        rows.append(row)
    out = pd.DataFrame(rows, columns=["feature", "feature_status", *[f"abs_r_{t}" for t in targets]])
    key = sort_by or next((t for t in SORT_PREFERENCE if t in measured), None)
    if key is not None and key in measured:
        out = out.sort_values(f"abs_r_{key}", ascending=False, na_position="last", kind="stable")
    return out.reset_index(drop=True)
