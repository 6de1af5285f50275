"""Importer for any CSV of measurements, with the column map given on the command line
(``carb-import importer=csv importer.path=runs.csv importer.columns.latency_ms=lat_s importer.scale.latency_ms=1000
importer.columns.model=arch importer.constants.device_name="RTX 4090" ...``).

``units`` declares the unit of a target column (:data:`carb.data.units.FIELD_UNITS`: ``latency_ms`` in
``s``/``ms``/``us``, ``peak_memory_MB`` in ``B``/``KiB``/``kB``/``MiB``/``MB``/``GiB``/``GB``, ``energy_J``
in ``J``/``mJ``/``kJ``/``Wh``/``kWh``; not given: CARB's own unit), converted on reading. A target cell
that is not a finite number (``10.5ms``, ``inf``) is one line naming its row and column.

``columns`` maps a field of the source rows (:data:`FIELDS`, see :mod:`carb.data.importers.common`) to a
column of the file; ``constants`` gives a value for every row where the file has no column (or an empty
cell); ``scale`` multiplies a numeric column into CARB's unit (``latency_ms`` from seconds: 1000; ``energy_J``
from kWh: 3.6e6; ``peak_memory_MB`` from decimal MB: 1e6 / 2**20). A row needs a model name or ``block`` and
``depth``, plus ``input_size``, ``batch_size``, ``precision`` and ``device_name``. A file giving
``peak_memory_MB`` must say what it measured (``memory_kind``: allocator_peak | device_used).
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from carb.data.schema import MEMORY_KINDS
from carb.data.units import FIELD_UNITS, read_numbers, unit_factor
from carb.design.identity import ARCH_COLUMNS, RESNET
from carb.errors import ConfigError

#: The fields a column map or a constant may set.
FIELDS: tuple[str, ...] = ("model", *ARCH_COLUMNS,
                           "input_size", "batch_size", "precision", "device_name", "torch_version",
                           "latency_ms", "energy_J", "peak_memory_MB", "memory_kind", "latency_std_ms",
                           "n_runs", "n_warmup")
_NUMERIC = (*RESNET.numeric, "input_size", "batch_size", "latency_ms", "energy_J",
            "peak_memory_MB", "latency_std_ms", "n_runs", "n_warmup")


def _check_keys(what: str, d: Mapping[str, Any]) -> None:
    unknown = sorted(set(d) - set(FIELDS))
    if unknown:
        raise ConfigError(f"importer.{what}: unknown field(s) {unknown}; allowed: {list(FIELDS)}")


def read_csv(path: Any) -> tuple[Path, pd.DataFrame]:
    """``(path, raw frame)``; one-line :class:`ConfigError` naming ``importer.path`` when it is missing."""
    if path is None or not str(path).strip():
        raise ConfigError("importer.path: give the CSV file to import (importer.path=<file.csv>)")
    p = Path(str(path))
    if not p.is_file():
        raise ConfigError(f"importer.path: {str(p)!r} is not a file")
    try:
        return p, pd.read_csv(p)
    except Exception as e:  # noqa: BLE001 - any parse failure is one line
        raise ConfigError(f"importer.path: cannot read {str(p)!r} as CSV ({' '.join(str(e).split())})") from None


def csv_source_rows(path: Any, columns: Mapping[str, Any] | None = None, constants: Mapping[str, Any] | None = None,
                    scale: Mapping[str, Any] | None = None, units: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Source rows of a CSV file under a column map (see the module docstring). Raises one-line
    :class:`ConfigError`: ``importer.columns.<field>`` naming an absent column (with the file's columns),
    an unknown field, a non-numeric scale, no device name, memory without ``memory_kind``, an unknown unit
    (``importer.units.<field>``), a unit and a scale on one field, or a target cell that is not a finite
    number."""
    columns = {k: v for k, v in (columns or {}).items() if v is not None and str(v) != ""}
    constants = {k: v for k, v in (constants or {}).items() if v is not None and str(v) != ""}
    scale = {k: v for k, v in (scale or {}).items() if v is not None}
    units = {k: v for k, v in (units or {}).items() if v is not None and str(v) != ""}
    for what, d in (("columns", columns), ("constants", constants), ("scale", scale)):
        _check_keys(what, d)
    factors = {f: unit_factor(f, u) for f, u in units.items()}
    both = sorted(set(factors) & set(scale))
    if both:
        raise ConfigError(f"importer.units.{both[0]}: give a unit or a scale for {both[0]}, not both")
    p, raw = read_csv(path)
    source_row = [f"{p.name}:{i + 2}" for i in range(len(raw))]
    for field, col in columns.items():
        if str(col) not in raw.columns:
            raise ConfigError(f"importer.columns.{field}: column {str(col)!r} is not in {p.name}; allowed: "
                              f"{list(map(str, raw.columns))}")
    rows = pd.DataFrame(index=raw.index)
    for field, col in columns.items():
        rows[field] = raw[str(col)]
    for field, value in constants.items():
        rows[field] = rows[field].where(rows[field].notna(), value) if field in rows else value
    for field in FIELD_UNITS:
        if field in columns:
            rows[field] = read_numbers(rows[field], field, str(columns[field]), source_row)
    for field, factor in scale.items():
        try:
            f = float(factor)
        except (TypeError, ValueError):
            raise ConfigError(f"importer.scale.{field}: must be a number, got {factor!r}") from None
        if field not in _NUMERIC:
            raise ConfigError(f"importer.scale.{field}: not a numeric field; allowed: {list(_NUMERIC)}")
        factors[field] = f
    for field, f in factors.items():
        if field in rows:
            rows[field] = pd.to_numeric(rows[field], errors="coerce") * f
    if "device_name" not in rows:
        raise ConfigError("importer.constants.device_name: give the device's name (or importer.columns.device_name)")
    if "peak_memory_MB" in columns and "memory_kind" not in rows:
        raise ConfigError(f"importer.constants.memory_kind: say what the peak_memory_MB column measures; allowed: "
                          f"{list(MEMORY_KINDS)}")
    for field in ("latency_ms", "energy_J", "peak_memory_MB"):
        if field in rows:
            rows[field] = pd.to_numeric(rows[field], errors="coerce")
    rows["source_row"] = source_row
    rows["source"] = f"csv:{p.name}"
    return rows.reset_index(drop=True)
