"""Leave-one-GPU-out zoo latency: "which backbone is fastest on my GPU?" for a GPU CARB never measured.

On timm's GPU files (:func:`carb.data.importers.timm_zoo.load_zoo_bench`, main set, amp fp16), each GPU with a
spec record (``carb/data/gpu_specs.csv``) is the target T in turn; the other GPUs are the sources. A network is
``(model, input_size)``; times are ms per image (per batch in the tables' MAPE: the same ratio).

Methods (all on the same split; :mod:`carb.model.zoo_transfer` for CARB's):

- ``carb`` K=0: every source's time of the network (measured; where a source did not time it, that source's
  zoo latency model, fitted on its own rows, predicts it) moved to T by the spec sheet (device weights fitted on
  the sources' pairs; with ``correction``, plus the per-network ratio correction), averaged over the sources
  (with ``same_stack``: those timed on T's PyTorch version where there is one, :func:`stack_sources`);
- ``nearest`` K=0 (baseline): the measured time on the source nearest T in spec space (next nearest where it
  lacks the network), times the same device-level spec ratio, no per-network term;
- ``flops`` K=0 (baseline, FLOPs only): log time per image linear in log GMACs, fitted on the sources' rows
  moved to T by the device-level spec ratio;
- K measured networks of T (``k``, :func:`carb.model.zoo_transfer.space_filling` over the zoo's features, never
  by the error): ``carb`` and ``nearest`` recalibrated on them (:func:`carb.model.zoo_transfer.calibrate`),
  ``flops`` refitted on the K rows alone.

Scored on T's rows outside the K picks (K=0 and K=K on the same rows): pooled MAPE, per family (families with
>= ``min_models`` networks on T) MAPE and the share of families within 20 %, Spearman over networks of the
predicted vs measured time per image (the ranking a user asks for).

Combined split (:func:`evaluate_combined`: a new GPU *and* a new family): per T and held-out family f, the
sources' rows of f are removed too: their times of f come from each source's zoo latency model fitted without
f (leave-one-family-out), the device weights and correction are fitted without f, the K picks avoid f; only
``carb`` and ``flops`` (no source measured f: ``nearest`` has nothing to scale).

The K=0 band of a new GPU (:func:`k0_band_coverage`): T's band from the other GPUs' K=0 errors, each predicted
without T (:func:`device_band`, device-level; :func:`level_band`, a plain quantile, for comparison).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.zoo_eval import scored_families, spearman, usable_rows, weighted_quantile
from carb.model.zoo_latency import log_features, per_image_log_ms
from carb.model.zoo_transfer import (KEY, PICK_FEATURES, ZooDeviceTransfer, calibrate, device_vector,
                                     network_features, space_filling, spec_shift)

#: The methods scored, K=0 and K=K each.
METHODS: tuple[str, ...] = ("carb", "nearest", "flops")


def gpu_rows(zoo: pd.DataFrame, records: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """``zoo``'s GPU rows of the devices in ``records`` (device name -> spec record), usable and one row per
    (device, network) (the first)."""
    rows = zoo[zoo["device_name"].astype(str).isin(list(records))]
    rows = usable_rows(rows)
    return rows.drop_duplicates(["device_name", *KEY]).reset_index(drop=True)


def log_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Measured log ms per image: index (model, input_size), one column per device (NaN where untimed)."""
    t = rows.assign(y=per_image_log_ms(rows))
    return t.pivot_table(index=list(KEY), columns="device_name", values="y", aggfunc="first")


