"""The common end of every importer: source rows -> configurations -> repeated runs aggregated -> static
features -> a validated dataset, plus the rows it could not map, each with the reason.

A format reader (:mod:`~carb.data.importers.timm`, :mod:`~carb.data.importers.generic_csv`,
:mod:`~carb.data.importers.optimum`) returns **source rows**, one per measurement, already in CARB's units:

- ``source_row`` [str] where the row came from (``file.csv:12``, a ``benchmark.json`` path);
- ``model`` [str, optional] a model name (:mod:`carb.data.importers.models`), or the knob columns
  ``block``, ``depth`` (and optionally ``width_mult``, ``inner_mult``, ``early_downsample``, ``stages``);
- ``input_size``, ``batch_size`` [int]; ``precision`` [str] fp32 | fp16 | bf16 or an alias of
  :data:`PRECISION_ALIASES`; ``device_name`` [str];
- targets ``latency_ms`` [ms per batch], ``energy_J`` [J per batch], ``peak_memory_MB`` [MiB], NaN where
  the source has none; ``memory_kind`` [str] allocator_peak | device_used (NA without memory);
  ``source`` [str] importer and file;
- optional ``torch_version``, ``latency_std_ms``, ``n_runs``, ``n_warmup``, and the source's own columns.

:func:`finish` maps each row to an :class:`~carb.design.arch.ArchConfig` (a row that does not map, has no
positive target, or a non-positive one goes to the unmapped list with the reason), aggregates the rows of
one key ``(device_name, config_id)``: each target's median, its spread (max - min, same unit:
``latency_spread_ms``, ``energy_spread_J``, ``peak_memory_spread_MB``; 0 for a single run) and the count
``n_repeats``; the importer's *setting* columns (``memory_kind`` and e.g. timm's compile mode) must agree
within a key, or one-line :class:`~carb.errors.ConfigError` (rows of two protocols are not repeats).
Then it adds the closed-form static features (:func:`carb.design.features.grid_features`),
``device_kind = 'import'`` (:mod:`carb.data.importers.devices` then describes the devices),
``status = 'ok'``, the reasons of NaN targets in ``missing_reason``, and
validates against :mod:`carb.data.schema`.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.data.importers.models import model_knobs
from carb.data.schema import COLUMNS, MEMORY_KINDS, RUNTIME_FEATURES, TARGETS, conform, validate_dataset
from carb.design.arch import PRECISIONS, ArchConfig
from carb.design.features import STATIC_FEATURES, grid_features
from carb.design.identity import ARCH_COLUMNS, has_resnet_structure
from carb.errors import CarbError, ConfigError, DatasetError

#: Spellings of the precisions in outside tables -> CARB's (autocast names map to the compute precision).
PRECISION_ALIASES: dict[str, str] = {
    **{p: p for p in PRECISIONS}, "float32": "fp32", "float": "fp32", "fp32": "fp32", "32": "fp32",
    "float16": "fp16", "half": "fp16", "amp_fp16": "fp16", "16": "fp16",
    "bfloat16": "bf16", "amp_bf16": "bf16",
}
#: Target -> its spread column (max - min over the repeated runs of one key, same unit).
SPREADS: dict[str, str] = {"latency_ms": "latency_spread_ms", "energy_J": "energy_spread_J",
                           "peak_memory_MB": "peak_memory_spread_MB"}
#: The unmapped list's columns.
UNMAPPED_COLUMNS = ("source_row", "model", "device_name", "reason")
#: ``unmapped`` settings: list the rows that do not map and import the rest, or fail on the first.
UNMAPPED_POLICIES = ("list", "fail")
_ARCH_KNOBS = ARCH_COLUMNS   # a ResNet's identity columns (carb.design.identity)
_KEY = ["device_name", "config_id"]
_MEDIAN_RECORD = ("latency_std_ms", "n_runs", "n_warmup")
#: Setting column -> the importer setting that selects one value of it (named in the error).
SETTING_FILTERS: dict[str, str] = {"timm_precision": "importer.precision", "torch_version": "importer.torch",
                                   "compile": "importer.compile", "memory_layout": "importer.memory_layout",
                                   "memory_kind": "importer.memory"}


def given(v: Any) -> bool:
    """Whether a cell holds a value (not None, NaN, NA or an empty string)."""
    if v is None or v is pd.NA:
        return False
    if isinstance(v, float) and math.isnan(v):
        return False
    return not (isinstance(v, str) and not v.strip())


def norm_precision(value: Any) -> str | None:
    """CARB's precision for an outside spelling (:data:`PRECISION_ALIASES`), None when unknown."""
    return PRECISION_ALIASES.get(str(value).strip().lower()) if given(value) else None


