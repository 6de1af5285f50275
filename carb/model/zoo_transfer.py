"""Zoo latency on a GPU never measured: move other GPUs' per-network times to it by the spec sheet.

A network's key is ``(model, input_size)``. Input: per source GPU ``s`` a log time per image ``y_s(m)``
(``log(latency_ms / batch_size)``, ms; measured where ``s`` timed ``m``, else a prediction of ``s``'s own zoo
model), and each GPU's spec record (``carb/data/gpu_specs.csv`` as a dict). The target ``T``'s log time of
``m`` from ``s``::

    y_T(m) = y_s(m) + w . (v_s - v_T) [+ c(m; v_s - v_T)]

- ``v_d`` = log of (peak rate at the precision as PyTorch runs it, memory bandwidth, power limit)
  (:func:`device_vector`; differences are :func:`carb.model.spec_transfer.spec_axes`); ``w`` the device-level
  weights (geometric: >= 0, summing to 1) fitted on the *sources'* measured pairs only (:func:`device_weights`:
  per ordered pair the median over shared networks of ``y_b - y_a``);
- ``c`` an optional per-network correction (:class:`RatioCorrection`; off in ``conf/zoo_transfer``): ridge of
  the per-network residual of the source pairs on ``(v_a - v_b) (x) z(m)``, ``z`` standardised network features
  (:data:`RATIO_FEATURES`), so a memory-bound network may gain less from a GPU whose compute grew more than its
  bandwidth; its ridge strength chosen leave-one-source-pair-out on the sources (:func:`choose_alpha`; ``inf``:
  no correction).

The sources' moved predictions are averaged in log space (:meth:`ZooDeviceTransfer.predict_log`, weights
``1 / d**source_power`` by spec-space distance; which sources is the caller's choice, e.g. those on the target's
PyTorch version). With K measured networks of the target (:func:`space_filling`: farthest-point over
:data:`PICK_FEATURES`, never by the error), :func:`calibrate` fits an offset (and a slope where its leave-one-out
error is clearly lower) of the target's log time on the K=0 prediction. Everything here is in log ms per image;
:func:`to_ms` returns per batch.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.model.spec_transfer import AXES, fit_weights, spec_axes
from carb.model.zoo_latency import log_features

#: The key of one network on one device.
KEY: tuple[str, ...] = ("model", "input_size")
#: The network features of the per-network ratio correction (columns of
#: :func:`carb.model.zoo_latency.log_features`; trace ones are NaN -> 0 after standardising where absent).
RATIO_FEATURES: tuple[str, ...] = ("log_ai", "log_gmacs", "log_params_per_gmac", "log_batch",
                                   "tr_log_membound_per_gflop", "tr_log_ops_per_gmac")
#: The features the K measured networks are spread over (:func:`space_filling`).
PICK_FEATURES: tuple[str, ...] = ("log_gmacs", "log_params_M", "log_macts_M", "log_ai")


def device_vector(rec: Mapping[str, Any], precision: str = "fp16") -> np.ndarray:
    """log (peak TFLOP/s at ``precision``, bandwidth GB/s, power limit W) of one spec record; shape (3,).
    Differences of two are :func:`carb.model.spec_transfer.spec_axes` (source minus target)."""
    unit = {"name": "unit", "fp16_tensor_TFLOPS": 1.0, "bf16_tensor_TFLOPS": 1.0, "tf32_tensor_TFLOPS": 1.0,
            "fp32_TFLOPS": 1.0, "fp16_TFLOPS": 1.0, "memory_bandwidth_GBps": 1.0, "power_limit_W": 1.0}
    return spec_axes(rec, unit, precision)


def _pairs(table: pd.DataFrame) -> list[tuple[str, str]]:
    """Ordered pairs of distinct columns of ``table``."""
    cols = list(table.columns)
    return [(a, b) for a in cols for b in cols if a != b]


def device_weights(table: pd.DataFrame, vectors: Mapping[str, np.ndarray],
                   skip: set[tuple[str, str]] | frozenset = frozenset()) -> dict[str, float]:
    """Geometric spec weights (:data:`carb.model.spec_transfer.AXES` -> weight) from the measured log times per
    image ``table`` (networks x source devices, NaN where unmeasured): per ordered pair (a, b) the median over
    shared networks of ``y_b - y_a`` against ``v_a - v_b`` (ordered pairs in ``skip`` left out). Needs 2 pairs."""
    axes, ratios = [], []
    for a, b in _pairs(table):
        if (a, b) in skip:
            continue
        d = (table[b] - table[a]).dropna()
        if len(d):
            axes.append(vectors[a] - vectors[b])
            ratios.append(float(d.median()))
    if len(ratios) < 2:
        raise DatasetError(f"zoo transfer: {len(ratios)} measured source pairs; need 2 GPUs sharing networks")
    return fit_weights(np.array(axes), np.array(ratios), "geometric")


def spec_shift(weights: Mapping[str, float], v_src: np.ndarray, v_dst: np.ndarray) -> float:
    """``w . (v_src - v_dst)``: predicted log(t_dst / t_src) per image at the device level."""
    return float(np.array([weights[a] for a in AXES]) @ (np.asarray(v_src) - np.asarray(v_dst)))


def network_features(frame: pd.DataFrame, columns: Sequence[str] = RATIO_FEATURES) -> pd.DataFrame:
    """``columns`` of :func:`carb.model.zoo_latency.log_features` for ``frame``'s rows (NaN where a trace
    column is absent), index ``frame``'s."""
    f = log_features(frame, census=False, trace="tr_flops" in frame.columns)
    return pd.DataFrame({c: f[c] if c in f else np.nan for c in columns}, index=frame.index)


