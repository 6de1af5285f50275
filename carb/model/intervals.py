"""Split-conformal prediction intervals for the cascade, in screening mode.

Costs span orders of magnitude, so intervals are multiplicative: on a calibration split that nothing
else uses, :func:`calibrate` predicts each row exactly as screening does (runtime telemetry replaced by
what the architecture predicts, :func:`screening_features`) and keeps the log-ratios ``log(measured /
predicted)``. :func:`interval` turns a prediction ``p`` into ``[p * exp(q_lo), p * exp(q_hi)]`` with the
conformal quantiles of those log-ratios at the requested coverage (equal tails). The log-ratios are
stored, so any coverage can be asked later without refitting.

One pooled set of log-ratios per target (not per batch tier): a calibration split is ~10 % of a few
hundred rows, and a 90 % split-conformal quantile needs >= 19 rows per group to be finite; per-tier
groups would be too small to be calibrated at all on the shipped data.

On a GPU the log-ratios are kept per regime too (Mondrian conformal: the quantiles of a group hold
for that group): the overlapped latency prior says whether the host's kernel launches or the GPU's work
dominate a configuration (:meth:`carb.model.physics.RooflinePrior.device_share`), and launch-bound
configurations vary with the host from run to run while device-bound ones repeat within about 2 %. On the
shipped H200 data the 90th percentile of |log(measured / predicted)| is 0.31 for launch-bound rows and 0.11-0.17
for device-bound ones, so one pooled interval is too narrow for the first and 2-3x too wide for the second:
:func:`interval_groups` labels rows, :func:`calibrate` keeps each group's log-ratios when every group has
enough rows for the coverage, and :func:`interval` takes a row's group's bounds (latency and energy only).

Small data (:func:`cross_calibrate`): a calibration split of a few rows cannot bound a 90 % interval
(19 are needed; ``carb-train``'s 10 % share of 150 rows is 15). Then every row other than the test rows
calibrates: K-fold refits predict each row out of fold, and those log-ratios stand in for the
calibration split's (cross-conformal, the K-fold form of CV+). :func:`interval` flags a row whose
interval stays unbounded (``interval_unbounded_<target>``, with the reason) instead of returning
``[0, inf]`` silently.

Outside the training domain the calibration rows say nothing (they are all inside it), and errors
grow. A target's calibration may therefore carry an ``"outside"`` entry: log-ratios of rows predicted
where the model had to extrapolate (the test rows of ``carb-train``'s leave-out splits, each predicted
by a model fitted on the lower range; :func:`outside_calibration`), kept per direction (batch, depth,
width, input), whose widest conformal bounds apply. A row outside the domain
(:func:`carb.model.domain.check_domain`) gets the union of the two intervals.

No peak-memory interval is narrower than the device's measured run-to-run spread of peak memory
(:func:`memory_floor`, set as ``"floor_log"`` on the target's entry by :func:`with_floor`): configurations measured
again in another run or in the collector's passes (:func:`carb.data.repeatability.memory_pairs`) give a 90 %
half-width per device,
shipped in ``carb/data/memory-repeatability.csv``; a device never measured twice takes the configured
default, and every device at least the configured minimum (``evaluate.memory_floor`` of ``conf/train.yaml``).

A later session: the calibration rows of one measuring window say nothing of how far the device's speed moves by
the next (the Xeon VM moved 2-36 % between windows; a model's 90 % latency intervals covered 17-55 % of a later
window's rows, carb/data/cpu-intel-xeon.md). :func:`with_session` stores the device class's measured session drift
(:func:`carb.data.session_drift.shipped_drift`) as ``"session"`` on the latency and energy entries, and
:func:`interval` adds its half-width in quadrature (:func:`session_widened`): the interval of a measurement on a
later day, what screening answers. Evaluations on held-out rows of the rows' own window (``carb-train``'s coverage,
the extrapolation splits, ``screen.interval_scope=this_session``) score :func:`without_session` of the calibration.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb.data.schema import RUNTIME_FEATURES, TARGETS
from carb.data.session_drift import drift_half
from carb.data.tiers import batch_tier
from carb.errors import ConfigError
from carb.model.encoding import interaction_values, pred_name, with_columns


def with_telemetry(features: pd.DataFrame, medians: Mapping[str, Mapping[str, float]]) -> pd.DataFrame:
    """Fix runtime features to the training medians of each row's batch tier (``medians`` as stored by
    the cascade: ``{tier: {column: value}, "all": {...}}``) and add the interaction features.
    The screening path: n rows in, the same n rows out with the runtime columns replaced."""
    tele = _median_values(features, medians)
    return with_columns(features, {**tele, **interaction_values(features, tele)})


def _median_values(features: pd.DataFrame, medians: Mapping[str, Mapping[str, float]]) -> dict[str, np.ndarray]:
    """Each runtime column's batch-tier median per row of ``features`` ({column: (n,)}; the ``"all"`` median
    where the tier has none)."""
    names, inv = np.unique(np.asarray(batch_tier(features["batch_size"].to_numpy()), dtype=str), return_inverse=True)
    out = {}
    for col in RUNTIME_FEATURES:
        fallback = float(medians.get("all", {}).get(col, float("nan")))
        lut = {t: float(v.get(col, fallback)) for t, v in medians.items()}
        v = np.array([lut.get(t, np.nan) for t in names], dtype=float)[inv.ravel()]   # per tier, then per row
        out[col] = np.where(np.isnan(v), fallback, v)
    return out


def screening_features(cascade: Any, features: pd.DataFrame) -> pd.DataFrame:
    """The runtime features screening gives a configuration nobody ran (n rows in, n out, interaction
    features added): predicted from its architecture by the cascade's ``telemetry_imputer_``
    (:class:`carb.model.telemetry.TelemetryImputer`) where it has one, else the batch-tier medians
    (:func:`with_telemetry`; also for columns the imputer did not learn). One copy of the rows, the
    columns set at once and the interactions computed from the final telemetry."""
    medians = getattr(cascade, "telemetry_medians_", {}) or {}
    imputer = getattr(cascade, "telemetry_imputer_", None)
    tele = _median_values(features, medians)
    if imputer is not None:   # it reads the knobs and static features only
        tele.update(imputer.predict_columns(features))
    return with_columns(features, {**tele, **interaction_values(features, tele)})


def screening_predict(cascade: Any, X: pd.DataFrame, monotone: bool = True) -> pd.DataFrame:
    """``cascade.predict`` on ``X`` (n rows) as screening predicts: runtime telemetry imputed
    (:func:`screening_features`) and, when ``monotone``, non-decreasing in batch size per architecture
    (:func:`carb.model.monotone.monotone_in_batch`). Returns ``pred_<target>`` columns, index of ``X``."""
    from carb.model.monotone import monotone_in_batch

    Xs = screening_features(cascade, X)
    pred = monotone_in_batch(cascade, Xs, lambda F: screening_features(cascade, F)) if monotone else None
    if pred is None:
        pred = cascade.predict(Xs)
    return pred.set_axis(X.index)


def _log_ratios(measured: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """``log(measured / predicted)`` over the rows where both are finite and positive (1-D)."""
    ok = np.isfinite(measured) & np.isfinite(predicted) & (measured > 0) & (predicted > 0)
    return np.log(measured[ok] / predicted[ok])


def conformal_bounds(log_ratios: np.ndarray | list[float], coverage: float) -> tuple[float, float]:
    """Equal-tailed split-conformal quantiles ``(q_lo, q_hi)`` of n log-ratios at ``coverage``: the
    ``floor((n+1) a/2)``-th and ``ceil((n+1)(1 - a/2))``-th smallest, ``a = 1 - coverage``; ``-inf``/
    ``+inf`` when n is too small for that coverage."""
    r = np.sort(np.asarray(log_ratios, dtype=float))
    n = len(r)
    a = 1.0 - float(coverage)
    k_lo = math.floor((n + 1) * a / 2 + 1e-9)   # tolerance: 200 * 0.05 is 9.999... in floats
    k_hi = math.ceil((n + 1) * (1 - a / 2) - 1e-9)
    lo = float(r[k_lo - 1]) if 1 <= k_lo <= n else -math.inf
    hi = float(r[k_hi - 1]) if 1 <= k_hi <= n else math.inf
    return lo, hi


#: Targets whose intervals are calibrated per regime (:func:`interval_groups`); memory is not launch-bound.
GROUPED_TARGETS: tuple[str, ...] = ("energy_J", "latency_ms")
#: The regimes: the device work's share of the overlapped latency prior below / at or above this.
DEVICE_BOUND_SHARE = 0.5
GROUP_RULE = "latency prior: device work >= host launches (device) or not (launch)"


def interval_groups(cascade: Any, X: pd.DataFrame) -> np.ndarray | None:
    """``"launch"`` or ``"device"`` per row of ``X`` (n,): whether the device work's share of the
    cascade's overlapped latency prior is below :data:`DEVICE_BOUND_SHARE`; None when the cascade has no
    overlapped latency prior (CPU data, ``physics=false``, a transferred model)."""
    stage = (getattr(cascade, "stages_", None) or {}).get("latency_ms")
    prior = getattr(stage, "prior", None)
    share = prior.device_share(X) if prior is not None and hasattr(prior, "device_share") else None
    if share is None:
        return None
    return np.where(share >= DEVICE_BOUND_SHARE, "device", "launch").astype(object)


def _min_rows(coverage: float) -> int:
    """Fewest log-ratios whose equal-tailed conformal bounds at ``coverage`` are finite."""
    return math.ceil(2.0 / (1.0 - float(coverage)) - 1.0 - 1e-9)


def calibrate(cascade: Any, X_cal: pd.DataFrame, y_cal: pd.DataFrame | None = None,
              coverage: float = 0.9) -> dict[str, Any]:
    """Calibrate intervals on the calibration split (``X_cal``: n rows of knobs + static features;
    ``y_cal``: the measured targets, default the target columns of ``X_cal``).

    Returns, per predicted target, ``{"lower": q_lo, "upper": q_hi, "n": rows used, "coverage": c,
    "log_ratios": [...]}`` (JSON-able; q in natural-log units of measured/predicted), plus
    ``"coverage": c`` at the top level. Latency and energy on a GPU also get ``"groups": {regime: sorted
    log-ratios}`` and ``"group_rule"`` (:func:`interval_groups`) when every regime has enough rows for
    finite bounds at ``coverage`` (19 at 90 %); the pooled entry stays the fallback."""
    if not 0 < coverage < 1:
        raise ConfigError(f"interval coverage: must be in (0, 1), got {coverage!r}")
    y = X_cal if y_cal is None else y_cal
    pred = screening_predict(cascade, X_cal)
    groups = interval_groups(cascade, X_cal)
    out: dict[str, Any] = {"coverage": float(coverage), "method": "split-conformal log-ratio"}
    for t in TARGETS:
        if pred_name(t) not in pred or t not in y:
            continue
        m, p = np.asarray(y[t], dtype=float), pred[pred_name(t)].to_numpy(dtype=float)
        out[t] = _entry(t, m, p, groups, coverage)
    return out


def _entry(target: str, measured: np.ndarray, pred: np.ndarray, groups: np.ndarray | None,
           coverage: float) -> dict[str, Any]:
    """One target's calibration entry (see :func:`calibrate`) from measured and predicted values (n,) and
    the rows' regimes (None: no regimes)."""
    r = _log_ratios(measured, pred)
    lo, hi = conformal_bounds(r, coverage)
    e: dict[str, Any] = {"lower": lo, "upper": hi, "n": int(len(r)), "coverage": float(coverage),
                         "log_ratios": [float(v) for v in np.sort(r)]}
    if groups is not None and target in GROUPED_TARGETS:
        g_arr = np.asarray(groups, dtype=object)
        by = {g: _log_ratios(measured[g_arr == g], pred[g_arr == g]) for g in ("launch", "device")}
        if all(len(v) >= _min_rows(coverage) for v in by.values()):
            e["groups"] = {g: [float(v) for v in np.sort(r_g)] for g, r_g in by.items()}
            e["group_rule"] = GROUP_RULE
    return e