def row_config(r: Mapping[str, Any]) -> tuple[ArchConfig | None, str]:
    """``(config, '')`` for one source row, or ``(None, reason)``. A model name wins over knob columns."""
    if given(r.get("model")):
        knobs, reason = model_knobs(r["model"])
        if knobs is None:
            return None, reason
    else:
        knobs = {k: r[k] for k in _ARCH_KNOBS if given(r.get(k))}
        if not has_resnet_structure(knobs):
            return None, "neither a model name nor block and depth"
    for k in ("input_size", "batch_size"):
        if not given(r.get(k)):
            return None, f"{k}: not given"
        knobs[k] = r[k]
    prec = norm_precision(r.get("precision"))
    if prec is None:
        return None, (f"precision: {r.get('precision')!r} is not a precision; allowed: "
                      f"{sorted(set(PRECISION_ALIASES))}")
    try:
        return ArchConfig(precision=prec, **knobs), ""
    except (CarbError, TypeError, ValueError) as e:
        return None, " ".join(str(e).split())


def _target_problem(r: Mapping[str, Any]) -> str:
    """Why a row's targets are unusable ('' when at least one is a positive number and none is <= 0)."""
    vals = {t: r.get(t) for t in TARGETS if given(r.get(t))}
    bad = [f"{t}={float(v):g}" for t, v in vals.items() if not float(v) > 0]
    if bad:
        return f"non-positive target {', '.join(bad)} (missing is NaN, never 0)"
    return "" if vals else f"no target value ({', '.join(TARGETS)})"


def map_rows(rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, ArchConfig], list[dict[str, Any]]]:
    """``(mapped rows, configs by config_id, unmapped list)``: the rows that map, with ``config_id`` and
    every knob set from their configuration; the others as dicts with :data:`UNMAPPED_COLUMNS`."""
    keep, configs, unmapped = [], [], []
    for i, r in enumerate(rows.to_dict("records")):
        cfg, reason = row_config(r)
        if cfg is not None and not given(r.get("device_name")):
            cfg, reason = None, "device_name: not given"
        if cfg is not None:
            reason = _target_problem(r)
        if reason:
            unmapped.append({"source_row": str(r.get("source_row", i)),
                             "model": r.get("model") if given(r.get("model")) else None,
                             "device_name": r.get("device_name"), "reason": reason})
            continue
        keep.append(i)
        configs.append(cfg)
    out = rows.iloc[keep].reset_index(drop=True).copy()
    knob_frame = pd.DataFrame([c.to_dict() for c in configs], index=out.index)
    for k in knob_frame.columns:
        out[k] = knob_frame[k] if len(out) else pd.Series(dtype=object)
    out["config_id"] = [c.config_id for c in configs]
    return out, {c.config_id: c for c in configs}, unmapped


