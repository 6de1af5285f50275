"""The user's axes: which columns the Pareto front trades off (with directions), the requirements on
known columns (``screen.require``), and ties within the prediction intervals.

An axis is a name from ``screen.pareto``: a predicted target (``energy_J``, ``latency_ms``,
``peak_memory_MB``), a per-image objective (``energy_J_per_image``, ``latency_ms_per_image``), or a numeric
column of the candidates (a grid file's own column such as ``top1``, a shipped accuracy, a static feature
such as ``params``). A leading ``-`` maximizes it (``-top1``); otherwise it is minimized.

The front is computed on **point values** only: the point prediction of a predicted axis, the value of a
column. The intervals never move a candidate on or off the front and never reorder it; they are reported
instead: :func:`pareto_ties` counts, per front member, the other feasible candidates that are at least as
good on every axis within the intervals (a tie: the front member's advantage lies inside the intervals).

``screen.require.<column>: v`` keeps a candidate only when its value satisfies ``v``: at least ``v`` for a
maximized column, at most ``v`` for a minimized one. The direction is the one ``screen.pareto`` gives the
column, else ``maximize`` (``screen.maximize``, default ``[top1, top5]``) lists the columns that are better
larger, else the column is minimized. Requirements apply to known values only (no interval); a budget on a
predicted target is ``screen.budget``, decided on its interval.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from carb.analysis.decisions import unknown_probability
from carb.data.schema import RUNTIME_FEATURES, TARGETS
from carb.design.arch import KNOBS
from carb.design.features import STATIC_FEATURES
from carb.errors import ConfigError
from carb.model.encoding import INTERACTION_FEATURES, pred_name

#: Suffix of a per-image objective (the per-batch prediction / batch size).
PER_IMAGE = "_per_image"


@dataclass(frozen=True)
class Axis:
    """One Pareto axis: ``name`` as the user wrote it without the sign, the frame ``column`` holding its
    point value, ``maximize`` (better when larger) and, for a predicted axis, the ``lo``/``hi`` columns
    of its interval (per image: divided by the batch size at use)."""

    name: str
    column: str
    maximize: bool = False
    predicted: bool = False

    @property
    def label(self) -> str:
        """``-top1`` for a maximized axis, else the name."""
        return f"-{self.name}" if self.maximize else self.name


def numeric_columns(frame: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """Numeric, non-boolean columns of ``frame`` that are no prediction, interval, probability or filled-in
    telemetry: the user's own columns first, then the knobs and static features."""
    skip = ("pred_", "lo_", "hi_", "p_within_", "margin_", "source_pred_")
    filled = {*RUNTIME_FEATURES, *INTERACTION_FEATURES, *exclude}
    cols = [c for c, dtype in frame.dtypes.items() if pd.api.types.is_numeric_dtype(dtype)
            and not pd.api.types.is_bool_dtype(dtype) and not str(c).startswith(skip) and c not in filled]
    known = {*KNOBS, *STATIC_FEATURES, "num_classes"}
    return [c for c in cols if c not in known] + [c for c in cols if c in known]


def allowed_axes(frame: pd.DataFrame, targets: Sequence[str]) -> list[str]:
    """Names ``screen.pareto`` accepts for ``frame``: predicted targets, per-image objectives, numeric columns."""
    per_image = [f"{t}{PER_IMAGE}" for t in ("energy_J", "latency_ms") if t in targets]
    skip = ("rank", "profile_rank", "profile_score", "p_feasible", "stage1_rank", "batch_size")
    return [*targets, *per_image, *numeric_columns(frame, exclude=(*targets, *skip))]


