"""Interval prior of a few-shot transfer: the transfer errors measured across device pairs.

K calibration rows alone make a poor interval: their leave-one-out (LOO) log residuals are few, and the
space-filling picks sit at the edges of the space, where the transfer errs most. On the CPU pairs at K = 10
a Student-t interval on them was 2.1-6.5x wide (median hi/lo) while the rows not fitted on erred by at most
x1.3 in 90 % of cases. So the interval of a calibrated target combines two sources:

* the **table** ``carb/data/transfer-errors.csv`` (:func:`error_table`, written by
  ``python -m scripts.bench.transfer_pairs --errors-out``): per device kind (``cpu`` / ``gpu``), target,
  precision (``all``: every precision pooled) and K, quantiles at :data:`LEVELS` of ``|log(measured /
  predicted)|`` over the target rows a K-row calibration was not fitted on, each ordered device pair
  weighted equally, and ``loo_scale``: the median over pairs of the mean ``|LOO residual|`` of their K
  rows (:data:`LOO_STAT`);
* the **K rows**: the mean ``|LOO residual|`` of this calibration, ``s``.

The interval is symmetric in log space: ``+- f * Q(coverage)``, ``Q`` the table's quantile function of
``|log error|`` (pooled precisions, the stored K nearest this K), and ``f = exp(K log(s / loo_scale) /
(K + prior_rows))``: the ratio of this calibration's LOO scale to the table's, shrunk toward 1 by
``prior_rows`` pseudo-rows (an empirical-Bayes scale). Symmetric and pooled over precisions because the
sign and the precision of the remaining bias differ from pair to pair (measured leave-one-pair-out in
``scripts/bench/transfer_pairs.py``: per-precision or asymmetric priors covered 24-37 % of a precision
whose bias flipped). A precision that erred more than the pooled errors on the other pairs gets its own,
wider band, never a narrower one (:data:`PRECISION_BAND` ``widest``, :func:`precision_points`; EPYC -> Xeon
fp32 at K = 10 covered 0.81 of 89 rows with the pooled band, 0.87 with it). The entry stores a symmetric
pseudo-sample of log-ratios (and one per precision), so :func:`carb.model.intervals.interval` answers any
coverage from it.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import DatasetError

#: Levels of the stored ``|log error|`` quantiles.
LEVELS: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.975, 0.99)
#: Columns of the table, in order.
COLUMNS: tuple[str, ...] = ("kind", "target", "precision", "k", "level", "abs_log_error", "loo_scale",
                            "n_pairs", "n_rows")
#: Points per side of an entry's symmetric pseudo-sample.
_POINTS = 200


def table_path() -> Path:
    """The shipped table (``carb/data/transfer-errors.csv``)."""
    from carb.resources import DATA_DIR

    return Path(DATA_DIR) / "transfer-errors.csv"


def load_error_table(path: str | Path | None = None) -> pd.DataFrame | None:
    """The table at ``path`` (default :func:`table_path`); None when the default file is absent. Raises
    :class:`DatasetError` (one line) for an unreadable table or one without the :data:`COLUMNS`."""
    p = Path(path) if path is not None else table_path()
    if not p.exists() and path is None:
        return None
    return read_table(p, "transfer.error_prior", COLUMNS)


def read_table(p: Path, key: str, columns: Sequence[str]) -> pd.DataFrame:
    """The CSV table at ``p`` with ``columns``; one-line :class:`DatasetError` naming the config ``key``
    when it is absent, unreadable or lacks a column."""
    if not p.exists():
        raise DatasetError(f"{key}: {str(p)!r} does not exist")
    try:
        t = pd.read_csv(p)
    except Exception as e:   # any parse error is one line
        raise DatasetError(f"{key}: cannot read {str(p)!r}: {' '.join(str(e).split())}") from None
    missing = [c for c in columns if c not in t.columns]
    if missing:
        raise DatasetError(f"{key}: {str(p)!r} lacks columns {missing}")
    return t


def device_kind(X: pd.DataFrame) -> str | None:
    """``cpu`` or ``gpu`` for rows of one device (``device_kind``: cpu / cuda / import, else the
    fingerprint's ``kind``); None when neither says."""
    import json

    if "device_kind" in X.columns and X["device_kind"].notna().any():
        k = str(X["device_kind"].dropna().astype(str).mode().iloc[0])
        if k in ("cpu", "cuda"):
            return "cpu" if k == "cpu" else "gpu"
    if "device_fingerprint" in X.columns and X["device_fingerprint"].notna().any():
        try:
            fp = json.loads(str(X["device_fingerprint"].dropna().iloc[0]))
        except (TypeError, ValueError):
            return None
        kind = fp.get("kind") if isinstance(fp, dict) else None
        return {"cpu": "cpu", "cuda": "gpu"}.get(str(kind)) if kind else None
    return None


#: The statistic of |LOO residual| that measures a calibration's scale (``s``) and the table's ``loo_scale``:
#: ``mean``, chosen fully nested leave-one-pair-out over median / mean / rms x 0 / 10 / 30 / 100 pseudo-rows
#: (``python -m scripts.bench.transfer_pairs --interval-sweep``: the mean in 14 of 14 folds, 10 pseudo-rows in
#: 10); the median let the calmest precision's rows set the scale of all. Benchmark: ``--loo-stat``.
LOO_STAT: str = "mean"
LOO_STATS: tuple[str, ...] = ("median", "mean", "rms")


def loo_stat(abs_loo: np.ndarray) -> float:
    """:data:`LOO_STAT` of ``|LOO residuals|`` (one of :data:`LOO_STATS`)."""
    a = np.asarray(abs_loo, float)
    return float({"median": np.median, "mean": np.mean, "rms": lambda v: np.sqrt(np.mean(v ** 2))}[LOO_STAT](a))


def symmetric_log_ratios(half: float) -> list[float]:
    """A precision's ``precision_log_ratios`` entry for a symmetric band of half-width ``half`` (log): 50 points
    at ``-half`` and 50 at ``+half`` (rounded to 6 digits), whose quantiles are the band's edges."""
    return [round(v, 6) for v in [-half] * 50 + [half] * 50]


def _pair_points(abs_err: np.ndarray) -> np.ndarray:
    """One pair's ``|log error|`` as :data:`_POINTS` equally weighted quantile points."""
    return np.quantile(abs_err, (np.arange(_POINTS) + 0.5) / _POINTS)


def error_table(records: Sequence[Mapping[str, Any]], min_rows: int = 3) -> pd.DataFrame:
    """The table (:data:`COLUMNS`) from per-pair records: ``kind``, ``target``, ``k``, ``pair`` (any
    hashable), ``err`` (log(measured / predicted) of the rows not fitted on, (n,)), ``precision`` ((n,)),
    ``loo`` (the K rows' LOO log residuals). Each pair weighs the same (a pair contributes
    :data:`_POINTS` quantile points); a precision needs ``min_rows`` rows in a pair to count there."""
    groups: dict[tuple, dict[str, Any]] = {}
    for r in records:
        err, prec = np.asarray(r["err"], float), np.asarray(r["precision"]).astype(str)
        ok = np.isfinite(err)
        loo = np.abs(np.asarray(r.get("loo", []), float))
        for p in [*np.unique(prec[ok]), "all"]:
            m = ok & ((prec == p) if p != "all" else True)
            if m.sum() < min_rows:
                continue
            g = groups.setdefault((r["kind"], r["target"], str(p), int(r["k"])), {"points": [], "loo": [], "n": 0})
            g["points"].append(_pair_points(np.abs(err[m])))
            g["n"] += int(m.sum())
            if len(loo) >= 2:
                g["loo"].append(loo_stat(loo))
    rows = []
    for (kind, target, p, k), g in sorted(groups.items()):
        pooled = np.concatenate(g["points"])
        scale = float(np.median(g["loo"])) if g["loo"] else float("nan")
        for lev, q in zip(LEVELS, np.quantile(pooled, LEVELS)):
            rows.append({"kind": kind, "target": target, "precision": p, "k": k, "level": lev,
                         "abs_log_error": round(float(q), 6), "loo_scale": round(scale, 6),
                         "n_pairs": len(g["points"]), "n_rows": g["n"]})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _nearest_k(ks: np.ndarray, k: int) -> int:
    """The stored K nearest ``k`` in log scale (the larger on a tie)."""
    ks = np.sort(np.unique(ks.astype(int)))
    d = np.abs(np.log(ks) - math.log(max(k, 1)))
    return int(ks[np.flatnonzero(d == d.min())[-1]])


#: How the band of a precision is set: ``pooled`` (every precision the pooled band) or ``widest`` (each
#: precision the wider, level by level, of the pooled band and the band of that precision's errors in the
#: table, both times the same LOO factor: a precision that erred more on the other pairs gets the wider band,
#: one whose bias flipped keeps the pooled one). Chosen leave-one-pair-out (``python -m
#: scripts.bench.transfer_pairs --precision-sweep``): ``widest`` in 14 of 14 folds (fully nested: 12, the 2
#: CPU folds tie: the other CPU pair is then left without a prior). Benchmark:
#: ``--precision-band``.
PRECISION_BAND: str = "widest"
PRECISION_BANDS: tuple[str, ...] = ("pooled", "widest")


def _half_points(sel: pd.DataFrame) -> np.ndarray:
    """:data:`_POINTS` equally weighted ``|log error|`` points of one table entry (rows of one kind, target,
    precision and K, sorted by level), interpolated between the stored quantiles (0 at level 0)."""
    lev = np.concatenate([[0.0], sel["level"].to_numpy(float)])
    val = np.concatenate([[0.0], sel["abs_log_error"].to_numpy(float)])
    return np.interp((np.arange(_POINTS) + 0.5) / _POINTS, lev, val)


def precision_points(table: pd.DataFrame, kind: str, target: str, k: int, half: np.ndarray, factor: float
                     ) -> dict[str, list[float]]:
    """``{precision: sorted symmetric log-ratios}`` (2 :data:`_POINTS` each) of the table's precisions of
    ``kind`` / ``target`` at stored K ``k``: per level the larger of the pooled ``half`` (already times
    ``factor``) and ``factor`` times that precision's own ``|log error|`` points (:data:`PRECISION_BAND`
    ``widest``), so no precision's band is narrower than the pooled one."""
    sel = table[(table["kind"] == kind) & (table["target"] == target) & (table["k"] == k)
                & (table["precision"].astype(str) != "all")]
    out = {}
    for p, g in sel.groupby(sel["precision"].astype(str)):
        h = np.maximum(half, factor * _half_points(g.sort_values("level")))
        out[str(p)] = [round(float(v), 6) for v in np.sort(np.concatenate([-h, h]))]
    return out


def prior_entry(table: pd.DataFrame | None, kind: str | None, target: str, loo: np.ndarray, k: int,
                coverage: float, prior_rows: float) -> dict[str, Any] | None:
    """The interval calibration (an :func:`carb.model.intervals.interval` entry) of one calibrated target
    from the table's rows of ``kind`` / ``target`` (pooled precisions) and the K rows' LOO log residuals
    ``loo`` (module docstring), with ``precision_log_ratios`` (:func:`precision_points`) where
    :data:`PRECISION_BAND` is ``widest``; None when the table has no such rows."""
    if table is None or kind is None:
        return None
    sel = table[(table["kind"] == kind) & (table["target"] == target) & (table["precision"].astype(str) == "all")]
    if not len(sel):
        return None
    kk = _nearest_k(sel["k"].to_numpy(), k)
    sel = sel[sel["k"] == kk].sort_values("level")
    ref = float(sel["loo_scale"].iloc[0])
    loo = np.abs(np.asarray(loo, float))
    factor = 1.0
    if len(loo) >= 2 and math.isfinite(ref) and ref > 0:
        s = max(loo_stat(loo), 1e-6)
        factor = math.exp(len(loo) * math.log(s / ref) / (len(loo) + float(prior_rows)))
    half = factor * _half_points(sel)
    ratios = np.sort(np.concatenate([-half, half]))
    from carb.model.intervals import conformal_bounds

    lo, hi = conformal_bounds(ratios, coverage)
    n_pairs = int(sel["n_pairs"].iloc[0])
    by_prec = precision_points(table, kind, target, kk, half, factor) if PRECISION_BAND == "widest" else {}
    return {"lower": float(lo), "upper": float(hi), "n": int(k), "coverage": float(coverage),
            "log_ratios": [round(float(v), 6) for v in ratios],
            **({"precision_log_ratios": by_prec} if by_prec else {}),
            "method": (f"transfer-error prior ({kind}, K={kk}, {n_pairs} device pair(s)) x {factor:.2f}: the K rows' "
                       f"leave-one-out scale shrunk by {float(prior_rows):g} pseudo-rows"
                       + (f"; {', '.join(sorted(by_prec))} each at least its own band" if by_prec else "")),
            "prior": {"kind": kind, "k": kk, "n_pairs": n_pairs, "factor": factor}}


# ---------------------------------------------------------------------- device-level band (issue 44)
#: How the device-level band widens for few devices (``transfer.device_widen``, :func:`device_level_band`):
#:
#: * ``student-t``: a Student-t prediction interval of a new device's bias centred on no bias,
#:   ``t(df = D) * rms(bias)`` (the rms about 0 of D draws has D degrees of freedom), D the fewer of the distinct
#:   devices and the distinct pairs;
#: * ``predictive``: the textbook interval for the next draw, centred on the draws' mean,
#:   ``mean +- t(df = D - 1) * sd * sqrt(1 + 1/D)`` (7.7 sd at D = 2);
#: * ``pairs``: ``student-t`` with every (pair, precision) cell a draw (df = cells);
#: * ``pooled``: ``student-t`` on the bias rms pooled over both device classes (scale-free at K > 0; each class
#:   its own where an F test at 5 % says the classes' bias spreads differ), df the devices of both classes.
DEVICE_WIDEN: str = "student-t"
DEVICE_WIDENS: tuple[str, ...] = ("student-t", "predictive", "pairs", "pooled")
#: A repeatability floor given as one number is the configured default (nothing measured on this device):
#: ``class-bound`` caps it at the run-to-run spread the band's own records allow (their pooled row residual's
#: ``coverage`` quantile over z: the held-out errors of the other devices of its class include their noise);
#: ``configured`` keeps it as configured. A floor measured per precision (a mapping) is never capped.
#: (``transfer.unmeasured_floor``.)
UNMEASURED_FLOOR: str = "class-bound"
UNMEASURED_FLOORS: tuple[str, ...] = ("configured", "class-bound")


@dataclass(frozen=True)
class IntervalRules:
    """The device-level band's rules of one calibration (``transfer`` of ``conf/calibrate.yaml``), passed
    explicitly to the functions that read them, so two calibrations in one process never share a setting.
    Fields (None: the module default at the time of use, :data:`DEVICE_WIDEN`, :data:`UNMEASURED_FLOOR`,
    :data:`LEVEL_BY_PRECISION`, :data:`ZERO_SHOT_TARGET_OUT`, :data:`TARGET_OUT_FALLBACK`, :data:`LEVEL_NOISE`)."""

    device_widen: str | None = None
    unmeasured_floor: str | None = None
    level_by_precision: str | None = None
    zero_shot_target_out: str | None = None
    target_out_fallback: str | None = None
    level_noise: str | None = None

    def __post_init__(self) -> None:
        """One-line ``ValueError`` naming the key and the allowed values for a value outside them."""
        for key, allowed in _RULE_KEYS.items():
            v = getattr(self, key)
            if v is not None and str(v) not in allowed():
                raise ValueError(f"transfer.{key}: {v!r}; allowed: {', '.join(allowed())}")

    def resolved(self) -> IntervalRules:
        """These rules with every unset field the module's default (read now: tests may patch them)."""
        g = globals()
        return IntervalRules(**{k: str(getattr(self, k)) if getattr(self, k) is not None else g[k.upper()]
                                for k in _RULE_KEYS})


#: Each rule's allowed values (read lazily: the tuples are defined below).
_RULE_KEYS = {"device_widen": lambda: DEVICE_WIDENS, "unmeasured_floor": lambda: UNMEASURED_FLOORS,
              "level_by_precision": lambda: LEVEL_BY_PRECISIONS,
              "zero_shot_target_out": lambda: ZERO_SHOT_TARGET_OUTS,
              "target_out_fallback": lambda: TARGET_OUT_FALLBACKS, "level_noise": lambda: LEVEL_NOISES}


def rules_of(rules: IntervalRules | None) -> IntervalRules:
    """``rules`` with every unset field the module default (:meth:`IntervalRules.resolved`); None: the defaults."""
    return (rules or IntervalRules()).resolved()


def configure(device_widen: str | None = None, unmeasured_floor: str | None = None,
              level_by_precision: str | None = None, zero_shot_target_out: str | None = None,
              target_out_fallback: str | None = None, level_noise: str | None = None) -> IntervalRules:
    """The interval rules from ``transfer`` of ``conf/calibrate.yaml`` (``device_widen``: :data:`DEVICE_WIDEN`,
    ``unmeasured_floor``: :data:`UNMEASURED_FLOOR`, ``level_by_precision``: :data:`LEVEL_BY_PRECISION`,
    ``zero_shot_target_out``: :data:`ZERO_SHOT_TARGET_OUT`, ``target_out_fallback``: :data:`TARGET_OUT_FALLBACK`,
    ``level_noise``: :data:`LEVEL_NOISE`) as an :class:`IntervalRules` (None: the default);
    nothing module-wide changes. Raises ``ValueError`` (one line naming the key and the allowed values) for
    another value."""
    return IntervalRules(*(None if v is None else str(v) for v in (device_widen, unmeasured_floor,
                                                                     level_by_precision, zero_shot_target_out,
                                                                     target_out_fallback, level_noise)))


def pair_bias_residuals(err: np.ndarray) -> tuple[float, np.ndarray]:
    """One device pair's ``log(measured / predicted)`` errors (n,) split into the pair's bias (their
    median: the share every row of the new device shares) and the row-level residuals (n,) around it."""
    e = np.asarray(err, float)
    e = e[np.isfinite(e)]
    if not len(e):
        return float("nan"), e
    b = float(np.median(e))
    return b, e - b


def same_class(records: Sequence[Mapping[str, Any]], kind: str | None) -> list[Mapping[str, Any]]:
    """The records of device class ``kind`` (``cpu`` / ``gpu``, a record's ``kind``); all of them where
    ``kind`` is None. A band never borrows another class's errors: a GPU transfer errs by a few percent, a
    CPU transfer by tens (the CPU pairs' zero-shot band rested on GPU pairs and covered 0.37-0.71)."""
    if kind is None:
        return list(records)
    return [r for r in records if str(r.get("kind")) == str(kind)]


def floor_half(floor_log_sd: float | Mapping[str, float], coverage: float) -> tuple[float, dict[str, float]]:
    """The repeatability floor as ``coverage`` half-widths (log ratio): ``(pooled, {precision: half})``.
    ``floor_log_sd``: one log standard deviation for every precision, or ``{precision: log sd, "default":
    log sd}`` (a device measured per precision, :func:`carb.data.repeatability.floor_log_sd`); the pooled
    floor is the smallest value (each precision then widened to its own; one without a value keeps
    ``default``)."""
    from carb.data.repeatability import coverage_z

    z = coverage_z(coverage)
    if not isinstance(floor_log_sd, Mapping):
        return z * max(float(floor_log_sd or 0.0), 0.0), {}
    vals = {str(p): max(float(v), 0.0) for p, v in floor_log_sd.items() if v is not None and math.isfinite(float(v))}
    if not vals:
        return 0.0, {}
    pooled = min(vals.values())
    return z * pooled, {p: z * v for p, v in vals.items() if p != "default" and v > pooled}


def precision_widening(loo: np.ndarray, precision: np.ndarray, scale: float, prior_rows: float = 10.0
                       ) -> dict[str, float]:
    """``{precision: factor >= 1}`` for the precisions whose own K rows' leave-one-out residuals ``loo`` (K,)
    err more than the common ``scale`` (:func:`row_scale`): their ratio ``r = loo_stat(p) / scale`` shrunk
    toward 1 by ``prior_rows`` pseudo-rows, ``exp(n_p log r / (n_p + prior_rows))`` (the empirical-Bayes
    rule of :func:`prior_entry`): 3 rows with one outlier once made one precision's band x7.5 as wide (EPYC
    Zen 5 fp32 at K = 10, median hi/lo 8.97); now x1.6."""
    a, prec = np.abs(np.asarray(loo, float)), np.asarray(precision).astype(str)
    out = {}
    if not (len(a) == len(prec) and math.isfinite(scale) and scale > 0):
        return out
    for p in np.unique(prec):
        m = prec == p
        if m.sum() >= 2 and loo_stat(a[m]) > scale:
            n = float(m.sum())
            out[str(p)] = math.exp(n * math.log(loo_stat(a[m]) / scale) / (n + max(float(prior_rows), 0.0)))
    return out


def device_level_band(records: Sequence[Mapping[str, Any]], coverage: float = 0.9,
                      floor_log_sd: float | Mapping[str, float] = 0.0, scale: float | None = None,
                      kind: str | None = None, rules: IntervalRules | None = None) -> dict[str, Any] | None:
    """A prediction interval for a device none of ``records`` involves: a device-level bias term plus the
    row-level residual, in log space (an :func:`carb.model.intervals.interval` entry, symmetric).

    ``records``: per ordered device pair, ``pair`` ((source, target) names), ``err`` (log(measured /
    predicted) of that pair's rows the model was not fitted on, (n,)), ``kind`` (``cpu`` / ``gpu``),
    optionally ``precision`` ((n,): each precision of a pair is then its own bias draw, :func:`_cells`) and,
    where ``scale`` is given, ``scale`` (that pair's own row-level scale, e.g. the mean |leave-one-out
    residual| of its K rows). The caller leaves out every pair involving the new pair's two devices
    (leave-one-device-out, :func:`lodo_records`). ``kind``: the new pair's class; only records of that class
    count (:func:`same_class`), and without any the band is None: the caller falls back to what the target
    itself measured and says it rests on 0 devices of its class.

    * bias: each pair's (and precision's) median error ``b_j`` (:func:`pair_bias_residuals`); a new device is
      one more draw, centred on no bias: ``h_b = t_{(1+c)/2}(df = D) * rms(b)`` with ``D`` the independent
      draws: the fewer of the distinct devices and the distinct pairs (D = 2 gives t = 2.9 at 90 %, D = 5
      gives 2.0); :data:`DEVICE_WIDEN` picks another rule (``predictive``: centred on the draws' mean,
      ``pairs``, ``pooled``);
    * rows: ``h_r``, the ``coverage`` quantile of the pooled ``|residual|``, each pair weighted equally;
    * combined as independent terms: ``half = sqrt(h_b^2 + h_r^2)``, never below the repeatability floor
      (:func:`floor_half` of ``floor_log_sd``: a log standard deviation, or one per precision: those above
      the pooled floor get ``precision_log_ratios`` at their own); a floor given as one number (configured,
      nothing measured) is first capped at what the records' row residuals allow (:data:`UNMEASURED_FLOOR`,
      :func:`_cap_unmeasured_floor`).

    * ``level_noise: swap`` (``rules``) where every record carries its ``noise`` (its target device's run-to-run
      log sd, per precision: :func:`noise_sd`; ``carb/data/transfer-pairs.csv``'s ``noise_log_sd``): each pair's
      row residual with its own noise taken out (:func:`_bias_draws`) and this device's (``floor_log_sd``) added
      back in quadrature per precision (:func:`swap_noise`), as :func:`held_out_level_band` does; records without
      it (an older table) keep their residuals and the floor stays a floor.

    ``scale``: the bias and residuals of each pair are first divided by its record's ``scale`` and the
    half-width multiplied by ``scale`` (scale-free). ``rules``: this calibration's :class:`IntervalRules`
    (None: the defaults). Returns ``{"lower", "upper", "n", "coverage",
    "log_ratios", "method", "n_devices", "n_pairs", "bias_rms", "half_bias", "half_rows", "kind"}`` (and
    ``precision_log_ratios`` where a precision's floor is wider); None without any pair of finite errors (of
    ``kind``). Its ``log_ratios`` are empty: the band answers its own ``coverage`` only."""
    from scipy.stats import t as student_t

    rules = rules_of(rules)
    mine = same_class(records, kind)   # swap only where every pair's noise is known (else it would count twice)
    swap = rules.level_noise == "swap" and bool(mine) and all(r.get("noise") is not None for r in mine)
    own = _bias_draws(_cells(mine), scale, coverage if swap else None)
    if own is None:
        return None
    b, points, raw, devices, pairs = own
    q = 0.5 + coverage / 2.0
    n_dev = max(min(len(devices), len(pairs)), 2)
    rms_b = float(np.sqrt(np.mean(b ** 2)))
    widen = rules.device_widen
    centre, how = 0.0, widen
    if widen == "predictive":
        sd = float(np.std(b, ddof=1)) if len(b) >= 2 else abs(float(b[0]))
        centre = float(np.mean(b))
        h_b = float(student_t.ppf(q, df=n_dev - 1)) * sd * math.sqrt(1.0 + 1.0 / n_dev)
        how = f"predictive (centred on the mean bias, df {n_dev - 1})"
    else:
        if widen == "pairs":
            n_dev = max(len(b), 2)
        elif widen == "pooled" and kind is not None:
            rms_b, n_dev, how = _pooled_bias_rms(b, n_dev, records, kind, scale)
        h_b = float(student_t.ppf(q, df=n_dev)) * rms_b
        how = how if widen == "pooled" and kind is not None else f"{widen} (df {n_dev})"
    h_r = float(np.quantile(np.concatenate(points), coverage))
    mult = float(scale) if scale is not None else 1.0
    measured = mult * math.sqrt(h_b ** 2 + h_r ** 2)
    floor_log_sd, capped = _cap_unmeasured_floor(floor_log_sd, raw, coverage, rules.unmeasured_floor)
    pooled_floor, by_prec = floor_half(floor_log_sd, coverage)
    if swap:   # the pairs' row noise was taken out (_bias_draws): this device's own added back in quadrature
        measured, by_noise = swap_noise(measured, {}, floor_log_sd, coverage)
        by_prec = {p: max(h, by_noise.get(p, 0.0)) for p, h in {**by_noise, **by_prec}.items()}
    lower, upper = min(mult * centre - measured, -pooled_floor), max(mult * centre + measured, pooled_floor)
    half = max(-lower, upper)
    wider = {p: h for p, h in by_prec.items() if h > half}
    floored = pooled_floor > measured + 1e-12
    cls = f"{kind} " if kind else ""
    return {"lower": lower, "upper": upper, "n": int(sum(len(p) for p in points)), "coverage": float(coverage),
            "log_ratios": [],
            **({"precision_log_ratios": {p: symmetric_log_ratios(h) for p, h in wider.items()}}
               if wider else {}),
            "method": (f"device-level band: measured on {len(devices)} {cls}device(s) ({len(b)} pair(s)); "
                       f"device bias rms {rms_b:.3f}{' (scale-free)' if scale is not None else ''} widened "
                       f"{how} plus row residual"
                       + (f"; at the repeatability floor (half-width {pooled_floor:.3f})" if floored else "")
                       + (f"; the configured floor capped at {capped:.3f} (log sd; nothing measured on this device, "
                          "the run-to-run spread the other devices' held-out errors allow)" if capped is not None
                          else "")
                       + (f"; {', '.join(sorted(wider))} at {'their' if len(wider) > 1 else 'its'} own repeatability "
                          "floor" if wider else "")
                       + ("; each pair's row noise taken out, this device's added (level_noise: swap)" if swap
                          else "")),
            "n_devices": len(devices), "n_pairs": len(b), "bias_rms": rms_b,
            "half_bias": mult * h_b, "half_rows": mult * h_r, "kind": kind}


def _bias_draws(cells: Sequence[Mapping[str, Any]], scale: float | None, deconvolve: float | None = None
                ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray], set, set] | None:
    """The device bias draws of ``cells`` (:func:`_cells`): ``(biases (D,), |residual| points per cell (over
    its ``scale`` where ``scale`` is given), |residual| points per cell in log units as measured, devices,
    pairs)``; None without a cell of finite errors (and, scale-free, a positive ``scale``). ``deconvolve`` (a
    coverage; None: off, ``level_noise: keep``): each cell's residuals about its bias scaled by
    ``sqrt(max(h^2 - (z s)^2, 0)) / h`` (``h`` their ``deconvolve`` quantile of |residual|, ``s`` the cell's
    ``noise``, its target device's run-to-run log sd, :func:`noise_sd`; ``z``
    :func:`carb.data.repeatability.coverage_z`): the row term a noiseless device would show
    (:func:`noise_free_scale`, as :func:`deconvolve_noise` for the row residual; the bias is a device's, not noise)."""
    biases, points, raw, devices, pairs = [], [], [], set(), set()
    for r in cells:
        b, res = pair_bias_residuals(r["err"])
        if not len(res):
            continue
        measured = res   # as measured (the unmeasured floor's cap reads these: they hold the devices' noise)
        if deconvolve is not None and r.get("noise") is not None:
            res = res * noise_free_scale(res, deconvolve, noise_sd(r["noise"]))
        div = 1.0
        if scale is not None:
            div = float(r.get("scale") or float("nan"))
            if not (math.isfinite(div) and div > 0):
                continue
        biases.append(b / div)
        points.append(_pair_points(np.abs(res) / div))
        raw.append(_pair_points(np.abs(measured)))
        devices.update(str(d) for d in r["pair"])
        pairs.add(tuple(map(str, r["pair"])))
    if not biases:
        return None
    return np.asarray(biases), points, raw, devices, pairs


