"""The zoo dataset schema: one row = one named network (torchvision classifier or timm backbone) at one
input size, batch size and precision, measured on one device.

It shares the ResNet dataset's identity, runtime, target, record and repeatability columns
(:mod:`carb.data.schema`: same names, units and meaning) and replaces the ResNet knobs by the zoo's
(:data:`carb.design.zoo_space.ZOO_KNOBS`: ``model_name`` [str] as the space names it, ``family`` [str],
``input_size`` [int, px, H = W], ``batch_size`` [int], ``precision`` [str]) and the static features by the
layer table's (:data:`carb.design.zoo_features.ZOO_STATIC`). ``config_id`` is
:attr:`carb.design.zoo_space.ZooConfig.config_id`.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from carb.data.schema import (
    ADDED_IDENTITY,
    IDENTITY,
    PRECISIONS,
    RECORD,
    REPEATABILITY,
    RUNTIME_FEATURES,
    STATUSES,
    TARGETS,
    _first_rows,
    check_targets,
    coerce_columns,
)
from carb.design.zoo_features import ZOO_STATIC
from carb.design.identity import is_zoo
from carb.design.zoo_space import ZOO_KNOBS
from carb.errors import DatasetError

_STR, _INT, _FLOAT = "string", "int64", "float64"
ZOO_SCHEMA: dict[str, str] = {
    **{c: _STR for c in IDENTITY},
    **{"model_name": _STR, "family": _STR, "input_size": _INT, "batch_size": _INT, "precision": _STR},
    **{c: _FLOAT for c in ZOO_STATIC},   # counts too: NaN where the tracer refused the model
    **{c: _FLOAT for c in RUNTIME_FEATURES},
    **{c: _FLOAT for c in TARGETS},
    **{c: (_STR if c == "throttle_reasons" else _FLOAT) for c in RECORD},
    **{c: _FLOAT for c in REPEATABILITY},
}
ZOO_COLUMNS: tuple[str, ...] = tuple(ZOO_SCHEMA)
assert all(k in ZOO_SCHEMA for k in ZOO_KNOBS)


def empty_zoo_frame() -> pd.DataFrame:
    """An empty zoo frame with the schema's columns and dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=ZOO_SCHEMA[c]) for c in ZOO_COLUMNS})


def is_zoo_frame(df: pd.DataFrame) -> bool:
    """Whether a frame holds zoo rows (a ``model_name`` column and no ResNet marker column:
    :func:`carb.design.identity.is_zoo`)."""
    return is_zoo(df)


def validate_zoo_dataset(df: pd.DataFrame, source: str = "zoo dataset") -> pd.DataFrame:
    """Check a zoo frame against :data:`ZOO_SCHEMA` and return it with canonical dtypes (columns in schema
    order, extra ones after). A static feature the tracer could not give is NaN. Raises :class:`DatasetError` naming the column and
    rows: a missing column, a wrong type, an unknown status or precision, an empty model name, a
    non-positive knob, an infinite or non-positive target, a duplicate ``config_id`` on one device."""
    df = df.copy()
    for c in REPEATABILITY:
        if c not in df.columns:
            df[c] = np.nan
    for c in ADDED_IDENTITY:   # written before the column existed
        if c not in df.columns:
            df[c] = pd.NA
    out = coerce_columns(df, ZOO_SCHEMA, source, "carb.data.zoo_schema.ZOO_COLUMNS")
    for c, allowed in (("status", STATUSES), ("precision", PRECISIONS)):
        bad = (~out[c].isin(allowed)).to_numpy()
        if bad.any():
            raise DatasetError(f"{source}: column {c!r} allows {list(allowed)}; other values in rows "
                               f"{_first_rows(bad)}")
    bad = (out["model_name"].isna() | (out["model_name"].str.strip() == "")).to_numpy()
    if bad.any():
        raise DatasetError(f"{source}: column 'model_name' must name a model; empty in rows {_first_rows(bad)}")
    for c in ("input_size", "batch_size"):
        bad = ~(out[c] > 0).to_numpy()
        if bad.any():
            raise DatasetError(f"{source}: knob {c!r} must be a positive integer; bad values in rows {_first_rows(bad)}")
    check_targets(out, source)
    extra = [c for c in out.columns if c not in ZOO_SCHEMA]
    return out[list(ZOO_COLUMNS) + extra].reset_index(drop=True)
