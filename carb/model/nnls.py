"""Non-negative least squares on relative error: how CARB fits every physics prior's coefficients
(network priors in :mod:`carb.model.physics`, layer costs in :mod:`carb.model.layer_cost`)."""
from __future__ import annotations

import numpy as np

from carb.errors import DatasetError


def nnls_relative(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative ``c`` minimising ``sum(((A @ c) / y - 1) ** 2)``: least squares on relative error.
    A: (n, k) non-negative design, y: (n,) positive targets. Columns are scaled before solving."""
    from scipy.optimize import nnls

    ok = np.isfinite(y) & (y > 0) & np.isfinite(A).all(axis=1)
    if ok.sum() < 2:
        raise DatasetError(f"physics prior: too few measured rows to fit ({int(ok.sum())})")
    Ar = A[ok] / y[ok, None]
    scale = np.sqrt((Ar ** 2).mean(axis=0))
    scale[~(scale > 0)] = 1.0
    c, _ = nnls(Ar / scale, np.ones(int(ok.sum())), maxiter=50 * A.shape[1])
    return c / scale
