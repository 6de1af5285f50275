"""Static (architecture-only) features of a configuration: what it costs before it runs.

Two paths give the same numbers:

* :func:`static_features` (reference): builds the torch model, counts FLOPs with fvcore's
  ``FlopCountAnalysis`` on one forward of the whole batch, and sums leaf-module output sizes with
  forward hooks. Slow (a real forward), imports torch.
* :func:`grid_features` (fast path for screening): closed-form counts for this architecture family in
  plain Python/NumPy, cached per (architecture, input size) and scaled by batch and precision.
  No torch import; 3,072 configs take well under a second.

FLOP convention (fvcore, the paper's): one multiply-add = ONE flop. Counted ops: convolutions
(B*Cout*Cin*k*k*Hout*Wout), eval-mode batch norm (2 per element), adaptive average pool (1 per input
element), linear (B*in*out). ReLU, max-pool and the residual add count 0, as in fvcore.
``torch.utils.flop_counter.FlopCounterMode`` counts 2 per multiply-add and skips batch norm; do not
mix the two.

Byte sizes are at the configuration's precision (fp32: 4 bytes, fp16/bf16: 2) and MB = 2**20 bytes.
"""
from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import BYTES_PER_ELEMENT, KNOBS, ArchConfig, lookup
from carb.design.candidates import arch_codes, config_ids, configs_frame, records_frame
from carb.design.layers import network_summary, part_layers, part_summary, stage_parts

MB = 2.0**20
STATIC_FEATURES = ("flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB",
                  "flops_per_param_log", "compute_intensity", "n_conv")


@lru_cache(maxsize=65536)
def per_image_counts(block: str, layout: tuple[int, ...], width_mult: float, input_size: int,
                     early_downsample: bool, num_classes: int, inner_mult: float = 1.0) -> tuple[float, int, float, float, int]:
    """Closed-form counts for ONE image at fp32 granularity (elements, not bytes), summed over the
    layers of :func:`carb.design.layers.walk` (same arguments), one distinct part at a time
    (:func:`carb.design.layers.network_summary`).

    Returns ``(flops, params, activation_elements_total, activation_elements_max, n_conv)`` where the
    activation counts are over every leaf-module output of one forward (what forward hooks see: every
    layer but the residual add, which is no module). FLOPs follow fvcore (see the module docstring)."""
    flops, params, act_total, act_max, n_conv = network_summary(block, layout, width_mult, input_size,
                                                                early_downsample, num_classes, inner_mult)[:5]
    return float(flops), int(params), float(act_total), float(act_max), int(n_conv)


def clear_caches() -> None:
    """Empty the closed-form caches (per architecture and per part of the walk), e.g. to time a cold run."""
    per_image_counts.cache_clear()
    network_summary.cache_clear()
    part_summary.cache_clear()
    part_layers.cache_clear()
    stage_parts.cache_clear()


def _derived(flops: np.ndarray, params: np.ndarray, param_mb: np.ndarray, act_mb: np.ndarray) -> dict[str, np.ndarray]:
    return {"flops_per_param_log": np.log10(flops / params),
            "compute_intensity": flops / (param_mb + act_mb)}


#: Static features proportional to the batch size (the others do not depend on it, or follow from these).
BATCH_LINEAR_FEATURES = ("flops", "total_activation_MB", "max_activation_MB")
#: A zoo row's batch-linear columns besides those (:mod:`carb.design.zoo_features`: whole-batch totals).
ZOO_BATCH_LINEAR = ("activations", "peak_live_MB", "bytes_read_MB", "bytes_written_MB")


def at_batch(rows: pd.DataFrame, batch_size: np.ndarray | Sequence[float]) -> pd.DataFrame:
    """The same configurations at other batch sizes: ``rows`` (n rows with ``batch_size`` and
    :data:`STATIC_FEATURES`) with ``batch_size`` replaced by ``batch_size`` (shape (n,)) and the
    batch-dependent static features rescaled, without rebuilding or re-validating the configurations
    (so imported rows whose features came from elsewhere work too). ``config_id`` is dropped: it
    names the old batch size."""
    out = rows.drop(columns=["config_id"], errors="ignore").copy()
    new = np.asarray(batch_size, dtype=float)
    ratio = new / pd.to_numeric(out["batch_size"]).to_numpy(float)
    from carb.design.zoo_features import ZOO_KIND_FEATURES

    for c in (*BATCH_LINEAR_FEATURES, *ZOO_BATCH_LINEAR, *ZOO_KIND_FEATURES):
        if c in out.columns:
            out[c] = pd.to_numeric(out[c]).to_numpy(float) * ratio
    out["batch_size"] = new.astype(int) if np.all(new == np.round(new)) else new
    if {"flops", "params", "param_size_MB", "total_activation_MB"} <= set(out.columns):
        f, p = out["flops"].to_numpy(float), out["params"].to_numpy(float)
        for k, v in _derived(f, p, out["param_size_MB"].to_numpy(float),
                             out["total_activation_MB"].to_numpy(float)).items():
            if k in out.columns:
                out[k] = v
    return out


