"""Few-shot transfer of a fitted cascade to a new device from K measured rows (``carb-calibrate``).

A device changes the scale of cost far more than its shape: on timm's GPUs the latency of one ResNet on
two GPUs differs by a factor that drifts slowly with size. So the transfer keeps the source model and
recalibrates each target in log space on the K target rows:

* ``scale`` (any K >= 1):  ``log y = a + log p``               (one factor per target)
* ``affine`` (K >= ``affine_min_k``): ``log y = a + b log p``   (b > 0: order of candidates kept)
* ``precision`` (two precisions or more among the K rows): the offset ``a`` per precision (shrunk toward
  the common one by ``precision_shrink`` rows; 0: each precision's own mean; ``"auto"``, the default: by
  empirical Bayes from the K rows, :func:`empirical_bayes_shrink`, which on 3-4 space-filling rows per precision
  pools the precisions of a CPU target into one offset; issue 44, ``scripts.studies.transfer_shrink`` chose 0
  leave-one-target-out with the 227-row Zen 4, ``auto`` with the 560-row one); an instruction set changes one
  precision's kernels and not another's (bf16 without native bf16 instructions is ~30x slower than with
  them). A precision
  not among the K rows gets the common offset.

On a zero-shot base (the device probes' or the spec records' prediction) with fewer than ``residual_min_k``
rows, latency fits offsets only (``base_offsets_only``: ``scale`` or ``precision`` on that base; issue 44:
a slope or a base chosen by leave-one-out on 3-4 rows per precision made CPU transfers worse than the
zero-shot), and a precision switches back to the zero-shot only with ``keep_zero_shot`` (off by default;
both per-precision errors are recorded in ``precision_loo`` either way).
* ``residual`` (K >= ``residual_min_k``): affine plus a ridge fit of the remaining log-residual on
  standardized log cost axes (FLOPs, activations, parameters, batch size, input size).

Dispatch first (CPU to CPU, ``dispatch=True``): where the target's instruction set sends a precision down
another PyTorch path than the source's (fp16 through oneDNN on a Xeon with AVX-512 FP16, the fallback
GEMM on an EPYC without it), the source model is asked for the precision of the same element size whose
path on the source matches the target's (bf16 there): :func:`dispatch_stand_ins`, kept in ``stand_ins_``.
A scale factor cannot turn the fallback path's cost into the native one's.

``p`` is the source model's screening-mode prediction (telemetry imputed, monotone in batch size). Each
richer form is kept only when its leave-one-out (LOO) log error on the K rows is lower than the simpler
one's (by 10 %), so a small K never buys variance. The LOO log-residuals of the chosen form are also the interval
calibration: split-conformal quantiles when K is large enough for the coverage (K >= 2/(1-c) - 1), else a
Student-t prediction interval on them (``mean +- t * sd * sqrt(1 + 1/K)``, K >= 2); with K = 1 the source
model's own intervals are kept. Outside the source's domain the source's ``outside`` entry still applies.

:class:`TransferredCascade` predicts like a cascade (``predict``, ``prior_frame``, the domain and
telemetry of the source), so screening, intervals and the registry use it unchanged.
"""
from __future__ import annotations

import math
import weakref
from typing import Any

import numpy as np
import pandas as pd

from carb.data.schema import TARGETS
from carb.design.select import axes_matrix
from carb.errors import DatasetError
from carb.model.cascade_data import device_identity
from carb.model.encoding import pred_name

#: Attributes that belong to the transfer, never looked up on the source.
_OWN = frozenset({"source_", "stand_ins_", "transfer_", "intervals_", "device_name_", "device_id_", "device_fingerprint_",
                  "test_mae_", "registry_", "model_uri_", "affine_min_k", "residual_min_k", "coverage",
                  "ridge_alpha", "slope_bounds", "calibration_rows_", "residual_scale_",
                  "precision_shrink", "dispatch", "probe_models_", "spec_log_ratio_", "error_prior",
                  "probe_other_ratio_",
                  "prior_rows", "prior_targets", "device_kind_", "unseen_widen", "unseen_precisions_",
                  "pair_prior", "repeat_floor", "origin_", "unsupported_precisions_", "base_offsets_only",
                  "keep_zero_shot", "extra_sources_", "source_weights_", "source_weighting",
                  "precision_shrink_single", "source_weights_precision_", "offset_weighting",
                  "offset_noise_var_"})


def _loo_affine(x: np.ndarray, y: np.ndarray, lo: float, hi: float) -> tuple[float, float, np.ndarray]:
    """Least-squares ``y = a + b x`` with ``b`` clipped to ``[lo, hi]``; returns (a, b, LOO residuals)."""
    def fit(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float]:
        vx = float(np.var(xs))
        b = float(np.cov(xs, ys, bias=True)[0, 1] / vx) if vx > 1e-12 else 1.0
        b = min(max(b, lo), hi)
        return float(np.mean(ys - b * xs)), b
    a, b = fit(x, y)
    loo = np.array([y[i] - (lambda ab: ab[0] + ab[1] * x[i])(fit(np.delete(x, i), np.delete(y, i)))
                    for i in range(len(x))])
    return a, b, loo