def network_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per network of ``rows`` (the first device's), indexed by (model, input_size): its features."""
    return rows.drop_duplicates(list(KEY)).set_index(list(KEY), drop=False).rename_axis([f"_{c}" for c in KEY])


def _keys(frame: pd.DataFrame) -> pd.MultiIndex:
    """``frame``'s (model, input_size) pairs as an index, in its row order."""
    return pd.MultiIndex.from_frame(frame[list(KEY)])


def _fit_flops(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(slope, intercept) of y on x (finite rows); fewer than 2: slope 0, intercept the mean."""
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        return 0.0, float(np.nanmean(y)) if ok.any() else 0.0
    b, a = np.polyfit(x[ok], y[ok], 1)
    return float(b), float(a)


def source_predictions(rows: pd.DataFrame, target: str, make: Callable[[], Any]) -> pd.DataFrame:
    """Each source's own zoo model's log ms per image of ``target``'s networks (rows of T x sources): fitted
    on the source's rows, predicting T's rows (their features). (The combined split's family-out fits are
    :func:`family_lofo_source`'s.)"""
    t_rows = rows[rows["device_name"] == target]
    out = {}
    for s, g in rows[rows["device_name"] != target].groupby("device_name", sort=True):
        model = make().fit(g)
        out[s] = np.log(model.predict(t_rows) / t_rows["batch_size"].to_numpy(float))
    return pd.DataFrame(out, index=_keys(t_rows))


def _nearest_order(vectors: Mapping[str, np.ndarray], sources: Sequence[str], target: str) -> list[str]:
    """``sources`` nearest first to ``target`` in spec space (Euclidean on :func:`device_vector`)."""
    return sorted(sources, key=lambda s: float(np.linalg.norm(vectors[s] - vectors[target])))


def predict_target(table: pd.DataFrame, t_rows: pd.DataFrame, fill: pd.DataFrame, target: str,
                   vectors: Mapping[str, np.ndarray], k: int, settings: Mapping[str, Any],
                   nets: pd.DataFrame, hold: np.ndarray | None = None,
                   carb_sources: Sequence[str] | None = None) -> pd.DataFrame:
    """T's rows (``t_rows``, one per network) with ``y`` (measured log ms per image), ``picked`` (the K
    networks) and ``pred_<method>_k0`` / ``pred_<method>_k<k>`` (log ms per image).

    ``table``: the sources' measured log times (networks x sources) the transfer is fitted on; ``fill``: the
    log times moved for T's networks (rows of ``t_rows`` x sources; measured where the source timed the
    network, else its own model's prediction); ``hold`` (bool per row of ``t_rows``): rows the K picks avoid
    (the held-out family of the combined split); ``nets``: one row per network (:func:`network_rows`), whose
    features the correction and the FLOPs baseline read for the sources' networks; ``carb_sources``: the sources
    CARB's K=0 average reads (default all; the baselines always read all)."""
    sources = list(table.columns)
    feats_all = network_features(t_rows)
    src_keys = table.index
    src_nets = nets.reindex(src_keys)
    feats_src = network_features(src_nets)
    model = ZooDeviceTransfer(alphas=settings["alphas"], correction=settings["correction"],
                              source_power=float("inf") if settings.get("source_power") is None
                              else float(settings["source_power"]))
    model.fit(table, feats_src, vectors)
    out = t_rows[[*KEY, "family", "batch_size", "latency_ms"]].reset_index(drop=True)
    out["y"] = per_image_log_ms(t_rows)
    feats_all.index = out.index
    fill = fill.reset_index(drop=True)
    use = list(carb_sources) if carb_sources else list(fill.columns)
    out["pred_carb_k0"] = model.predict_log(fill[use], feats_all, target)
    # nearest source measured, device-level spec ratio
    near = np.full(len(out), np.nan)
    for s in reversed(_nearest_order(vectors, sources, target)):
        m = fill[s].to_numpy(float) + spec_shift(model.weights_, vectors[s], vectors[target])
        measured = t_rows.set_index(list(KEY)).index.isin(table.index[table[s].notna()])
        near = np.where(measured & np.isfinite(m), m, near)
    # FLOPs only, on the sources' rows moved
    xs, ys = [], []
    lg = log_features(src_nets, census=False, trace=False)
    for s in sources:
        ys.append(table[s].to_numpy(float) + spec_shift(model.weights_, vectors[s], vectors[target]))
        xs.append(lg["log_gmacs"].to_numpy(float))
    b, a = _fit_flops(np.concatenate(xs), np.concatenate(ys))
    x_t = log_features(t_rows, census=False, trace=False)["log_gmacs"].to_numpy(float)
    out["pred_flops_k0"] = a + b * x_t
    out["pred_nearest_k0"] = np.where(np.isfinite(near), near, out["pred_flops_k0"])
    # K measured networks of T
    free = np.ones(len(out), bool) if hold is None else ~np.asarray(hold, bool)
    pick_feats = log_features(t_rows, census=False, trace=False)[list(PICK_FEATURES)].reset_index(drop=True)
    pos = np.flatnonzero(free)[space_filling(pick_feats[free], k)] if k > 0 else np.array([], int)
    out["picked"] = False
    out.loc[pos, "picked"] = True
    y = out["y"].to_numpy(float)
    for m in ("carb", "nearest"):
        p0 = out[f"pred_{m}_k0"].to_numpy(float)
        ca, cb = calibrate(p0[pos], y[pos], settings["slope_gain"]) if k > 0 else (0.0, 1.0)
        out[f"pred_{m}_k{k}"] = ca + cb * p0
    if k >= 2:
        fb, fa = _fit_flops(x_t[pos], y[pos])
        out[f"pred_flops_k{k}"] = fa + fb * x_t
    else:
        out[f"pred_flops_k{k}"] = out["pred_flops_k0"]
    out.attrs |= {"weights": model.weights_, "alpha": model.alpha_, "alpha_scores": model.alpha_scores_}
    return out


def score(pred: pd.DataFrame, column: str, min_models: int = 5) -> dict[str, Any]:
    """Figures of one prediction column (log ms per image) on ``pred``'s unpicked rows: ``mape_pct`` (pooled),
    ``rho`` (Spearman over networks), per family (>= ``min_models`` models): ``families``, ``within20``,
    ``mape_max`` / ``worst``, ``rho_fam_min`` (the lowest Spearman within a family), ``fam_mape`` (family ->
    MAPE %)."""
    g = pred[~pred["picked"]]
    ape = np.abs(np.exp(g[column].to_numpy(float) - g["y"].to_numpy(float)) - 1)
    fams = [f for f in scored_families(g, min_models)]
    fam = {f: float(100 * ape[(g["family"] == f).to_numpy()].mean()) for f in fams}
    rho_f = [spearman(h[column].to_numpy(float), h["y"].to_numpy(float)) for f, h in g.groupby("family")
             if f in fam]
    worst = max(fam, key=fam.get) if fam else ""
    return {"mape_pct": float(100 * np.nanmean(ape)), "rho": spearman(g[column].to_numpy(float),
                                                                       g["y"].to_numpy(float)),
            "rho_fam_min": float(np.nanmin(rho_f)) if np.isfinite(rho_f).any() else float("nan"),
            "families": len(fam), "within20": int(sum(v <= 20 for v in fam.values())),
            "mape_max": float(fam[worst]) if fam else float("nan"), "worst": worst, "fam_mape": fam}


def device_records(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Spec records of the devices in ``names`` that have one (device name -> record)."""
    from carb.data.gpu_specs import find_spec, gpu_spec

    return {n: gpu_spec(find_spec(n)) for n in names if find_spec(n) is not None}


def stack_sources(rows: pd.DataFrame, target: str, sources: Sequence[str], same_stack: bool) -> list[str]:
    """The sources CARB averages for ``target``: with ``same_stack``, those whose files were timed on the target's
    PyTorch version (``torch_version``) when there is one, else all ``sources``."""
    if not same_stack or "torch_version" not in rows.columns:
        return list(sources)
    ver = rows.groupby("device_name")["torch_version"].first().astype(str)
    same = [s for s in sources if ver.get(s) == ver.get(target)]
    return same or list(sources)


def evaluate(rows: pd.DataFrame, records: Mapping[str, Mapping[str, Any]], make: Callable[[], Any],
             settings: Mapping[str, Any]) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Leave-one-GPU-out over ``rows`` (:func:`gpu_rows`): per target (every device of ``records``; the sources
    are always every other device of ``rows``) a table row (K=0 and K=``settings['k']`` figures per method, the
    fitted weights and alpha) and its prediction frame. ``make``: a factory of the sources' own zoo latency
    model (fills networks a source did not time)."""
    k, prec = int(settings["k"]), str(settings["precision"])
    vectors = {d: device_vector(r, prec) for d, r in records.items()}
    table = log_table(rows)
    nets = network_rows(rows)
    lines, preds = [], {}
    for t in sorted(records):
        t_rows = rows[rows["device_name"] == t].reset_index(drop=True)
        src = table.drop(columns=[t]).dropna(how="all")
        own = source_predictions(rows, t, make)
        meas = table.reindex(_keys(t_rows))[list(src.columns)]
        fill = meas.where(meas.notna(), own[list(src.columns)].to_numpy())
        use = stack_sources(rows, t, list(src.columns), bool(settings.get("same_stack", False)))
        pred = predict_target(src, t_rows, fill, t, vectors, k, settings, nets, carb_sources=use)
        preds[t] = pred
        lines.append(target_line(t, pred, k, int(settings["min_models"])))
    return pd.DataFrame(lines), preds


def target_line(target: str, pred: pd.DataFrame, k: int, min_models: int) -> dict[str, Any]:
    """One target's row of the per-target table (K=0 and K=k per method)."""
    line: dict[str, Any] = {"target": target, "networks": int((~pred["picked"]).sum())}
    line |= method_scores(pred, METHODS, k, min_models)
    w = pred.attrs.get("weights", {})
    line |= {f"w_{a}": float(v) for a, v in w.items()} | {"alpha": pred.attrs.get("alpha", float("nan"))}
    return line


def method_scores(pred: pd.DataFrame, methods: Sequence[str], k: int, min_models: int) -> dict[str, Any]:
    """The figures of :func:`score` of each of ``methods`` at K=0 and K=``k`` (``<method>_k<K>_mape_pct``,
    ``_rho``, ``_within20``, ``_rho_fam_min``, ``_mape_max``, ``_worst``) and ``families`` (the scored ones)."""
    line: dict[str, Any] = {}
    for m in methods:
        for kk in (0, k):
            s = score(pred, f"pred_{m}_k{kk}", min_models)
            tag = f"{m}_k{kk}"
            line |= {f"{tag}_mape_pct": s["mape_pct"], f"{tag}_rho": s["rho"], f"{tag}_within20": s["within20"],
                     f"{tag}_rho_fam_min": s["rho_fam_min"], f"{tag}_mape_max": s["mape_max"],
                     f"{tag}_worst": s["worst"]}
            line["families"] = s["families"]
    return line


def family_lofo_source(rows: pd.DataFrame, families: Sequence[str], make: Callable[[], Any]
                       ) -> dict[tuple[str, str], pd.Series]:
    """Per (source, family): the source's zoo model fitted on its rows without the family, predicting every
    other device's rows of that family: a Series of log ms per image indexed like ``rows`` (those rows)."""
    out: dict[tuple[str, str], pd.Series] = {}
    for s, g in rows.groupby("device_name", sort=True):
        for f in families:
            test = rows[(rows["family"] == f).to_numpy() & (rows["device_name"] != s).to_numpy()]
            if test.empty or (g["family"] == f).all():
                continue
            model = make().fit(g[g["family"] != f])
            out[(str(s), f)] = pd.Series(np.log(model.predict(test) / test["batch_size"].to_numpy(float)),
                                         index=test.index)
    return out


def evaluate_combined(rows: pd.DataFrame, records: Mapping[str, Mapping[str, Any]], make: Callable[[], Any],
                      settings: Mapping[str, Any], progress: Callable[[str], None] | None = None
                      ) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Leave-one-GPU-and-family-out (module docstring): per target its line (``carb`` and ``flops``, K=0 and
    K=k, scored on the held-out families' rows) and the predictions of those rows."""
    k, prec, mm = int(settings["k"]), str(settings["precision"]), int(settings["min_models"])
    vectors = {d: device_vector(r, prec) for d, r in records.items()}
    table = log_table(rows)
    nets = network_rows(rows)
    fam_of = rows.drop_duplicates(list(KEY)).set_index(list(KEY))["family"]
    fams = sorted(set().union(*[scored_families(rows[rows["device_name"] == t], mm) for t in records]))
    lofo = family_lofo_source(rows, fams, make)
    lines, preds = [], {}
    for t in sorted(records):
        t_rows = rows[rows["device_name"] == t].reset_index(drop=True)
        parts = []
        for f in scored_families(t_rows, mm):
            if progress:
                progress(f"{t}: {f}")
            keep = fam_of.reindex(table.index).to_numpy() != f
            src = table[keep].drop(columns=[t]).dropna(how="all")
            hold = (t_rows["family"] == f).to_numpy()
            meas = table.reindex(_keys(t_rows))[list(src.columns)].reset_index(drop=True)
            at = np.flatnonzero(hold)
            orig = rows[(rows["device_name"] == t) & (rows["family"] == f)]   # T's rows of f, in t_rows' order
            for s in src.columns:
                moved = lofo.get((s, f))
                vals = moved.reindex(orig.index).to_numpy(float) if moved is not None else np.nan
                meas.loc[at, s] = vals
            # networks outside f that no source timed cannot be K picks here (nothing to move); not refitted
            unmoved = ~hold & meas.isna().all(axis=1).to_numpy()
            use = stack_sources(rows, t, list(src.columns), bool(settings.get("same_stack", False)))
            pred = predict_target(src, t_rows, meas, t, vectors, k, settings, nets, hold=hold | unmoved,
                                  carb_sources=use)
            part = pred[hold].copy()
            part["picked"] = False
            parts.append(part)
        pred_t = pd.concat(parts, ignore_index=True)
        preds[t] = pred_t
        lines.append({"target": str(t), "networks": len(pred_t)} | method_scores(pred_t, ("carb", "flops"), k, mm))
    return pd.DataFrame(lines), preds


def summary_line(table: pd.DataFrame, k: int, combined: pd.DataFrame | None = None,
                 band: pd.DataFrame | None = None) -> str:
    """``zoo_device: gpus=N k0_mape_max=X k0_rho_min=X k<k>_mape_max=X k<k>_rho_min=X baseline_mape_max=X ...``
    (max / min over targets; baseline: the nearest source scaled by the spec sheet, K=0; the combined split's
    worst CARB MAPE at K=0 and K=k when given; the K=0 band's coverage min / max and widest hi/lo when given)."""
    def mx(c: str) -> float:
        return float(table[c].max())

    def mn(c: str) -> float:
        return float(table[c].min())

    line = (f"zoo_device: gpus={len(table)} k0_mape_max={mx('carb_k0_mape_pct'):.1f} "
            f"k0_rho_min={mn('carb_k0_rho'):.3f} k{k}_mape_max={mx(f'carb_k{k}_mape_pct'):.1f} "
            f"k{k}_rho_min={mn(f'carb_k{k}_rho'):.3f} baseline_mape_max={mx('nearest_k0_mape_pct'):.1f} "
            f"flops_mape_max={mx('flops_k0_mape_pct'):.1f} "
            f"k0_within20={int(table['carb_k0_within20'].sum())}/{int(table['families'].sum())}")
    if combined is not None and len(combined):
        line += (f" lgfo_k0_mape_max={float(combined['carb_k0_mape_pct'].max()):.1f}"
                 f" lgfo_k{k}_mape_max={float(combined[f'carb_k{k}_mape_pct'].max()):.1f}"
                 f" lgfo_flops_mape_max={float(combined['flops_k0_mape_pct'].max()):.1f}")
    if band is not None and len(band):
        line += (f" k0_coverage_min={float(band['coverage'].min()):.3f}"
                 f" k0_coverage_max={float(band['coverage'].max()):.3f} k0_hi_lo_max={float(band['hi_lo'].max()):.2f}")
    return line


def level_band(errors: Mapping[str, np.ndarray], coverage: float = 0.9) -> float:
    """Half-width (log) of the plain quantile band: the ``coverage`` quantile of |log error| over the other GPUs'
    rows, each device weighted equally (no device-level term; for comparison with :func:`device_band`)."""
    errs = [np.abs(np.asarray(e, float)[np.isfinite(e)]) for e in errors.values()]
    errs = [e for e in errs if len(e)]
    if not errs:
        return float("nan")
    x, w = np.concatenate(errs), np.concatenate([np.full(len(e), 1 / len(e)) for e in errs])
    return weighted_quantile(x, w, coverage)


def device_band(errors: Mapping[str, np.ndarray], coverage: float = 0.9) -> tuple[float, int]:
    """Half-width (log) of a K=0 band for a new GPU from other GPUs' K=0 log errors (``errors``: device ->
    ``log(measured / predicted)`` per row, each device predicted without it): each device is one draw of a
    bias ``b_j`` (its median), ``h_b = t(q; df=D) * rms(b)`` (a new device's bias, centred on none; D devices),
    plus the rows' ``coverage`` quantile of |residual about b_j| (devices weighted equally), in quadrature.
    Returns ``(h, D)``; no device: (nan, 0)."""
    from scipy.stats import t as student

    errs = {d: np.asarray(e, float)[np.isfinite(e)] for d, e in errors.items()}
    errs = {d: e for d, e in errs.items() if len(e)}
    if not errs:
        return float("nan"), 0
    q = 1 - (1 - coverage) / 2
    b = np.array([np.median(e) for e in errs.values()])
    h_b = float(student.ppf(q, df=len(b)) * np.sqrt(np.mean(b ** 2)))
    resid = np.concatenate([np.abs(e - np.median(e)) for e in errs.values()])
    w = np.concatenate([np.full(len(e), 1 / len(e)) for e in errs.values()])
    h_r = weighted_quantile(resid, w, coverage)
    return float(np.hypot(h_b, h_r)), len(b)


def k0_band_coverage(rows: pd.DataFrame, records: Mapping[str, Mapping[str, Any]], make: Callable[[], Any],
                     settings: Mapping[str, Any], preds: Mapping[str, pd.DataFrame], coverage: float = 0.9
                     ) -> pd.DataFrame:
    """Leave-one-device-out K=0 bands (:func:`device_band`): for target T, every other GPU j is predicted at K=0
    from the GPUs that are neither T nor j, and those errors make T's band, applied to T's K=0 prediction
    (``preds[T]``, :func:`evaluate`'s). Per target: ``band_devices``, ``half_width`` (log), ``hi_lo``
    (exp(2 h)), ``coverage`` (share of T's unpicked rows inside); the same of :func:`level_band`
    (``hi_lo_level``, ``coverage_level``); ``inner_mape_pct`` (the other GPUs' K=0 MAPE from two sources, mean
    over them) and ``bias`` (T's median log error), for reading."""
    out = []
    for t in sorted(preds):
        others = rows[rows["device_name"] != t]
        recs = {d: r for d, r in records.items() if d != t}
        errs = {}
        if len(recs) >= 3:
            _, inner = evaluate(others, recs, make, settings | {"k": 0})
            errs = {d: (p["y"] - p["pred_carb_k0"]).to_numpy(float) for d, p in inner.items()}
        h, n = device_band(errs, coverage)
        h_lv = level_band(errs, coverage)
        p = preds[t][~preds[t]["picked"]]
        e = (p["y"] - p["pred_carb_k0"]).to_numpy(float)
        out.append({"target": t, "band_devices": n, "half_width": h, "hi_lo": float(np.exp(2 * h)),
                    "coverage": float(np.mean(np.abs(e) <= h)) if np.isfinite(h) else float("nan"),
                    "hi_lo_level": float(np.exp(2 * h_lv)),
                    "coverage_level": float(np.mean(np.abs(e) <= h_lv)) if np.isfinite(h_lv) else float("nan"),
                    "inner_mape_pct": float(100 * np.mean([np.mean(np.abs(np.expm1(-x))) for x in errs.values()]))
                    if errs else float("nan"), "bias": float(np.median(e))})
    return pd.DataFrame(out)
