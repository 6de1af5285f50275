"""Reading a grid file (``carb-screen screen.grid_file=<parquet|csv>``) into configurations.

Every fault is one :class:`~carb.errors.ConfigError` line naming the file and, where there is one,
the column and row: a file that cannot be read (0-byte CSV, corrupt parquet), a file without rows, a
non-finite or negative number, a missing knob column. Missing knobs are never defaulted silently: a
column may be left out only when ``defaults`` (``screen.grid_defaults``) gives its value, except
``stages`` (absent = the named layout of ``depth``), ``inner_mult`` (absent = 1.0, the standard
block) and ``num_classes``, whose absence has a documented meaning. Other numeric columns (e.g. an
accuracy ``top1``) are the user's own axes: :func:`read_grid` returns them beside the configurations, and
``carb-screen`` passes them through to every output; a non-numeric unknown column is refused.
"""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import KNOBS, RECORD_COLUMNS, ArchConfig, configs_from_records
from carb.errors import ConfigError

#: Knob columns a grid file may leave out without a default: their absence has a stated meaning.
OPTIONAL_KNOBS: tuple[str, ...] = ("stages", "inner_mult", "num_classes")
#: Knob columns a grid file must carry (or ``screen.grid_defaults`` must give).
REQUIRED_KNOBS: tuple[str, ...] = tuple(k for k in KNOBS if k not in OPTIONAL_KNOBS)


def read_frame(path: Path, field: str = "screen.grid_file") -> pd.DataFrame:
    """The file as a frame (parquet by suffix, else CSV), ``Unnamed`` index columns dropped."""
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{field}: {path.name} is empty (no header, no rows); "
                          f"give a CSV/parquet with columns {list(REQUIRED_KNOBS)}") from None
    except Exception as e:  # noqa: BLE001 - any reader fault (corrupt parquet, bad CSV) is one line
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        kind = "parquet" if path.suffix == ".parquet" else "CSV"
        raise ConfigError(f"{field}: {path.name} cannot be read as {kind}: {msg}") from None
    df = df.loc[:, [c for c in df.columns if not str(c).startswith("Unnamed")]]
    if len(df) == 0:
        raise ConfigError(f"{field}: {path.name} has no rows (header only: {list(map(str, df.columns))})")
    return df


def check_numbers(df: pd.DataFrame, field: str) -> None:
    """Every number in the frame finite and not negative; else one line naming column and row (1 = first
    data row)."""
    for col in df.columns:
        if not pd.api.types.is_numeric_dtype(df[col]) or pd.api.types.is_bool_dtype(df[col]):
            continue
        v = df[col].to_numpy(dtype=float, na_value=np.nan)
        skip = np.isnan(v) & (col == "stages")      # NaN stages = the named layout
        bad = ~skip & ~(np.isfinite(v) & (v >= 0))
        if bad.any():   # vectorized: a million rows are checked at once
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{field}: column {col!r} row {i + 1}: {df[col].iloc[i]!r} is not allowed; "
                              f"allowed: a finite number >= 0")


def apply_defaults(df: pd.DataFrame, defaults: Mapping[str, Any] | None, field: str) -> pd.DataFrame:
    """Fill missing knob columns from ``defaults``; refuse any still-missing required knob."""
    defaults = dict(defaults or {})
    bad = sorted(set(defaults) - set(KNOBS) - {"num_classes"})
    if bad:
        raise ConfigError(f"screen.grid_defaults: unknown knob(s) {bad}; allowed: {list(KNOBS)}")
    unknown = sorted(set(map(str, df.columns)) - set(RECORD_COLUMNS))
    if unknown:
        raise ConfigError(f"{field}: unknown knob column(s) {unknown}; allowed: {list(KNOBS)}")
    missing = [k for k in REQUIRED_KNOBS if k not in df.columns and k not in defaults]
    if missing:
        raise ConfigError(f"{field}: missing knob column(s) {missing}; a grid file needs {list(REQUIRED_KNOBS)} "
                          f"(optional: {list(OPTIONAL_KNOBS)}), or give screen.grid_defaults.<knob>=<value>")
    return df.assign(**{k: v for k, v in defaults.items() if k not in df.columns})


