"""Importer for Hugging Face optimum-benchmark result files (``carb-import importer=optimum importer.path=runs/``).

Format followed: optimum-benchmark **0.6.0** (PyPI, 2025-08-20), checked against its main branch
(``0.7.0.dev0``, commit b263af4 of 2025-09-25; the result format is the same). A run writes
``benchmark.json`` = ``{"config": BenchmarkConfig, "report": BenchmarkReport}`` (also split into
``benchmark_config.json`` and ``benchmark_report.json``). Read here:

- ``config.backend``: ``model`` (a hub id such as ``timm/resnet50.a1_in1k``; mapped by
  :mod:`carb.data.importers.models`), ``device`` (cuda | cpu | ...), ``device_ids``, ``version`` (torch
  for the pytorch backend), ``torch_dtype`` (null/auto -> fp32), ``autocast_enabled`` /
  ``autocast_dtype`` (autocast -> that precision; weights stay fp32), ``name`` (the backend).
- ``config.scenario.input_shapes``: ``batch_size``, ``height`` (square inputs; a timm model whose shapes
  were left to its pretrained config records none: ``importer.input_size`` fills it).
- ``config.environment``: ``gpu`` (list of NVML names; the row's device is ``gpu[device_ids[0]]``),
  ``cpu`` (CPU rows), ``optimum_benchmark_version``.
- ``report.<target>`` (``importer.target``, default ``forward``: one forward of the batch):
  ``latency`` {unit ``s``, ``mean``, ``stdev``, ``count``} -> ``latency_ms`` = mean x 1000 (mean per
  batch, as CARB's), ``latency_std_ms``, ``n_runs``; ``energy`` {unit ``kWh``, ``cpu``, ``gpu``, ``ram``,
  ``total``}, energy per forward call -> ``energy_J`` = component x 3.6e6 (``importer.energy``: auto =
  gpu on cuda, cpu otherwise); ``memory`` {unit ``MB`` = 10**6 bytes, ``max_allocated`` (torch
  allocator peak), ``max_global_vram`` (NVML device-wide used), ``max_process_vram``, ``max_reserved``,
  ``max_ram``} -> ``peak_memory_MB`` in MiB (x 10**6 / 2**20) with ``memory_kind`` allocator_peak
  (``max_allocated``) or device_used (``max_global_vram``); ``importer.memory``: auto prefers the
  allocator peak. ``max_ram`` (process RSS) is neither and is not used.

Each block's declared ``unit`` is converted (:mod:`carb.data.units`: a latency in ``ms``, memory in
``GB`` or ``MiB``, energy in ``J``); a unit CARB does not know is one line naming the file and the block,
never a silently dropped value.

Several files of one model, shape, precision and device are repeated runs (aggregated by
:mod:`carb.data.importers.common`).
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.data.units import read_number, unit_factor
from carb.errors import ConfigError

#: The optimum-benchmark version whose result format this module follows.
FORMAT_VERSION = "optimum-benchmark 0.6.0 (result format unchanged on main 0.7.0.dev0, b263af4)"
MEMORY_CHOICES = ("auto", "allocator_peak", "device_used")
ENERGY_CHOICES = ("auto", "gpu", "cpu", "ram", "total")
#: Memory field of the report -> memory_kind.
MEMORY_FIELDS = {"allocator_peak": "max_allocated", "device_used": "max_global_vram"}
#: Columns naming the protocol: rows of one key must agree on them to be repeats.
OPTIMUM_SETTINGS: tuple[str, ...] = ("backend", "torch_version", "energy_component", "autocast")


def result_files(path: Any) -> list[Path]:
    """The ``benchmark.json`` files at ``path`` (a file, or a folder searched recursively; folders
    holding only ``benchmark_report.json`` + ``benchmark_config.json`` count too)."""
    if path is None or not str(path).strip():
        raise ConfigError("importer.path: give a benchmark.json file or a folder of optimum-benchmark runs")
    p = Path(str(path))
    if p.is_file():
        return [p]
    if not p.is_dir():
        raise ConfigError(f"importer.path: {str(p)!r} does not exist")
    files = sorted(p.rglob("benchmark.json"))
    have = {f.parent for f in files}
    files += sorted(f for f in p.rglob("benchmark_report.json") if f.parent not in have)
    if not files:
        raise ConfigError(f"importer.path: {str(p)!r} holds no benchmark.json (an optimum-benchmark run folder)")
    return files


def read_result(path: Path) -> dict[str, Any]:
    """``{"config": ..., "report": ...}`` of one result file; one-line :class:`ConfigError` otherwise."""
    try:
        data = json.loads(path.read_text())
        if path.name == "benchmark_report.json":
            data = {"report": data, "config": json.loads((path.parent / "benchmark_config.json").read_text())}
    except (OSError, ValueError) as e:
        raise ConfigError(f"importer.path: cannot read {str(path)!r} ({' '.join(str(e).split())})") from None
    if not isinstance(data, dict) or not {"config", "report"} <= set(data):
        raise ConfigError(f"importer.path: {str(path)!r} is not an optimum-benchmark result (needs 'config' and "
                          f"'report')")
    for key, sub in (("config", ("backend", "scenario", "environment")), ("report", ())):
        _object(data[key], f"{path.name}: {key}")
        for k in sub:
            if data[key].get(k) is not None:
                _object(data[key][k], f"{path.name}: {key}.{k}")
    return data


def _object(value: Any, where: str) -> None:
    """One-line :class:`ConfigError` unless ``value`` (a block of a result file, at ``where``) is a JSON object."""
    if not isinstance(value, dict):
        kind = {"list": "array", "str": "string", "int": "number", "float": "number", "bool": "boolean",
                "NoneType": "null"}.get(type(value).__name__, type(value).__name__)
        raise ConfigError(f"importer.path: {where} is a JSON {kind}, not an object; "
                          f"an optimum-benchmark result holds objects there ({{\"backend\": ...}})")


def _precision(backend: Mapping[str, Any]) -> tuple[str, bool]:
    """``(dtype name, autocast)`` of the backend config."""
    if backend.get("autocast_enabled"):
        return str(backend.get("autocast_dtype") or "float16"), True
    dtype = backend.get("torch_dtype")
    return ("float32" if dtype in (None, "auto") else str(dtype)), False


def _device_name(backend: Mapping[str, Any], env: Mapping[str, Any]) -> str | None:
    if str(backend.get("device", "")).startswith("cuda"):
        gpus = env.get("gpu") or []
        ids = str(backend.get("device_ids") or "0").split(",")
        idx = int(ids[0]) if ids[0].strip().isdigit() else 0
        name = gpus[idx] if idx < len(gpus) else (gpus[0] if gpus else None)
        return str(name).strip() if name else None
    return str(env["cpu"]).strip() if env.get("cpu") else None


def _factor(block: Mapping[str, Any], field: str, default: str, where: str) -> float:
    """The factor into CARB's unit of a report block's declared ``unit`` (:mod:`carb.data.units`);
    one-line :class:`ConfigError` naming the file and the block for a unit CARB does not know."""
    return unit_factor(field, str(block.get("unit") or default), where=where)


def _memory(mem: Mapping[str, Any] | None, choice: str, where: str = "memory") -> tuple[float, Any]:
    """``(peak MiB, memory_kind)`` from a report's memory block (NaN, NA when absent), in the block's
    declared unit (``MB`` when none: optimum-benchmark's)."""
    if not mem:
        return np.nan, pd.NA
    f = _factor(mem, "peak_memory_MB", "MB", where)
    kinds = list(MEMORY_FIELDS) if choice == "auto" else [choice]
    for kind in kinds:
        v = mem.get(MEMORY_FIELDS[kind])
        if v is not None:
            return read_number(v, f"{where[:-len('.unit')]}.{MEMORY_FIELDS[kind]}") * f, kind
    return np.nan, pd.NA


def result_row(path: Path, data: Mapping[str, Any], target: str, memory: str, energy: str,
               input_size: int | None, root: Path) -> dict[str, Any]:
    """One source row (:mod:`carb.data.importers.common`) of one result."""
    cfg, report = data["config"], data["report"]
    backend, scenario, env = cfg.get("backend") or {}, cfg.get("scenario") or {}, cfg.get("environment") or {}
    shapes = scenario.get("input_shapes") or {}
    dtype, autocast = _precision(backend)
    device = str(backend.get("device", ""))
    component = ("gpu" if device.startswith("cuda") else "cpu") if energy == "auto" else energy
    try:
        rel = str(path.relative_to(root))
    except ValueError:
        rel = str(path)
    tgt = report.get(target) or {}
    _object(tgt, f"{rel}: report.{target}")
    for block in ("latency", "energy", "memory"):
        if tgt.get(block):
            _object(tgt[block], f"{rel}: report.{target}.{block}")
    lat = tgt.get("latency") or {}
    en = tgt.get("energy") or {}
    at = f"{rel}: report.{target}"
    peak, kind = _memory(tgt.get("memory"), memory, where=f"{at}.memory.unit")
    lat_f = _factor(lat, "latency_ms", "s", f"{at}.latency.unit") if lat else 1.0
    en_f = _factor(en, "energy_J", "kWh", f"{at}.energy.unit") if en else 1.0
    lat_ok = lat.get("mean") is not None
    en_ok = en.get(component) is not None
    height = shapes.get("height") or shapes.get("width") or input_size
    return {
        "source_row": rel, "model": backend.get("model"), "device_name": _device_name(backend, env),
        "input_size": height, "batch_size": shapes.get("batch_size"), "precision": dtype,
        "torch_version": backend.get("version"),
        "latency_ms": read_number(lat["mean"], f"{at}.latency.mean") * lat_f if lat_ok else np.nan,
        "latency_std_ms": (read_number(lat["stdev"], f"{at}.latency.stdev") * lat_f
                           if lat_ok and lat.get("stdev") is not None else np.nan),
        "n_runs": (read_number(lat["count"], f"{at}.latency.count")
                   if lat_ok and lat.get("count") is not None else np.nan),
        "energy_J": read_number(en[component], f"{at}.energy.{component}") * en_f if en_ok else np.nan,
        "peak_memory_MB": peak, "memory_kind": kind,
        "source": f"optimum-benchmark:{rel}", "backend": backend.get("name"), "energy_component": component,
        "autocast": autocast, "ob_device": device, "ob_target": target,
        "optimum_benchmark_version": env.get("optimum_benchmark_version"),
    }


def optimum_source_rows(path: Any, target: str = "forward", memory: str = "auto", energy: str = "auto",
                        input_size: int | None = None) -> pd.DataFrame:
    """Source rows of every optimum-benchmark result at ``path`` (see the module docstring)."""
    if memory not in MEMORY_CHOICES:
        raise ConfigError(f"importer.memory: {memory!r} is not allowed; allowed: {list(MEMORY_CHOICES)}")
    if energy not in ENERGY_CHOICES:
        raise ConfigError(f"importer.energy: {energy!r} is not allowed; allowed: {list(ENERGY_CHOICES)}")
    files = result_files(path)
    root = Path(str(path)) if Path(str(path)).is_dir() else Path(str(path)).parent
    rows = [result_row(f, read_result(f), str(target), memory, energy, input_size, root) for f in files]
    df = pd.DataFrame(rows)
    df["memory_kind"] = df["memory_kind"].astype("string")
    return df
