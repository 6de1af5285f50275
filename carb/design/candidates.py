"""Candidates as a vectorized frame of knobs, for grids of a million rows (NAS scale).

:func:`carb.design.space.configs_from_cfg` builds one validated :class:`~carb.design.arch.ArchConfig` per
candidate: about 20 us each, 20 s and several GB for a million. Here a grid file's rows (and, in
:func:`carb.design.space.space_frame`, a space) become a DataFrame of knob columns directly: each distinct architecture (every knob but the batch size
and the precision) is validated once through :class:`~carb.design.arch.ArchConfig`, each distinct batch
size and precision once, and the rows are index arithmetic over those. Same rows, same order and same
``config_id`` (:func:`config_ids`) as the object path (tests/test_screenscale_candidates.py).

Columns of a knob frame (:data:`FRAME_COLUMNS`): the :data:`~carb.design.arch.KNOBS` (``stages`` as the
built layout, ``'2-2-2-2'``) plus ``num_classes``. Imports nothing of CARB but the design layer.
"""
from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import KNOB_DEFAULTS, KNOBS, RECORD_COLUMNS, ArchConfig
from carb.errors import ConfigError

#: Columns of a knob frame, in order.
FRAME_COLUMNS: tuple[str, ...] = (*KNOBS, "num_classes")
#: Knobs that describe the network itself (not how it is run): one validation per distinct combination.
ARCH_COLUMNS: tuple[str, ...] = ("block", "depth", "width_mult", "input_size", "early_downsample", "stages",
                                 "inner_mult", "num_classes")


def arch_record(cfg: ArchConfig) -> tuple:
    """The normalized :data:`ARCH_COLUMNS` values of a validated configuration."""
    return (cfg.block, cfg.depth, cfg.width_mult, cfg.input_size, cfg.early_downsample, cfg.stages_str,
            cfg.inner_mult, cfg.num_classes)


def arch_knobs(frame: pd.DataFrame) -> list[str]:
    """The knob columns of ``frame`` that name an architecture at a precision: :data:`KNOBS` present in it,
    ``batch_size`` left out (rows that differ only in batch size are one network run at several batches);
    a zoo frame's ``model_name`` first (:mod:`carb.design.zoo_space`: the network is named, not knobbed)."""
    named = ["model_name"] if "model_name" in frame.columns else []
    return named + [k for k in KNOBS if k in frame.columns and k != "batch_size"]


def arch_codes(frame: pd.DataFrame, columns: Sequence[str] = ARCH_COLUMNS) -> tuple[np.ndarray, pd.DataFrame]:
    """``(code per row (n,), the distinct architectures (one row each, ``columns``))`` of a knob frame:
    rows with equal values in ``columns`` share a code (first-seen order)."""
    cols = [c for c in columns if c in frame.columns]
    if not len(frame):
        return np.zeros(0, dtype=np.int64), frame[cols].head(0)
    combined = np.zeros(len(frame), dtype=np.int64)
    for c in cols:
        codes, uniq = pd.factorize(frame[c], use_na_sentinel=False)
        combined = combined * (len(uniq) + 1) + codes
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")          # codes in first-seen order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return rank[inverse.ravel()], frame[cols].iloc[first[order]].reset_index(drop=True)


def frame_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """``frame.to_dict("records")``, the same Python values (numbers, booleans, text, None, NaN), built from
    one list per column: pandas boxes each value on its own (0.8 ms for the 768 architectures of a
    3,072-candidate screening, 0.1 ms this way)."""
    names = [str(c) for c in frame.columns]
    return [dict(zip(names, vals)) for vals in zip(*(frame[c].tolist() for c in frame.columns))] if len(names) \
        else [{} for _ in range(len(frame))]


def config_ids(frame: pd.DataFrame, architectures: tuple[np.ndarray, pd.DataFrame] | None = None) -> np.ndarray:
    """:attr:`ArchConfig.config_id` of every row of a knob frame (normalized values, as
    :func:`space_frame` gives them): the same 16-hex-digit SHA-1 of the same JSON, built per row as text
    (about 1 us a row instead of 14). ``architectures``: :func:`arch_codes` of the frame where the caller
    has it."""
    n = len(frame)
    if not n:
        return np.array([], dtype=object)
    codes, archs = architectures if architectures is not None else arch_codes(frame)
    mid, tail = [], []
    default_inner = KNOB_DEFAULTS["inner_mult"]
    for r in archs.itertuples(index=False):
        inner = "" if float(r.inner_mult) == default_inner else f'"inner_mult":"{float(r.inner_mult)!r}",'
        mid.append(f'"block":"{r.block}","depth":{int(r.depth)},"early_downsample":'
                   f'{"true" if bool(r.early_downsample) else "false"},{inner}"input_size":{int(r.input_size)},'
                   f'"num_classes":{int(r.num_classes)},"precision":"')
        tail.append(f'","stages":"{r.stages}","width_mult":"{float(r.width_mult)!r}"}}')
    batch = frame["batch_size"].to_numpy(np.int64).tolist()
    prec = frame["precision"].astype(str).tolist()
    sha1 = hashlib.sha1
    return np.array([sha1(f'{{"batch_size":{b},{mid[c]}{p}{tail[c]}'.encode()).hexdigest()[:16]
                     for b, c, p in zip(batch, codes.tolist(), prec)], dtype=object)