def extra_columns(df: pd.DataFrame) -> pd.DataFrame:
    """The numeric columns of ``df`` that are no knob (the user's own axes, e.g. ``top1``), as floats."""
    cols = [c for c in df.columns if str(c) not in RECORD_COLUMNS
            and pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])]
    return df[cols].astype(float).reset_index(drop=True)


#: Extra columns known to hold numbers (accuracies, fractions in [0, 1]): text there is a fault, not a knob.
NUMERIC_EXTRAS: tuple[str, ...] = ("top1", "top5")


def check_text_values(df: pd.DataFrame, field: str) -> None:
    """Refuse, in one :class:`ConfigError` naming the column, row (1 = first data row) and value, a column
    that is no knob and is not numeric although it should be: an accuracy column (:data:`NUMERIC_EXTRAS`)
    or one whose other values are numbers (``0.76, 0.78, n/a``). A wholly text column stays an unknown
    knob column (:func:`apply_defaults`)."""
    for col in df.columns:
        if str(col) in RECORD_COLUMNS or pd.api.types.is_numeric_dtype(df[col]) or pd.api.types.is_bool_dtype(df[col]):
            continue
        values = pd.to_numeric(df[col], errors="coerce")
        if str(col) not in NUMERIC_EXTRAS and values.isna().all():
            continue
        bad = np.flatnonzero(values.isna().to_numpy() & df[col].notna().to_numpy())
        if len(bad):
            i = int(bad[0])
            kind = ("a numeric accuracy column: give a fraction (0.76)" if str(col) in NUMERIC_EXTRAS else
                    "a numeric column (its other values are numbers): give a number")
            raise ConfigError(f"{field}: column {str(col)!r} row {i + 1}: {df[col].iloc[i]!r} is not a number "
                              f"({len(bad)} row(s) of text); {col} is {kind}, or leave it empty where unknown")


def read_grid_frame(path: str | Path, defaults: Mapping[str, Any] | None = None,
                    field: str = "screen.grid_file") -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`read_grid` as ``(validated knob frame, extra columns)``: the frame is
    :func:`carb.design.candidates.records_frame`'s (each distinct architecture validated once), for grid
    files of a million rows."""
    from carb.design.candidates import records_frame

    knobs, extras, name = _grid_parts(path, defaults, field)
    return records_frame(knobs, source=name), extras


def read_grid_file(path: str | Path, defaults: Mapping[str, Any] | None = None,
                   field: str = "screen.grid_file") -> list[ArchConfig]:
    """Configurations from a grid file, validated; see the module docstring."""
    return read_grid(path, defaults, field)[0]


def read_grid(path: str | Path, defaults: Mapping[str, Any] | None = None,
              field: str = "screen.grid_file") -> tuple[list[ArchConfig], pd.DataFrame]:
    """``(configurations, extra columns)`` of a grid file: the extra numeric columns (:func:`extra_columns`)
    one row per configuration, in file order."""
    knobs, extras, name = _grid_parts(path, defaults, field)
    return configs_from_records(knobs.to_dict("records"), source=name), extras


def _grid_parts(path: str | Path, defaults: Mapping[str, Any] | None, field: str
                ) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """``(knob columns with defaults applied, extra numeric columns, source name)`` of a grid file, each
    checked (numbers finite and >= 0 in knobs; extra columns finite or empty)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{field}: {str(p)!r} does not exist")
    df = read_frame(p, field)
    check_text_values(df, f"{field} {p.name}")
    extras = extra_columns(df)   # NaN allowed (a candidate without a value is flagged downstream)
    for col in extras.columns:
        bad = np.flatnonzero(np.isinf(extras[col].to_numpy()))
        if len(bad):
            raise ConfigError(f"{field} {p.name}: column {col!r} row {bad[0] + 1}: inf is not allowed; "
                              f"allowed: a finite number or empty")
    knobs = df.drop(columns=list(extras.columns))
    check_numbers(knobs, f"{field} {p.name}")
    return apply_defaults(knobs, defaults, f"{field} {p.name}"), extras, f"{field} {p.name}"
