"""Energy/latency divergence (paper Figure 2): mean energy and latency per batch tier x SM-utilization
tier, and the high-SM / low-SM ratio per batch tier.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from carb.analysis.characterize.common import (
    NOT_MEASURED,
    SM_EDGES,
    SM_TIERS,
    is_measured,
    numeric,
    ok_only,
)
from carb.data.tiers import BATCH_TIERS, batch_tier


def sm_tier(sm_util: pd.Series | np.ndarray, edges: Sequence[float] = SM_EDGES) -> np.ndarray:
    """SM-utilization tier per row: 'low' (< edges[0] %), 'mid', 'high' (>= edges[1] %); None if NaN."""
    v = np.asarray(sm_util, dtype=float)
    names = np.array(SM_TIERS, dtype=object)[np.searchsorted(np.asarray(edges, float), v, side="right")]
    return np.where(np.isfinite(v), names, None)


def divergence(df: pd.DataFrame, edges: Sequence[float] = SM_EDGES) -> pd.DataFrame:
    """Mean energy (J) and latency (ms) per batch tier x SM-utilization tier.

    Columns: batch_tier, sm_tier, n, mean_energy_J, mean_latency_ms, energy_vs_baseline,
    latency_vs_baseline (cell mean / the baseline cell's mean; baseline = smallest batch tier, lowest
    SM tier present), status. Where ``avg_sm_util`` is not measured, one row per batch tier with
    ``sm_tier = 'not measured'``; a missing target leaves its columns NaN and is named in ``status``."""
    ok = ok_only(df)
    cols = ["batch_tier", "sm_tier", "n", "mean_energy_J", "mean_latency_ms", "energy_vs_baseline",
            "latency_vs_baseline", "status"]
    if ok.empty or "batch_size" not in ok.columns:
        return pd.DataFrame(columns=cols)
    sm_measured = is_measured(ok, "avg_sm_util")
    bt = pd.Series(batch_tier(numeric(ok, "batch_size").to_numpy()), index=ok.index)
    st = pd.Series(sm_tier(numeric(ok, "avg_sm_util"), edges) if sm_measured else NOT_MEASURED,
                   index=ok.index, dtype=object)
    missing = [c for c in ("energy_J", "latency_ms", "avg_sm_util") if not is_measured(ok, c)]
    status = "ok" if not missing else NOT_MEASURED + ": " + ", ".join(missing)
    rows = []
    for tier, _ in BATCH_TIERS:
        for s in (SM_TIERS if sm_measured else (NOT_MEASURED,)):
            m = ((bt == tier) & (st == s)).to_numpy()
            if not m.any():
                continue
            g = ok[m]
            e, lat = numeric(g, "energy_J"), numeric(g, "latency_ms")
            rows.append({"batch_tier": tier, "sm_tier": s, "n": int(m.sum()),
                         "mean_energy_J": float(e.mean()) if e.notna().any() else np.nan,
                         "mean_latency_ms": float(lat.mean()) if lat.notna().any() else np.nan,
                         "status": status})
    out = pd.DataFrame(rows, columns=cols)
    if not out.empty:
        base = out.iloc[0]
        for src, dst in (("mean_energy_J", "energy_vs_baseline"), ("mean_latency_ms", "latency_vs_baseline")):
            out[dst] = out[src] / base[src] if np.isfinite(base[src]) and base[src] > 0 else np.nan
    return out


def divergence_ratios(cells: pd.DataFrame) -> pd.DataFrame:
    """High-SM / low-SM ratio of mean energy and of mean latency per batch tier (from
    :func:`divergence`). Columns: batch_tier, n_high, n_low, energy_high_low, latency_high_low,
    energy_over_latency (energy ratio / latency ratio), status: 'ok', 'not measured: ...', or
    'no high-SM or low-SM rows'."""
    cols = ["batch_tier", "n_high", "n_low", "energy_high_low", "latency_high_low", "energy_over_latency",
            "status"]
    rows = []
    for tier in [t for t, _ in BATCH_TIERS if t in set(cells.get("batch_tier", []))]:
        g = cells[cells["batch_tier"] == tier]
        base = {"batch_tier": tier, "n_high": 0, "n_low": 0, "energy_high_low": np.nan,
                "latency_high_low": np.nan, "energy_over_latency": np.nan}
        if (g["sm_tier"] == NOT_MEASURED).any():
            rows.append({**base, "status": NOT_MEASURED + ": avg_sm_util"})
            continue
        hi, lo = g[g["sm_tier"] == "high"], g[g["sm_tier"] == "low"]
        base.update(n_high=int(hi["n"].sum()), n_low=int(lo["n"].sum()))
        if hi.empty or lo.empty:
            rows.append({**base, "status": "no high-SM or low-SM rows"})
            continue
        e = float(hi["mean_energy_J"].iloc[0] / lo["mean_energy_J"].iloc[0])
        lat = float(hi["mean_latency_ms"].iloc[0] / lo["mean_latency_ms"].iloc[0])
        missing = [n for n, v in (("energy_J", e), ("latency_ms", lat)) if not np.isfinite(v)]
        base.update(energy_high_low=e, latency_high_low=lat,
                    energy_over_latency=e / lat if not missing else np.nan)
        rows.append({**base, "status": "ok" if not missing else NOT_MEASURED + ": " + ", ".join(missing)})
    return pd.DataFrame(rows, columns=cols)
