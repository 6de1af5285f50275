"""Average board power of a configuration on a GPU, from its spec record and a source GPU's measured power:
the energy half of a zero-shot transfer (``carb-calibrate k=0 spec=<GPU>``).

Energy per batch is average power times time. On a measured GPU ``energy_J / latency_ms`` is the measured
average power; it runs from near the board's static power (launch-bound configurations: the GPU waits on
the host) to near its power limit (device-bound ones). The *drive* of a configuration is where it sits
between the two::

    P = S + (L - S) * sigmoid(a + b * x),      x = log(roofline_ms / latency_ms)

with ``L`` the power limit (W), ``S`` the static power (W) and ``roofline_ms`` the time the device would
need at its spec peaks, ``max(2 * flops / peak(precision), bytes / bandwidth)`` (``flops``: the static
feature, multiply-accumulates per batch; ``bytes``: ``total_activation_MB + param_size_MB``). ``x`` is
how much of the batch's time the device is busy at peak: near 0 device-bound, very negative
launch-bound. ``a``, ``b`` (and the source's ``S``) are fitted on the source GPU's measured rows
(:func:`fit_power`), by least squares on log power.

On a target GPU nobody measured, ``x`` is recomputed with the target's spec peaks and its predicted
latency, and ``S``/``L`` are the target's record (``static_W`` where the spec table has a sourced figure,
else ``static_fraction x power_limit_W``, :func:`static_power`). The zero-shot energy keeps the source
model's prediction and multiplies it by the time ratio and the power ratio (:func:`energy_factor`)::

    E_dst = E_src * (t_dst / t_src) * P_dst(x_dst) / P_src(x_src)

so where the source model has learned a configuration's energy, the transfer keeps what it learned and
moves only what the spec records say changes. The interval (:func:`energy_band`) widens the source's
energy bounds by (root-sum-square) the latency transfer's band, the power model's leave-configuration-out
error on the source (widened: no second GPU's energy has been measured) and, where the target's static
power is not a sourced figure, the effect of the stated static-fraction range.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.model.intervals import conformal_bounds
from carb.model.spec_transfer import RATE_FIELDS, _field


def _precisions(X: pd.DataFrame) -> np.ndarray:
    """The rows' precision names (n,), fp32 where the frame has none."""
    if "precision" not in X.columns:
        return np.full(len(X), "fp32", dtype=object)
    return X["precision"].astype(str).to_numpy(dtype=object)


def roofline_ms(X: pd.DataFrame, rec: Mapping[str, Any]) -> np.ndarray:
    """Per row (n,): the batch's time at the spec record ``rec``'s peaks, ms: the larger of
    ``2 * flops / peak(precision)`` and ``(total_activation_MB + param_size_MB) / memory_bandwidth_GBps``.
    ``X`` needs ``flops``, ``total_activation_MB``, ``param_size_MB`` (per batch) and ``precision``."""
    if not {"flops", "total_activation_MB", "param_size_MB"} <= set(X.columns):   # knobs only: featurize
        from carb.design.features import grid_features

        X = grid_features(X).set_axis(X.index)
    prec = _precisions(X)
    peak = np.array([_field(rec, RATE_FIELDS.get(p, RATE_FIELDS["fp32"]), f"{p} rate") for p in prec], float)
    bw = _field(rec, ("memory_bandwidth_GBps",), "bandwidth")
    flops = X["flops"].to_numpy(float)
    mb = X["total_activation_MB"].to_numpy(float) + X["param_size_MB"].to_numpy(float)
    return np.maximum(2.0 * flops / (peak * 1e12), mb * 1e6 / (bw * 1e9)) * 1e3


def busy_share(X: pd.DataFrame, latency_ms: np.ndarray, rec: Mapping[str, Any]) -> np.ndarray:
    """``x`` of the module docstring (n,): log(roofline_ms / latency_ms), latency in ms (n,)."""
    t = np.maximum(np.asarray(latency_ms, float), 1e-9)
    return np.log(np.maximum(roofline_ms(X, rec), 1e-12) / t)


