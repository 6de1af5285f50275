"""Reading and writing datasets: one file (parquet or CSV) or a folder of shards, validated against the
schema; the shipped reference dataset; the ok rows of one device for training.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from carb.data.plausibility import check_plausible
from carb.data.schema import TARGETS, available_targets, ok_rows
from carb.data.schema import validate_dataset as _validate_resnet
from carb.errors import ConfigError, DatasetError
from carb.files import locked, write_atomic
from carb.resources import DATA_DIR

_REFERENCE = DATA_DIR / "cpu-reference.parquet"
#: the shipped datasets by name: ``reference`` (CPU) and ``h200`` (a lent NVIDIA H200, with energy); the CPU
#: zoo of the AMD EPYC Zen 4 VM (``zoo-cpu``) and of the Intel Xeon VM (``zoo-cpu-xeon``)
SHIPPED = {"reference": _REFERENCE, "cpu-reference": _REFERENCE,
           "h200": DATA_DIR / "h200-reference.parquet", "h200-reference": DATA_DIR / "h200-reference.parquet",
           "zoo-cpu": DATA_DIR / "zoo-cpu.parquet", "zoo-cpu-xeon": DATA_DIR / "zoo-cpu-xeon.parquet"}
#: timm's published inference benchmark, every model, as training rows of one device (``data.device``):
#: latency only (carb/data/timm-zoo-bench.md)
TIMM_ZOO = "timm-zoo"


def validate_dataset(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Validate a frame against its schema: a zoo frame (a ``model_name`` column, no ``block``) against
    :data:`carb.data.zoo_schema.ZOO_SCHEMA`, any other against :data:`carb.data.schema.SCHEMA`. A combined
    dataset (ResNet and zoo rows, e.g. a folder holding both kinds' files of one device:
    :func:`carb.design.identity.kinds_in`) is validated row by row against its kind's schema
    (:func:`validate_combined`)."""
    from carb.data.zoo_schema import is_zoo_frame, validate_zoo_dataset
    from carb.design.identity import kinds_in

    if is_zoo_frame(df):
        return validate_zoo_dataset(df, source)
    if len(kinds_in(df)) > 1:
        return validate_combined(df, source)
    return _validate_resnet(df, source)


def validate_combined(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """A combined dataset validated: its ResNet rows (``block`` set) against :data:`carb.data.schema.SCHEMA`,
    its zoo rows (``model_name`` set, no ``block``) against :data:`carb.data.zoo_schema.ZOO_SCHEMA`, each
    part's faults named as ``<source> (ResNet rows)`` / ``(zoo rows)`` with the part's row numbers; the
    rows come back in their order, every column of both schemas present (NaN where a kind has none).
    A row that names neither kind is one :class:`DatasetError` naming the first such rows."""
    import numpy as np

    from carb.data.schema import SCHEMA
    from carb.data.zoo_schema import ZOO_SCHEMA, validate_zoo_dataset
    from carb.design.identity import RESNET, ZOO, row_kinds

    kinds = row_kinds(df)
    neither = np.flatnonzero(kinds == "")
    if len(neither):
        raise DatasetError(f"{source}: rows {', '.join(map(str, neither[:5].tolist()))} name no network: a row "
                           f"of a combined dataset needs {RESNET.marker!r} (ResNet knobs) or {ZOO.marker!r} "
                           f"(a zoo model)")
    base = df.reset_index(drop=True)
    parts = []
    for name, check, schema, label in ((RESNET.name, _validate_resnet, SCHEMA, "ResNet rows"),
                                       (ZOO.name, validate_zoo_dataset, ZOO_SCHEMA, "zoo rows")):
        rows = np.flatnonzero(kinds == name)
        part = base.iloc[rows].reset_index(drop=True)
        other = [c for c in part.columns if c not in schema and part[c].isna().all()]   # the other kind's
        part = check(part.drop(columns=other), f"{source} ({label})")
        parts.append(part.set_index(pd.Index(rows)))
    out = pd.concat(parts).sort_index()
    return out.reset_index(drop=True)


def _read_one(path: Path) -> pd.DataFrame:
    suf = path.suffix.lower()
    try:
        if suf == ".parquet":
            return pd.read_parquet(path)
        if suf == ".csv":
            return pd.read_csv(path, keep_default_na=True)
    except Exception as e:
        raise DatasetError(f"cannot read dataset {str(path)!r}: {' '.join(str(e).split())}") from None
    raise DatasetError(f"dataset {str(path)!r}: unsupported format {suf!r}; allowed: .parquet, .csv")


def resolve_path(path_or_name: str | Path) -> Path:
    """Map a shipped dataset's name (``reference``, ``h200``: :data:`SHIPPED`) or a path to a file or
    folder path."""
    return SHIPPED.get(str(path_or_name), Path(path_or_name))


def load_dataset(path_or_folder: str | Path, validate: bool = True) -> pd.DataFrame:
    """Load a dataset from a parquet or CSV file, a folder of shard files (all ``*.parquet`` and
    ``*.csv`` inside, read as one dataset), or the name ``reference``; validate it against the schema and
    check every row's plausibility (:func:`carb.data.plausibility.check_plausible`: a column in the wrong
    unit, an infinite target: one line naming the row and column)."""
    p = resolve_path(path_or_folder)
    if not p.exists():
        raise DatasetError(f"dataset {str(p)!r} does not exist (give a .parquet/.csv file, a folder of "
                           f"shards, or a shipped name: {', '.join(sorted(SHIPPED))})")
    if p.is_dir():
        files = sorted([*p.glob("*.parquet"), *p.glob("*.csv")])
        if not files:
            raise DatasetError(f"dataset folder {str(p)!r} holds no .parquet or .csv files")
        frames = [_read_one(f).assign(_file=f.name) for f in files]
        df = dedupe_shards(pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True), p)
    else:
        df = _read_one(p)
    if not validate:
        return df
    out = validate_dataset(df, source=str(p))
    check_plausible(out, source=str(p))
    return out


