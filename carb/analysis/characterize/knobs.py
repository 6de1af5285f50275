"""Per-knob analysis (paper Table 3, Figure 1): median and IQR of each target per knob value within each
block family, and per knob x family the range and max/min ratio of those medians.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.characterize.common import (
    KNOBS_ANALYSED,
    NOT_MEASURED,
    families,
    is_measured,
    numeric,
    ok_only,
    plain,
    sorted_values,
)
from carb.data.schema import TARGETS
from carb.design.identity import BLOCK


def energy_per_gflop(df: pd.DataFrame) -> pd.Series:
    """Energy per GFLOP of one forward pass (J/GFLOP): ``energy_J / (flops / 1e9)``.

    ``energy_J`` is the energy of one batch and ``flops`` one forward of the batch (fvcore
    convention: one multiply-add = one flop), so this is joules per 10^9 multiply-adds. NaN where
    energy or flops is missing."""
    e, f = numeric(df, "energy_J"), numeric(df, "flops")
    out = e / (f / 1e9)
    return out.where(np.isfinite(out) & (f > 0))


def knob_medians(df: pd.DataFrame, knobs: Sequence[str] = KNOBS_ANALYSED,
                 targets: Sequence[str] = TARGETS) -> pd.DataFrame:
    """Per family x knob x knob value x target: n, median, 25th and 75th percentile of the target.

    Columns: family, knob, value, target, n, median, q25, q75, status ('ok' | 'not measured').
    Knobs missing from the frame are skipped; target units are those of the target column."""
    ok = ok_only(df)
    measured = {t: is_measured(ok, t) for t in targets}
    rows: list[dict[str, Any]] = []
    for fam in families(ok):
        sub = ok[(ok[BLOCK] == fam).fillna(False).to_numpy()]
        for knob in knobs:
            if knob not in sub.columns or sub[knob].isna().all():
                continue
            kv = sub[knob].astype(object)
            for value in sorted_values(knob, list(kv.dropna().unique())):
                grp = sub[(kv == value).to_numpy()]
                for t in targets:
                    y = numeric(grp, t).dropna()
                    rows.append({"family": fam, "knob": knob, "value": plain(value), "target": t,
                                 "n": int(len(y)),
                                 "median": float(y.median()) if len(y) else np.nan,
                                 "q25": float(y.quantile(0.25)) if len(y) else np.nan,
                                 "q75": float(y.quantile(0.75)) if len(y) else np.nan,
                                 "status": "ok" if measured[t] else NOT_MEASURED})
    cols = ["family", "knob", "value", "target", "n", "median", "q25", "q75", "status"]
    return pd.DataFrame(rows, columns=cols)


def knob_ranges(df: pd.DataFrame, knobs: Sequence[str] = KNOBS_ANALYSED,
                targets: Sequence[str] = TARGETS, medians: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per family x knob x target: the smallest and largest per-value median, their range
    (max - min, target units) and ratio (max / min), and the knob values where they occur.

    Columns: family, knob, target, n_values, min_median, max_median, range, ratio, argmin, argmax,
    status: 'ok', 'not measured' (target absent), or 'single value' (the knob does not vary in the
    family; range and ratio NaN)."""
    med = knob_medians(df, knobs, targets) if medians is None else medians
    rows: list[dict[str, Any]] = []
    for (fam, knob, t), grp in med.groupby(["family", "knob", "target"], sort=False):
        g = grp.dropna(subset=["median"])
        base = {"family": fam, "knob": knob, "target": t, "n_values": int(grp["value"].nunique()),
                "min_median": np.nan, "max_median": np.nan, "range": np.nan, "ratio": np.nan,
                "argmin": None, "argmax": None}
        if (grp["status"] == NOT_MEASURED).all() or g.empty:
            rows.append({**base, "status": NOT_MEASURED})
            continue
        lo, hi = g.loc[g["median"].idxmin()], g.loc[g["median"].idxmax()]
        base.update(min_median=float(lo["median"]), max_median=float(hi["median"]),
                    argmin=lo["value"], argmax=hi["value"])
        if len(g) < 2:
            rows.append({**base, "status": "single value"})
            continue
        base.update(range=float(hi["median"] - lo["median"]),
                    ratio=float(hi["median"] / lo["median"]) if lo["median"] > 0 else np.nan)
        rows.append({**base, "status": "ok"})
    cols = ["family", "knob", "target", "n_values", "min_median", "max_median", "range", "ratio",
            "argmin", "argmax", "status"]
    return pd.DataFrame(rows, columns=cols)