class RatioCorrection:
    """Per-network correction of the spec shift: ``c = sum_j (v_a - v_b)_j (z . beta_j)``, ridge (``alpha``)
    on the source pairs' residuals; ``alpha = inf`` is no correction (c = 0)."""

    def __init__(self, alpha: float = 10.0) -> None:
        self.alpha = float(alpha)

    def _design(self, z: np.ndarray, dv: np.ndarray) -> np.ndarray:
        """(n, 3 * p) design: each axis difference (n, 3) times each standardised feature (n, p)."""
        return (dv[:, :, None] * z[:, None, :]).reshape(len(z), -1)

    def standardise(self, feats: pd.DataFrame) -> np.ndarray:
        """(n, p) standardised features (training mean and sd; NaN -> 0)."""
        z = (feats.to_numpy(float) - self.mean_) / self.sd_
        return np.nan_to_num(z, nan=0.0)

    def fit(self, table: pd.DataFrame, feats: pd.DataFrame, vectors: Mapping[str, np.ndarray],
            weights: Mapping[str, float], skip: set[tuple[str, str]] | frozenset = frozenset()) -> RatioCorrection:
        """Fit on the measured log times ``table`` (networks x devices) and the networks' ``feats`` (same
        index, :func:`network_features`); ``weights`` the device-level spec weights; ordered pairs in ``skip``
        left out; returns self."""
        x = feats.to_numpy(float)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # an all-NaN column (no trace): mean 0, sd 1
            self.mean_ = np.nan_to_num(np.nanmean(x, axis=0)) if len(x) else np.zeros(x.shape[1])
            sd = np.nanstd(x, axis=0) if len(x) else np.ones(x.shape[1])
        self.sd_ = np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)
        self.coef_ = np.zeros(3 * x.shape[1])
        if not np.isfinite(self.alpha):
            return self
        z = self.standardise(feats)
        rows, ys = [], []
        for a, b in _pairs(table):
            ok = (table[a].notna() & table[b].notna()).to_numpy()
            if (a, b) in skip or not ok.any():
                continue
            dv = np.tile(vectors[a] - vectors[b], (int(ok.sum()), 1))
            resid = (table[b] - table[a]).to_numpy(float)[ok] - spec_shift(weights, vectors[a], vectors[b])
            rows.append(self._design(z[ok], dv))
            ys.append(resid)
        if not rows:
            return self
        A, y = np.vstack(rows), np.concatenate(ys)
        n = len(y)
        self.coef_ = np.linalg.solve(A.T @ A / n + self.alpha * np.eye(A.shape[1]) / n, A.T @ y / n)
        return self

    def predict(self, feats: pd.DataFrame, v_src: np.ndarray, v_dst: np.ndarray) -> np.ndarray:
        """Per-network correction (n,) of log(t_dst / t_src) for ``feats``'s rows."""
        z = self.standardise(feats)
        dv = np.tile(np.asarray(v_src) - np.asarray(v_dst), (len(z), 1))
        return self._design(z, dv) @ self.coef_