def _pooled_bias_rms(b: np.ndarray, n_dev: int, records: Sequence[Mapping[str, Any]], kind: str,
                     scale: float | None) -> tuple[float, int, str]:
    """``(rms, df, how)`` of :data:`DEVICE_WIDEN` ``pooled``: the bias mean square of ``b`` (this class, ``n_dev``
    independent draws) pooled with that of the other classes' ``records`` (same units: scale-free where
    ``scale`` is given), weighted by their draws; this class's alone where a two-sided F test at 5 % says the
    two spreads differ or no other class has draws."""
    from scipy.stats import f as f_dist

    rms = float(np.sqrt(np.mean(b ** 2)))
    other = _bias_draws(_cells([r for r in records if str(r.get("kind")) != str(kind)]), scale)
    if other is None:
        return rms, n_dev, f"student-t (df {n_dev}; no other class to pool)"
    ob, _, _, odev, opairs = other
    n_oth = max(min(len(odev), len(opairs)), 2)
    ms, oms = float(np.mean(b ** 2)), float(np.mean(ob ** 2))
    ratio = ms / max(oms, 1e-300)
    p = 2.0 * min(f_dist.cdf(ratio, n_dev, n_oth), f_dist.sf(ratio, n_dev, n_oth))
    if p < 0.05:
        return rms, n_dev, f"student-t (df {n_dev}; its class alone: F test p={p:.2g} against the other class)"
    pooled = math.sqrt((n_dev * ms + n_oth * oms) / (n_dev + n_oth))
    return pooled, n_dev + n_oth, (f"student-t on the bias rms pooled over both classes (df {n_dev + n_oth}, "
                                   f"F p={p:.2g})")


