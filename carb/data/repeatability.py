"""Run-to-run repeatability of a dataset's latency: how much a second measurement of the same configuration on
the same device differs from the first.

The collector (:func:`carb.measure.collector.measure_configs`, ``measure.repeat.passes`` >= 2) measures each
configuration in several passes over the rows, each pass in another order, so that a row's timed windows are
separated by other configurations' work. A row keeps the mean of its passes as ``latency_ms``, the number of
passes as ``latency_passes`` and their relative range as ``latency_repeat_spread``
(:func:`relative_spread`: ``(max - min) / mean``, a fraction; with two passes ``|a - b| / mean(a, b)``).

:func:`repeatability_floor` turns the spreads into the narrowest honest half-width of a prediction interval per
precision (a log ratio); :func:`repeatability_table` is the data card's summary per precision.
:func:`floor_log_sd` gives the same floor as one window's log standard deviation per precision (what the transfer
intervals take), and :func:`shipped_floor_log_sd` looks a device up by ``device_id`` in the shipped table
``carb/data/repeatability.csv`` (:func:`device_repeatability`, written by ``python scripts/data/repeatability.py``
from the shipped rows with a measured spread), for K rows that carry no spread of their own.

Peak memory: the collector keeps the first pass's memory as ``peak_memory_MB`` and the relative range of the
passes' peak memory as ``peak_memory_repeat_spread`` (:data:`MEMORY_SPREAD`); its repeatability comes from those
rows and from configurations measured again in another run (:func:`memory_pairs` reads both);
:func:`memory_floor` is the same floor for memory, shipped per device
in ``carb/data/memory-repeatability.csv`` (:func:`shipped_memory_floor`), which floors the cascade's memory
intervals (:func:`carb.model.intervals.memory_floor`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from carb.design.arch import PRECISIONS
from carb.resources import DATA_DIR

#: The repeatability columns of a dataset row (see :mod:`carb.data.schema`).
SPREAD, PASSES = "latency_repeat_spread", "latency_passes"
#: The relative range of a row's passes' peak memory (a fraction, :func:`relative_spread` of MB values).
MEMORY_SPREAD = "peak_memory_repeat_spread"
#: Fewest rows with a measured spread for a precision's floor.
MIN_ROWS = 5


def relative_spread(latencies_ms: Sequence[float]) -> float:
    """``(max - min) / mean`` of the passes' latencies (ms; a fraction, >= 0); NaN for fewer than two."""
    v = [float(x) for x in latencies_ms if x is not None and math.isfinite(float(x))]
    if len(v) < 2:
        return float("nan")
    m = sum(v) / len(v)
    return (max(v) - min(v)) / m if m > 0 else float("nan")


def spread_log_ratio(spread: np.ndarray | pd.Series) -> np.ndarray:
    """``|log(a / b)|`` of two passes whose relative spread is ``spread``: ``log((2 + s) / (2 - s))`` (exact for
    two passes; for more passes the range's, an upper bound of a pair's)."""
    s = np.clip(np.asarray(spread, dtype=float), 0.0, 1.999)
    return np.log((2.0 + s) / (2.0 - s))