def architecture_calibration(make_model: Any, X: pd.DataFrame, y: pd.DataFrame, coverage: float = 0.9,
                             folds: int = 5, progress: Any = None, note: Any = None) -> dict[str, Any]:
    """Per target, the calibration entry of a configuration whose **architecture** the model never saw.

    The calibration split shares its architectures with the training rows (it is a random share of the
    same networks at other batch sizes, inputs and precisions), so its intervals hold for those
    networks; screening mostly scores others (69 % of the H200 grid's candidates, and a model trained on
    the first H200 run covered 70 % / 66 % / 75 % of the latency / energy / memory of the architectures
    the later runs added). Here ``make_model()`` (an unfitted copy of the model) is fitted ``folds`` times
    on the rows ``X`` (targets ``y``) with whole architectures held out
    (:func:`carb.model.domain.architecture_keys`, ``GroupKFold``), each held-out row is predicted as
    screening predicts, and the log-ratios make one entry per target as :func:`calibrate` makes them
    (per regime too). :func:`interval` gives it, in union, to in-domain rows of an unseen architecture.
    Returns ``{}`` with fewer than 3 architectures. ``progress``: called with a line per fold; ``note``:
    called with one line per fold skipped (too few rows to refit) or when nothing can be calibrated."""
    plan = architecture_folds(X, folds, note)
    if plan is None:
        return {}
    k, n_groups, splits = plan
    parts = _fold_log_ratios(make_model, X, y, splits, "new-architecture intervals", progress, note)
    from carb.model.domain import zoo_rows

    return architecture_entries(parts, coverage, k, n_groups, unit="family" if zoo_rows(X) else "architecture")


