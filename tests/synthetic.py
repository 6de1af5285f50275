"""Test-only generator of physics-like rows in the full dataset schema (never a measurement).

The cost model is simple and known, so tests can check that the predictor learns its relations:

- static features from a ResNet-like size model (ResNet-18 at 224 px: ~11 M params, ~1.8 GFLOPs):
  ``params ~ depth * width^2``, activations
  ``~ batch * width * (input / stem)^2 * depth``, FLOPs ``~ batch * params-per-pixel * pixels``;
- ``peak_memory_MB = param_size_MB + 1.6 * max_activation_MB + 8 MB workspace`` (x noise);
- ``latency_ms = launches * 12 us + flops / throughput(precision, batch)`` (x noise), with a
  batch-efficiency factor that saturates for large batches (low batches run far below peak);
- ``energy_J = n_runs * latency_s * power_W`` with ``power_W = 60 + 290 * sm_util / 100`` (x noise).

Telemetry (``avg_sm_util`` etc.) follows from the workload size; ``energy=False`` makes the energy
column NaN (a device without an energy counter), ``telemetry=False`` makes all runtime features NaN.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

from carb.data.schema import COLUMNS, SCHEMA, conform

BASIC_DEPTHS = (10, 14, 18, 26, 34)
BOTTLENECK_DEPTHS = (50, 101, 152)
WIDTHS = (0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 1.25, 1.5)
INPUTS = (32, 64, 96, 128, 160, 224)
BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PRECISIONS = ("fp32", "fp16", "bf16")
_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
_PEAK_TFLOPS = {"fp32": 30.0, "fp16": 110.0, "bf16": 100.0}


def _grid() -> pd.DataFrame:
    rows = []
    for block, depths in (("basic", BASIC_DEPTHS), ("bottleneck", BOTTLENECK_DEPTHS)):
        for d in depths:
            for w in WIDTHS:
                for s in INPUTS:
                    for b in BATCHES:
                        for p in PRECISIONS:
                            for ed in (True, False):
                                rows.append((block, d, w, s, b, p, ed))
    return pd.DataFrame(rows, columns=["block", "depth", "width_mult", "input_size", "batch_size",
                                       "precision", "early_downsample"])


def synthetic_dataset(n: int = 600, seed: int = 0, device_name: str = "Synthetic GPU",
                      energy: bool = True, telemetry: bool = True, noise: float = 0.03,
                      n_oom: int = 0) -> pd.DataFrame:
    """``n`` distinct configurations (plus ``n_oom`` OOM rows) in the schema of
    :data:`carb.data.schema.COLUMNS`, seeded. Units as in the schema (MB = 2**20 bytes, J, ms)."""
    rng = np.random.default_rng(seed)
    grid = _grid()
    total = n + n_oom
    if total > len(grid):
        raise ValueError(f"at most {len(grid)} distinct synthetic configurations, asked {total}")
    df = grid.iloc[np.sort(rng.choice(len(grid), size=total, replace=False))].reset_index(drop=True)
    bneck = (df["block"] == "bottleneck").to_numpy()
    d = df["depth"].to_numpy(float)
    w = df["width_mult"].to_numpy(float)
    s = df["input_size"].to_numpy(float)
    b = df["batch_size"].to_numpy(float)
    nbytes = df["precision"].map(_BYTES).to_numpy(float)
    stem = np.where(df["early_downsample"].to_numpy(bool), 4.0, 1.0)
    pix = (s / stem) ** 2

    params = np.round(150.0 * d * (w * 64) ** 2 * np.where(bneck, 0.8, 1.0) + 5e4 * w).astype(np.int64)
    per_pixel_macs = params / d * 0.9
    flops = b * per_pixel_macs * pix * np.where(bneck, 0.6, 1.0)
    act_elems = b * (w * 64) * pix * d * np.where(bneck, 3.0, 2.0)
    total_act = act_elems * nbytes / 2**20
    max_act = b * (w * 64) * pix * np.where(bneck, 4.0, 1.0) * nbytes / 2**20
    param_mb = params * nbytes / 2**20
    n_conv = np.round(d * np.where(bneck, 1.0, 1.0) + 1).astype(np.int64)

    def jitter(size: int | tuple) -> np.ndarray:
        return np.exp(rng.normal(0.0, noise, size))

    sat = 1.0 - np.exp(-b * pix * w / 4e3)                      # batch/size efficiency in (0, 1)
    sm_util = np.clip(100 * (0.15 + 0.8 * sat) + rng.normal(0, 3, total), 1, 100)
    mem_util = np.clip(100 * (0.1 + 0.75 * sat * (nbytes / 4) ** 0.3) + rng.normal(0, 3, total), 1, 100)
    launches = 3.0 * n_conv + 4
    thr = _PEAK_TFLOPS_arr(df["precision"]) * 1e12 * (0.05 + 0.6 * sat)
    latency = (launches * 0.012 + 1e3 * flops / thr) * jitter(total)
    n_runs = 100.0
    power = 60.0 + 290.0 * sm_util / 100.0
    energy_j = n_runs * latency / 1e3 * power * jitter(total)
    peak = (param_mb + 1.6 * max_act + 8.0) * jitter(total)
    temp = 38.0 + 0.35 * sm_util + rng.normal(0, 1.0, total)

    out = df.copy()
    out["stages"] = np.where(bneck, "3-4-6-3", "2-2-2-2")
    out["flops"] = flops
    out["params"] = params
    out["param_size_MB"] = param_mb
    out["total_activation_MB"] = total_act
    out["max_activation_MB"] = max_act
    out["flops_per_param_log"] = np.log10(flops / params)
    out["compute_intensity"] = flops / (param_mb + total_act)
    out["n_conv"] = n_conv
    out["avg_sm_util"] = sm_util if telemetry else np.nan
    out["avg_mem_util"] = mem_util if telemetry else np.nan
    out["gpu_temp_C"] = temp if telemetry else np.nan
    out["kernel_launches"] = launches if telemetry else np.nan
    out["peak_memory_MB"] = peak
    out["energy_J"] = energy_j if energy else np.nan
    out["latency_ms"] = latency
    out["n_runs"] = n_runs
    out["n_warmup"] = 10.0
    out["latency_std_ms"] = latency * 0.02
    out["avg_power_W"] = power if energy else np.nan
    out["locked_sm_clock_MHz"] = np.nan
    out["locked_mem_clock_MHz"] = np.nan
    out["duration_s"] = n_runs * latency / 1e3
    out["threads"] = np.nan
    out["protocol_s"] = out["duration_s"] + 3.0
    out["device_name"] = device_name
    out["device_kind"] = "cuda"
    out["driver"] = "synthetic"
    out["torch_version"] = "synthetic"
    out["measured_at"] = "1970-01-01T00:00:00Z"
    out["status"] = "ok"
    out["error"] = ""
    reasons = []
    if not energy:
        reasons.append("energy_J: synthetic device without an energy counter")
    if not telemetry:
        reasons.append("avg_sm_util: synthetic device without telemetry")
    out["missing_reason"] = "; ".join(reasons)
    out["config_id"] = [hashlib.sha1(repr(tuple(r)).encode()).hexdigest()[:16]
                        for r in df.itertuples(index=False)]
    if n_oom:
        oom = rng.choice(total, size=n_oom, replace=False)
        out.loc[oom, ["peak_memory_MB", "energy_J", "latency_ms"]] = np.nan
        out.loc[oom, "status"] = "oom"
        out.loc[oom, "error"] = "CUDA out of memory (synthetic)"
    out = conform(out, fill_missing=[c for c in COLUMNS if c not in out.columns])
    for c in COLUMNS:
        if SCHEMA[c] == "string":
            out[c] = out[c].astype("string")
    return out[list(COLUMNS)]


def _PEAK_TFLOPS_arr(precision: pd.Series) -> np.ndarray:
    return precision.map(_PEAK_TFLOPS).to_numpy(float)


def with_interactions(df: pd.DataFrame) -> pd.DataFrame:
    """The paper's interaction features computed inline (the contract of
    ``carb.model.encoding.interaction_features``), for tests that need them precomputed."""
    out = df.copy()
    out["batch_x_sm"] = out["batch_size"] * out["avg_sm_util"]
    out["flops_x_sm"] = np.log1p(out["flops"]) * out["avg_sm_util"]
    out["act_x_mem"] = np.log1p(out["total_activation_MB"]) * out["avg_mem_util"]
    out["util_product"] = out["avg_sm_util"] * out["avg_mem_util"]
    return out
