"""Importers: bring outside measurements into CARB's dataset schema.

**The API** (``carb-import`` and the calibration code call it)::

    from carb.data.importers import import_table
    df, unmapped = import_table({"name": "csv", "path": "runs.csv", "columns": {...}, "constants": {...}})

``import_table(params) -> (DataFrame, list[dict])``: ``params`` is a plain mapping (or the composed
``importer`` node of ``conf/importer/<name>.yaml``) with ``name`` (one of :data:`IMPORTERS`), that
importer's settings and ``unmapped`` (``list``: import what maps and return the rest; ``fail``: one-line
:class:`~carb.errors.ConfigError` on the first row that does not map). The frame is a validated dataset
(:func:`carb.data.schema.validate_dataset`) with one row per ``(device_name, config_id)``: repeated runs
aggregated (target medians, ``latency_spread_ms`` / ``energy_spread_J`` / ``peak_memory_spread_MB``,
``n_repeats``), ``memory_kind`` and ``source`` per row, closed-form static features, and the device
described (``importer.device_kind``, ``importer.spec``: :mod:`carb.data.importers.devices`; a GPU with a
spec record is ``cuda`` with the record's fingerprint, so the CUDA physics prior applies). Every row is
checked for plausibility (:mod:`carb.data.plausibility`: implied compute rate against the device's peak,
memory against the weights and the device): a column in the wrong unit is one line, exit 2.
``unmapped`` lists the rows that did not map, as dicts with ``source_row``, ``model``,
``device_name`` and ``reason``. :func:`input_files` gives the files a setting reads (for provenance).

Formats (one module each; the shared end in :mod:`carb.data.importers.common`, model names in
:mod:`carb.data.importers.models`):

- ``timm``: timm's GPU inference benchmark table (:mod:`carb.data.importers.timm`; the shipped copy by
  default). Its older frame API (:func:`import_timm`, :func:`timm_pair`: timm's own ids, every model)
  feeds :mod:`carb.commands.characterize`.
- timm's published result files, every model (:mod:`carb.data.importers.timm_zoo`: zoo rows with an
  identity key and published features, not knobs; the shipped main set ``timm-zoo-bench.parquet``).
- ``csv``: any CSV with a column map (:mod:`carb.data.importers.generic_csv`).
- ``optimum``: optimum-benchmark result files (:mod:`carb.data.importers.optimum`).

Also here: :mod:`carb.data.importers.gpu_run` (the files a lent-GPU run brought back, not a table:
``carb-import importer=gpu_run importer.path=DIR``, registered in
:data:`carb.commands.import_data.RUN_IMPORTERS`, or ``carb-collect import_run=DIR``).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from carb.data.importers.common import UNMAPPED_COLUMNS, finish, unmapped_frame
from carb.data.importers.devices import DEVICE_KINDS, describe_devices
from carb.data.importers.generic_csv import csv_source_rows
from carb.data.importers.models import PLAIN_RESNETS, model_config, model_knobs
from carb.data.importers.optimum import OPTIMUM_SETTINGS, optimum_source_rows, result_files
from carb.data.importers.timm import (
           TIMM_DATA,
           TIMM_SETTINGS,
           import_timm,
           load_timm_table,
           timm_combinations,
           timm_config_id,
           timm_overlaps,
           timm_pair,
           timm_source_rows,
)
from carb.data.plausibility import check_plausible
from carb.errors import ConfigError

#: Importer names (``conf/importer/<name>.yaml``).
IMPORTERS: tuple[str, ...] = ("timm", "csv", "optimum")


def _get(params: Mapping[str, Any], key: str, default: Any = None) -> Any:
    v = params.get(key, default) if hasattr(params, "get") else default
    return default if v is None and default is not None else v


def source_rows(params: Mapping[str, Any]) -> tuple[pd.DataFrame, tuple[str, ...], str]:
    """``(source rows, setting columns, model field)`` of the importer ``params['name']``."""
    name = _get(params, "name")
    if name not in IMPORTERS:
        raise ConfigError(f"importer.name: {name!r} is not an importer; allowed: {list(IMPORTERS)}")
    if name == "timm":
        rows = timm_source_rows(_get(params, "path"), _get(params, "gpu"), _get(params, "precision"),
                                _get(params, "compile"), _get(params, "memory_layout"), _get(params, "torch"))
        return rows, TIMM_SETTINGS, "model"
    if name == "csv":
        cols = dict(_get(params, "columns") or {})
        rows = csv_source_rows(_get(params, "path"), cols, dict(_get(params, "constants") or {}),
                               dict(_get(params, "scale") or {}), dict(_get(params, "units") or {}))
        return rows, (), f"importer.columns.model={cols.get('model')}" if cols.get("model") else "model"
    size = _get(params, "input_size")
    rows = optimum_source_rows(_get(params, "path"), str(_get(params, "target", "forward")),
                               str(_get(params, "memory", "auto")), str(_get(params, "energy", "auto")),
                               int(size) if size is not None else None)
    return rows, OPTIMUM_SETTINGS, "config.backend.model"


def import_table(params: Mapping[str, Any]) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Import an outside table (see the module docstring): ``(dataset, unmapped rows)``."""
    rows, settings, model_field = source_rows(params)
    name = str(_get(params, "name"))
    df, unmapped = finish(rows, fmt=name, settings=settings,
                          unmapped_policy=str(_get(params, "unmapped", "list")), model_field=model_field)
    df = describe_devices(df, str(_get(params, "device_kind", "auto")), _get(params, "spec"))
    check_plausible(df, f"{name} import", field=(lambda c: f"importer.units.{c}") if name == "csv" else
                    (lambda c: f"{name} import: column {c!r}"))
    return df, unmapped


def input_files(params: Mapping[str, Any]) -> list[Path]:
    """The files the importer ``params`` reads."""
    name = _get(params, "name")
    if name == "timm":
        return [Path(_get(params, "path")) if _get(params, "path") else TIMM_DATA]
    if name == "optimum":
        return result_files(_get(params, "path"))
    return [Path(str(_get(params, "path")))]


__all__ = ["DEVICE_KINDS", "IMPORTERS", "PLAIN_RESNETS", "TIMM_DATA", "UNMAPPED_COLUMNS", "import_table", "import_timm",
           "input_files", "load_timm_table", "model_config", "model_knobs", "source_rows",
           "timm_combinations", "timm_config_id", "timm_overlaps", "timm_pair", "unmapped_frame"]
