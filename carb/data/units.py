"""Units of outside measurement columns and the strict reading of their cells.

CARB's units: ``latency_ms`` / ``latency_std_ms`` milliseconds per batch, ``energy_J`` joules per batch,
``peak_memory_MB`` MiB (2**20 bytes). A column in another unit is declared (``importer.units.<field>``:
:data:`FIELD_UNITS`) and converted with :func:`unit_factor`. :func:`read_numbers` reads a column's cells
as numbers: an empty cell is missing (NaN), any other cell that is not a finite number (``10.5ms``,
``inf``, ``fast``) is one-line :class:`~carb.errors.ConfigError` naming the row and the column, never a
silent NaN.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import ConfigError

#: Time units -> milliseconds.
TIME_UNITS: dict[str, float] = {"s": 1e3, "ms": 1.0, "us": 1e-3}
#: Memory units -> MiB (``MB``/``GB`` decimal, ``MiB``/``GiB`` binary).
MEMORY_UNITS: dict[str, float] = {"B": 2.0 ** -20, "KiB": 2.0 ** -10, "kB": 1e3 / 2 ** 20, "MiB": 1.0,
                                  "MB": 1e6 / 2 ** 20, "GiB": 1024.0, "GB": 1e9 / 2 ** 20}
#: Energy units -> joules.
ENERGY_UNITS: dict[str, float] = {"J": 1.0, "mJ": 1e-3, "kJ": 1e3, "Wh": 3600.0, "kWh": 3.6e6}
#: Field -> the units it may be declared in (the first is CARB's own).
FIELD_UNITS: dict[str, dict[str, float]] = {"latency_ms": TIME_UNITS, "latency_std_ms": TIME_UNITS,
                                            "energy_J": ENERGY_UNITS, "peak_memory_MB": MEMORY_UNITS}


def unit_factor(field: str, unit: Any, where: str | None = None) -> float:
    """The factor taking ``field`` from ``unit`` into CARB's unit; one-line :class:`ConfigError` naming
    ``where`` (default ``importer.units.<field>``) for a unit the field does not allow."""
    allowed = FIELD_UNITS.get(field)
    where = where or f"importer.units.{field}"
    if allowed is None:
        raise ConfigError(f"{where}: {field} has no unit to declare; fields with units: {list(FIELD_UNITS)}")
    if unit is None or str(unit) == "":
        return 1.0
    if str(unit) not in allowed:
        raise ConfigError(f"{where}: {unit!r} is not a unit of {field}; allowed: {list(allowed)}")
    return allowed[str(unit)]


def _number(v: Any) -> float | None:
    """The cell as a float, NaN for an empty one, None when it is not a number."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return float("nan")
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
        return float(v)
    s = str(v).strip()
    if not s:
        return float("nan")
    try:
        return float(s)
    except ValueError:
        return None


def read_number(v: Any, where: str) -> float:
    """One value as a float (NaN when empty); one-line :class:`ConfigError` naming ``where`` when it is not
    a finite number."""
    x = _number(v)
    if x is None or math.isinf(x):
        raise ConfigError(f"{where}: {v!r} is not a finite number")
    return x


def read_numbers(values: pd.Series, field: str, column: str, rows: Sequence[str],
                 where: str | None = None) -> pd.Series:
    """``values`` as float64: empty cells NaN; a cell that is not a number, or is infinite, is one-line
    :class:`ConfigError` ``<where>: <row>: column <column> holds '<cell>', not a number`` (``where``
    default ``importer.columns.<field>``; the number of such cells added). ``rows`` names each value's
    source row."""
    nums = [_number(v) for v in values]
    bad = [i for i, x in enumerate(nums) if x is None or (x is not None and math.isinf(x))]
    if bad:
        i = bad[0]
        more = f" ({len(bad) - 1} more such cell(s))" if len(bad) > 1 else ""
        what = "is not finite" if nums[i] is not None else "is not a number"
        hint = (f"; give plain numbers and declare the unit (importer.units.{field}=...)"
                if nums[i] is None and field in FIELD_UNITS else "")
        raise ConfigError(f"{where or f'importer.columns.{field}'}: {rows[i]}: column {column!r} holds "
                          f"{str(values.iloc[i])!r}, "
                          f"which {what}{more}{hint}")
    return pd.Series(nums, index=values.index, dtype="float64")
