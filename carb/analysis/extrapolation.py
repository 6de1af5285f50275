"""Leave-out splits that force extrapolation, and the accuracy of a model (and of B1) on them.

Screening scores configurations nobody measured, mostly outside the measured range. A random split
does not test that; these splits do. Each one trains on the lower range of one knob and tests on
the upper range (larger batches, deeper, wider, larger inputs), or trains on the most measured
precision and tests on the others, or (for third-party tables) leaves out whole models or GPU
generations:

- :func:`range_splits`: per numeric knob, the threshold is the largest knob value whose lower range
  holds at most ``train_share`` of the rows (at least ``min_rows`` rows on each side);
- :func:`precision_split`: train on fp32 (else the most common precision), test on the others;
- :func:`group_splits`: leave one value of a grouping column out (``model`` names, GPU generations).

:func:`evaluate_splits` fits a clone of the estimator and B1 (FLOPs-only linear regression) on each
split's training rows and reports R^2 and MAPE per target on its test rows, as a frame and as
``xval_<split>_<target>_{r2,mape}`` / ``xval_<split>_<target>_b1_{r2,mape}`` metrics.
"""
from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.evaluate import regression_metrics
from carb.data.schema import TARGETS
from carb.design.identity import BLOCK, DEPTH, STEM, WIDTH

#: Knobs whose upper range is held out, and the split's name.
RANGE_KNOBS: dict[str, str] = {"batch_size": "batch", DEPTH: DEPTH, WIDTH: "width",
                               "input_size": "input"}


@dataclass
class Split:
    """One leave-out split: boolean train/test masks over the frame's rows and what it holds out."""

    name: str
    train: np.ndarray
    test: np.ndarray
    description: str


def range_splits(df: pd.DataFrame, knobs: Mapping[str, str] = RANGE_KNOBS, train_share: float = 0.7,
                 min_rows: int = 20) -> list[Split]:
    """Lower-range-train / upper-range-test splits, one per knob with at least two values."""
    out = []
    for knob, name in knobs.items():
        if knob not in df.columns:
            continue
        v = pd.to_numeric(df[knob], errors="coerce").to_numpy(float)
        values = np.unique(v[np.isfinite(v)])
        best = None
        for thr in values[:-1]:
            n_tr, n_te = int((v <= thr).sum()), int((v > thr).sum())
            if n_tr >= min_rows and n_te >= min_rows and n_tr <= train_share * len(v):
                best = thr
        if best is None and len(values) > 1:  # fall back to the most balanced cut
            cand = [t for t in values[:-1] if (v <= t).sum() >= min_rows and (v > t).sum() >= min_rows]
            best = cand[0] if cand else None
        if best is None:
            continue
        out.append(Split(name, v <= best, v > best, f"train {knob} <= {best:g}, test {knob} > {best:g}"))
    return out


def precision_split(df: pd.DataFrame, min_rows: int = 20) -> list[Split]:
    """Train on the widest precision (fp32 when present, else the most common), test on the others
    (none when the data has one)."""
    if "precision" not in df.columns:
        return []
    prec = df["precision"].astype(str).to_numpy()
    counts = pd.Series(prec).value_counts()
    if len(counts) < 2:
        return []
    main = "fp32" if "fp32" in counts.index else counts.index[0]
    tr, te = prec == main, prec != main
    if tr.sum() < min_rows or te.sum() < min_rows:
        return []
    others = ",".join(sorted(set(prec[te])))
    return [Split("precision", tr, te, f"train {main}, test {others}")]


def group_splits(df: pd.DataFrame, column: str, prefix: str, min_rows: int = 5) -> list[Split]:
    """Leave-one-``column``-value-out splits (e.g. one ResNet model or one GPU generation)."""
    if column not in df.columns:
        return []
    g = df[column].astype(str).to_numpy()
    out = []
    for value in sorted(set(g)):
        te = g == value
        if te.sum() >= min_rows and (~te).sum() >= min_rows:
            out.append(Split(f"{prefix}_{value}", ~te, te, f"leave {column}={value} out"))
    return out


def default_splits(df: pd.DataFrame, train_share: float = 0.7, min_rows: int = 20) -> list[Split]:
    """Range splits for batch, depth, width and input size, plus the precision split."""
    return range_splits(df, train_share=train_share, min_rows=min_rows) + precision_split(df, min_rows)


