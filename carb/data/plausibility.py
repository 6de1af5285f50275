"""Physical plausibility of a dataset's rows: what a column in the wrong unit looks like.

Per row with a value (:func:`problems`):

- ``latency_ms`` must be finite, and the compute rate it implies, ``2 x flops / latency`` (``flops`` counts
  multiply-adds, fvcore's convention), at most :data:`PEAK_TOLERANCE` x the device's peak for the row's
  precision: a GPU's spec record (:mod:`carb.data.gpu_specs`: its fingerprint's ``spec`` or its name),
  a CPU's estimate from its fingerprint (cores x FLOP per cycle of its widest units x :data:`CPU_MAX_GHZ`),
  else :data:`ANY_DEVICE_TFLOPS` (the fastest accelerator's dense peak). Seconds read as milliseconds
  imply a thousand times the rate. On a GPU with a spec record, the bandwidth the activations imply
  (``total_activation_MB`` / latency, when they exceed :data:`L2_MULTIPLE` x the L2 cache, so they must
  go through memory) at most :data:`PEAK_TOLERANCE` x its memory bandwidth.
- ``peak_memory_MB`` must be finite, at least :data:`WEIGHTS_FLOOR` x the parameters' bytes
  (``param_size_MB``; a peak holds the weights, and GiB or GB read as MiB falls ~1000x below them), and
  at most the device's memory (x 1.05; a GPU's spec record),
  else :data:`ANY_DEVICE_MiB` (bytes read as MiB exceed it).
- ``energy_J`` must be finite.

:func:`check_plausible` raises one line naming the first bad row, its column, the value and the likely
unit, with the number of other bad rows. The importers (:mod:`carb.data.importers`) and
:func:`carb.data.io.load_dataset` run it on every dataset.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from carb.data.gpu_specs import peak_TFLOPS, record_for_fingerprint
from carb.errors import DatasetError

#: A row may imply at most this many times its device's peak rate (boost clocks above the sheet's,
#: counting conventions) before it is called implausible.
PEAK_TOLERANCE = 1.5
#: Activations larger than this many L2 caches are written to device memory (the bandwidth check).
L2_MULTIPLE = 4.0
#: Dense peak (TFLOP/s) of the fastest accelerator per precision, for rows of an unknown device.
ANY_DEVICE_TFLOPS: dict[str, float] = {"fp32": 1250.0, "fp16": 2500.0, "bf16": 2500.0}
#: Largest plausible peak memory (MiB) of one process on an unknown device: 4 TiB.
ANY_DEVICE_MiB = 4.0 * 2 ** 20
#: A peak memory below this share of the weights' bytes is implausible (a peak holds every weight; the
#: margin leaves room for noise, a unit error is a factor of ~1000).
WEIGHTS_FLOOR = 0.5
#: Highest core clock (GHz) assumed for a CPU's peak.
CPU_MAX_GHZ = 5.0
_CPU_FLOP_PER_CYCLE = (  # (ISA flag, precisions, FLOP per cycle per core: FMA units x lanes x 2)
    ("amx_bf16", ("bf16",), 2048.0), ("amx_fp16", ("fp16",), 2048.0),
    ("avx512_bf16", ("bf16",), 128.0), ("avx512_fp16", ("fp16",), 128.0),
    ("avx512f", ("fp32", "fp16", "bf16"), 64.0), ("fma", ("fp32", "fp16", "bf16"), 32.0),
)


def _fingerprint(v: Any) -> dict[str, Any]:
    try:
        fp = json.loads(str(v)) if v is not None and v is not pd.NA else {}
    except ValueError:
        return {}
    return fp if isinstance(fp, dict) else {}


def device_peak(kind: str, fingerprint: Any, precision: str) -> tuple[float, str]:
    """``(peak TFLOP/s, what it is)`` of a device for one precision (see the module docstring)."""
    fp = _fingerprint(fingerprint)
    if kind == "cuda" or fp.get("kind") == "cuda":
        rec = record_for_fingerprint(fp) if fp else None
        peak = peak_TFLOPS(rec, precision) if rec else None
        if peak:
            return peak, f"the {precision} peak of {rec.get('spec') or rec.get('name')} (GPU spec table)"
    if kind == "cpu" or fp.get("kind") == "cpu":
        cores = fp.get("usable_cores") or fp.get("logical_cpus")
        isa = set(fp.get("isa") or ())
        per_cycle = max((f for flag, precs, f in _CPU_FLOP_PER_CYCLE if flag in isa and precision in precs),
                        default=16.0)
        if cores:
            return (float(cores) * per_cycle * CPU_MAX_GHZ / 1e3,
                    f"a {cores}-core CPU's {precision} peak ({per_cycle:g} FLOP/cycle/core at {CPU_MAX_GHZ:g} GHz)")
    return ANY_DEVICE_TFLOPS.get(precision, max(ANY_DEVICE_TFLOPS.values())), f"any device's {precision} peak"


def _gpu_record(kind: str, fingerprint: Any) -> dict[str, Any] | None:
    fp = _fingerprint(fingerprint)
    return record_for_fingerprint(fp) if (kind == "cuda" or fp.get("kind") == "cuda") and fp else None


def _bandwidth(kind: str, fingerprint: Any) -> tuple[float, float, str] | None:
    """``(memory bandwidth GB/s, L2 MB, name)`` of a GPU with a spec record, else None."""
    rec = _gpu_record(kind, fingerprint)
    if rec and rec.get("memory_bandwidth_GBps") and rec.get("l2_MB"):
        return float(rec["memory_bandwidth_GBps"]), float(rec["l2_MB"]), str(rec.get("spec") or rec.get("name"))
    return None


def _device_MiB(kind: str, fingerprint: Any) -> tuple[float, str]:
    rec = _gpu_record(kind, fingerprint)
    if rec and rec.get("memory_GB"):
        return float(rec["memory_GB"]) * 1e9 / 2 ** 20 * 1.05, f"{rec.get('spec') or rec.get('name')}'s memory"
    return ANY_DEVICE_MiB, "4 TiB"


def _col(df: pd.DataFrame, c: str) -> np.ndarray:
    return pd.to_numeric(df[c], errors="coerce").to_numpy(float) if c in df.columns else np.full(len(df), np.nan)


def problems(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The implausible cells of ``df``: dicts with ``row`` (position), ``column`` and ``message``."""
    out: list[dict[str, Any]] = []
    if not len(df):
        return out
    lat, mem, energy = _col(df, "latency_ms"), _col(df, "peak_memory_MB"), _col(df, "energy_J")
    flops, params, acts = _col(df, "flops"), _col(df, "param_size_MB"), _col(df, "total_activation_MB")
    kinds = df["device_kind"].astype(str).to_numpy() if "device_kind" in df else np.full(len(df), "")
    fps = df["device_fingerprint"].to_numpy() if "device_fingerprint" in df else np.full(len(df), None)
    precs = df["precision"].astype(str).to_numpy() if "precision" in df else np.full(len(df), "fp32")
    cache: dict[tuple[Any, ...], Any] = {}

    def cached(key: tuple[Any, ...], fn: Callable[..., Any]) -> Any:
        """``fn(*key[1:])`` once per distinct key (a device's peak, bandwidth and memory per fingerprint)."""
        if key not in cache:
            cache[key] = fn(*key[1:])
        return cache[key]

    for i in range(len(df)):
        for c, v in (("latency_ms", lat[i]), ("peak_memory_MB", mem[i]), ("energy_J", energy[i])):
            if math.isinf(v):
                out.append({"row": i, "column": c, "message": f"{c}={v} is not finite"})
        if np.isfinite(lat[i]) and lat[i] > 0 and np.isfinite(flops[i]) and flops[i] > 0:
            peak, what = cached(("peak", kinds[i], fps[i], precs[i]), device_peak)
            rate = 2.0 * flops[i] / (lat[i] * 1e-3) / 1e12
            if rate > PEAK_TOLERANCE * peak:
                out.append({"row": i, "column": "latency_ms", "message": (
                    f"latency_ms={lat[i]:.6g} implies {rate:.4g} TFLOP/s ({precs[i]}), above {PEAK_TOLERANCE:g} x "
                    f"{what}, {peak:.4g} TFLOP/s: is the column in seconds?")})
            bw = cached(("bw", kinds[i], fps[i]), _bandwidth)
            if bw is not None and np.isfinite(acts[i]) and acts[i] * 2 ** 20 > L2_MULTIPLE * bw[1] * 1e6:
                gbps = acts[i] * 2 ** 20 / (lat[i] * 1e-3) / 1e9
                if gbps > PEAK_TOLERANCE * bw[0]:
                    out.append({"row": i, "column": "latency_ms", "message": (
                        f"latency_ms={lat[i]:.6g} implies writing the activations at {gbps:.4g} GB/s, above "
                        f"{PEAK_TOLERANCE:g} x {bw[2]}'s memory bandwidth, {bw[0]:.4g} GB/s: is the column in "
                        f"seconds?")})
        if np.isfinite(mem[i]) and mem[i] > 0:
            if np.isfinite(params[i]) and mem[i] < WEIGHTS_FLOOR * params[i]:
                out.append({"row": i, "column": "peak_memory_MB", "message": (
                    f"peak_memory_MB={mem[i]:.6g} MiB is below {WEIGHTS_FLOOR:g} x the model's own weights "
                    f"({params[i]:.4g} MiB): "
                    f"is the column in GiB or GB?")})
            else:
                cap, what = cached(("mem", kinds[i], fps[i]), _device_MiB)
                if mem[i] > cap:
                    out.append({"row": i, "column": "peak_memory_MB", "message": (
                        f"peak_memory_MB={mem[i]:.6g} MiB exceeds {what} ({cap:.4g} MiB): is the column in bytes?")})
    return out


def check_plausible(df: pd.DataFrame, source: str, field: Callable[[str], str] | None = None) -> None:
    """Raise one-line :class:`DatasetError` for the first of :func:`problems` (``<field(column)>: <row>:
    <message> (n more)``); ``field`` names a column's setting (default ``<source>: column``). A row is
    named by its ``source_row`` when the frame has one, else ``row <position>``."""
    found = problems(df)
    if not found:
        return
    p = found[0]
    rows = df["source_row"].astype(str).to_numpy() if "source_row" in df.columns else None
    row = rows[p["row"]] if rows is not None else f"row {p['row']}"
    name = field(p["column"]) if field else f"{source}: column {p['column']!r}"
    more = f" ({len(found) - 1} more implausible cell(s))" if len(found) > 1 else ""
    raise DatasetError(f"{name}: {row}: {p['message']}{more}")