def measured_spreads(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok rows of ``frame`` with a measured ``latency_repeat_spread``: columns ``precision``,
    ``latency_repeat_spread`` and ``latency_passes`` (empty when the frame predates the repeat protocol)."""
    if SPREAD not in frame.columns or "precision" not in frame.columns:
        return pd.DataFrame({"precision": pd.Series(dtype=str), SPREAD: pd.Series(dtype=float),
                             PASSES: pd.Series(dtype=float)})
    ok = frame if "status" not in frame.columns else frame[frame["status"].astype(str) == "ok"]
    s = pd.to_numeric(ok[SPREAD], errors="coerce")
    passes = pd.to_numeric(ok[PASSES], errors="coerce") if PASSES in ok.columns else pd.Series(np.nan, index=ok.index)
    keep = s.notna().to_numpy()
    return pd.DataFrame({"precision": ok["precision"].astype(str).to_numpy()[keep], SPREAD: s.to_numpy()[keep],
                         PASSES: passes.to_numpy()[keep]})


def repeatability_floor(frame: pd.DataFrame, coverage: float = 0.9, min_rows: int = MIN_ROWS) -> dict[str, float]:
    """Per precision, the narrowest honest half-width (a log ratio) of a ``coverage`` interval for one new
    latency measurement on the device of ``frame``: the ``coverage`` quantile of the rows' two-pass
    ``|log(a / b)|`` (:func:`spread_log_ratio`) divided by sqrt(2) (the difference of two independent windows
    spreads sqrt(2) times one window's). An interval ``[pred x exp(-h), pred x exp(+h)]`` narrower than this
    ``h`` claims more than a repeat measurement of the same row would hold to.

    Only precisions with at least ``min_rows`` ok rows with a measured spread appear; ``{}`` for a frame
    without the repeat columns (data measured before the repeat protocol, or ``measure.repeat.passes=1``)."""
    if not 0 < float(coverage) < 1:
        raise ValueError(f"coverage: must be in (0, 1), got {coverage!r}")
    m = measured_spreads(frame)
    out: dict[str, float] = {}
    for p, g in m.groupby("precision"):
        if len(g) >= int(min_rows):
            out[str(p)] = float(np.quantile(spread_log_ratio(g[SPREAD]), float(coverage)) / math.sqrt(2.0))
    return {p: out[p] for p in sorted(out, key=lambda q: (PRECISIONS.index(q) if q in PRECISIONS else 99, q))}


def repeatability_table(frame: pd.DataFrame, coverage: float = 0.9, min_rows: int = MIN_ROWS) -> pd.DataFrame:
    """The data card's repeatability, one row per precision of ``frame``'s ok rows: ``n_rows`` with a
    measured spread, ``passes`` (median passes per row), the spread's ``spread_median``, ``spread_p90`` and
    ``spread_max`` (fractions: 0.05 = 5 %), ``floor_log`` (:func:`repeatability_floor` at ``coverage``) and
    ``status`` (``ok``, or why a value is missing)."""
    m = measured_spreads(frame)
    floor = repeatability_floor(frame, coverage, min_rows)
    ok = frame if "status" not in frame.columns else frame[frame["status"].astype(str) == "ok"]
    precs = sorted(set(ok["precision"].astype(str)) if "precision" in ok.columns else set(),
                   key=lambda q: (PRECISIONS.index(q) if q in PRECISIONS else 99, q))
    rows = []
    for p in precs:
        g = m[m["precision"] == p]
        s = g[SPREAD].to_numpy(float)
        if not len(s):
            status = ("not measured (rows without latency_repeat_spread: measured before the repeat protocol "
                      "or with one pass)")
        elif p not in floor:
            status = f"too few rows for a floor ({len(s)} < {min_rows})"
        else:
            status = "ok"
        rows.append({"precision": p, "n_rows": int(len(s)),
                     "passes": float(np.median(g[PASSES])) if len(s) and g[PASSES].notna().any() else np.nan,
                     "spread_median": float(np.median(s)) if len(s) else np.nan,
                     "spread_p90": float(np.quantile(s, 0.9)) if len(s) else np.nan,
                     "spread_max": float(s.max()) if len(s) else np.nan,
                     "floor_log": floor.get(p, np.nan), "status": status})
    return pd.DataFrame(rows, columns=["precision", "n_rows", "passes", "spread_median", "spread_p90", "spread_max",
                                       "floor_log", "status"])


#: The shipped per-device, per-precision repeatability (:func:`device_repeatability` of the shipped rows).
SHIPPED_TABLE = DATA_DIR / "repeatability.csv"
#: Its columns.
DEVICE_COLUMNS = ("device_id", "precision", "n_rows", "spread_median", "floor_log", "floor_log_sd")


def coverage_z(coverage: float) -> float:
    """``z_{(1+c)/2}``, the normal quantile that converts a log standard deviation into the half-width of a
    symmetric ``coverage`` interval (``half = z * sd``) and back (``sd = half / z``): 1.645 at 0.9. The one
    place this conversion is written (the repeatability floor, :func:`carb.model.transfer_prior.floor_half`,
    :func:`carb.model.transfer_band.band_quantiles`)."""
    from scipy.stats import norm

    if not 0 < float(coverage) < 1:
        raise ValueError(f"coverage: must be in (0, 1), got {coverage!r}")
    return float(norm.ppf(0.5 + float(coverage) / 2.0))


def floor_log_sd(frame: pd.DataFrame, coverage: float = 0.9, min_rows: int = MIN_ROWS) -> dict[str, float]:
    """Per precision, :func:`repeatability_floor` as one window's log standard deviation: the ``coverage``
    half-width over :func:`coverage_z` (so that ``z * sd`` at ``coverage`` gives the floor back); ``{}`` without
    measured spreads."""
    z = coverage_z(coverage)
    return {p: h / z for p, h in repeatability_floor(frame, coverage, min_rows).items()}


def device_repeatability(frames: Sequence[pd.DataFrame], coverage: float = 0.9, min_rows: int = MIN_ROWS
                         ) -> pd.DataFrame:
    """One row per (``device_id``, precision) of the rows of ``frames`` with a measured spread (pooled over the
    frames): :data:`DEVICE_COLUMNS` (``floor_log``: :func:`repeatability_floor`, a ``coverage`` half-width;
    ``floor_log_sd``: :func:`floor_log_sd`); precisions with fewer than ``min_rows`` rows are left out."""
    parts = [f for f in frames if "device_id" in f.columns and SPREAD in f.columns]
    rows = []
    if parts:
        every = pd.concat(parts, ignore_index=True)
        for dev, g in every.groupby(every["device_id"].astype(str)):
            floor, sd = repeatability_floor(g, coverage, min_rows), floor_log_sd(g, coverage, min_rows)
            m = measured_spreads(g)
            for p in floor:
                s = m.loc[m["precision"] == p, SPREAD].to_numpy(float)
                rows.append({"device_id": dev, "precision": p, "n_rows": int(len(s)),
                             "spread_median": round(float(np.median(s)), 6), "floor_log": round(floor[p], 6),
                             "floor_log_sd": round(sd[p], 6)})
    return pd.DataFrame(rows, columns=list(DEVICE_COLUMNS))


def shipped_floor_log_sd(device_id: str | None, path: str | None = None) -> dict[str, float]:
    """``{precision: log sd}`` of ``device_id`` in the shipped table (``path``: another such table); ``{}``
    for an unknown device, no id, or no table (the configured ``transfer.repeatability_floor`` then holds)."""
    from pathlib import Path

    p = Path(path) if path is not None else SHIPPED_TABLE
    if not device_id or not p.exists():
        return {}
    t = pd.read_csv(p, dtype={"device_id": str})
    g = t[t["device_id"].astype(str) == str(device_id)]
    return {str(r.precision): float(r.floor_log_sd) for r in g.itertuples() if math.isfinite(float(r.floor_log_sd))}


#: The shipped per-device run-to-run spread of peak memory (:func:`memory_repeatability`).
MEMORY_TABLE = DATA_DIR / "memory-repeatability.csv"
#: Its columns: pairs of measurements, the share of pairs that differ at all, the spread's 90th percentile and
#: maximum (``|log(again / first)|``) and the 90 % floor (:func:`memory_floor`, a log ratio).
MEMORY_COLUMNS = ("device_id", "n_pairs", "share_differ", "spread_p90", "spread_max", "floor_log")


#: :func:`memory_pairs`'s columns.
PAIR_COLUMNS = ("device_id", "config_id", "measured_at", "pair", "peak_memory_MB", "peak_memory_MB_again",
                "log_ratio")


def _ok_rows(f: pd.DataFrame, cols: Sequence[str]) -> pd.DataFrame:
    """The ok rows of ``f`` with those of ``cols`` it has, ``device_id`` / ``config_id`` / ``measured_at`` as text."""
    f = f if "status" not in f.columns else f[f["status"].astype(str) == "ok"]
    f = f[[c for c in cols if c in f.columns]].copy()
    for c in ("device_id", "config_id", "measured_at"):
        if c in f.columns:
            f[c] = f[c].astype(str)
    return f


def memory_pass_pairs(frame: pd.DataFrame) -> pd.DataFrame:
    """One pair per ok row of ``frame`` with a measured ``peak_memory_repeat_spread`` (the collector's passes
    over the rows, one run): :data:`PAIR_COLUMNS` with ``pair`` = ``passes``, ``peak_memory_MB_again`` NaN (the
    spread has no sign) and ``log_ratio`` = :func:`spread_log_ratio` of the spread (exact for two passes, for
    more an upper bound of a pair's). Empty for a frame without the column (rows collected before it)."""
    if MEMORY_SPREAD not in frame.columns or "device_id" not in frame.columns:
        return pd.DataFrame(columns=list(PAIR_COLUMNS))
    f = _ok_rows(frame, ["device_id", "config_id", "measured_at", "peak_memory_MB", MEMORY_SPREAD])
    s = pd.to_numeric(f[MEMORY_SPREAD], errors="coerce").to_numpy(float)
    keep = np.isfinite(s) & (pd.to_numeric(f["peak_memory_MB"], errors="coerce").to_numpy(float) > 0)
    out = f.loc[keep].reset_index(drop=True)
    out["pair"], out["peak_memory_MB_again"] = "passes", np.nan
    out["log_ratio"] = spread_log_ratio(s[keep])
    if "measured_at" not in out.columns:
        out["measured_at"] = ""
    return out[list(PAIR_COLUMNS)]


def memory_pairs(first: pd.DataFrame, again: pd.DataFrame | None = None) -> pd.DataFrame:
    """Pairs of peak-memory measurements of one configuration on one device (:data:`PAIR_COLUMNS`), of two kinds
    (``pair``): ``runs``, the ok rows of ``again`` matched to the ok rows of ``first`` by ``device_id`` and
    ``config_id``, measured at another time (``measured_at``: a row shipped in both files is one measurement,
    not a pair; ``peak_memory_MB`` ``first``'s, ``peak_memory_MB_again`` ``again``'s, MB; ``log_ratio``
    ``|log(again / first)|``; rows without a positive memory on both sides left out); and ``passes``, each ok row
    of either frame with a measured ``peak_memory_repeat_spread`` (:func:`memory_pass_pairs`; a row shipped in
    both files counted once). ``again`` None: the pass pairs of ``first`` alone."""
    passes = [memory_pass_pairs(f) for f in (first, again) if f is not None]
    passes = [p for p in passes if len(p)]
    within = (pd.concat(passes, ignore_index=True).drop_duplicates(["device_id", "config_id", "measured_at"])
              if passes else pd.DataFrame(columns=list(PAIR_COLUMNS)))
    if again is None:
        return within.reset_index(drop=True)
    cols = ["device_id", "config_id", "peak_memory_MB", "measured_at"]
    m = _ok_rows(first, cols).merge(_ok_rows(again, cols), on=["device_id", "config_id"], suffixes=("", "_again"))
    if "measured_at" in m.columns and "measured_at_again" in m.columns:
        m = m[m["measured_at"] != m["measured_at_again"]]
    if "measured_at" not in m.columns:
        m["measured_at"] = ""
    a, b = m["peak_memory_MB"].to_numpy(float), m["peak_memory_MB_again"].to_numpy(float)
    keep = np.isfinite(a) & np.isfinite(b) & (a > 0) & (b > 0)
    runs = m.loc[keep].reset_index(drop=True)
    runs["pair"], runs["log_ratio"] = "runs", np.abs(np.log(b[keep] / a[keep]))
    runs = runs[list(PAIR_COLUMNS)]
    return pd.concat([p for p in (runs, within) if len(p)], ignore_index=True) if len(within) else runs


def memory_floor(pairs: pd.DataFrame, coverage: float = 0.9, min_pairs: int = MIN_ROWS) -> dict[str, float]:
    """Per ``device_id`` of ``pairs`` (:func:`memory_pairs`), the narrowest honest half-width (a log ratio) of a
    ``coverage`` interval of one new peak-memory measurement: the ``coverage`` quantile of the pairs'
    ``|log(again / first)|`` over sqrt(2), as :func:`repeatability_floor` does for latency; devices with fewer
    than ``min_pairs`` pairs are left out. 0 where at least a ``coverage`` share of the pairs repeat exactly."""
    if not 0 < float(coverage) < 1:
        raise ValueError(f"coverage: must be in (0, 1), got {coverage!r}")
    return {str(d): float(np.quantile(g["log_ratio"].to_numpy(float), float(coverage)) / math.sqrt(2.0))
            for d, g in pairs.groupby(pairs["device_id"].astype(str)) if len(g) >= int(min_pairs)}


def memory_repeatability(pairs: pd.DataFrame, coverage: float = 0.9, min_pairs: int = MIN_ROWS) -> pd.DataFrame:
    """One row per device of ``pairs`` (:func:`memory_pairs`) with at least ``min_pairs`` pairs:
    :data:`MEMORY_COLUMNS` (``floor_log``: :func:`memory_floor` at ``coverage``)."""
    floor = memory_floor(pairs, coverage, min_pairs)
    rows = []
    for dev, f in floor.items():
        r = pairs.loc[pairs["device_id"].astype(str) == dev, "log_ratio"].to_numpy(float)
        rows.append({"device_id": dev, "n_pairs": int(len(r)), "share_differ": round(float(np.mean(r > 0)), 6),
                     "spread_p90": round(float(np.quantile(r, 0.9)), 6), "spread_max": round(float(r.max()), 6),
                     "floor_log": round(f, 6)})
    return pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))


def shipped_memory_floor(device_id: str | None, path: str | None = None) -> float | None:
    """The measured peak-memory floor (a log ratio, :func:`memory_floor`) of ``device_id`` in the shipped table
    :data:`MEMORY_TABLE` (``path``: another such table); None for an unknown device, no id or no table."""
    from pathlib import Path

    p = Path(path) if path is not None else MEMORY_TABLE
    if not device_id or not p.exists():
        return None
    t = pd.read_csv(p, dtype={"device_id": str})
    v = t.loc[t["device_id"].astype(str) == str(device_id), "floor_log"].to_numpy(float)
    return float(v[0]) if len(v) and math.isfinite(v[0]) else None
