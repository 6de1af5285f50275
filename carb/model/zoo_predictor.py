"""``ZooLatencyModel`` behind the interface the cascade offers (zwire): what ``carb-train data=timm_zoo`` fits
by default (``data.estimator: zoo_latency``), ``carb.load_model(uri).predict(...)`` and ``carb-screen space=zoo``
score with.

:class:`ZooLatencyPredictor` wraps :class:`carb.model.zoo_latency.ZooLatencyModel` fitted on one device's rows
of timm's published benchmark (latency only) and predicts named networks (``timm:<name>``, a bare timm name,
``tv:<name>``, an ``nn.Module``) at any ``batch_size`` / ``precision`` / ``input_size``:

- **Features.** A network the device's file timed at that input size takes the file's published columns
  (``gmacs_per_image``, ``params``, ``macts_M_per_image``) and the shipped layer table's (``tr_*``, joined by
  :func:`carb.data.importers.timm_zoo.with_trace` on the graph the file timed); any other network is traced
  (:func:`layer_row`: the columns ``scripts/data/zoo_trace_features.py`` ships, from
  :func:`carb.design.trace.trace` on the meta device) and its totals stand in for the published ones
  (``macs``, ``params``, ``activations``). ``features_source`` says which (``published`` | ``traced``).
  The shipped data has no module census (``carb/data/timm-zoo-census.csv`` is not shipped), so the fitted
  model reads none and none is built here.
- **Intervals.** 90 % (``coverage``) split-conformal bands on the log-ratios of family-grouped
  cross-validation (``folds`` groups of whole families held out; families: the leading letters of the name,
  :func:`carb.data.importers.timm_zoo.model_family`): what a family never seen gets. ``interval_`` records
  the band, the rows and the number of families it came from.
- **Domain.** ``in_domain`` False with the reason in ``outside`` where a row is outside what was fitted: a
  precision other than the file's, a batch size or input size outside the file's range, a layer kind (a
  term of the additive base) no training row had; ``new_architecture`` where the family was not in the
  training rows (the band is the one for unseen families, so such a row stays in domain).
- **Output.** The columns :meth:`carb.analysis.predictor.Predictor.predict` gives for a zoo cascade
  (``pred_latency_ms`` / ``lo_latency_ms`` / ``hi_latency_ms`` per batch, ``pred_latency_ms_per_image``,
  the domain flags), ``pred_energy_J`` / ``pred_peak_memory_MB`` NaN with the reason in ``not_predicted``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import ConfigError, DatasetError, ZooError

#: The estimators ``data.estimator`` chooses between for ``data=timm_zoo``.
ESTIMATORS: tuple[str, ...] = ("auto", "zoo_latency", "cascade")
#: Why energy and memory are NaN in this model's frames.
NOT_PREDICTED = "energy_J, peak_memory_MB: not predicted (ZooLatencyModel: timm's files publish latency only)"
#: The published columns a traced network takes from its layer table: ``(published, tracer key, divisor)``.
#: Activations by timm's definition (:func:`timm_activations`), not the tracer's ``activations``.
TRACED_TOTALS: tuple[tuple[str, str, float], ...] = (("gmacs_per_image", "macs", 1e9), ("params", "params", 1.0),
                                                     ("macts_M_per_image", "timm_activations", 1e6))
#: :func:`layer_row`'s keys that are no ``tr_*`` feature (the shipped trace table has no such column).
NOT_FEATURES: tuple[str, ...] = ("timm_activations",)
#: The timm settings of the device's file each predicted row takes (autocast, eager, torch version, ...).
CONTEXT_COLUMNS: tuple[str, ...] = ("device_kind", "timm_precision", "compile", "torch_version", "memory_layout",
                                    "source_file", "device_name")


def estimator_of(value: Any, device_kind: str) -> str:
    """The estimator ``data.estimator`` (``value``, one of :data:`ESTIMATORS`; None: ``auto``) gives for timm's file
    of a device of kind ``device_kind`` (``gpu`` | ``cpu``): ``auto`` is ``zoo_latency`` on every file, the GPU
    files (the leave-one-family-out comparison of docs/MODEL.md, zcasc) and the CPU file (6 folds of families,
    zcmp: pooled, families within 20 % and worst family all better than the cascade's). A bad value: one
    :class:`ConfigError` line naming the key and the allowed values."""
    value = "auto" if value is None else value
    if value not in ESTIMATORS:
        raise ConfigError(f"data.estimator: {value!r} is not allowed; allowed: {', '.join(ESTIMATORS)}")
    if value == "auto":
        return "zoo_latency"   # on every device kind (docs/MODEL.md: zcasc for a GPU, zcmp for the CPU file)
    return str(value)


def device_settings(conf: Mapping[str, Any], device_kind: str) -> dict[str, Any]:
    """``ZooLatencyModel``'s keyword settings from ``conf/zoo_latency/default.yaml``'s dict ``conf``: its keys
    with the ``per_device.<device_kind>`` section's set keys on top (as ``scripts/bench/zoo.py`` reads them)."""
    conf = dict(conf)
    conf.pop("cpu_parts", None)   # the layer-table columns' thresholds (scripts/data/zoo_trace_features.py), not a setting
    own = dict((conf.pop("per_device", None) or {}).get(device_kind) or {})
    return conf | {k: v for k, v in own.items() if v is not None}


def timm_rows(device: str, bench: pd.DataFrame | None = None) -> pd.DataFrame:
    """One device's rows of timm's benchmark with a latency (``bench``: :func:`load_zoo_bench`'s columns; default
    the shipped main set), with the layer-table features on the graph the file timed (:func:`with_trace`),
    ``family`` (:func:`model_family`) and ``model_name`` ``timm:<model>``. An unknown device: one
    :class:`DatasetError` line naming the devices."""
    from carb.data.importers.timm_zoo import bench_devices, load_zoo_bench, model_family, with_trace

    bench = load_zoo_bench() if bench is None else bench
    devices = bench_devices(bench)
    if device not in devices:
        raise DatasetError(f"data.device: {device!r} is not in timm's benchmark; allowed: {', '.join(devices)}")
    rows = bench[(bench["device_name"] == device) & bench["latency_ms"].notna()].reset_index(drop=True)
    rows = _quiet_join(with_trace, rows).copy()
    rows["family"] = rows["model"].map(model_family)
    rows["model_name"] = "timm:" + rows["model"].astype(str)
    return rows


def layer_columns(table: pd.DataFrame, thresholds: Mapping[str, float]) -> dict[str, float]:
    """The shipped trace table's feature columns of one layer table (:func:`carb.design.trace.trace`'s rows of one
    network): :func:`carb.design.trace.summarize`, :func:`gemm_regimes`, :func:`amp_memory_split`, their
    state-derived parts (``state_<column>``), and the CPU and GPU terms (:func:`carb.model.zoo_latency_cpu.cpu_parts`
    with ``thresholds``, ``conf/zoo_latency/default.yaml``'s ``cpu_parts``; :func:`carb.model.zoo_latency.gpu_parts`).
    The one place these columns are composed: ``scripts/data/zoo_trace_features.py`` writes them, :func:`layer_row`
    traces a network outside timm's files with them (a new column goes here)."""
    from carb.design.trace import summarize
    from carb.design.zoo_features import amp_memory_split, gemm_regimes, state_parts
    from carb.model.zoo_latency import gpu_parts
    from carb.model.zoo_latency_cpu import cpu_parts

    return (summarize(table) | gemm_regimes(table) | amp_memory_split(table)
            | state_parts(table, summarize, gemm_regimes, amp_memory_split) | cpu_parts(table, thresholds)
            | gpu_parts(table))


def traced_layer(network: Any, input_size: int, reparam: bool = False,
                 thresholds: Mapping[str, float] | None = None
                 ) -> tuple[dict[str, float], pd.DataFrame, dict[str, int] | None]:
    """``(columns, table, settings)`` of one network (a zoo name or an ``nn.Module``) at ``input_size`` px (batch 1,
    fp32, 3 channels; ``reparam``: the folded inference graph where the network has one): :func:`layer_columns`
    of its layer table, the table, and the constructor settings it was traced with (None, or ``{"img_size":
    input_size}``: a named network the tracer refuses at its defaults is tried once more so, for fixed position
    embeddings). Refused both ways: :class:`ZooError` with the first reason (an error of another type: one line
    naming the network, the type and the message's first line; a :class:`ConfigError` / :class:`DatasetError`,
    e.g. a threshold missing, is raised as it is)."""
    from carb.design.trace import trace

    size = int(input_size)
    label = network if isinstance(network, str) else type(network).__name__
    reasons = []
    for settings in ((None,) if not isinstance(network, str) else (None, {"img_size": size})):
        try:
            table = trace(network, (1, 3, size, size), precision="fp32", settings=settings, reparam=bool(reparam))
            columns = layer_columns(table, thresholds or {})
            return columns | hidden_copy_columns(network, size, settings, columns, bool(reparam)), table, settings
        except ZooError as e:
            reasons.append(str(e))
        except (ConfigError, DatasetError):   # a bad setting (e.g. a missing threshold) is no network's fault
            raise
        except Exception as e:  # noqa: BLE001 - a tracer fault on one network is its reason, not a crash
            reasons.append(f"model {label!r}: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    raise ZooError(reasons[0])


def hidden_copy_columns(network: Any, input_size: int, settings: dict[str, int] | None, columns: Mapping[str, float],
                        folded: bool) -> dict[str, float]:
    """The hidden-copy columns the shipped trace table has beside :func:`layer_columns`' (``scripts/data/
    zoo_trace_features.py --hidden-copies`` and ``--hidden-copies-cuda``): ``bytes_hidden_copy`` / ``n_hidden_copy``
    (:func:`carb.design.zoo_features.hidden_copy_bytes`, the meta strides) and their ``_cl`` twins with
    ``flops_conv_dw_native_cl`` (as cuDNN lays tensors out), by the script's rules: the ``_cl`` forward only where
    the meta one finds a copy (elsewhere the meta values stand), and a folded graph keeps its own table's
    ``flops_conv_dw_native`` (the forward is of the plain graph). A forward that fails: NaN (the model then
    leaves those terms out for the row, as for a row of the shipped table)."""
    from carb.design.zoo_features import hidden_copy_bytes

    try:
        meta = hidden_copy_bytes(network, input_size, settings)
        cl = hidden_copy_bytes(network, input_size, settings, cuda_layout=True) if meta["bytes_hidden_copy"] > 0 \
            else meta | {"flops_conv_dw_native": float(columns.get("flops_conv_dw_native", np.nan))}
    except Exception:  # noqa: BLE001 - as the script: a failed forward is a missing value, not a lost prediction
        nan = float("nan")
        meta, cl = {"bytes_hidden_copy": nan, "n_hidden_copy": nan}, {"bytes_hidden_copy": nan, "n_hidden_copy": nan,
                                                                       "flops_conv_dw_native": nan}
    dw = float(columns.get("flops_conv_dw_native", np.nan)) if folded else float(cl["flops_conv_dw_native"])
    return {"bytes_hidden_copy": float(meta["bytes_hidden_copy"]), "n_hidden_copy": float(meta["n_hidden_copy"]),
            "bytes_hidden_copy_cl": float(cl["bytes_hidden_copy"]), "n_hidden_copy_cl": float(cl["n_hidden_copy"]),
            "flops_conv_dw_native_cl": dw}


def layer_row(network: Any, input_size: int, reparam: bool = False,
              thresholds: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The shipped trace table's columns of one network (a zoo name or an ``nn.Module``) at ``input_size`` px
    (:func:`traced_layer`: :func:`layer_columns`, what ``scripts/data/zoo_trace_features.py`` writes) with
    ``timm_activations`` (:func:`timm_activations`). Refused: :class:`ZooError` with the first reason."""
    columns, table, _ = traced_layer(network, input_size, reparam, thresholds)
    return columns | {"timm_activations": timm_activations(table)}


def timm_activations(table: pd.DataFrame) -> float:
    """The activation count timm's benchmark files publish (``infer_macts`` x 1e6), from a layer table (whole
    batch): fvcore's ``ActivationCountAnalysis`` (output elements of convolutions, linear layers and matrix
    products: the tracer's ``activations``, :func:`carb.design.trace.summarize`) run on timm's *unfused*
    attention, where each ``scaled_dot_product_attention`` call is two matrix products whose outputs fvcore
    counts: the scores ``Q K^T`` (``macs / (d_qk + d_v)`` elements: the row's multiply-adds are
    ``scores x (d_qk + d_v)``) and ``attn @ V`` (the row's output). Checked against fvcore on timm's models with
    ``timm.layers.set_fused_attn(False)`` and against the published column (docs/MODEL.md, zwire2). Not
    followed: fvcore skips convolutions called with ``padding='same'`` (``aten::_convolution_mode``: ConvMixer)
    and recurrent layers (Sequencer's LSTM), which the tracer counts."""
    from carb.design.trace import summarize

    acts = float(summarize(table)["activations"])
    sd = table[table["kind"] == "sdpa"]
    if not len(sd):
        return acts
    batch = int(table.attrs.get("input_shape", (1,))[0])
    dims = np.array([float(q[-1]) + float(o[-1]) for q, o in zip(sd["in_shape"], sd["out_shape"])])
    outs = np.array([float(np.prod(o)) for o in sd["out_shape"]])
    per_image = sd["macs"].to_numpy(float) / batch / dims + outs   # shapes at batch 1, macs of the whole batch
    return acts + float(per_image.sum()) * batch


def traced_features(rows: pd.DataFrame, layer: Mapping[str, Any]) -> pd.DataFrame:
    """``rows`` (one network at one input size, n batch sizes) with ``layer`` (:func:`layer_row`) as the
    ``tr_*`` columns, each state-derived part counted once per batch as :func:`with_trace` does, and the
    published totals taken from the trace (:data:`TRACED_TOTALS`)."""
    from carb.data.importers.timm_zoo import _state_once_per_batch

    cols = {f"tr_{k}": [float(v)] * len(rows) for k, v in layer.items() if np.isscalar(v) and k not in NOT_FEATURES}
    out = pd.concat([rows.reset_index(drop=True), pd.DataFrame(cols)], axis=1)
    out = _state_once_per_batch(out, [k for k in layer if not k.startswith("state_")])
    for col, key, div in TRACED_TOTALS:
        out[col] = float(layer[key]) / div
    return out


def timm_name(name: str) -> str | None:
    """The timm architecture a zoo name builds, for a look-up in timm's file: ``timm:<x>`` and a bare ``x`` ->
    ``x`` (pretrained tag dropped); a torchvision (``tv:``) or module name -> None."""
    if name.startswith("timm:"):
        return name[5:].split(".")[0]
    return None if ":" in name else name.split(".")[0]


class ZooLatencyPredictor:
    """:class:`carb.model.zoo_latency.ZooLatencyModel` behind the cascade's interface (module docstring).
    ``settings``: its keyword settings (:func:`device_settings`); ``coverage``: of the intervals; ``folds``:
    groups of whole families of the interval's cross-validation; ``seed``: their shuffle."""

    #: Read by :mod:`carb.analysis.predictor` and :mod:`carb.analysis.screening`: this model scores rows itself.
    OWN_SCORING = True
    input_kind_ = "zoo"
    targets_ = ("latency_ms",)
    intervals_ = None     # the cascade's calibration format: this model's band is ``interval_``
    domain_ = None
    test_mae_: dict[str, float] = {}
    feature_set_ = "zoo_latency"
    dropped_targets_: dict[str, str] = {}
    device_fingerprint_ = None

    def __init__(self, settings: Mapping[str, Any] | None = None, coverage: float = 0.9, folds: int = 5,
                 seed: int = 0, thresholds: Mapping[str, float] | None = None) -> None:
        self.settings = dict(settings or {})
        self.thresholds = dict(thresholds or {})
        self.coverage, self.folds, self.seed = float(coverage), int(folds), int(seed)

    # ---- fitting ---------------------------------------------------------------------------------------
    def _model(self) -> Any:
        from carb.model.zoo_latency import ZooLatencyModel

        return ZooLatencyModel(**self.settings)

    def fit(self, rows: pd.DataFrame, progress: Callable[[str], None] | None = None) -> ZooLatencyPredictor:
        """Fit on one device's rows (:func:`timm_rows`), then the intervals (:meth:`calibrate`); returns self."""
        say = progress or (lambda line: None)
        if rows["device_name"].nunique() != 1:
            raise DatasetError("ZooLatencyPredictor: the rows must be one device's (device_name)")
        say(f"fitting ZooLatencyModel on {len(rows)} rows")
        self.model_ = self._model().fit(rows)
        first = rows.iloc[0]
        self.device_name_ = str(first["device_name"])
        self.device_id_ = "timm-" + "".join(c if c.isalnum() else "-" for c in self.device_name_.lower()).strip("-")
        self.context_ = {c: first[c] for c in CONTEXT_COLUMNS if c in rows.columns}
        self.precisions_ = sorted(rows["precision"].astype(str).unique())
        self.batch_range_ = (int(rows["batch_size"].min()), int(rows["batch_size"].max()))
        self.size_range_ = (int(rows["input_size"].min()), int(rows["input_size"].max()))
        self.families_ = sorted(rows["family"].astype(str).unique())
        self.folded_ = bool(rows.get("tr_reparam", pd.Series(False)).fillna(False).astype(bool).any())
        self.terms_seen_ = self._terms_seen(rows)
        self.n_rows_ = int(len(rows))
        self.calibrate(rows, say)
        return self

    def _terms_seen(self, rows: pd.DataFrame) -> list[str]:
        """The additive base's terms (:meth:`AdditiveBase.terms`) non-zero on some training row."""
        base = getattr(self.model_, "tbase_", None)
        if base is None:
            return []
        T = base.terms(rows)
        return [c for c in T.columns if (T[c].fillna(0).to_numpy(float) != 0).any()]

    def family_folds(self, families: pd.Series) -> np.ndarray:
        """Per row (n,): its fold (0..folds-1), whole families per fold, shuffled with ``seed``."""
        names = sorted(families.astype(str).unique())
        order = np.random.default_rng(self.seed).permutation(len(names))
        fold = {names[i]: k % max(1, min(self.folds, len(names))) for k, i in enumerate(order)}
        return families.astype(str).map(fold).to_numpy(int)

    def calibrate(self, rows: pd.DataFrame, say: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
        """The interval band: ``folds`` refits, each without a group of whole families, predicting those; the
        log-ratios ``log(measured / predicted)`` of every held-out row give the equal-tailed split-conformal
        band at ``coverage`` (:func:`carb.model.intervals.conformal_bounds`). Sets and returns ``interval_``
        (``lower`` / ``upper`` log bounds, ``coverage``, ``rows``, ``families``, ``folds``, the held-out MAPE %
        and the families within 20 %: all, and those of at least 5 models, ``families5_within20`` /
        ``heldout_families5``, as ``scripts/bench/zoo.py`` counts them; ``fold_coverage``: per fold, the share of
        its held-out rows inside the band calibrated on the other folds' log-ratios only)."""
        from carb.model.intervals import conformal_bounds

        fold = self.family_folds(rows["family"])
        pred = np.full(len(rows), np.nan)
        for k in np.unique(fold):
            say(f"interval fold {k + 1}/{len(np.unique(fold))}: families held out")
            held = fold == k
            pred[held] = self._model().fit(rows[~held]).predict(rows[held])
        y = rows["latency_ms"].to_numpy(float)
        ok = np.isfinite(pred) & (pred > 0) & np.isfinite(y) & (y > 0)
        r = np.log(y[ok] / pred[ok])
        lo, hi = conformal_bounds(r, self.coverage)
        ape = pd.Series(np.abs(pred[ok] / y[ok] - 1) * 100, index=rows.index[ok])
        fam = ape.groupby(rows.loc[ok, "family"].astype(str)).mean()
        big = rows.loc[ok, "model"].groupby(rows.loc[ok, "family"].astype(str)).nunique() >= 5   # as the benchmark
        self.log_ratios_ = r
        folds = fold[ok]
        by_fold = []   # each fold's held-out rows against the band of the other folds' log-ratios only
        for k in np.unique(folds):
            a, b = conformal_bounds(r[folds != k], self.coverage)
            by_fold.append(float(((r[folds == k] >= a) & (r[folds == k] <= b)).mean()))
        self.interval_ = {"coverage": self.coverage, "lower": float(lo), "upper": float(hi), "rows": int(ok.sum()),
                          "families": int(rows.loc[ok, "family"].nunique()), "folds": int(len(np.unique(fold))),
                          "heldout_mape": float(ape.mean()), "families_within20": int((fam <= 20).sum()),
                          "heldout_families": int(len(fam)), "families5_within20": int((fam[big] <= 20).sum()),
                          "heldout_families5": int(big.sum()), "fold_coverage": by_fold,
                          "method": "split-conformal on family-grouped CV"}
        return self.interval_

    # ---- features ---------------------------------------------------------------------------------------
    def features(self, knobs: pd.DataFrame, modules: Mapping[str, Any] | None = None, traced: bool = False
                 ) -> tuple[pd.DataFrame, np.ndarray]:
        """``(features, refused)`` of zoo knob rows (n: ``model_name``, ``input_size``, ``batch_size``,
        ``precision``; ``modules``: ``{model_name: nn.Module}``): the knobs, the device file's context
        (:data:`CONTEXT_COLUMNS`), ``family``, the published totals and ``tr_*`` columns and
        ``features_source`` (``published``: the file timed this network at this size, its columns joined;
        ``traced``: :func:`layer_row`), in the rows' order; ``refused`` (n,): "" or the tracer's reason (those
        rows' features NaN). ``traced``: trace every network, also those the file has (the check that both paths
        agree)."""
        from carb.data.importers.timm_zoo import model_family, with_trace

        modules = dict(modules or {})
        knobs = knobs.reset_index(drop=True)
        names = knobs["model_name"].astype(str)
        timm = names.map(timm_name)
        pub = _published(self.device_name_)
        key = pd.MultiIndex.from_arrays([timm.fillna(""), pd.to_numeric(knobs["input_size"]).astype(int)])
        hit = key.isin(pub.index) & ~names.isin(list(modules)).to_numpy() & (not traced)
        parts, refused = [], np.full(len(knobs), "", dtype=object)
        if hit.any():
            rows = knobs[hit].assign(model=timm[hit].to_numpy())
            rows = rows.join(pub, on=["model", "input_size"])
            graph = "always" if self.folded_ else "never"   # the graph the file timed (its --reparam)
            rows = _quiet_join(with_trace, rows, reparam=graph)
            parts.append(rows.assign(features_source="published", _pos=np.flatnonzero(hit)))
        for (name, size), idx in knobs[~hit].groupby(["model_name", "input_size"], sort=False).indices.items():
            pos = np.flatnonzero(~hit)[idx]
            try:
                layer = layer_row(modules.get(name, name), int(size), self.folded_, self.thresholds)
            except ZooError as e:
                refused[pos] = str(e)
                continue
            part = traced_features(knobs.iloc[pos], layer)
            parts.append(part.assign(features_source="traced", _pos=pos))
        if not parts:
            return knobs.assign(features_source=""), refused
        F = pd.concat(parts, ignore_index=True).sort_values("_pos")
        F = knobs.join(F.set_index("_pos").drop(columns=[c for c in knobs.columns if c in F.columns]))
        F = F.assign(**{c: v for c, v in self.context_.items()})
        F["family"] = [n if n.startswith("module:") else model_family(t if isinstance(t, str) else n.split(":")[-1])
                       for t, n in zip(timm, names)]   # a module of no zoo name: a family of its own
        return F, refused

    # ---- domain and scoring -----------------------------------------------------------------------------
    def check_rows(self, F: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """``(in_domain (n,), outside (n reasons, "" inside))`` of featured rows (:meth:`features`): a precision
        the file did not time, a batch or input size outside the file's range, a term of the additive base no
        training row had (a layer kind never fitted)."""
        reasons: list[list[str]] = [[] for _ in range(len(F))]
        prec = F["precision"].astype(str).to_numpy()
        b = pd.to_numeric(F["batch_size"], errors="coerce").to_numpy(float)
        s = pd.to_numeric(F["input_size"], errors="coerce").to_numpy(float)
        (b0, b1), (s0, s1) = self.batch_range_, self.size_range_
        base = getattr(self.model_, "tbase_", None)
        unseen = None
        if base is not None and "tr_flops" in F.columns:
            T = base.terms(F)
            cols = [c for c in T.columns if c not in self.terms_seen_]
            unseen = (T[cols].fillna(0).to_numpy(float) != 0) if cols else None
        for i in range(len(F)):
            if prec[i] not in self.precisions_:
                reasons[i].append(f"precision {prec[i]} never timed on {self.device_name_} "
                                  f"(the file: {', '.join(self.precisions_)})")
            if not b0 <= b[i] <= b1:
                reasons[i].append(f"batch_size {b[i]:g} outside the fitted {b0}-{b1}")
            if not s0 <= s[i] <= s1:
                reasons[i].append(f"input_size {s[i]:g} outside the fitted {s0}-{s1}")
            if unseen is not None and unseen[i].any():
                reasons[i].append("layer kinds never fitted: " + ", ".join(np.array(cols)[unseen[i]]))
        out = ["; ".join(r) for r in reasons]
        return np.array([not r for r in out], dtype=bool), out

    def band(self, coverage: float | None = None) -> tuple[float, float]:
        """The interval's ``(lower, upper)`` log bounds at ``coverage`` (default: the calibrated one)."""
        from carb.model.intervals import conformal_bounds

        if coverage is None or float(coverage) == self.interval_["coverage"]:
            return self.interval_["lower"], self.interval_["upper"]
        return conformal_bounds(self.log_ratios_, float(coverage))

    def p_within(self, target: str, pred: np.ndarray, limit: float) -> np.ndarray:
        """``P(target <= limit)`` per row (n,) of predictions ``pred`` (n,; the target's unit per batch): the
        conformal distribution of the family-grouped log-ratios, ``#{r <= log(limit / pred)} / (m + 1)`` over
        the ``m`` log-ratios (NaN where ``pred`` is; a target this model does not predict: NaN)."""
        pred = np.asarray(pred, dtype=float)
        if target not in self.targets_:
            return np.full(len(pred), np.nan)
        r = np.sort(self.log_ratios_)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.log(float(limit) / pred)
        p = np.searchsorted(r, q, side="right") / (len(r) + 1)
        return np.where(np.isfinite(pred) & (pred > 0), p, np.nan)

    def predict_latency(self, F: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,) of featured rows, non-decreasing in batch size per network, input size
        and precision (the cumulative maximum over the rows given); NaN where a feature is missing."""
        p = np.asarray(self.model_.predict(F), dtype=float)
        key = F["model_name"].astype(str) + "|" + F["input_size"].astype(str) + "|" + F["precision"].astype(str)
        order = np.lexsort((pd.to_numeric(F["batch_size"]).to_numpy(float), key.to_numpy()))
        ser = pd.Series(p[order])
        mono = ser.groupby(key.to_numpy()[order]).cummax().to_numpy(float)
        mono = np.where(np.isfinite(p[order]), mono, np.nan)
        out = np.empty_like(p)
        out[order] = mono
        return out

    def score_rows(self, features: pd.DataFrame, coverage: float | None = None) -> pd.DataFrame:
        """``features`` (n zoo rows; knobs at least) with ``pred_latency_ms`` and ``lo_latency_ms`` /
        ``hi_latency_ms`` at ``coverage``: what :func:`carb.analysis.screening.score` gives for a cascade."""
        knobs = features[["model_name", "input_size", "batch_size", "precision"]]
        F, refused = self.features(knobs)
        ok = refused == ""
        pred = np.full(len(F), np.nan)
        if ok.any():
            pred[ok] = self.predict_latency(F[ok])
        lo, hi = self.band(coverage)
        out = features.reset_index(drop=True).copy()
        out["pred_latency_ms"] = pred
        out["lo_latency_ms"] = pred * math.exp(lo)
        out["hi_latency_ms"] = pred * math.exp(hi)
        return out

    def domain_rows(self, features: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
        """:meth:`check_rows` of zoo rows given by their knobs (featured here); a refused row is outside with the
        tracer's reason."""
        F, refused = self.features(features[["model_name", "input_size", "batch_size", "precision"]])
        ok = refused == ""
        inside = np.zeros(len(F), dtype=bool)
        reasons = list(refused.astype(str))
        if ok.any():
            i, r = self.check_rows(F[ok])
            inside[ok] = i
            for k, why in zip(np.flatnonzero(ok), r):
                reasons[k] = why
        return inside, reasons

    def summary(self) -> dict[str, Any]:
        """What the run logs about the fit (``cascade_summary.json``'s place): settings, device, the interval
        band with the rows and families it came from, the fitted additive costs."""
        base = getattr(self.model_, "tbase_", None)
        return {"estimator": "zoo_latency", "settings": self.settings, "device": self.device_name_,
                "rows": self.n_rows_, "families": len(self.families_), "precisions": self.precisions_,
                "batch_range": list(self.batch_range_), "input_size_range": list(self.size_range_),
                "folded_graph": self.folded_, "interval": self.interval_,
                "additive_costs": base.costs() if base is not None else {}}

    def __repr__(self) -> str:
        dev = getattr(self, "device_name_", "unfitted")
        return f"ZooLatencyPredictor({dev}, {json.dumps(self.settings.get('base', 'additive'))})"


def _quiet_join(join: Callable[..., pd.DataFrame], frame: pd.DataFrame, **kw: Any) -> pd.DataFrame:
    """``join(frame, **kw)`` without pandas' PerformanceWarning (:func:`with_trace` adds its ~130 columns one by
    one; the frame is copied after), which a user's ``predict`` would otherwise print."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
        return join(frame, **kw).copy()


_PUBLISHED: dict[str, pd.DataFrame] = {}


def _published(device: str) -> pd.DataFrame:
    """The published columns of one device's file, indexed by ``(model, input_size)`` (cached per process):
    ``gmacs_per_image``, ``params``, ``macts_M_per_image``, ``source_file`` (the graph decision's key)."""
    if device not in _PUBLISHED:
        from carb.data.importers.timm_zoo import load_zoo_bench

        b = load_zoo_bench()
        b = b[(b["device_name"] == device) & b["latency_ms"].notna()]
        b = b.assign(input_size=b["input_size"].astype(int)).drop_duplicates(["model", "input_size"])
        _PUBLISHED[device] = b.set_index(["model", "input_size"])[["gmacs_per_image", "params", "macts_M_per_image",
                                                                   "source_file"]]
    return _PUBLISHED[device]
