"""Workload characterization (the paper's Section 4) and the ``carb-characterize`` command.

Pure functions take a dataset frame (schema of :mod:`carb.dataset`; only ``status == 'ok'`` rows are
used) and return DataFrames:

- :func:`knob_medians` / :func:`knob_ranges`: median (and IQR) of each target per knob value within each
  block family, and per knob x family the range and max/min ratio of those medians (Table 3, Figure 1).
- :func:`feature_correlations`: Pearson |r| of every numeric feature with each target (Table 4).
- :func:`divergence` / :func:`divergence_ratios`: mean energy and latency per batch tier x SM-utilization
  tier, and the high-SM / low-SM ratio per batch tier (Figure 2).
- :func:`efficiency`: energy per GFLOP by precision, batch tier and depth per family (Figure 3).
- :func:`cross_device_pairs` / :func:`cross_device`: two devices joined on ``config_id``; per target the
  least-squares line y(B) = slope * x(A) + intercept, its R^2, Spearman's rho and n (Figure 4).

A target (or SM utilization) that a dataset does not have is reported with status ``'not measured'``
and NaN numbers, never as 0. The command (``carb-characterize``, config ``conf/characterize.yaml``)
writes each table as CSV and Markdown and each figure as PNG into
``<paths.output_dir>/characterize/<run name>/`` and logs the folder to one MLflow run in experiment
``carb-characterize``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.cli import hydra_command, to_dict
from carb.dataset import (BATCH_TIERS, INTERACTION_FEATURES, RUNTIME_FEATURES, STATIC_FEATURES, TARGETS,
                          STRESS_UTIL_PCT, batch_tier, device_slug, load_dataset)
from carb.errors import ConfigError, DatasetError

NOT_MEASURED = "not measured"
#: Knobs analysed per family (``block`` is the family; ``stages`` follows from depth).
KNOBS_ANALYSED: tuple[str, ...] = ("depth", "batch_size", "width_mult", "input_size", "precision",
                                   "early_downsample")
FAMILY_ORDER: tuple[str, ...] = ("basic", "bottleneck")
PRECISION_ORDER: tuple[str, ...] = ("fp32", "fp16", "bf16")
PRECISION_BITS: dict[str, int] = {"fp32": 32, "fp16": 16, "bf16": 16}
#: SM-utilization tier edges (%): low < 40 <= mid < 65 (the hardware-stress threshold) <= high.
SM_EDGES: tuple[float, float] = (40.0, STRESS_UTIL_PCT)
SM_TIERS: tuple[str, ...] = ("low", "mid", "high")
#: Energy-first order in which the correlation table is sorted (first measured target wins).
_SORT_PREFERENCE: tuple[str, ...] = ("energy_J", "latency_ms", "peak_memory_MB")


# --------------------------------------------------------------------------- helpers

def _ok(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with status ok (all rows when the frame has no status column), index reset."""
    if "status" in df.columns:
        df = df[(df["status"] == "ok").fillna(False).to_numpy()]
    return df.reset_index(drop=True)


def _num(df: pd.DataFrame, col: str) -> pd.Series:
    """Column as float64 (NaN where missing or non-numeric; all NaN when the column is absent)."""
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype="float64")
    return pd.to_numeric(df[col], errors="coerce").astype("float64")


def is_measured(df: pd.DataFrame, col: str) -> bool:
    """True when ``col`` has at least one finite value among the ok rows."""
    return bool(np.isfinite(_num(_ok(df), col)).any())


def families(df: pd.DataFrame) -> list[str]:
    """Block families present (basic, bottleneck first; rows with no block are left out)."""
    if "block" not in df.columns:
        return []
    present = [str(b) for b in pd.Series(df["block"]).dropna().unique()]
    return [f for f in FAMILY_ORDER if f in present] + sorted(f for f in present if f not in FAMILY_ORDER)


def device_label(df: pd.DataFrame) -> str:
    """The device name(s) of a frame, joined by ' + ' ('unknown device' if none)."""
    if "device_name" not in df.columns:
        return "unknown device"
    names = [str(n) for n in pd.Series(df["device_name"]).dropna().unique()]
    return " + ".join(sorted(names)) or "unknown device"


def _sorted_values(knob: str, values: Sequence[Any]) -> list[Any]:
    vals = [v for v in values if not (v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)))]
    if knob == "precision":
        return [p for p in PRECISION_ORDER if p in vals] + sorted(str(v) for v in vals
                                                                   if v not in PRECISION_ORDER)
    try:
        return sorted(vals, key=float)
    except (TypeError, ValueError):
        return sorted(vals, key=str)


