"""CPU terms of the zoo latency model (:class:`carb.model.zoo_latency.AdditiveBase`) for timm's CPU file.

timm's published CPU file (``benchmark-infer-fp32-nchw-pt240-cpu-i9_10940x-dynamo.csv``: Intel Core
i9-10940X, fp32, batch 1, ``torch.compile``) is fitted with the same per-kind law as the GPU files, whose
settings were chosen on GPUs. A CPU at batch 1 differs in ways the layer table can see:

- **Weights used only a few times** (``weight_lowreuse``): a layer whose every weight is used fewer than
  ``low_reuse`` (8) times per image (its FLOPs / (2 x parameters): output positions at batch 1) runs as a
  matrix-vector product: the classifier head of every network, VGG's 7x7 and 1x1 fully connected
  convolutions (411 MB + 67 MB), ResNetV2-BiT's and NFNet's convolution heads, SelecSLS's last 3x3
  convolutions at 4x4. Its time is its weight bytes at the rate the CPU streams (and reorders) weights,
  not its FLOPs at the GEMM rate, and not the per-MB weight cost of the whole network (a ViT's linear
  layers reuse each weight 197 times). On the i9 file VGG's 8 models take 107-122 ms at batch 1 while
  their 7.6-19.6 GMACs would take 13-33 ms at the 1.2 TFLOP/s the large ViTs reach.
  ``weight_lowreuse_dram``: the part of those weights in layers larger than ``cache_MB`` (16 MB) (VGG's
  411 MB and 67 MB layers, BiT's wide heads), which no cache holds between calls: a cost on top.
- **Memory-bound bytes beyond the last-level cache** (``membound_dram``): normalisation, activation,
  element-wise, copy, concatenation, pooling and reduction operations whose bytes read + written exceed
  ``cache_MB`` (16 MB) stream from DRAM; the rest stay in cache. Priced apart from ``mb_<kind>``.
- **Calls of kernels no compiler fuses** (``extern_calls``): under ``torch.compile`` on a CPU the
  element-wise, activation and normalisation operations fuse into generated loops, while every
  convolution, linear layer, matrix product and attention call (:data:`EXTERN_KINDS`) stays one call of a
  library kernel (oneDNN / MKL) with its own fixed cost, paid once per batch. The network-wide operation
  count (``ops_per_image``) counts the fused operations too. MixNet's mixed depthwise convolutions run one
  convolution per kernel size (3x3 to 11x11 on channel splits): more calls for the same FLOPs.
- **Layer norms over channels of a permuted map** (``norm_permuted``): a layer norm whose input is
  the row just before it permuted (``LayerNorm2d``: NCHW -> NHWC, normalise, back; ConvNeXt's block norm
  after its depthwise convolution; ViTamin's MbConv stages): it reads the map across the channel stride,
  not along memory. Its bytes read + written (activations; parameters left out), of the norms moving
  more than ``l2_MB`` (1 MB) each (maps beyond a core's L2 cache; smaller ones stay in it).
- **Depthwise convolutions beyond the last-level cache** (``depthwise_dram``): a depthwise convolution does
  a few multiply-adds per byte (k x k per output element), so its time is the bytes it moves; one whose
  activations read + written exceed ``cache_MB`` (16 MB) (ViTamin's, MaxViT's, CoAtNet's and MobileViTv2's
  MbConv stages at 56x56 and above, EfficientNets at large inputs) streams them from DRAM, a cost on top of
  ``mb_conv_depthwise``, which then prices the depthwise convolutions that stay in cache (MobileOne's).
- **Explicit matrix products beyond the cache** (``matmul_spill``): attention written out as matrix products
  (kind ``matmul``: the scores materialised outside scaled-dot-product attention; Swin V2's cosine attention,
  CaiT's talking heads at 384-448, XCiT, VOLO, MViTv2, GCViT) moves its operands and scores through memory;
  the activation bytes of the products that move more than ``spill_MB`` (4 MB) each (the threshold chosen by
  a nested leave-family-out choice between 4 and 16 MB, docs/MODEL.md) are priced on top of ``mb_matmul``.
- **Convolution weights streamed at a few output positions** (``conv_weight_dram``): a convolution whose
  weights exceed ``cache_MB`` (16 MB) (no cache holds them between calls) and are each used at least
  ``low_reuse`` (8) but fewer than ``mid_reuse`` (64) times per image (its output positions at batch 1: maps
  of 7x7 and under) reads its weights from DRAM at every call (oneDNN also reorders them to its blocked
  layout at each call without frozen weights) while its few multiply-adds per weight cannot hide the
  stream: SelecSLS's head (3x3 convolutions of 17-47 MB at 7x7 and 4x4), ResNetV2-BiT's and NFNet's last
  stages. The weights used fewer than ``low_reuse`` (8) times are ``weight_lowreuse_dram``'s; linear layers
  (matrix products through another library) are left out. The reuse bound was chosen by a nested
  leave-family-out choice among 32 / 64 / 128 (docs/MODEL.md, round 5).
- **Point-wise operations after fusion** (``pointwise_fused``): under ``torch.compile`` a run of normalisation,
  activation and element-wise operations (views between them do not break it) is one generated loop that
  reads the run's input and writes its output once, not once per operation: RegNetZ's EvoNorm models
  (``_evos``: a dozen element-wise operations per norm), ESE-VoVNet's and DLA's norm-activation chains. The
  bytes of those runs (:func:`pointwise_run_bytes`) *replace* the per-kind ``mb_norm``, ``mb_activation``
  and ``mb_elementwise`` terms (:data:`REPLACED_TERMS`; not a term beside them): that needs
  :class:`carb.model.zoo_latency.AdditiveBase` drops them where a device takes the term (:func:`replaced_terms`;
  docs/MODEL.md, timm's CPU file round 4).
- **Concatenations that copy** (``concat_copy``): under ``torch.compile`` a concatenation of point-wise
  outputs costs nothing of its own (the generated loops of the norm / activation / element-wise run before it
  write straight into the concatenation's buffer: ESE-VoVNet's and DLA's aggregations of norm-activation
  outputs), while any other concatenation copies its inputs: one right after a convolution, linear layer or
  attention call (MixNet's mixed-kernel depthwise convolutions, DenseNet's new features, Inception's branches),
  a pooling or another concatenation. The term is the bytes read + written of the concatenations whose nearest
  earlier non-view row is not a point-wise one (:func:`previous_kinds` not in :data:`FUSED_KINDS`; chosen over
  "right after a library call" by a nested leave-family-out choice, docs/MODEL.md), in place of ``mb_concat``
  (:data:`REPLACED_TERMS`). ``concat_calls``: the number of those concatenations per batch (``n_concat_copy``), a
  fixed cost per copy kernel beside its bytes (DenseNet's many small copies at 56x56 and under, in cache, cost
  less per MB than MixNet's; chosen by a nested leave-family-out choice, docs/MODEL.md, round 7).
- **Convolutions on a permuted map** (``conv_permuted``): a convolution whose input is a transposed or permuted
  view (:data:`TRANSPOSE_OPS`; a token sequence (B, N, C) viewed as an NCHW map, which has channels-last strides:
  PVTv2's spatial-reduction convolutions and the depthwise convolution of its MLP, CoaT's and EdgeNeXt's
  convolutional position encodings, ViTamin's, DaViT's and MetaFormers' token-to-map convolutions) makes the
  library reorder its input before the call (a hypothesis; PVTv2-b2-li, whose ReLU reads the view instead, runs
  at the rate of the rest): its activation bytes read + written (:func:`after_transpose`).
- **Wide linear layers** (``linear_wide``): a linear layer whose input and output features are both at least
  ``wide_features`` (1024: ViT-L's, ViTamin-L's, BEiT-L's, Mixer-L's blocks; not ViT-B's 768-wide ones) runs its
  matrix product at a lower rate per FLOP on the i9 than the ViT-B-sized layers that carry ``gflop_linear``: each
  weight matrix (4-16 MB at fp32) is beyond a core's 1 MB L2 cache and is streamed through it at every call for
  a few hundred tokens. Its FLOPs, priced on top of ``gflop_linear`` (:func:`linear_features`; docs/MODEL.md,
  timm's CPU file round 7).

- **Calls of generated loops** (``generated_loops``): the fixed cost per kernel of a compiled graph is paid per
  loop the compiler generates, not per operation the tracer records: one per point-wise run
  (:func:`pointwise_runs`), one per pooling, reduction and copy that is not a broadcast, one per copying
  concatenation (``n_generated_loops``, :func:`generated_loops`; library calls are ``extern_calls``'), per batch,
  in place of ``ops_per_image`` (:data:`REPLACED_TERMS`). RegNetZ's EvoNorm-S0 models record 834-931 operations
  against 334-371 for their batch-norm siblings (a dozen element-wise operations per norm), most of them inside
  fused runs (docs/MODEL.md, timm's CPU file round 8).
- **Copies that are written** (``copy_dense``): a copy that reads less than half of what it writes is a broadcast
  made contiguous (``expand`` then ``clone``: EvoNorm's group standard deviation, (B, G, 1, 1, 1) written out at the
  map's size; relative-position biases expanded over the batch), which a compiler never writes: the loop that reads
  it indexes the small tensor (:func:`broadcast_copy_rows`). The bytes read + written of the other copies
  (``bytes_copy_dense``), in place of ``mb_copy``.
- **Group norms of more than one group** (``group_norm_multi``): a batch norm at inference is an affine of stored
  statistics inside the fused loop after a convolution; a group norm reduces the map itself per (sample, group)
  before it can normalise, a second pass that does not fuse with the convolution's output loop, and where a group is
  a slice of the channels (more than one group) a strided one in a channels-last map. The activation bytes read +
  written of those norms (``bytes_group_norm_multi``, :func:`group_norm_parts`; the groups from
  :func:`group_norm_groups`); a norm over the whole map (``GroupNorm1``: PoolFormer, MobileViT-V2) is left out.
  ``group_norm`` (all group-norm bytes) and ``group_norm_calls`` (their number per batch) are there too, not shipped
  (docs/MODEL.md, round 9).

:func:`cpu_parts` gives the layer-table columns (``scripts/data/zoo_trace_features.py`` stores them in
``carb/data/timm-zoo-trace.parquet``; :func:`carb.data.importers.timm_zoo.with_trace` joins them as
``tr_<column>``); :func:`cpu_terms` turns them into additive terms per image. Which terms a device's rows
take is a per-device setting (``conf/zoo_latency/default.yaml``, ``per_device``); the GPU files take none. The
thresholds in parentheses above are that conf's ``cpu_parts`` section (:data:`THRESHOLD_KEYS`), read by
``scripts/data/zoo_trace_features.py`` when it writes the columns (a changed threshold reaches the stored columns
after its ``--refresh``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb.design.trace import CONV_KINDS
from carb.design.trace import COMPUTE_KINDS as EXTERN_KINDS  # each one library call under torch.compile on a CPU
from carb.design.trace import MEMORY_BOUND_KINDS as MEMORY_KINDS
from carb.errors import DatasetError

#: The thresholds of :func:`cpu_parts` (``conf/zoo_latency/default.yaml``'s ``cpu_parts`` section, schema
#: :class:`carb.commands.schema.groups.ZooLatencyCpuParts`; conf units: MB for the ``_MB`` keys):
#: ``low_reuse`` (a layer whose weights are each used fewer times than this per image, FLOPs / (2 x parameters),
#: is weight-streaming at batch 1; 8), ``mid_reuse`` (a convolution whose weights are each used at least
#: ``low_reuse`` but fewer than this many times per image and exceed ``cache_MB`` streams them from DRAM at every
#: call; 64: chosen over 32 and 128 by nested leave-family-out), ``cache_MB`` (bytes read + written by one
#: memory-bound operation beyond which it streams from DRAM; 16: under the i9-10940X's 19.25 MB last-level cache,
#: the share other data keeps left out), ``spill_MB`` (activation bytes of one explicit matrix product beyond which
#: it counts in ``bytes_matmul_spill``; 4: between a core's 1 MB L2 and the last-level cache, chosen over 16 by
#: nested leave-family-out), ``l2_MB`` (activation bytes of one permuted layer norm beyond which its strided reads
#: leave a core's L2 cache; 1: the i9-10940X's L2 per core) and ``wide_features`` (a linear layer whose input and
#: output features are both at least this many is priced again as a wide one; 1024: ViT-L-sized blocks, not
#: ViT-B's 768). docs/MODEL.md has the rounds that chose them.
THRESHOLD_KEYS: tuple[str, ...] = ("low_reuse", "mid_reuse", "cache_MB", "spill_MB", "l2_MB", "wide_features")
#: The layer-table columns :func:`cpu_parts` gives (bytes at the table's batch and precision).
CPU_COLUMNS: tuple[str, ...] = ("bytes_weight_lowreuse", "bytes_weight_lowreuse_dram", "bytes_membound_dram",
                                 "n_extern_calls", "bytes_norm_permuted", "bytes_depthwise_dram",
                                 "bytes_pointwise_fused", "bytes_matmul_spill", "bytes_conv_weight_dram",
                                 "bytes_concat_copy", "bytes_conv_permuted", "flops_linear_wide",
                                 "n_concat_copy", "n_generated_loops", "bytes_copy_dense",
                                 "bytes_group_norm", "n_group_norm", "bytes_group_norm_multi")
#: The kinds a compiler fuses into one loop per run (:func:`pointwise_run_bytes`), and the kinds (views) that
#: do not break a run.
FUSED_KINDS: tuple[str, ...] = ("norm", "activation", "elementwise")
VIEW_KINDS: tuple[str, ...] = ("reshape", "other")
#: The view operations (rows of :data:`VIEW_KINDS`) that change which dimension is innermost in memory.
TRANSPOSE_OPS: tuple[str, ...] = ("transpose", "permute", "t")
#: The terms :func:`cpu_terms` can add, each from its column of :data:`CPU_COLUMNS`.
CPU_TERMS: dict[str, str] = {"weight_lowreuse": "bytes_weight_lowreuse",
                             "weight_lowreuse_dram": "bytes_weight_lowreuse_dram",
                             "membound_dram": "bytes_membound_dram",
                             "extern_calls": "n_extern_calls",
                             "norm_permuted": "bytes_norm_permuted",
                             "depthwise_dram": "bytes_depthwise_dram",
                             "pointwise_fused": "bytes_pointwise_fused",
                             "matmul_spill": "bytes_matmul_spill",
                             "conv_weight_dram": "bytes_conv_weight_dram",
                             "concat_copy": "bytes_concat_copy",
                             "conv_permuted": "bytes_conv_permuted",
                             "linear_wide": "flops_linear_wide",
                             "concat_calls": "n_concat_copy",
                             "generated_loops": "n_generated_loops",
                             "copy_dense": "bytes_copy_dense",
                             "group_norm": "bytes_group_norm",
                             "group_norm_calls": "n_group_norm",
                             "group_norm_multi": "bytes_group_norm_multi"}
#: The terms of :func:`carb.model.zoo_latency.additive_terms` a CPU term stands for instead (the additive base
#: must drop them where it takes the term: :func:`replaced_terms`).
REPLACED_TERMS: dict[str, tuple[str, ...]] = {"pointwise_fused": tuple(f"mb_{k}" for k in FUSED_KINDS),
                                               "concat_copy": ("mb_concat",),
                                               "generated_loops": ("ops_per_image",),
                                               "copy_dense": ("mb_copy",)}
#: The terms paid once per batch (weights read, kernels called); the others per image.
PER_BATCH_TERMS: tuple[str, ...] = ("weight_lowreuse", "weight_lowreuse_dram", "extern_calls", "conv_weight_dram",
                                     "concat_calls", "generated_loops", "group_norm_calls")
#: The terms that count calls (the term is calls per image), not bytes (MB per image).
COUNT_TERMS: tuple[str, ...] = ("extern_calls", "concat_calls", "generated_loops", "group_norm_calls")
#: The operations of a group normalisation (``nn.GroupNorm``, timm's ``GroupNormAct`` / ``GroupNorm1``).
GROUP_NORM_OPS: tuple[str, ...] = ("native_group_norm", "group_norm")
#: The terms that count FLOPs (the term is GFLOP per image), not bytes.
FLOP_TERMS: tuple[str, ...] = ("linear_wide",)


def cpu_parts(table: Any, thresholds: Mapping[str, float]) -> dict[str, float]:
    """The CPU columns of a layer table (:func:`carb.design.trace.trace`'s rows: ``kind``, ``flops``,
    ``bytes_read``, ``bytes_written``, ``param_bytes``, ``params``; ``attrs["input_shape"]``): ``bytes_weight_lowreuse``
    (parameter bytes of the rows whose weights are used fewer than ``low_reuse`` times per image,
    ``flops / (2 x params x batch)``), ``bytes_weight_lowreuse_dram`` (the part of it in layers whose weights
    exceed ``cache_bytes``: streamed from DRAM every call), ``bytes_membound_dram`` (bytes read +
    written by the memory-bound rows, :data:`MEMORY_KINDS`, that move more than ``cache_bytes`` each),
    ``n_extern_calls`` (rows of :data:`EXTERN_KINDS`: library kernel calls per forward, at any batch) and
    ``bytes_norm_permuted`` (activation bytes read + written by :func:`permuted_norm_rows`' norms that
    move more than ``l2_bytes`` each), ``bytes_depthwise_dram`` (activation bytes read + written by the
    depthwise convolutions, ``conv_depthwise``, that move more than ``cache_bytes`` each),
    ``bytes_pointwise_fused`` (:func:`pointwise_run_bytes`) and ``bytes_matmul_spill`` (activation bytes read +
    written by the explicit matrix products, ``matmul``, that move more than ``spill_bytes`` each) and
    ``bytes_conv_weight_dram`` (parameter bytes of the convolutions, :data:`CONV_KINDS`, whose weights exceed
    ``cache_bytes`` and are used at least ``low_reuse`` but fewer than ``mid_reuse`` times per image),
    ``bytes_concat_copy`` (bytes read + written by the concatenations not right after a point-wise run,
    :func:`previous_kinds` not in :data:`FUSED_KINDS`; ``n_concat_copy``: their number, per forward),
    ``bytes_conv_permuted`` (activation bytes read + written by the convolutions whose input is a transposed
    view, :func:`after_transpose`) and ``flops_linear_wide`` (FLOPs
    of the linear layers whose input and output features are both at least ``wide_features``,
    :func:`linear_features`). ``thresholds``: :data:`THRESHOLD_KEYS` (``conf/zoo_latency/default.yaml``'s
    ``cpu_parts``: ``low_reuse``, ``mid_reuse``, ``wide_features``; ``cache_bytes``, ``l2_bytes``, ``spill_bytes``
    above are ``cache_MB``, ``l2_MB``, ``spill_MB`` x 1e6); a missing key: one-line :class:`DatasetError`. Same
    batch and precision as ``table`` (timm's CPU file: batch 1, fp32)."""
    low_reuse, mid_reuse, cache_bytes, spill_bytes, l2_bytes, wide_features = _thresholds(thresholds)
    batch = float(table.attrs.get("input_shape", (1,))[0])
    pb = table["param_bytes"].to_numpy(float)
    params = table["params"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        reuse = table["flops"].to_numpy(float) / (2.0 * params * batch)
    moved = (table["bytes_read"] + table["bytes_written"]).to_numpy(float)
    mem = table["kind"].isin(MEMORY_KINDS).to_numpy()
    low = (pb > 0) & (reuse < low_reuse)
    act = moved - pb   # activation bytes read + written
    copies = (table["kind"] == "concat").to_numpy() & ~np.isin(previous_kinds(table), FUSED_KINDS)
    n_in, n_out = linear_features(table)
    wide = (table["kind"] == "linear").to_numpy() & (np.minimum(n_in, n_out) >= wide_features)
    conv_mid = table["kind"].isin(CONV_KINDS).to_numpy() & (pb > cache_bytes) & (reuse >= low_reuse) & (reuse < mid_reuse)
    return {"bytes_weight_lowreuse": float(pb[low].sum()),
            "bytes_weight_lowreuse_dram": float(pb[low & (pb > cache_bytes)].sum()),
            "bytes_membound_dram": float(moved[mem & (moved > cache_bytes)].sum()),
            "n_extern_calls": float(table["kind"].isin(EXTERN_KINDS).sum()),
            "bytes_norm_permuted": float(act[permuted_norm_rows(table) & (act > l2_bytes)].sum()),
            "bytes_depthwise_dram": float(act[(table["kind"] == "conv_depthwise").to_numpy() & (act > cache_bytes)].sum()),
            "bytes_pointwise_fused": pointwise_run_bytes(table),
            "bytes_matmul_spill": float(act[(table["kind"] == "matmul").to_numpy() & (act > spill_bytes)].sum()),
            "bytes_conv_weight_dram": float(pb[conv_mid].sum()),
            "bytes_concat_copy": float(moved[copies].sum()),
            "n_concat_copy": float(copies.sum()),
            "bytes_conv_permuted": float(act[table["kind"].isin(CONV_KINDS).to_numpy() & after_transpose(table)].sum()),
            "flops_linear_wide": float(table["flops"].to_numpy(float)[wide].sum()),
            "n_generated_loops": float(generated_loops(table)),
            "bytes_copy_dense": float(moved[(table["kind"] == "copy").to_numpy() & ~broadcast_copy_rows(table)].sum()),
            **group_norm_parts(table)}


def group_norm_parts(table: Any) -> dict[str, float]:
    """``bytes_group_norm`` (activation bytes read + written by a layer table's group normalisations,
    :data:`GROUP_NORM_OPS`; parameters left out; at the table's batch and precision) and ``n_group_norm`` (their
    number per forward) and ``bytes_group_norm_multi`` (the part of ``bytes_group_norm`` in norms of more than one
    group, :func:`group_norm_groups`: a group is a slice of the channels, not the whole map as in PoolFormer's and
    MobileViT-V2's ``GroupNorm1``). 0 in a table without an ``op`` column or without such rows."""
    if "op" not in table.columns:
        return {"bytes_group_norm": 0.0, "n_group_norm": 0.0, "bytes_group_norm_multi": 0.0}
    gn = table["op"].astype(str).isin(GROUP_NORM_OPS).to_numpy()
    act = (table["bytes_read"] + table["bytes_written"] - table["param_bytes"]).to_numpy(float)
    multi = gn & (group_norm_groups(table) > 1)
    return {"bytes_group_norm": float(act[gn].sum()), "n_group_norm": float(gn.sum()),
            "bytes_group_norm_multi": float(act[multi].sum())}


def group_norm_groups(table: Any) -> np.ndarray:
    """Per row of a layer table (n,) the number of groups of a group normalisation (0 elsewhere), from what it
    writes beyond its input: the per-(sample, group) mean and inverse deviation, ``bytes_written - (bytes_read -
    param_bytes) = 2 x batch x groups x element bytes`` (``attrs["precision"]``: 4 B at fp32, 2 at bf16 / fp16)."""
    gn = table["op"].astype(str).isin(GROUP_NORM_OPS).to_numpy() if "op" in table.columns else np.zeros(len(table), bool)
    batch = float(table.attrs.get("input_shape", (1,))[0])
    elem = 4.0 if str(table.attrs.get("precision", "fp32")) == "fp32" else 2.0
    extra = (table["bytes_written"] - table["bytes_read"] + table["param_bytes"]).to_numpy(float)
    return np.where(gn, np.round(extra / (2.0 * batch * elem)), 0.0)


def _thresholds(thresholds: Mapping[str, float]) -> tuple[float, ...]:
    """``thresholds``' values in :data:`THRESHOLD_KEYS`' order, the ``_MB`` ones in bytes. A missing key: one-line
    :class:`DatasetError`."""
    missing = [k for k in THRESHOLD_KEYS if k not in thresholds]
    if missing:
        raise DatasetError(f"cpu_parts: thresholds lack {', '.join(missing)}; needed: {', '.join(THRESHOLD_KEYS)} "
                           "(conf/zoo_latency/default.yaml's cpu_parts)")
    return tuple(float(thresholds[k]) * (1e6 if k.endswith("_MB") else 1.0) for k in THRESHOLD_KEYS)


def linear_features(table: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per row of a layer table (n,) the last dimension of its input and of its output (``in_shape``,
    ``out_shape``): a linear layer's input and output features. 0 where a shape is missing, and everywhere in a
    table without those columns."""
    def last(col: str) -> np.ndarray:
        if col not in table.columns:
            return np.zeros(len(table))
        return np.array([float(s[-1]) if isinstance(s, (tuple, list, np.ndarray)) and len(s) else 0.0
                         for s in table[col]], float)
    return last("in_shape"), last("out_shape")


def previous_kinds(table: Any) -> np.ndarray:
    """Per row of a layer table (n,) the kind of the nearest earlier row that is not a view
    (:data:`VIEW_KINDS`); ``""`` where there is none. In table order (execution order)."""
    kind = table["kind"].astype(str).to_numpy()
    view = np.isin(kind, VIEW_KINDS)
    out = np.full(len(kind), "", dtype=object)
    last = ""
    for i in range(len(kind)):
        out[i] = last
        if not view[i]:
            last = kind[i]
    return out


def after_transpose(table: Any) -> np.ndarray:
    """Per row of a layer table (n,) whether a transposing view (``op`` in :data:`TRANSPOSE_OPS`) stands
    between it and the nearest earlier row that is not a view: a row that is not a view reading a transposed
    or permuted tensor (a token sequence viewed as an NCHW map). False on view rows, and everywhere in a table
    without the ``op`` column."""
    if "op" not in table.columns:
        return np.zeros(len(table), bool)
    kind = table["kind"].astype(str).to_numpy()
    op = table["op"].astype(str).to_numpy()
    view = np.isin(kind, VIEW_KINDS)
    out = np.zeros(len(kind), bool)
    seen = False
    for i in range(len(kind)):
        if view[i]:
            seen = seen or op[i] in TRANSPOSE_OPS
        else:
            out[i], seen = seen, False
    return out


def pointwise_runs(table: Any) -> list[tuple[int, int]]:
    """The runs of point-wise rows of a layer table (kind in :data:`FUSED_KINDS`): maximal sequences of such rows
    in table order where only views (:data:`VIEW_KINDS`) may stand between two of them, each as (first row,
    last row), positions in the table. A compiler fuses each run into one generated loop."""
    kind = table["kind"].astype(str).to_numpy()
    member, view = np.isin(kind, FUSED_KINDS), np.isin(kind, VIEW_KINDS)
    runs, first, last = [], -1, -1
    for i in range(len(kind)):
        if member[i]:
            first = i if first < 0 else first
            last = i
        elif not view[i] and first >= 0:
            runs.append((first, last))
            first = -1
    if first >= 0:
        runs.append((first, last))
    return runs


def broadcast_copy_rows(table: Any) -> np.ndarray:
    """Per row of a layer table (n,) whether it is a copy (kind ``copy``) that reads less than half of what it
    writes: a broadcast made contiguous (``expand`` then ``clone`` / ``reshape``: EvoNorm's group standard
    deviation, (B, G, 1, 1, 1) written out at the map's size), which a compiler never writes: the loop that
    reads it indexes the small tensor instead."""
    read = table["bytes_read"].to_numpy(float)
    written = table["bytes_written"].to_numpy(float)
    return (table["kind"] == "copy").to_numpy() & (2.0 * read < written)


def generated_loops(table: Any) -> int:
    """The loops a compiler generates for a layer table (its kernels that are not library calls): one per
    point-wise run (:func:`pointwise_runs`), one per pooling, reduction and copy that is not a broadcast
    (:func:`broadcast_copy_rows`), one per concatenation that copies (not right after a point-wise run,
    :func:`previous_kinds`). Views and library calls (:data:`EXTERN_KINDS`) are not counted."""
    kind = table["kind"].astype(str).to_numpy()
    own = np.isin(kind, ("pool", "reduce")) | ((kind == "copy") & ~broadcast_copy_rows(table))
    copies = (kind == "concat") & ~np.isin(previous_kinds(table), FUSED_KINDS)
    return len(pointwise_runs(table)) + int(own.sum()) + int(copies.sum())


def pointwise_run_bytes(table: Any) -> float:
    """Bytes a compiler's fused loops move for the point-wise rows of a layer table (kind in
    :data:`FUSED_KINDS`): the rows form runs, maximal sequences of such rows in table order where only views
    (:data:`VIEW_KINDS`) may stand between two of them; each run reads its first row's ``bytes_read`` and
    writes its last row's ``bytes_written`` (the intermediate tensors stay in registers). A second operand read
    inside a run (a residual add) is not counted. Bytes at the table's batch and precision."""
    read = table["bytes_read"].to_numpy(float)
    written = table["bytes_written"].to_numpy(float)
    return float(sum(read[first] + written[last] for first, last in pointwise_runs(table)))


def replaced_terms(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The :func:`carb.model.zoo_latency.additive_terms` columns the CPU terms ``names`` replace
    (:data:`REPLACED_TERMS`; none for a term that only adds), in order, each once."""
    out: list[str] = []
    for name in names:
        out += [c for c in REPLACED_TERMS.get(name, ()) if c not in out]
    return tuple(out)


def permuted_norm_rows(table: Any) -> np.ndarray:
    """Per row of a layer table (n,) whether it is a layer norm (``native_layer_norm``) of a 4-D input
    (``in_shape`` ``(N, H, W, C)``) right after a ``permute`` row: a norm over the channels of an NCHW map
    (``LayerNorm2d``, ConvNeXt's block norm), which reads it across the channel stride. All False in a table
    without the ``op`` and ``in_shape`` columns."""
    if "op" not in table.columns or "in_shape" not in table.columns:
        return np.zeros(len(table), bool)
    op = table["op"].astype(str).to_numpy()
    after_permute = np.r_[False, op[:-1] == "permute"]
    four_d = np.array([len(s) == 4 if isinstance(s, (tuple, list, np.ndarray)) else False for s in table["in_shape"]], bool)
    return (op == "native_layer_norm") & four_d & after_permute


def cpu_terms(frame: pd.DataFrame, names: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """The additive terms ``names`` (each a key of :data:`CPU_TERMS`; n rows, MB per image, or calls per
    image for :data:`COUNT_TERMS`: ``<name>_per_image``, or GFLOP per image for :data:`FLOP_TERMS`:
    ``gflop_<name>``) from the frame's ``tr_<column>`` (per image at fp32,
    :func:`carb.data.importers.timm_zoo.with_trace`) and ``batch_size``: the weight terms and kernel calls
    (:data:`PER_BATCH_TERMS`) are paid once per batch (MB or calls / batch), the others per image.
    NaN in a row without a trace. An unknown name or a frame without the column: one-line
    :class:`DatasetError`."""
    out: dict[str, np.ndarray] = {}
    for name in names:
        if name not in CPU_TERMS:
            raise DatasetError(f"cpu_terms: {name!r} is not allowed; allowed: {', '.join(CPU_TERMS)}")
        col = f"tr_{CPU_TERMS[name]}"
        if col not in frame.columns:
            raise DatasetError(f"cpu_terms: {name!r} needs column {col!r}, which the data lacks (refresh the "
                               "layer-table features: python scripts/data/zoo_trace_features.py --refresh)")
        x = pd.to_numeric(frame[col], errors="coerce").to_numpy(float)
        x = x if name in COUNT_TERMS else x / (1e9 if name in FLOP_TERMS else 1e6)
        if name in PER_BATCH_TERMS:
            x = x / pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
        unit = "gflop" if name in FLOP_TERMS else "mb"
        out[f"{name}_per_image" if name in COUNT_TERMS else f"{unit}_{name}"] = x
    return pd.DataFrame(out, index=frame.index)