def records_frame(frame: pd.DataFrame, source: str = "grid") -> pd.DataFrame:
    """A frame of knob columns (a grid file's rows; ``stages`` may be missing or NaN = the named layout,
    ``inner_mult`` missing or NaN = 1.0, ``num_classes`` missing = 1000) validated and normalized into a
    knob frame (:data:`FRAME_COLUMNS`), as :func:`carb.design.arch.configs_from_records` would build
    each row: each distinct architecture, batch size and precision validated once; a fault is one
    :class:`ConfigError` naming the first row (0-based, as the object path) that has it."""
    allowed = set(RECORD_COLUMNS)
    unknown = sorted(set(map(str, frame.columns)) - allowed)
    if unknown:
        raise ConfigError(f"{source}: unknown knob column(s) {unknown}; allowed: {list(KNOBS)}")
    df = frame.drop(columns=["config_id"], errors="ignore").reset_index(drop=True)
    missing = [k for k in ("block", "depth") if k not in df.columns]
    if missing:
        raise ConfigError(f"{source}: row 0: ArchConfig.__init__() missing required argument(s) {missing}")
    defaults = {"width_mult": 1.0, "input_size": 224, "batch_size": 1, "precision": "fp32",
                "early_downsample": True, "stages": None, "num_classes": 1000, "inner_mult": 1.0}
    df = df.assign(**{k: v for k, v in defaults.items() if k not in df.columns})
    if df["stages"].dtype == object:     # a list of blocks per stage -> '2-2-2-2' (hashable)
        df["stages"] = [("-".join(map(str, v)) if isinstance(v, (list, tuple, np.ndarray)) else v) for v in df["stages"]]
    arch_cols = [c for c in ARCH_COLUMNS]
    codes, archs = arch_codes(df, arch_cols)     # a missing value is one value of its own here
    for c in ("stages", "inner_mult"):             # missing -> None (also pandas' <NA> of a string column)
        if archs[c].dtype == object or pd.api.types.is_float_dtype(archs[c]) or pd.api.types.is_string_dtype(archs[c]):
            archs[c] = archs[c].astype(object).where(archs[c].notna(), None)
    first_row = np.unique(codes, return_index=True)[1]     # codes are 0.. in first-seen order
    b0, p0 = df["batch_size"].iloc[:1].tolist()[0], df["precision"].iloc[:1].tolist()[0]   # Python scalars
    recs = []
    for j, r in enumerate(frame_records(archs)):
        recs.append(arch_record(_checked(source, int(first_row[j]), {**r, "batch_size": b0, "precision": p0})))
    base = frame_records(archs.head(1))[0]
    values: dict[str, list] = {}
    for col, attr in (("batch_size", "batch_size"), ("precision", "precision")):
        vcodes, uniq = pd.factorize(df[col].astype(object), use_na_sentinel=False)
        first = np.unique(vcodes, return_index=True)[1]    # factorize codes are 0.. in first-seen order
        norm = [getattr(_checked(source, int(first[k]), {**base, "batch_size": b0, "precision": p0, col: u}), attr)
                for k, u in enumerate(uniq)]
        values[col] = np.asarray(norm, dtype=object)[vcodes]
    out = pd.DataFrame(recs, columns=list(ARCH_COLUMNS)).iloc[codes].reset_index(drop=True)
    out["batch_size"] = np.asarray(values["batch_size"], dtype=np.int64)
    out["precision"] = values["precision"]
    return out[list(FRAME_COLUMNS)]


def _checked(source: str, row: int, rec: Mapping[str, Any]) -> ArchConfig:
    """``ArchConfig(**rec)``, a fault raised as one :class:`ConfigError` naming ``source`` and ``row``."""
    try:
        return ArchConfig(**rec)
    except TypeError as e:
        raise ConfigError(f"{source}: row {row}: {e}") from None
    except ConfigError as e:
        raise ConfigError(f"{source}: row {row}: {e}") from None


def configs_frame(configs: Sequence[ArchConfig]) -> pd.DataFrame:
    """The knob frame (:data:`FRAME_COLUMNS`) of validated configurations, one row each."""
    rows = [(c.block, c.depth, c.width_mult, c.input_size, c.batch_size, c.precision, c.early_downsample,
             c.stages_str, c.inner_mult, c.num_classes) for c in configs]
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


__all__ = ["ARCH_COLUMNS", "FRAME_COLUMNS", "arch_codes", "arch_knobs", "arch_record", "config_ids", "configs_frame",
           "records_frame"]