def choose_alpha(table: pd.DataFrame, feats: pd.DataFrame, vectors: Mapping[str, np.ndarray],
                 alphas: Sequence[float]) -> tuple[float, dict[float, float]]:
    """The ridge strength of ``alphas`` with the lowest leave-one-pair-out mean |log error| on the sources
    (``table``: networks x >= 3 devices): each unordered device pair (a, b) in turn is left out, the weights and
    the correction are fitted on the other pairs' networks, and a's networks are moved to b and b's to a.
    (Leaving a whole source device out leaves one pair with 3 sources: its one direction says nothing about
    another; a left-out pair still is a direction of the axes the fit never saw.) Fewer than 3 devices: ``inf``.
    Returns ``(alpha, {alpha: error})``."""
    devices = list(table.columns)
    if len(devices) < 3 or not alphas:
        return float("inf"), {}
    scores: dict[float, float] = {}
    pairs = [(a, b) for i, a in enumerate(devices) for b in devices[i + 1:]]
    for alpha in alphas:
        errs = []
        for a, b in pairs:
            try:
                w = device_weights(table, vectors, skip={(a, b), (b, a)})
            except DatasetError:
                continue
            corr = RatioCorrection(alpha).fit(table, feats, vectors, w, skip={(a, b), (b, a)})
            for s, t in ((a, b), (b, a)):
                ok = (table[s].notna() & table[t].notna()).to_numpy()
                pred = (table[s].to_numpy(float)[ok] + spec_shift(w, vectors[s], vectors[t])
                        + corr.predict(feats[ok], vectors[s], vectors[t]))
                errs.append(np.abs(table[t].to_numpy(float)[ok] - pred))
        scores[float(alpha)] = float(np.mean(np.concatenate(errs))) if errs else float("inf")
    best = min(scores, key=lambda a: (scores[a], -a if np.isfinite(a) else -np.inf))
    return best, scores


class ZooDeviceTransfer:
    """K=0 zoo latency on a target GPU from source GPUs' per-network log times (module docstring).

    ``fit(table, feats, vectors)``: ``table`` the sources' *measured* log ms per image (networks x devices),
    ``feats`` the networks' :func:`network_features` (same index), ``vectors`` each device's
    :func:`device_vector` (target's too, for predict). ``predict_log(values, feats, target)``: ``values`` the
    log times to move (networks x sources: measured, or a source model's prediction where unmeasured).
    The defaults here (correction on, ``alphas`` without 1000) are not the shipped settings: those are
    ``conf/zoo_transfer/default.yaml``'s (correction off), which :mod:`carb.analysis.zoo_transfer_eval` passes."""

    def __init__(self, alphas: Sequence[float | None] = (1.0, 10.0, 100.0, float("inf")),
                 correction: bool = True, source_power: float = 0.0) -> None:
        self.alphas = tuple(float("inf") if a is None else float(a) for a in alphas)   # None: no correction
        self.correction = correction
        self.source_power = float(source_power)

    def fit(self, table: pd.DataFrame, feats: pd.DataFrame, vectors: Mapping[str, np.ndarray]) -> ZooDeviceTransfer:
        """Device weights on the sources' pairs, then the correction's alpha (leave-one-source-pair-out,
        :func:`choose_alpha`) and fit; returns self."""
        self.vectors_ = dict(vectors)
        self.weights_ = device_weights(table, vectors)
        self.alpha_, self.alpha_scores_ = (choose_alpha(table, feats, vectors, self.alphas) if self.correction
                                           else (float("inf"), {}))
        self.corr_ = RatioCorrection(self.alpha_).fit(table, feats, vectors, self.weights_)
        return self

    def moved(self, values: pd.DataFrame, feats: pd.DataFrame, target: str) -> pd.DataFrame:
        """Each source's log time moved to ``target`` (networks x sources; NaN where the source has none)."""
        v_t = self.vectors_[target]
        out = {}
        for s in values.columns:
            out[s] = (values[s].to_numpy(float) + spec_shift(self.weights_, self.vectors_[s], v_t)
                      + self.corr_.predict(feats, self.vectors_[s], v_t))
        return pd.DataFrame(out, index=values.index)

    def source_weights(self, sources: Sequence[str], target: str) -> np.ndarray:
        """Each source's weight in the average (len(sources),): ``1 / d**source_power``, d the spec-space distance
        (Euclidean on :func:`device_vector`) to ``target`` (0: equal; inf: the nearest source alone)."""
        d = np.array([float(np.linalg.norm(self.vectors_[s] - self.vectors_[target])) for s in sources])
        d = np.maximum(d, 1e-6)
        if not np.isfinite(self.source_power):
            return (d == d.min()).astype(float)
        return d ** -self.source_power

    def predict_log(self, values: pd.DataFrame, feats: pd.DataFrame, target: str) -> np.ndarray:
        """Log ms per image on ``target`` (n,): the weighted mean (:meth:`source_weights`) over the sources that
        have the network of :meth:`moved`; with ``source_power`` inf, the nearest source that has it."""
        m = self.moved(values, feats, target).to_numpy(float)
        if not np.isfinite(self.source_power):   # per row, the nearest source that has the network
            d = np.array([float(np.linalg.norm(self.vectors_[s] - self.vectors_[target])) for s in values.columns])
            rank = np.where(np.isfinite(m), d[None, :], np.inf)
            w = (np.isfinite(rank) & (np.arange(m.shape[1])[None, :] == np.argmin(rank, axis=1)[:, None])) * 1.0
        else:
            w = np.tile(self.source_weights(list(values.columns), target), (len(m), 1))
        w = np.where(np.isfinite(m), w, 0.0)
        with np.errstate(all="ignore"):
            out = (np.nan_to_num(m) * w).sum(axis=1) / w.sum(axis=1)
        return np.where(w.sum(axis=1) > 0, out, np.nan)


