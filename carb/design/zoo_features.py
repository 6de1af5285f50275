"""Static features of any network from its layer table: the same names as a ResNet configuration's
(:data:`carb.design.features.STATIC_FEATURES`) plus the tracer's totals and per-kind sums. A zoo model's
table is its trace (:func:`carb.design.trace.trace`); a ResNet knob set's is its walk
(:func:`carb.design.trace.walk_table`, torch-free, equal to the trace of the torchvision ResNet it
describes), so one feature list serves both kinds (:func:`layer_columns` reads each row's own).

Counts follow the dataset schema: ``flops`` is fvcore's count (one per multiply-add: the tracer's
``macs``), bytes are at the configuration's precision, ``MB`` is 2**20 bytes, whole batch.

State-derived operations (the layer table's ``state`` rows: relative-position bias gathers, SwinV2's
position-bias MLP) do the same work at every batch size. A batch-1 summary keeps their part of every
count that grows with the batch as ``state_<key>`` (:func:`state_parts`), and the features at batch ``b``
are ``(s[key] - s["state_" + key]) * b + s["state_" + key]`` (:func:`at_batch`): such work counts once per
batch, not per image (before tracer 4 it was multiplied by the batch).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

#: The static columns of a zoo row, in order: :data:`carb.design.features.STATIC_FEATURES`'s names, then
#: ``activations`` (output elements of convolution, linear and matmul operations: Hidden Joules' and
#: timm's "activations"), ``peak_live_MB`` (the largest live activation bytes during the forward: the
#: liveness estimate of peak memory, parameters excluded), ``bytes_read_MB``/``bytes_written_MB`` (all
#: operations), ``n_ops`` (operations but views). ``param_size_MB`` of a zoo row is the module's state:
#: parameters and buffers (BatchNorm's running statistics, LeViT's int64 attention-bias indices), all of
#: which a forward holds; ``peak_live_MB + param_size_MB`` is the liveness estimate of the peak.
ZOO_STATIC: tuple[str, ...] = ("flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB",
                               "flops_per_param_log", "compute_intensity", "n_conv", "activations",
                               "peak_live_MB", "bytes_read_MB", "bytes_written_MB", "n_ops")
MB = float(2 ** 20)


#: A zoo frame's optional column: trace the row's network on its reparameterised inference graph
#: (:func:`carb.design.trace.reparameterize`, what timm's benchmark times with ``--reparam``; a network
#: with nothing to fold keeps its plain graph). Absent or False: the plain (training-time) graph.
REPARAM = "reparam"


def reparam_flags(frame: Any) -> Any:
    """The :data:`REPARAM` column of ``frame`` as an (n,) bool array (False where absent or missing)."""
    import numpy as np
    import pandas as pd

    if REPARAM not in frame.columns:
        return np.zeros(len(frame), dtype=bool)
    return pd.Series(frame[REPARAM]).fillna(False).astype(bool).to_numpy()


@functools.lru_cache(maxsize=4096)
def _batch1(model_name: str, input_size: int, precision: str, reparam: bool = False) -> tuple[tuple[str, Any], ...]:
    """The batch-1 summary (:func:`carb.design.trace.summarize`) plus the largest single output and the
    convolution count, as a hashable tuple (cached in memory; the tracer caches the table on disk);
    ``reparam``: of the folded inference graph (:data:`REPARAM`)."""
    from carb.design.trace import trace

    table = trace(model_name, (1, 3, int(input_size), int(input_size)), precision=precision, reparam=bool(reparam))
    return tuple(sorted(_table_summary(table).items()))


def _table_summary(table: Any) -> dict[str, Any]:
    """:func:`carb.design.trace.summarize` of a layer table plus ``max_written`` (the largest single
    output, bytes, of a row repeated per image), ``n_conv`` (convolutions), ``peak_live_frontier``
    (:func:`live_frontier`) and the state-derived rows' parts ``state_<key>`` (:func:`state_parts`)."""
    from carb.design.trace import CONV_KINDS, summarize

    s = dict(summarize(table))
    views = (table["kind"] == "reshape").to_numpy(bool) | _state_mask(table)
    s["max_written"] = float(table.loc[~views, "bytes_written"].max()) if (~views).any() else 0.0
    s["n_conv"] = int(table["kind"].isin(CONV_KINDS).sum())
    s["peak_live_frontier"] = live_frontier(table)
    for k, kinds in WEIGHT_GROUPS.items():   # parameter bytes of the kinds' layers, read once per forward whatever the batch
        s[f"param_bytes_{k}"] = float(table.loc[table["kind"].isin(kinds), "param_bytes"].sum())
    s |= state_parts(table, summarize)
    return s


