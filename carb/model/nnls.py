"""Non-negative least squares on relative error: how CARB fits every physics prior's coefficients
(network priors in :mod:`carb.model.physics`, layer costs in :mod:`carb.model.layer_cost`), and the
overlapped form of a GPU latency prior (:func:`smooth_max`, :func:`fit_overlap`)."""
from __future__ import annotations

import numpy as np

from carb.errors import DatasetError


def nnls_relative(A: np.ndarray, y: np.ndarray, lower: np.ndarray | None = None) -> np.ndarray:
    """Non-negative ``c`` minimising ``sum(((A @ c) / y - 1) ** 2)``: least squares on relative error.
    A: (n, k) non-negative design, y: (n,) positive targets. Columns are scaled before solving. ``lower``
    (k,), >= 0: each coefficient at least this (bounded least squares); None: 0."""
    from scipy.optimize import lsq_linear, nnls

    ok = np.isfinite(y) & (y > 0) & np.isfinite(A).all(axis=1)
    if ok.sum() < 2:
        raise DatasetError(f"physics prior: too few measured rows to fit ({int(ok.sum())})")
    Ar = A[ok] / y[ok, None]
    scale = np.sqrt((Ar ** 2).mean(axis=0))
    scale[~(scale > 0)] = 1.0
    if lower is not None and np.any(np.asarray(lower) > 0):
        res = lsq_linear(Ar / scale, np.ones(int(ok.sum())), bounds=(np.asarray(lower, float) * scale, np.inf))
        return np.maximum(res.x / scale, lower)
    c, _ = nnls(Ar / scale, np.ones(int(ok.sum())), maxiter=50 * A.shape[1])
    return c / scale


def smooth_max(A: np.ndarray, c: np.ndarray, host: np.ndarray, k: float) -> np.ndarray:
    """``(h**k + g**k) ** (1 / k)`` with ``h = A[:, host] @ c[host]`` (host-side terms: launches, a
    constant) and ``g`` the rest (device work): a smooth maximum of two costs that overlap, which tends
    to their sum at ``k = 1`` and to ``max(h, g)`` as ``k`` grows. A: (n, p), c: (p,), host: (p,) bool."""
    h = np.maximum(A[:, host] @ c[host], 0.0)
    g = np.maximum(A[:, ~host] @ c[~host], 0.0)
    m = np.maximum(np.maximum(h, g), 1e-300)
    return m * ((h / m) ** k + (g / m) ** k) ** (1.0 / k)


def fit_overlap(A: np.ndarray, y: np.ndarray, host: np.ndarray, k: float, c0: np.ndarray | None = None,
                max_nfev: int = 2000) -> np.ndarray:
    """Non-negative ``c`` minimising ``sum(log(smooth_max(A, c, host, k) / y) ** 2)`` (least squares on
    log error, coefficients kept positive by fitting their logs), started from ``c0`` (default: the
    additive :func:`nnls_relative` solution; its zeros start a millionth of its largest coefficient).
    A: (n, p) non-negative design, y: (n,) positive targets, host: (p,) bool."""
    from scipy.optimize import least_squares

    ok = np.isfinite(y) & (y > 0) & np.isfinite(A).all(axis=1)
    if ok.sum() < 2:
        raise DatasetError(f"physics prior: too few measured rows to fit ({int(ok.sum())})")
    A, y = A[ok], y[ok]
    c0 = nnls_relative(A, y) if c0 is None else np.asarray(c0, dtype=float)
    # columns no row uses stay at zero (nothing can identify them)
    used = (A > 0).any(axis=0)
    start = np.where(c0 > 0, c0, max(float(c0.max()), 1e-12) * 1e-6)
    ly = np.log(y)

    Au, hu = A[:, used], host[used]

    def parts(lc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        c = np.exp(lc)
        h = np.maximum(Au[:, hu] @ c[hu], 1e-300)
        g = np.maximum(Au[:, ~hu] @ c[~hu], 1e-300)
        m = np.maximum(h, g)
        return c, h / m, g / m

    def resid(lc: np.ndarray) -> np.ndarray:
        _, hr, gr = parts(lc)
        m = np.maximum(Au[:, hu] @ np.exp(lc)[hu], Au[:, ~hu] @ np.exp(lc)[~hu])
        return np.log(np.maximum(m, 1e-300)) + np.log(hr ** k + gr ** k) / k - ly

    def jac(lc: np.ndarray) -> np.ndarray:
        """d resid / d log c: (n, used) = A_ij c_j (part/s)^(k-1) / s, s the smooth max."""
        c, hr, gr = parts(lc)
        h = np.maximum(Au[:, hu] @ c[hu], 1e-300)
        g = np.maximum(Au[:, ~hu] @ c[~hu], 1e-300)
        t = hr ** k + gr ** k                      # (s / m) ** k
        wh, wg = hr ** k / t / h, gr ** k / t / g  # (h/s)^(k-1) / s, with s = m t^(1/k)
        J = Au * c
        J[:, hu] *= wh[:, None]
        J[:, ~hu] *= wg[:, None]
        return J

    r = least_squares(resid, np.log(start[used]), jac=jac, method="trf", max_nfev=max_nfev)
    c = np.zeros(A.shape[1])
    c[used] = np.exp(r.x)
    return c
