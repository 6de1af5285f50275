"""Screening-mode predictions that never decrease with batch size.

Peak memory, energy per batch and latency per batch do not fall when the batch grows and nothing else
changes, with one measured exception: on a CPU with one torch thread, PyTorch moves 1 x 1 convolutions
from a GEMM per image to oneDNN at batch 16, and latency falls there (for a target the model names in
``batch_nonmonotone_targets()`` the learned correction, the log-ratio of prediction to physics prior, is
pooled instead: the prediction falls only where its prior does). The physics priors
(:mod:`carb.model.physics`) rise with batch size by construction apart from that CPU term, but the
learned tree correction on top of them does not, so a raw cascade can predict less memory for batch 32
than for batch 16 of the same network (about 1-3 % of the steps of the 3,072 grid before this module).

:func:`monotone_in_batch` makes every prediction non-decreasing in batch size, per architecture (all
other knobs fixed), in a way that does not depend on which other rows are scored:

1. the model predicts each architecture at the **knots**, the batch sizes it was trained on
   (``domain_["batch_sizes"]``);
2. those predictions are projected onto non-decreasing sequences (pool-adjacent-violators on log
   values, equal weights): a prediction at a knot changes only where it broke the order;
3. a batch size between two knots gets the log-linear interpolation (in log batch size) of the two;
   beyond the last knot (or below the first) the prediction at that knot is carried by the physics
   prior, ``y(b) = y(b_k) * prior(b) / prior(b_k)``: the learned correction is held at its last trained
   value and the physics sets the trend. Without a prior the value is held flat.

Memory is then floored at parameter bytes (the floor is the same for every batch size of a network, so
the order survives), and latency at the board's power limit where the model has one
(:func:`with_power_cap`; the floor rises with the energy, so the order survives too). Costs: one extra prediction per (architecture, knot).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.design.candidates import arch_codes, arch_knobs
from carb.design.features import at_batch
from carb.model.encoding import pred_name


def batch_knots(model: Any) -> list[float]:
    """The batch sizes ``model`` was trained on (sorted, from ``domain_["batch_sizes"]``); empty for a
    model fitted before knots were recorded."""
    dom = getattr(model, "domain_", None) or {}
    return sorted(float(b) for b in dom.get("batch_sizes") or [])


def pav_increasing(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in least squares (pool adjacent violators, equal
    weights). ``y``: shape (n,); returns shape (n,)."""
    vals: list[float] = []
    counts: list[int] = []
    for v in np.asarray(y, dtype=float):
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            c = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / c
            counts[-2] = c
            vals.pop()
            counts.pop()
    return np.repeat(vals, counts)


def pav_rows(y: np.ndarray) -> np.ndarray:
    """:func:`pav_increasing` of each row of ``y`` (shape (n, k)), the same numbers: rows already
    non-decreasing are returned as they are (PAV leaves them so), only the others run the loop (1-3 % of
    a grid's architectures), so a million candidates do not pay a Python call each."""
    y = np.asarray(y, dtype=float)
    out = y.copy()
    broken = (np.diff(y, axis=1) < 0).any(axis=1)
    finite = np.isfinite(y).all(axis=1)
    rows = np.flatnonzero(broken & finite)
    if len(rows):
        out[rows] = _isotonic_minmax(y[rows])
    for r in np.flatnonzero(broken & ~finite):
        out[r] = pav_increasing(y[r])
    return out


def _isotonic_minmax(y: np.ndarray) -> np.ndarray:
    """The equal-weight isotonic fit of each row of ``y`` (n, k), all finite, at once: ``fit[i] =
    max over j <= i of min over l >= i of mean(y[j..l])``, the closed form of what
    :func:`pav_increasing` computes (equal to it up to float rounding of the means); k numpy passes."""
    n, k = y.shape
    s = np.concatenate([np.zeros((n, 1)), np.cumsum(y, axis=1)], axis=1)
    fit = np.full((n, k), -np.inf)
    for j in range(k):
        mean = (s[:, j + 1:] - s[:, j:j + 1]) / np.arange(1, k - j + 1)        # mean of y[j..l], l = j..k-1
        suffix_min = np.minimum.accumulate(mean[:, ::-1], axis=1)[:, ::-1]     # min over l >= i, i = j..k-1
        np.maximum(fit[:, j:], suffix_min, out=fit[:, j:])
    return fit