def _state_mask(table: Any) -> Any:
    """Per row of a layer table (n,): whether it is state-derived (all False in a table without ``state``:
    the ResNet walk's, a pre-tracer-4 one)."""
    import numpy as np

    if "state" not in table.columns:
        return np.zeros(len(table), bool)
    return table["state"].fillna(False).to_numpy(bool)


def scales_with_batch(key: str) -> bool:
    """Whether a summary key is a sum over the table's rows that grows with the batch (FLOPs, MACs,
    activations, bytes read / written, per kind and per regime), not a count of calls, a peak or a size."""
    return key in ("flops", "macs", "activations", "bytes_read", "bytes_written") or key.startswith(("flops_",
                                                                                                      "bytes_"))


def state_parts(table: Any, *summaries: Any) -> dict[str, float]:
    """``state_<key>``: for each summary function in ``summaries`` (a layer table -> ``{key: value}``, e.g.
    :func:`carb.design.trace.summarize`, :func:`gemm_regimes`, :func:`amp_memory_split`) and each of its keys
    that :func:`scales_with_batch`, its value over the table's state-derived rows only (0 where there are none).
    Same batch and precision as ``table``."""
    mask = _state_mask(table)
    out: dict[str, float] = {}
    for fn in summaries:
        if mask.any():
            sub = table[mask]
            sub.attrs = dict(table.attrs)
            part = fn(sub)
        else:
            part = {k: 0.0 for k in fn(table.iloc[:0])} if len(table) else {}
        out |= {f"state_{k}": float(v) for k, v in part.items() if scales_with_batch(k)}
    return out


def at_batch(s: Mapping[str, Any], key: str, batch: Any) -> Any:
    """``s[key]`` (a batch-1 summary's) at batch size ``batch`` (scalar or (n,)): the per-image part times the
    batch plus the state-derived part (``s["state_" + key]``, 0 when absent) once."""
    fixed = float(s.get(f"state_{key}", 0.0))
    return (float(s.get(key, 0.0)) - fixed) * batch + fixed


def live_frontier(table: Any) -> tuple[tuple[float, float], ...]:
    """The rows of a layer table that can hold the liveness peak at some batch size, as ``(bytes per image,
    batch-independent bytes)`` pairs of their ``live_bytes`` (the table's batch; ``live_state_bytes`` is
    the batch-independent part): the pairs no other row beats in both. At batch ``b`` (in images of the
    table's batch) the peak is ``max(a * b + c)`` over them. One pair for a network without storages derived
    from its state; more where such a storage is large: NFNet-L0's standardised weights (13.5 MB at fp32) make
    the peak at batch 1 a late convolution's, at batch 4 the stem's (taking the batch-1 row times 4 was 20 %
    under the CPU collector's peak there)."""
    import numpy as np

    live = table["live_bytes"].to_numpy(float)
    state = table["live_state_bytes"].to_numpy(float) if "live_state_bytes" in table.columns else np.zeros(len(live))
    ok = np.isfinite(live) & np.isfinite(state)
    per, const = live[ok] - state[ok], state[ok]
    out, best = [], -1.0
    for i in np.lexsort((-const, -per)):   # per image descending, then batch-independent descending
        if const[i] > best:
            out.append((float(per[i]), float(const[i])))
            best = const[i]
    return tuple(out)


def module_summary(module: Any, input_size: int, precision: str = "fp32") -> dict[str, Any]:
    """:func:`zoo_summary` of an ``nn.Module`` (traced on the meta device, cached by its structure;
    :func:`carb.design.trace.trace`). Raises :class:`carb.errors.ZooError` when it cannot be traced."""
    from carb.design.trace import trace

    return _fvcore_flops(_table_summary(trace(module, (1, 3, int(input_size), int(input_size)), precision=precision)))


def _fvcore_flops(s: dict[str, Any]) -> dict[str, Any]:
    """``s`` with ``flops`` in the dataset's convention (fvcore: one per multiply-add, the tracer's ``macs``)
    and the tracer's own count (2 per multiply-add) kept as ``flops_2x``."""
    s["flops_2x"] = s["flops"]
    s["flops"] = s["macs"]
    if "state_flops" in s:
        s["state_flops_2x"] = s["state_flops"]
        s["state_flops"] = s.get("state_macs", 0.0)
    return s


def zoo_summary(model_name: str, input_size: int, precision: str = "fp32", reparam: bool = False) -> dict[str, Any]:
    """The tracer's totals of one image (batch 1) of ``model_name`` at ``input_size`` px (see
    :func:`carb.design.trace.summarize`); ``flops`` here is fvcore's count (the tracer's ``macs``);
    ``reparam``: of its folded inference graph (:data:`REPARAM`).
    Raises :class:`carb.errors.ZooError` when the model cannot be built or traced."""
    return _fvcore_flops(dict(_batch1(model_name, int(input_size), precision, bool(reparam))))


