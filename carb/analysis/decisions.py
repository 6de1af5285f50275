"""Budget decisions from the calibrated predictive distribution, and the "profile next" list.

A fitted cascade's calibration stores log-ratios ``log(measured / predicted)``, so its split-conformal
interval ``[lo(c), hi(c)]`` can be asked at any coverage ``c`` (:func:`carb.model.intervals.interval`,
with the same regimes, outside-domain and new-architecture unions that screening uses). An equal-tailed
interval at coverage ``c`` puts its ends at the predictive quantiles ``(1 - c) / 2`` and ``(1 + c) / 2``,
so the intervals at the coverages of :data:`PROB_COVERAGES` are knots of the predictive CDF of each
candidate's target. :func:`prob_within` reads ``P(target <= limit)`` off those knots, interpolating
linearly in the log of the value (the intervals are multiplicative). Beyond the widest finite interval the
calibration says nothing more: the probability is clipped to ``[(1 - c_max) / 2, (1 + c_max) / 2]``, with
``c_max`` the largest coverage whose interval is finite for that row (a calibration of n rows resolves
coverages up to about ``1 - 2 / (n + 1)``).

:func:`decide`, per candidate, at the chosen coverage (``screen.interval_coverage``):

- ``reject``: some budgeted target is certainly over: its interval's lower end is above the limit;
- ``unverified``: not rejected, but the model cannot vouch for it: outside its training domain, a
  precision it never measured, or the interval of a budgeted target is unbounded (``hi = inf``: too few
  calibration rows for that coverage). Never ``accept``; ``decision_reason`` says why;
- ``accept``: every budgeted target is certainly within: its interval's upper end is at or below the limit;
- ``borderline``: the rest (some interval crosses a limit), with ``p_feasible``, the joint probability.

An ``unverified`` candidate's probability is unknown, not capped: ``p_feasible`` and ``p_within_<target>`` are
``NaN`` there (:func:`unknown_probability`; the table shows ``?``). The calibration that gives the probability
was measured on candidates like the training rows; outside the domain, at a precision never measured or
beyond the coverages it resolves, any number (97 %, or a cap such as 50 %) would claim what was never
measured. Such a candidate is never on the Pareto front either (:func:`carb.analysis.axes.mark_front`).

``p_feasible`` multiplies the per-target probabilities: it treats the targets' errors as independent.
Errors of latency and energy are positively correlated in practice, and then the product is a lower
bound of the joint probability (the upper bound is the smallest per-target probability).

A model without calibrated intervals falls back to one test-set MAE: ``[p - mae, p + mae]`` plays the
interval and no probability is given (``NaN``).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.scale import interp_rows
from carb.model.encoding import pred_name
from carb.model.intervals import interval, interval_groups, new_architecture_mask, outside_mask, row_precision

#: Coverages whose intervals are the knots of the predictive CDF (ascending).
PROB_COVERAGES: tuple[float, ...] = (*(round(0.05 * i, 2) for i in range(1, 20)), 0.98, 0.99)

#: The decisions, in the order the report lists them.
DECISIONS = ("accept", "borderline", "unverified", "reject")


def interval_context(model: Any, X: pd.DataFrame) -> dict[str, Any]:
    """The per-row inputs of :func:`carb.model.intervals.interval` for ``model`` on the n rows of ``X``:
    outside-domain mask, regimes, precisions, new-architecture mask (keyword arguments)."""
    return {"outside": outside_mask(model, X), "groups": interval_groups(model, X),
            "precision": row_precision(X), "new_arch": new_architecture_mask(model, X)}


def interval_ladder(calibration: Mapping[str, Any], pred: pd.DataFrame, context: Mapping[str, Any],
                    coverages: Sequence[float] = PROB_COVERAGES) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per calibrated target, ``(lo, hi)``: two (n, k) arrays, the interval of each of the n rows of
    ``pred`` at each of the k ascending ``coverages`` (target's unit; ``lo = 0`` / ``hi = inf`` where a
    coverage is beyond what the calibration resolves). Made nested: ``lo`` non-increasing and ``hi``
    non-decreasing in the coverage (a regime's bounds fall back to the pooled ones at high coverage)."""
    per = [interval(calibration, pred, c, **context) for c in coverages]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for col in per[0].columns if per else []:
        if not col.startswith("lo_"):
            continue
        t = col[3:]
        lo = np.stack([p[f"lo_{t}"].to_numpy(dtype=float) for p in per], axis=1)
        hi = np.stack([p[f"hi_{t}"].to_numpy(dtype=float) for p in per], axis=1)
        out[t] = (np.minimum.accumulate(lo, axis=1), np.maximum.accumulate(hi, axis=1))
    return out


