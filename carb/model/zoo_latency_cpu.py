"""CPU terms of the zoo latency model (:class:`carb.model.zoo_latency.AdditiveBase`) for timm's CPU file.

timm's published CPU file (``benchmark-infer-fp32-nchw-pt240-cpu-i9_10940x-dynamo.csv``: Intel Core
i9-10940X, fp32, batch 1, ``torch.compile``) is fitted with the same per-kind law as the GPU files, whose
settings were chosen on GPUs. A CPU at batch 1 differs in one way the layer table can see:

- **Weights used only a few times** (``weight_lowreuse``): a layer whose every weight is used fewer than
  :data:`LOW_REUSE` times per image (its FLOPs / (2 x parameters): output positions at batch 1) runs as a
  matrix-vector product: the classifier head of every network, VGG's 7x7 and 1x1 fully connected
  convolutions (411 MB + 67 MB), ResNetV2-BiT's and NFNet's convolution heads, SelecSLS's last 3x3
  convolutions at 4x4. Its time is its weight bytes at the rate the CPU streams (and reorders) weights,
  not its FLOPs at the GEMM rate, and not the per-MB weight cost of the whole network (a ViT's linear
  layers reuse each weight 197 times). On the i9 file VGG's 8 models take 107-122 ms at batch 1 while
  their 7.6-19.6 GMACs would take 13-33 ms at the 1.2 TFLOP/s the large ViTs reach.
  ``weight_lowreuse_dram``: the part of those weights in layers larger than :data:`CACHE_BYTES` (VGG's
  411 MB and 67 MB layers, BiT's wide heads), which no cache holds between calls: a cost on top.
- **Memory-bound bytes beyond the last-level cache** (``membound_dram``): normalisation, activation,
  element-wise, copy, concatenation, pooling and reduction operations whose bytes read + written exceed
  :data:`CACHE_BYTES` stream from DRAM; the rest stay in cache. Priced apart from ``mb_<kind>``.

:func:`cpu_parts` gives the layer-table columns (``scripts/data/zoo_trace_features.py`` stores them in
``carb/data/timm-zoo-trace.parquet``; :func:`carb.data.importers.timm_zoo.with_trace` joins them as
``tr_<column>``); :func:`cpu_terms` turns them into additive terms per image. Which terms a device's rows
take is a per-device setting (``conf/zoo_latency/default.yaml``, ``per_device``); the GPU files take none.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.errors import DatasetError

#: A layer whose weights are each used fewer times than this per image (FLOPs / (2 x parameters)) is
#: weight-streaming at batch 1 (:func:`cpu_parts`).
LOW_REUSE: float = 8.0
#: Bytes read + written by one memory-bound operation beyond which it streams from DRAM (16 MB: under the
#: i9-10940X's 19.25 MB last-level cache, the share other data keeps left out).
CACHE_BYTES: float = 16e6
#: Memory-bound layer-table kinds (:data:`carb.model.zoo_latency.TRACE_MEMORY_KINDS`).
MEMORY_KINDS: tuple[str, ...] = ("norm", "activation", "elementwise", "copy", "concat", "pool", "reduce")
#: The layer-table columns :func:`cpu_parts` gives (bytes at the table's batch and precision).
CPU_COLUMNS: tuple[str, ...] = ("bytes_weight_lowreuse", "bytes_weight_lowreuse_dram", "bytes_membound_dram")
#: The terms :func:`cpu_terms` can add, each from its column of :data:`CPU_COLUMNS`.
CPU_TERMS: dict[str, str] = {"weight_lowreuse": "bytes_weight_lowreuse",
                             "weight_lowreuse_dram": "bytes_weight_lowreuse_dram",
                             "membound_dram": "bytes_membound_dram"}
#: The terms read once per batch (weights); the others per image.
PER_BATCH_TERMS: tuple[str, ...] = ("weight_lowreuse", "weight_lowreuse_dram")


def cpu_parts(table: Any, low_reuse: float = LOW_REUSE, cache_bytes: float = CACHE_BYTES) -> dict[str, float]:
    """The CPU columns of a layer table (:func:`carb.design.trace.trace`'s rows: ``kind``, ``flops``,
    ``bytes_read``, ``bytes_written``, ``param_bytes``, ``params``; ``attrs["input_shape"]``): ``bytes_weight_lowreuse``
    (parameter bytes of the rows whose weights are used fewer than ``low_reuse`` times per image,
    ``flops / (2 x params x batch)``), ``bytes_weight_lowreuse_dram`` (the part of it in layers whose weights
    exceed ``cache_bytes``: streamed from DRAM every call) and ``bytes_membound_dram`` (bytes read +
    written by the memory-bound rows, :data:`MEMORY_KINDS`, that move more than ``cache_bytes`` each).
    Same batch and precision as ``table`` (timm's CPU file: batch 1, fp32)."""
    batch = float(table.attrs.get("input_shape", (1,))[0])
    pb = table["param_bytes"].to_numpy(float)
    params = table["params"].to_numpy(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        reuse = table["flops"].to_numpy(float) / (2.0 * params * batch)
    moved = (table["bytes_read"] + table["bytes_written"]).to_numpy(float)
    mem = table["kind"].isin(MEMORY_KINDS).to_numpy()
    low = (pb > 0) & (reuse < low_reuse)
    return {"bytes_weight_lowreuse": float(pb[low].sum()),
            "bytes_weight_lowreuse_dram": float(pb[low & (pb > cache_bytes)].sum()),
            "bytes_membound_dram": float(moved[mem & (moved > cache_bytes)].sum())}


def cpu_terms(frame: pd.DataFrame, names: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """The additive terms ``names`` (each a key of :data:`CPU_TERMS`; n rows, MB per image) from the
    frame's ``tr_<column>`` (per image at fp32, :func:`carb.data.importers.timm_zoo.with_trace`) and
    ``batch_size``: the weight terms (:data:`PER_BATCH_TERMS`) are read once per batch (MB / batch),
    ``membound_dram`` per image.
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
        mb = pd.to_numeric(frame[col], errors="coerce").to_numpy(float) / 1e6
        if name in PER_BATCH_TERMS:
            mb = mb / pd.to_numeric(frame["batch_size"], errors="coerce").to_numpy(float)
        out[f"mb_{name}"] = mb
    return pd.DataFrame(out, index=frame.index)