def zoo_static(model_name: str, input_size: int, batch_size: int, precision: str) -> dict[str, Any]:
    """The :data:`ZOO_STATIC` columns of one configuration (whole batch)."""
    return static_of(zoo_summary(model_name, input_size, precision), batch_size)


def static_of(s: Mapping[str, Any], batch_size: int) -> dict[str, Any]:
    """The :data:`ZOO_STATIC` columns (whole batch of ``batch_size``) of a batch-1 summary ``s``
    (:func:`zoo_summary` / :func:`module_summary`)."""
    b = int(batch_size)
    flops = at_batch(s, "flops", b)
    params = int(s["params"])
    param_mb = (s["param_bytes"] + s.get("buffer_bytes", 0)) / MB   # the module's state: parameters and buffers
    total_act = at_batch(s, "bytes_written", b) / MB
    return {"flops": flops, "params": params, "param_size_MB": param_mb, "total_activation_MB": total_act,
            "max_activation_MB": s["max_written"] * b / MB,
            "flops_per_param_log": math.log10(flops / params) if flops > 0 and params > 0 else float("nan"),
            "compute_intensity": flops / (param_mb + total_act) if param_mb + total_act > 0 else float("nan"),
            "n_conv": int(s["n_conv"]), "activations": float(at_batch(s, "activations", b)),
            "peak_live_MB": _peak_live_bytes(s, b) / MB, "bytes_read_MB": at_batch(s, "bytes_read", b) / MB,
            "bytes_written_MB": total_act, "n_ops": int(s["n_ops"])}


def _peak_live_bytes(s: Mapping[str, Any], batch_size: int) -> float:
    """The liveness peak (bytes) at ``batch_size`` from a batch-1 summary: the largest per-image part times
    the batch plus batch-independent part over :func:`live_frontier`'s rows (storages derived from the
    module's state only, e.g. attention biases gathered from a table, do not grow with the batch); a summary
    without the frontier: ``peak_live_bytes`` times the batch."""
    frontier = s.get("peak_live_frontier")
    if not frontier:
        return float(s["peak_live_bytes"]) * batch_size
    return max(a * batch_size + c for a, c in frontier)


def zoo_static_table(configs: Sequence[Any]) -> Mapping[str, Mapping[str, Any]]:
    """``{config_id: static columns}`` of zoo configurations (the collector's ``static_features``). A
    model the tracer refuses gets NaN features (its row is still measured)."""
    from carb.errors import ZooError

    out: dict[str, dict[str, Any]] = {}
    for c in configs:
        try:
            out[c.config_id] = zoo_static(c.model_name, c.input_size, c.batch_size, c.precision)
        except ZooError:
            out[c.config_id] = {k: float("nan") for k in ZOO_STATIC}
    return out


#: Operation kinds whose sums the model reads (:data:`carb.design.trace.KINDS` less the ones that are
#: almost always zero or views): FLOPs of the compute kinds, bytes of the memory-bound ones.
FLOP_KINDS: tuple[str, ...] = ("conv_regular", "conv_grouped", "conv_depthwise", "conv_pointwise", "linear",
                               "matmul", "sdpa")
BYTE_KINDS: tuple[str, ...] = ("conv_depthwise", "norm", "activation", "elementwise", "pool", "copy", "concat")
#: The per-kind columns of a zoo row (whole batch): ``flops_<kind>`` (the tracer's FLOPs, 2 per
#: multiply-add) and ``bytes_<kind>_MB`` (bytes read + written at the row's precision, MB).
ZOO_KIND_FEATURES: tuple[str, ...] = (*(f"flops_{k}" for k in FLOP_KINDS), *(f"bytes_{k}_MB" for k in BYTE_KINDS))


#: Layer kinds whose weight bytes the latency prior reads (:data:`ZOO_WEIGHT_FEATURES`), by column: ``linear``,
#: fully connected layers, whose weights a small batch streams from memory once per forward with few multiply-adds
#: per byte (AlexNet's and VGG's classifiers: 58 M and 119 M parameters, 94 % and 90 % of the network's, under 2 %
#: of its FLOPs); ``conv``, every convolution (:data:`carb.design.trace.CONV_KINDS`), whose weights eager PyTorch
#: hands to oneDNN in their plain layout, reordered into its blocked one on every forward whatever the batch
#: (fitted on the Zen 4 VM's CPU zoo about 0.2 ms per MB: Wide ResNet-50's 275 MB of fp32 weights, about 50 ms,
#: most of a batch-1 forward at 96 px).
WEIGHT_GROUPS: dict[str, tuple[str, ...]] = {"linear": ("linear",),
                                             "conv": ("conv_regular", "conv_grouped", "conv_depthwise",
                                                      "conv_pointwise")}
