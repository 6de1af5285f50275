"""Run-to-run repeatability of a dataset's latency: how much a second measurement of the same configuration on
the same device differs from the first.

The collector (:func:`carb.measure.collector.measure_configs`, ``measure.repeat.passes`` >= 2) measures each
configuration in several passes over the rows, each pass in another order, so that a row's timed windows are
separated by other configurations' work. A row keeps the mean of its passes as ``latency_ms``, the number of
passes as ``latency_passes`` and their relative range as ``latency_repeat_spread``
(:func:`relative_spread`: ``(max - min) / mean``, a fraction; with two passes ``|a - b| / mean(a, b)``).

:func:`repeatability_floor` turns the spreads into the narrowest honest half-width of a prediction interval per
precision (a log ratio); :func:`repeatability_table` is the data card's summary per precision.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from carb.design.arch import PRECISIONS

#: The repeatability columns of a dataset row (see :mod:`carb.data.schema`).
SPREAD, PASSES = "latency_repeat_spread", "latency_passes"
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