def _drive(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """sigmoid(a + b x) (n,), in (0, 1)."""
    return 1.0 / (1.0 + np.exp(-np.clip(a + b * np.asarray(x, float), -60.0, 60.0)))


@dataclass
class PowerModel:
    """A fitted drive law (module docstring): ``a``, ``b`` (sigmoid of the busy share), the source GPU's
    ``static_W`` (fitted) and ``limit_W`` (its record's power limit), ``n`` rows fitted,
    ``loo_log_errors`` 5-95 % of the leave-configuration-out log(measured / predicted) power
    (:func:`leave_configuration_out`; empty until computed) and ``loo_mape_pct``."""

    a: float
    b: float
    static_W: float
    limit_W: float
    n: int = 0
    loo_band: tuple[float, float] = (0.0, 0.0)
    loo_mape_pct: float = float("nan")

    def power_W(self, x: np.ndarray, static_W: float | None = None, limit_W: float | None = None) -> np.ndarray:
        """Average power (W, (n,)) at busy shares ``x`` (n,) between ``static_W`` and ``limit_W`` (default:
        the source's)."""
        s = self.static_W if static_W is None else float(static_W)
        lim = self.limit_W if limit_W is None else float(limit_W)
        return s + (lim - s) * _drive(x, self.a, self.b)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able parameters."""
        d = asdict(self)
        d["loo_band"] = [float(v) for v in self.loo_band]
        return d


def measured_power_W(rows: pd.DataFrame) -> np.ndarray:
    """``energy_J / latency_ms`` in W (n,): the measured average power of GPU rows."""
    return rows["energy_J"].to_numpy(float) / np.maximum(rows["latency_ms"].to_numpy(float), 1e-12) * 1e3


def usable_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a positive measured energy and latency and the static features the law reads."""
    need = ["energy_J", "latency_ms", "flops", "total_activation_MB", "param_size_MB"]
    missing = [c for c in need if c not in rows.columns]
    if missing:
        raise DatasetError(f"power model: the rows lack {missing}; it needs measured energy_J and latency_ms "
                           "and the static features")
    ok = np.ones(len(rows), bool)
    for c in need:
        v = rows[c].to_numpy(float)
        ok &= np.isfinite(v) & (v > 0)
    return rows[ok]


def fit_power(rows: pd.DataFrame, rec: Mapping[str, Any]) -> PowerModel:
    """Fit ``a``, ``b`` and the static power on measured GPU ``rows`` of the GPU whose spec record is ``rec``
    (least squares on log power; static power in (0, 0.9 x the power limit)). At least 5 usable rows,
    else :class:`DatasetError`."""
    from scipy.optimize import least_squares

    rows = usable_rows(rows)
    if len(rows) < 5:
        raise DatasetError(f"power model: {len(rows)} rows with measured energy and latency; need at least 5")
    lim = _field(rec, ("power_limit_W",), "power limit")
    p = measured_power_W(rows)
    x = busy_share(rows, rows["latency_ms"].to_numpy(float), rec)

    def resid(th: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(th[0] + (lim - th[0]) * _drive(x, th[1], th[2]), 1e-9) / p)

    s0 = float(min(np.percentile(p, 2), 0.5 * lim))
    r = least_squares(resid, [s0, 0.0, 1.0], bounds=([1e-3, -50.0, 0.0], [0.9 * lim, 50.0, 20.0]))
    return PowerModel(a=float(r.x[1]), b=float(r.x[2]), static_W=float(r.x[0]), limit_W=float(lim), n=len(rows))


def leave_configuration_out(rows: pd.DataFrame, rec: Mapping[str, Any], folds: int = 10, seed: int = 0
                            ) -> np.ndarray:
    """Out-of-fold log(measured / predicted) power (n usable rows,): each configuration (``config_id``,
    else each row) predicted by the law fitted on the folds without it (``folds`` groups, seeded)."""
    rows = usable_rows(rows).reset_index(drop=True)
    keys = rows["config_id"].astype(str).to_numpy() if "config_id" in rows else np.arange(len(rows)).astype(str)
    uniq = np.unique(keys)
    fold_of = dict(zip(uniq, np.random.default_rng(seed).permutation(len(uniq)) % max(2, int(folds))))
    fold = np.array([fold_of[k] for k in keys])
    out = np.full(len(rows), np.nan)
    p = measured_power_W(rows)
    for f in np.unique(fold):
        te = fold == f
        m = fit_power(rows[~te], rec)
        x = busy_share(rows[te], rows.loc[te, "latency_ms"].to_numpy(float), rec)
        out[te] = np.log(p[te] / m.power_W(x))
    return out


def fit_with_errors(rows: pd.DataFrame, rec: Mapping[str, Any], folds: int = 10) -> PowerModel:
    """:func:`fit_power` on all ``rows`` with the leave-configuration-out error attached (``loo_band``: 5 and
    95 % of the out-of-fold log errors; ``loo_mape_pct``: mean |predicted / measured - 1| in %)."""
    model = fit_power(rows, rec)
    err = leave_configuration_out(rows, rec, folds=folds)
    model.loo_band = (float(np.percentile(err, 5)), float(np.percentile(err, 95)))
    model.loo_mape_pct = float(np.mean(np.abs(np.exp(-err) - 1.0)) * 100)
    return model


def static_power(rec: Mapping[str, Any], fraction: float) -> tuple[float, bool]:
    """The static power (W) of the GPU record ``rec`` and whether it is a sourced figure: its ``static_W``
    field where given, else ``fraction x power_limit_W`` (not sourced)."""
    v = rec.get("static_W")
    if v is not None and not (isinstance(v, float) and math.isnan(v)) and float(v) > 0:
        return float(v), True
    return float(fraction) * _field(rec, ("power_limit_W",), "power limit"), False


def energy_factor(model: PowerModel, X: pd.DataFrame, t_src_ms: np.ndarray, log_ratio: Mapping[str, float],
                  src_rec: Mapping[str, Any], dst_rec: Mapping[str, Any], dst_static_W: float) -> np.ndarray:
    """Per row (n,): ``E_dst / E_src`` = (t_dst / t_src) x P_dst(x_dst) / P_src(x_src) (module docstring).
    ``t_src_ms`` (n,): the source's predicted latency; ``log_ratio``: log(t_dst / t_src) per precision
    (the spec transfer's; a precision it lacks gets their mean)."""
    prec = _precisions(X)
    mean = float(np.mean(list(log_ratio.values()))) if log_ratio else 0.0
    r = np.array([float(log_ratio.get(str(p), mean)) for p in prec])
    t_src = np.asarray(t_src_ms, float)
    t_dst = t_src * np.exp(r)
    p_src = model.power_W(busy_share(X, t_src, src_rec))
    p_dst = model.power_W(busy_share(X, t_dst, dst_rec), static_W=dst_static_W,
                          limit_W=_field(dst_rec, ("power_limit_W",), "power limit"))
    return np.exp(r) * p_dst / p_src


def static_band(model: PowerModel, rows: pd.DataFrame, rec: Mapping[str, Any], fraction: float,
                fraction_range: Sequence[float]) -> tuple[float, float]:
    """The log band (5 % of the low, 95 % of the high) that not knowing a GPU's static power adds: on the
    source's usable ``rows`` (their busy shares on ``rec``), log of the power with static power at each end
    of ``fraction_range`` (fractions of the power limit) over the power at ``fraction``."""
    rows = usable_rows(rows)
    x = busy_share(rows, rows["latency_ms"].to_numpy(float), rec)
    lim = model.limit_W
    mid = model.power_W(x, static_W=fraction * lim)
    lo = np.log(model.power_W(x, static_W=float(fraction_range[0]) * lim) / mid)
    hi = np.log(model.power_W(x, static_W=float(fraction_range[1]) * lim) / mid)
    both = np.concatenate([lo, hi])
    return float(min(0.0, np.percentile(both, 5))), float(max(0.0, np.percentile(both, 95)))


def energy_band(source_entry: Mapping[str, Any] | None, latency_band: Sequence[float], model: PowerModel,
                widen: float, static: Sequence[float] = (0.0, 0.0)) -> dict[str, Any]:
    """The zero-shot energy interval entry (as :mod:`carb.model.intervals` reads one, log ratios): the
    source's energy bounds (widest over its regimes; none: 0) plus the latency transfer's ``latency_band``,
    the power model's leave-configuration-out band times ``widen`` and the ``static`` band; the source's
    ``outside`` entry kept. Its ``method`` says what it does not know."""
    lo, hi = 0.0, 0.0
    if source_entry:
        lo, hi = float(source_entry.get("lower", 0.0)), float(source_entry.get("upper", 0.0))
        cov = float(source_entry.get("coverage", 0.9))
        for r in (source_entry.get("groups") or {}).values():
            g_lo, g_hi = conformal_bounds(r, cov)
            if math.isfinite(g_lo) and math.isfinite(g_hi):
                lo, hi = min(lo, g_lo), max(hi, g_hi)
    lo -= math.hypot(float(latency_band[0]), widen * model.loo_band[0], float(static[0]))
    hi += math.hypot(float(latency_band[1]), widen * model.loo_band[1], float(static[1]))
    entry: dict[str, Any] = {"lower": lo, "upper": hi, "n": 0, "coverage": 0.9, "log_ratios": [],
                             "method": NOTE}
    if source_entry and isinstance(source_entry.get("outside"), Mapping):
        entry["outside"] = dict(source_entry["outside"])
    return entry


#: What the zero-shot energy interval does not know (printed, logged, kept with the interval).
NOTE = ("zero-shot energy: no second GPU's energy has been measured; the interval is the source's energy "
        "bounds + the latency transfer band + the power model's source-only error widened + the static-power "
        "range where the target has no sourced static power")


def zero_shot_energy(rows: pd.DataFrame, src_rec: Mapping[str, Any], dst_rec: Mapping[str, Any],
                     source_entry: Mapping[str, Any] | None, latency_band: Sequence[float],
                     static_fraction: float | None = None, fraction_range: Sequence[float] = (0.1, 0.3),
                     widen: float = 2.0, folds: int = 10) -> dict[str, Any]:
    """The ``energy`` argument of :meth:`carb.model.transfer.TransferredCascade.fit_spec`: the drive law
    fitted on the source GPU's measured ``rows`` (record ``src_rec``) with its leave-configuration-out
    error, the target's static power (``dst_rec``'s ``static_W``, else ``static_fraction`` of its power
    limit; None: the source's fitted share), and the interval entry (:func:`energy_band`; the static
    band from ``fraction_range`` only where the target's static power is not sourced). JSON-able."""
    model = fit_with_errors(rows, src_rec, folds=folds)
    frac = model.static_W / model.limit_W if static_fraction is None else float(static_fraction)
    static_W, sourced = static_power(dst_rec, frac)
    sband = (0.0, 0.0) if sourced else static_band(model, rows, src_rec, frac, fraction_range)
    interval = energy_band(source_entry, latency_band, model, widen, sband)
    keys = ("name", "power_limit_W", "memory_bandwidth_GBps", "static_W", *{f for v in RATE_FIELDS.values()
                                                                            for f in v})
    return {"power": model.to_dict(), "static_W": static_W, "static_sourced": sourced, "static_fraction": frac,
            "static_band": list(sband), "widen": float(widen),
            "source_spec": {k: src_rec.get(k) for k in keys if src_rec.get(k) is not None},
            "target_spec": {k: dst_rec.get(k) for k in keys if dst_rec.get(k) is not None},
            "note": NOTE, "interval": interval}
