"""Leave-one-family-out (LOFO) evaluation of zoo latency: what holds for a family never measured.

On one device's zoo rows (a timm benchmark file's main set, :func:`carb.data.importers.timm_zoo.load_zoo_bench`),
each family with at least ``min_models`` distinct models is held out in turn: every model (B1
:class:`~carb.model.zoo_latency.FlopsLogLog`, :class:`~carb.model.zoo_latency.HiddenJoulesRegression`,
CARB's :class:`~carb.model.zoo_latency.ZooLatencyModel`) is fitted on the rows of every *other* family
(the families under ``min_models`` included) and predicts the held-out one. Only the kept families are
scored.

Intervals for a held-out family (:func:`family_intervals`): cross-conformal over families. The
calibration set of family f is the LOFO log ratios ``log(measured / predicted)`` of the *other* scored
families (each predicted by a model that never saw it), weighted so that each family counts once;
its 5 % and 95 % weighted quantiles widen f's predictions into a 90 % interval. f's own rows are never in
its calibration (jackknife+-style: the models that produced the other families' ratios did see f).

CARB's bound: :class:`~carb.model.zoo_latency.ZooLatencyModel` keeps its corrected prediction within a
margin of the span between its base and Hidden Joules' regression (:func:`carb.model.zoo_latency.bounded`).
With ``nested_margin`` among CARB's settings (:func:`nested_margin`, :func:`bound_settings`: read from the
settings, ``conf/zoo_latency``'s keys, not from a model; else, by default, the model's own margin) the
margin of held-out family f is chosen from :data:`MARGINS` on the *other* scored families' LOFO predictions
(the margin whose mean family MAPE over them is lowest), never on f's rows, as the intervals are (jackknife
over families: the models that predicted the other families did see f).

Per family (:func:`family_table`): MAPE (mean |pred / measured - 1|), Spearman of predicted vs measured
``latency_ms`` within the family, share of rows within 20 %, for CARB and both baselines; the interval's
coverage and hi/lo ratio. :func:`device_summary` gives the device's line.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

import sys

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.model.zoo_latency import FlopsLogLog, HiddenJoulesRegression, ZooLatencyModel

#: The models compared, by column prefix: B1, Hidden Joules' regression, CARB.
MODELS: dict[str, Callable[[], object]] = {"b1": FlopsLogLog, "hj": HiddenJoulesRegression,
                                           "carb": ZooLatencyModel}
#: The bounds :func:`nested_margin` chooses from (log units; 0: the median of base, corrected and HJ).
MARGINS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, np.inf)
#: The features every row must have to be evaluated.
NEEDED: tuple[str, ...] = ("latency_ms", "batch_size", "input_size", "gmacs_per_image", "params",
                           "macts_M_per_image")


def usable_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s rows with every :data:`NEEDED` value finite and positive (others cannot be scored)."""
    missing = [c for c in NEEDED + ("family", "model") if c not in frame.columns]
    if missing:
        raise DatasetError(f"zoo evaluation: missing column(s) {missing}")
    vals = frame[list(NEEDED)].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    ok = np.isfinite(vals).all(axis=1) & (vals > 0).all(axis=1)
    return frame[ok].reset_index(drop=True)


def scored_families(frame: pd.DataFrame, min_models: int = 5) -> list[str]:
    """Families with at least ``min_models`` distinct models, largest first (ties by name)."""
    n = frame.groupby("family")["model"].nunique()
    n = n[n >= min_models]
    return sorted(n.index, key=lambda f: (-n[f], f))


def lofo_splits(frame: pd.DataFrame, families: list[str]) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """``(family, train_mask, test_mask)`` per held-out family: test = the family's rows, train = every
    row of another family (boolean masks over ``frame``'s rows)."""
    fam = frame["family"].astype(str).to_numpy()
    for f in families:
        test = fam == f
        yield f, ~test, test


def lofo_predictions(frame: pd.DataFrame, families: list[str],
                     models: Mapping[str, Callable[[], object]] = MODELS) -> pd.DataFrame:
    """``frame`` (rows of the scored families only) with ``pred_<name>`` (latency_ms per batch) from the
    LOFO fit of each model in ``models`` (name -> factory of an object with ``fit(frame)``, ``predict``)."""
    return grouped_predictions(frame, [[f] for f in families], models)