def architecture_folds(X: pd.DataFrame, folds: int = 5, note: Any = None
                       ) -> tuple[int, int, list[tuple[np.ndarray, np.ndarray]]] | None:
    """``(k, architectures, [(train positions, held-out positions)] * k)``: the grouped folds of
    :func:`architecture_calibration` (whole architectures held out), or None (one line to ``note``) with
    fewer than 3 architectures."""
    from sklearn.model_selection import GroupKFold

    from carb.model.domain import architecture_keys

    keys = np.asarray(architecture_keys(X))
    n_groups = len(set(keys))
    if n_groups < 3:
        _say(note, f"new-architecture intervals skipped: {n_groups} architecture(s), need at least 3")
        return None
    k = int(min(folds, n_groups))
    return k, n_groups, list(GroupKFold(k).split(X, groups=keys))


def architecture_entries(parts: Mapping[str, list[tuple[np.ndarray, np.ndarray, Any]]], coverage: float,
                         k: int, n_groups: int, unit: str = "architecture") -> dict[str, Any]:
    """:func:`architecture_calibration`'s result from the folds' ``{target: [(measured, predicted,
    regimes)]}`` (:func:`fold_log_ratios` of each fold, gathered per target). ``unit``: what a fold held out,
    ``architecture`` (ResNet knobs) or ``family`` (zoo rows, :func:`carb.model.domain.architecture_keys`);
    recorded only for families, whose rows :func:`interval` widens even where they are outside the domain
    (a family never measured is outside by its ``family`` alone)."""
    extra = {"unit": "family"} if unit == "family" else {}
    return {t: {**_pooled_entry(t, ps, coverage), "folds": k, "architectures": n_groups, **extra}
            for t, ps in parts.items()}