def evaluate_splits(make_model: Callable[[], Any], df: pd.DataFrame, splits: Sequence[Split],
                    targets: Sequence[str] = TARGETS, progress: Callable[[str], None] | None = None,
                    interval_coverage: float | None = None, cal_share: float = 0.15, seed: int = 0,
                    predictions: dict[str, pd.DataFrame] | None = None,
                    note: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Fit ``make_model()`` and B1 on each split's train rows; score both on its test rows, a CARB
    cascade as screening predicts (:func:`carb.model.intervals.screening_predict`: runtime telemetry
    predicted from the architecture, not the test rows' measured telemetry).

    With ``interval_coverage``, a seeded ``cal_share`` of each split's train rows is held out to
    calibrate the model's intervals (:func:`carb.model.intervals.calibrate`); test rows outside the
    split model's domain also get the outside calibration made from the *other* splits' extrapolation
    log-ratios (leave-one-split-out, precision splits left out; the widest of their per-split bounds,
    :func:`carb.model.intervals.outside_calibration`), as a final model gets it from all of them. Their coverage and mean relative width on the test rows are reported
    (``interval_coverage``, ``interval_width``).

    Returns one row per split x target: split, description, target, n_train, n_test, r2, mape,
    b1_r2, b1_mape (MAPE in %), fit_s[, interval_coverage, interval_width]. Targets a split's data
    does not measure are skipped. ``predictions``, when given, is filled with ``{split: test rows}``
    with ``pred_<target>`` and B1's ``b1_pred_<target>`` columns (for :func:`error_concentration` and
    :func:`pool_group_splits`). ``table.attrs["outside_log_ratios"]``: ``{target: {split: [log(measured /
    predicted)]}}`` of every non-precision split's test rows, screening-mode predictions, and
    ``table.attrs["outside_precisions"]`` their precisions, aligned (feed both to
    :func:`carb.model.intervals.outside_calibration`). ``note``: called with one line per split skipped
    (no target with 10 measured training rows and 2 test rows, or a fit that finds too little data)."""
    results = []
    for i, sp in enumerate(splits):
        label = f"extrapolation split {i + 1}/{len(splits)}: {sp.name} ({sp.description})"
        results.append(fit_split(None, df, sp, targets, interval_coverage, cal_share, seed, note,
                                 (lambda: progress(label)) if progress is not None else None, make_model))
    return combine_splits(results, interval_coverage, predictions)


def fit_split(model: Any, df: pd.DataFrame, sp: Split, targets: Sequence[str] = TARGETS,
              interval_coverage: float | None = None, cal_share: float = 0.15, seed: int = 0,
              note: Callable[[str], None] | None = None, starting: Callable[[], None] | None = None,
              make_model: Callable[[], Any] | None = None) -> dict[str, Any] | None:
    """One split of :func:`evaluate_splits`: ``model`` (an unfitted estimator; None: ``make_model()``,
    called only when the split has the rows to fit) and B1 fitted on the split's training rows and scored on its test rows. Returns ``{"rows": [table
    rows], "predictions": test rows with predictions, "held": what its interval coverage needs or None}``,
    or None (one line to ``note``) when the split is skipped. ``starting()`` is called just before the fit.
    A top-level function, so a worker process can run it (:mod:`carb.analysis.refits`)."""
    from carb.errors import DatasetError
    from carb.model.baselines import FlopsLinear
    from carb.model.intervals import screening_predict

    tr, te = df[sp.train].reset_index(drop=True), df[sp.test].reset_index(drop=True)
    cal = tr.iloc[:0]
    if interval_coverage is not None and len(tr) >= 40:
        pick = np.random.default_rng(seed).random(len(tr)) < cal_share
        tr, cal = tr[~pick].reset_index(drop=True), tr[pick].reset_index(drop=True)
    ts = [t for t in targets if t in df.columns and tr[t].notna().sum() >= 10 and te[t].notna().sum() >= 2]
    if not ts:
        if note is not None:
            note(f"extrapolation split {sp.name} skipped: no target has 10 measured training rows "
                 f"and 2 test rows ({len(tr)} training, {len(te)} test rows)")
        return None
    if starting is not None:
        starting()
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():  # the main fit already said what it drops
            warnings.simplefilter("ignore", UserWarning)
            model = (make_model() if model is None else model).fit(tr, tr[ts])
    except DatasetError as e:
        if note is not None:
            note(f"extrapolation split {sp.name} skipped: {e}")
        return None
    fit_s = time.perf_counter() - t0
    # scored as screening scores a configuration nobody ran: its runtime telemetry is not measured either
    pred = screening_predict(model, te) if hasattr(model, "telemetry_medians_") else model.predict(te)
    b1 = FlopsLinear().fit(tr, tr[ts]).predict(te)
    cascade = hasattr(model, "telemetry_medians_")
    held = _held_out(model, cal, te, ts, interval_coverage, pred if cascade else None) \
        if interval_coverage is not None else None
    rows = []
    for t in ts:
        col = f"pred_{t}"
        if col not in pred.columns:
            continue
        m = regression_metrics(te[t], pred[col])
        b = regression_metrics(te[t], b1[col])
        rows.append({"split": sp.name, "description": sp.description, "target": t, "n_train": len(tr),
                     "n_test": int(te[t].notna().sum()), "r2": m["r2"], "mape": m["mape"],
                     "b1_r2": b["r2"], "b1_mape": b["mape"], "fit_s": fit_s,
                     "interval_coverage": np.nan, "interval_width": np.nan})
    return {"name": sp.name, "rows": rows, "held": held,
            "predictions": te.assign(**{c: pred[c].to_numpy() for c in pred.columns},
                                     **{f"b1_{c}": b1[c].to_numpy() for c in b1.columns})}


def combine_splits(results: Sequence[dict[str, Any] | None], interval_coverage: float | None = None,
                   predictions: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """:func:`evaluate_splits`' table from the splits' :func:`fit_split` results (None: skipped), in
    split order; fills ``predictions`` as :func:`evaluate_splits` does."""
    rows: list[dict[str, Any]] = []
    held: dict[str, dict[str, Any]] = {}   # split -> what its interval coverage needs
    for r in results:
        if r is None:
            continue
        rows += r["rows"]
        if predictions is not None:
            predictions[r["name"]] = r["predictions"]
        if r["held"] is not None:
            held[r["name"]] = r["held"]
    table = pd.DataFrame(rows, columns=["split", "description", "target", "n_train", "n_test", "r2", "mape",
                                        "b1_r2", "b1_mape", "fit_s", "interval_coverage", "interval_width"])
    if interval_coverage is not None:
        for i, r in table.iterrows():
            cov = _split_coverage(held, r["split"], r["target"], interval_coverage)
            table.loc[i, ["interval_coverage", "interval_width"]] = cov
    table.attrs["outside_log_ratios"] = SharedAttr(_by_split(held, exclude=None))
    table.attrs["outside_precisions"] = SharedAttr(_precisions_by_split(held, exclude=None))
    return table


class SharedAttr(dict):
    """A read-only-by-convention ``DataFrame.attrs`` value that pandas passes on without copying: pandas
    deep-copies ``attrs`` into the result of every operation (a row access, a slice, ``iterrows``), and the
    extrapolation table's log-ratio lists (about 10,000 floats) made each copy cost 5-10 ms; ``carb-train``
    spent about 0.4 s in them. Still a ``dict`` (JSON, parquet metadata and pickling see one)."""

    def __deepcopy__(self, memo: dict) -> SharedAttr:
        return self

    def __reduce__(self) -> tuple:
        return (SharedAttr, (dict(self),))


def _held_out(model: Any, cal: pd.DataFrame, te: pd.DataFrame, ts: Sequence[str], coverage: float,
              pred: pd.DataFrame | None = None) -> dict[str, Any]:
    """One split's screening-mode predictions on its test rows (``pred`` when already made), their
    log-ratios (per target), which rows lie outside the split model's domain, and the split's own
    calibration (None when its calibration share is too small)."""
    from carb.model.intervals import calibrate, interval_groups, outside_mask, screening_predict

    pred = screening_predict(model, te) if pred is None else pred
    ratios = {}
    for t in ts:
        if f"pred_{t}" in pred.columns:
            m, p = te[t].to_numpy(float), pred[f"pred_{t}"].to_numpy(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios[t] = np.log(m / p)
    cov_ts = [t for t in ts if len(cal) >= 10 and cal[t].notna().sum() >= 10]
    calib = calibrate(model, cal, cal[cov_ts], coverage=coverage) if cov_ts else None
    return {"pred": pred, "measured": te, "ratios": ratios, "outside": outside_mask(model, te), "cal": calib,
            "groups": interval_groups(model, te)}


def _by_split(held: Mapping[str, Mapping[str, Any]], exclude: str | None) -> dict[str, dict[str, list[float]]]:
    """``{target: {split: finite log-ratios}}`` of every held split except ``exclude`` and precision
    splits (the form :func:`carb.model.intervals.outside_calibration` takes per direction)."""
    out: dict[str, dict[str, list[float]]] = {}
    for name, h in held.items():
        if name == exclude or name.startswith("precision"):
            continue
        for t, r in h["ratios"].items():
            out.setdefault(t, {})[name] = [float(v) for v in r[np.isfinite(r)]]
    return out


def _precisions_by_split(held: Mapping[str, Mapping[str, Any]], exclude: str | None) -> dict[str, dict[str, list[str]]]:
    """``{target: {split: precision of each finite log-ratio}}``, aligned with :func:`_by_split` (the
    ``precisions`` argument of :func:`carb.model.intervals.outside_calibration`); empty without a
    precision column."""
    out: dict[str, dict[str, list[str]]] = {}
    for name, h in held.items():
        if name == exclude or name.startswith("precision") or "precision" not in h["measured"].columns:
            continue
        prec = h["measured"]["precision"].astype(str).to_numpy()
        for t, r in h["ratios"].items():
            out.setdefault(t, {})[name] = [str(p) for p in prec[np.isfinite(r)]]
    return out


def _split_coverage(held: Mapping[str, Mapping[str, Any]], split: str, target: str,
                    coverage: float) -> list[float]:
    """``[coverage, mean relative width]`` of one split's intervals for ``target`` on its test rows,
    with the outside calibration from the other splits (NaN when not calibrated)."""
    from carb.model.intervals import interval, outside_calibration, row_precision, without_session

    h = held.get(split)
    if h is None or h["cal"] is None or target not in h["cal"]:
        return [np.nan, np.nan]
    cal = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in h["cal"].items()}
    extra = outside_calibration({target: _by_split(held, exclude=split).get(target, {})}, coverage,
                                {target: _precisions_by_split(held, exclude=split).get(target, {})})
    if target in extra:
        cal[target]["outside"] = extra[target]
    iv = interval(without_session(cal), h["pred"], outside=h["outside"], groups=h.get("groups"),   # the rows' session
                  precision=row_precision(h["measured"]))
    m = h["measured"][target].to_numpy(float)
    p = h["pred"][f"pred_{target}"].to_numpy(float)
    lo, hi = iv[f"lo_{target}"].to_numpy(float), iv[f"hi_{target}"].to_numpy(float)
    ok = np.isfinite(m) & np.isfinite(p) & (p > 0)
    if not ok.any():
        return [np.nan, np.nan]
    return [float(np.mean((lo[ok] <= m[ok]) & (m[ok] <= hi[ok]))), float(np.mean((hi[ok] - lo[ok]) / p[ok]))]


#: Columns :func:`xval_predictions` keeps of each split's test rows (besides the target and prediction columns).
XVAL_KEEP: tuple[str, ...] = ("config_id", BLOCK, DEPTH, WIDTH, "input_size", "batch_size", "precision",
                              STEM)


def xval_predictions(predictions: Mapping[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Each split's test rows (``{split: rows}`` as :func:`evaluate_splits` fills them) cut to what a
    figure or a reader needs: :data:`XVAL_KEEP`, the measured targets, ``pred_<target>`` and
    ``b1_pred_<target>``; index reset."""
    out = {}
    for name, df in predictions.items():
        cols = [c for c in df.columns if c in XVAL_KEEP or c in TARGETS or c.startswith(("pred_", "b1_pred_"))]
        out[name] = df[cols].reset_index(drop=True)
    return out


