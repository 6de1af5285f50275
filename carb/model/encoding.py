"""What the estimators see: the feature lists, the numeric encoding of raw dataset rows (categorical
knobs expanded), the runtime interaction features of the paper's Section 5.1, and the name of a
target's prediction column.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from carb.data.schema import INTERACTION_FEATURES, RUNTIME_FEATURES
from carb.design.arch import KNOBS, PRECISION_BITS, PRECISIONS, to_bool
from carb.design.features import STATIC_FEATURES
from carb.design.identity import (STAGES, categorical_identity, encode_category, is_bool_column,
                                  uses_layer_table)
from carb.errors import ConfigError

#: Knobs the cascade uses as features (``stages`` is implied by the block type and the depth).
MODEL_KNOBS: tuple[str, ...] = tuple(k for k in KNOBS if k != STAGES)
#: Default feature list (the ``full`` set, the paper's M1).
FULL_FEATURES: tuple[str, ...] = MODEL_KNOBS + STATIC_FEATURES + RUNTIME_FEATURES + INTERACTION_FEATURES
#: Allowed values of the categorical knobs: the network kinds' categorical identity columns
#: (:func:`carb.design.identity.categorical_identity`) and the precision.
CATEGORIES: dict[str, tuple] = {**categorical_identity(), "precision": PRECISIONS}
#: Columns the interaction features are computed from.
INTERACTION_INPUTS: tuple[str, ...] = ("batch_size", "avg_sm_util", "flops", "total_activation_MB",
                                       "avg_mem_util")
UTIL_COLUMNS = ("avg_sm_util", "avg_mem_util")
#: The knobs of a zoo row the cascade reads (its network enters through the layer table's features).
ZOO_MODEL_KNOBS: tuple[str, ...] = ("input_size", "batch_size", "precision")


def zoo_features(features: Sequence[str]) -> list[str]:
    """The feature list of a zoo fit for a configured list ``features`` (written for ResNet rows): the zoo
    knobs, the layer table's static and per-kind features (:data:`carb.design.zoo_features.ZOO_STATIC`,
    :data:`~carb.design.zoo_features.ZOO_KIND_FEATURES`), then the runtime and interaction features
    ``features`` names (never a ResNet knob or a ResNet-only column)."""
    from carb.design.zoo_features import ZOO_KIND_FEATURES, ZOO_STATIC

    base = [*ZOO_MODEL_KNOBS, *ZOO_STATIC, *ZOO_KIND_FEATURES]
    return base + [f for f in features if f in RUNTIME_FEATURES or f in INTERACTION_FEATURES]


def features_for(X: pd.DataFrame, features: Sequence[str]) -> list[str]:
    """The feature list a fit on ``X`` uses: ``features`` for ResNet rows, :func:`zoo_features` where zoo
    rows are present (:func:`carb.design.identity.uses_layer_table`: a zoo frame, or a combined one whose
    ResNet rows then take their walk's layer table, :func:`carb.design.zoo_features.layer_columns`)."""
    return zoo_features(features) if uses_layer_table(X) else list(features)


def reads_layer_table(features: Sequence[str]) -> bool:
    """Whether a feature list is a layer-table list (:func:`zoo_features`'s): it names a column only the
    layer table gives (beyond :data:`STATIC_FEATURES`), so every row's static columns come from its own
    network's layer table, ResNet rows' included."""
    from carb.design.zoo_features import ZOO_KIND_FEATURES, ZOO_STATIC

    only = {*ZOO_STATIC, *ZOO_KIND_FEATURES} - set(STATIC_FEATURES)
    return any(f in only for f in features)


def pred_name(target: str) -> str:
    """Column name of a target's prediction: ``pred_<target>``."""
    return f"pred_{target}"


def interaction_features(df: pd.DataFrame) -> pd.DataFrame:
    """Add the paper's Section 5.1 hardware-load interactions (NaN where telemetry is NaN):
    ``batch_x_sm = batch_size * avg_sm_util``, ``flops_x_sm = log1p(flops) * avg_sm_util``,
    ``act_x_mem = log1p(total_activation_MB) * avg_mem_util``, ``util_product = avg_sm_util * avg_mem_util``.
    Utilizations are in %. Returns a new frame."""
    return with_columns(df, interaction_values(df))


def interaction_values(df: pd.DataFrame, telemetry: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """:func:`interaction_features`' four columns for the n rows of ``df``, each shape (n,), float: from
    ``df``'s utilization columns, or from ``telemetry`` (``{"avg_sm_util": (n,), ...}``) where it has them."""
    def util(c: str) -> np.ndarray:
        if telemetry is not None and c in telemetry:
            return np.asarray(telemetry[c], dtype=float)
        if c not in df.columns:
            return np.full(len(df), np.nan)
        return pd.to_numeric(df[c], errors="coerce").to_numpy(dtype=float)

    sm, mem = util("avg_sm_util"), util("avg_mem_util")
    return {"batch_x_sm": np.asarray(df["batch_size"], dtype=float) * sm,
            "flops_x_sm": np.log1p(np.asarray(df["flops"], dtype=float)) * sm,
            "act_x_mem": np.log1p(np.asarray(df["total_activation_MB"], dtype=float)) * mem,
            "util_product": sm * mem}


def with_columns(df: pd.DataFrame, columns: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """A copy of ``df`` with ``columns`` (name: values, shape (n,)) set: a column ``df`` has is replaced where it
    stands, the others are added at the end in the mapping's order (as setting them one by one would, without
    rebuilding the column labels once per column)."""
    out = df.copy()
    new = {c: v for c, v in columns.items() if c not in df.columns}
    for c, v in columns.items():
        if c not in new:
            out[c] = v
    if not new:
        return out
    return pd.concat([out, pd.DataFrame(new, index=df.index)], axis=1)


def add_interactions(X: pd.DataFrame) -> pd.DataFrame:
    """``X`` with the interaction features added where missing (NaN propagates from telemetry)."""
    missing = [c for c in INTERACTION_FEATURES if c not in X.columns]
    if not missing:
        return X
    base = X.copy()
    for c in INTERACTION_INPUTS:
        if c not in base.columns:
            base[c] = np.nan
    full = interaction_features(base)
    out = X.copy()
    for c in missing:
        out[c] = full[c].to_numpy()
    return out


def _bad_rows(mask: np.ndarray, k: int = 5) -> str:
    return ", ".join(map(str, np.flatnonzero(mask)[:k].tolist()))


def encode(X: pd.DataFrame, features: Sequence[str]) -> pd.DataFrame:
    """Numeric design matrix (float64) of ``features`` from a raw frame.

    Categorical knobs are expanded (identity columns by :func:`carb.design.identity.encode_category`:
    ``block_bottleneck``, the stem as 0/1; ``precision_bits`` + ``precision_bf16``); everything else is cast
    to float. Raises :class:`ConfigError` for a category outside :data:`CATEGORIES`."""
    cols: dict[str, np.ndarray] = {}
    for f in features:
        v = X[f]
        if f in CATEGORIES:   # each distinct value checked and encoded once, then spread over the rows
            codes, uniq = pd.factorize(v, use_na_sentinel=False)
            vals = list(uniq) if not is_bool_column(f) or v.dtype == bool else [to_bool(u) for u in uniq]
            bad = np.array([u not in CATEGORIES[f] for u in vals], dtype=bool)[codes]
            if bad.any():
                raise ConfigError(f"column {f!r} allows {list(CATEGORIES[f])}; other values in rows "
                                  f"{_bad_rows(bad)} (e.g. {v.iloc[int(np.flatnonzero(bad)[0])]!r})")
            if f == "precision":
                cols["precision_bits"] = np.array([PRECISION_BITS.get(u, np.nan) for u in vals], dtype=float)[codes]
                cols["precision_bf16"] = np.array([u == "bf16" for u in vals], dtype=float)[codes]
            else:
                cols.update({c: e[codes] for c, e in encode_category(f, vals).items()})
        elif isinstance(v.dtype, np.dtype) and v.dtype.kind in "fiu":   # already numbers: nothing to check
            cols[f] = v.to_numpy(float)
        else:
            num = pd.to_numeric(v, errors="coerce")
            bad = (num.isna() & v.notna()).to_numpy()
            if bad.any():
                raise ConfigError(f"feature column {f!r} must be numeric; non-numeric values in rows "
                                  f"{_bad_rows(bad)}")
            cols[f] = num.to_numpy(float)
    return pd.DataFrame(cols, index=X.index)