def _plain(v: Any) -> Any:
    """numpy / pandas scalar -> Python scalar (for tidy CSV and JSON)."""
    if isinstance(v, (np.bool_,)):
        return bool(v)
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        f = float(v)
        return int(f) if f.is_integer() else f
    return v


def energy_per_gflop(df: pd.DataFrame) -> pd.Series:
    """Energy per GFLOP of one forward pass (J/GFLOP): ``energy_J / n_runs / (flops / 1e9)``.

    ``energy_J`` covers the timed loop of ``n_runs`` batches and ``flops`` one forward of the batch
    (fvcore convention: one multiply-add = one flop), so this is joules per 10^9 multiply-adds. NaN
    where energy, n_runs or flops is missing. (Dividing the whole-loop energy by one forward's FLOPs,
    as the paper's magnitudes suggest, gives values ``n_runs`` times larger; ratios are unchanged.)"""
    e, n, f = _num(df, "energy_J"), _num(df, "n_runs"), _num(df, "flops")
    out = e / n / (f / 1e9)
    return out.where(np.isfinite(out) & (f > 0) & (n > 0))


# --------------------------------------------------------------------------- Table 3 / Figure 1

def knob_medians(df: pd.DataFrame, knobs: Sequence[str] = KNOBS_ANALYSED,
                 targets: Sequence[str] = TARGETS) -> pd.DataFrame:
    """Per family x knob x knob value x target: n, median, 25th and 75th percentile of the target.

    Columns: family, knob, value, target, n, median, q25, q75, status ('ok' | 'not measured').
    Knobs missing from the frame are skipped; target units are those of the target column."""
    ok = _ok(df)
    measured = {t: is_measured(ok, t) for t in targets}
    rows: list[dict[str, Any]] = []
    for fam in families(ok):
        sub = ok[(ok["block"] == fam).fillna(False).to_numpy()]
        for knob in knobs:
            if knob not in sub.columns or sub[knob].isna().all():
                continue
            kv = sub[knob].astype(object)
            for value in _sorted_values(knob, list(kv.dropna().unique())):
                grp = sub[(kv == value).to_numpy()]
                for t in targets:
                    y = _num(grp, t).dropna()
                    rows.append({"family": fam, "knob": knob, "value": _plain(value), "target": t,
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


# --------------------------------------------------------------------------- Table 4

def numeric_features(df: pd.DataFrame) -> pd.DataFrame:
    """Numeric feature matrix for correlations: numeric knobs, ``precision_bits`` (32/16),
    ``is_bottleneck`` (0/1), ``early_downsample`` (0/1), the static, runtime and interaction features
    present. Targets and measurement-record columns are not features."""
    ok = _ok(df)
    out = pd.DataFrame(index=ok.index)
    for c in ("depth", "width_mult", "input_size", "batch_size"):
        if c in ok.columns:
            out[c] = _num(ok, c)
    if "precision" in ok.columns:
        out["precision_bits"] = ok["precision"].map(PRECISION_BITS).astype("float64")
    if "block" in ok.columns:
        out["is_bottleneck"] = (ok["block"] == "bottleneck").astype("float64").where(ok["block"].notna())
    if "early_downsample" in ok.columns:
        out["early_downsample"] = pd.to_numeric(ok["early_downsample"].astype(object).map(
            lambda v: float(bool(v)) if isinstance(v, (bool, np.bool_)) else np.nan), errors="coerce")
    for c in (*STATIC_FEATURES, *RUNTIME_FEATURES, *INTERACTION_FEATURES):
        if c in ok.columns:
            out[c] = _num(ok, c)
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
    ok = _ok(df)
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
                r, _ = _pearson(x, _num(ok, t).to_numpy(float))
                row[f"abs_r_{t}"] = abs(r) if np.isfinite(r) else np.nan
            else:
                row[f"abs_r_{t}"] = NOT_MEASURED
        rows.append(row)
    out = pd.DataFrame(rows, columns=["feature", "feature_status", *[f"abs_r_{t}" for t in targets]])
    key = sort_by or next((t for t in _SORT_PREFERENCE if t in measured), None)
    if key is not None and key in measured:
        out = out.sort_values(f"abs_r_{key}", ascending=False, na_position="last", kind="stable")
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- Figure 2

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
    ok = _ok(df)
    cols = ["batch_tier", "sm_tier", "n", "mean_energy_J", "mean_latency_ms", "energy_vs_baseline",
            "latency_vs_baseline", "status"]
    if ok.empty or "batch_size" not in ok.columns:
        return pd.DataFrame(columns=cols)
    sm_measured = is_measured(ok, "avg_sm_util")
    bt = pd.Series(batch_tier(_num(ok, "batch_size").to_numpy()), index=ok.index)
    st = pd.Series(sm_tier(_num(ok, "avg_sm_util"), edges) if sm_measured else NOT_MEASURED,
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
            e, lat = _num(g, "energy_J"), _num(g, "latency_ms")
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


# --------------------------------------------------------------------------- Figure 3

def efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """Energy per GFLOP (:func:`energy_per_gflop`, J/GFLOP per forward) by view.

    Views: 'precision' (family x precision), 'batch_tier' (family 'all' and each family x batch tier),
    'depth' (family x depth). Columns: view, family, group, n, mean_J_per_GFLOP, median_J_per_GFLOP,
    status. Without energy (or n_runs / flops) one row per view with status 'not measured'."""
    ok = _ok(df)
    cols = ["view", "family", "group", "n", "mean_J_per_GFLOP", "median_J_per_GFLOP", "status"]
    jpg = energy_per_gflop(ok)
    if not np.isfinite(jpg).any():
        why = [c for c in ("energy_J", "n_runs", "flops") if not is_measured(ok, c)]
        status = NOT_MEASURED + (": " + ", ".join(why) if why else "")
        return pd.DataFrame([{"view": v, "family": "all", "group": None, "n": 0, "mean_J_per_GFLOP": np.nan,
                              "median_J_per_GFLOP": np.nan, "status": status}
                             for v in ("precision", "batch_tier", "depth")], columns=cols)
    ok = ok.assign(_jpg=jpg.to_numpy(), _bt=batch_tier(_num(ok, "batch_size").to_numpy()))
    rows: list[dict[str, Any]] = []

    def add(view: str, fam: str, sub: pd.DataFrame, by: str, order: Sequence[Any]) -> None:
        for value in order:
            y = sub.loc[(sub[by].astype(object) == value).to_numpy(), "_jpg"].dropna()
            if len(y):
                rows.append({"view": view, "family": fam, "group": _plain(value), "n": int(len(y)),
                             "mean_J_per_GFLOP": float(y.mean()), "median_J_per_GFLOP": float(y.median()),
                             "status": "ok"})

    fams = families(ok)
    tiers = [t for t, _ in BATCH_TIERS]
    for fam in fams:
        sub = ok[(ok["block"] == fam).fillna(False).to_numpy()]
        add("precision", fam, sub, "precision", _sorted_values("precision", list(sub["precision"].dropna().unique())))
    add("batch_tier", "all", ok, "_bt", tiers)
    for fam in fams:
        sub = ok[(ok["block"] == fam).fillna(False).to_numpy()]
        add("batch_tier", fam, sub, "_bt", tiers)
    for fam in fams:
        sub = ok[(ok["block"] == fam).fillna(False).to_numpy()]
        add("depth", fam, sub, "depth", _sorted_values("depth", list(sub["depth"].dropna().unique())))
    return pd.DataFrame(rows, columns=cols)


# --------------------------------------------------------------------------- Figure 4

def _unique_by_key(df: pd.DataFrame, key: str, which: str) -> pd.DataFrame:
    ok = _ok(df)
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
    left["family"] = (a["block"].astype(object).where(a["block"].notna(), "other")
                      if "block" in a.columns else "other")
    if "model" in a.columns:
        left["model"] = a["model"].astype(object)
    right = pd.DataFrame({key: b[key].astype(str)})
    for t in targets:
        left[f"{t}_a"] = _num(a, t).to_numpy()
        right[f"{t}_b"] = _num(b, t).to_numpy()
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
    dev_a, dev_b = device_label(_ok(df_a)), device_label(_ok(df_b))
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


# --------------------------------------------------------------------------- output

def to_markdown(df: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub Markdown table; floats to ``digits`` significant digits, missing values as '—'."""
    def cell(v: Any) -> str:
        if v is None or v is pd.NA:
            return "—"
        if isinstance(v, (float, np.floating)):
            if not np.isfinite(v):
                return "—"
            return f"{float(v):.{digits}g}"
        return str(v).replace("|", "\\|")

    header = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, sep, *body]) + "\n"


def characterize_tables(df_a: pd.DataFrame, df_b: pd.DataFrame | None = None,
                        sm_edges: Sequence[float] = SM_EDGES, min_pairs: int = 3) -> dict[str, pd.DataFrame]:
    """All tables for one dataset (A) and, when ``df_b`` is given, the cross-device ones (A vs B).

    Keys: knob_medians, knob_ranges, feature_correlations, divergence, divergence_ratios, efficiency,
    and with B: cross_device_pairs, cross_device."""
    med = knob_medians(df_a)
    cells = divergence(df_a, sm_edges)
    tables = {"knob_medians": med, "knob_ranges": knob_ranges(df_a, medians=med),
              "feature_correlations": feature_correlations(df_a), "divergence": cells,
              "divergence_ratios": divergence_ratios(cells), "efficiency": efficiency(df_a)}
    if df_b is not None:
        pairs = cross_device_pairs(df_a, df_b)
        tables["cross_device_pairs"] = pairs
        tables["cross_device"] = cross_device(df_a, df_b, min_pairs=min_pairs, pairs=pairs)
    return tables


def _select_device(df: pd.DataFrame, device: str | None, field: str) -> pd.DataFrame:
    names = sorted(str(n) for n in pd.Series(df["device_name"]).dropna().unique())
    if device:
        if device not in names:
            raise ConfigError(f"{field}={device!r} is not in the dataset; allowed: {names}")
        return df[(df["device_name"] == device).fillna(False).to_numpy()].reset_index(drop=True)
    if len(names) > 1:
        raise ConfigError(f"{field}: the dataset holds {len(names)} devices; pick one of {names}")
    return df


def _dataset_ref(ref: Any, device: Any) -> tuple[str | None, str | None]:
    """A dataset given as a path/name string, or as a node with ``path`` (and optional ``device``),
    as the ``conf/data`` group gives it; returns (path or None, device or None)."""
    if ref is not None and not isinstance(ref, str) and hasattr(ref, "get"):
        return (str(ref.get("path")) if ref.get("path") else None), (device or ref.get("device"))
    return (str(ref) if ref else None), (str(device) if device else None)


def load_inputs(cfg: Any) -> tuple[pd.DataFrame, pd.DataFrame | None, str, dict[str, Any]]:
    """Datasets A (and B) named by a characterize config, a label for the run and provenance params."""
    source = str(cfg.get("source") or "dataset")
    if source == "timm":
        from carb.importers.timm import TIMM_DATA, timm_pair

        t = cfg.timm
        a, b = timm_pair(t.gpu_a, t.gpu_b, precision=t.precision, compile=t.compile,
                         memory_layout=t.memory_layout, torch=str(t.torch), plain_only=bool(t.plain_only),
                         path=t.get("path"))
        label = f"timm-{device_slug(t.gpu_a)}-vs-{device_slug(t.gpu_b)}-{t.precision}-{t.compile}"
        prov = {"source": "timm", "data": str(t.get("path") or TIMM_DATA),
                **{f"timm.{k}": v for k, v in to_dict(t).items()},
                "torch_a": ",".join(sorted(a["torch_version"].dropna().unique())),
                "torch_b": ",".join(sorted(b["torch_version"].dropna().unique()))}
        return a, b, label, prov
    if source != "dataset":
        raise ConfigError(f"source={source!r} is not allowed; allowed: ['dataset', 'timm']")
    data, device = _dataset_ref(cfg.get("data"), None)
    compare, compare_device = _dataset_ref(cfg.get("compare"), cfg.get("compare_device"))
    if not data:
        raise ConfigError("data.path: give a dataset (.parquet/.csv file, folder of shards, or "
                          "'reference'), or source=timm")
    a = _select_device(load_dataset(data), device, "data.device")
    b = None
    if compare:
        b = _select_device(load_dataset(compare), compare_device, "compare_device")
    label = device_slug(device_label(a)) + (f"-vs-{device_slug(device_label(b))}" if b is not None else "")
    prov = {"source": "dataset", "data": str(data), "compare": str(compare), "data_device": str(device),
            "compare_device": str(compare_device)}
    return a, b, label, prov


def _metrics(tables: Mapping[str, pd.DataFrame]) -> dict[str, float]:
    """Headline numbers for MLflow: cross-device fits and the per-knob max/min ratios."""
    out: dict[str, float] = {}
    for r in tables.get("cross_device", pd.DataFrame()).itertuples():
        if r.status == "ok":
            for k in ("n", "slope", "intercept", "r2", "spearman", "median_ratio"):
                out[f"cross_device.{r.target}.{k}"] = getattr(r, k)
    for r in tables["knob_ranges"].itertuples():
        if r.status == "ok":
            out[f"knob_ratio.{r.family}.{r.knob}.{r.target}"] = r.ratio
    for r in tables["divergence_ratios"].itertuples():
        if r.status == "ok":
            out[f"divergence.{r.batch_tier}.energy_high_low"] = r.energy_high_low
            out[f"divergence.{r.batch_tier}.latency_high_low"] = r.latency_high_low
    return out


def _summary(label: str, prov: Mapping[str, Any], a: pd.DataFrame, b: pd.DataFrame | None,
             tables: Mapping[str, pd.DataFrame], skipped: Mapping[str, str]) -> str:
    ok_a = _ok(a)
    lines = [f"# carb-characterize: {label}", "",
             f"- dataset A: {device_label(ok_a)}, {len(ok_a)} ok rows (source: {prov.get('data')})"]
    if b is not None:
        lines.append(f"- dataset B: {device_label(_ok(b))}, {len(_ok(b))} ok rows")
    meas = [t for t in TARGETS if is_measured(a, t)]
    lines.append(f"- targets measured on A: {', '.join(meas) or 'none'}; "
                 f"not measured: {', '.join(t for t in TARGETS if t not in meas) or 'none'}")
    for name, why in skipped.items():
        lines.append(f"- figure {name}: not drawn ({why})")
    lines.append("")
    for name in ("cross_device", "knob_ranges", "feature_correlations", "divergence_ratios", "efficiency"):
        if name in tables:
            lines += [f"## {name}", "", to_markdown(tables[name]), ""]
    return "\n".join(lines)


def run_characterize(cfg: Any) -> dict[str, Any]:
    """Run all analyses named by ``cfg`` (conf/characterize.yaml), write tables (CSV + Markdown) and
    figures (PNG) to ``<paths.output_dir>/characterize/<run name>/`` and log them to one MLflow run.

    Returns ``{"run_id", "output_dir", "tables": {name: csv path}, "figures": {name: png path},
    "skipped_figures": {name: reason}, "cross_device": [row dicts], "label"}``."""
    from carb import plots_characterize as plots
    from carb.tracking import log_artifact, log_metrics, log_params, start_run

    a, b, label, prov = load_inputs(cfg)
    an = cfg.get("analysis") or {}
    tables = characterize_tables(a, b, sm_edges=tuple(an.get("sm_edges", SM_EDGES)),
                                 min_pairs=int(an.get("min_pairs", 3)))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run_name = str(cfg.get("run_name") or f"{label}-{stamp}")
    out_dir = Path(cfg.paths.output_dir) / "characterize" / run_name
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    (out_dir / "figures").mkdir(parents=True, exist_ok=True)
    table_paths = {}
    for name, t in tables.items():
        t.to_csv(out_dir / "tables" / f"{name}.csv", index=False)
        (out_dir / "tables" / f"{name}.md").write_text(to_markdown(t))
        table_paths[name] = str(out_dir / "tables" / f"{name}.csv")
    figures, skipped = plots.characterize_figures(tables, dev_a=device_label(_ok(a)),
                                                  dev_b=None if b is None else device_label(_ok(b)))
    fig_paths = {}
    for name, fig in figures.items():
        path = out_dir / "figures" / f"{name}.png"
        fig.savefig(path, dpi=150, bbox_inches="tight")
        fig_paths[name] = str(path)
    (out_dir / "summary.md").write_text(_summary(label, prov, a, b, tables, skipped))
    (out_dir / "inputs.json").write_text(json.dumps({k: str(v) for k, v in prov.items()}, indent=2))
    tags = {"source": prov["source"], "device_a": device_label(_ok(a))}
    if b is not None:
        tags["device_b"] = device_label(_ok(b))
    with start_run("characterize", run_name, tracking_uri=cfg.tracking.uri, tags=tags,
                   artifact_root=cfg.tracking.get("artifact_root")) as run_id:
        log_params({**prov, "rows_a": len(_ok(a)), "rows_b": None if b is None else len(_ok(b)),
                    "analysis": to_dict(an) if an else {}})
        log_metrics(_metrics(tables))
        log_artifact(out_dir)
    xd = tables.get("cross_device")
    print(f"carb-characterize: {label}: {len(tables)} tables, {len(fig_paths)} figures in {out_dir} "
          f"(MLflow run {run_id})")
    if xd is not None:
        print(to_markdown(xd.drop(columns=["device_a", "device_b"])), end="")
    return {"run_id": run_id, "output_dir": str(out_dir), "label": label, "tables": table_paths,
            "figures": fig_paths, "skipped_figures": dict(skipped),
            "cross_device": [] if xd is None else xd.to_dict("records")}


main = hydra_command("characterize")(run_characterize)

if __name__ == "__main__":
    main()