WEIGHT_KINDS: tuple[str, ...] = tuple(WEIGHT_GROUPS)
#: Batch-independent columns of a row from its layer table: ``weights_<kind>_MB``, the parameter bytes of the
#: :data:`WEIGHT_GROUPS` layers at the row's precision (MB). Not model features (the trees never read them): the
#: latency prior's per-kind form reads them (:class:`carb.model.physics.LayerRooflinePrior`).
ZOO_WEIGHT_FEATURES: tuple[str, ...] = tuple(f"weights_{k}_MB" for k in WEIGHT_KINDS)


def weights_of(s: Mapping[str, Any]) -> dict[str, float]:
    """:data:`ZOO_WEIGHT_FEATURES` of a batch-1 summary ``s`` (:func:`zoo_summary`; batch-independent, MB);
    0 for a summary made before the key existed."""
    return {f"weights_{k}_MB": float(s.get(f"param_bytes_{k}", 0.0)) / MB for k in WEIGHT_KINDS}


def zoo_kind_columns(frame: Any) -> dict[str, Any]:
    """:data:`ZOO_KIND_FEATURES` for the n rows of ``frame`` (columns ``model_name``, ``input_size``,
    ``batch_size``, ``precision``), ``{column: (n,) float array}``: each distinct (model, size, precision)
    traced once (cached), times the row's batch size. A model the tracer refuses gets NaN."""
    cols = layer_columns(frame)
    return {c: cols[c] for c in ZOO_KIND_FEATURES}


def layer_columns(frame: Any) -> dict[str, Any]:
    """:data:`ZOO_STATIC`, :data:`ZOO_KIND_FEATURES` and :data:`ZOO_WEIGHT_FEATURES` of the n rows of ``frame``, each from its own
    network's layer table (:func:`carb.design.identity.row_kinds`): a zoo row's from the current tracer
    (as :func:`zoo_kind_columns`), a ResNet row's from its walk (:func:`resnet_layer_columns`);
    ``{column: (n,) float array}``, NaN where the tracer refuses the model (e.g. a ``module:`` name: its
    stored columns are all there is) and on rows of neither kind."""
    import numpy as np

    from carb.design.identity import RESNET, ZOO, row_kinds

    n = len(frame)
    out = {c: np.full(n, np.nan) for c in (*ZOO_STATIC, *ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES)}
    kinds = row_kinds(frame) if n else np.zeros(0, dtype=object)
    for name, fill in ((ZOO.name, _zoo_layer_columns), (RESNET.name, resnet_layer_columns)):
        rows = np.flatnonzero(kinds == name)
        if len(rows):
            part = fill(frame.iloc[rows])
            for c in out:
                out[c][rows] = part[c]
    return out


def _zoo_layer_columns(frame: Any) -> dict[str, Any]:
    """:func:`layer_columns` of zoo rows (columns ``model_name``, ``input_size``, ``batch_size``, optional
    ``precision`` and :data:`REPARAM`): each distinct (model, size, precision, graph) traced once (cached),
    times the row's batch."""
    import numpy as np
    import pandas as pd

    from carb.design.trace_progress import tracing
    from carb.errors import ZooError

    n = len(frame)
    out = {c: np.full(n, np.nan) for c in (*ZOO_STATIC, *ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES)}
    if not n:
        return out
    prec = (frame["precision"].astype(str) if "precision" in frame.columns
            else pd.Series(["fp32"] * n, index=frame.index))
    keys = pd.Series(list(zip(frame["model_name"].astype(str), pd.to_numeric(frame["input_size"]).astype(int),
                              prec, reparam_flags(frame))), index=frame.index)
    codes, uniq = pd.factorize(keys)
    batch = pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
    with tracing((name, size) for name, size, _, _ in uniq) as step:   # count and ETA on a cold trace cache
        for j, (name, size, p, folded) in enumerate(uniq):
            step(name, size)
            try:
                s = zoo_summary(name, int(size), p, bool(folded))
            except ZooError:
                continue
            rows = np.flatnonzero(codes == j)
            for c, v in {**kinds_of(s, batch[rows]), **weights_of(s)}.items():
                out[c][rows] = v
            for i in rows:
                for c, v in static_of(s, int(batch[i])).items():
                    out[c][i] = v
    return out


