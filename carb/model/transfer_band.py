"""A transferred model's interval: the source model's own interval combined with a transfer band.

A model moved to a device nobody measured (zero-shot) errs twice: the source model errs on its own device
(its calibrated interval: log-ratios ``log(measured / predicted)``, per regime, outside the domain, for new
architectures) and the transfer errs in the ratio between the devices (the band: log errors of the same
transfer between other device pairs, stored as its 5-95 % quantiles). Neither is known on this device, so
the interval must hold both: :func:`with_transfer_band` adds them level by level (the quantile at level
``l`` of the sum of two comonotone errors is the sum of their quantiles at ``l``), which is never narrower
than the source's interval when the band holds 0, and never claims a coverage the band was not measured at:
a band measured at 5-95 % gives a sample of 19 points per set, which resolves coverages up to 90 % (the
probability of meeting a budget then stays within [5 %, 95 %]: the tails beyond are unmeasured).

Shapes: a log-ratio set is a 1-D list of floats; an interval entry is what
:func:`carb.model.intervals.interval` reads (``log_ratios``, ``groups``, ``precision_log_ratios``,
``new_arch``, ``outside`` with ``by_split`` / ``by_precision``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: The band's coverage as stored (5-95 % quantiles of the transfer's log errors).
BAND_COVERAGE = 0.9
#: The keys of an interval entry whose value is one set of log-ratios.
_SETS = ("log_ratios",)
#: The keys whose value maps a name to a set of log-ratios.
_SET_MAPS = ("groups", "by_split", "precision_log_ratios")
#: The keys whose value is a nested entry (or a map of nested maps).
_NESTED = ("new_arch", "outside")


def band_levels(n_source: int, band_coverage: float = BAND_COVERAGE) -> np.ndarray:
    """The quantile levels (m,) of a combined set: ``i / (m + 1)``, i = 1..m, with m the smaller of the
    source set's size ``n_source`` and the size that resolves ``band_coverage`` (19 for 90 %)."""
    m = min(int(n_source), int(round(2.0 / (1.0 - band_coverage))) - 1)
    return np.arange(1, m + 1) / (m + 1.0)


def band_quantiles(band: Sequence[float], levels: np.ndarray, band_coverage: float = BAND_COVERAGE) -> np.ndarray:
    """The band's log error at ``levels`` (m,): a normal shape through its stored ``(lo, hi)`` quantiles at
    ``(1 -+ band_coverage) / 2`` (exact at those two levels)."""
    from scipy.stats import norm

    from carb.data.repeatability import coverage_z

    lo, hi = float(band[0]), float(band[1])
    z = coverage_z(band_coverage)
    return (lo + hi) / 2.0 + (hi - lo) / 2.0 * norm.ppf(np.asarray(levels, float)) / z


def combine_set(log_ratios: Sequence[float], band: Sequence[float]) -> list[float]:
    """One source set of log-ratios (n,) plus the band, level by level: sorted (m,) (module docstring)."""
    r = np.sort(np.asarray(log_ratios, float))
    r = r[np.isfinite(r)]
    if not len(r):
        return []
    lev = band_levels(len(r))
    if not len(lev):
        return []
    return [round(float(v), 6) for v in np.sort(order_quantiles(r, lev) + band_quantiles(band, lev))]


def order_quantiles(r: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """Quantiles (m,) of the sorted sample ``r`` (n,) at ``levels`` as split-conformal bounds pick them (the
    ``floor((n + 1) l)``-th smallest below the median, the ``ceil((n + 1) l)``-th above, clipped to the sample), so
    a combined set is never narrower than :func:`carb.model.intervals.conformal_bounds` of the source's."""
    n = len(r)
    lev = np.asarray(levels, float)
    k = np.where(lev < 0.5, np.floor((n + 1) * lev + 1e-9), np.ceil((n + 1) * lev - 1e-9)).astype(int)
    return r[np.clip(k, 1, n) - 1]


def with_transfer_band(entry: Mapping[str, Any], band: Sequence[float], note: str = "") -> dict[str, Any]:
    """A copy of the interval ``entry`` with every set of log-ratios in it combined with ``band``
    (:func:`combine_set`), ``lower`` / ``upper`` recomputed at its coverage (from the combined sets; without
    a set: the stored bounds plus the band's ends), ``method`` extended by ``note``. Never narrower than the
    source's where the band holds 0."""
    from carb.model.intervals import conformal_bounds

    out: dict[str, Any] = dict(entry)
    for k in _SETS:
        if out.get(k):
            out[k] = combine_set(out[k], band)
    for k in _SET_MAPS:
        if isinstance(out.get(k), Mapping):
            out[k] = {g: combine_set(v, band) for g, v in out[k].items()}
    for k in _NESTED:
        if isinstance(out.get(k), Mapping):
            out[k] = with_transfer_band(out[k], band)
    if isinstance(out.get("by_precision"), Mapping):   # outside: {precision: {split: set}}
        out["by_precision"] = {p: {s: combine_set(v, band) for s, v in d.items()} for p, d in out["by_precision"].items()}
    cov = float(out.get("coverage", BAND_COVERAGE))
    if out.get("log_ratios"):
        lo, hi = conformal_bounds(out["log_ratios"], cov)
    else:
        lo, hi = float(entry.get("lower", 0.0)) + float(band[0]), float(entry.get("upper", 0.0)) + float(band[1])
    if "lower" in entry or "log_ratios" in entry:
        out["lower"], out["upper"] = lo, hi
    if note:
        out["method"] = f"{entry.get('method', 'source interval')} + {note}"
    return out


def band_entry(band: Sequence[float], method: str) -> dict[str, Any]:
    """The interval entry of the band alone (a source without an interval for the target): its 19-point
    sample, so that it too resolves only the coverage it was measured at."""
    lev = band_levels(10 ** 6)
    r = [round(float(v), 6) for v in band_quantiles(band, lev)]
    return {"lower": float(band[0]), "upper": float(band[1]), "n": 0, "coverage": BAND_COVERAGE,
            "log_ratios": r, "method": method}


def resolved(entry: Mapping[str, Any]) -> dict[str, Any]:
    """An entry given only as 90 % bounds (``log_ratios`` empty: every coverage would read the same bounds, so the
    probability of meeting a budget would reach 99.5 %) with the 19-point sample of those bounds
    (:func:`band_entry`), which resolves coverages up to 90 % only; any other entry unchanged (a copy)."""
    out = dict(entry)
    lo, hi = float(out.get("lower", math.nan)), float(out.get("upper", math.nan))
    if not out.get("log_ratios") and math.isfinite(lo) and math.isfinite(hi) and \
            abs(float(out.get("coverage", BAND_COVERAGE)) - BAND_COVERAGE) < 1e-9:
        out["log_ratios"] = band_entry((lo, hi), "")["log_ratios"]
    return out


def widest_ratio(entry: Mapping[str, Any], coverage: float = BAND_COVERAGE) -> tuple[float, float]:
    """``(exp(lower), exp(upper))`` of an entry at ``coverage`` from its pooled set (for printing)."""
    from carb.model.intervals import conformal_bounds

    lo, hi = (conformal_bounds(entry["log_ratios"], coverage) if entry.get("log_ratios")
              else (float(entry["lower"]), float(entry["upper"])))
    return (math.exp(lo) if math.isfinite(lo) else 0.0), (math.exp(hi) if math.isfinite(hi) else math.inf)
