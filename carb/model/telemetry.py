"""Runtime telemetry a candidate would show, predicted from its architecture (for screening).

Screening scores configurations nobody ran, so the runtime features the cascade was trained with
(``avg_sm_util``, ``avg_mem_util``, ``gpu_temp_C``, ``kernel_launches``) must be filled in. Batch-tier
medians (:func:`carb.data.tiers.telemetry_medians`) throw away what the architecture decides: on a GPU a
ResNet-152 at a quarter width launches ~600-1,000 kernels per batch and is launch-bound at 25-30 ms,
while a ResNet-8 launches 52; its SM utilisation is 10 % where a wide network at batch 256 keeps the
GPU at 100 %. :class:`TelemetryImputer` learns each runtime feature from the knobs and static features
of the training rows:

- ``kernel_launches`` as kernels per convolution x ``n_conv`` (the ratio depends on block type, width,
  stem and precision, i.e. on which cuDNN kernels run, but hardly on depth), so deeper networks than any
  measured one get proportionally more launches instead of a tree's last leaf;
- the others directly, clipped to the range seen in training.

Each is a small gradient-boosting regressor (scikit-learn's ``GradientBoostingRegressor``: single-threaded,
no OpenMP team to start or to spin on a busy 2-core machine; a few hundred to a few thousand rows).
A feature the device never reported
(all NaN) stays NaN, as the cascade drops it. Shapes: ``fit(X)`` takes n training rows (knobs, static
features, runtime features); ``transform(F)`` returns ``F`` (m rows) with the runtime columns replaced.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.data.schema import RUNTIME_FEATURES
from carb.design.identity import NUMERIC_KNOBS, indicator_columns
from carb.model.ensemble import member_predict

#: inputs of every imputation model: the numeric knobs (:data:`carb.design.identity.NUMERIC_KNOBS`) and static
#: features, then ``precision`` one-hot and the identity indicators; the last numeric knob (the inner width)
#: after the static features, the order the fitted trees read (it decides their tie-breaks).
_NUMERIC = (*NUMERIC_KNOBS[:-1], "flops", "params", "total_activation_MB", "max_activation_MB",
            "compute_intensity", "n_conv", NUMERIC_KNOBS[-1])
_LOG = ("flops", "params", "total_activation_MB", "max_activation_MB", "batch_size")
_PRECISIONS = ("fp32", "bf16", "fp16")


def _design(F: pd.DataFrame) -> np.ndarray:
    """(m, k) float matrix of the imputation inputs for the m rows of ``F``."""
    cols = []
    for c in _NUMERIC:
        v = pd.to_numeric(F[c], errors="coerce").to_numpy(dtype=float) if c in F.columns else np.full(len(F), np.nan)
        cols.append(np.log(np.maximum(v, 1e-9)) if c in _LOG else v)
    prec = F["precision"].astype(str).to_numpy() if "precision" in F.columns else np.full(len(F), "fp32")
    cols += [(prec == p).astype(float) for p in _PRECISIONS]
    cols += indicator_columns(F)   # bottleneck block, early stem: 0 where absent
    return np.column_stack(cols)


class TelemetryImputer:
    """Predict the runtime features of unmeasured configurations (scikit-learn style).

    Parameters: ``columns`` (runtime features to learn), ``n_estimators``/``max_depth``/``random_state``
    (the gradient-boosting regressors), ``max_rows`` (a seeded sample of at most this many training rows
    per feature: telemetry is a smooth function of a few inputs, and the fit stays well under a second). Fitted: ``models_`` ({column: regressor}), ``ranges_``
    ({column: (min, max)} seen in training), ``columns_`` (the learned ones)."""

    def __init__(self, columns: tuple[str, ...] = RUNTIME_FEATURES, n_estimators: int = 150,
                 max_depth: int = 4, random_state: int = 0, max_rows: int = 2000) -> None:
        self.columns = columns
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.random_state = random_state
        self.max_rows = max_rows

    def fit(self, X: pd.DataFrame) -> TelemetryImputer:
        """Learn each runtime column of ``X`` (n rows) that has at least 10 reported values."""
        from sklearn.ensemble import GradientBoostingRegressor

        self.models_: dict[str, Any] = {}
        self.ranges_: dict[str, tuple[float, float]] = {}
        D = _design(X)
        for c in self.columns:
            if c not in X.columns:
                continue
            y = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=float)
            ok = np.isfinite(y)
            if ok.sum() < 10:
                continue
            if ok.sum() > self.max_rows:
                keep = np.random.default_rng(self.random_state).choice(np.flatnonzero(ok), self.max_rows, replace=False)
                ok = np.zeros(len(y), dtype=bool)
                ok[keep] = True
            target = y[ok]
            if c == "kernel_launches":
                n = pd.to_numeric(X["n_conv"], errors="coerce").to_numpy(dtype=float)[ok]
                target = np.log(np.maximum(target, 1.0) / np.maximum(n, 1.0))
            m = GradientBoostingRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                          learning_rate=0.1, subsample=1.0,
                                          min_samples_leaf=min(10, max(2, int(ok.sum()) // 20)),
                                          random_state=self.random_state)
            self.models_[c] = m.fit(np.nan_to_num(D[ok], nan=-1.0), target)
            self.ranges_[c] = (float(np.min(y[ok])), float(np.max(y[ok])))
        self.columns_ = tuple(self.models_)
        return self

    def transform(self, F: pd.DataFrame, copy: bool = True) -> pd.DataFrame:
        """``F`` (m rows of knobs + static features) with each learned runtime column predicted; columns
        not learned are left as they are. ``copy=False``: in ``F`` itself (the caller's own copy)."""
        out = F.copy() if copy else F
        for c, v in self.predict_columns(F).items():
            out[c] = v
        return out

    def predict_columns(self, F: pd.DataFrame) -> dict[str, np.ndarray]:
        """Each learned runtime column for the m rows of ``F`` (knobs + static features), ``{column: (m,)}``:
        kernel launches per convolution times ``n_conv``, at least the fewest seen; the others clipped to the
        range seen. Empty when nothing was learned or ``F`` has no rows."""
        if not self.models_ or not len(F):
            return {}
        D = np.nan_to_num(_design(F), nan=-1.0)
        preds = [member_predict(m, D) for m in self.models_.values()]   # one after another: scikit-learn's
        # gradient boosting holds the GIL while it predicts, so threads only add their hand-offs (6,912 rows:
        # 30 ms in this thread, 33 ms on two)
        out = {}
        for c, p in zip(self.models_, preds):
            if c == "kernel_launches":
                p = np.exp(p) * np.maximum(pd.to_numeric(F["n_conv"], errors="coerce").to_numpy(dtype=float), 1.0)
                out[c] = np.maximum(p, self.ranges_[c][0])
            else:
                out[c] = np.clip(p, *self.ranges_[c])
        return out