def grouped_predictions(frame: pd.DataFrame, groups: list[list[str]],
                        models: Mapping[str, Callable[[], object]] = MODELS, progress: bool = False) -> pd.DataFrame:
    """:func:`lofo_predictions` with the families of each group held out together: ``frame``'s rows of the
    grouped families with ``pred_<name>`` (latency_ms per batch), every model fitted once per group on the rows
    of the other families (unscored ones included). A bounded model's parts are kept (``<name>_log_<part>``) for
    :func:`nested_margin`. ``progress``: each group's MAPE per model to stderr as it is done."""
    scored = [f for g in groups for f in g]
    fam = frame["family"].astype(str).to_numpy()
    out = frame[np.isin(fam, scored)].reset_index(drop=True)
    at_fam = out["family"].astype(str).to_numpy()
    preds = {k: np.full(len(out), np.nan) for k in models}
    parts: dict[str, pd.DataFrame] = {}
    for i, g in enumerate(groups):
        test, at = np.isin(fam, g), np.isin(at_fam, g)
        test_rows = frame[test]
        for k, make in models.items():
            model = make().fit(frame[~test])
            preds[k][at] = model.predict(test_rows)
            if hasattr(model, "components"):   # the bound's parts, for nested_margin
                c = model.components(test_rows).to_numpy(float)
                parts.setdefault(k, pd.DataFrame(np.nan, index=out.index, columns=_PARTS)).loc[at] = c
        if progress:
            y = out.loc[at, "latency_ms"].to_numpy(float)
            mape = ", ".join(f"{k} {100 * np.mean(np.abs(preds[k][at] / y - 1)):.1f}" for k in models)
            print(f"  fold {i + 1}/{len(groups)} ({len(g)} families, {int(at.sum())} rows): MAPE % {mape}",
                  file=sys.stderr, flush=True)
    for k, v in preds.items():
        out[f"pred_{k}"] = v
    for k, c in parts.items():
        for col in _PARTS:
            out[f"{k}_log_{col}"] = c[col].to_numpy(float)
    return out


#: The parts of a bounded prediction (:meth:`carb.model.zoo_latency.ZooLatencyModel.components`).
_PARTS = ("base", "corrected", "hj")


def nested_margin(pred: pd.DataFrame, model: str = "carb", margins: tuple[float, ...] = MARGINS,
                  outside: str = "clip") -> tuple[pd.DataFrame, dict[str, float]]:
    """``pred`` (LOFO predictions with ``<model>_log_base`` / ``_corrected`` / ``_hj``: log time per image)
    with ``pred_<model>`` (latency_ms per batch) re-bounded per held-out family f by the margin of
    ``margins`` whose mean family MAPE over the *other* families is lowest (ties: the first; ``outside``:
    :func:`carb.model.zoo_latency.bounded`'s), and a ``<model>_margin`` column; returns it and
    {family: margin}. ``pred`` unchanged without the parts."""
    cols = [f"{model}_log_{c}" for c in _PARTS]
    if not set(cols) <= set(pred.columns):
        return pred, {}
    from carb.model.zoo_latency import bounded

    base, corr, hj = (pred[c].to_numpy(float) for c in cols)
    y = pred["latency_ms"].to_numpy(float)
    b = pred["batch_size"].to_numpy(float)
    fam = pred["family"].astype(str).to_numpy()
    ms = {m: np.exp(bounded(base, corr, hj, m, outside)) * b for m in margins}
    fam_mape = pd.DataFrame({m: pd.Series(np.abs(p / y - 1)).groupby(fam).mean() for m, p in ms.items()})
    out, chosen = pred.copy(), {}
    margin_col = np.full(len(pred), np.nan)
    for f in fam_mape.index:
        score = fam_mape.drop(index=f).mean()
        m = margins[int(np.argmin(score.to_numpy()))]
        at = fam == f
        out.loc[at, f"pred_{model}"] = ms[m][at]
        margin_col[at], chosen[f] = m, float(m)
    out[f"{model}_margin"] = margin_col
    return out, chosen


def weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    """The ``q`` quantile (0-1) of ``x`` (n,) with non-negative weights ``w`` (n,; any scale), by the weighted
    empirical CDF: the smallest ``x`` whose cumulative weight share reaches ``q`` (a value of ``x``, in its
    unit; the largest for ``q`` past the last share). Used by the family intervals here and by
    :mod:`carb.analysis.zoo_transfer_eval`'s K=0 band."""
    order = np.argsort(x)
    cdf = np.cumsum(w[order]) / w.sum()
    return float(x[order][min(np.searchsorted(cdf, q), len(x) - 1)])


def family_intervals(pred: pd.DataFrame, column: str = "pred_carb", coverage: float = 0.9,
                     target: str = "latency_ms") -> pd.DataFrame:
    """``pred`` (LOFO predictions) with ``lo_ms`` / ``hi_ms`` (in ``target``'s unit: ms, or MB for
    ``peak_memory_MB``): the cross-conformal interval of each held-out family (module docstring),
    calibrated on the other families' log ratios only."""
    if not 0 < coverage < 1:
        raise DatasetError(f"zoo intervals: coverage={coverage} must be in (0, 1)")
    ratio = np.log(pred[target].to_numpy(float) / pred[column].to_numpy(float))
    fam = pred["family"].astype(str).to_numpy()
    size = pd.Series(fam).map(pd.Series(fam).value_counts()).to_numpy(float)
    lo, hi = np.full(len(pred), np.nan), np.full(len(pred), np.nan)
    tail = (1 - coverage) / 2
    for f in np.unique(fam):
        cal = fam != f
        qlo = weighted_quantile(ratio[cal], 1 / size[cal], tail)
        qhi = weighted_quantile(ratio[cal], 1 / size[cal], 1 - tail)
        at = fam == f
        lo[at] = pred[column].to_numpy(float)[at] * np.exp(qlo)
        hi[at] = pred[column].to_numpy(float)[at] * np.exp(qhi)
    out = pred.copy()
    out["lo_ms"], out["hi_ms"] = lo, hi
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (-1 to 1) of two (n,) arrays: Pearson's correlation of their ranks (ties share the mean
    rank). NaN for fewer than 3 rows or a constant one. Used by :func:`family_table` and
    :mod:`carb.analysis.zoo_transfer_eval`."""
    if len(a) < 3:
        return float("nan")
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def family_table(pred: pd.DataFrame, models: tuple[str, ...] = tuple(MODELS),
                 target: str = "latency_ms") -> pd.DataFrame:
    """One row per held-out family of ``target``: ``models``, ``rows``; per model ``<m>_mape_pct``, ``<m>_rho``,
    ``<m>_within20_pct`` (rows within 20 %); with ``lo_ms`` / ``hi_ms``: ``coverage`` (share of rows inside)
    and ``hi_lo`` (the interval's hi / lo ratio, median over rows)."""
    rows = []
    for f, g in pred.groupby("family", sort=False):
        y = g[target].to_numpy(float)
        row = {"family": f, "models": g["model"].nunique(), "rows": len(g)}
        for m in models:
            p = g[f"pred_{m}"].to_numpy(float)
            ape = np.abs(p / y - 1)
            row |= {f"{m}_mape_pct": 100 * ape.mean(), f"{m}_rho": spearman(p, y),
                    f"{m}_within20_pct": 100 * (ape <= 0.2).mean()}
        if "lo_ms" in g:
            row["coverage"] = float(((y >= g["lo_ms"]) & (y <= g["hi_ms"])).mean())
            row["hi_lo"] = float(np.median(g["hi_ms"] / g["lo_ms"]))
        rows.append(row)
    return pd.DataFrame(rows)


def device_summary(table: pd.DataFrame, pred: pd.DataFrame) -> dict[str, float]:
    """One device's figures from its :func:`family_table` and LOFO predictions: ``families``, ``models``,
    ``within20`` (families whose CARB MAPE <= 20 %), ``mape_max`` / ``worst`` (family), ``rho_min``,
    pooled MAPE per model (``<m>_pooled_pct``), ``b1_wins`` / ``hj_wins`` (families where CARB's MAPE is
    below the baseline's), ``coverage`` (mean over families: each family once), ``coverage_rows``
    (pooled over rows), ``hi_lo`` (median over rows)."""
    y = pred["latency_ms"].to_numpy(float)
    out: dict = {"families": len(table), "models": int(pred["model"].nunique()),
                 "within20": int((table["carb_mape_pct"] <= 20).sum()),
                 "mape_max": float(table["carb_mape_pct"].max()),
                 "worst": str(table.loc[table["carb_mape_pct"].idxmax(), "family"]),
                 "rho_min": float(table["carb_rho"].min()),
                 "b1_wins": int((table["carb_mape_pct"] < table["b1_mape_pct"]).sum()),
                 "hj_wins": int((table["carb_mape_pct"] < table["hj_mape_pct"]).sum())}
    for m in ("b1", "hj", "carb"):
        out[f"{m}_pooled_pct"] = float(100 * np.mean(np.abs(pred[f"pred_{m}"].to_numpy(float) / y - 1)))
        out[f"{m}_within20_fams"] = int((table[f"{m}_mape_pct"] <= 20).sum())
        out[f"{m}_mape_max"] = float(table[f"{m}_mape_pct"].max())
    if "coverage" in table:
        inside = (y >= pred["lo_ms"].to_numpy(float)) & (y <= pred["hi_ms"].to_numpy(float))
        out |= {"coverage": float(table["coverage"].mean()), "coverage_rows": float(inside.mean()),
                "hi_lo": float(np.median(pred["hi_ms"] / pred["lo_ms"]))}
    return out


def bound_settings(settings: Mapping[str, object] | None = None) -> tuple[bool, str]:
    """``(nested_margin, outside)`` of CARB's bound for the evaluation, read from ``settings`` (the keyword
    settings of :class:`~carb.model.zoo_latency.ZooLatencyModel`, ``conf/zoo_latency/default.yaml``'s keys),
    each missing key taken from the class's defaults (its signature): no model is built to read them."""
    import inspect

    defaults = inspect.signature(ZooLatencyModel).parameters
    given = dict(settings or {})
    nested = given.get("nested_margin", defaults["nested_margin"].default)
    outside = given.get("outside", defaults["outside"].default)
    return bool(nested), str(outside)


def evaluate_device(frame: pd.DataFrame, min_models: int = 5, coverage: float = 0.9,
                    models: Mapping[str, Callable[[], object]] = MODELS,
                    settings: Mapping[str, object] | None = None) -> tuple[pd.DataFrame, dict]:
    """LOFO of one device's zoo rows: (per-family table, summary). ``settings``: CARB's keyword settings
    (``conf/zoo_latency``'s keys, as ``scripts/bench/zoo.py`` reads them); with them, ``models``' ``carb`` is
    :class:`~carb.model.zoo_latency.ZooLatencyModel` built from them. CARB's margin is :func:`nested_margin`'s
    (with its ``outside``) where ``settings``' ``nested_margin`` is set, else the model's own
    (:func:`bound_settings`: a key ``settings`` lacks is the class's default). Raises :class:`DatasetError`
    when fewer than 2 families have ``min_models`` models."""
    if settings is not None and "carb" in models:
        own = dict(settings)
        models = {**models, "carb": lambda: ZooLatencyModel(**own)}
    rows = usable_rows(frame)
    fams = scored_families(rows, min_models)
    if len(fams) < 2:
        raise DatasetError(f"zoo evaluation: {len(fams)} families with >= {min_models} models; need 2")
    pred, chosen = lofo_predictions(rows, fams, models), {}
    nested, outside = bound_settings(settings)
    if "carb" in models and nested:
        pred, chosen = nested_margin(pred, outside=outside)
    pred = family_intervals(pred, coverage=coverage)
    table = family_table(pred, tuple(models))
    if chosen:
        table["carb_margin"] = table["family"].map(chosen)
    return table, device_summary(table, pred)
