"""Energy efficiency (paper Figure 3): energy per GFLOP by precision, batch tier and depth, per family.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.characterize.common import (
    NOT_MEASURED,
    families,
    is_measured,
    numeric,
    ok_only,
    plain,
    sorted_values,
)
from carb.analysis.characterize.knobs import energy_per_gflop
from carb.data.tiers import BATCH_TIERS, batch_tier
from carb.design.identity import BLOCK, DEPTH


def efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Energy per GFLOP (:func:`energy_per_gflop`, J/GFLOP per forward) by view.

    Views: 'precision' (family x precision), 'batch_tier' (family 'all' and each family x batch tier),
    'depth' (family x depth). Columns: view, family, group, n, mean_J_per_GFLOP, median_J_per_GFLOP,
    status. Without energy (or flops) one row per view with status 'not measured'."""
    ok = ok_only(df)
    cols = ["view", "family", "group", "n", "mean_J_per_GFLOP", "median_J_per_GFLOP", "status"]
    jpg = energy_per_gflop(ok)
    if not np.isfinite(jpg).any():
        why = [c for c in ("energy_J", "flops") if not is_measured(ok, c)]
        status = NOT_MEASURED + (": " + ", ".join(why) if why else "")
        return pd.DataFrame([{"view": v, "family": "all", "group": None, "n": 0, "mean_J_per_GFLOP": np.nan,
                              "median_J_per_GFLOP": np.nan, "status": status}
                             for v in ("precision", "batch_tier", DEPTH)], columns=cols)
    ok = ok.assign(_jpg=jpg.to_numpy(), _bt=batch_tier(numeric(ok, "batch_size").to_numpy()))
    rows: list[dict[str, Any]] = []

    def add(view: str, fam: str, sub: pd.DataFrame, by: str, order: Sequence[Any]) -> None:
        for value in order:
            y = sub.loc[(sub[by].astype(object) == value).to_numpy(), "_jpg"].dropna()
            if len(y):
                rows.append({"view": view, "family": fam, "group": plain(value), "n": int(len(y)),
                             "mean_J_per_GFLOP": float(y.mean()), "median_J_per_GFLOP": float(y.median()),
                             "status": "ok"})

    fams = families(ok)
    tiers = [t for t, _ in BATCH_TIERS]
    for fam in fams:
        sub = ok[(ok[BLOCK] == fam).fillna(False).to_numpy()]
        add("precision", fam, sub, "precision", sorted_values("precision", list(sub["precision"].dropna().unique())))
    add("batch_tier", "all", ok, "_bt", tiers)
    for fam in fams:
        sub = ok[(ok[BLOCK] == fam).fillna(False).to_numpy()]
        add("batch_tier", fam, sub, "_bt", tiers)
    for fam in fams:
        sub = ok[(ok[BLOCK] == fam).fillna(False).to_numpy()]
        add(DEPTH, fam, sub, DEPTH, sorted_values(DEPTH, list(sub[DEPTH].dropna().unique())))
    return pd.DataFrame(rows, columns=cols)
