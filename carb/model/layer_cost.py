"""Per-layer convolution cost learned from a device probe, summed over a network.

A device probe (:mod:`carb.measure.probe`) times single convolutions at each precision. This module
fits, per precision, the same two-stage form CARB uses for networks: a non-negative linear roofline
over the layer's GEMM terms (:func:`carb.design.shapes.layer_terms`: multiply-adds, bytes of im2col
input, output and weights, output pixels, one call, the stem, and PyTorch's native-path weights and
aliased multiply-adds) times a learned correction (gradient-boosted trees on the log-ratio, from the
layer's shape: log2 of M, N, K, input and weight sizes, kernel, stride, batch, the power-of-two
alignment of its rows, whether PyTorch runs it natively). A network's convolution time at a precision
is the sum over its layers.

Measured on the CPU reference VM (400 probe layers per precision, 5-fold CV, MAPE per layer): fp32 15 %,
bf16 6 %, fp16 6 % (the linear roofline alone: 32 %, 13 %, 15 %).

:class:`carb.model.physics.LayerRooflinePrior` uses it for a precision no network was measured at:
the stand-in precision's prediction with its convolution time replaced by this precision's.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import BYTES_PER_ELEMENT
from carb.errors import DatasetError

#: Terms of the linear stage (columns of :func:`carb.design.shapes.layer_terms`; byte terms in MB).
LAYER_TERMS: tuple[str, ...] = ("gemm_MNK", "gemm_MK", "gemm_MN", "gemm_NK", "gemm_M", "n_ops", "stem_MNK",
                                "native_weight_MB", "native_aliased_MAC")
_BYTE_TERMS = ("gemm_MK", "gemm_MN", "gemm_NK")
#: Fewest probe rows of a precision to fit it.
MIN_ROWS = 20


def layer_design(layers: np.ndarray, batch: np.ndarray, precision: str, threads: int,
                 onednn: tuple[str, ...], stem: np.ndarray | None = None) -> np.ndarray:
    """Linear-stage design of single convolutions at one precision; shape (n, len(LAYER_TERMS)).
    ``stem``: which rows are a network's first convolution (default: those with 3 input channels)."""
    from carb.design.shapes import layer_terms

    t = layer_terms(layers, batch, np.full(len(layers), precision), threads, onednn, stem=stem)
    mb = BYTES_PER_ELEMENT[precision] / 2.0**20
    for c in _BYTE_TERMS:
        t[c] = t[c] * mb
    return t[list(LAYER_TERMS)].to_numpy(float)


def layer_features(layers: np.ndarray, batch: np.ndarray, precision: str, threads: int,
                   onednn: tuple[str, ...]) -> np.ndarray:
    """Correction-stage features of single convolutions at one precision; shape (n, 12)."""
    from carb.design.shapes import _native_mask

    a = np.asarray(layers, dtype=float)
    b = np.asarray(batch, dtype=float)
    m, n, k, ker, stride, h = (a[:, i] for i in range(6))
    nbytes = BYTES_PER_ELEMENT[precision]
    native = (_native_mask(a, b, threads) & (precision == "fp32")) if precision in onednn else ((ker > 0) & (m > 1))
    row = np.maximum(m * nbytes, 1).astype(np.int64)
    align = np.log2((row & -row).astype(float))
    cin = k / np.maximum(ker, 1) ** 2
    lg = lambda v: np.log2(np.maximum(v, 1.0))  # noqa: E731
    return np.column_stack([lg(m), lg(n), lg(k), ker, stride, lg(h), align, lg(b), native.astype(float),
                            lg(m * n * k * b), lg(n * k), lg(cin * h * h * b)])


def unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(uniq, inverse)`` with ``uniq[inverse] == a`` for a 2-D array ``a`` (n, k): its distinct rows, in order
    of first appearance, found by hashing each row's bytes (``np.unique(a, axis=0)`` sorts them instead: 0.1 s
    for the 80,000 layer rows of one extrapolation split, 10 ms here). Rows equal as numbers but not as bytes
    (``-0.0``, NaNs) count as distinct, which only costs a repeated prediction."""
    import pandas as pd

    a = np.ascontiguousarray(a)
    keys = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    inverse, distinct = pd.factorize(keys)
    first = np.empty(len(distinct), dtype=np.int64)
    first[inverse[::-1]] = np.arange(len(a) - 1, -1, -1)
    return a[first], inverse


class LayerCostModel:
    """Convolution time (ms) of single layers and of whole networks, per precision, fitted on a device
    probe table (:data:`carb.measure.probe.PROBE_COLUMNS`).

    threads: torch threads the probe ran with (PyTorch's CPU dispatch depends on it; taken from the
    table when it has one value). onednn: the precisions oneDNN runs on the device
    (:func:`carb.design.shapes.onednn_precisions`). The remaining parameters go to the correction's
    ``HistGradientBoostingRegressor``.

    Fitted attributes: ``precisions_``, ``coef_`` (precision -> linear coefficients, ms per unit of
    :data:`LAYER_TERMS`), ``correction_`` (precision -> fitted trees), ``device_id_``, ``n_rows_``.
    """

    def __init__(self, threads: int = 1, onednn: tuple[str, ...] = ("fp32", "bf16"), max_iter: int = 200,
                 learning_rate: float = 0.05, min_samples_leaf: int = 8, random_state: int = 0):
        self.threads = threads
        self.onednn = onednn
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.min_samples_leaf = min_samples_leaf
        self.random_state = random_state

    def fit(self, probe: pd.DataFrame) -> LayerCostModel:
        """Fit each precision of ``probe`` with at least :data:`MIN_ROWS` timed rows. Raises
        :class:`DatasetError` naming the missing columns, or when no precision has enough rows."""
        from carb.compute import limited

        with limited(len(probe)):
            return self._fit(probe)

    def _fit(self, probe: pd.DataFrame) -> LayerCostModel:
        from sklearn.ensemble import HistGradientBoostingRegressor

        from carb.data.probes import PROBE_COLUMNS, conv_rows
        from carb.design.shapes import layer_array
        from carb.model.nnls import nnls_relative

        probe = conv_rows(probe)   # a probe's other kinds of operation are carb.model.op_cost's

        missing = [c for c in PROBE_COLUMNS[:11] if c not in probe.columns and c != "backend"]
        if missing:
            raise DatasetError(f"device probe: column(s) {missing} missing; a probe has {list(PROBE_COLUMNS)}")
        t = pd.to_numeric(probe["threads"], errors="coerce").dropna().unique()
        self.threads_ = int(t[0]) if len(t) == 1 else int(self.threads)
        ids = probe["device_id"].astype(str).unique()
        self.device_id_ = str(ids[0]) if len(ids) == 1 else None
        self.coef_, self.correction_, self.n_rows_ = {}, {}, {}
        for p, g in probe.groupby(probe["precision"].astype(str)):
            y = pd.to_numeric(g["time_ms"], errors="coerce").to_numpy(float)
            ok = np.isfinite(y) & (y > 0)
            if ok.sum() < MIN_ROWS or p not in BYTES_PER_ELEMENT:
                continue
            a, b = layer_array(g[ok]), g.loc[ok, "batch_size"].to_numpy(float)
            A = layer_design(a, b, p, self.threads_, tuple(self.onednn))
            c = nnls_relative(A, y[ok])
            lin = np.maximum(A @ c, 1e-9)
            trees = HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                                  min_samples_leaf=self.min_samples_leaf,
                                                  random_state=self.random_state)
            trees.fit(layer_features(a, b, p, self.threads_, tuple(self.onednn)), np.log(y[ok] / lin))
            self.coef_[p], self.correction_[p], self.n_rows_[p] = c, trees, int(ok.sum())
        if not self.coef_:
            raise DatasetError(f"device probe: no precision has {MIN_ROWS} or more timed rows")
        self.precisions_ = sorted(self.coef_)
        self._cache: dict[tuple, float] = {}
        return self

    def layer_ms(self, layers: np.ndarray, batch: np.ndarray, precision: str,
                 stem: np.ndarray | None = None) -> np.ndarray:
        """ms per call of each convolution (:data:`carb.design.shapes.CONV_COLUMNS` rows, classifier rows
        included as given) at ``batch`` (one per row) and ``precision``; shape (n,). ``stem``: which rows
        are a network's first convolution (default: those with 3 input channels)."""
        if precision not in self.coef_:
            raise DatasetError(f"device probe: precision {precision!r} was not probed; probed: {self.precisions_}")
        on = tuple(self.onednn)
        lin = np.maximum(layer_design(layers, batch, precision, self.threads_, on, stem) @ self.coef_[precision], 1e-9)
        return lin * np.exp(self.correction_[precision].predict(layer_features(layers, batch, precision,
                                                                                 self.threads_, on)))

    def network_ms(self, X: pd.DataFrame, precision: str) -> np.ndarray:
        """Convolution time (ms per batch) of each row's network (knob columns) at its batch size, run at
        ``precision`` whatever the row's own precision: the sum over its convolutions (classifier left
        out); shape (n,). Cached per (architecture, batch, precision); each distinct (layer, batch) is
        predicted once."""
        from carb.design.shapes import _args, _walk, architectures

        codes, cfgs = architectures(X)
        names = {u: _args(c) for u, c in cfgs.items()}   # the cache outlives the call: key by the knobs
        keys = [names[u] for u in codes.tolist()]
        batch = pd.to_numeric(X["batch_size"], errors="coerce").to_numpy(float)
        cache = self.__dict__.setdefault("_cache", {})
        out = np.empty(len(X))
        todo: dict[tuple, np.ndarray] = {}
        for i, k in enumerate(keys):
            key = (k, batch[i], precision)
            if key not in cache and key not in todo:
                a = _walk(*k)[0]
                todo[key] = a[a[:, 3] > 0]
        if todo:   # one call for every new network: the trees' per-call overhead dominates small batches
            keys_new = list(todo)
            stacked = np.concatenate([todo[q] for q in keys_new])
            b = np.concatenate([np.full(len(todo[q]), q[1]) for q in keys_new])
            first = np.concatenate([np.arange(len(todo[q])) == 0 for q in keys_new])   # the stem of each network
            rows = np.column_stack([stacked, b, first])
            uniq, inverse = unique_rows(rows)   # networks share most of their layers
            ms = self.layer_ms(uniq[:, :6], uniq[:, 6], precision, stem=uniq[:, 7] > 0)[inverse]
            ends = np.cumsum([len(todo[q]) for q in keys_new])
            for q, s in zip(keys_new, np.split(ms, ends[:-1])):
                cache[q] = float(s.sum())
        for i, k in enumerate(keys):
            out[i] = cache[(k, batch[i], precision)]
        return out

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_cache", None)   # rebuilt on demand
        return state

    def to_dict(self) -> dict[str, Any]:
        """What the model card shows: device, threads, precisions and rows per precision."""
        return {"device_id": getattr(self, "device_id_", None), "threads": getattr(self, "threads_", None),
                "rows": dict(getattr(self, "n_rows_", {}))}