@functools.lru_cache(maxsize=65536)
def _resnet_batch1(block: str, depth: int, layout: tuple[int, ...], width_mult: float, input_size: int,
                   early_downsample: bool, num_classes: int, inner_mult: float,
                   precision: str) -> tuple[tuple[str, Any], ...]:
    """:func:`_table_summary` of the walk's layer table (:func:`carb.design.trace.walk_table`) of one
    image of a ResNet, as a hashable tuple (cached in memory; the walk is torch-free and fast)."""
    from carb.design.arch import ArchConfig
    from carb.design.trace import walk_table

    cfg = ArchConfig(block=block, depth=depth, width_mult=width_mult, input_size=input_size, batch_size=1,
                     precision=precision, early_downsample=early_downsample, stages=layout,
                     num_classes=num_classes, inner_mult=inner_mult)
    return tuple(sorted(_table_summary(walk_table(cfg)).items()))


def resnet_summary(rec: Any, precision: str = "fp32") -> dict[str, Any]:
    """The batch-1 totals (as :func:`zoo_summary`: ``flops`` is fvcore's count) of the ResNet a knob record
    ``rec`` names (a named tuple or record with the architecture columns of
    :func:`carb.design.candidates.records_frame`, ``stages`` as ``'2-2-2-2'``), from its walk's layer table."""
    layout = tuple(int(x) for x in str(rec.stages).split("-"))
    return _fvcore_flops(dict(_resnet_batch1(str(rec.block), int(rec.depth), layout, float(rec.width_mult),
                                             int(rec.input_size), bool(rec.early_downsample),
                                             int(rec.num_classes), float(rec.inner_mult), str(precision))))


def resnet_layer_columns(frame: Any) -> dict[str, Any]:
    """:func:`layer_columns` of ResNet knob rows (the knob columns of :func:`carb.design.candidates.records_frame`,
    validated and normalized there; a fault is its one-line :class:`carb.errors.ConfigError`): each distinct
    architecture, input size and precision walked once (cached), times the row's batch size.
    ``{column: (n,) float array}``."""
    import numpy as np
    import pandas as pd

    from carb.design.arch import RECORD_COLUMNS
    from carb.design.candidates import records_frame

    n = len(frame)
    out = {c: np.full(n, np.nan) for c in (*ZOO_STATIC, *ZOO_KIND_FEATURES, *ZOO_WEIGHT_FEATURES)}
    if not n:
        return out
    knobs = records_frame(frame[[c for c in RECORD_COLUMNS if c in frame.columns]], "ResNet rows")
    key = ["block", "depth", "stages", "width_mult", "input_size", "early_downsample", "num_classes",
           "inner_mult", "precision"]
    codes, uniq = pd.factorize(pd.Series(list(knobs[key].itertuples(index=False, name=None))))
    batch = knobs["batch_size"].to_numpy(float)
    for j in range(len(uniq)):
        rows = np.flatnonzero(codes == j)
        rec = knobs.iloc[rows[0]]
        s = resnet_summary(rec, str(rec["precision"]))
        for c, v in {**kinds_of(s, batch[rows]), **weights_of(s)}.items():
            out[c][rows] = v
        for c, v in _static_rows(s, batch[rows]).items():
            out[c][rows] = v
    return out


def _static_rows(s: Mapping[str, Any], batch: Any) -> dict[str, Any]:
    """:func:`static_of` of a batch-1 summary ``s`` at each of the batch sizes ``batch`` (n,), ``{column: (n,)}``."""
    import numpy as np

    rows = [static_of(s, int(b)) for b in np.asarray(batch)]
    return {c: np.array([r[c] for r in rows], dtype=float) for c in ZOO_STATIC}


def kinds_of(s: Mapping[str, Any], batch: Any) -> dict[str, Any]:
    """:data:`ZOO_KIND_FEATURES` of a batch-1 summary ``s`` at batch sizes ``batch`` (scalar or (n,)); state-derived
    work once per batch (:func:`at_batch`)."""
    out = {f"flops_{k}": at_batch(s, f"flops_{k}", batch) for k in FLOP_KINDS}
    out.update({f"bytes_{k}_MB": at_batch(s, f"bytes_{k}", batch) / MB for k in BYTE_KINDS})
    return out


#: Explicit matrix-product kinds of the layer table whose calls :func:`gemm_regimes` splits by intensity.
GEMM_KINDS: tuple[str, ...] = ("linear", "matmul")
#: Edges (FLOPs per byte of activations read + written, weights excluded, at the table's precision) between
#: the GEMM regimes ``lo`` / ``mid`` / ``hi``: a call below the first moves more bytes than a GPU's
#: tensor cores can use (LeViT's 16-dim attention, CaiT's 4x4 talking-head mixes, Hiera's 96-channel
#: linears over 3,136 tokens), one above the second is compute-bound on every device in timm's files.
GEMM_INTENSITY_EDGES: tuple[float, float] = (16.0, 64.0)
GEMM_REGIMES: tuple[str, ...] = ("lo", "mid", "hi")