def _cap_unmeasured_floor(floor_log_sd: float | Mapping[str, float], raw: list[np.ndarray], coverage: float,
                          rule: str | None = None) -> tuple[float | Mapping[str, float], float | None]:
    """``(floor, cap)``: a floor given as one number (configured, nothing measured on this device) capped at
    the run-to-run spread the records' held-out row residuals allow (``raw``: their |residual| points in log
    units, each cell weighted equally; their ``coverage`` quantile over z) where ``rule`` (None:
    :data:`UNMEASURED_FLOOR`) is ``class-bound`` (``cap``: the value, None when not capped); a measured floor (a
    mapping) as it is."""
    if (rule or UNMEASURED_FLOOR) != "class-bound" or isinstance(floor_log_sd, Mapping) or not raw:
        return floor_log_sd, None
    from carb.data.repeatability import coverage_z

    bound = float(np.quantile(np.concatenate(raw), coverage)) / coverage_z(coverage)
    f = float(floor_log_sd or 0.0)
    return (bound, bound) if bound < f else (f, None)


def target_out_records(records: Sequence[Mapping[str, Any]], pair: tuple[str, str]) -> list[Mapping[str, Any]]:
    """The records whose ``pair`` does not involve the target device ``pair[1]`` (nor is ``pair`` itself): the
    source's own transfers to and from other devices count. Leave-one-*target*-device-out, the fallback of
    :func:`held_out_level_band` where no pair avoids both devices (three CPUs)."""
    tgt, own = str(pair[1]), tuple(map(str, pair))
    return [r for r in records if tgt not in set(map(str, r["pair"])) and tuple(map(str, r["pair"])) != own]