def space_filling(feats: pd.DataFrame, k: int) -> np.ndarray:
    """Positions (k,) of ``feats``'s rows spread over its (standardised, NaN -> 0) columns: farthest-point
    from the row nearest the centre. Fewer rows than ``k``: all of them."""
    x = feats.to_numpy(float)
    sd = np.nanstd(x, axis=0)
    z = np.nan_to_num((x - np.nanmean(x, axis=0)) / np.where(sd > 0, sd, 1.0))
    if len(z) <= k:
        return np.arange(len(z))
    picks = [int(np.argmin((z ** 2).sum(axis=1)))]
    dist = ((z - z[picks[0]]) ** 2).sum(axis=1)
    while len(picks) < k:
        nxt = int(np.argmax(dist))
        picks.append(nxt)
        dist = np.minimum(dist, ((z - z[nxt]) ** 2).sum(axis=1))
    return np.array(picks)


def calibrate(pred_k: np.ndarray, y_k: np.ndarray, slope_gain: float = 0.9) -> tuple[float, float]:
    """(a, b) of the target's log time ``a + b * pred`` from K measured rows (log ms per image, (K,) each):
    an offset (b = 1), or a least-squares slope where its leave-one-out mean |error| is below ``slope_gain``
    times the offset's (K >= 4). No finite row: (0, 1)."""
    ok = np.isfinite(pred_k) & np.isfinite(y_k)
    p, y = pred_k[ok], y_k[ok]
    if not len(p):
        return 0.0, 1.0
    off = float(np.mean(y - p))
    if len(p) < 4:
        return off, 1.0
    loo_off = np.abs([y[i] - p[i] - np.mean(np.delete(y - p, i)) for i in range(len(p))]).mean()
    loo_aff = []
    for i in range(len(p)):
        b, a = np.polyfit(np.delete(p, i), np.delete(y, i), 1)
        loo_aff.append(abs(y[i] - a - b * p[i]))
    if np.mean(loo_aff) < slope_gain * loo_off:
        b, a = np.polyfit(p, y, 1)
        return float(a), float(b)
    return off, 1.0


def to_ms(log_ms_per_image: np.ndarray, batch_size: np.ndarray) -> np.ndarray:
    """``latency_ms`` per batch (n,) from log ms per image (n,) and the batch sizes (n,)."""
    return np.exp(np.asarray(log_ms_per_image, float)) * np.asarray(batch_size, float)