def gemm_regimes(table: Any) -> dict[str, float]:
    """The explicit matrix products of a layer table (rows of :data:`GEMM_KINDS`) split into regimes by each
    call's arithmetic intensity at a large batch, ``flops / (bytes_read + bytes_written - param_bytes)``
    (weights are read once per batch, so only activation bytes bound a batched call): for each regime
    ``r`` of :data:`GEMM_REGIMES` (edges :data:`GEMM_INTENSITY_EDGES`) ``flops_gemm_<r>`` (FLOPs, 2 per
    multiply-add), ``bytes_gemm_<r>`` (bytes read + written, weights included) and ``n_gemm_<r>`` (calls).
    Same batch and precision as ``table``."""
    import numpy as np

    g = table[table["kind"].isin(GEMM_KINDS)]
    flops = g["flops"].to_numpy(float)
    moved = (g["bytes_read"] + g["bytes_written"]).to_numpy(float)
    act = np.clip(moved - g["param_bytes"].to_numpy(float), 1.0, None)
    regime = np.digitize(flops / act, GEMM_INTENSITY_EDGES)
    out: dict[str, float] = {}
    for i, r in enumerate(GEMM_REGIMES):
        m = regime == i
        out |= {f"flops_gemm_{r}": float(flops[m].sum()), f"bytes_gemm_{r}": float(moved[m].sum()),
                f"n_gemm_{r}": float(m.sum())}
    return out


#: Normalisation operators of the layer table that autocast runs in fp32 (its "fp32 list": layer, group, RMS
#: and instance norms read fp16 and write fp32, and the next matrix product casts back), where batch norm
#: keeps the input's precision (cuDNN's fused inference kernel).
FP32_NORM_OPS: frozenset[str] = frozenset({"native_layer_norm", "layer_norm", "native_group_norm", "group_norm",
                                           "rms_norm", "_fused_rms_norm", "instance_norm"})


#: ATen operators (as the tracer records them) on autocast's CUDA fp32 list among the activation and reduction kinds:
#: softmax and log-softmax, exp / log / pow / rsqrt / reciprocal / softplus, sum / prod and vector norms
#: (``F.normalize``'s ``norm``). Under autocast each casts its half input to fp32, runs at fp32 and writes fp32, which
#: the next matrix product casts back: an explicit attention's softmax (CaiT's talking heads, VOLO's outlook weights)
#: and XCiT's normalised queries and keys move about 5x the bytes of a half-precision activation pass.
FP32_ACT_OPS: frozenset[str] = frozenset({"_softmax", "softmax", "_log_softmax", "log_softmax", "exp", "expm1", "log",
                                          "log1p", "log2", "log10", "pow", "rsqrt", "reciprocal", "softplus", "sum",
                                          "prod", "norm", "linalg_vector_norm", "cumsum", "cumprod", "erfinv"})


def amp_memory_split(table: Any) -> dict[str, float]:
    """The memory-bound bytes of a layer table that mixed precision (autocast fp16/bf16) moves at fp32
    rather than at the half precision of the matrix products, as separate sums (bytes read + written at
    the table's precision, and calls; same batch as ``table``):

    - ``bytes_norm_fp32`` / ``n_norm_fp32``: normalisations on autocast's fp32 list (:data:`FP32_NORM_OPS`:
      LayerNorm, GroupNorm, RMSNorm; batch norm is not among them). ``bytes_norm - bytes_norm_fp32`` is
      batch norm's.
    - ``bytes_elementwise_param`` / ``n_elementwise_param``: element-wise operations that read a parameter
      (layer scale ``gamma * x``, an added position embedding or bias): the fp32 parameter promotes the
      fp16 stream to fp32 from there on (type promotion), so the residual stream of such a network is
      moved at twice the bytes of a network without one.
    - ``bytes_act_fp32`` / ``n_act_fp32``: activation and reduction operations on autocast's fp32 list
      (:data:`FP32_ACT_OPS`: an explicit softmax, vector norms, sums), each with its casts in and out.
    """
    import numpy as np

    kind = table["kind"].to_numpy()
    moved = (table["bytes_read"] + table["bytes_written"]).to_numpy(float)
    fp32_norm = (kind == "norm") & table["op"].isin(FP32_NORM_OPS).to_numpy()
    param_ew = (kind == "elementwise") & (table["param_bytes"].to_numpy(float) > 0)
    fp32_act = np.isin(kind, ("activation", "reduce")) & table["op"].isin(FP32_ACT_OPS).to_numpy()
    return {"bytes_norm_fp32": float(moved[fp32_norm].sum()), "n_norm_fp32": float(fp32_norm.sum()),
            "bytes_elementwise_param": float(moved[param_ew].sum()), "n_elementwise_param": float(param_ew.sum()),
            "bytes_act_fp32": float(moved[fp32_act].sum()), "n_act_fp32": float(fp32_act.sum())}