def grid_features(configs: Sequence[ArchConfig] | pd.DataFrame) -> pd.DataFrame:
    """Fast static features for many configs: one row per config with ``config_id``, the knob
    columns and :data:`STATIC_FEATURES` (same names and values as :func:`static_features`).

    ``configs`` is a list of :class:`ArchConfig` or a DataFrame with the knob columns (validated and
    normalized by :func:`carb.design.candidates.records_frame`, each distinct architecture once, so a
    frame of a million rows takes seconds, not minutes). Counts are computed once per architecture."""
    frame = records_frame(configs, "grid frame") if isinstance(configs, pd.DataFrame) else configs_frame(configs)
    n = len(frame)
    if n == 0:
        return pd.DataFrame(columns=["config_id", *KNOBS, *STATIC_FEATURES])
    codes, archs = arch_codes(frame)
    per_arch = np.array([per_image_counts(*arch_args(r)) for r in archs.itertuples(index=False)], dtype=float)
    counts = per_arch.reshape(-1, 5)[codes]
    bs = frame["batch_size"].to_numpy(float)
    nbytes = lookup(frame["precision"], BYTES_PER_ELEMENT)
    flops = counts[:, 0] * bs
    params = counts[:, 1]
    param_mb = params * nbytes / MB
    act_mb = counts[:, 2] * bs * nbytes / MB
    df = frame[list(KNOBS)].copy()
    df.insert(0, "config_id", config_ids(frame, (codes, archs)))
    df["flops"] = flops
    df["params"] = params.astype("int64")
    df["param_size_MB"] = param_mb
    df["total_activation_MB"] = act_mb
    df["max_activation_MB"] = counts[:, 3] * bs * nbytes / MB
    for k, v in _derived(flops, params, param_mb, act_mb).items():
        df[k] = v
    df["n_conv"] = counts[:, 4].astype("int64")
    return df


def arch_args(rec: Any) -> tuple:
    """Arguments of :func:`per_image_counts` (and :func:`carb.design.layers.walk`) for one row of a knob
    frame (named tuple or record with the architecture columns; ``stages`` as ``'2-2-2-2'``)."""
    layout = tuple(int(x) for x in str(rec.stages).split("-"))
    return (str(rec.block), layout, float(rec.width_mult), int(rec.input_size), bool(rec.early_downsample),
            int(rec.num_classes), float(rec.inner_mult))


def static_features(cfg: ArchConfig) -> dict[str, Any]:
    """Reference static features of one config (builds the model; fvcore FLOPs; hook activations).

    Returns a dict with the keys of :data:`STATIC_FEATURES`."""
    import warnings

    import torch
    from fvcore.nn import FlopCountAnalysis
    from torch import nn

    from carb.design.resnet import build_model

    model = build_model(cfg)
    x = torch.zeros(cfg.batch_size, 3, cfg.input_size, cfg.input_size)
    nbytes = BYTES_PER_ELEMENT[cfg.precision]
    sizes: list[int] = []
    hooks = [m.register_forward_hook(lambda _m, _i, out: sizes.append(out.numel()))
             for m in model.modules() if len(list(m.children())) == 0]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fca = FlopCountAnalysis(model, x)
        fca.unsupported_ops_warnings(False)
        fca.uncalled_modules_warnings(False)
        flops = float(fca.total())
    params = int(sum(p.numel() for p in model.parameters()))
    param_mb = params * nbytes / MB
    act_mb = float(sum(sizes)) * nbytes / MB
    derived = _derived(np.array([flops]), np.array([params]), np.array([param_mb]), np.array([act_mb]))
    return {"flops": flops, "params": params, "param_size_MB": param_mb, "total_activation_MB": act_mb,
            "max_activation_MB": float(max(sizes)) * nbytes / MB,
            "flops_per_param_log": float(derived["flops_per_param_log"][0]),
            "compute_intensity": float(derived["compute_intensity"][0]),
            "n_conv": sum(1 for m in model.modules() if isinstance(m, nn.Conv2d))}


def flop_counter_mode_flops(cfg: ArchConfig) -> float:
    """FLOPs from ``torch.utils.flop_counter.FlopCounterMode`` on the meta device (no memory used).

    Counts 2 per multiply-add and only convolutions/matmuls, so it equals
    ``2 * (conv + linear multiply-adds)``; useful as an independent cross-check of the closed form."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from carb.design.resnet import build_model

    with torch.device("meta"):
        model = build_model(cfg)
        x = torch.empty(cfg.batch_size, 3, cfg.input_size, cfg.input_size)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(x)
    return float(counter.get_total_flops())