def xval_frame(predictions: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """:func:`xval_predictions` as one frame with a ``split`` column (to save as one parquet file)."""
    parts = [df.assign(split=name) for name, df in xval_predictions(predictions).items()]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["split"])


def xval_from_frame(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The inverse of :func:`xval_frame`: ``{split: rows}`` in the frame's order of splits."""
    return {str(s): g.drop(columns=["split"]).reset_index(drop=True)
            for s, g in frame.groupby("split", sort=False)}


def split_metrics(table: pd.DataFrame) -> dict[str, float]:
    """``xval_<split>_<target>_{r2,mape}`` and ``..._b1_{r2,mape}`` from :func:`evaluate_splits`."""
    out: dict[str, float] = {}
    for r in table.itertuples(index=False):
        key = f"xval_{r.split}_{r.target}"
        out.update({f"{key}_r2": float(r.r2), f"{key}_mape": float(r.mape), f"{key}_b1_r2": float(r.b1_r2),
                    f"{key}_b1_mape": float(r.b1_mape)})
        if np.isfinite(r.interval_coverage):
            out[f"interval_{r.split}_{r.target}_coverage"] = float(r.interval_coverage)
            out[f"interval_{r.split}_{r.target}_width"] = float(r.interval_width)
    return out


def pool_group_splits(table: pd.DataFrame, predictions: Mapping[str, pd.DataFrame], prefix: str,
                      description: str | None = None) -> pd.DataFrame:
    """Leave-one-group-out cross-validation scored as one split: the test rows of every split named
    ``<prefix>_<value>`` (:func:`group_splits`), each predicted by the model that never saw its group,
    pooled into one row ``<prefix>`` per target (R^2 and MAPE over all of them, CARB and B1). The
    per-group rows stay in the table, flagged ``fold=True``: a fold holds 2-4 rows on timm's data,
    and an R^2 over 2-4 points is noise (one ResNet's 4 rows: CARB 0.99873 vs B1 0.99884 while
    CARB's MAPE is 0.9 % vs 1.5 %). Returns the table with a ``fold`` column and the pooled rows
    appended; ``predictions`` (from :func:`evaluate_splits`) must hold the folds' rows."""
    out = table.copy()
    if "fold" not in out.columns:
        out["fold"] = False
    names = [n for n in predictions if n.startswith(f"{prefix}_")]
    out.loc[out["split"].isin(names), "fold"] = True
    rows = []
    for t in out.loc[out["split"].isin(names), "target"].unique():
        used = [n for n in names if ((out["split"] == n) & (out["target"] == t)).any()]
        both = pd.concat([predictions[n] for n in used], ignore_index=True)
        m = regression_metrics(both[t], both[f"pred_{t}"])
        b = regression_metrics(both[t], both[f"b1_pred_{t}"])
        folds = out[out["split"].isin(used) & (out["target"] == t)]
        rows.append({"split": prefix, "target": t, "n_train": int(folds["n_train"].median()),
                     "n_test": int(both[t].notna().sum()), "r2": m["r2"], "mape": m["mape"],
                     "b1_r2": b["r2"], "b1_mape": b["mape"], "fit_s": float(folds["fit_s"].sum()),
                     "interval_coverage": np.nan, "interval_width": np.nan, "fold": False,
                     "description": description or f"leave-one-{prefix}-out, {len(used)} folds pooled"})
    return pd.concat([out, pd.DataFrame(rows)], ignore_index=True) if rows else out


def cross_dataset_coverage(rows: Mapping[str, pd.DataFrame], target: str, coverage: float = 0.9,
                           cal_rows: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Interval coverage where a dataset is too small to calibrate its own intervals (a 90 % split-
    conformal interval needs >= 19 calibration rows; timm has 22 rows per GPU): each dataset's held-out
    predictions (``rows[name]``: measured ``target`` and ``pred_<target>``, e.g. every leave-one-model-out
    fold pooled) get the conformal bounds of the *other* datasets' log(measured / predicted), the same
    model's relative error on other devices; nothing of the dataset itself is used. ``cal_rows``
    (default ``rows``): the rows whose log-ratios calibrate, per dataset (e.g. every extrapolation
    split's predictions, to score one split at a time).

    Returns one row per dataset: ``dataset``, ``n`` (rows scored), ``n_cal`` (log-ratios calibrating it),
    ``coverage`` (share of its rows inside) and ``width`` (mean (hi - lo) / prediction)."""
    from carb.model.intervals import conformal_bounds

    def ratios(df: pd.DataFrame) -> np.ndarray:
        m, p = df[target].to_numpy(float), df[f"pred_{target}"].to_numpy(float)
        ok = np.isfinite(m) & np.isfinite(p) & (m > 0) & (p > 0)
        return np.log(m[ok] / p[ok])

    out = []
    pool = rows if cal_rows is None else cal_rows
    for name, df in rows.items():
        others = [ratios(d) for n, d in pool.items() if n != name]
        cal = np.concatenate(others) if others else np.zeros(0)
        lo, hi = conformal_bounds(cal, coverage)
        r = ratios(df)
        out.append({"dataset": name, "n": len(r), "n_cal": len(cal),
                    "coverage": float(np.mean((r >= lo) & (r <= hi))) if len(r) else float("nan"),
                    "width": float(np.exp(hi) - np.exp(lo))})
    return pd.DataFrame(out, columns=["dataset", "n", "n_cal", "coverage", "width"])


def summary_line(table: pd.DataFrame) -> str:
    """The machine-readable last line: ``min_xval_latency_r2=.. min_xval_memory_r2=..
    min_xval_energy_r2=.. worse_than_b1=<count> max_r2_below_b1=<largest R2 shortfall, 0 if none>``
    (NaN where a target is absent); the count is strict, the shortfall says by how much. Rows flagged
    ``fold`` (the single folds of a leave-one-group-out split, scored pooled by
    :func:`pool_group_splits`) count apart: ``worse_than_b1_per_fold=<count>`` is appended when
    there are any, so nothing is hidden."""
    folds = table["fold"].fillna(False).astype(bool).to_numpy() if "fold" in table.columns else np.zeros(len(table), bool)
    main, per_fold = table[~folds], table[folds]

    def mn(t: str) -> float:
        v = main.loc[main["target"] == t, "r2"]
        return float(v.min()) if len(v) else float("nan")

    gap = (main["b1_r2"] - main["r2"]).to_numpy(float) if len(main) else np.zeros(0)
    worse = int((gap > 0).sum())
    line = (f"min_xval_latency_r2={mn('latency_ms'):.4f} min_xval_memory_r2={mn('peak_memory_MB'):.4f} "
            f"min_xval_energy_r2={mn('energy_J'):.4f} worse_than_b1={worse} "
            f"max_r2_below_b1={max(0.0, float(np.nanmax(gap)) if len(gap) else 0.0):.4f}")
    if len(per_fold):
        line += f" worse_than_b1_per_fold={int((per_fold['r2'] < per_fold['b1_r2']).sum())}"
    return line


def error_concentration(rows: pd.DataFrame, target: str, k: int = 5,
                        by: str = "precision") -> dict[str, Any]:
    """Where a split's squared error lies, for one target of its test ``rows`` (measured ``target``
    and ``pred_<target>``): ``r2``, ``worst_share`` (share of the residual sum of squares in the ``k``
    worst rows), ``r2_without_worst`` (R^2 of the other rows: what the rest of the space scores),
    ``r2_by`` (R^2 per value of ``by``, e.g. per precision) and ``worst`` (the ``k`` worst rows).
    A low R^2 with a high ``worst_share`` means a few configurations, not the whole space, are missed."""
    y = rows[target].to_numpy(float)
    p = rows[f"pred_{target}"].to_numpy(float)
    ok = np.isfinite(y) & np.isfinite(p)
    r, y, p = rows[ok], y[ok], p[ok]
    res = (y - p) ** 2
    tot = float(((y - y.mean()) ** 2).sum())
    worst = np.argsort(-res)[:k]
    rest = np.setdiff1d(np.arange(len(y)), worst)
    tot_rest = float(((y[rest] - y[rest].mean()) ** 2).sum()) if len(rest) > 1 else float("nan")
    r2_by = {}
    if by in r.columns:
        for v in sorted(set(r[by].astype(str))):
            m = (r[by].astype(str) == v).to_numpy()
            if m.sum() >= 2:
                r2_by[v] = float(regression_metrics(y[m], p[m])["r2"])
    return {"r2": 1 - float(res.sum()) / tot if tot > 0 else float("nan"),
            "worst_share": float(res[worst].sum() / res.sum()) if res.sum() > 0 else 0.0,
            "r2_without_worst": 1 - float(res[rest].sum()) / tot_rest if tot_rest and tot_rest > 0 else float("nan"),
            "r2_by": r2_by, "worst": r.iloc[worst].assign(**{f"pred_{target}": p[worst]})}


def concentration_metrics(table: pd.DataFrame, predictions: Mapping[str, pd.DataFrame],
                          k: int = 5) -> dict[str, float]:
    """``xval_<split>_<target>_worst<k>_share`` and ``..._r2_without_worst<k>`` per split and target of
    :func:`evaluate_splits` (see :func:`error_concentration`), for the splits whose predictions were kept."""
    out: dict[str, float] = {}
    for r in table.itertuples(index=False):
        rows = predictions.get(r.split)
        if rows is None or f"pred_{r.target}" not in rows.columns or len(rows) <= k + 1:
            continue
        c = error_concentration(rows, r.target, k=k)
        out[f"xval_{r.split}_{r.target}_worst{k}_share"] = c["worst_share"]
        out[f"xval_{r.split}_{r.target}_r2_without_worst{k}"] = c["r2_without_worst"]
    return out


def format_table(table: pd.DataFrame, width: int = 120) -> str:
    """A fixed-width text table of :func:`evaluate_splits` (R^2 and MAPE beside B1), lines of at most
    ``width`` columns: the split's description last, left-aligned, cut to the width."""
    if not len(table):
        return "(no extrapolation split applies to this data)"
    show = table.copy()
    for c in ("r2", "b1_r2"):
        show[c] = show[c].map(lambda v: f"{v:.3f}")
    for c in ("mape", "b1_mape"):
        show[c] = show[c].map(lambda v: f"{v:.1f}%")
    show["fit_s"] = show["fit_s"].map(lambda v: f"{v:.1f}")
    cols = ["split", "target", "n_train", "n_test", "r2", "b1_r2", "mape", "b1_mape"]
    if show["interval_coverage"].notna().any():
        show["coverage"] = show["interval_coverage"].map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")
        cols.append("coverage")
    heads = {"n_train": "train", "n_test": "test", "coverage": "cover"}   # short headers leave the description room
    lines = show[cols].rename(columns=heads).to_string(index=False).splitlines()
    desc = ["description", *map(str, show["description"])]
    return "\n".join(f"{line} {d}"[:width] for line, d in zip(lines, desc))


def sanity_report(model: Any, grid: pd.DataFrame, tol: float = 1e-9) -> dict[str, float]:
    """Physical sanity of a model's screening-mode predictions on a candidate grid (``grid``: knob
    and static-feature columns, e.g. :func:`carb.analysis.screening.featurize` of the 3,072 grid).

    Returns ``sanity_memory_below_params`` (share of rows predicted below their parameter bytes) and
    ``sanity_<target>_batch_violations`` (share of consecutive batch-size steps, other knobs fixed,
    where the prediction decreases by more than ``tol`` relative), plus ``sanity_n``. For a target whose
    physics may fall with batch (``model.batch_nonmonotone_targets()``: CPU latency where PyTorch moves
    1 x 1 convolutions to oneDNN at batch 16) also ``sanity_<target>_batch_violations_prior_falls``: the
    share of steps where the prediction falls and so does the physics prior."""
    from carb.analysis.screening import score
    from carb.design.candidates import arch_knobs

    scored = score(model, grid)
    out: dict[str, float] = {"sanity_n": float(len(scored))}
    free = set(getattr(model, "batch_nonmonotone_targets", list)())
    if "pred_peak_memory_MB" in scored.columns and "param_size_MB" in scored.columns:
        below = scored["pred_peak_memory_MB"].to_numpy(float) < scored["param_size_MB"].to_numpy(float) * (1 - tol)
        out["sanity_memory_below_params"] = float(below.mean()) if len(below) else float("nan")
    keys = arch_knobs(scored)
    ordered = scored.sort_values(keys + ["batch_size"])
    same = (ordered[keys].shift() == ordered[keys]).all(axis=1).to_numpy()
    for col in [c for c in scored.columns if c.startswith("pred_")]:
        v = ordered[col].to_numpy(float)
        prev = np.roll(v, 1)
        steps = same.copy()
        steps[0] = False
        drops = steps & (v < prev * (1 - 1e-6) - tol)
        out[f"sanity_{col[5:]}_batch_violations"] = float(drops.sum() / steps.sum()) if steps.any() else float("nan")
        if col[5:] in free and steps.any():
            pv = model.prior_frame(ordered)[col[5:]].to_numpy(float)
            falls = steps & (pv < np.roll(pv, 1) * (1 - 1e-6))
            out[f"sanity_{col[5:]}_batch_violations_prior_falls"] = float((drops & falls).sum() / steps.sum())
    return out