def prob_within(lo: np.ndarray, hi: np.ndarray, coverages: Sequence[float], limit: float) -> np.ndarray:
    """``P(value <= limit)`` per row (n,) from the rows' intervals ``lo``, ``hi`` (n, k) at the k ascending
    ``coverages``: the CDF knots ``(lo(c), (1 - c) / 2)`` and ``(hi(c), (1 + c) / 2)``, interpolated
    linearly in ``log(value)``, clipped to the outermost finite knots; ``NaN`` for a row with none."""
    c = np.asarray(coverages, dtype=float)
    probs = np.concatenate([(1 - c[::-1]) / 2, (1 + c) / 2])
    values = np.concatenate([lo[:, ::-1], hi], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        logv = np.log(values)
    return interp_rows(math.log(limit), logv, probs)   # np.interp per row, all rows at once


def add_probabilities(model: Any, scored: pd.DataFrame, budget: Mapping[str, float],
                      coverages: Sequence[float] = PROB_COVERAGES) -> pd.DataFrame:
    """``scored`` with ``p_within_<target>`` per budgeted target (``P(target <= limit)`` from the model's
    calibrated predictive distribution, :func:`prob_within`; ``NaN`` without a calibration of that
    target) and ``p_feasible`` (their product, :func:`joint_probability`)."""
    out = scored.copy()
    if getattr(type(model), "OWN_SCORING", False):   # ZooLatencyModel (zoo_predictor): its own conformal CDF
        for t, limit in budget.items():
            out[f"p_within_{t}"] = model.p_within(t, out[pred_name(t)].to_numpy(dtype=float), float(limit))
        out["p_feasible"] = joint_probability(out, budget)
        return out
    cal = getattr(model, "intervals_", None) or {}
    preds = [pred_name(t) for t in budget if pred_name(t) in out]
    ladder = interval_ladder(cal, out[preds], interval_context(model, out)) if cal and budget else {}
    for t, limit in budget.items():
        if t in ladder:
            out[f"p_within_{t}"] = prob_within(*ladder[t], coverages, limit)
        else:
            out[f"p_within_{t}"] = np.nan
    out["p_feasible"] = joint_probability(out, budget)
    return out


def joint_probability(scored: pd.DataFrame, budget: Mapping[str, float]) -> np.ndarray:
    """(n,) product of the rows' ``p_within_<target>`` over the budgeted targets (independent errors
    assumed; see the module docstring); 1 without a budget, ``NaN`` where a factor is missing."""
    p = np.ones(len(scored))
    for t in budget:
        p = p * scored.get(f"p_within_{t}", pd.Series(np.nan, index=scored.index)).to_numpy(dtype=float)
    return p


def _bounds(out: pd.DataFrame, t: str, mae: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """The interval that decides target ``t``: ``lo_<t>``/``hi_<t>``, else the prediction +- one test MAE."""
    if f"lo_{t}" in out and f"hi_{t}" in out:
        return out[f"lo_{t}"].to_numpy(dtype=float), out[f"hi_{t}"].to_numpy(dtype=float)
    p = out[pred_name(t)].to_numpy(dtype=float)
    m = float(mae.get(t, 0.0) or 0.0)
    m = m if math.isfinite(m) and m > 0 else 0.0
    return p - m, p + m


def decide(scored: pd.DataFrame, budget: Mapping[str, float], mae: Mapping[str, float]) -> pd.DataFrame:
    """Add ``margin_<target>`` (limit minus prediction, target's unit), ``feasible`` (every budgeted
    point prediction within its limit), ``decision`` and ``decision_reason`` (the rule of the module
    docstring, on the ``lo_``/``hi_`` columns at the chosen coverage) to ``scored``. Rows flagged
    ``never_measured`` or ``in_domain == False`` (when those columns exist) are never ``accept``."""
    out = scored.copy()
    n = len(out)
    feasible = np.ones(n, dtype=bool)
    over = np.zeros(n, dtype=bool)
    within = np.ones(n, dtype=bool)
    unbounded = np.zeros(n, dtype=bool)
    over_why, cross_why, inf_why = ([[] for _ in range(n)] for _ in range(3))
    for t, limit in budget.items():
        p = out[pred_name(t)].to_numpy(dtype=float)
        out[f"margin_{t}"] = limit - p
        feasible &= p <= limit
        lo, hi = _bounds(out, t, mae)
        t_over, t_within, t_inf = lo > limit, hi <= limit, ~np.isfinite(hi)
        over |= t_over
        within &= t_within
        unbounded |= t_inf & ~t_over
        for i in np.flatnonzero(t_over):
            over_why[i].append(f"{t} >= {lo[i]:.4g} > {limit:g}")
        for i in np.flatnonzero(~t_over & ~t_within & ~t_inf):
            cross_why[i].append(f"{t} [{lo[i]:.4g}, {hi[i]:.4g}] crosses {limit:g}")
        for i in np.flatnonzero(t_inf & ~t_over):
            inf_why[i].append(f"{t} interval unbounded")
    never = out["never_measured"].to_numpy(dtype=bool) if "never_measured" in out else np.zeros(n, dtype=bool)
    outside = ~out["in_domain"].to_numpy(dtype=bool) if "in_domain" in out else np.zeros(n, dtype=bool)
    unverified = ~over & (never | outside | unbounded)
    decision = np.where(over, "reject", np.where(unverified, "unverified",
                                                  np.where(within, "accept", "borderline")))
    reasons = []
    for i in range(n):
        if over[i]:
            reasons.append("certainly over: " + "; ".join(over_why[i]))
        elif unverified[i]:
            why = (["outside the training domain"] if outside[i] else []) + \
                  (["precision never measured"] if never[i] else []) + inf_why[i]
            reasons.append("; ".join(why))
        elif within[i]:
            reasons.append("")
        else:
            reasons.append("; ".join(cross_why[i]))
    out["feasible"] = feasible
    out["decision"] = decision
    out["decision_reason"] = reasons
    return unknown_probability(out, unverified)


def unknown_probability(frame: pd.DataFrame, unverified: np.ndarray) -> pd.DataFrame:
    """``frame`` with ``p_feasible`` and every ``p_within_<target>`` set to ``NaN`` on the rows of the (n,)
    mask ``unverified`` (in place; returned): the calibration cannot give their probability (module docstring)."""
    if unverified.any():
        for c in [c for c in frame.columns if c == "p_feasible" or str(c).startswith("p_within_")]:
            v = frame[c].to_numpy(dtype=float, copy=True)
            v[unverified] = np.nan
            frame[c] = v
    return frame


def profile_next(scored: pd.DataFrame, objective_values: np.ndarray, n: int) -> pd.DataFrame:
    """The ``n`` borderline candidates most worth measuring next: ranked by ``profile_score =
    p_feasible x (best borderline objective / own objective)`` (lower objective is better, so the score is
    the probability of feasibility weighted by how good the candidate would be, 1 at best). Rows without a
    probability (a model without intervals) count as ``p_feasible = 0.5``. ``objective_values``: (len
    scored,), lower is better. Returns those rows (best first) with ``profile_score`` and
    ``profile_rank`` (1 = profile first)."""
    border = (scored["decision"] == "borderline").to_numpy() if "decision" in scored else np.zeros(0, bool)
    if n <= 0 or not border.any():
        return scored.head(0).assign(profile_score=pd.Series(dtype=float), profile_rank=pd.Series(dtype=int))
    obj = np.asarray(objective_values, dtype=float)
    obj = np.where(np.isfinite(obj) & (obj > 0), obj, np.nan)
    best = np.nanmin(obj[border]) if np.isfinite(obj[border]).any() else 1.0
    p = scored["p_feasible"].to_numpy(dtype=float) if "p_feasible" in scored else np.full(len(scored), np.nan)
    score = np.where(np.isfinite(p), p, 0.5) * np.where(np.isfinite(obj), best / obj, 0.0)
    sub = scored[border].assign(profile_score=score[border])
    sub = sub.sort_values("profile_score", ascending=False, kind="stable").head(int(n))
    return sub.assign(profile_rank=np.arange(1, len(sub) + 1))