#: Per precision, the level band of :func:`held_out_level_band`: ``pooled`` (every precision the pooled level),
#: ``own`` (each precision the ``coverage`` quantile of its own |log error| over the pairs, where every pair has
#: at least 3 of its rows), ``widest`` (the larger of the two). ``transfer.level_by_precision``.
LEVEL_BY_PRECISION: str = "widest"
LEVEL_BY_PRECISIONS: tuple[str, ...] = ("pooled", "own", "widest")

#: Where :func:`held_out_level_band`'s pivot finds the pairs' ratio of held-out error to their own K-row interval
#: steadier than the level itself: ``own`` (no band: the caller keeps this transfer's own K-row interval, i.e. a
#: ratio of 1) or ``ratio`` (this transfer's own K-row half-width times the pairs' ``coverage`` quantile of
#: |held-out error| / own half-width: the predictor the pivot found steadier, scaled as measured). ``transfer.
#: target_out_fallback``.
TARGET_OUT_FALLBACK: str = "own"
TARGET_OUT_FALLBACKS: tuple[str, ...] = ("own", "ratio")


def _precision_levels(records: Sequence[Mapping[str, Any]], coverage: float, pooled: float,
                      rule: str | None = None) -> dict[str, float]:
    """``{precision: half-width}`` of :data:`LEVEL_BY_PRECISION` from ``records`` carrying ``precision`` (n,)
    beside ``err``: each pair's |log error| of that precision as equally weighted points; a precision that
    some pair has fewer than 3 rows of keeps the pooled level."""
    per: dict[str, list[np.ndarray]] = {}
    n_pairs = 0
    for r in records:
        if r.get("precision") is None:
            return {}
        e, prec = np.abs(np.asarray(r["err"], float)), np.asarray(r["precision"]).astype(str)
        n_pairs += 1
        for p in np.unique(prec):
            m = (prec == p) & np.isfinite(e)
            if m.sum() >= 3:
                per.setdefault(str(p), []).append(_pair_points(e[m]))
    out = {}
    for p, pts in per.items():
        if len(pts) == n_pairs and n_pairs >= 2:
            h = float(np.quantile(np.concatenate(pts), coverage))
            out[p] = max(h, pooled) if (rule or LEVEL_BY_PRECISION) == "widest" else h
    return out


