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

import math
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import (
    BYTES_PER_ELEMENT,
    EXPANSION,
    KNOBS,
    ArchConfig,
    base_widths,
    configs_from_records,
    scaled,
)

MB = 2.0**20
STATIC_FEATURES = ("flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB",
                  "flops_per_param_log", "compute_intensity", "n_conv")


def _out(h: int, k: int, s: int, p: int) -> int:
    return (h + 2 * p - k) // s + 1


@lru_cache(maxsize=65536)
def per_image_counts(block: str, layout: tuple[int, ...], width_mult: float, input_size: int,
                     early_downsample: bool, num_classes: int, inner_mult: float = 1.0) -> tuple[float, int, float, float, int]:
    """Closed-form counts for ONE image at fp32 granularity (elements, not bytes).

    Returns ``(flops, params, activation_elements_total, activation_elements_max, n_conv)`` where the
    activation counts are over every leaf-module output of one forward (what forward hooks see).
    ``inner_mult``: bottleneck inner width ``int(planes * inner_mult)`` (as the builder; basic blocks ignore it)."""
    flops = 0.0
    params = 0
    act_total = 0.0
    act_max = 0.0
    n_conv = 0

    def act(elems: float, times: int = 1) -> None:
        nonlocal act_total, act_max
        act_total += elems * times
        act_max = max(act_max, elems)

    def conv(cin: int, cout: int, k: int, s: int, p: int, h: int) -> int:
        nonlocal flops, params, n_conv
        ho = _out(h, k, s, p)
        flops += cout * cin * k * k * ho * ho
        params += cout * cin * k * k
        n_conv += 1
        act(cout * ho * ho)
        return ho

    def bn(c: int, h: int) -> None:
        nonlocal flops, params
        flops += 2 * c * h * h
        params += 2 * c
        act(c * h * h)

    widths = tuple(scaled(w, width_mult) for w in base_widths(len(layout)))
    stem = widths[0]
    h = input_size
    if early_downsample:
        h = conv(3, stem, 7, 2, 3, h)
        bn(stem, h)
        act(stem * h * h)  # relu
        h = _out(h, 3, 2, 1)
        act(stem * h * h)  # maxpool
    else:
        h = conv(3, stem, 3, 1, 1, h)
        bn(stem, h)
        act(stem * h * h)  # relu
    cin = stem
    for i, (n_blocks, planes) in enumerate(zip(layout, widths)):
        for j in range(n_blocks):
            s = 2 if (i > 0 and j == 0) else 1
            if block == "basic":
                cout = planes
                ho = conv(cin, planes, 3, s, 1, h)
                bn(planes, ho)
                act(planes * ho * ho)  # relu1
                conv(planes, planes, 3, 1, 1, ho)
                bn(planes, ho)
            else:
                width = max(1, int(planes * inner_mult))
                cout = planes * EXPANSION["bottleneck"]
                conv(cin, width, 1, 1, 0, h)
                bn(width, h)
                act(width * h * h)  # relu1
                ho = conv(width, width, 3, s, 1, h)
                bn(width, ho)
                act(width * ho * ho)  # relu2
                conv(width, cout, 1, 1, 0, ho)
                bn(cout, ho)
            if s != 1 or cin != cout:
                conv(cin, cout, 1, s, 0, h)
                bn(cout, ho)
            act(cout * ho * ho)  # final relu after the add
            cin, h = cout, ho
    flops += cin * h * h  # adaptive average pool
    act(cin)
    flops += cin * num_classes  # linear
    params += cin * num_classes + num_classes
    act(num_classes)
    return float(flops), int(params), float(act_total), float(act_max), int(n_conv)


def _derived(flops: np.ndarray, params: np.ndarray, param_mb: np.ndarray, act_mb: np.ndarray) -> dict[str, np.ndarray]:
    return {"flops_per_param_log": np.log10(flops / params),
            "compute_intensity": flops / (param_mb + act_mb)}


#: Static features proportional to the batch size (the others do not depend on it, or follow from these).
BATCH_LINEAR_FEATURES = ("flops", "total_activation_MB", "max_activation_MB")


def at_batch(rows: pd.DataFrame, batch_size: np.ndarray | Sequence[float]) -> pd.DataFrame:
    """The same configurations at other batch sizes: ``rows`` (n rows with ``batch_size`` and
    :data:`STATIC_FEATURES`) with ``batch_size`` replaced by ``batch_size`` (shape (n,)) and the
    batch-dependent static features rescaled, without rebuilding or re-validating the configurations
    (so imported rows whose features came from elsewhere work too). ``config_id`` is dropped: it
    names the old batch size."""
    out = rows.drop(columns=["config_id"], errors="ignore").copy()
    new = np.asarray(batch_size, dtype=float)
    ratio = new / pd.to_numeric(out["batch_size"]).to_numpy(float)
    for c in BATCH_LINEAR_FEATURES:
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

    ``configs`` is a list of :class:`ArchConfig` or a DataFrame with the knob columns."""
    if isinstance(configs, pd.DataFrame):
        configs = configs_from_records(configs.to_dict("records"), source="grid frame")
    configs = list(configs)
    n = len(configs)
    counts = np.empty((n, 5), dtype=float)
    bs = np.empty(n, dtype=float)
    nbytes = np.empty(n, dtype=float)
    memo: dict[tuple, Any] = {}  # per-image counts do not depend on batch size or precision
    for i, c in enumerate(configs):
        key = (c.block, tuple(c.layout), c.width_mult, c.input_size, c.early_downsample, c.num_classes,
               c.inner_mult)
        if key not in memo:
            memo[key] = per_image_counts(*key)
        counts[i] = memo[key]
        bs[i] = c.batch_size
        nbytes[i] = BYTES_PER_ELEMENT[c.precision]
    flops = counts[:, 0] * bs
    params = counts[:, 1]
    param_mb = params * nbytes / MB
    act_mb = counts[:, 2] * bs * nbytes / MB
    df = pd.DataFrame([{"config_id": c.config_id, **c.to_dict()} for c in configs])
    if n == 0:
        df = pd.DataFrame(columns=["config_id", *KNOBS])
    df["flops"] = flops
    df["params"] = params.astype("int64")
    df["param_size_MB"] = param_mb
    df["total_activation_MB"] = act_mb
    df["max_activation_MB"] = counts[:, 3] * bs * nbytes / MB
    for k, v in _derived(flops, params, param_mb, act_mb).items():
        df[k] = v
    df["n_conv"] = counts[:, 4].astype("int64")
    return df


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


def iter_chunks(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    """Consecutive slices of ``items`` of at most ``size``."""
    for i in range(0, len(items), size):
        yield items[i:i + size]


def is_finite(x: float) -> bool:
    return x is not None and math.isfinite(float(x))
