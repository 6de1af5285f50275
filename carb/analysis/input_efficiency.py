"""Time per multiply-add across input sizes in timm's GPU benchmark: is a larger input as efficient?

A model fitted on smaller inputs extrapolates to larger ones by assuming a smooth law: the time of a
ResNet at batch B grows with its multiply-adds, plus fixed costs that shrink, per multiply-add, as
the input grows. :func:`input_excess` measures how real GPUs follow that law. For every configuration
of the shipped timm table (GPU, precision, compile mode, memory layout, torch, model, batch) measured at
a reference input size (224 px) and another, the *excess* is

    excess = (time_other / time_ref) / (GMACs_other / GMACs_ref)

1.0: the other size costs what its multiply-adds say; above 1: it is slower per multiply-add than the
reference. Plain ResNets also get the largest convolution output of the batch in elements
(``largest_output``, from CARB's closed form) and whether it passes the 32-bit index limit
(``past_int32``: at least 2**31 - 1 elements; PyTorch then takes other kernels, e.g. batch norm leaves
cuDNN for its native kernel, ``aten/src/ATen/native/Normalization.cpp``).

What the shipped table says (``carb/data/timm-gpu-bench.csv``, plain ResNets, autocast fp16, nchw):
the RTX PRO 6000 Max-Q, the one GPU whose larger-input latency CARB misses by 3-9 %, runs bottleneck
ResNets in eager mode 4-7 % slower per multiply-add at 288 px than at 224 px, but also 6-10 % slower at
160 and 176 px, where no tensor comes near 2**31 elements; basic ResNets at 288 px, whose stem output
passes the limit too, are within 0.4 %; under ``torch.compile`` every size is within 1-3 % of 224 px.
So 224 px is the Max-Q's most efficient eager input size, the index limit is not the cause, and a model
trained on 160-224 px (efficiency rising with the input) cannot know that 288 px falls again.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from carb.design.identity import BLOCK

#: Columns that identify one benchmark setting of one model (all sizes of it are compared in it).
SETTING: tuple[str, ...] = ("device_name", "timm_precision", "compile", "memory_layout", "torch_version",
                            "model", "batch_size")
#: The 32-bit signed index limit: tensors of at least this many elements need 64-bit indexing.
INT32_LIMIT = 2**31 - 1


def input_excess(table: pd.DataFrame | None = None, reference_px: int = 224) -> pd.DataFrame:
    """Excess time per multiply-add of each size of each setting against ``reference_px``.

    ``table``: an imported timm frame (:func:`carb.data.importers.timm.import_timm` columns:
    :data:`SETTING`, ``input_size``, ``latency_ms``, ``flops``, ``block``, knobs); None = every plain
    ResNet row of the shipped table, all precisions, compile modes and layouts, newest torch.

    Returns one row per setting x input size other than the reference: :data:`SETTING`, ``block``
    (``basic`` | ``bottleneck``; NA for non-plain models), ``input_size`` (px), ``excess``
    (dimensionless, see the module docstring), ``largest_output`` (elements of the largest convolution
    output of the batch; NaN without knobs) and ``past_int32`` (bool)."""
    if table is None:
        from carb.data.importers.timm import import_timm

        table = import_timm(plain_only=True, compile=None, precision=None, memory_layout=None)
    t = table.copy()
    t["largest_output"] = largest_output(t)
    key = list(SETTING)
    ref = t[t["input_size"] == reference_px].set_index(key)[["latency_ms", "flops"]]
    ref = ref[~ref.index.duplicated()]
    other = t[t["input_size"] != reference_px].join(ref, on=key, rsuffix="_ref")
    other = other[other["latency_ms_ref"].notna()]
    excess = (other["latency_ms"] / other["latency_ms_ref"]) / (other["flops"] / other["flops_ref"])
    out = other[key + [BLOCK, "input_size", "largest_output"]].assign(excess=excess.to_numpy(float))
    out["past_int32"] = out["largest_output"].to_numpy(float) >= INT32_LIMIT
    return out.reset_index(drop=True)


def largest_output(frame: pd.DataFrame) -> pd.Series:
    """Elements of the largest convolution output of one forward at the row's batch size (NaN for rows
    whose knobs name no network); a Series with the frame's index."""
    from carb.design.shapes import largest_output_elements
    from carb.errors import ConfigError, DatasetError

    out = pd.Series(np.nan, index=frame.index, name="largest_output")
    ok = frame[BLOCK].notna() if BLOCK in frame.columns else pd.Series(False, index=frame.index)
    if ok.any():
        try:
            out[ok] = largest_output_elements(frame[ok]).to_numpy(float)
        except (ConfigError, DatasetError):
            pass
    return out


def summary(excess: pd.DataFrame) -> pd.DataFrame:
    """Median, min and max excess and row count per GPU x compile mode x block x input size x side of
    the index limit, for the eager and compiled nchw rows of autocast fp16 (the settings every GPU has)."""
    e = excess[(excess["timm_precision"] == "amp_fp16") & (excess["memory_layout"] == "nchw")]
    g = e.groupby(["device_name", "compile", BLOCK, "input_size", "past_int32"], observed=True)["excess"]
    return g.agg(["median", "min", "max", "count"]).reset_index()