#: The run-to-run noise in :func:`held_out_level_band`'s level: ``swap`` (each pair's held-out errors with the
#: noise of the rows they were measured on, its target device's repeatability, taken out in quadrature per precision,
#: and the new target's own repeatability added back: :func:`swap_noise`) or ``keep`` (the pairs' errors as measured,
#: carrying their own devices' noise). ``transfer.level_noise``.
LEVEL_NOISE: str = "swap"
LEVEL_NOISES: tuple[str, ...] = ("keep", "swap")


def noise_sd(noise: float | Mapping[str, float] | None, precision: str | None = None) -> float:
    """One device's run-to-run log standard deviation for ``precision``: ``noise`` one number (every precision)
    or ``{precision: log sd, "default": log sd}`` (:func:`device_floor`; a precision without a value takes
    ``default``, else the smallest value); 0 for None."""
    if noise is None:
        return 0.0
    if not isinstance(noise, Mapping):
        v = float(noise)
        return v if math.isfinite(v) and v > 0 else 0.0
    vals = {str(k): float(v) for k, v in noise.items() if v is not None and math.isfinite(float(v))}
    v = vals.get(str(precision), vals.get("default", min(vals.values()) if vals else 0.0))
    return max(v, 0.0)


def deconvolve_noise(records: Sequence[Mapping[str, Any]], coverage: float) -> list[Mapping[str, Any]]:
    """``records`` (``err`` (n,) log errors, optionally ``precision`` (n,) and ``noise``: the log sd of the rows'
    run-to-run spread on the pair's target device, :func:`noise_sd`) with each precision's errors scaled by
    ``sqrt(max(h^2 - (z s)^2, 0)) / h``: ``h`` their ``coverage`` quantile of |error|, ``s`` that precision's noise,
    ``z`` :func:`carb.data.repeatability.coverage_z` (the level a noiseless device would show, shape kept). A record
    without ``noise`` is unchanged."""
    out = []
    for r in records:
        if r.get("noise") is None:
            out.append(r)
            continue
        e = np.asarray(r["err"], float).copy()
        prec = (np.asarray(r["precision"]).astype(str) if r.get("precision") is not None
                else np.full(len(e), "default"))
        for p in np.unique(prec):
            m = (prec == p) & np.isfinite(e)
            if m.any():
                e[m] *= noise_free_scale(e[m], coverage, noise_sd(r["noise"], p))
        out.append({**r, "err": e})
    return out


def noise_free_scale(errors: np.ndarray, coverage: float, sd: float) -> float:
    """The factor ``sqrt(max(h^2 - (z sd)^2, 0)) / h`` that takes a run-to-run noise of log sd ``sd`` out of log
    ``errors`` (n,): ``h`` their ``coverage`` quantile of |error|, ``z`` :func:`carb.data.repeatability.coverage_z`;
    1 where ``h`` is 0 (nothing to scale)."""
    from carb.data.repeatability import coverage_z

    h = float(np.quantile(np.abs(errors), coverage))
    return math.sqrt(max(h ** 2 - (coverage_z(coverage) * sd) ** 2, 0.0)) / h if h > 0 else 1.0