def parse_axes(spec: Sequence[str], frame: pd.DataFrame, targets: Sequence[str],
               field: str = "screen.pareto") -> list[Axis]:
    """``spec`` (e.g. ``["energy_J_per_image", "-top1"]``) as :class:`Axis` objects; an unknown name is a
    one-line :class:`ConfigError` naming the field and the allowed columns."""
    allowed = allowed_axes(frame, targets)
    axes = []
    for raw in spec:
        text = str(raw).strip()
        maximize = text.startswith("-")
        name = text.lstrip("+-").strip()
        base = name[: -len(PER_IMAGE)] if name.endswith(PER_IMAGE) else name
        if name not in allowed and base in TARGETS:   # a cost the model does not predict (a CPU's energy)
            raise ConfigError(f"{field}: {name!r} is not predicted by the target model (it predicts "
                              f"{list(targets)}); allowed: {allowed} (a leading '-' maximizes)")
        if name not in allowed:
            raise ConfigError(f"{field}: {name!r} is not a column of the candidates; allowed: {allowed} "
                              f"(a leading '-' maximizes)")
        predicted = name in targets or name.endswith(PER_IMAGE)
        axes.append(Axis(name, pred_name(name) if predicted else name, maximize, predicted))
    if len({a.name for a in axes}) != len(axes):
        raise ConfigError(f"{field}: an axis is named twice: {list(spec)}")
    return axes


def axis_values(frame: pd.DataFrame, axis: Axis) -> np.ndarray:
    """(n,) point values of ``axis``, oriented so that lower is better (a maximized axis negated)."""
    v = pd.to_numeric(frame[axis.column], errors="coerce").to_numpy(dtype=float)
    return -v if axis.maximize else v


def axis_bounds(frame: pd.DataFrame, axis: Axis) -> tuple[np.ndarray, np.ndarray]:
    """(n,) lower and upper ends of ``axis`` oriented as :func:`axis_values`: the interval of a predicted
    axis (``lo_``/``hi_``; per image divided by ``batch_size``), the point value itself otherwise."""
    v = axis_values(frame, axis)
    base = axis.name[: -len(PER_IMAGE)] if axis.name.endswith(PER_IMAGE) else axis.name
    if not axis.predicted or f"lo_{base}" not in frame or f"hi_{base}" not in frame:
        return v, v
    lo = frame[f"lo_{base}"].to_numpy(dtype=float)
    hi = frame[f"hi_{base}"].to_numpy(dtype=float)
    if axis.name.endswith(PER_IMAGE):
        b = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(dtype=float)
        lo, hi = lo / b, hi / b
    return lo, hi


def pareto_ties(frame: pd.DataFrame, axes: Sequence[Axis], front: np.ndarray, pool: np.ndarray,
                labels: pd.Series | None = None) -> tuple[np.ndarray, list[str]]:
    """Per row: how many candidates of ``pool`` ((n,) bool, e.g. the feasible ones) tie a front member
    (``front`` (n,) bool) within the intervals, and their ``labels`` (e.g. ``rank``; default the row
    position), ``;``-joined, best 5. Candidate ``b`` ties front member ``a`` when on every axis
    ``lo_b <= hi_a`` (``b`` could be at least as good as ``a``): ``a`` is ahead of ``b`` by point values
    only. Rows off the front get 0 and ``""``."""
    n = len(frame)
    counts = np.zeros(n, dtype=int)
    who = [""] * n
    if not axes or not front.any():
        return counts, who
    bounds = [axis_bounds(frame, a) for a in axes]
    pool_idx = np.flatnonzero(pool)
    for i in np.flatnonzero(front):
        ok = np.ones(len(pool_idx), dtype=bool)
        for lo, hi in bounds:
            ok &= ~(lo[pool_idx] > hi[i])   # NaN never rules a tie out
        others = pool_idx[ok & (pool_idx != i)]
        counts[i] = len(others)
        lab = (np.sort(labels.to_numpy(dtype=float)[others]) if labels is not None else others)[:5]
        who[i] = ";".join(f"{x:g}" for x in lab)
    return counts, who


def directions(axes: Sequence[Axis], maximize: Sequence[str]) -> dict[str, bool]:
    """Column name -> maximized: the sign ``screen.pareto`` gives, else membership in ``maximize``."""
    out = {c: True for c in maximize}
    out.update({a.name: a.maximize for a in axes})
    return out