def _loo_scale(x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """``y = a + x`` with ``a`` the mean log-ratio; returns (a, LOO residuals; empty for one row)."""
    d = y - x
    n = len(d)
    loo = (d - (d.sum() - d) / (n - 1)) if n > 1 else np.array([])
    return float(d.mean()), loo


def _loo_ridge(Z: np.ndarray, r: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Ridge ``r ~ c0 + Z w`` (intercept unpenalized); returns (coefficients [c0, w...], LOO residuals)
    by the hat-matrix identity ``e_i / (1 - h_ii)``."""
    A = np.column_stack([np.ones(len(Z)), Z])
    P = np.eye(A.shape[1]) * alpha
    P[0, 0] = 0.0
    M = np.linalg.solve(A.T @ A + P, A.T)
    coef = M @ r
    h = np.einsum("ij,ji->i", A, M)
    e = r - A @ coef
    return coef, e / np.maximum(1.0 - h, 1e-6)


def empirical_bayes_shrink(d: np.ndarray, prec: np.ndarray) -> float:
    """Pseudo-rows pulling each precision's mean of ``d`` (K,) toward the common mean, from the rows themselves
    (random-effects / James-Stein): ``s2 / tau2``, ``s2`` the rows' variance about their precision's mean and
    ``tau2`` the variance of the precision means beyond what ``s2`` explains (``var(m_p) - s2 * mean(1 / n_p)``).
    Precisions that differ more than their rows' scatter keep their own offsets (a few pseudo-rows); precisions
    whose differences are within the noise share the common one (``inf``). ``inf`` with one precision or no
    degrees of freedom."""
    ps = np.unique(prec)
    if len(ps) < 2 or len(d) - len(ps) < 1:
        return math.inf
    means = np.array([d[prec == p].mean() for p in ps])
    counts = np.array([(prec == p).sum() for p in ps], float)
    s2 = float(sum(((d[prec == p] - m) ** 2).sum() for p, m in zip(ps, means)) / (len(d) - len(ps)))
    tau2 = float(np.var(means, ddof=1) - s2 * np.mean(1.0 / counts))
    return s2 / tau2 if tau2 > 1e-12 else math.inf


#: How the K rows of a precision are weighted in its latency offset (``transfer.offset_weighting``): ``equal`` (each
#: row its weight, the mean), ``inverse_variance`` (each row by the inverse of its run-to-run noise variance plus the
#: between-row variance, :func:`offset_weights`) or ``huber`` (Huber's M-estimate, :func:`offset_weights`).
OFFSET_WEIGHTINGS = ("equal", "inverse_variance", "huber")
#: Huber's tuning constant (in units of the K rows' pooled within-precision log sd): 95 % efficiency at the normal.
HUBER_C = 1.345


def within_precision_var(d: np.ndarray, prec: np.ndarray) -> float:
    """The variance (log^2) of ``d`` (K,) about each precision's mean, pooled (``K - precisions`` degrees of
    freedom; the plain variance without them; 0 for one row)."""
    ps = np.unique(prec)
    dof = len(d) - len(ps)
    if dof < 1:
        return float(np.var(d, ddof=1)) if len(d) > 1 else 0.0
    return float(sum(((d[prec == p] - d[prec == p].mean()) ** 2).sum() for p in ps) / dof)


def source_intervals(source: Any) -> dict[str, Any]:
    """The source model's ``intervals_`` without its session drift (:func:`carb.model.intervals.without_session`):
    a transfer's entries describe the session of the K rows (or of the probes), not a later one of the source."""
    from carb.model.intervals import without_session

    return without_session(getattr(source, "intervals_", None) or {})


def row_noise_var(X: pd.DataFrame, floor_sd: Any) -> np.ndarray:
    """Per K row of ``X``, the variance (log^2) of its latency's run-to-run noise: a row with a measured
    ``latency_repeat_spread`` of two passes ``a``, ``b`` keeps the mean of two windows, whose variance
    ``log(a / b)^2 / 4`` estimates (:func:`carb.data.repeatability.spread_log_ratio`); a row of one pass
    ``floor_sd^2``, ``floor_sd`` the device's one-window log sd for its precision (``{precision or "default":
    sd}`` or one number: :func:`carb.model.transfer_prior.device_floor`). (K,)"""
    from carb.data.repeatability import SPREAD, spread_log_ratio

    prec = _precisions(X)
    fl = floor_sd if isinstance(floor_sd, dict) else {"default": float(floor_sd or 0.0)}
    one = np.array([float(fl.get(str(q), fl.get("default", 0.0))) ** 2 for q in prec])
    if SPREAD not in X.columns:
        return one
    lr = spread_log_ratio(pd.to_numeric(X[SPREAD], errors="coerce").to_numpy(float))
    return np.where(np.isfinite(lr), lr ** 2 / 4.0, one)


def offset_weights(d: np.ndarray, prec: np.ndarray, rule: str = "equal", noise_var: np.ndarray | None = None,
                   iterations: int = 20) -> np.ndarray:
    """Weights (K,) of the K rows' log offsets ``d`` in their precision's offset (:func:`_precision_offsets`):

    * ``equal``: ones (the mean);
    * ``inverse_variance``: ``1 / (noise_var + tau2)``, ``noise_var`` (K,) each row's run-to-run variance
      (:func:`row_noise_var`), ``tau2`` the between-row (shape) variance: the pooled within-precision variance of
      ``d`` less the rows' mean noise, at least 0 (a row that repeats badly counts less, but never more than the
      shape error every row shares allows);
    * ``huber``: Huber's M-estimate per precision (iteratively reweighted: ``min(1, c s / |d - m_p|)``, ``c`` =
      :data:`HUBER_C`, ``s`` the rows' pooled robust scale: 1.4826 x the median |d - its precision's median|, else
      the pooled within-precision sd; a precision's 3-4 rows cannot give a scale of their own).
    """
    d = np.asarray(d, float)
    if rule == "equal" or len(d) < 2:
        return np.ones(len(d))
    if rule == "inverse_variance":
        nv = np.zeros(len(d)) if noise_var is None else np.asarray(noise_var, float)
        tau2 = max(within_precision_var(d, prec) - float(np.mean(nv)), 0.0)
        v = nv + tau2
        return 1.0 / v if np.all(v > 0) else np.ones(len(d))
    if rule == "huber":
        med = {p: float(np.median(d[prec == p])) for p in np.unique(prec)}
        mad = float(np.median(np.abs(d - np.array([med[p] for p in prec]))))
        s, w = (1.4826 * mad if mad > 0 else math.sqrt(within_precision_var(d, prec))), np.ones(len(d))
        if s <= 0:
            return w
        for _ in range(iterations):
            m = {p: float(np.sum(w[prec == p] * d[prec == p]) / w[prec == p].sum()) for p in np.unique(prec)}
            r = np.abs(d - np.array([m[p] for p in prec]))
            w = np.minimum(1.0, HUBER_C * s / np.maximum(r, 1e-12))
        return w
    raise DatasetError(f"transfer.offset_weighting: {rule!r}; allowed: {', '.join(OFFSET_WEIGHTINGS)}")


def _precision_offsets(d: np.ndarray, prec: np.ndarray, shrink: float | str, rule: str = "equal",
                       noise_var: np.ndarray | None = None) -> tuple[float, dict[str, float]]:
    """Common offset (weighted mean of ``d``) and per-precision offsets (weighted means) shrunk toward it by
    ``shrink`` rows (``"auto"``: :func:`empirical_bayes_shrink` of these rows); weights :func:`offset_weights`
    by ``rule`` (``equal``: the plain means), normalised to a mean of 1 so a pseudo-row weighs as an average row."""
    w = offset_weights(d, prec, rule, noise_var)
    w = w / w.mean() if len(w) else w
    a = float(np.sum(w * d) / w.sum())
    lam = empirical_bayes_shrink(d, prec) if shrink == "auto" else float(shrink)
    if not math.isfinite(lam):
        return a, {str(p): a for p in np.unique(prec)}
    return a, {str(p): float((np.sum(w[prec == p] * d[prec == p]) + lam * a) / (w[prec == p].sum() + lam))
               for p in np.unique(prec)}


def _loo_precision(x: np.ndarray, y: np.ndarray, b: float, prec: np.ndarray, shrink: float | str,
                   rule: str = "equal", noise_var: np.ndarray | None = None
                   ) -> tuple[float, dict[str, float], np.ndarray]:
    """``y = a_prec + b x`` (b fixed); returns (common a, per-precision a, LOO residuals); the offsets weighted by
    ``rule`` (:func:`offset_weights`, ``noise_var`` (K,) the rows' run-to-run variance), refitted without each row."""
    d = y - b * x
    nv = None if noise_var is None else np.asarray(noise_var, float)
    a, per = _precision_offsets(d, prec, shrink, rule, nv)
    loo = np.empty(len(d))
    for i in range(len(d)):
        keep = np.arange(len(d)) != i
        ai, pi = _precision_offsets(d[keep], prec[keep], shrink, rule, None if nv is None else nv[keep])
        loo[i] = d[i] - pi.get(str(prec[i]), ai)
    return a, per, loo


def interval_entry(loo: np.ndarray, coverage: float) -> dict[str, Any] | None:
    """The interval calibration of one target from its LOO log-residuals (see the module docstring)."""
    from carb.model.intervals import conformal_bounds

    n = len(loo)
    if n < 2:
        return None
    if n >= 2.0 / (1.0 - coverage) - 1.0:
        lo, hi = conformal_bounds(loo, coverage)
        method = "split-conformal on leave-one-out log residuals"
        ratios = [float(v) for v in np.sort(loo)]
    else:
        from scipy.stats import t as student_t

        q = float(student_t.ppf(0.5 + coverage / 2.0, df=n - 1))
        m, s = float(np.mean(loo)), float(np.std(loo, ddof=1))
        half = q * s * math.sqrt(1.0 + 1.0 / n)
        lo, hi = m - half, m + half
        method, ratios = "student-t on leave-one-out log residuals", []
    return {"lower": float(lo), "upper": float(hi), "n": int(n), "coverage": float(coverage),
            "log_ratios": ratios, "method": method}


def _with_own_half(records: list[dict[str, Any]], coverage: float) -> list[dict[str, Any]]:
    """``records`` (each with ``loo``: its K rows' leave-one-out log residuals (K,)) with ``own_half``: the
    half-width of their own :func:`interval_entry` (NaN for fewer than 2 rows)."""
    out = []
    for r in records:
        e = interval_entry(np.asarray(r.get("loo") if r.get("loo") is not None else [], float), coverage)
        out.append({**r, "own_half": max(-float(e["lower"]), float(e["upper"])) if e else float("nan")})
    return out


def _isa(fingerprint: str | None) -> list[str] | None:
    """The ISA flags of a CPU fingerprint (JSON text), None for a GPU, unknown or unreadable one."""
    import json

    try:
        fp = json.loads(fingerprint) if fingerprint else None
    except (TypeError, ValueError):
        return None
    if not isinstance(fp, dict) or fp.get("kind", "cpu") != "cpu" or not isinstance(fp.get("isa"), list):
        return None
    return [str(f) for f in fp["isa"]]


def dispatch_stand_ins(source_fingerprint: str | None, target_fingerprint: str | None) -> dict[str, str]:
    """Precision -> the precision whose source-device path matches the target's path for it.

    PyTorch convolves a precision with oneDNN where the CPU has the instructions for it
    (:func:`carb.design.shapes.onednn_precisions`), else on a fallback path 20-50x slower. When the
    target's path for a precision differs from the source's (fp16 native on an AVX-512 FP16 Xeon, the
    fallback on an AMD EPYC without it), the source model's cost of that precision describes the wrong
    kernels; the source's cost of another precision with the same element size and the target's path
    (bf16 on the EPYC) does. Only unchanged paths, or CPUs with unknown ISA, map to themselves (empty)."""
    from carb.design.arch import BYTES_PER_ELEMENT
    from carb.design.shapes import onednn_precisions

    src, dst = _isa(source_fingerprint), _isa(target_fingerprint)
    if src is None or dst is None:
        return {}
    on_src, on_dst = set(onednn_precisions(src)), set(onednn_precisions(dst))
    out: dict[str, str] = {}
    for p in BYTES_PER_ELEMENT:
        if (p in on_src) == (p in on_dst):
            continue
        same = [q for q in BYTES_PER_ELEMENT if q != p and BYTES_PER_ELEMENT[q] == BYTES_PER_ELEMENT[p]
                and (q in on_src) == (p in on_dst)]
        if same:
            out[p] = same[0]
    return out


def other_ratio(models: dict[str, Any], source_probe: pd.DataFrame, precision: str = "fp32") -> float:
    """The non-convolution time ratio target / source of a probe transfer: the median over the source
    probe's ``precision`` layers of the target model's time over the source model's (both
    :class:`carb.model.layer_cost.LayerCostModel`, ``models["source"]`` / ``["target"]``). The layers
    besides convolutions (memory-bound elementwise ops, pooling, the classifier) run the same way on
    any x86 CPU, so they scale as the path every CPU runs natively (fp32 oneDNN); 1 when either model
    lacks ``precision``."""
    from carb.design.shapes import layer_array

    src, tgt = models["source"], models["target"]
    if precision not in src.coef_ or precision not in tgt.coef_:
        return 1.0
    g = source_probe[source_probe["precision"].astype(str) == precision]
    a, b = layer_array(g), g["batch_size"].to_numpy(float)
    num, den = tgt.layer_ms(a, b, precision), src.layer_ms(a, b, precision)
    ok = (num > 0) & (den > 0)
    return float(np.exp(np.median(np.log(num[ok] / den[ok])))) if ok.any() else 1.0


def fingerprint_kind(fingerprint: str | None) -> str | None:
    """The ``kind`` of a device fingerprint (JSON text), None when unreadable."""
    import json

    try:
        fp = json.loads(fingerprint) if fingerprint else None
    except (TypeError, ValueError):
        return None
    return fp.get("kind") if isinstance(fp, dict) else None


#: How the sources of a multi-source base are weighted after K rows (``transfer.source_weighting``): ``equal``
#: (a geometric mean of their predictions, as at K = 0) or ``inverse_loo`` (each source by the inverse of its
#: K rows' mean squared leave-one-out residual of per-precision offsets on its own zero-shot) or
#: ``inverse_loo_precision`` (the same residuals, each precision's sources weighted by that precision's K rows only;
#: a precision with fewer than :data:`MIN_PRECISION_WEIGHT_ROWS` K rows, or none, takes the ``inverse_loo`` weights).
SOURCE_WEIGHTINGS = ("inverse_loo", "equal", "inverse_loo_precision")

#: K rows of a precision below which ``inverse_loo_precision`` keeps the all-rows weights for it.
MIN_PRECISION_WEIGHT_ROWS = 2

#: Latency bases that are a zero-shot prediction (K rows fit offsets on them: ``base_offsets_only``).
ZERO_SHOT_BASES = ("multi", "probe", "spec")


def source_precisions(source: Any) -> list[str]:
    """The precisions a fitted source model predicts (its domain's ``precision`` values), sorted; empty when
    it does not say."""
    dom = getattr(source, "domain_", None) or {}
    return sorted(str(p) for p in (dom.get("categorical") or {}).get("precision", []))


def _inverse_mse_weights(R: np.ndarray) -> list[float]:
    """Weights (sources,) summing to 1, each the inverse of its row of ``R``'s (sources, m) mean square (floored at
    1e-12 so a perfect source takes nearly all the weight rather than dividing by zero)."""
    inv = 1.0 / np.maximum(np.mean(np.square(R), axis=1), 1e-12)
    return [float(v) for v in inv / inv.sum()]


def _precisions(X: pd.DataFrame) -> np.ndarray:
    """The rows' precision names (n,) ('' where unknown)."""
    if "precision" not in X.columns:
        return np.full(len(X), "", dtype=object)
    return X["precision"].astype(str).to_numpy(dtype=object)


def _offsets(info: dict[str, Any], prec: np.ndarray) -> np.ndarray:
    """Each row's log offset: its precision's when the transfer has one, else the common ``a``."""
    per = info.get("a_precision") or {}
    return np.array([per.get(str(p), info["a"]) for p in prec], dtype=float)


#: An extra source's screening predictions (ms, (n,)) by the rows they were made for (:func:`_rows_key`): a
#: multi-source base predicts the same rows again and again while it is fitted, evaluated and logged, and an extra
#: source is fixed once combined (a process-local memo, not pickled; at most 16 row sets per source; keyed also by
#: the source's latency fit, so a source refitted later is predicted again).
_EXTRA_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _rows_key(X: pd.DataFrame) -> tuple:
    """A key of rows ``X`` (n rows): their count, columns and a hash of their values (index ignored)."""
    h = pd.util.hash_pandas_object(X, index=False).to_numpy(np.uint64)
    w = np.arange(1, len(h) + 1, dtype=np.uint64)
    return len(X), tuple(map(str, X.columns)), int(h.sum(dtype=np.uint64)), int((h * w).sum(dtype=np.uint64))


class TransferredCascade:
    """A source cascade recalibrated to a target device (module docstring).

    ``source``: a fitted cascade (or anything with ``predict`` returning ``pred_<target>``);
    ``affine_min_k`` / ``residual_min_k``: the fewest rows for the slope / the residual model;
    ``coverage``: the interval coverage; ``ridge_alpha``: the residual model's penalty;
    ``slope_bounds``: the allowed slope range; ``precision_shrink``: pseudo-rows pulling a precision's
    offset toward the common one; ``error_prior``: the transfer errors measured across device pairs
    (:mod:`carb.model.transfer_prior`; ``"auto"``: the shipped table, a path, a table, or None: the K rows'
    LOO residuals alone), applied to ``prior_targets`` with ``prior_rows`` pseudo-rows; ``unseen_widen``: the log
    half-width added (in quadrature) to the interval of a precision the source predicts but neither the K rows
    nor the target's device probe measured (``unseen_precisions_``, :meth:`_widen_unseen`); ``pair_prior``: the
    per-pair transfer errors (``"auto"``: ``carb/data/transfer-pairs.csv`` where it exists, a path, a table, or
    None) whose device-level band (:func:`carb.model.transfer_prior.device_level_band`, pairs of this
    transfer's two devices left out) sets each calibrated target's interval where it has records, never
    narrower than ``repeat_floor`` (``{target or "default": log sd}``; after :meth:`fit` per target the device's
    measured floor, per precision where measured: :func:`carb.model.transfer_prior.device_floor`).
    Fitted: ``transfer_`` (per target: form, a, b, residual
    coefficients, K, LOO log MAE of each form), ``intervals_``, ``device_name_``, ``device_id_``,
    ``device_fingerprint_``, ``calibration_rows_`` (the config_ids used)."""

    def __init__(self, source: Any, affine_min_k: int = 5, residual_min_k: int = 20, coverage: float = 0.9,
                 ridge_alpha: float = 3.0, slope_bounds: tuple[float, float] = (0.5, 2.0),
                 precision_shrink: float | str = "auto", dispatch: bool = True, error_prior: Any = None,
                 prior_rows: float = 10.0, prior_targets: tuple[str, ...] = ("latency_ms", "energy_J"),
                 unseen_widen: float = 0.354, pair_prior: Any = None, repeat_floor: dict[str, float] | None = None,
                 base_offsets_only: bool = True, keep_zero_shot: bool = False,
                 source_weighting: str = "inverse_loo", interval_rules: Any = None,
                 precision_shrink_single: float | str | None = None, offset_weighting: str = "equal") -> None:
        self.source_ = source
        if offset_weighting not in OFFSET_WEIGHTINGS:
            raise DatasetError(f"transfer.offset_weighting: {offset_weighting!r}; "
                               f"allowed: {', '.join(OFFSET_WEIGHTINGS)}")
        self.offset_weighting = offset_weighting
        self.interval_rules = interval_rules   # transfer_prior.IntervalRules of the device-level band (None: defaults)
        if source_weighting not in SOURCE_WEIGHTINGS:
            raise DatasetError(f"transfer.source_weighting: {source_weighting!r}; "
                               f"allowed: {', '.join(SOURCE_WEIGHTINGS)}")
        self.source_weighting = source_weighting
        self.base_offsets_only, self.keep_zero_shot = bool(base_offsets_only), bool(keep_zero_shot)
        self.unseen_widen = float(unseen_widen)
        self.pair_prior, self.repeat_floor = pair_prior, dict(repeat_floor or {})
        self.error_prior, self.prior_rows, self.prior_targets = error_prior, float(prior_rows), tuple(prior_targets)
        self.dispatch = bool(dispatch)
        self.precision_shrink = "auto" if precision_shrink == "auto" else float(precision_shrink)
        self.precision_shrink_single = (None if precision_shrink_single is None else "auto"
                                        if precision_shrink_single == "auto" else float(precision_shrink_single))
        self.affine_min_k, self.residual_min_k = int(affine_min_k), int(residual_min_k)
        self.coverage, self.ridge_alpha, self.slope_bounds = float(coverage), float(ridge_alpha), tuple(slope_bounds)

    def __getattr__(self, name: str) -> Any:
        """Everything the transfer does not own (domain, telemetry medians, targets, features, stages)
        is the source model's."""
        if name.startswith("__") or name in _OWN or "source_" not in self.__dict__:
            raise AttributeError(name)
        return getattr(self.__dict__["source_"], name)

    #: A richer form is kept only when its LOO log MAE is below this share of the simpler form's (noise
    #: in K rows alone must not buy a form).
    _margin = 0.9

    def shrink(self) -> float | str:
        """The pseudo-rows pulling a precision's offset toward the common one in this fit: ``precision_shrink``
        on a multi-source base (``extra_sources_``), ``precision_shrink_single`` (where set) on one source's base:
        each chosen leave-one-target-device-out on its own base (issue 44)."""
        single = self.__dict__.get("precision_shrink_single")
        if single is None or self.__dict__.get("extra_sources_"):
            return self.precision_shrink
        return single

    # ------------------------------------------------------------------ fit
    def source_predict(self, X: pd.DataFrame) -> pd.DataFrame:
        """The source model's screening-mode predictions of ``X`` (``pred_<target>``, index of ``X``),
        each precision read as its dispatch stand-in (``stand_ins_``), latency on the transfer's default
        base (the device probes' ratio where it has probe models)."""
        from carb.model.intervals import screening_predict

        P = screening_predict(self.source_, self._as_source(X))
        if "pred_latency_ms" in P:
            info = {"default_base": self._default_base()}
            p = P["pred_latency_ms"].to_numpy(float)
            P["pred_latency_ms"] = p * np.exp(self._base_log_factor(X, info, p))
        return P

    def _default_base(self) -> str:
        """The latency base the K rows calibrate unless leave-one-out says otherwise: several sources' probe
        zero-shots combined (``multi``, :meth:`add_sources`), else the device probes' ratio, else the spec
        records' ratio, else the source's own prediction: the first of :meth:`_base_candidates`."""
        return self._base_candidates()[0]

    def _base_candidates(self) -> list[str]:
        """The latency bases this transfer can start from, in order of preference (the first is the default,
        :meth:`_default_base`)."""
        probe, spec = bool(self.__dict__.get("probe_models_")), bool(self.__dict__.get("spec_log_ratio_"))
        multi = probe and bool(self.__dict__.get("extra_sources_"))
        return [b for b, ok in (("multi", multi), ("probe", probe), ("spec", spec), ("source", True)) if ok]

    def _log_base(self, X: pd.DataFrame, base: str, p: np.ndarray | None = None) -> np.ndarray:
        """Per row (n,): log of a base's latency over the source's own (stand-in) prediction ``p`` (ms,
        (n,); None: computed): 0 for ``source``, the device probes' log ratio for ``probe``
        (:meth:`probe_ratio`), the spec records' for ``spec``."""
        if base == "probe":
            return np.log(np.maximum(self.probe_ratio(X, p), 1e-300))
        if base == "multi":
            if p is None:
                from carb.model.intervals import screening_predict

                p = screening_predict(self.source_, self._as_source(X))["pred_latency_ms"].to_numpy(float)
            L = self.source_log_predictions(X, p)
            return (self._source_weight_matrix(X, L.shape[0]) * L).sum(axis=0) \
                - np.log(np.maximum(np.asarray(p, float), 1e-300))
        if base == "spec":
            per = self.__dict__.get("spec_log_ratio_") or {}
            prec = _precisions(X)
            mean = float(np.mean(list(per.values()))) if per else 0.0
            return np.array([per.get(str(p), mean) for p in prec], dtype=float)
        return np.zeros(len(X))

    def _base_log_factor(self, X: pd.DataFrame, info: dict[str, Any], p: np.ndarray | None = None) -> np.ndarray:
        """Per row (n,): the log factor from the source's prediction ``p`` (ms, (n,); None: computed where a
        base needs it) to the latency base the fitted
        forms of ``info`` calibrate: each row's precision's base (``info["bases"]``, with its shift), else
        ``info["default_base"]`` (older fits: the probes' ratio where the transfer has probe models)."""
        default = info.get("default_base") or self._default_base()
        out = self._log_base(X, default, p)
        per = info.get("bases") or {}
        if per:
            prec = _precisions(X)
            for q, b in per.items():
                m = prec == q
                if m.any():
                    out[m] = self._log_base(X[m], b["base"], None if p is None else p[m]) + float(b["shift"])
        return out

    def _as_source(self, X: pd.DataFrame) -> pd.DataFrame:
        """``X`` with each precision replaced by its stand-in on the source device (``stand_ins_``)."""
        swap = self.__dict__.get("stand_ins_") or {}
        if not swap or "precision" not in X.columns:
            return X
        X = X.copy()
        X["precision"] = X["precision"].astype(str).map(lambda p: swap.get(p, p))
        return X

    def fit(self, X: pd.DataFrame, y: pd.DataFrame | None = None) -> TransferredCascade:
        """Fit the per-target transfer on the K target rows ``X`` (knobs + static features; targets in
        ``y`` or in ``X``). A target with no measured row keeps the source's prediction and says so in
        ``transfer_[t]["form"] = "source"``. Returns self."""
        y = X if y is None else y
        if not len(X):
            raise DatasetError("calibration rows: none given (need at least one measured row on the target device)")
        self.stand_ins_ = (dispatch_stand_ins(getattr(self.source_, "device_fingerprint_", None),
                                              device_identity(X)[2]) if self.dispatch else {})
        from carb.model.intervals import screening_predict

        P = screening_predict(self.source_, self._as_source(X))   # the source's own; latency bases below
        raw = axes_matrix(X)
        sd = raw.std(axis=0)
        self.residual_scale_ = {"mean": raw.mean(axis=0).tolist(), "std": np.where(sd > 0, sd, 1.0).tolist()}
        Z = self._residual_design(X)
        prec = _precisions(X)
        self.transfer_: dict[str, dict[str, Any]] = {}
        for t in getattr(self.source_, "targets_", TARGETS):
            col = pred_name(t)
            if col not in P or t not in y:
                continue
            meas = pd.to_numeric(pd.Series(np.asarray(y[t])), errors="coerce").to_numpy(float)
            pred = P[col].to_numpy(float)
            ok = np.isfinite(meas) & (meas > 0) & np.isfinite(pred) & (pred > 0)
            if not ok.any():
                self.transfer_[t] = {"form": "source", "k": 0}
                continue
            if t == "latency_ms":
                self.offset_noise_var_ = self._offset_noise_var(X[ok])
                self.transfer_[t], loo = self._fit_with_bases(X[ok], np.log(pred[ok]), np.log(meas[ok]), Z[ok], prec[ok])
                if self.__dict__.get("extra_sources_"):
                    self.transfer_[t]["source_weights"] = self.source_weights_summary()
                    per = self.__dict__.get("source_weights_precision_") or {}
                    if per:   # inverse_loo_precision: {precision: {source device: weight}}
                        names = list(self.source_weights_summary())
                        self.transfer_[t]["source_weights_precision"] = {
                            q: {n: round(float(v), 4) for n, v in zip(names, w)} for q, w in per.items()}
            else:
                self.transfer_[t], loo = self._fit_target(np.log(pred[ok]), np.log(meas[ok]), Z[ok], prec[ok])
            self.transfer_[t]["loo"] = [float(v) for v in loo]
            self.transfer_[t]["loo_precision"] = [str(v) for v in prec[ok]] if len(loo) else []
        from carb.model.transfer_prior import device_kind

        self.device_kind_ = device_kind(X)
        self._note_unseen({str(p): int(n) for p, n in zip(*np.unique(prec.astype(str), return_counts=True))})
        ids = X["device_id"].dropna().astype(str) if "device_id" in X else pd.Series([], dtype=str)
        names = X["device_name"].dropna().astype(str) if "device_name" in X else pd.Series([], dtype=str)
        self.device_name_ = str(names.mode().iloc[0]) if len(names) else "unknown"
        self.device_id_ = str(ids.mode().iloc[0]) if len(ids) else None
        fps = X.loc[ids.index[ids == self.device_id_], "device_fingerprint"].dropna() if self.device_id_ and \
            "device_fingerprint" in X else pd.Series([], dtype=str)
        self.device_fingerprint_ = str(fps.iloc[0]) if len(fps) else None
        self.calibration_rows_ = [str(c) for c in X.get("config_id", pd.Series([], dtype=str)).tolist()]
        self.test_mae_: dict[str, float] = {}
        from carb.model.transfer_prior import device_floor

        floor = dict(self.__dict__.get("repeat_floor") or {})   # measured run-to-run spread wins (device_floor)
        for t in self.transfer_:
            floor[t] = device_floor(X, t, floor.get(t, floor.get("default", 0.0)), self.device_id_)
        self.repeat_floor = floor
        self.recalibrate(self.error_prior)
        return self

    def _offset_noise_var(self, X: pd.DataFrame) -> np.ndarray | None:
        """The K rows' run-to-run noise variance (log^2, (K,); :func:`row_noise_var`) for
        ``offset_weighting: inverse_variance``, with the one-window floor the intervals take
        (:func:`carb.model.transfer_prior.device_floor`: the rows' own spreads, else the shipped table by
        ``device_id``, else ``repeat_floor``); None for the other weightings."""
        if self.__dict__.get("offset_weighting", "equal") != "inverse_variance":
            return None
        from carb.model.transfer_prior import device_floor

        ids = X["device_id"].dropna().astype(str) if "device_id" in X else pd.Series([], dtype=str)
        conf = dict(self.__dict__.get("repeat_floor") or {})
        floor = device_floor(X, "latency_ms", conf.get("latency_ms", conf.get("default", 0.0)),
                             str(ids.mode().iloc[0]) if len(ids) else None)
        return row_noise_var(X, floor)

    def recalibrate(self, error_prior: Any = None) -> TransferredCascade:
        """Set ``intervals_`` of a fitted K-row transfer: per target, the transfer-error prior combined with
        the K rows' LOO residuals (:func:`carb.model.transfer_prior.prior_entry`) where ``error_prior`` (as
        the constructor's) has rows of this device kind and target and the target is one of
        ``prior_targets``, else the LOO residuals alone (:func:`interval_entry`), else (K = 1) the source's
        interval; a target with no measured row keeps the source's. Outside the source's domain its
        ``outside`` entry still applies. Returns self."""
        from carb.model.transfer_prior import load_error_table, prior_entry

        if isinstance(error_prior, str):
            table = load_error_table(None if error_prior == "auto" else error_prior)
        else:
            table = error_prior
        src_int = source_intervals(self.source_)
        self.intervals_: dict[str, Any] = {"coverage": self.coverage, "method": "carb-calibrate"}
        for t, info in self.transfer_.items():
            loo = np.asarray(info.get("loo") or [], float)
            if info["form"] == "source":
                entry = src_int.get(t)
            else:
                entry = (prior_entry(table, self.__dict__.get("device_kind_"), t, loo, int(info["k"]), self.coverage,
                                     self.prior_rows) if t in self.prior_targets else None) \
                    or interval_entry(loo, self.coverage) or (dict(src_int.get(t) or {}) or None)
                if entry is not None and isinstance(src_int.get(t), dict) and "outside" in src_int[t]:
                    entry = {**entry, "outside": src_int[t]["outside"]}
                entry = self._unlike_source(entry, src_int.get(t), loo)
            if entry is not None:
                self.intervals_[t] = entry
        self._pair_bands()
        self._widen_unseen()
        return self

    def _pair_bands(self) -> None:
        """Where ``pair_prior`` has records: each calibrated target's interval becomes the device-level band
        of the pairs that involve neither this device nor the source's (:meth:`set_device_band`, scale-free
        on the K rows' leave-one-out scale)."""
        from carb.model.transfer_prior import load_pair_table, pair_records

        table = load_pair_table(self.__dict__.get("pair_prior"))
        if table is None:
            return
        exclude = [str(v) for v in (self.__dict__.get("device_id_"), getattr(self.source_, "device_id_", None),
                                    self.__dict__.get("device_name_"), getattr(self.source_, "device_name_", None))
                   if v]
        kind = self.__dict__.get("device_kind_")
        for t, info in self.transfer_.items():
            if info.get("form") == "source" or len(info.get("loo") or []) < 2:
                continue
            recs = pair_records(table, t, int(info.get("k", 0)), exclude, kind=kind)
            if recs:
                fl = self.__dict__.get("repeat_floor") or {}
                floor = fl.get(t, fl.get("default", 0.0))
                entry = self.set_device_band(t, recs, floor if isinstance(floor, dict) else float(floor), scaled=True,
                                             kind=kind)
                if entry is not None and isinstance(self.intervals_.get(t), dict):
                    self.intervals_[t]["method"] = "carb-calibrate: " + self.intervals_[t]["method"]

    def _note_unseen(self, measured: dict[str, int] | None) -> None:
        """``unseen_precisions_``: the precisions the source predicts that the K rows lack (``rows``;
        ``measured``: the K rows per precision, None at K = 0) and that the target's device probe lacks
        (``probe``, where the transfer has probe models; at K > 0 only those with fewer than 3 K rows, which
        cannot calibrate them)."""
        every = source_precisions(self.source_)
        models = self.__dict__.get("probe_models_") or {}
        got = measured or {}
        self.unseen_precisions_ = {
            "rows": [p for p in every if measured is not None and p not in got],
            "probe": [p for p in every if models and p not in models["target"].coef_ and got.get(p, 0) < 3]}

    def _widen_unseen(self) -> None:
        """Widen, per precision (``precision_log_ratios``), the interval of each precision in
        ``unseen_precisions_``: the entry's half-width and ``unseen_widen`` added in quadrature (a precision
        no K row measured keeps the common factor; one the target's probe lacks keeps the source's
        convolution cost: its error is the zero-shot's, not the K rows'). Probe gaps widen latency only."""
        unseen = self.__dict__.get("unseen_precisions_") or {}
        for t, entry in list((self.__dict__.get("intervals_") or {}).items()):
            if not isinstance(entry, dict) or "lower" not in entry or (self.transfer_.get(t) or {}).get("form") == "source":
                continue
            miss = set(unseen.get("rows", [])) | (set(unseen.get("probe", [])) if t == "latency_ms" else set())
            if not miss:
                continue
            half = math.hypot(max(abs(float(entry["lower"])), abs(float(entry["upper"]))), self.unseen_widen)
            pts = [round(v, 6) for v in [-half] * 50 + [half] * 50]
            byp = dict(entry.get("precision_log_ratios") or {})
            byp.update({p: pts for p in sorted(miss)})
            self.intervals_[t] = {**entry, "precision_log_ratios": byp, "widened_precisions": sorted(miss)}

    def set_device_band(self, target: str, records: list[dict[str, Any]],
                        floor_log_sd: float | dict[str, float] = 0.0, scaled: bool = True,
                        kind: str | None = None, target_out: list[dict[str, Any]] | None = None,
                        rules: Any = None) -> dict[str, Any] | None:
        """Set ``intervals_[target]`` to the device-level band (:func:`carb.model.transfer_prior.device_level_band`)
        of ``records`` of this device's class (``kind``, default ``device_kind_``; other device pairs' held-out
        errors; the caller leaves out every pair involving this pair's devices:
        :func:`~carb.model.transfer_prior.lodo_records`). ``scaled`` (K >= 2 rows): scale-free, each record by
        its ``scale`` and this transfer by its K rows' leave-one-out scale
        (:func:`~carb.model.transfer_prior.row_scale`),
        a precision whose own K rows err more widened by :func:`~carb.model.transfer_prior.precision_widening`
        (shrunk by ``prior_rows``); else (zero-shot) in log units as measured. No record of this class: the K
        rows' leave-one-out entry (:func:`interval_entry`: this device's own out-of-sample errors, no other
        class's borrowed), widened to the floor, naming 0 devices of its class; at K = 0 none (returns None).
        ``target_out`` (K >= 2): records of pairs without this transfer's *target* device only (``loo`` each:
        their K rows' residuals), used only where ``records`` has no pair of this class: where their held-out
        error level is steadier across them than its ratio to their own K-row intervals, the band is that
        level (:func:`~carb.model.transfer_prior.held_out_level_band`) instead of the K rows' own interval (each
        record's ``noise``, its target device's run-to-run log sd, swapped for this device's ``floor_log_sd`` under
        ``rules``' ``level_noise`` ``swap``).
        Never narrower than the repeatability floor ``floor_log_sd`` (a log sd, or ``{precision: log sd,
        "default": ...}``: :func:`~carb.model.transfer_prior.floor_half`). ``rules``: the band's
        :class:`~carb.model.transfer_prior.IntervalRules` (None: this transfer's ``interval_rules``, else the
        defaults). Returns the entry (None: the interval is left as it was)."""
        from carb.model.transfer_prior import (device_level_band, floor_half, held_out_level_band,
                                               precision_widening, row_scale, symmetric_log_ratios)

        kind = kind if kind is not None else self.__dict__.get("device_kind_")
        rules = rules if rules is not None else self.__dict__.get("interval_rules")
        info = (getattr(self, "transfer_", None) or {}).get(target) or {}
        loo = np.asarray(info.get("loo") or [], float)
        lp = np.asarray(info.get("loo_precision") or [], dtype=object).astype(str)
        scale = max(row_scale(loo, lp if len(lp) == len(loo) else None), 1e-6) if scaled and len(loo) >= 2 else None
        entry = (device_level_band(records, self.coverage, floor_log_sd, scale=scale, kind=kind, rules=rules)
                 if (scale or not scaled) else None)
        if entry is not None and scale is not None and len(lp) == len(loo):
            byp = dict(entry.get("precision_log_ratios") or {})   # a precision whose own K rows err more: wider
            for p, f in precision_widening(loo, lp, scale, self.prior_rows).items():
                h = max(entry["upper"] * f, max(byp.get(p, [0.0])))
                byp[p] = symmetric_log_ratios(h)
            if byp:
                entry["precision_log_ratios"] = byp
        if entry is None:
            entry = interval_entry(loo, self.coverage)
            if entry is None:
                return None
            pooled, by_prec = floor_half(floor_log_sd, self.coverage)
            cls = f"{kind} " if kind else ""
            own = max(-float(entry["lower"]), float(entry["upper"]))
            level = held_out_level_band(_with_own_half(target_out or [], self.coverage), self.coverage,
                                        kind, rules, own_half=own, own_noise=floor_log_sd) if scaled else None
            if level is not None:
                entry = {**level, "lower": min(level["lower"], -pooled), "upper": max(level["upper"], pooled)}
            else:
                entry.update(lower=min(entry["lower"], -pooled), upper=max(entry["upper"], pooled), log_ratios=[],
                             method=entry["method"] + f" (no {cls}device pair without this pair's devices: measured "
                                                      f"on 0 other {cls}devices; no other class's errors borrowed)",
                             n_devices=0, kind=kind)
            wider = {p: h for p, h in by_prec.items() if h > max(-entry["lower"], entry["upper"])}
            if wider:
                entry["precision_log_ratios"] = {p: symmetric_log_ratios(h) for p, h in wider.items()}
        src = (getattr(self.source_, "intervals_", None) or {}).get(target)
        if isinstance(src, dict) and "outside" in src:
            entry = {**entry, "outside": src["outside"]}
        self.intervals_ = dict(getattr(self, "intervals_", None) or {"coverage": self.coverage})
        self.intervals_[target] = entry
        self._widen_unseen()
        return self.intervals_[target]

    def _fit_with_bases(self, X: pd.DataFrame, x_src: np.ndarray, yl: np.ndarray, Z: np.ndarray, prec: np.ndarray
                        ) -> tuple[dict[str, Any], np.ndarray]:
        """Latency: choose the base the forms calibrate, then the form (:meth:`_fit_target`), by leave-one-out.

        Candidate bases (:meth:`_base_candidates`): the device probes' prediction, the spec records', the
        source's own. Per precision with at least 3 of the K rows, another base replaces the default when
        its per-precision offset's LOO log MAE is below ``_margin`` of the default's (its shape fits that
        precision better; shifted so that its rows' mean log ratio to the measurements is the default base's
        over all rows, so one common factor still fits). The
        mixed base and each single base are then fitted with the forms; one replaces the default only when
        its LOO log MAE is below ``_margin`` of the best so far. ``x_src`` (K,): log source predictions."""
        cands = self._base_candidates()
        if "multi" in cands:   # the sources' weights from these K rows, before the multi base is read
            self.source_weights_ = self.fitted_source_weights(X, np.exp(x_src), yl, prec)
        logs = {b: x_src + self._log_base(X, b, np.exp(x_src)) for b in cands}
        default = cands[0]
        if default in ZERO_SHOT_BASES and self.__dict__.get("base_offsets_only", False) \
                and len(yl) < self.residual_min_k:
            return self._fit_offsets(logs[default], yl, Z, prec, default)
        per, x_mixed = self._switch_bases(logs, default, yl, prec)
        options = [(default, {}, logs[default])] + ([("mixed", per, x_mixed)] if per else []) + \
            [(b, {}, logs[b]) for b in cands[1:]]
        best, scores = None, {}
        for name, bases, x in options:
            info, loo = self._fit_target(x, yl, Z, prec)
            if name == "mixed":   # the per-precision choice is part of the fit: left out with each row
                loo = self._nested_loo_mixed(logs, default, yl, Z, prec)
            score = float(np.mean(np.abs(loo))) if len(loo) else float("nan")
            scores[name] = score
            if best is None or (np.isfinite(score) and score < self._margin * best[3]):
                best = (name, bases, (info, loo), score)
        name, bases, (info, loo), _ = best
        info["default_base"] = default if name == "mixed" else name
        info["bases"] = bases
        info["base_loo_log_mae"] = scores
        if cands[0] in ZERO_SHOT_BASES:   # a zero-shot exists: per precision, keep it where the K rows do worse
            loo = self._keep_zero_shot(info, loo, yl - logs[cands[0]], prec, cands[0])
        return info, loo

    def _fit_offsets(self, x: np.ndarray, yl: np.ndarray, Z: np.ndarray, prec: np.ndarray, base: str
                     ) -> tuple[dict[str, Any], np.ndarray]:
        """Latency on a zero-shot base (``base``: "probe" / "spec"; ``x`` (K,) its log prediction) from fewer than
        ``residual_min_k`` rows: offsets only, one common and one per precision shrunk toward it
        (``precision_shrink``; ``"auto"``: :func:`empirical_bayes_shrink`), never a slope or another base. The
        base already carries how each network moves between the devices; 3-4 K rows per precision on a noisy
        CPU cannot choose a slope or a base by leave-one-out without buying variance (issue 44, CPU pairs at
        K = 10: worst precision 23.2 % with those choices, 17.5 % with offsets only). Returns (info, LOO
        residuals); the per-precision zero-shot comparison as :meth:`_keep_zero_shot`."""
        if len(np.unique(prec)) > 1 and len(yl) >= 3:
            rule = self.__dict__.get("offset_weighting", "equal")
            nv = self.__dict__.get("offset_noise_var_") if rule == "inverse_variance" else None
            a, per, loo = _loo_precision(x, yl, 1.0, prec, self.shrink(), rule, nv)
            info: dict[str, Any] = {"form": "precision", "a": a, "a_precision": per, "b": 1.0, "k": len(yl),
                                    "residual": None, "loo_log_mae": {"precision": float(np.mean(np.abs(loo)))},
                                    "offset_weighting": rule}
        else:
            a, loo = _loo_scale(x, yl)
            info = {"form": "scale", "a": a, "b": 1.0, "k": len(yl), "residual": None,
                    "loo_log_mae": {"scale": float(np.mean(np.abs(loo))) if len(loo) else None}}
        info.update(default_base=base, bases={}, base_loo_log_mae={base: info["loo_log_mae"][info["form"]]})
        return info, self._keep_zero_shot(info, loo, yl - x, prec, base)

    def _keep_zero_shot(self, info: dict[str, Any], loo: np.ndarray, zs_err: np.ndarray, prec: np.ndarray,
                        base: str) -> np.ndarray:
        """Per precision of the K rows: the calibrated form's mean |LOO log residual| against the zero-shot's
        mean |log error| on the same rows (``zs_err`` (K,): log measured over the zero-shot prediction,
        ``base``: "probe" / "spec"; the zero-shot never saw those rows, so both are out-of-sample). A
        precision where the zero-shot errs no more keeps the zero-shot prediction
        (``info["zero_shot_precisions"]``, ``info["zero_shot_base"]``); its residuals (returned, (K,)) are
        then the zero-shot's. ``info["precision_loo"]``: ``{precision: {"n", "zero_shot", "calibrated",
        "kept"}}`` (mean |log error|), what carb-calibrate prints."""
        loo = np.asarray(loo, float).copy()
        if len(loo) != len(prec):
            return loo
        per, keep = {}, []
        for p in np.unique(prec):
            m = prec == p
            zs, cal = float(np.mean(np.abs(zs_err[m]))), float(np.mean(np.abs(loo[m])))
            kept = "zero_shot" if zs <= cal and self.__dict__.get("keep_zero_shot", True) else "calibrated"
            per[str(p)] = {"n": int(m.sum()), "zero_shot": zs, "calibrated": cal, "kept": kept}
            if kept == "zero_shot":
                keep.append(str(p))
                loo[m] = zs_err[m]
        info["precision_loo"] = per
        if keep:
            info["zero_shot_precisions"], info["zero_shot_base"] = keep, base
        return loo

    def _nested_loo_mixed(self, logs: dict[str, np.ndarray], default: str, yl: np.ndarray, Z: np.ndarray,
                          prec: np.ndarray) -> np.ndarray:
        """LOO log residuals (K,) of the mixed base with its choice inside the loop: for each row, the
        per-precision bases (:meth:`_switch_bases`) and the form (:meth:`_fit_target`) are chosen and fitted
        on the other K - 1 rows, then that row is predicted. Choosing the bases on all K rows and only then
        leaving rows out scores the choice on the rows that made it (optimistic on a few extreme rows)."""
        k = len(yl)
        out = np.empty(k)
        for i in range(k):
            keep = np.arange(k) != i
            per, xk = self._switch_bases({b: v[keep] for b, v in logs.items()}, default, yl[keep], prec[keep])
            b = per.get(str(prec[i]))
            xi = logs[b["base"]][i] + b["shift"] if b else logs[default][i]
            info, _ = self._fit_target(xk, yl[keep], Z[keep], prec[keep])
            pred = _offsets(info, prec[i:i + 1])[0] + info["b"] * xi
            if info.get("residual"):
                coef = np.asarray(info["residual"])
                pred += coef[0] + Z[i] @ coef[1:]
            out[i] = yl[i] - pred
        return out

    def _switch_bases(self, logs: dict[str, np.ndarray], default: str, yl: np.ndarray, prec: np.ndarray
                      ) -> tuple[dict[str, dict[str, Any]], np.ndarray]:
        """Per precision, the base whose per-precision offset predicts the K rows best by LOO (only where
        it beats ``default`` by ``_margin``): ``({precision: {"base", "shift", "loo_log_mae"}}, mixed log base)``."""
        x = logs[default].copy()
        per: dict[str, dict[str, Any]] = {}
        for p in np.unique(prec):
            m = prec == p
            n = int(m.sum())
            if n < 3 or len(logs) < 2:
                continue
            mae = {}
            for b, lb in logs.items():
                d = yl[m] - lb[m]
                mae[b] = float(np.mean(np.abs(d - (d.sum() - d) / (n - 1))))
            b = min(mae, key=mae.get)
            if b != default and mae[b] < self._margin * mae[default]:
                shift = float(np.mean(yl[m] - logs[b][m]) - np.mean(yl - logs[default]))
                per[str(p)] = {"base": b, "shift": shift, "loo_log_mae": mae}
                x[m] = logs[b][m] + shift
        return per, x

    def _fit_target(self, x: np.ndarray, yl: np.ndarray, Z: np.ndarray, prec: np.ndarray
                    ) -> tuple[dict[str, Any], np.ndarray]:
        """Choose and fit one target's form on log predictions ``x`` and log measurements ``yl`` (K,),
        cost axes ``Z`` (K x axes) and precisions ``prec`` (K,)."""
        k = len(x)
        a, loo = _loo_scale(x, yl)
        info: dict[str, Any] = {"form": "scale", "a": a, "b": 1.0, "k": k, "residual": None,
                                "loo_log_mae": {"scale": float(np.mean(np.abs(loo))) if len(loo) else None}}
        if k >= max(self.affine_min_k, 3):
            a2, b2, loo2 = _loo_affine(x, yl, *self.slope_bounds)
            info["loo_log_mae"]["affine"] = float(np.mean(np.abs(loo2)))
            if np.mean(np.abs(loo2)) < self._margin * np.mean(np.abs(loo)):
                info.update(form="affine", a=a2, b=b2)
                loo = loo2
        if len(np.unique(prec)) > 1 and k >= 3:
            a3, per, loo3 = _loo_precision(x, yl, info["b"], prec, self.shrink())
            info["loo_log_mae"]["precision"] = float(np.mean(np.abs(loo3)))
            if np.mean(np.abs(loo3)) < self._margin * np.mean(np.abs(loo)):
                info.update(form="precision", a=a3, a_precision=per)
                loo = loo3
        if k >= max(self.residual_min_k, Z.shape[1] + 3):
            r = yl - (_offsets(info, prec) + info["b"] * x)
            coef, loo3 = _loo_ridge(Z, r, self.ridge_alpha)
            info["loo_log_mae"]["residual"] = float(np.mean(np.abs(loo3)))
            if np.mean(np.abs(loo3)) < self._margin * np.mean(np.abs(loo)):
                info.update(form="residual", residual=[float(c) for c in coef], base_form=info["form"])
                loo = loo3
        return info, loo

    # ------------------------------------------------------------------ serving
    def _apply(self, X: pd.DataFrame, frame: pd.DataFrame, name: Any) -> pd.DataFrame:
        out = pd.DataFrame(index=frame.index)
        Z = None
        for c in frame.columns:
            t = name(c)
            info = self.transfer_.get(t)
            v = frame[c].to_numpy(float)
            if info is None or info["form"] == "source":
                out[c] = v
                continue
            keep = np.isin(_precisions(X), info.get("zero_shot_precisions") or []) if t == "latency_ms" else None
            if keep is not None and keep.any():   # precisions whose K rows did worse than the zero-shot
                zs = v[keep] * np.exp(self._log_base(X[keep], info["zero_shot_base"], v[keep]))
            if t == "latency_ms":   # the base the forms start from (probes' or spec records' ratio, per precision)
                v = v * np.exp(self._base_log_factor(X, info, v))
            if info["form"] in ("probe", "spec"):
                out[c] = v
                continue
            if info["form"] == "power":   # zero-shot energy: time ratio x power ratio (carb.model.power)
                out[c] = v * self._power_factor(X, frame, name, info)
                continue
            logv = _offsets(info, _precisions(X)) + info["b"] * np.log(np.maximum(v, 1e-300))
            if info.get("residual") and t is not None:
                if Z is None:
                    Z = self._residual_design(X)
                coef = np.asarray(info["residual"])
                logv = logv + coef[0] + Z @ coef[1:]
            out[c] = np.exp(logv)
            if keep is not None and keep.any():
                out.loc[keep, c] = zs
        return out

    def _power_factor(self, X: pd.DataFrame, frame: pd.DataFrame, name: Any, info: dict[str, Any]) -> np.ndarray:
        """Per row (n,): the zero-shot energy factor of ``info`` (:func:`carb.model.power.energy_factor`)
        from the source's latency in ``frame``; 1 where ``frame`` has no latency."""
        from carb.model.power import PowerModel, energy_factor

        lat = [c for c in frame.columns if name(c) == "latency_ms"]
        if not lat:
            return np.ones(len(frame))
        pm = info["power"]
        model = PowerModel(**{**pm, "loo_band": tuple(pm.get("loo_band", (0.0, 0.0)))})
        return energy_factor(model, X, frame[lat[0]].to_numpy(float), self.__dict__.get("spec_log_ratio_") or {},
                             info["source_spec"], info["target_spec"], float(info["static_W"]))

    # ------------------------------------------------------------------ zero-shot (K = 0)
    def fit_probe(self, source_probe: pd.DataFrame, target_probe: pd.DataFrame, target_fingerprint: str | None,
                  device_name: str = "unknown", device_id: str | None = None,
                  log_errors: np.ndarray | None = None) -> TransferredCascade:
        """Zero-shot transfer to a CPU nobody measured networks on, from device probes of both CPUs
        (single convolutions per precision, ``carb-probe``; tables as :mod:`carb.data.probes` reads them).

        Latency = the source's prediction ``p`` (of the dispatch stand-in precision) with its convolution
        time ``C_s`` replaced by the target's ``C_t`` and the rest (batch norm, activations, pooling, the
        classifier, framework overhead: ``p - C_s``) scaled by the probes' fp32 convolution ratio
        (``probe_other_ratio_``, :func:`other_ratio`): see :meth:`probe_ratio`. Each convolution time is summed
        over the network's layers by a :class:`carb.model.layer_cost.LayerCostModel` fitted on that CPU's
        probe with its own dispatch.
        Memory (and any other target) keeps the source's prediction. ``log_errors``: log(measured /
        predicted) of zero-shot transfers between other device pairs (leave-one-device-out), which
        calibrate the latency interval; without them latency has no interval (and says so:
        ``intervals_["latency_ms"]`` absent). Returns self with ``transfer_[t]["form"]`` = "probe"/"source",
        ``k`` = 0. A later :meth:`fit` on K measured rows keeps the probes' ratio as the base its forms
        calibrate (a device probe of the target, used where one exists)."""
        from carb.design.shapes import onednn_precisions
        from carb.model.layer_cost import LayerCostModel

        src_fp = getattr(self.source_, "device_fingerprint_", None)
        self.stand_ins_ = dispatch_stand_ins(src_fp, target_fingerprint) if self.dispatch else {}
        self.probe_models_ = {
            "source": LayerCostModel(onednn=onednn_precisions(_isa(src_fp))).fit(source_probe),
            "target": LayerCostModel(onednn=onednn_precisions(_isa(target_fingerprint))).fit(target_probe)}
        self.probe_other_ratio_ = other_ratio(self.probe_models_, source_probe)
        self.extra_sources_ = []   # one source until add_sources
        self.residual_scale_ = None
        self.transfer_ = {t: {"form": "probe" if t == "latency_ms" else "source", "k": 0, "a": 0.0, "b": 1.0,
                              "residual": None} for t in getattr(self.source_, "targets_", TARGETS)}
        self._note_unseen(None)
        self._zero_shot_intervals("zero-shot (device probes)", log_errors)
        self.device_name_, self.device_id_, self.device_fingerprint_ = device_name, device_id, target_fingerprint
        self.calibration_rows_ = []
        self.test_mae_ = {}
        return self

    def add_sources(self, others: list[TransferredCascade]) -> TransferredCascade:
        """Make this probe zero-shot a multi-source base (issue 44): the target's latency predicted by this
        transfer and by ``others`` (probe zero-shots of other source CPUs to the same target, each
        :meth:`fit_probe`), combined as a weighted geometric mean (``source_weights_``: equal here; after
        :meth:`fit` on K rows as ``source_weighting`` says, :meth:`fitted_source_weights`). A source model's
        error on the target is mostly its shape (which networks it finds slow), not its level, and two CPUs'
        shapes err differently: three CPUs, K = 0 worst precision 21.5 -> 18.0 % (``python -m
        scripts.bench.transfer_pairs``). No other target than latency changes. Returns self."""
        if not self.__dict__.get("probe_models_"):
            raise DatasetError("add_sources: needs a probe zero-shot first (fit_probe): the sources are combined "
                               "on the target's device probe")
        others = [o for o in others if o is not None]
        for o in others:
            if not (getattr(o, "__dict__", {}).get("probe_models_")):
                raise DatasetError("add_sources: every other source must be a probe zero-shot (fit_probe) to the "
                                   "same target CPU")
            mine, theirs = self.__dict__.get("device_id_"), o.__dict__.get("device_id_")
            if mine and theirs and str(mine) != str(theirs):
                raise DatasetError(f"add_sources: another source's target {o.__dict__.get('device_id_')!r} is not "
                                   f"this transfer's ({self.__dict__.get('device_id_')!r})")
        self.extra_sources_ = list(others)
        self.source_weights_ = [1.0 / (len(others) + 1)] * (len(others) + 1)
        return self

    def source_names(self) -> list[str]:
        """The devices of a multi-source base's sources, this transfer's source first (ids, else names)."""
        return [str(getattr(m, "device_id_", None) or getattr(m, "device_name_", None) or "source")
                for m in [self.source_] + [o.source_ for o in self.__dict__.get("extra_sources_") or []]]

    def source_weights_summary(self) -> dict[str, float]:
        """``{source device: weight}`` of a multi-source base (empty for one source)."""
        if not self.__dict__.get("extra_sources_"):
            return {}
        out: dict[str, float] = {}
        for i, (n, w) in enumerate(zip(self.source_names(), self.source_weights_)):
            out[n if n not in out else f"{n}#{i}"] = round(float(w), 4)   # two models of one CPU stay apart
        return out

    def source_log_predictions(self, X: pd.DataFrame, p: np.ndarray) -> np.ndarray:
        """Log latency (ms) of rows ``X`` predicted by each source of a multi-source base (sources x n): this
        transfer's probe zero-shot from the source's prediction ``p`` (ms, (n,)), then each of
        ``extra_sources_`` (their own zero-shot predictions as screening makes them: each source's telemetry
        imputed, monotone in batch, as ``p`` is when this transfer is fitted; so every pair into one target has
        the same base whichever source comes first)."""
        from carb.model.intervals import screening_predict

        p = np.asarray(p, float)
        out = [np.log(np.maximum(p * self.probe_ratio(X, p), 1e-300))]
        key = _rows_key(X)
        for o in self.__dict__.get("extra_sources_") or []:
            memo = _EXTRA_MEMO.setdefault(o, {})
            k = (key, id(o.source_), str((o.__dict__.get("transfer_") or {}).get("latency_ms")))   # refitted: new
            if k not in memo:
                if len(memo) >= 16:
                    memo.pop(next(iter(memo)))
                memo[k] = screening_predict(o, X)["pred_latency_ms"].to_numpy(float)
            out.append(np.log(np.maximum(memo[k], 1e-300)))
        return np.vstack(out)

    def _source_weight_matrix(self, X: pd.DataFrame, n_sources: int) -> np.ndarray:
        """Each row's weights of the multi-source base's sources (n_sources, n rows of ``X``): its precision's
        (``source_weights_precision_``, ``inverse_loo_precision``) where the K rows gave it one, else
        ``source_weights_`` (each column sums to 1)."""
        w = np.asarray(self.__dict__.get("source_weights_"), float)
        per = self.__dict__.get("source_weights_precision_") or {}
        if not per:
            return np.repeat(w[:, None], len(X), axis=1)
        return np.array([per.get(str(q), w) for q in _precisions(X)], dtype=float).reshape(len(X), n_sources).T

    def fitted_source_weights(self, X: pd.DataFrame, p: np.ndarray, yl: np.ndarray, prec: np.ndarray) -> list[float]:
        """The sources' weights from the K rows (``X``; ``p`` the source's prediction (K,) ms, ``yl`` log measured
        (K,), ``prec`` (K,)): ``equal``, or ``inverse_loo``: each source's weight the inverse of the mean squared
        leave-one-out residual of per-precision offsets (:func:`_loo_precision`, shrunk as ``precision_shrink``)
        on its own zero-shot, normalised to sum 1; equal with fewer than 3 rows. ``inverse_loo_precision`` also
        sets ``source_weights_precision_`` (``{precision: weights}``): the same residuals' mean square over each
        precision's K rows alone (at least :data:`MIN_PRECISION_WEIGHT_ROWS`; other precisions: the returned
        all-rows weights). Returns the all-rows weights (sources,), summing to 1."""
        L = self.source_log_predictions(X, p)
        n = L.shape[0]
        how = self.__dict__.get("source_weighting", "inverse_loo")
        self.source_weights_precision_ = {}
        if how == "equal" or len(yl) < 3:
            return [1.0 / n] * n
        loos = []
        for lp in L:
            if len(np.unique(prec)) > 1:
                _, _, loo = _loo_precision(lp, yl, 1.0, prec, self.shrink())
            else:
                _, loo = _loo_scale(lp, yl)
            loos.append(np.asarray(loo, float))
        R = np.vstack(loos)   # (sources, K) leave-one-out log residuals
        if how == "inverse_loo_precision":
            prec = np.asarray(prec).astype(str)
            self.source_weights_precision_ = {
                str(q): _inverse_mse_weights(R[:, prec == q]) for q in sorted(set(prec))
                if int((prec == q).sum()) >= MIN_PRECISION_WEIGHT_ROWS}
        return _inverse_mse_weights(R)

    def fit_spec(self, source_spec: dict[str, Any], target_spec: dict[str, Any], weights: dict[str, float],
                 precisions: tuple[str, ...] = ("fp32", "fp16", "bf16"), log_errors: np.ndarray | None = None,
                 device_name: str | None = None, energy: dict[str, Any] | None = None) -> TransferredCascade:
        """Zero-shot transfer to a GPU nobody measured, from the two GPUs' spec records
        (:mod:`carb.model.spec_transfer`): latency x the spec-predicted ratio per precision (form
        "spec", ``k`` = 0; ``spec_log_ratio_`` per precision, the base a later :meth:`fit` may start from); memory keeps the source's prediction. ``log_errors``: the
        ratio model's log errors on device pairs without this target (leave-one-device-out), which
        calibrate the latency interval; none given: latency has no interval. ``energy``: the zero-shot energy
        (form "power", :mod:`carb.model.power`; a ``transfer_["energy_J"]`` entry with ``power``,
        ``source_spec``, ``target_spec``, ``static_W``, ``interval``), else energy keeps the source's
        prediction. Returns self."""
        from carb.model.spec_transfer import lacking_precisions, log_ratio

        self.stand_ins_ = {}
        self.residual_scale_ = None
        lacking = sorted(set(lacking_precisions(source_spec, precisions)) | set(lacking_precisions(target_spec,
                                                                                                   precisions)))
        per = {p: log_ratio(source_spec, target_spec, p, weights) for p in precisions if p not in lacking}
        self.spec_log_ratio_ = per
        self.unsupported_precisions_ = lacking
        self._drop_precisions(lacking)
        self.transfer_ = {t: {"form": "source", "k": 0} for t in getattr(self.source_, "targets_", TARGETS)}
        if "latency_ms" in self.transfer_:
            self.transfer_["latency_ms"] = {"form": "spec", "default_base": "spec", "a": 0.0, "a_precision": per,
                                            "b": 1.0, "k": 0, "residual": None,
                                            "spec": {"source": source_spec.get("name"),
                                                     "target": target_spec.get("name"), "weights": dict(weights)}}
        if energy is not None and "energy_J" in self.transfer_:
            self.transfer_["energy_J"] = {"form": "power", "k": 0, **{k: v for k, v in energy.items()
                                                                       if k != "interval"}}
        self._zero_shot_intervals("zero-shot (spec records)", log_errors)
        if energy is not None and "energy_J" in self.transfer_ and energy.get("interval"):
            from carb.model.transfer_band import resolved

            self.intervals_["energy_J"] = resolved(energy["interval"])   # P within 5-95 % here too
        self.device_name_ = str(device_name or target_spec.get("name", "unknown"))
        self.device_id_, self.device_fingerprint_ = None, None
        self.calibration_rows_, self.test_mae_ = [], {}
        return self

    def _unlike_source(self, entry: dict[str, Any] | None, src_entry: Any, loo: np.ndarray | None = None
                       ) -> dict[str, Any] | None:
        """A K-row entry of a transfer between device kinds (a CPU model to a GPU: no transfer band was ever
        measured between them; the table's are GPU to GPU) combined with the source's own interval
        (:func:`carb.model.transfer_band.with_transfer_band`); the band is the wider, end by end, of the entry's
        90 % bounds and the K rows' own leave-one-out interval (``loo``, :func:`interval_entry`: the prior measured
        on other kinds of pairs must not narrow what these rows show). Never narrower than the source's; any
        other entry unchanged. CPU reference -> timm's RTX 4090, K = 3 / 5 / 10: held-out coverage 0.47 / 0.47 /
        0.50 before, with the source's interval and the prior 0.84 / 0.71 / 0.75, with the K rows' too 1.0."""
        from carb.model.intervals import conformal_bounds
        from carb.model.transfer_band import BAND_COVERAGE, with_transfer_band

        src_kind = {"cuda": "gpu", "cpu": "cpu"}.get(str(fingerprint_kind(getattr(self.source_, "device_fingerprint_",
                                                                                   None))))
        mine = self.__dict__.get("device_kind_")
        if entry is None or not isinstance(src_entry, dict) or not src_entry.get("log_ratios") or \
                src_kind is None or mine is None or src_kind == mine:
            return entry
        band = (conformal_bounds(entry["log_ratios"], BAND_COVERAGE) if entry.get("log_ratios")
                else (float(entry["lower"]), float(entry["upper"])))
        own = interval_entry(np.asarray(loo, float), BAND_COVERAGE) if loo is not None and len(loo) >= 2 else None
        if own is not None and math.isfinite(own["lower"]) and math.isfinite(own["upper"]):
            band = (min(band[0], own["lower"]), max(band[1], own["upper"]))
        if not all(map(math.isfinite, band)):
            return entry
        return with_transfer_band(src_entry, band, f"{src_kind} -> {mine}: {entry.get('method', '')} "
                                                   "widened to the K rows' own leave-one-out interval")

    def _drop_precisions(self, precisions: list[str]) -> None:
        """Take ``precisions`` out of the domain's measured precisions (a copy of the source's ``domain_``), so
        that screening flags their candidates ``never_measured`` (unverified): the spec record has no figure
        for them (:func:`carb.model.spec_transfer.lacking_precisions`)."""
        import copy

        dom = getattr(self.source_, "domain_", None)
        seen = (dom or {}).get("categorical", {}).get("precision")
        if not precisions or seen is None:
            return
        dom = copy.deepcopy(dom)
        dom["categorical"]["precision"] = [p for p in seen if str(p) not in set(precisions)]
        self.domain_ = dom

    def _zero_shot_intervals(self, method: str, log_errors: np.ndarray | None) -> None:
        """``intervals_`` of a zero-shot transfer: the source's for the targets it keeps; latency's from
        :meth:`calibrate_zero_shot` (none without ``log_errors``)."""
        src_int = source_intervals(self.source_)
        self.intervals_ = {"coverage": self.coverage, "method": method}
        for t, info in self.transfer_.items():
            if info["form"] == "source" and t in src_int:
                self.intervals_[t] = src_int[t]
        self.calibrate_zero_shot(log_errors)

    def calibrate_zero_shot(self, log_errors: np.ndarray | None = None,
                            band: tuple[float, float] | None = None) -> TransferredCascade:
        """Set the zero-shot latency interval: the split-conformal (or Student-t) entry of other device
        pairs' zero-shot ``log_errors`` (log measured / predicted), or a stored 5-95 % ``band`` of them combined
        with the source model's own latency interval (:func:`carb.model.transfer_band.with_transfer_band`: it
        resolves coverages up to 90 %, the band's); neither: none. Returns self."""
        if "latency_ms" not in self.transfer_:
            return self
        if band is not None:   # the source's own interval plus the band, never narrower than the source's
            from carb.model.transfer_band import band_entry, with_transfer_band

            note = "zero-shot: 5-95 % of leave-one-device-out log errors"
            src = (getattr(self.source_, "intervals_", None) or {}).get("latency_ms")
            entry = (with_transfer_band(src, band, note) if isinstance(src, dict) and src.get("log_ratios")
                     else band_entry(band, note))
        elif log_errors is not None:
            entry = interval_entry(np.asarray(log_errors, float), self.coverage)
            if entry is not None:
                entry["method"] = "zero-shot: " + entry["method"].replace("leave-one-out", "other device pairs'")
        else:
            entry = None
        if entry is not None:
            self.intervals_["latency_ms"] = entry
            self._widen_unseen()
        return self

    def probe_ratio(self, X: pd.DataFrame, p: np.ndarray | None = None) -> np.ndarray:
        """Per row (n,): the probes' latency on the target over the source's prediction ``p`` (ms, (n,), of
        the stand-in precision; None: the source's screening prediction). With ``C_s`` / ``C_t`` the
        network's convolution time on the source (stand-in precision) / target (its precision) from the
        two probe models, ``s = min(C_s / p, 1)`` the convolutions' share of ``p`` and ``r`` the
        non-convolution ratio (``probe_other_ratio_``): ``(1 - s) r + s C_t / C_s``, i.e. the convolutions
        replaced and the rest scaled by ``r``. Models fitted before ``probe_other_ratio_`` existed keep
        ``C_t / C_s`` (the whole network scaled as its convolutions). Where either probe lacks the precision
        (the Zen 4's probe has no fp16): ``r``, the whole network scaled as the fp32 path (1 for older fits;
        carb-calibrate warns and widens that precision's interval)."""
        models = self.__dict__.get("probe_models_") or {}
        out = np.ones(len(X))
        if not models or "precision" not in X.columns:
            return out
        r = self.__dict__.get("probe_other_ratio_")
        if r is not None and p is None:
            from carb.model.intervals import screening_predict

            p = screening_predict(self.source_, self._as_source(X))["pred_latency_ms"].to_numpy(float)
        prec = X["precision"].astype(str).to_numpy()
        swap = self.__dict__.get("stand_ins_") or {}
        for q in np.unique(prec):
            qs = swap.get(q, q)
            if q not in models["target"].coef_ or qs not in models["source"].coef_:
                if r is not None:   # a probe without this precision: the whole network x the fp32 ratio
                    out[prec == q] = float(r)
                continue
            m = prec == q
            num, den = models["target"].network_ms(X[m], q), models["source"].network_ms(X[m], qs)
            conv = np.where((num > 0) & (den > 0), num / np.maximum(den, 1e-12), 1.0)
            if r is None:
                out[m] = conv
                continue
            pm = np.asarray(p, float)[m]
            share = np.where(pm > 0, np.clip(den / np.maximum(pm, 1e-12), 0.0, 1.0), 1.0)
            out[m] = (1.0 - share) * float(r) + share * conv
        return out

    def _residual_design(self, X: pd.DataFrame) -> np.ndarray:
        """The residual model's axes for rows ``X`` (n x axes), standardized with the calibration rows'
        mean and standard deviation (``residual_scale_``)."""
        s = self.residual_scale_
        return (axes_matrix(X) - np.asarray(s["mean"])) / np.asarray(s["std"])

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        """``pred_<target>`` for raw rows (the source's prediction, transferred), index of ``X``."""
        return self._apply(X, self.source_.predict(self._as_source(X)),
                           lambda c: c[len("pred_"):] if c.startswith("pred_") else None)

    def prior_frame(self, X: pd.DataFrame) -> pd.DataFrame:
        """The source's physics priors, transferred (so extrapolation beyond the batch knots scales as
        the transferred predictions do)."""
        fn = getattr(self.source_, "prior_frame", None)
        if fn is None:
            return pd.DataFrame(index=X.index)
        frame = fn(self._as_source(X))
        return self._apply(X, frame, lambda c: c) if len(frame.columns) else frame

    def summary(self) -> dict[str, Any]:
        """The transfer per target and the source's own summary (JSON-able)."""
        src = self.source_.summary() if hasattr(self.source_, "summary") else {}
        return {"transfer": self.transfer_, "dispatch_stand_ins": self.__dict__.get("stand_ins_") or {},
                "calibration_rows": self.calibration_rows_, "source": src}


def describe_origin(model: Any) -> str | None:
    """Where a transferred model's numbers come from, one phrase (what the registry description, the screen
    header and :meth:`carb.analysis.predictor.Predictor.predict`'s frame say): ``zero-shot from <source> by
    <method>, band measured on N devices`` (``origin_``, set by ``carb-calibrate``); None for a model that
    is not a transfer or has no ``origin_``."""
    inner = getattr(model, "cascade", model)   # a Predictor wraps the cascade
    o = getattr(inner, "__dict__", {}).get("origin_")
    if not isinstance(o, dict):
        return None
    if o.get("how") == "zero-shot":
        n = o.get("band_devices")
        return (f"zero-shot from {o.get('source', '?')} by {o.get('method', '?')}"
                + (f", band measured on {n} devices" if n else ", no measured band"))
    return f"calibrated from {o.get('source', '?')} on {o.get('k', '?')} measured rows ({o.get('method', '')})".replace(" ()", "")


def describe_form(info: dict[str, Any]) -> str:
    """One target's transfer (an entry of ``transfer_``) as a short formula of the source prediction
    ``p``: ``x 1.8`` (scale), ``exp(0.412) * p^0.953`` (affine), ... (what ``carb-calibrate`` prints)."""
    e = 2.718281828459045
    form = info["form"]
    sw = info.get("source_weights") or {}
    whose = {"probe": "the device probes'", "spec": "the spec records'", "source": "the source's",
             "multi": "the sources' probe zero-shots' weighted geometric mean (" +
                      ", ".join(f"{d} {w:.2f}" for d, w in sw.items()) + ")"}
    bases = info.get("bases") or {}
    if form not in ("source", "probe", "spec") and (info.get("default_base") in ZERO_SHOT_BASES or bases):
        per = ", ".join(f"{p}: {whose.get(b['base'], b['base'])}" for p, b in bases.items())
        return describe_form({k: v for k, v in info.items() if k not in ("default_base", "bases")}) + \
            f"; p = {whose.get(info.get('default_base') or 'source', whose['source'])} prediction" + \
            (f" (shape per precision from {per})" if per else "")
    if form == "source":
        return "nothing measured: the source's prediction kept"
    if form == "probe":
        return ("p with its convolution time replaced by the target's and the rest x the fp32 convolution ratio "
                "(both CPUs' device probes)")
    if form == "power":
        return ("p x (spec time ratio) x (target / source average power: static power + (limit - static) x "
                "the source's measured drive at the busy share), carb.model.power")
    if form == "spec":
        return "p x per precision (spec-record ratio) " + ", ".join(
            f"{p}: {pow(e, v):.3g}" for p, v in (info.get("a_precision") or {}).items())
    if form == "scale":
        return f"x {pow(e, info['a']):.3g}"
    if form == "affine":
        return f"exp({info['a']:.3f}) * p^{info['b']:.3f}"
    if form == "precision":
        return f"p^{info['b']:.3f} x per precision " + ", ".join(
            f"{p}: {pow(e, v):.3g}" for p, v in (info.get("a_precision") or {}).items())
    if form == "residual":
        return f"exp({info['a']:.3f}) * p^{info['b']:.3f} * ridge residual"
    raise KeyError(form)
