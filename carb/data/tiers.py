"""Regimes of a dataset's rows: batch and depth tiers, the low-batch and hardware-stress regimes (paper
Section 5.2), the stratification key, and per-tier telemetry medians (what screening substitutes for
telemetry nobody measured).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from carb.data.schema import RUNTIME_FEATURES
from carb.design.identity import DEPTH

#: Batch tiers (paper Section 5.2: small <= 4, medium <= 16, large <= 128; beyond that: xlarge).
BATCH_TIERS: tuple[tuple[str, int], ...] = (("small", 4), ("medium", 16), ("large", 128),
                                            ("xlarge", 2**62))
#: Depth tiers: shallow <= 20 layers, mid <= 56, deep beyond.
DEPTH_TIERS: tuple[tuple[str, int], ...] = (("shallow", 20), ("mid", 56), ("deep", 2**62))
#: Hardware-stress threshold (%, SM or memory utilization), paper Section 5.2.
STRESS_UTIL_PCT = 65.0
#: Low-batch regime (paper: bs <= 8), used by correctors and leave-one-batch-tier-out.
LOW_BATCH_MAX = 8


def _tier(values: Iterable[float], tiers: Sequence[tuple[str, int]]) -> np.ndarray:
    v = np.asarray(list(values) if not isinstance(values, (np.ndarray, pd.Series)) else values,
                   dtype=float)
    edges = np.array([t[1] for t in tiers], dtype=float)
    names = np.array([t[0] for t in tiers], dtype=object)
    return names[np.searchsorted(edges, v, side="left")]


def batch_tier(batch_size) -> np.ndarray | str:
    """Batch tier name(s): small (<=4), medium (<=16), large (<=128), xlarge (>128)."""
    if np.isscalar(batch_size):
        return str(_tier([batch_size], BATCH_TIERS)[0])
    return _tier(batch_size, BATCH_TIERS)


def depth_tier(depth) -> np.ndarray | str:
    """Depth tier name(s): shallow (<=20), mid (<=56), deep (>56)."""
    if np.isscalar(depth):
        return str(_tier([depth], DEPTH_TIERS)[0])
    return _tier(depth, DEPTH_TIERS)


def hardware_stress(df: pd.DataFrame) -> np.ndarray:
    """Boolean array: SM or memory utilization above 65 % (NaN utilization counts as not stressed)."""
    sm = pd.to_numeric(df.get("avg_sm_util", pd.Series(np.nan, index=df.index)), errors="coerce")
    mem = pd.to_numeric(df.get("avg_mem_util", pd.Series(np.nan, index=df.index)), errors="coerce")
    return ((sm > STRESS_UTIL_PCT) | (mem > STRESS_UTIL_PCT)).to_numpy()


def low_batch(df: pd.DataFrame) -> np.ndarray:
    """Boolean array: batch_size <= 8."""
    return (df["batch_size"].to_numpy() <= LOW_BATCH_MAX)


def strata_key(df: pd.DataFrame) -> np.ndarray:
    """Joint stratification key: batch tier x hardware-stress flag x depth tier (zoo rows, without a
    ``depth``: x ``family``; in a combined dataset each row by its own kind)."""
    stress = np.where(hardware_stress(df), "stress", "calm")
    third = depth_tier(df[DEPTH]) if DEPTH in df.columns and df[DEPTH].notna().all() else None
    if third is None:   # zoo rows (all, or beside ResNet rows): their family
        third = df["family"].astype(str).to_numpy().astype(object)
        if DEPTH in df.columns:
            has = df[DEPTH].notna().to_numpy()
            third[has] = depth_tier(df.loc[has, DEPTH])
    return np.array([f"{b}|{s}|{d}" for b, s, d in
                     zip(batch_tier(df["batch_size"]), stress, third)], dtype=object)


def telemetry_medians(df: pd.DataFrame, columns: Sequence[str] = RUNTIME_FEATURES) -> dict[str, dict[str, float]]:
    """Median of each runtime feature per batch tier (``{"small": {"avg_sm_util": 41.0, ...}, ...,
    "all": {...}}``); NaN where the device never reported it. Screening fixes telemetry to these."""
    tiers = batch_tier(df["batch_size"]) if len(df) else np.array([], dtype=object)
    out: dict[str, dict[str, float]] = {}
    overall = {c: float(pd.to_numeric(df[c], errors="coerce").median()) if c in df.columns and len(df)
               else float("nan") for c in columns}
    out["all"] = overall
    for name, _ in BATCH_TIERS:
        sub = df[tiers == name] if len(df) else df
        out[name] = {c: (float(pd.to_numeric(sub[c], errors="coerce").median())
                         if len(sub) and c in sub.columns and sub[c].notna().any() else overall[c])
                     for c in columns}
    return out