def cross_calibrate(make_model: Any, X: pd.DataFrame, y: pd.DataFrame | None = None, coverage: float = 0.9,
                    folds: int = 5, seed: int = 0, progress: Any = None, note: Any = None) -> dict[str, Any]:
    """Cross-conformal calibration for data too small for a calibration split: ``make_model()`` (an
    unfitted copy of the model) is fitted on ``folds`` seeded random folds of **all** rows ``X`` (n rows,
    measured targets ``y``, default the target columns of ``X``), each held-out row is predicted as
    screening predicts it, and the n out-of-fold log-ratios make one entry per target as
    :func:`calibrate` makes them (per regime too), so the same :func:`interval` serves them around the
    fitted model's own prediction (the K-fold form of CV+, without keeping the K models for serving).

    The out-of-fold models saw about as many rows as the final one, so their errors stand in for its
    errors; nothing guarantees coverage beyond that. On 100-200-row subsets of the shipped data
    (``python -m scripts.studies.small_intervals``, random and leave-architectures-out test rows) the
    90 % in-domain intervals covered 0.81-0.98 of the test rows (mean over seeds) at median hi/lo
    1.2-1.4 (memory), 1.6-2.5 (latency) and 2.1-2.7 (energy); on the 150-row latency cells MAPIE's CV+
    on the same folds, which keeps the K models, covered 0.87-0.96 where this covered 0.84-0.95, at
    widths within 4 %. 90 % needs 19 finite
    log-ratios; a target with fewer keeps infinite bounds, which :func:`interval` flags. Returns
    :func:`calibrate`'s form with ``"method"``, ``"folds"`` and ``"rows"``; ``progress`` and ``note`` as
    in :func:`architecture_calibration`."""
    from sklearn.model_selection import KFold

    if not 0 < coverage < 1:
        raise ConfigError(f"interval coverage: must be in (0, 1), got {coverage!r}")
    y = X[[t for t in TARGETS if t in X.columns]] if y is None else y
    k = int(min(folds, len(X)))
    out: dict[str, Any] = {"coverage": float(coverage), "folds": k, "rows": int(len(X)),
                           "method": f"cross-conformal log-ratio ({k}-fold out-of-fold, {len(X)} rows)"}
    if k < 2:
        return out
    splits = list(KFold(k, shuffle=True, random_state=seed).split(X))
    for t, ps in _fold_log_ratios(make_model, X, y, splits, "cross-conformal intervals", progress, note).items():
        out[t] = _pooled_entry(t, ps, coverage)
    return out


def _say(note: Any, line: str) -> None:
    """Hand ``line`` to ``note`` when there is one (the command prints it)."""
    if note is not None:
        note(line)


def _fold_log_ratios(make_model: Any, X: pd.DataFrame, y: pd.DataFrame, folds: list[tuple[np.ndarray, np.ndarray]],
                     label: str, progress: Any, note: Any) -> dict[str, list[tuple[np.ndarray, np.ndarray, Any]]]:
    """Refit ``make_model()`` on each fold's training positions and predict its held-out rows as screening
    does: ``{target: [(measured, predicted, regimes or None) per fold]}``. A fold with fewer than
    :data:`carb.model.cascade_data.MIN_FIT_ROWS` training rows, or whose fit finds too little data
    (:class:`carb.errors.DatasetError`), is skipped with one line to ``note``."""
    from carb.model.cascade_data import MIN_FIT_ROWS

    parts: dict[str, list[tuple[np.ndarray, np.ndarray, Any]]] = {}
    for i, (tr, te) in enumerate(folds):
        name = f"{label}: fold {i + 1}/{len(folds)}"
        if len(tr) >= MIN_FIT_ROWS and progress is not None:
            progress(name)
        for t, part in fold_log_ratios(make_model(), X, y, tr, te, name, note).items():
            parts.setdefault(t, []).append(part)
    return parts


def fold_log_ratios(model: Any, X: pd.DataFrame, y: pd.DataFrame, tr: np.ndarray, te: np.ndarray, name: str,
                    note: Any = None) -> dict[str, tuple[np.ndarray, np.ndarray, Any]]:
    """One fold of :func:`_fold_log_ratios`: ``model`` (unfitted) fitted on the rows at positions ``tr``,
    the rows at ``te`` predicted as screening predicts them: ``{target: (measured, predicted, regimes or
    None)}``; ``{}`` with one line to ``note`` when the fold is skipped. A top-level function, so a
    worker process can run it (:mod:`carb.analysis.refits`)."""
    import warnings

    from carb.errors import DatasetError
    from carb.model.cascade_data import MIN_FIT_ROWS

    if len(tr) < MIN_FIT_ROWS:
        _say(note, f"{name} skipped: {len(tr)} training rows, need at least {MIN_FIT_ROWS}")
        return {}
    a, b = X.iloc[tr].reset_index(drop=True), X.iloc[te].reset_index(drop=True)
    ya, yb = y.iloc[tr].reset_index(drop=True), y.iloc[te].reset_index(drop=True)
    try:
        with warnings.catch_warnings():   # the main fit already said what it drops
            warnings.simplefilter("ignore", UserWarning)
            model = model.fit(a, ya)
    except DatasetError as e:
        _say(note, f"{name} skipped: {e}")
        return {}
    pred = screening_predict(model, b)
    regime = interval_groups(model, b)
    return {t: (yb[t].to_numpy(dtype=float), pred[pred_name(t)].to_numpy(dtype=float), regime)
            for t in TARGETS if pred_name(t) in pred and t in yb}


def _pooled_entry(target: str, parts: list[tuple[np.ndarray, np.ndarray, Any]], coverage: float) -> dict[str, Any]:
    """One target's calibration entry (:func:`_entry`) from the folds' (measured, predicted, regimes)."""
    m, p = np.concatenate([q[0] for q in parts]), np.concatenate([q[1] for q in parts])
    groups = None if any(q[2] is None for q in parts) else np.concatenate([q[2] for q in parts])
    return _entry(target, m, p, groups, coverage)


