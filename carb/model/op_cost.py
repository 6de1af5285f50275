"""Per-operation cost of any network's layer table, fitted per kind of operation on a device probe.

A device probe (:mod:`carb.measure.probe`) times single operations of each kind a model zoo is made of
(:data:`carb.data.probes.PROBE_KINDS`: regular, depthwise, grouped and pointwise convolutions, linear layers,
batched matrix products, attention, element-wise, activation and normalisation operations) at each
precision. :class:`OpCostModel` fits, per (kind, precision), a non-negative roofline on the operation's
work in the layer table's own conventions (:func:`carb.data.probes.op_work`, :mod:`carb.design.trace`):

    time_ms = c_call + c_mac * MMAC + c_byte * MB      (MB: activations read, parameters read, outputs written)

(compute kinds; the memory-bound kinds have no multiply-add term), by least squares on relative error
(:func:`carb.model.nnls.nnls_relative`). A network's time is the sum over the rows of its layer table
(:meth:`OpCostModel.table_ms`); a zoo configuration's (:func:`probe_op_ms`) follows from two numbers per
(network, input size, precision), because the activation terms scale with the batch and the parameter
bytes, and the whole work of a state-derived operation (the layer table's ``state`` rows), do not. A kind
the probe has too few rows of borrows the nearest kind's costs (:data:`FALLBACK`); a precision it never
timed, or a kind with no stand-in, gives NaN with the reason in ``missing_``.

This is the probe-based per-operation latency term of issue 43 item 3: ``probe_op_ms`` is a feature a zoo
fit may name (:func:`carb.model.cascade_data.with_zoo_kinds` adds it from the rows' device probe).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from carb.data.probes import COMPUTE_KINDS, PROBE_KINDS
from carb.errors import DatasetError

#: The layer table's kinds (:data:`carb.design.trace.KINDS`) -> the probe kind whose costs they take; views
#: (``reshape``) cost nothing. Pooling, reductions, copies and concatenations move bytes like an
#: element-wise operation.
PROBE_KIND_OF: dict[str, str | None] = {
    "conv_regular": "conv_regular", "conv_grouped": "conv_grouped", "conv_depthwise": "conv_depthwise",
    "conv_pointwise": "conv_pointwise", "linear": "linear", "matmul": "matmul", "sdpa": "sdpa", "norm": "norm",
    "activation": "activation", "elementwise": "elementwise", "pool": "elementwise", "reduce": "elementwise",
    "copy": "elementwise", "concat": "elementwise", "other": "elementwise", "reshape": None}
#: Where a probe kind without enough rows borrows its costs, nearest first.
FALLBACK: dict[str, tuple[str, ...]] = {
    "conv_regular": ("conv_pointwise", "conv_grouped"), "conv_pointwise": ("conv_regular", "linear"),
    "conv_grouped": ("conv_regular", "conv_depthwise"), "conv_depthwise": ("conv_grouped", "conv_regular"),
    "linear": ("matmul", "conv_pointwise", "conv_regular"), "matmul": ("linear", "conv_pointwise", "conv_regular"),
    "sdpa": ("matmul", "linear"), "elementwise": ("activation", "norm"), "activation": ("elementwise", "norm"),
    "norm": ("elementwise", "activation")}
#: Coefficient names: ms per call, per million multiply-adds, per MB moved (2**20 bytes).
TERMS: tuple[str, ...] = ("ms_per_call", "ms_per_MMAC", "ms_per_MB")
#: Fewest timed rows of a (kind, precision) to fit its own costs.
MIN_OP_ROWS = 4
#: The feature :func:`probe_op_ms` computes (ms per batch).
PROBE_OP_FEATURE = "probe_op_ms"
MB = float(2 ** 20)


def op_design(kind: np.ndarray, macs: np.ndarray, moved_bytes: np.ndarray) -> np.ndarray:
    """(n, 3) design of :data:`TERMS`: one call, million multiply-adds (0 for memory-bound kinds) and MB moved.
    ``kind``: probe kinds (n,); ``macs``, ``moved_bytes`` (n,)."""
    compute = np.isin(np.asarray(kind, dtype=str), COMPUTE_KINDS)
    return np.column_stack([np.ones(len(macs)), np.where(compute, np.asarray(macs, float) / 1e6, 0.0),
                            np.asarray(moved_bytes, float) / MB])


def _cv_mape(A: np.ndarray, y: np.ndarray, folds: int = 5) -> float:
    """Mean |pred / y - 1| of :func:`carb.model.nnls.nnls_relative` fits over ``folds`` interleaved folds
    (leave-one-out under ``folds`` rows); NaN under 3 rows."""
    from carb.model.nnls import nnls_relative

    n = len(y)
    if n < 3:
        return float("nan")
    k = min(folds, n)
    fold = np.arange(n) % k
    err = np.empty(n)
    for f in range(k):
        c = nnls_relative(A[fold != f], y[fold != f])
        err[fold == f] = np.abs(A[fold == f] @ c / y[fold == f] - 1.0)
    return float(err.mean())


class OpCostModel:
    """Time (ms) of single operations of any kind, and of whole layer tables, per precision, fitted on a
    device probe table (:data:`carb.data.probes.PROBE_COLUMNS`, every kind: ``load_probe(..., kinds=None)``).

    min_rows: fewest timed rows of a (kind, precision) fitted on its own (fewer: :data:`FALLBACK`).
    Fitted attributes: ``coef_`` ({(kind, precision): (3,) :data:`TERMS`}), ``n_rows_`` and ``cv_mape_``
    (same keys: rows, and the 5-fold relative error of the fit per call), ``precisions_``, ``device_id_``,
    ``threads_``.
    """

    def __init__(self, min_rows: int = MIN_OP_ROWS):
        self.min_rows = min_rows

    def fit(self, probe: pd.DataFrame) -> OpCostModel:
        """Fit every (kind, precision) of ``probe`` with at least ``min_rows`` finite positive times. Raises
        :class:`DatasetError` naming the missing columns, or when nothing could be fitted."""
        from carb.data.probes import OP_COLUMNS, PROBE_COLUMNS, op_work, with_op_columns
        from carb.model.nnls import nnls_relative

        missing = [c for c in PROBE_COLUMNS if c not in OP_COLUMNS and c != "backend" and c not in probe.columns]
        if missing:
            raise DatasetError(f"device probe: column(s) {missing} missing; a probe has {list(PROBE_COLUMNS)}")
        t = with_op_columns(probe)
        work = op_work(t)
        y = pd.to_numeric(t["time_ms"], errors="coerce").to_numpy(float)
        ok = np.isfinite(y) & (y > 0) & np.isfinite(work.to_numpy(float)).all(axis=1)
        ids = t["device_id"].astype(str).unique()
        threads = pd.to_numeric(t["threads"], errors="coerce").dropna().unique()
        self.device_id_ = str(ids[0]) if len(ids) == 1 else None
        self.threads_ = int(threads[0]) if len(threads) == 1 else None
        self.coef_, self.n_rows_, self.cv_mape_ = {}, {}, {}
        kind, prec = t["kind"].to_numpy(str), t["precision"].astype(str).to_numpy()
        moved = (work["act_bytes"] + work["weight_bytes"] + work["out_bytes"]).to_numpy(float)
        for (k, p), idx in pd.Series(np.arange(len(t))).groupby([kind, prec]).groups.items():
            rows = np.asarray(idx)[ok[np.asarray(idx)]]
            if k not in PROBE_KINDS or len(rows) < self.min_rows:
                continue
            A = op_design(kind[rows], work["macs"].to_numpy(float)[rows], moved[rows])
            self.coef_[(k, p)] = nnls_relative(A, y[rows])
            self.n_rows_[(k, p)] = int(len(rows))
            self.cv_mape_[(k, p)] = _cv_mape(A, y[rows])
        if not self.coef_:
            raise DatasetError(f"device probe: no kind and precision has {self.min_rows} or more timed rows")
        self.precisions_ = sorted({p for _, p in self.coef_})
        return self

    def costs(self, kind: str, precision: str) -> tuple[np.ndarray | None, str]:
        """``(coefficients, "")`` of a probe kind at a precision (its own, else :data:`FALLBACK`'s first fitted
        one), or ``(None, why not)``."""
        for k in (kind, *FALLBACK.get(kind, ())):
            c = self.coef_.get((k, precision))
            if c is not None:
                return c, ""
        if precision not in getattr(self, "precisions_", []):
            return None, f"precision {precision} was not probed (probed: {self.precisions_})"
        stand_ins = ", ".join(FALLBACK.get(kind, ())) or "a stand-in"
        return None, f"no {kind} operation (nor {stand_ins}) was probed at {precision}"

    def row_costs(self, kinds: Iterable[str], precision: str) -> np.ndarray:
        """(n, 3) :data:`TERMS` coefficients of operations of layer-table ``kinds`` (:data:`PROBE_KIND_OF`) at
        ``precision``: zeros for views, the multiply-add one zero for memory-bound kinds, NaN where the kind has
        no costs (:meth:`costs`)."""
        kinds = np.asarray(list(kinds), dtype=object)
        out = np.zeros((len(kinds), len(TERMS)))
        for k in pd.unique(kinds):
            pk = PROBE_KIND_OF.get(str(k), "elementwise")
            if pk is not None:
                c, _ = self.costs(pk, precision)
                out[kinds == k] = np.nan if c is None else (c if pk in COMPUTE_KINDS else c * [1.0, 0.0, 1.0])
        return out

    def op_ms(self, kinds: Iterable[str], macs: Any, moved_bytes: Any, precision: str) -> np.ndarray:
        """ms per call of operations of layer-table ``kinds`` (views cost 0) with ``macs`` multiply-adds and
        ``moved_bytes`` bytes read and written, at ``precision``; shape (n,); NaN where a kind has no costs."""
        C = self.row_costs(kinds, precision)
        return C[:, 0] + C[:, 1] * np.asarray(macs, float) / 1e6 + C[:, 2] * np.asarray(moved_bytes, float) / MB

    def table_ms(self, table: pd.DataFrame, precision: str | None = None) -> float:
        """The sum over a layer table's rows (:func:`carb.design.trace.trace`, whole batch) of their time per call,
        ms; at the table's precision (``table.attrs``) unless given. NaN when a row's kind has no costs."""
        p = precision or table.attrs.get("precision", "fp32")
        moved = (table["bytes_read"] + table["bytes_written"]).to_numpy(float)
        return float(self.op_ms(table["kind"].to_numpy(str), table["macs"].to_numpy(float), moved, p).sum())

    def batch_terms(self, table: pd.DataFrame, precision: str) -> tuple[float, float]:
        """``(fixed_ms, per_image_ms)`` of a batch-1 layer table: its time at batch ``B`` is ``fixed + B x
        per_image`` (calls and parameter bytes once per batch; multiply-adds and activation bytes per image,
        except on state-derived rows, :mod:`carb.design.trace`'s ``state``: their multiply-adds and bytes
        are once per batch too, as the tracer counts them). NaN when a row's kind has no costs at
        ``precision``."""
        C = self.row_costs(table["kind"].to_numpy(str), precision)
        state = table["state"].eq(True).to_numpy() if "state" in table.columns else np.zeros(len(table), bool)
        params = table["param_bytes"].to_numpy(float) / MB
        moved = (table["bytes_read"] + table["bytes_written"]).to_numpy(float) / MB
        mmac = table["macs"].to_numpy(float) / 1e6
        once_mmac, once_mb = np.where(state, mmac, 0.0), np.where(state, moved, params)
        fixed = float(np.sum(C[:, 0] + C[:, 1] * once_mmac + C[:, 2] * once_mb))
        return fixed, float(np.sum(C[:, 1] * (mmac - once_mmac) + C[:, 2] * (moved - once_mb)))

    def to_dict(self) -> dict[str, Any]:
        """What a model card shows: device, threads, and per ``kind/precision`` the rows, the costs and the
        cross-validated relative error per call."""
        return {"device_id": getattr(self, "device_id_", None), "threads": getattr(self, "threads_", None),
                "kinds": {f"{k}/{p}": {"rows": self.n_rows_[(k, p)], "cv_mape": self.cv_mape_[(k, p)],
                                       **dict(zip(TERMS, map(float, self.coef_[(k, p)])))}
                          for k, p in sorted(getattr(self, "coef_", {}))}}


def probe_op_ms(frame: pd.DataFrame, model: OpCostModel) -> np.ndarray:
    """The probe-based per-operation time (ms per batch) of zoo configurations: for each of the n rows of
    ``frame`` (columns ``model_name``, ``input_size``, ``batch_size``, ``precision``) the sum over its layer
    table (:func:`carb.design.trace.trace`, batch 1, traced once per network and size, cached on disk)
    of ``model``'s per-operation costs at the row's batch and precision; shape (n,). NaN where the network
    cannot be traced or the probe cannot cost one of its operations at that precision."""
    from carb.design.trace import trace
    from carb.errors import ZooError

    n = len(frame)
    out = np.full(n, np.nan)
    if not n:
        return out
    prec = (frame["precision"].astype(str) if "precision" in frame.columns
            else pd.Series(["fp32"] * n, index=frame.index))
    keys = pd.Series(list(zip(frame["model_name"].astype(str), pd.to_numeric(frame["input_size"]).astype(int), prec)),
                     index=frame.index)
    codes, uniq = pd.factorize(keys)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    for j, (name, size, p) in enumerate(uniq):
        try:
            table = trace(name, (1, 3, int(size), int(size)), precision=p)
        except ZooError:
            continue
        fixed, per = model.batch_terms(table, p)
        rows = codes == j
        out[rows] = fixed + batch[rows] * per
    return out


_FITTED: dict[tuple, tuple[OpCostModel | None, str]] = {}


def device_op_model(device_id: str, threads: int | None = None) -> tuple[OpCostModel | None, str]:
    """``(OpCostModel fitted on every kind of the device's probe on disk, "")`` (rows of ``threads`` torch
    threads when given), or ``(None, why not)``; cached per (device, threads, probe files and their times)
    for the process."""
    from carb.data.probes import load_probe, probe_paths

    stamp = tuple((str(p), p.stat().st_mtime_ns) for p in probe_paths() if p.exists())
    key = (str(device_id), threads, stamp)
    if key not in _FITTED:
        try:
            table = load_probe(str(device_id), kinds=None)
        except DatasetError as e:
            _FITTED[key] = (None, str(e))
            return _FITTED[key]
        if table is not None and threads is not None:
            table = table[pd.to_numeric(table["threads"], errors="coerce") == threads]
        if table is None or table.empty:
            at = f" at {threads} thread(s)" if threads else ""
            _FITTED[key] = (None, f"no device probe of device {device_id}{at}")
        else:
            try:
                _FITTED[key] = (OpCostModel().fit(table), "")
            except DatasetError as e:
                _FITTED[key] = (None, str(e))
    return _FITTED[key]


def with_probe_op_ms(X: pd.DataFrame) -> pd.DataFrame:
    """``X`` (zoo rows with ``device_id``, and ``threads`` where measured) with :data:`PROBE_OP_FEATURE` added:
    :func:`probe_op_ms` from the :func:`device_op_model` of each device (NaN for a device without a probe
    that can cost its operations). One-line :class:`DatasetError` when ``X`` has no ``device_id`` column
    (the device whose probe times the operations)."""
    from carb.model.encoding import with_columns

    if "device_id" not in X.columns:
        raise DatasetError(f"feature {PROBE_OP_FEATURE!r} needs the rows' device_id (the device whose probe times "
                           "the operations); the rows have none")
    out = np.full(len(X), np.nan)
    threads = (pd.to_numeric(X["threads"], errors="coerce") if "threads" in X.columns
               else pd.Series(np.nan, index=X.index))
    dev = X["device_id"].astype(str)
    for (d, t), idx in X.groupby([dev, threads.fillna(-1)]).groups.items():
        model, _ = device_op_model(d, None if t == -1 else int(t))
        if model is not None:
            pos = X.index.get_indexer(idx)
            out[pos] = probe_op_ms(X.loc[idx], model)
    return with_columns(X, {PROBE_OP_FEATURE: out})