def dedupe_shards(df: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """Rows of a shard folder with one row per device and ``config_id``: where shards overlap (a
    restart with another ``shard.count``, two collectors on one folder) the newest row (``measured_at``)
    is kept, with a warning naming the files. Drops the helper column ``_file``."""
    import warnings

    if not {"config_id", "device_name", "_file"} <= set(df.columns):
        return df.drop(columns=["_file"], errors="ignore")
    key = ["device_name", "config_id"]
    dup = df.duplicated(key, keep=False)
    if dup.any():
        files = sorted(df.loc[dup, "_file"].astype(str).unique())
        n = int(df[dup].groupby(key).ngroups)
        order = df.assign(_t=df.get("measured_at", pd.Series("", index=df.index)).astype(str))
        df = order.sort_values("_t").drop_duplicates(key, keep="last").drop(columns=["_t"]).sort_index()
        warnings.warn(f"dataset folder {str(folder)!r}: {n} configuration(s) measured in more than one file "
                      f"({', '.join(files)}); kept the newest row of each", UserWarning, stacklevel=3)
    return df.drop(columns=["_file"]).reset_index(drop=True)


def save_dataset(df: pd.DataFrame, path: str | Path) -> Path:
    """Validate and write a dataset (parquet or CSV by suffix), atomically (temp file + rename)."""
    p = Path(path)
    out = validate_dataset(df, source=str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    return write_frame(out, p)


def write_frame(df: pd.DataFrame, path: Path) -> Path:
    """Write a frame as parquet or CSV (by suffix) atomically (:func:`carb.files.write_atomic`)."""
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise DatasetError(f"dataset {str(path)!r}: unsupported format {path.suffix!r}; allowed: .parquet, .csv")
    if suffix == ".csv":
        return write_atomic(path, lambda tmp: df.to_csv(tmp, index=False))
    return write_atomic(path, lambda tmp: df.to_parquet(tmp, index=False))


def reference_dataset(name: str = "reference") -> pd.DataFrame:
    """A shipped real dataset by name (:data:`SHIPPED`): ``reference``, the CPU one
    (``carb/data/cpu-reference.parquet``), or ``h200`` (``carb/data/h200-reference.parquet``);
    provenance beside each."""
    if name not in SHIPPED:
        raise ConfigError(f"data: {name!r} is not a shipped dataset; allowed: {sorted(SHIPPED)}")
    path = SHIPPED[name]
    if not path.exists():
        raise DatasetError(f"the shipped dataset {str(path)!r} is missing from this install")
    return load_dataset(path)


def load_training_frame(path: str, device: str | None = None) -> tuple[pd.DataFrame, str]:
    """The ``ok`` rows of one device from a dataset path/name. Returns (frame, device name).

    Raises :class:`DatasetError` when the dataset has no measured target, no ok rows, or several
    devices and ``device`` is not given."""
    if str(path) == TIMM_ZOO:
        return _timm_zoo_frame(device)
    df = load_dataset(path)
    ok = ok_rows(df)
    if device is not None:
        known = sorted(ok["device_name"].dropna().astype(str).unique())
        ok = ok[ok["device_name"] == device].reset_index(drop=True)
        if known and not len(ok):
            raise ConfigError(f"data.device: {device!r} is not in dataset {path!r}; allowed: {', '.join(known)}")
    devices = sorted(ok["device_name"].dropna().astype(str).unique())
    if not devices:
        raise DatasetError(f"data {path!r}: no rows with status 'ok'" +
                           (f" for device {device!r}" if device else ""))
    if len(devices) > 1:
        raise ConfigError(f"data.device: dataset {path!r} holds devices {devices}; choose one with "
                          f"data.device=<name> (one model per device)")
    if not available_targets(ok):
        raise DatasetError(f"data {path!r}: no measured target; a dataset needs values in at least one "
                           f"of {list(TARGETS)}")
    kinds = sorted(ok.loc[ok["peak_memory_MB"].notna(), "memory_kind"].dropna().astype(str).unique())
    if len(kinds) > 1:
        raise DatasetError(f"data {path!r}: peak_memory_MB mixes memory_kind {kinds} (allocator peak and device-wide "
                           f"used memory are different quantities); import one kind (carb-import importer.memory=...)")
    return ok, devices[0]


def _timm_zoo_frame(device: str | None) -> tuple[pd.DataFrame, str]:
    """The training frame of one device of timm's published benchmark (:data:`TIMM_ZOO`: latency only;
    :func:`carb.data.importers.timm_zoo.as_zoo_dataset`). Without ``device``: one line naming the devices."""
    from carb.data.importers.timm_zoo import as_zoo_dataset, bench_devices, load_zoo_bench

    bench = load_zoo_bench()
    if device is None:
        raise ConfigError(f"data.device: data.path={TIMM_ZOO} holds one set of rows per device; choose one with "
                          f"data.device=<name>: {', '.join(bench_devices(bench))}")
    try:
        out = as_zoo_dataset(str(device), bench)
    except DatasetError as e:
        raise ConfigError(str(e)) from None
    return out, str(device)


class DatasetAppender:
    """Rewrites ``path`` atomically after each appended row (each new row is validated on its own; the
    file is a valid dataset after every row). Each append holds the file's lock
    (:func:`carb.files.locked`) and merges with what is on disk at that moment, so two collectors on
    one file never lose each other's rows; :attr:`frame` is the file's content after the last append."""

    def __init__(self, path: Path, existing: pd.DataFrame) -> None:
        self.path = path
        self.frame = existing.reset_index(drop=True)
        self.write_s = 0.0
        self._written = self._stamp() if len(self.frame) else None

    def _stamp(self) -> tuple[int, int] | None:
        """``(mtime ns, size)`` of the file, None when absent: tells whether another writer changed it."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def append(self, row: Mapping[str, Any]) -> None:
        """Validate ``row``, add it (replacing an earlier row of the same device and ``config_id``: a
        re-measured configuration supersedes its old row) and rewrite the file."""
        t = time.perf_counter()
        new = validate_dataset(pd.DataFrame([row]), source=f"{self.path} (new row)")
        with locked(self.path):
            if self.path.exists() and self._stamp() != self._written:  # someone else wrote it
                self.frame = load_dataset(self.path)
            frame = self.frame
            if len(frame):
                same = ((frame["config_id"] == new["config_id"].iloc[0])
                        & (frame["device_name"] == new["device_name"].iloc[0]))
                if same.any():
                    frame = frame[~same].reset_index(drop=True)
            self.frame = new if not len(frame) else pd.concat([frame, new], ignore_index=True)
            write_frame(self.frame, self.path)
            self._written = self._stamp()
        self.write_s += time.perf_counter() - t
