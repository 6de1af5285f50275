"""The collection loop's building blocks: shards of a design space, the output file checks (writable, this
schema, this device), resume (the ``config_id`` values a file already holds), and one dataset row from
a configuration, its static features and what the meter measured (or an oom/error status).

The ``carb-collect`` command (:mod:`carb.commands.collect`) runs the loop and logs it to MLflow.
"""
from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.data.io import load_dataset
from carb.data.schema import COLUMNS, SCHEMA, empty_frame
from carb.design.arch import ArchConfig
from carb.errors import ConfigError, DatasetError

SUFFIXES = (".parquet", ".csv")


def shard_configs(configs: Sequence[ArchConfig], seed: int, index: int = 0, count: int = 1) -> list[ArchConfig]:
    """Shuffle ``configs`` with ``seed`` (duplicates by config_id dropped) and return shard ``index``
    of ``count``: ``order[index::count]``. The shards of one seed are disjoint and cover all."""
    check_shard(index, count)
    seen: dict[str, ArchConfig] = {}
    for c in configs:
        seen.setdefault(c.config_id, c)
    unique = list(seen.values())
    order = np.random.default_rng(int(seed)).permutation(len(unique))
    return [unique[i] for i in order[index::count]]


def check_shard(index: Any, count: Any) -> tuple[int, int]:
    """Validate ``shard.index`` / ``shard.count``; return them as ints."""
    try:
        i, n = int(index), int(count)
    except (TypeError, ValueError):
        raise ConfigError(f"shard: index and count must be integers, got index={index!r} count={count!r}") from None
    if n < 1:
        raise ConfigError(f"shard.count: must be >= 1, got {n}")
    if not 0 <= i < n:
        raise ConfigError(f"shard.index: must satisfy 0 <= index < count={n}, got {i}")
    return i, n


def resolve_out(out: Any, index: int, count: int) -> Path:
    """The file this shard writes: ``out`` itself for a single shard with a .parquet/.csv suffix,
    else ``out/shard-<index>-of-<count>.parquet``."""
    if out is None or str(out).strip() == "":
        raise ConfigError("out: give an output file (.parquet or .csv) or folder")
    p = Path(str(out)).expanduser()
    suffix = p.suffix.lower()
    if suffix in SUFFIXES:
        if count > 1:
            raise ConfigError(f"out: with shard.count={count} give a folder (each shard writes "
                              f"shard-<index>-of-<count>.parquet in it), got a file {str(p)!r}")
        return p
    if suffix and not p.is_dir():
        raise ConfigError(f"out: {str(p)!r} has suffix {suffix!r}; allowed: {list(SUFFIXES)} or a folder")
    return p / f"shard-{index}-of-{count}.parquet"


def check_writable(path: Path) -> None:
    """Raise :class:`ConfigError` unless ``path`` can be created/replaced (probes with a temp file;
    creates missing parent folders)."""
    parent = path.parent
    if path.exists() and path.is_dir():
        raise ConfigError(f"out: {str(path)!r} is a folder, expected a dataset file")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f".carb-write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"out: {str(path)!r} is not writable ({e.strerror or e})") from None


def read_schema(path: Path) -> pd.DataFrame:
    """The dataset in ``path`` (empty frame if absent); :class:`DatasetError` when it exists but is not
    a dataset of this schema."""
    if not path.exists():
        return empty_frame()
    try:
        df = load_dataset(path)
    except DatasetError as e:
        raise DatasetError(f"out: {str(path)!r} exists but is not a CARB dataset of this schema ({e}); "
                           f"choose another out") from None
    extra = [c for c in df.columns if c not in SCHEMA]
    if extra:
        raise DatasetError(f"out: {str(path)!r} has columns outside the schema {extra[:5]}; it belongs to "
                           f"another schema, choose another out")
    return df


def check_device(df: pd.DataFrame, path: Path, identity: Mapping[str, str]) -> None:
    """:class:`DatasetError` when ``df`` holds rows of a device other than ``identity``'s."""
    if not len(df):
        return
    other = df[(df["device_name"] != identity["device_name"]) | (df["device_kind"] != identity["device_kind"])]
    if len(other):
        r = other.iloc[0]
        raise DatasetError(f"out: {str(path)!r} holds rows of device {r['device_name']!r} ({r['device_kind']}); "
                           f"this run measures {identity['device_name']!r} ({identity['device_kind']}); "
                           f"choose another out")


def read_existing(path: Path, identity: Mapping[str, str]) -> pd.DataFrame:
    """The rows already in ``path`` (empty frame if absent), checked for schema and device."""
    df = read_schema(path)
    check_device(df, path, identity)
    return df


def error_line(exc: BaseException, limit: int = 500) -> str:
    """One line: ``Type: message`` (whitespace collapsed, truncated)."""
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}"[:limit] if msg else type(exc).__name__


def make_row(cfg: ArchConfig, identity: Mapping[str, str], static: Mapping[str, Any],
             measured: Mapping[str, Any] | None, status: str, error: str | None) -> dict[str, Any]:
    """One dataset row (all :data:`carb.data.schema.COLUMNS`)."""
    row: dict[str, Any] = {c: (pd.NA if SCHEMA[c] == "string" else np.nan) for c in COLUMNS}
    row.update(identity)
    row.update(cfg.to_dict())
    row.update({k: static[k] for k in static if k in SCHEMA})
    row["config_id"] = cfg.config_id
    row["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    row["status"] = status
    row["error"] = error if error else pd.NA
    if measured is not None:
        row.update({k: measured[k] for k in measured if k in SCHEMA})
    else:
        row["missing_reason"] = f"not measured: status={status}"
    if row.get("missing_reason") is None:
        row["missing_reason"] = pd.NA
    return row