def aggregate(rows: pd.DataFrame, settings: Sequence[str] = ()) -> pd.DataFrame:
    """One row per ``(device_name, config_id)``: target medians, spreads, ``n_repeats`` (see the module
    docstring). ``settings`` (plus ``memory_kind``) must be constant within a key."""
    for col in ["memory_kind", *settings]:
        if col not in rows.columns:
            continue
        n = rows.assign(_v=rows[col].astype("string").fillna("<NA>")).groupby(_KEY)["_v"].nunique()
        if (n > 1).any():
            dev, cid = n[n > 1].index[0]
            vals = sorted(rows.loc[(rows["device_name"] == dev) & (rows["config_id"] == cid), col]
                          .astype("string").fillna("<NA>").unique())
            field = SETTING_FILTERS.get(col, col)
            raise ConfigError(f"{field}: rows of one configuration on {dev!r} differ in {col} {vals}; they are "
                              f"not repeats of one measurement: keep one {col} ({field}=<one value>)")
    g = rows.groupby(_KEY, sort=False)
    agg = g.first()
    for t in TARGETS:
        if t in rows.columns:
            col = pd.to_numeric(rows[t], errors="coerce")
            agg[t] = col.groupby([rows[k] for k in _KEY], sort=False).median()
            agg[SPREADS[t]] = col.groupby([rows[k] for k in _KEY], sort=False).agg(lambda s: s.max() - s.min())
    for c in _MEDIAN_RECORD:
        if c in rows.columns:
            agg[c] = pd.to_numeric(rows[c], errors="coerce").groupby([rows[k] for k in _KEY], sort=False).median()
    for c in ("source_row", "source"):
        if c in rows.columns:
            agg[c] = g[c].agg(lambda s: ";".join(dict.fromkeys(s.dropna().astype(str))))
    agg["n_repeats"] = g.size().astype("int64")
    return agg.reset_index()


def _missing_reason(r: Mapping[str, Any], fmt: str) -> str:
    parts = [f"{t}: not in the {fmt} source" for t in TARGETS if not given(r.get(t))]
    parts.append(f"{', '.join(RUNTIME_FEATURES)}: not reported by the {fmt} source")
    return "; ".join(parts)


def finish(rows: pd.DataFrame, fmt: str, settings: Sequence[str] = (), unmapped_policy: str = "list",
           model_field: str = "model") -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Source rows -> ``(validated dataset, unmapped list)`` (see the module docstring).

    ``unmapped_policy='fail'`` raises :class:`ConfigError` for the first unmapped row (a model name as
    ``<model_field>: model ... allowed: [...]``); so does a table of which no row maps."""
    if unmapped_policy not in UNMAPPED_POLICIES:
        raise ConfigError(f"importer.unmapped: {unmapped_policy!r} is not allowed; allowed: {list(UNMAPPED_POLICIES)}")
    if "memory_kind" in rows.columns:
        bad = rows["memory_kind"].notna() & ~rows["memory_kind"].isin(MEMORY_KINDS)
        if bad.any():
            raise ConfigError(f"memory_kind: {rows.loc[bad, 'memory_kind'].iloc[0]!r} is not allowed; "
                              f"allowed: {list(MEMORY_KINDS)}")
    mapped, configs, unmapped = map_rows(rows)
    first = unmapped[0] if unmapped else None
    if first is not None and (unmapped_policy == "fail" or mapped.empty):
        field = model_field if first["reason"].startswith("model ") else "importer"
        tail = ("; set importer.unmapped=list to import the other rows and list this one"
                if not mapped.empty else f"; no row of {len(rows)} maps")
        raise ConfigError(f"{field}: {first['source_row']}: {first['reason']}{tail}")
    if mapped.empty:
        raise DatasetError(f"{fmt} import: the source holds no rows")
    agg = aggregate(mapped, settings)
    static = grid_features([configs[c] for c in agg["config_id"]])
    for k in STATIC_FEATURES:
        agg[k] = static[k].to_numpy()
    agg["device_kind"] = "import"
    agg["status"] = "ok"
    agg["missing_reason"] = [_missing_reason(r, fmt) for r in agg.to_dict("records")]
    for t in TARGETS:
        if t not in agg.columns:
            agg[t] = np.nan
    if "memory_kind" in agg.columns:
        agg["memory_kind"] = agg["memory_kind"].where(agg["peak_memory_MB"].notna(), pd.NA)
    out = validate_dataset(conform(agg, fill_missing=COLUMNS), source=f"{fmt} import")
    return out, unmapped


def unmapped_frame(unmapped: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The unmapped list as a frame with :data:`UNMAPPED_COLUMNS`."""
    return pd.DataFrame(list(unmapped), columns=list(UNMAPPED_COLUMNS))