def _arch_index(features: pd.DataFrame, keys: Sequence[str]) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row, the index of its architecture (shape (n,)), and the architectures (the first row of
    each, all columns)."""
    codes, _ = arch_codes(features, keys)        # first-seen order
    first = np.unique(codes, return_index=True)[1]
    archs = features.iloc[first].reset_index(drop=True)
    return codes, archs


def knot_frame(archs: pd.DataFrame, knots: Sequence[float]) -> pd.DataFrame:
    """Every architecture (one featurized row each, at any batch size) at every knot:
    ``len(archs) * len(knots)`` rows in architecture-major order (row ``a * n_knots + j`` is
    architecture ``a`` at knot ``j``), static features rescaled by :func:`carb.design.features.at_batch`."""
    rows = archs.loc[archs.index.repeat(len(knots))].reset_index(drop=True)
    return at_batch(rows, np.tile(np.asarray(knots, dtype=float), len(archs)))


def _priors(model: Any, X: pd.DataFrame, targets: Sequence[str]) -> dict[str, np.ndarray]:
    """Physics priors per target for rows ``X`` (target units); ones where the model has none."""
    fn = getattr(model, "prior_frame", None)
    frame = fn(X) if fn is not None else pd.DataFrame(index=X.index)
    return {t: frame[t].to_numpy(float) if t in frame.columns else np.ones(len(X)) for t in targets}


def _predict_knots(model: Any, K: pd.DataFrame, targets: Sequence[str] | None
                   ) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """``(predictions of the knot rows K, their physics priors per predicted target)``: from one call where
    the model's ``predict`` takes ``targets`` and hands out its ``priors``
    (:meth:`carb.model.cascade.CarbCascade.predict`: only the stages ``targets`` need, each prior computed
    once), else ``predict`` and ``prior_frame`` (all targets)."""
    if {"targets", "priors"} <= set(inspect.signature(model.predict).parameters):
        priors: dict[str, np.ndarray] = {}
        PK = model.predict(K, targets=targets, priors=priors)
    else:
        PK, priors = model.predict(K), None
    names = [c[len("pred_"):] for c in PK.columns if c.startswith("pred_")]
    if priors is None:
        return PK, _priors(model, K, names)
    return PK, {t: priors[t] if t in priors else np.ones(len(K)) for t in names}


def monotone_in_batch(model: Any, features: pd.DataFrame,
                      prepare: Callable[[pd.DataFrame], pd.DataFrame],
                      targets: Sequence[str] | None = None) -> pd.DataFrame | None:
    """Predictions (``pred_<target>`` per row of ``features``) non-decreasing in batch size per
    architecture, as the module docstring describes, or None when the model has no knots (then predict
    as usual). ``features``: the frame the model would predict (knobs, static and runtime features);
    ``prepare(frame)`` turns a featurized frame (:func:`carb.design.features.grid_features`) into such
    a frame the way screening does (runtime features imputed). The model predicts only the knot rows:
    a row whose batch size is a knot gets its architecture's (projected) knot value. ``targets``: the
    targets wanted (None: all; a cascade then predicts only the stages they need, and the result may hold
    only those). The physics prior of a row itself is computed only for the rows beyond the knots."""
    knots = batch_knots(model)
    keys = arch_knobs(features)
    if not knots or not keys or "batch_size" not in features.columns or not len(features):
        return None
    codes, archs = _arch_index(features, keys)
    K = prepare(knot_frame(archs.drop(columns=[c for c in archs.columns if c.startswith("pred_")]), knots))
    PK, prior_k = _predict_knots(model, K, targets)
    targets = [c[len("pred_"):] for c in PK.columns if c.startswith("pred_")]
    n_a, n_k = len(archs), len(knots)
    b = pd.to_numeric(features["batch_size"]).to_numpy(float)
    lb, lk = np.log(b), np.log(np.asarray(knots))
    above, below = lb > lk[-1], lb < lk[0]
    beyond = np.flatnonzero(above | below)           # rows that need their own prior
    prior_q = _priors(model, features.iloc[beyond], targets) if len(beyond) else {}
    j = np.clip(np.searchsorted(lk, lb, side="right") - 1, 0, n_k - 1)   # knot at or below
    j2 = np.minimum(j + 1, n_k - 1)
    out = pd.DataFrame(index=features.index)
    features = features.reset_index(drop=True)
    free = set(getattr(model, "batch_nonmonotone_targets", list)())
    for t in targets:
        col = pred_name(t)
        logy = np.log(np.maximum(PK[col].to_numpy(float), 1e-300)).reshape(n_a, n_k)
        if t in free:    # the physics itself falls with batch here (CPU native path): pool the learned
            lp = np.log(np.maximum(prior_k[t], 1e-300)).reshape(n_a, n_k)   # correction, keep the prior's shape
            mono_a = pav_rows(logy - lp) + lp
        else:
            mono_a = pav_rows(logy)             # (n architectures, n_k)
        lo, hi = mono_a[codes, j], mono_a[codes, j2]
        span = lk[j2] - lk[j]
        w = np.where(span > 0, (lb - lk[j]) / np.where(span > 0, span, 1.0), 0.0)
        val = lo + np.clip(w, 0.0, 1.0) * (hi - lo)
        if len(beyond):     # beyond the knots: the end knot's value carried by the physics prior
            pk = prior_k[t].reshape(n_a, n_k)
            c, up = codes[beyond], above[beyond]
            end = np.where(up, n_k - 1, 0)
            val[beyond] = mono_a[c, end] + np.log(prior_q[t] / pk[c, end])
        y = np.exp(val)
        if t == "peak_memory_MB" and "param_size_MB" in features.columns:
            y = np.maximum(y, features["param_size_MB"].to_numpy(float))
        out[col] = y
    return with_power_cap(model, out)


def with_power_cap(model: Any, pred: pd.DataFrame) -> pd.DataFrame:
    """``pred`` with latency raised to the model's power-limit floor, ``latency_ms >= 1000 x energy_J /
    power_cap_W_`` (:class:`carb.model.cascade.CarbCascade`, ``power_cap``), where the model has a cap and
    both columns. Beyond the last knot the physics prior carries each target on its own, and without
    this the floor the cascade applies would be lost exactly where boards hit their limit (H200, trained
    on batch <= 32: screening-mode latency R^2 on batches 64-256 0.910 -> 0.979). The floor rises with
    energy, so predictions stay non-decreasing in batch size."""
    cap = getattr(model, "power_cap_W_", None)
    if not cap or not {"pred_energy_J", "pred_latency_ms"} <= set(pred.columns):
        return pred
    floor = 1000.0 * pred["pred_energy_J"].to_numpy(float) / float(cap)
    return pred.assign(pred_latency_ms=np.maximum(pred["pred_latency_ms"].to_numpy(float), floor))