def swap_noise(half: float, by_precision: Mapping[str, float], own_noise: float | Mapping[str, float] | None,
               coverage: float) -> tuple[float, dict[str, float]]:
    """The noiseless level ``half`` (log ratio) and per-precision levels ``by_precision`` with the new target's own
    run-to-run noise ``own_noise`` (:func:`noise_sd`) added in quadrature: ``(sqrt(half^2 + (z s_min)^2), {precision:
    sqrt(level_p^2 + (z s_p)^2)})`` (``level_p`` ``half`` for a precision without one), every precision of ``by_precision`` or of ``own_noise`` (``s_min`` the
    smallest of ``own_noise``'s values, as :func:`floor_half` takes the pooled floor)."""
    from carb.data.repeatability import coverage_z

    z = coverage_z(coverage)
    named = {str(p) for p in own_noise if str(p) != "default"} if isinstance(own_noise, Mapping) else set()
    vals = ([noise_sd(own_noise, p) for p in named | {"default"}] if isinstance(own_noise, Mapping)
            else [noise_sd(own_noise)])
    pooled = math.sqrt(half ** 2 + (z * min(vals)) ** 2)
    byp = {p: math.sqrt(float(by_precision.get(p, half)) ** 2 + (z * noise_sd(own_noise, p)) ** 2)
           for p in set(map(str, by_precision)) | named}
    return pooled, byp


def held_out_level_band(records: Sequence[Mapping[str, Any]], coverage: float = 0.9, kind: str | None = None,
                        rules: IntervalRules | None = None, own_half: float | None = None,
                        own_noise: float | Mapping[str, float] | None = None) -> dict[str, Any] | None:
    """The band of a K-row transfer whose class has no pair without both of its devices (three CPUs), from
    ``records`` of pairs without its *target* device (:func:`target_out_records`; each with ``err`` (n,) the
    held-out log errors after its own K-row calibration, ``own_half`` the half-width (log ratio) of its own
    K rows' leave-one-out interval, :func:`carb.model.transfer.interval_entry`, ``pair``, ``kind``), or None:
    the caller keeps the K rows' own interval.

    The K rows are the space's corners (space-filling picks), so their leave-one-out residuals are not
    exchangeable with the held-out rows' errors; which of two predictors of a new pair's held-out error is
    steadier is measured on ``records`` alone, never on the target: the level itself (each pair's
    ``coverage`` quantile of ``|err|``, in log units) or its ratio to the pair's own K-row interval
    (``own_half``). Where the level's spread across the pairs (sd of its log) is the smaller, the band is
    the ``coverage`` quantile of the pairs' pooled ``|err|`` (each pair weighted equally; it holds the
    remaining device bias after calibration, so it is centred on the prediction); else, with ``own_half`` (this
    transfer's own K-row half-width, log ratio) and :data:`TARGET_OUT_FALLBACK` ``ratio``, ``own_half`` times the
    ``coverage`` quantile of the pairs' pooled ``|err| / own_half`` (:func:`_ratio_band`); else None. Needs two pairs
    of ``kind`` with finite errors and a positive ``own_half`` each. Returns ``{"lower", "upper", "n", "coverage",
    "log_ratios": [], "method", "n_devices", "n_pairs", "kind", "pivot": {"level_sd", "ratio_sd"}}``."""
    level, ratio, points, scaled, devices = [], [], [], [], set()
    for r in same_class(records, kind):
        e = np.abs(np.asarray(r["err"], float))
        e = e[np.isfinite(e)]
        own = float(r.get("own_half") or float("nan"))
        if len(e) < 3 or not (math.isfinite(own) and own > 0):
            continue
        need = max(float(np.quantile(e, coverage)), 1e-9)
        level.append(math.log(need))
        ratio.append(math.log(need / own))
        points.append(_pair_points(e))
        scaled.append({**r, "err": np.asarray(r["err"], float) / own})
        devices.update(str(d) for d in r["pair"])
    if len(level) < 2:
        return None
    sd_level, sd_ratio = float(np.std(level)), float(np.std(ratio))
    if not sd_level < sd_ratio:
        if own_half is None or not own_half > 0 or rules_of(rules).target_out_fallback != "ratio":
            return None
        return _ratio_band(scaled, coverage, kind, rules, float(own_half), len(devices),
                           {"level_sd": sd_level, "ratio_sd": sd_ratio})
    by, swap = rules_of(rules).level_by_precision, rules_of(rules).level_noise == "swap"
    used = deconvolve_noise(same_class(records, kind), coverage) if swap else same_class(records, kind)
    if swap:
        points = [_pair_points(np.abs(e[np.isfinite(e)])) for e in (np.asarray(r["err"], float) for r in used)
                  if np.isfinite(e).sum() >= 3 and math.isfinite(float(r.get("own_half") or float("nan")))
                  and float(r["own_half"]) > 0]
    half = float(np.quantile(np.concatenate(points), coverage))
    byp = _precision_levels(used, coverage, half, by) if by != "pooled" else {}
    note = ""
    if swap:
        half, byp = swap_noise(half, byp, own_noise, coverage)
        byp = {p: h for p, h in byp.items() if abs(h - half) > 1e-12}
        note = "; each pair's own run-to-run noise taken out, this device's added (level_noise: swap)"
    cls = f"{kind} " if kind else ""
    return {"lower": -half, "upper": half, "n": int(sum(len(p) for p in points)), "coverage": float(coverage),
            "log_ratios": [],
            **({"precision_log_ratios": {p: symmetric_log_ratios(h) for p, h in byp.items()}}
               if byp else {}),
            "method": (f"held-out error level of {len(level)} {cls}pair(s) without the target device "
                       f"({len(devices)} devices, the source's own pairs: none avoids both devices); steadier "
                       f"across them than its ratio to each pair's own K-row interval (log sd {sd_level:.3f} "
                       f"against {sd_ratio:.3f})" + note),
            "n_devices": len(devices), "n_pairs": len(level), "kind": kind,
            "pivot": {"level_sd": sd_level, "ratio_sd": sd_ratio}}


def _ratio_band(scaled: Sequence[Mapping[str, Any]], coverage: float, kind: str | None, rules: IntervalRules | None,
                own_half: float, n_devices: int, pivot: dict[str, float]) -> dict[str, Any]:
    """:func:`held_out_level_band`'s ``ratio`` band: ``scaled`` (the pairs' records with ``err`` divided by their
    own K-row half-width) give the ``coverage`` quantile of pooled |ratio| (each pair weighted equally; per
    precision by ``level_by_precision``), times ``own_half`` (this transfer's own K-row half-width, log ratio)."""
    f = float(np.quantile(np.concatenate([_pair_points(np.abs(np.asarray(r["err"], float))[
        np.isfinite(np.asarray(r["err"], float))]) for r in scaled]), coverage))
    half = f * own_half
    by = rules_of(rules).level_by_precision
    byp = _precision_levels(scaled, coverage, f, by) if by != "pooled" else {}
    cls = f"{kind} " if kind else ""
    return {"lower": -half, "upper": half, "n": int(sum(len(r["err"]) for r in scaled)), "coverage": float(coverage),
            "log_ratios": [],
            **({"precision_log_ratios": {p: symmetric_log_ratios(h * own_half) for p, h in byp.items()}}
               if byp else {}),
            "method": (f"this pair's own K-row interval x the held-out error over own K-row interval of {len(scaled)} "
                       f"{cls}pair(s) without the target device ({n_devices} devices; {f:.2f} at {coverage:.0%}); "
                       f"the ratio steadier across them than the level (log sd {pivot['ratio_sd']:.3f} against "
                       f"{pivot['level_sd']:.3f})"),
            "n_devices": n_devices, "n_pairs": len(scaled), "kind": kind, "pivot": pivot}


