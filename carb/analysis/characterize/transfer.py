"""Cross-device transfer (paper Figure 4): two devices joined on ``config_id``; per target the
least-squares line y(B) = slope * x(A) + intercept, its R^2, Spearman's rho and n.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.characterize.common import (
    NOT_MEASURED,
    device_label,
    is_measured,
    numeric,
    ok_only,
)
from carb.data.schema import TARGETS
from carb.design.identity import BLOCK
from carb.errors import DatasetError


def _unique_by_key(df: pd.DataFrame, key: str, which: str) -> pd.DataFrame:
    ok = ok_only(df)
    if key not in ok.columns:
        raise DatasetError(f"dataset {which}: no {key!r} column to join the two devices on")
    dup = ok[key].duplicated(keep=False).to_numpy()
    if dup.any():
        ex = list(pd.unique(ok.loc[dup, key]))[:3]
        raise DatasetError(f"dataset {which}: {key} is not unique among ok rows (e.g. {ex}); select one "
                           f"device (data.device= / compare_device=) so each configuration appears once")
    return ok


def cross_device_pairs(df_a: pd.DataFrame, df_b: pd.DataFrame, targets: Sequence[str] = TARGETS,
                       key: str = "config_id") -> pd.DataFrame:
    """Inner join of the ok rows of two devices on ``key``.

    Columns: key, family (``block`` of A, 'other' where missing), ``<target>_a`` and ``<target>_b``
    for each target (NaN where a device lacks it). Raises :class:`DatasetError` if ``key`` is missing
    or not unique within a device."""
    a, b = _unique_by_key(df_a, key, "A"), _unique_by_key(df_b, key, "B")
    left = pd.DataFrame({key: a[key].astype(str)})
    left["family"] = (a[BLOCK].astype(object).where(a[BLOCK].notna(), "other")
                      if BLOCK in a.columns else "other")
    if "model" in a.columns:
        left["model"] = a["model"].astype(object)
    right = pd.DataFrame({key: b[key].astype(str)})
    for t in targets:
        left[f"{t}_a"] = numeric(a, t).to_numpy()
        right[f"{t}_b"] = numeric(b, t).to_numpy()
    return left.merge(right, on=key, how="inner").reset_index(drop=True)


def _fit(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    from scipy import stats

    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid ** 2)) / ss_tot if ss_tot > 0 else np.nan
    rho = stats.spearmanr(x, y).statistic
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = y / x
    ratio = ratio[np.isfinite(ratio)]
    return {"slope": float(slope), "intercept": float(intercept), "r2": float(r2),
            "spearman": float(rho), "pearson": float(np.corrcoef(x, y)[0, 1]),
            "median_ratio": float(np.median(ratio)) if len(ratio) else np.nan}


def cross_device(df_a: pd.DataFrame, df_b: pd.DataFrame, targets: Sequence[str] = TARGETS,
                 key: str = "config_id", min_pairs: int = 3,
                 pairs: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per target, how device B's value relates to device A's on the shared configurations.

    Least-squares line ``y_B = slope * x_A + intercept`` (target units), its R^2, Pearson r,
    Spearman's rho, the median ratio y_B / x_A, and n (pairs with both values). Columns: target,
    device_a, device_b, n, slope, intercept, r2, spearman, pearson, median_ratio, status: 'ok',
    'not measured on A', 'not measured on B', 'not measured on A and B', 'too few pairs (n < k)', or
    'constant' (no variation on one device)."""
    p = cross_device_pairs(df_a, df_b, targets, key) if pairs is None else pairs
    dev_a, dev_b = device_label(ok_only(df_a)), device_label(ok_only(df_b))
    rows = []
    nums = ("slope", "intercept", "r2", "spearman", "pearson", "median_ratio")
    for t in targets:
        base: dict[str, Any] = {"target": t, "device_a": dev_a, "device_b": dev_b, "n": 0,
                                **{k: np.nan for k in nums}}
        lacks = [w for w, d in (("A", df_a), ("B", df_b)) if not is_measured(d, t)]
        if lacks:
            rows.append({**base, "status": f"{NOT_MEASURED} on {' and '.join(lacks)}"})
            continue
        x, y = p[f"{t}_a"].to_numpy(float), p[f"{t}_b"].to_numpy(float)
        m = np.isfinite(x) & np.isfinite(y)
        base["n"] = int(m.sum())
        if m.sum() < max(min_pairs, 2):
            rows.append({**base, "status": f"too few pairs (n < {max(min_pairs, 2)})"})
            continue
        if np.std(x[m]) == 0 or np.std(y[m]) == 0:
            rows.append({**base, "status": "constant"})
            continue
        rows.append({**base, **_fit(x[m], y[m]), "status": "ok"})
    return pd.DataFrame(rows, columns=["target", "device_a", "device_b", "n", *nums, "status"])