def outside_calibration(log_ratios: Mapping[str, Any], coverage: float = 0.9,
                        precisions: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Per target, the ``"outside"`` calibration entry from extrapolation log-ratios: ``{target: 1-D
    log(measured / predicted)}`` (one direction), or ``{target: {split: 1-D log-ratios}}`` (one entry
    per extrapolation direction: larger batches, deeper, wider, larger inputs).

    Returns ``{target: {"lower", "upper", "n", "coverage", "log_ratios"}}`` as :func:`calibrate` stores
    them, plus ``"by_split": {split: sorted log-ratios}`` for the second form. There the bounds are the
    *widest* of the per-split conformal bounds (the lowest lower, the highest upper; a split too small
    for the coverage is skipped): a candidate outside the domain may extrapolate in any direction, and
    errors differ by direction. Pooling the directions instead lets the mild ones dilute the severe
    one: on the H200, a model fitted on depth <= 101 covered 79 % of the deeper networks' energy with
    the pooled bounds of the other directions and 90 % with the widest (CPU memory, depth: 84 % -> 96 %).
    Targets with no finite log-ratio are left out.

    ``precisions`` (``{target: {split: precision of each log-ratio}}``, aligned with the second form): the
    entry also gets ``"by_precision": {precision: {split: sorted log-ratios}}``, for the precisions whose
    widest per-split bounds are finite at ``coverage``; :func:`interval` gives an outside row its own
    precision's bounds (Mondrian by precision: on the CPU reference fp16 runs PyTorch's fallback path and
    errs 2-3x more than bf16 when it extrapolates; one pooled interval covered 71 % of the fp16 candidates
    of the prospective check and 100 % of the bf16 ones)."""
    out: dict[str, Any] = {}
    for t, r in log_ratios.items():
        parts = {str(k): np.asarray(v, dtype=float) for k, v in r.items()} if isinstance(r, Mapping) else None
        if parts is None:
            flat = np.asarray(r, dtype=float)
        else:   # no other split (a dataset with one extrapolation direction): nothing to calibrate on
            flat = np.concatenate(list(parts.values())) if parts else np.zeros(0)
        flat = flat[np.isfinite(flat)]
        if not len(flat):
            continue
        entry: dict[str, Any] = {"n": int(len(flat)), "coverage": float(coverage),
                                 "log_ratios": [float(v) for v in np.sort(flat)]}
        if parts:
            entry["by_split"] = {k: [float(x) for x in np.sort(v[np.isfinite(v)])] for k, v in parts.items()
                                 if np.isfinite(v).any()}
        entry["lower"], entry["upper"] = _bounds(entry, coverage)
        if parts and precisions and t in precisions:
            byp = _by_precision(parts, precisions[t], coverage)
            if byp:
                entry["by_precision"] = byp
        out[t] = entry
    return out


def _by_precision(parts: Mapping[str, np.ndarray], labels: Mapping[str, Any],
                  coverage: float) -> dict[str, dict[str, list[float]]]:
    """``{precision: {split: sorted finite log-ratios}}`` of ``parts`` (``{split: log-ratios}``) split by
    ``labels`` (``{split: precision per log-ratio}``, same lengths; a split without labels is skipped),
    keeping the precisions whose widest per-split bounds at ``coverage`` are finite."""
    byp: dict[str, dict[str, list[float]]] = {}
    for k, v in parts.items():
        lab = labels.get(k)
        if lab is None or len(lab) != len(v):
            continue
        lab = np.asarray(lab).astype(str)
        fin = np.isfinite(v)
        for p in np.unique(lab[fin]):
            byp.setdefault(str(p), {})[k] = [float(x) for x in np.sort(v[fin & (lab == p)])]
    return {p: d for p, d in byp.items() if all(math.isfinite(b) for b in _widest(d, coverage))}


def _widest(by_split: Mapping[str, Any], coverage: float) -> tuple[float, float]:
    """The widest of the per-split conformal bounds at ``coverage`` (splits with infinite bounds,
    too small for the coverage, skipped; ``(-inf, inf)`` when every split is)."""
    bounds = [conformal_bounds(v, coverage) for v in by_split.values() if len(v)]
    finite = [b for b in bounds if math.isfinite(b[0]) and math.isfinite(b[1])]
    if not finite:
        return -math.inf, math.inf
    return min(b[0] for b in finite), max(b[1] for b in finite)


def _bounds(cal: Mapping[str, Any], coverage: float | None) -> tuple[float, float]:
    """The log-ratio quantiles of one calibration entry at ``coverage`` (None: as calibrated); an
    entry with ``by_split`` gives the widest per-split bounds (:func:`outside_calibration`)."""
    if cal.get("by_split"):
        return _widest(cal["by_split"], float(cal["coverage"]) if coverage is None else coverage)
    if coverage is None or not cal.get("log_ratios"):
        return float(cal["lower"]), float(cal["upper"])
    return conformal_bounds(cal["log_ratios"], coverage)


def _widen_by_precision(lo_v: np.ndarray, hi_v: np.ndarray, by_precision: Mapping[str, Any], prec: np.ndarray,
                        coverage: float) -> None:
    """Widen in place the bounds ``lo_v`` / ``hi_v`` (n,) of the rows whose precision ``prec`` (n,) has
    log-ratios in ``by_precision`` (a calibrated transfer's ``precision_log_ratios``,
    :func:`carb.model.transfer_prior.precision_points`) to that precision's bounds at ``coverage``."""
    for p_name, r in by_precision.items():
        p_lo, p_hi = conformal_bounds(r, coverage)
        sel = prec == str(p_name)
        if sel.any() and math.isfinite(p_lo) and math.isfinite(p_hi):
            lo_v[sel], hi_v[sel] = np.minimum(lo_v[sel], p_lo), np.maximum(hi_v[sel], p_hi)