#: The zero-shot band of a device whose class has no pair without both of its devices (three CPUs at K = 0,
#: :func:`zero_shot_target_out_band`): ``quantiles`` the ``(1 -+ coverage) / 2`` quantiles of the pairs' signed log
#: errors (the form of ``zero_shot.probe_log_error_band``), ``level`` their ``coverage`` quantile of |log error|
#: (symmetric), ``device`` the device-level band of those pairs' errors (:func:`device_level_band`: each target device
#: one bias draw, ``t(df = devices) x rms`` plus the row residual; the rule of every GPU's K = 0 band), ``none`` no
#: band (unbounded). ``transfer.zero_shot_target_out``. Leave-one-device-out on the multi-source zero-shot of the
#: three CPUs (issue 44): ``quantiles`` covered 0.96 / 0.69 / 0.71 of the Zen 4 / Zen 5 / Xeon rows, ``level`` 0.97 /
#: 0.90 / 0.80, ``device`` 1.00 / 0.95 / 0.93 (median hi/lo up to 2.09: two devices per band, t(2) = 2.92).
ZERO_SHOT_TARGET_OUT: str = "device"
ZERO_SHOT_TARGET_OUTS: tuple[str, ...] = ("quantiles", "level", "device", "none")


def zero_shot_target_out_band(records: Sequence[Mapping[str, Any]], coverage: float = 0.9, kind: str | None = None,
                              floor_log_sd: float | Mapping[str, float] = 0.0, rules: IntervalRules | None = None
                              ) -> dict[str, Any] | None:
    """The K = 0 band of a pair whose class has no pair avoiding both of its devices (three CPUs), from
    ``records`` of same-class pairs without its *target* device (:func:`target_out_records`: the source's own
    zero-shot transfers to and from the other devices; ``err`` (n,) their log(measured / predicted)): what
    ``carb-calibrate k=0 probe=...`` ships for a new CPU (``zero_shot.probe_log_error_band``: every pair of the
    known CPUs, none involving the new one), measured here without the target. ``rules``' (:class:`IntervalRules`)
    ``zero_shot_target_out`` picks the form (:data:`ZERO_SHOT_TARGET_OUT`); each pair weighs the same; never
    narrower than the floor. None (no interval) for ``none`` or without a pair of finite errors. The method
    names the devices it was measured on."""
    rules = rules_of(rules)
    form = rules.zero_shot_target_out
    if form == "none":
        return None
    if form == "device":
        e = device_level_band([{**r, "precision": r.get("precision")} for r in records], coverage, floor_log_sd,
                              kind=kind, rules=rules)
        return None if e is None else {**e, "method": "zero-shot " + e["method"] + " (pairs without the target device)"}
    pts, devices, n = [], set(), 0
    for r in same_class(records, kind):
        e = np.asarray(r["err"], float)
        e = e[np.isfinite(e)]
        if len(e) < 3:
            continue
        pts.append(np.quantile(e, (np.arange(_POINTS) + 0.5) / _POINTS))
        devices.update(str(d) for d in r["pair"])
        n += len(e)
    if not pts:
        return None
    allp = np.concatenate(pts)
    if form == "level":
        h = float(np.quantile(np.abs(allp), coverage))
        lower, upper = -h, h
    else:
        lower, upper = (float(v) for v in np.quantile(allp, [(1 - coverage) / 2, (1 + coverage) / 2]))
    pooled, _ = floor_half(floor_log_sd, coverage)
    cls = f"{kind} " if kind else ""
    what = (f"{100 * (1 - coverage) / 2:.3g}-{100 * (1 + coverage) / 2:.3g} % of the log errors" if form == "quantiles"
            else f"{100 * coverage:.3g} % |log error|")   # the coverage asked for (0.9: 5-95 %, 90 %)
    return {"lower": min(lower, -pooled), "upper": max(upper, pooled), "n": n, "coverage": float(coverage),
            "log_ratios": [],
            "method": (f"zero-shot band measured on {len(devices)} {cls}devices ({len(pts)} pair(s) without the target "
                       f"device; {what})"),
            "n_devices": len(devices), "n_pairs": len(pts), "kind": kind}