#: ATen operators whose CUDA kernels make a strided (non-contiguous) input contiguous before they run: softmax
#: (``host_softmax``: ``input.contiguous()``), layer norm (``X.expect_contiguous()``) and group norm. The copy is made
#: below the dispatcher, so a meta-device trace (:func:`carb.design.trace.trace`) does not record it; the meta kernels
#: make no copy. A strided input is a permuted view: CaiT's talking-heads scores (heads moved last for the mixing
#: linear, then back), ConvNeXt's and LayerNorm2d's channels-last views of an NCHW map, VOLO's NHWC stream.
HIDDEN_COPY_OPS: frozenset[str] = frozenset({"_softmax", "_log_softmax", "native_layer_norm", "native_group_norm"})


#: Convolution operators whose CUDA output keeps a channels-last input's layout (:func:`hidden_copy_bytes`).
CL_CONV_OPS: frozenset[str] = frozenset({"convolution", "_convolution", "conv2d", "cudnn_convolution"})


def _channels_last(x: Any) -> bool:
    """Whether ``x`` is a 4-D tensor that is not NCHW-contiguous and whose strides PyTorch takes as channels-last
    (``suggest_memory_format``: ``is_channels_last_strides_2d``, the stride order C < W < H < N, dense or not: a
    permuted channel slice of an NHWC tensor, MambaOut's gated convolution, counts)."""
    import torch

    if not isinstance(x, torch.Tensor) or x.dim() != 4 or x.is_contiguous():
        return False
    sizes, strides = x.shape, x.stride()
    if strides[1] == 0:
        return False
    low = 0
    for d in (1, 3, 2, 0):
        if sizes[d] == 0 or strides[d] < low or (d == 0 and low == strides[1]):
            return False
        low = strides[d] * (sizes[d] if sizes[d] > 1 else 1)
    return True


def _dw_native_flops(args: tuple, out: Any) -> float:
    """FLOPs (2 per multiply-add, batch 1) of one ``convolution`` call (``args``: input, weight, bias, stride, padding,
    dilation, transposed, output padding, groups) if it is a 2-D depthwise convolution off cuDNN on a GPU: an NCHW
    input (a channels-last one always goes to cuDNN) that :func:`dw_on_native` keeps off; else
    0."""

    x, w = args[0], args[1]
    groups = int(args[8]) if len(args) > 8 else 1
    if x.dim() != 4 or groups < 2 or x.shape[1] != groups or _channels_last(x):
        return 0.0
    stride = args[3] if len(args) > 3 else (1, 1)
    if not dw_on_native(tuple(x.shape), tuple(w.shape), stride):
        return 0.0
    return float(2 * w.numel() * out.shape[-2] * out.shape[-1])


