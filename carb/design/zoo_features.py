"""Static features of a zoo network from its layer table (:mod:`carb.design.trace`): the same names as
a ResNet configuration's (:data:`carb.design.features.STATIC_FEATURES`) plus the tracer's totals.

Counts follow the dataset schema: ``flops`` is fvcore's count (one per multiply-add: the tracer's
``macs``), bytes are at the configuration's precision, ``MB`` is 2**20 bytes, whole batch.
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
#: operations), ``n_ops`` (operations but views).
ZOO_STATIC: tuple[str, ...] = ("flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB",
                               "flops_per_param_log", "compute_intensity", "n_conv", "activations",
                               "peak_live_MB", "bytes_read_MB", "bytes_written_MB", "n_ops")
MB = float(2 ** 20)


@functools.lru_cache(maxsize=4096)
def _batch1(model_name: str, input_size: int, precision: str) -> tuple[tuple[str, Any], ...]:
    """The batch-1 summary (:func:`carb.design.trace.summarize`) plus the largest single output and the
    convolution count, as a hashable tuple (cached in memory; the tracer caches the table on disk)."""
    from carb.design.trace import CONV_KINDS, summarize, trace

    table = trace(model_name, (1, 3, int(input_size), int(input_size)), precision=precision)
    s = dict(summarize(table))
    views = table["kind"] == "reshape"
    s["max_written"] = float(table.loc[~views, "bytes_written"].max()) if (~views).any() else 0.0
    s["n_conv"] = int(table["kind"].isin(CONV_KINDS).sum())
    return tuple(sorted(s.items()))


def zoo_summary(model_name: str, input_size: int, precision: str = "fp32") -> dict[str, Any]:
    """The tracer's totals of one image (batch 1) of ``model_name`` at ``input_size`` px (see
    :func:`carb.design.trace.summarize`); ``flops`` here is fvcore's count (the tracer's ``macs``).
    Raises :class:`carb.errors.ZooError` when the model cannot be built or traced."""
    s = dict(_batch1(model_name, int(input_size), precision))
    s["flops_2x"] = s["flops"]
    s["flops"] = s["macs"]
    return s


def zoo_static(model_name: str, input_size: int, batch_size: int, precision: str) -> dict[str, Any]:
    """The :data:`ZOO_STATIC` columns of one configuration (whole batch)."""
    s = zoo_summary(model_name, input_size, precision)
    b = int(batch_size)
    flops = s["flops"] * b
    params = int(s["params"])
    param_mb = s["param_bytes"] / MB
    total_act = s["bytes_written"] * b / MB
    return {"flops": flops, "params": params, "param_size_MB": param_mb, "total_activation_MB": total_act,
            "max_activation_MB": s["max_written"] * b / MB,
            "flops_per_param_log": math.log10(flops / params) if flops > 0 and params > 0 else float("nan"),
            "compute_intensity": flops / (param_mb + total_act) if param_mb + total_act > 0 else float("nan"),
            "n_conv": int(s["n_conv"]), "activations": float(s["activations"]) * b,
            "peak_live_MB": s["peak_live_bytes"] * b / MB, "bytes_read_MB": s["bytes_read"] * b / MB,
            "bytes_written_MB": s["bytes_written"] * b / MB, "n_ops": int(s["n_ops"])}


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