def device_offsets(biases: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """Per device, its log latency offset ``u`` relative to what its device probe implies, from zero-shot pair
    biases ``{(source, target): median log(measured / predicted)}`` (one precision): least squares on
    ``bias(a -> b) = u_b - u_a``, the offsets summing to 0 (only differences are measured). ``{}`` without
    pairs."""
    devs = sorted({str(d) for pair in biases for d in pair})
    if not biases:
        return {}
    idx = {d: i for i, d in enumerate(devs)}
    A = np.zeros((len(biases) + 1, len(devs)))
    y = np.zeros(len(biases) + 1)
    for row, ((a, b), v) in enumerate(biases.items()):
        A[row, idx[str(b)]], A[row, idx[str(a)]], y[row] = 1.0, -1.0, float(v)
    A[-1, :] = 1.0   # sum to zero
    u = np.linalg.lstsq(A, y, rcond=None)[0]
    return {d: float(u[i]) for d, i in idx.items()}


def probe_offset_correction(biases: Mapping[tuple[str, str], float], source: str, target: str) -> float:
    """The log correction of a zero-shot probe transfer ``source -> target`` (one precision) for devices that run
    networks slower or faster than their probe implies (the Xeon: ~15 % slower): the zero-shot takes the target's
    offset equal to the source's; this takes it as the mean offset of the known devices (:func:`device_offsets`
    of the pairs in ``biases`` without ``target``: leave-the-target-out), so the prediction is multiplied by
    ``exp(mean(u) - u_source)`` (= ``exp(-u_source)``, the offsets summing to 0). 0 where the source is not
    among those pairs."""
    known = {p: v for p, v in biases.items() if str(target) not in map(str, p) and math.isfinite(float(v))}
    u = device_offsets(known)
    return -u[str(source)] if str(source) in u else 0.0


def _cells(records: Sequence[Mapping[str, Any]], min_rows: int = 3) -> list[Mapping[str, Any]]:
    """Records split per precision where they carry ``precision`` ((n,) beside ``err``): each (pair,
    precision) with at least ``min_rows`` rows is one bias draw (a device errs per precision: fp16 under,
    bf16 over on the Zen 4); records without ``precision`` stay whole."""
    out: list[Mapping[str, Any]] = []
    for r in records:
        if r.get("precision") is None:
            out.append(r)
            continue
        err, prec = np.asarray(r["err"], float), np.asarray(r["precision"]).astype(str)
        for p in np.unique(prec):
            m = (prec == p) & np.isfinite(err)
            if m.sum() >= min_rows:   # a record's noise (per precision, noise_sd) follows its precision
                out.append({**r, "err": err[m], "precision": None,
                            **({"noise": noise_sd(r["noise"], p)} if r.get("noise") is not None else {})})
    return out


def row_scale(loo: np.ndarray, precision: np.ndarray | None = None) -> float:
    """A calibration's row-level scale from its K rows' leave-one-out log residuals ``loo`` (K,): the median
    over precisions (with at least 2 rows each, ``precision`` (K,)) of :func:`loo_stat` of that precision's
    |residuals| (one badly served precision does not set every precision's scale), else :func:`loo_stat`
    of all; NaN for fewer than 2 rows."""
    a = np.abs(np.asarray(loo, float))
    if len(a) < 2:
        return float("nan")
    if precision is not None and len(precision) == len(a):
        prec = np.asarray(precision).astype(str)
        per = [loo_stat(a[prec == p]) for p in np.unique(prec) if (prec == p).sum() >= 2]
        if per:
            return float(np.median(per))
    return loo_stat(a)


def lodo_records(records: Sequence[Mapping[str, Any]], pair: tuple[str, str]) -> list[Mapping[str, Any]]:
    """The records whose ``pair`` involves neither device of ``pair`` (leave-one-device-out: a device's
    own errors never calibrate the interval into or out of it)."""
    out = set(map(str, pair))
    return [r for r in records if not (set(map(str, r["pair"])) & out)]


def repeatability_log_sd(rows: pd.DataFrame, target: str = "latency_ms", default: float = 0.0) -> float:
    """The rows' run-to-run spread of ``target`` as one window's log standard deviation: from the collector's
    per-row two-pass relative range ``<stem>_repeat_spread`` (``latency_repeat_spread``, issue 44 item 5: the
    median two-pass |log(a / b)| over 0.6745 sqrt(2)), else the median of a relative spread column
    (``<target>_repeat_rel`` / ``<stem>_repeat_rel`` / ``<stem>_run_spread_rel``), else ``default`` (the
    configured floor, ``transfer.repeatability_floor``)."""
    stem = target.rsplit("_", 1)[0]
    if f"{stem}_repeat_spread" in rows.columns:   # the collector's two-pass relative range (max - min) / mean
        s = pd.to_numeric(rows[f"{stem}_repeat_spread"], errors="coerce").to_numpy(float)
        s = np.clip(s[np.isfinite(s) & (s >= 0)], 0.0, 1.999)
        if len(s):   # |log(a / b)| of two windows; its median is 0.6745 sqrt(2) x one window's log sd
            return float(np.median(np.log((2.0 + s) / (2.0 - s))) / (0.6745 * math.sqrt(2.0)))
    for c in (f"{target}_repeat_rel", f"{stem}_repeat_rel", f"{stem}_run_spread_rel", f"{target}_run_spread_rel"):
        if c in rows.columns:
            v = pd.to_numeric(rows[c], errors="coerce").to_numpy(float)
            v = v[np.isfinite(v) & (v >= 0)]
            if len(v):
                return float(np.log1p(np.median(v)))
    return float(default)


def device_floor(rows: pd.DataFrame, target: str, configured: float | Mapping[str, float] = 0.0,
                 device_id: str | None = None, table: str | None = None) -> float | dict[str, float]:
    """The repeatability floor of ``target``'s intervals on the device of ``rows`` (log sd, as
    :func:`device_level_band` takes it), per precision where it was measured (issue 44):

    * the rows' own ``latency_repeat_spread`` (K rows collected with ``measure.repeat.passes`` >= 2):
      ``{precision: log sd}`` for precisions with enough rows (:func:`carb.data.repeatability.floor_log_sd`),
      ``default``: the pooled :func:`repeatability_log_sd` of all of them;
    * else, for latency, the shipped table by ``device_id`` (:func:`carb.data.repeatability.shipped_floor_log_sd`;
      ``table``: another such file) with ``default``: ``configured``;
    * else ``configured`` (``transfer.repeatability_floor``) as it is."""
    from carb.data.repeatability import floor_log_sd, shipped_floor_log_sd

    conf_default = configured.get("default", 0.0) if isinstance(configured, Mapping) else configured
    pooled = repeatability_log_sd(rows, target, float("nan"))
    if math.isfinite(pooled):
        own = floor_log_sd(rows) if target == "latency_ms" and "precision" in rows.columns else {}
        return {**own, "default": pooled}
    if target == "latency_ms":
        shipped = shipped_floor_log_sd(device_id, table)
        if shipped:
            return {**shipped, "default": float(conf_default)}
    return dict(configured) if isinstance(configured, Mapping) else float(configured)


#: Columns of the per-pair table (``carb/data/transfer-pairs.csv``) the device-level band of carb-calibrate reads.
PAIR_COLUMNS: tuple[str, ...] = ("kind", "target", "k", "source", "target_device", "source_id", "target_id",
                                 "precision", "n_rows", "bias", "scale", *(f"res_q{lev:g}" for lev in LEVELS))


def pair_table_path() -> Path:
    """The shipped per-pair table (``carb/data/transfer-pairs.csv``)."""
    from carb.resources import DATA_DIR

    return Path(DATA_DIR) / "transfer-pairs.csv"


def pair_summary(records: Sequence[Mapping[str, Any]], min_rows: int = 3) -> pd.DataFrame:
    """Per pair, target, K and precision (:data:`PAIR_COLUMNS`): the bias and the |residual| quantiles at
    :data:`LEVELS` (:func:`pair_bias_residuals`) of the held-out errors, and the pair's row scale
    (:func:`row_scale`). ``records``: the benchmark's (``kind``, ``target``, ``k``, ``source``,
    ``target_device``, optional ``source_id`` / ``target_id``, ``err``, ``precision``, ``loo``,
    ``loo_precision``, optional ``noise``: the target device's run-to-run log sd, :func:`noise_sd`), and
    ``noise_log_sd`` (that precision's noise; NaN without one: :func:`pair_records` then leaves the pair's row
    residual as it is under ``level_noise: swap``)."""
    rows = []
    for r in records:
        err, prec = np.asarray(r["err"], float), np.asarray(r["precision"]).astype(str)
        scale = row_scale(r.get("loo", []), r.get("loo_precision"))
        for p in np.unique(prec):
            m = (prec == p) & np.isfinite(err)
            if m.sum() < min_rows:
                continue
            b, res = pair_bias_residuals(err[m])
            q = np.quantile(np.abs(res), LEVELS)
            rows.append({"kind": r["kind"], "target": r["target"], "k": int(r["k"]), "source": r["source"],
                         "target_device": r["target_device"], "source_id": r.get("source_id") or r["source"],
                         "target_id": r.get("target_id") or r["target_device"], "precision": str(p),
                         "n_rows": int(m.sum()), "bias": round(b, 6), "scale": round(scale, 6),
                         "noise_log_sd": (round(noise_sd(r["noise"], p), 6) if r.get("noise") is not None
                                          else float("nan")),
                         **{f"res_q{lev:g}": round(float(v), 6) for lev, v in zip(LEVELS, q)}})
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS) + ["noise_log_sd"])


def pair_records(table: pd.DataFrame | None, target: str, k: int, exclude: Sequence[str] = (),
                 kind: str | None = None) -> list[dict[str, Any]]:
    """Records for :func:`device_level_band` from the per-pair table: the rows of ``target`` (and of device
    class ``kind``, None: every class) at the stored K nearest ``k``, without any pair involving a device
    (name or id) in ``exclude`` (leave-one-device-out); each (pair, precision) a pseudo-sample of its bias plus
    its symmetric |residual| quantile points, with its ``kind``."""
    if table is None or not len(table):
        return []
    sel = table[table["target"] == target]
    if kind is not None:
        sel = sel[sel["kind"].astype(str) == str(kind)]
    if not len(sel):
        return []
    sel = sel[sel["k"] == _nearest_k(sel["k"].to_numpy(), max(int(k), 1))]
    out = set(map(str, exclude))
    recs = []
    for r in sel.rename(columns=lambda c: c.replace(".", "_")).itertuples(index=False):
        devs = {str(r.source), str(r.target_device), str(r.source_id), str(r.target_id)}
        if devs & out:
            continue
        lev = np.concatenate([[0.0], np.asarray(LEVELS)])
        d = r._asdict()
        val = np.concatenate([[0.0], [float(d[f"res_q{lev_:g}".replace(".", "_")]) for lev_ in LEVELS]])
        half = np.interp((np.arange(50) + 0.5) / 50, lev, val)
        noise = float(d.get("noise_log_sd", float("nan")))   # the pair's target device's run-to-run log sd
        recs.append({"pair": (str(r.source_id), str(r.target_id)), "err": float(r.bias) + np.concatenate([-half, half]),
                     "scale": float(r.scale), "kind": str(r.kind),
                     **({"noise": noise} if math.isfinite(noise) else {})})
    return recs


def load_pair_table(pairs: Any = "auto") -> pd.DataFrame | None:
    """The per-pair table: ``"auto"`` the shipped one where it exists (else None), a path (one-line
    :class:`DatasetError` when unreadable or lacking :data:`PAIR_COLUMNS`), a DataFrame as it is, None: none."""
    if pairs is None or isinstance(pairs, pd.DataFrame):
        return pairs
    p = pair_table_path() if str(pairs) == "auto" else Path(str(pairs))
    if not p.exists() and str(pairs) == "auto":
        return None
    return read_table(p, "transfer.pair_prior", PAIR_COLUMNS)
