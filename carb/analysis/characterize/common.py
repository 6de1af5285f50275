"""Shared pieces of the characterization analyses: the knobs analysed, display orders, and helpers
that select ok rows, read numeric columns and say whether a target was measured.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.data.tiers import STRESS_UTIL_PCT
from carb.design.arch import PRECISIONS
from carb.design.identity import BLOCK, DEPTH, STEM, WIDTH

NOT_MEASURED = "not measured"
#: Knobs analysed per family (``block`` is the family; ``stages`` follows from depth).
KNOBS_ANALYSED: tuple[str, ...] = (DEPTH, "batch_size", WIDTH, "input_size", "precision",
                                   STEM)
FAMILY_ORDER: tuple[str, ...] = ("basic", "bottleneck")
PRECISION_ORDER: tuple[str, ...] = PRECISIONS
#: SM-utilization tier edges (%): low < 40 <= mid < 65 (the hardware-stress threshold) <= high.
SM_EDGES: tuple[float, float] = (40.0, STRESS_UTIL_PCT)
SM_TIERS: tuple[str, ...] = ("low", "mid", "high")
#: Energy-first order in which the correlation table is sorted (first measured target wins).
SORT_PREFERENCE: tuple[str, ...] = ("energy_J", "latency_ms", "peak_memory_MB")


def ok_only(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with status ok (all rows when the frame has no status column), index reset."""
    if "status" in df.columns:
        df = df[(df["status"] == "ok").fillna(False).to_numpy()]
    return df.reset_index(drop=True)


def numeric(df: pd.DataFrame, col: str) -> pd.Series:
    """Column as float64 (NaN where missing or non-numeric; all NaN when the column is absent)."""
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype="float64")
    return pd.to_numeric(df[col], errors="coerce").astype("float64")


def is_measured(df: pd.DataFrame, col: str) -> bool:
    """True when ``col`` has at least one finite value among the ok rows."""
    return bool(np.isfinite(numeric(ok_only(df), col)).any())


def families(df: pd.DataFrame) -> list[str]:
    """Block families present (basic, bottleneck first; rows with no block are left out)."""
    if BLOCK not in df.columns:
        return []
    present = [str(b) for b in pd.Series(df[BLOCK]).dropna().unique()]
    return [f for f in FAMILY_ORDER if f in present] + sorted(f for f in present if f not in FAMILY_ORDER)


def device_label(df: pd.DataFrame) -> str:
    """The device name(s) of a frame, joined by ' + ' ('unknown device' if none)."""
    if "device_name" not in df.columns:
        return "unknown device"
    names = [str(n) for n in pd.Series(df["device_name"]).dropna().unique()]
    return " + ".join(sorted(names)) or "unknown device"


def sorted_values(knob: str, values: Sequence[Any]) -> list[Any]:
    """A knob's values without missing ones, in display order: precisions in table order (fp32, fp16,
    bf16), numbers ascending, anything else as text."""
    vals = [v for v in values if not (v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)))]
    if knob == "precision":
        return [p for p in PRECISION_ORDER if p in vals] + sorted(str(v) for v in vals
                                                                   if v not in PRECISION_ORDER)
    try:
        return sorted(vals, key=float)
    except (TypeError, ValueError):
        return sorted(vals, key=str)


def plain(v: Any) -> Any:
    """numpy / pandas scalar -> Python scalar (for tidy CSV and JSON)."""
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        f = float(v)
        return int(f) if f.is_integer() else f
    return v