def memory_floor(X: pd.DataFrame, settings: Mapping[str, Any] | None, table: str | None = None) -> float:
    """The half-width (a log ratio, >= 0) below which no peak-memory interval of the device(s) of the rows ``X``
    goes. ``settings`` (``evaluate.memory_floor``): ``measured`` (bool: read the device's measured floor from the
    shipped table by ``X``'s ``device_id``, :func:`carb.data.repeatability.shipped_memory_floor`; ``table``:
    another such file), ``default_log`` (a device without a measured floor), ``min_log`` (never below). Rows of
    several devices take the widest of theirs. 0.0 without settings."""
    from carb.data.repeatability import shipped_memory_floor

    if not settings:
        return 0.0
    default, least = float(settings.get("default_log", 0.0)), float(settings.get("min_log", 0.0))
    devices = sorted(set(X["device_id"].dropna().astype(str))) if "device_id" in X.columns else []
    found = [shipped_memory_floor(d, table) if settings.get("measured", True) else None for d in devices]
    floors = [default if f is None else f for f in found] or [default]
    return max(least, *floors)


def with_floor(calibration: dict[str, Any], target: str, floor_log: float) -> dict[str, Any]:
    """``calibration`` (:func:`calibrate`'s form) with ``target``'s entry floored at the half-width ``floor_log``
    (a log ratio, >= 0; its ``"floor_log"``, which :func:`interval` applies to every row); unchanged where the
    target has no entry. Returns the same dict."""
    if floor_log < 0 or not math.isfinite(floor_log):
        raise ConfigError(f"interval floor of {target}: must be a finite log ratio >= 0, got {floor_log!r}")
    if isinstance(calibration.get(target), dict):
        calibration[target]["floor_log"] = float(floor_log)
    return calibration


#: The targets a session's speed moves (peak memory repeats across windows: carb/data/cpu-intel-xeon.md).
SESSION_TARGETS: tuple[str, ...] = ("latency_ms", "energy_J")


def with_session(calibration: dict[str, Any], term: Mapping[str, Any] | None) -> dict[str, Any]:
    """``calibration`` (:func:`calibrate`'s form) with the session drift ``term``
    (:func:`carb.data.session_drift.drift`: ``sd_log``, ``df``, ...) as ``"session"`` on each entry of
    :data:`SESSION_TARGETS` it has; unchanged without a term. Returns the same dict."""
    if term:
        for t in SESSION_TARGETS:
            if isinstance(calibration.get(t), dict):
                calibration[t]["session"] = dict(term)
    return calibration