def hidden_copy_bytes(model: Any, input_size: int, settings: dict[str, Any] | None = None,
                      cuda_layout: bool = False) -> dict[str, float]:
    """``bytes_hidden_copy`` / ``n_hidden_copy``: bytes (read + written, 4 per element: the table's fp32 units, batch 1)
    and calls of the copies that :data:`HIDDEN_COPY_OPS` make of a strided input on a GPU, from one meta-device
    forward of ``model`` (a zoo name, built with ``settings``, or an ``nn.Module``) on a ``(1, 3, input_size,
    input_size)`` input; strides as eager PyTorch propagates them (TensorIterator's layout rules run on meta too).
    With ``cuda_layout``, a convolution whose input has channels-last strides returns a channels-last output, as
    cuDNN does on a GPU (``cudnn_conv_suggest_memory_format``; the meta kernel returns a contiguous NCHW output):
    timm's LayerNorm2d (a permute, a layer norm, a permute back) hands the next convolution a channels-last view, so
    on a GPU ConvNeXt's and DaViT's blocks stay channels-last and their permuted layer norms read contiguous inputs,
    where the meta strides say every one is copied (:data:`CL_CONV_OPS`). With it also ``flops_conv_dw_native``: the
    FLOPs of the depthwise convolutions PyTorch runs on its own kernel, not cuDNN's (a channels-last input always goes
    to cuDNN; an NCHW one by :func:`dw_on_native`), batch 1."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from carb.design.zoo import build_model

    import copy

    net = build_model(model, **(settings or {})) if isinstance(model, str) else copy.deepcopy(model).to("meta")
    acc = {"bytes_hidden_copy": 0.0, "n_hidden_copy": 0.0} | ({"flops_conv_dw_native": 0.0} if cuda_layout else {})

    class _Strided(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._overloadpacket.__name__ in HIDDEN_COPY_OPS and args and isinstance(args[0], torch.Tensor) \
                    and not args[0].is_contiguous():
                acc["bytes_hidden_copy"] += 2 * 4 * args[0].numel()
                acc["n_hidden_copy"] += 1
            out = func(*args, **(kwargs or {}))
            if cuda_layout and func._overloadpacket.__name__ in CL_CONV_OPS:
                acc["flops_conv_dw_native"] += _dw_native_flops(args, out)
                if _channels_last(args[0]):
                    out = out.contiguous(memory_format=torch.channels_last)   # cuDNN keeps the input's layout
            return out

    x = torch.empty((1, 3, int(input_size), int(input_size)), device="meta")
    with torch.no_grad(), _Strided():
        net.eval()(x)
    return acc


#: Convolution kinds :func:`small_conv_flops` counts (depthwise ones have their own per-element bytes term).
SMALL_CONV_KINDS: tuple[str, ...] = ("conv_regular", "conv_grouped", "conv_pointwise")


@functools.lru_cache(maxsize=4096)
def _small_conv_flops1(model_name: str, input_size: int, precision: str, reparam: bool, max_MMAC: float) -> float:
    """FLOPs of one image's :data:`SMALL_CONV_KINDS` convolutions with fewer than ``max_MMAC`` million
    multiply-adds each (per image; state-derived rows left out), from the batch-1 layer table (disk-cached)."""
    from carb.design.trace import trace

    table = trace(model_name, (1, 3, int(input_size), int(input_size)), precision=precision, reparam=bool(reparam))
    small = (table["kind"].isin(SMALL_CONV_KINDS) & (table["macs"] < max_MMAC * 1e6)).to_numpy(bool) & ~_state_mask(table)
    return float(table.loc[small, "flops"].sum())


def small_conv_flops(frame: Any, max_MMAC: float) -> Any:
    """(n,) FLOPs of each zoo row's small convolutions (:func:`_small_conv_flops1`) times its batch size; 0 on
    other rows (ResNet knob rows: their convolutions are all large) and where the tracer refuses the model."""
    import numpy as np
    import pandas as pd

    from carb.design.identity import ZOO, row_kinds
    from carb.errors import ZooError

    out = np.zeros(len(frame))
    rows = np.flatnonzero(row_kinds(frame) == ZOO.name) if len(frame) else np.zeros(0, int)
    if not len(rows):
        return out
    sub = frame.iloc[rows]
    prec = sub["precision"].astype(str) if "precision" in sub.columns else pd.Series(["fp32"] * len(sub))
    batch = pd.to_numeric(sub["batch_size"], errors="coerce").to_numpy(float)
    for i, (name, size, p, folded) in enumerate(zip(sub["model_name"].astype(str), sub["input_size"], prec,
                                                    reparam_flags(sub))):
        try:
            out[rows[i]] = _small_conv_flops1(name, int(size), p, bool(folded), float(max_MMAC)) * batch[i]
        except ZooError:
            pass
    return np.nan_to_num(out, nan=0.0)


def dw_on_native(in_shape: object, weight_shape: object, stride: object) -> bool:
    """Whether PyTorch runs a half-precision NCHW depthwise convolution (input ``(N, C, H, W)``, weight
    ``(C * m, 1, kh, kw)``, ``stride``) on its own depthwise kernel rather than cuDNN's, by its rule for cuDNN >= 8.2
    at a batch above 1 (``aten/src/ATen/native/Convolution.cpp``, ``use_cudnn_depthwise`` and
    ``check_cudnn_depthwise_workload_with_filter``): cuDNN takes at least 32 channels, a square 1, 3 or 5 kernel on a
    map at least 7 wide, at stride 1, or at stride 2 with a 3 or 5 kernel and at least 512 channels (or 256 on a map
    at least 28 wide); every other one is PyTorch's (FastViT's, ConvNeXt's, StarNet's 7x7, FocalNet's 9x9, a
    1x5 band). False for a shape that is not a 2-D convolution's."""
    import numpy as np

    try:
        i = tuple(int(v) for v in in_shape)
        w = tuple(int(v) for v in weight_shape)
    except TypeError:
        return False
    if len(i) != 4 or len(w) != 4:
        return False
    try:
        s = int(np.ravel(np.asarray(stride, dtype=object))[-1])
    except (TypeError, ValueError, IndexError):
        s = 1
    ch, width, kh, kw = i[1], i[3], w[2], w[3]
    if ch < 32 or kh != kw or kw not in (1, 3, 5) or width < 7:
        return True
    if s == 1:
        return False
    return s != 2 or kw == 1 or not (ch >= 512 or (ch >= 256 and width >= 28))