def check_requirements(require: Mapping[str, object], frame: pd.DataFrame, targets: Sequence[str],
                       field: str = "screen.require", notes: list[str] | None = None) -> dict[str, float]:
    """The set requirements (None dropped) as ``{column: limit}``; a predicted target or an unknown
    column is a one-line :class:`ConfigError`. A limit on a fraction column (every known value in [0, 1],
    e.g. ``top1``) written as a percentage (1 < limit <= 100) is read as ``limit / 100``, said in one line
    appended to ``notes``; a limit above 100 there is refused with the unit (:func:`fraction_limit`)."""
    allowed = numeric_columns(frame, exclude=(*targets, "rank", "profile_rank", "profile_score", "p_feasible"))
    clean: dict[str, float] = {}
    for k, v in (require or {}).items():
        if v is None:
            continue
        if k in targets or k.endswith(PER_IMAGE):
            raise ConfigError(f"{field}.{k}: {k} is predicted: limit it with screen.budget.{k.replace(PER_IMAGE, '')} "
                              f"(decided on its interval); allowed here: {allowed}")
        if k not in allowed:
            raise ConfigError(f"{field}.{k}: not a column of the candidates; allowed: {allowed}")
        try:
            clean[k] = float(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{field}.{k}: must be a number, got {v!r}") from None
        clean[k] = fraction_limit(frame[k], clean[k], f"{field}.{k}", notes)
    return clean


def fraction_limit(values: pd.Series, limit: float, field: str, notes: list[str] | None = None) -> float:
    """``limit`` for a column of n ``values``: unchanged, unless every known value lies in [0, 1] (a
    fraction, as ``top1`` is: 0.7613) and the limit does not: ``1 < limit <= 100`` is a percentage, read as
    ``limit / 100`` (a line in ``notes`` says so); above 100 a one-line :class:`ConfigError` names the unit."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    v = v[np.isfinite(v)]
    if not len(v) or v.min() < 0 or v.max() > 1 or limit <= 1:
        return limit
    if limit > 100:
        raise ConfigError(f"{field}: {limit:g} is out of range: the column is a fraction in [0, 1] "
                          f"(0.76 = 76 %); give a fraction or a percentage up to 100")
    if notes is not None:
        notes.append(f"{field}={limit:g} read as {limit / 100:g}: the column is a fraction in [0, 1] (a percentage given)")
    return limit / 100


def apply_requirements(frame: pd.DataFrame, require: Mapping[str, float], maximized: Mapping[str, bool]
                       ) -> tuple[pd.DataFrame, dict[str, int]]:
    """``frame`` (with ``feasible``, ``decision``, ``decision_reason``) after the requirements: a row
    whose value misses a limit is ``reject`` (reason ``top1 0.7331 < 0.76 required``); a row without a
    value (NaN) becomes ``unverified`` (reason ``no top1 value``) unless already rejected; both are no
    longer ``feasible``. Adds ``meets_require`` (True, False, or NaN without a value). Returns the
    frame and counts ``{"n_require_below": rows below a limit, "n_require_missing": rows made unverified
    for want of a value}``."""
    if not require:   # nothing to apply: no copy, no per-row lists (a million candidates)
        return frame, {"n_require_below": 0, "n_require_missing": 0}
    out = frame.copy()
    n = len(out)
    below = np.zeros(n, dtype=bool)
    missing = np.zeros(n, dtype=bool)
    why_below: list[list[str]] = [[] for _ in range(n)]
    why_missing: list[list[str]] = [[] for _ in range(n)]
    for col, limit in require.items():
        v = pd.to_numeric(out[col], errors="coerce").to_numpy(dtype=float)
        mx = bool(maximized.get(col, False))
        bad = np.isfinite(v) & ((v < limit) if mx else (v > limit))
        nan = ~np.isfinite(v)
        below |= bad
        missing |= nan
        for i in np.flatnonzero(bad):
            why_below[i].append(f"{col} {v[i]:.4g} {'<' if mx else '>'} {limit:g} required")
        for i in np.flatnonzero(nan):
            why_missing[i].append(f"no {col} value ({'>=' if mx else '<='} {limit:g} required)")
    decision = out["decision"].to_numpy(dtype=object).copy()
    reason = out["decision_reason"].astype(str).to_numpy(dtype=object).copy()
    unverified = missing & ~below & (decision != "reject")   # a budget's reject stays a reject
    for i in np.flatnonzero(below):
        kept = [reason[i]] if decision[i] == "reject" and reason[i] else []   # a budget's reject stays said
        decision[i] = "reject"
        reason[i] = "; ".join(why_below[i] + kept)
    for i in np.flatnonzero(unverified):
        decision[i] = "unverified"
        reason[i] = "; ".join(why_missing[i] + ([reason[i]] if reason[i] else []))
    meets = np.where(below, 0.0, np.where(missing, np.nan, 1.0))
    out["decision"] = decision
    out["decision_reason"] = reason
    out["feasible"] = out["feasible"].to_numpy(dtype=bool) & ~below & ~missing
    out["meets_require"] = pd.array([None if np.isnan(m) else bool(m) for m in meets], dtype="boolean")
    unknown_probability(out, unverified)
    return out, {"n_require_below": int(below.sum()), "n_require_missing": int(unverified.sum())}


def add_per_image(frame: pd.DataFrame, names: Sequence[str], targets: Sequence[str]) -> pd.DataFrame:
    """``frame`` with ``pred_<target>_per_image`` (per-batch prediction / ``batch_size``) for each per-image
    name in ``names`` whose target is predicted."""
    out = frame
    for name in names:
        base = str(name).lstrip("+-").strip()
        if base.endswith(PER_IMAGE) and base[: -len(PER_IMAGE)] in targets and pred_name(base) not in out:
            b = pd.to_numeric(out["batch_size"], errors="coerce").to_numpy(dtype=float)
            out = out.assign(**{pred_name(base): out[pred_name(base[: -len(PER_IMAGE)])].to_numpy(dtype=float) / b})
    return out


def apply_axes(scored: pd.DataFrame, targets: Sequence[str], pareto: Sequence[str],
               require: Mapping[str, object] | None, maximize: Sequence[str], notes: list[str] | None = None
               ) -> tuple[pd.DataFrame, list[Axis], dict[str, tuple[float, bool]], dict[str, int]]:
    """Parse the axes ``pareto`` (names with signs), check and apply ``require`` (after the budget
    decisions; a percentage on a fraction column is read as a fraction, a line in ``notes`` says so). Returns ``(scored, axes, requirements, counts)``: ``requirements`` maps a column to its
    ``(limit, maximized)``; ``scored`` gains the per-image columns the axes name and ``meets_require``
    when there are requirements."""
    scored = add_per_image(scored, pareto, targets)
    axes = parse_axes(list(pareto), scored, targets)
    required = check_requirements(require or {}, scored, targets, notes=notes)
    maximized = directions(axes, maximize)
    scored, counts = apply_requirements(scored, required, maximized)
    return scored, axes, {c: (v, bool(maximized.get(c, False))) for c, v in required.items()}, counts


def mark_front(scored: pd.DataFrame, axes: Sequence[Axis], feasible: np.ndarray, mask_fn) -> pd.DataFrame:
    """``scored`` with ``pareto`` (non-dominated among the ``feasible`` rows that are not ``unverified``
    (the model cannot vouch for those: never on the front) on the point values of ``axes``; ``mask_fn``: (m, d) minimized values -> (m,) mask), ``pareto_ties`` and ``pareto_tied_with``
    (:func:`pareto_ties`, naming the tied candidates by ``rank``). A feasible row without a value on some
    axis (NaN) cannot be placed: it is left off the front (``pareto_missing`` True). The columns are added
    to ``scored`` itself (no copy of a million-row frame), which is returned."""
    out = scored
    if "decision" in out:
        feasible = feasible & (out["decision"].to_numpy(dtype=object) != "unverified")
    values = np.column_stack([axis_values(out, a) for a in axes]) if axes else np.zeros((len(out), 0))
    placed = feasible & np.isfinite(values).all(axis=1)
    front = np.zeros(len(out), dtype=bool)
    if placed.any():
        idx = np.flatnonzero(placed)
        front[idx[mask_fn(values[idx])]] = True
    out["pareto"] = front
    out["pareto_missing"] = feasible & ~placed
    counts, who = pareto_ties(out, axes, front, feasible, out.get("rank"))
    out["pareto_ties"] = counts
    out["pareto_tied_with"] = who
    return out