def without_session(calibration: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``calibration`` without its ``"session"`` entries: intervals for the rows' own session."""
    return {t: ({k: v for k, v in e.items() if k != "session"} if isinstance(e, Mapping) else e)
            for t, e in calibration.items()}


def session_term(calibration: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The session drift a calibration carries (the first of :data:`SESSION_TARGETS` that has one), or None."""
    for t in SESSION_TARGETS:
        e = (calibration or {}).get(t)
        if isinstance(e, Mapping) and isinstance(e.get("session"), Mapping):
            return dict(e["session"])
    return None


def session_widened(lo_log: np.ndarray, hi_log: np.ndarray, half: float) -> tuple[np.ndarray, np.ndarray]:
    """Log-ratio bounds (n,) with a session's half-width ``half`` (>= 0) added in quadrature to each row's own
    half-width about its centre (an independent level shift of the whole session): ``c -/+ sqrt(w^2 + h^2)``
    with ``c = (lo + hi) / 2``, ``w = (hi - lo) / 2``. Rows with an infinite bound keep their bounds."""
    finite = np.isfinite(lo_log) & np.isfinite(hi_log)
    lo_f, hi_f = np.where(finite, lo_log, 0.0), np.where(finite, hi_log, 0.0)
    c = (lo_f + hi_f) / 2
    w = np.sqrt(np.square((hi_f - lo_f) / 2) + half ** 2)
    return np.where(finite, c - w, lo_log), np.where(finite, c + w, hi_log)


def floored(lo_log: np.ndarray, hi_log: np.ndarray, floor_log: float) -> tuple[np.ndarray, np.ndarray]:
    """Log-ratio bounds (n,) widened to at least ``[-floor_log, +floor_log]`` (infinite bounds stay infinite)."""
    return np.minimum(lo_log, -floor_log), np.maximum(hi_log, floor_log)


def interval(calibration: Mapping[str, Any], pred: pd.DataFrame, coverage: float | None = None,
             outside: np.ndarray | None = None, groups: np.ndarray | None = None,
             precision: np.ndarray | None = None, new_arch: np.ndarray | None = None) -> pd.DataFrame:
    """``lo_<target>`` and ``hi_<target>`` (the target's unit) for the n rows of ``pred`` (with
    ``pred_<target>`` columns), at ``coverage`` (default: the calibrated one; another coverage is
    recomputed from the stored log-ratios). ``outside`` (bool, shape (n,)): rows outside the model's
    domain, which get the union with the target's ``"outside"`` calibration when it has one. ``groups``
    (shape (n,), :func:`interval_groups` of the same rows): a target calibrated per regime takes each
    row's regime's bounds (the pooled ones where a regime's are not finite at ``coverage``). ``precision``
    (shape (n,)): an outside row whose precision the outside calibration has bounds of
    (``"by_precision"``, :func:`outside_calibration`) gets those instead of the pooled outside bounds, and
    an in-domain row of a calibrated transfer whose entry has ``"precision_log_ratios"`` gets the wider of
    the pooled and its precision's bounds (:func:`carb.model.transfer_prior.precision_points`).
    ``new_arch`` (bool, shape (n,)): in-domain rows of an architecture the model never saw, which get the
    union with the target's ``"new_arch"`` calibration (:func:`architecture_calibration`, per regime where
    it has regimes) when it has one. Targets without calibration are left out. A target whose entry carries a
    session drift (``"session"``, :func:`with_session`) adds its half-width in quadrature (:func:`session_widened`):
    the interval of a measurement in a later session (:func:`without_session`: the rows' own session).

    Each target also gets ``interval_unbounded_<target>`` (bool: ``lo`` is 0 or ``hi`` infinite because
    some bound it needs has too few log-ratios for the coverage) and ``interval_reason_<target>`` (why,
    ``""`` where bounded); screening treats such a candidate as unverified."""
    out = pd.DataFrame(index=pred.index)
    for t in TARGETS:
        cal = calibration.get(t)
        if not isinstance(cal, Mapping) or pred_name(t) not in pred:
            continue
        lo, hi = _bounds(cal, coverage)
        lo_v, hi_v = np.full(len(pred), lo), np.full(len(pred), hi)
        by = cal.get("groups")
        if groups is not None and isinstance(by, Mapping):
            c = float(cal["coverage"]) if coverage is None else coverage
            g_arr = np.asarray(groups, dtype=object)
            for g, r in by.items():
                g_lo, g_hi = conformal_bounds(r, c)
                if math.isfinite(g_lo) and math.isfinite(g_hi):
                    sel = g_arr == g
                    lo_v[sel], hi_v[sel] = g_lo, g_hi
        byp = cal.get("precision_log_ratios")
        if precision is not None and isinstance(byp, Mapping):
            _widen_by_precision(lo_v, hi_v, byp, np.asarray(precision).astype(str),
                                float(cal["coverage"]) if coverage is None else coverage)
        arch = cal.get("new_arch")
        families = isinstance(arch, Mapping) and arch.get("unit") == "family"
        if new_arch is not None and isinstance(arch, Mapping) and np.any(new_arch) and not families:
            _union_new_arch(lo_v, hi_v, arch, new_arch, outside, groups, cal, coverage)
        extra = cal.get("outside")
        if outside is not None and isinstance(extra, Mapping) and np.any(outside):
            lo_o, hi_o = _bounds(extra, coverage)
            mask = np.asarray(outside, dtype=bool)
            lo_v[mask], hi_v[mask] = min(lo, lo_o), max(hi, hi_o)
            byp = extra.get("by_precision")
            if precision is not None and isinstance(byp, Mapping):
                c = float(extra["coverage"]) if coverage is None else coverage
                prec = np.asarray(precision).astype(str)
                for p_name, splits in byp.items():
                    lo_p, hi_p = _widest(splits, c)
                    sel = mask & (prec == str(p_name))
                    if sel.any() and math.isfinite(lo_p) and math.isfinite(hi_p):
                        lo_v[sel], hi_v[sel] = min(lo, lo_p), max(hi, hi_p)
        if new_arch is not None and families and np.any(new_arch):   # zoo: held-out families, outside or not
            _union_new_arch(lo_v, hi_v, arch, new_arch, None, groups, cal, coverage)
        if float(cal.get("floor_log") or 0.0) > 0:   # never narrower than the device's run-to-run spread
            lo_v, hi_v = floored(lo_v, hi_v, float(cal["floor_log"]))
        if isinstance(cal.get("session"), Mapping):   # the device's speed on a later day
            c = float(cal["coverage"]) if coverage is None else coverage
            lo_v, hi_v = session_widened(lo_v, hi_v, drift_half(cal["session"], c))
        p = pred[pred_name(t)].to_numpy(dtype=float)
        with np.errstate(over="ignore"):
            out[f"lo_{t}"] = np.where(np.isfinite(lo_v), p * np.exp(np.where(np.isfinite(lo_v), lo_v, 0.0)), 0.0)
            out[f"hi_{t}"] = np.where(np.isfinite(hi_v), p * np.exp(np.where(np.isfinite(hi_v), hi_v, 0.0)), math.inf)
        unbounded = ~(np.isfinite(lo_v) & np.isfinite(hi_v))
        out[f"interval_unbounded_{t}"] = unbounded
        out[f"interval_reason_{t}"] = _unbounded_reasons(cal, coverage, unbounded, lo, hi, outside)
    return out


def _union_new_arch(lo_v: np.ndarray, hi_v: np.ndarray, arch: Mapping[str, Any], new_arch: np.ndarray,
                    outside: np.ndarray | None, groups: np.ndarray | None, cal: Mapping[str, Any],
                    coverage: float | None) -> None:
    """Widen, in place, the log-ratio bounds ``lo_v``/``hi_v`` (n,) of the ``new_arch`` rows (not ``outside``
    ones, where given) to their union with the new-architecture entry ``arch`` (per regime where it has
    one and ``groups`` says the row's)."""
    c = float(arch.get("coverage", cal["coverage"])) if coverage is None else coverage
    sel = np.asarray(new_arch, dtype=bool) & ~(np.asarray(outside, dtype=bool) if outside is not None
                                               else np.zeros(len(lo_v), dtype=bool))
    a_lo, a_hi = conformal_bounds(arch.get("log_ratios") or [], c)
    a_lo_v, a_hi_v = np.full(len(lo_v), a_lo), np.full(len(lo_v), a_hi)
    if groups is not None and isinstance(arch.get("groups"), Mapping):
        g_arr = np.asarray(groups, dtype=object)
        for g, r in arch["groups"].items():
            g_lo, g_hi = conformal_bounds(r, c)
            if math.isfinite(g_lo) and math.isfinite(g_hi):
                a_lo_v[g_arr == g], a_hi_v[g_arr == g] = g_lo, g_hi
    ok = sel & np.isfinite(a_lo_v) & np.isfinite(a_hi_v)
    lo_v[ok], hi_v[ok] = np.minimum(lo_v[ok], a_lo_v[ok]), np.maximum(hi_v[ok], a_hi_v[ok])


def _unbounded_reasons(cal: Mapping[str, Any], coverage: float | None, unbounded: np.ndarray, lo: float, hi: float,
                       outside: np.ndarray | None) -> np.ndarray:
    """Why each row's interval of one target is unbounded (``""`` where it is bounded): the target's
    calibration holds too few log-ratios for ``coverage``, or the row lies outside the domain and the
    extrapolation calibration does (object array, shape of ``unbounded``)."""
    reasons = np.full(len(unbounded), "", dtype=object)
    if not unbounded.any():
        return reasons
    c = float(cal.get("coverage", 0.9)) if coverage is None else float(coverage)
    need = f"a {100 * c:g} % interval needs at least {_min_rows(c)}"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        reasons[unbounded] = f"calibrated on {int(cal.get('n', len(cal.get('log_ratios') or [])))} log-ratios; {need}"
    elif outside is not None:
        reasons[unbounded & np.asarray(outside, dtype=bool)] = (
            "outside the training domain: the extrapolation calibration holds too few log-ratios per "
            f"direction; {need}")
    reasons[unbounded & (reasons == "")] = f"too few calibration log-ratios; {need}"
    return reasons


def row_precision(X: pd.DataFrame) -> np.ndarray | None:
    """The rows' precision (n,) for :func:`interval`'s per-precision outside bounds; None without the column."""
    return X["precision"].astype(str).to_numpy() if "precision" in X.columns else None


def new_architecture_mask(cascade: Any, X: pd.DataFrame) -> np.ndarray:
    """Bool (n,): rows of ``X`` whose architecture the cascade was not trained on (all False without a
    record of its architectures)."""
    from carb.model.domain import unseen_architecture

    return unseen_architecture(getattr(cascade, "domain_", None), X)


def outside_mask(cascade: Any, X: pd.DataFrame) -> np.ndarray:
    """Bool (n,): rows of ``X`` outside the cascade's training domain (all False without one)."""
    from carb.model.domain import check_domain

    inside, _ = check_domain(getattr(cascade, "domain_", None), X)
    return ~inside


def coverage_report(calibration: Mapping[str, Any], cascade: Any, X: pd.DataFrame,
                    y: pd.DataFrame | None = None, coverage: float | None = None) -> dict[str, dict[str, float]]:
    """Empirical coverage (share of rows with ``lo <= measured <= hi``) and mean relative width
    (``mean((hi - lo) / pred)``, dimensionless) per target on rows ``X`` (measured ``y``, default the
    target columns of ``X``), predicted in screening mode, rows outside the domain with the outside
    calibration when there is one. ``{target: {"coverage", "mean_rel_width",
    "n"[, "by_group": {regime: {"coverage", "mean_rel_width", "n"}}]}}``, the regimes of a target
    calibrated per regime (:func:`interval_groups`)."""
    y = X if y is None else y
    pred = screening_predict(cascade, X)
    groups = interval_groups(cascade, X)
    iv = interval(without_session(calibration), pred, coverage, outside=outside_mask(cascade, X), groups=groups,
                  precision=row_precision(X), new_arch=new_architecture_mask(cascade, X))   # the rows' own session
    report: dict[str, dict[str, float]] = {}
    for t in TARGETS:
        if f"lo_{t}" not in iv or t not in y:
            continue
        m = np.asarray(y[t], dtype=float)
        p = pred[pred_name(t)].to_numpy(dtype=float)
        lo, hi = iv[f"lo_{t}"].to_numpy(dtype=float), iv[f"hi_{t}"].to_numpy(dtype=float)
        ok = np.isfinite(m) & np.isfinite(p) & (p > 0)
        n = int(ok.sum())
        cov = float(np.mean((lo[ok] <= m[ok]) & (m[ok] <= hi[ok]))) if n else float("nan")
        width = float(np.mean((hi[ok] - lo[ok]) / p[ok])) if n else float("nan")
        report[t] = {"coverage": cov, "mean_rel_width": width, "n": n}
        cal_t = calibration.get(t)
        if groups is not None and isinstance(cal_t, Mapping) and cal_t.get("groups"):
            report[t]["by_group"] = {}
            for g in cal_t["groups"]:
                sel = ok & (np.asarray(groups, dtype=object) == g)
                k = int(sel.sum())
                report[t]["by_group"][g] = {
                    "coverage": float(np.mean((lo[sel] <= m[sel]) & (m[sel] <= hi[sel]))) if k else float("nan"),
                    "mean_rel_width": float(np.mean((hi[sel] - lo[sel]) / p[sel])) if k else float("nan"), "n": k}
    return report
