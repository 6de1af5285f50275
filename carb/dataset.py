"""The dataset schema as code: one row = one configuration measured on one device.

Units are in the column names. ``MB`` means MiB (2**20 bytes), the unit torch reports.
FLOPs follow fvcore's convention: one multiply-add counts as ONE flop (``FlopCounterMode`` counts 2).

Columns by group (dtype in brackets):

identity
    ``config_id`` [str] stable hash of the architecture knobs (see :class:`carb.space.ArchConfig`);
    ``device_name`` [str]; ``device_kind`` [str] cuda | cpu | import (third-party table);
    ``driver`` [str]; ``torch_version`` [str]; ``measured_at`` [str, ISO-8601 UTC];
    ``status`` [str] ok | oom | error; ``error`` [str] message for non-ok rows;
    ``missing_reason`` [str] why a target or runtime feature is NaN ("energy_J: ...; avg_sm_util: ...").
knobs
    ``block`` [str] basic | bottleneck; ``depth`` [int]; ``width_mult`` [float]; ``input_size`` [int]
    (H = W, pixels); ``batch_size`` [int]; ``precision`` [str] fp32 | fp16 | bf16;
    ``early_downsample`` [bool] ImageNet stem (True) or CIFAR stem (False); ``stages`` [str] blocks
    per stage, e.g. "2-2-2-2".
static features
    ``flops`` [float] fvcore count for one forward of the whole batch; ``params`` [int];
    ``param_size_MB`` [float] parameter bytes at the precision / 2**20; ``total_activation_MB`` and
    ``max_activation_MB`` [float] sum / max of leaf-module output bytes (whole batch) / 2**20;
    ``flops_per_param_log`` [float] log10(flops / params); ``compute_intensity`` [float]
    flops / (param_size_MB + total_activation_MB), FLOPs per MB; ``n_conv`` [int] conv layers.
runtime features (NaN where the device cannot report them)
    ``avg_sm_util`` [float, %]; ``avg_mem_util`` [float, %]; ``gpu_temp_C`` [float, deg C];
    ``kernel_launches`` [float, count per forward].
targets (NaN where not measured, never 0)
    ``peak_memory_MB`` [float] max allocated over one forward after a peak reset;
    ``energy_J`` [float] energy-counter difference over the timed loop of ``n_runs`` batches;
    ``latency_ms`` [float] mean per batch.
measurement record
    ``n_runs``, ``n_warmup`` [int]; ``latency_std_ms``, ``avg_power_W`` [float, W];
    ``locked_sm_clock_MHz``, ``locked_mem_clock_MHz`` [float, NaN when not locked];
    ``duration_s`` [float] length of the timed loop; ``threads`` [int] CPU threads (NaN on GPU rows
    is allowed); ``protocol_s`` [float] wall time of the whole measurement protocol of the row
    (warm-up, timed loop, utilization window, cool-down).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from carb.errors import DatasetError

#: Targets in cascade order (memory -> energy -> latency).
TARGETS: tuple[str, ...] = ("peak_memory_MB", "energy_J", "latency_ms")
IDENTITY: tuple[str, ...] = ("config_id", "device_name", "device_kind", "driver", "torch_version",
                             "measured_at", "status", "error", "missing_reason")
KNOBS: tuple[str, ...] = ("block", "depth", "width_mult", "input_size", "batch_size", "precision",
                          "early_downsample", "stages")
STATIC_FEATURES: tuple[str, ...] = ("flops", "params", "param_size_MB", "total_activation_MB",
                                    "max_activation_MB", "flops_per_param_log", "compute_intensity",
                                    "n_conv")
RUNTIME_FEATURES: tuple[str, ...] = ("avg_sm_util", "avg_mem_util", "gpu_temp_C", "kernel_launches")
RECORD: tuple[str, ...] = ("n_runs", "n_warmup", "latency_std_ms", "avg_power_W", "locked_sm_clock_MHz",
                           "locked_mem_clock_MHz", "duration_s", "threads", "protocol_s")
#: Interaction features of the paper's Section 5.1 (functions of runtime features; see carb.features).
INTERACTION_FEATURES: tuple[str, ...] = ("batch_x_sm", "flops_x_sm", "act_x_mem", "util_product")

_STR, _INT, _FLOAT, _BOOL = "string", "int64", "float64", "bool"
SCHEMA: dict[str, str] = {
    **{c: _STR for c in IDENTITY},
    "block": _STR, "depth": _INT, "width_mult": _FLOAT, "input_size": _INT, "batch_size": _INT,
    "precision": _STR, "early_downsample": _BOOL, "stages": _STR,
    "flops": _FLOAT, "params": _INT, "param_size_MB": _FLOAT, "total_activation_MB": _FLOAT,
    "max_activation_MB": _FLOAT, "flops_per_param_log": _FLOAT, "compute_intensity": _FLOAT,
    "n_conv": _INT,
    **{c: _FLOAT for c in RUNTIME_FEATURES},
    **{c: _FLOAT for c in TARGETS},
    "n_runs": _FLOAT, "n_warmup": _FLOAT, "latency_std_ms": _FLOAT, "avg_power_W": _FLOAT,
    "locked_sm_clock_MHz": _FLOAT, "locked_mem_clock_MHz": _FLOAT, "duration_s": _FLOAT,
    "threads": _FLOAT, "protocol_s": _FLOAT,
}
COLUMNS: tuple[str, ...] = tuple(SCHEMA)
STATUSES = ("ok", "oom", "error")

#: Batch tiers (paper Section 5.2: small <= 4, medium <= 16, large <= 128; beyond that: xlarge).
BATCH_TIERS: tuple[tuple[str, int], ...] = (("small", 4), ("medium", 16), ("large", 128),
                                            ("xlarge", 2**62))
#: Depth tiers: shallow <= 20 layers, mid <= 56, deep beyond.
DEPTH_TIERS: tuple[tuple[str, int], ...] = (("shallow", 20), ("mid", 56), ("deep", 2**62))
#: Hardware-stress threshold (%, SM or memory utilization), paper Section 5.2.
STRESS_UTIL_PCT = 65.0
#: Low-batch regime (paper: bs <= 8), used by correctors and leave-one-batch-tier-out.
LOW_BATCH_MAX = 8

_REFERENCE = Path(__file__).resolve().parent / "data" / "cpu-reference.parquet"


# --------------------------------------------------------------------------- tiers and regimes

def _tier(values: Iterable[float], tiers: Sequence[tuple[str, int]]) -> np.ndarray:
    v = np.asarray(list(values) if not isinstance(values, (np.ndarray, pd.Series)) else values,
                   dtype=float)
    edges = np.array([t[1] for t in tiers], dtype=float)
    names = np.array([t[0] for t in tiers], dtype=object)
    return names[np.searchsorted(edges, v, side="left")]


def batch_tier(batch_size) -> np.ndarray | str:
    """Batch tier name(s): small (<=4), medium (<=16), large (<=128), xlarge (>128)."""
    if np.isscalar(batch_size):
        return str(_tier([batch_size], BATCH_TIERS)[0])
    return _tier(batch_size, BATCH_TIERS)


def depth_tier(depth) -> np.ndarray | str:
    """Depth tier name(s): shallow (<=20), mid (<=56), deep (>56)."""
    if np.isscalar(depth):
        return str(_tier([depth], DEPTH_TIERS)[0])
    return _tier(depth, DEPTH_TIERS)


def hardware_stress(df: pd.DataFrame) -> np.ndarray:
    """Boolean array: SM or memory utilization above 65 % (NaN utilization counts as not stressed)."""
    sm = pd.to_numeric(df.get("avg_sm_util", pd.Series(np.nan, index=df.index)), errors="coerce")
    mem = pd.to_numeric(df.get("avg_mem_util", pd.Series(np.nan, index=df.index)), errors="coerce")
    return ((sm > STRESS_UTIL_PCT) | (mem > STRESS_UTIL_PCT)).to_numpy()


def low_batch(df: pd.DataFrame) -> np.ndarray:
    """Boolean array: batch_size <= 8."""
    return (df["batch_size"].to_numpy() <= LOW_BATCH_MAX)


def strata_key(df: pd.DataFrame) -> np.ndarray:
    """Joint stratification key: batch tier x hardware-stress flag x depth tier."""
    stress = np.where(hardware_stress(df), "stress", "calm")
    return np.array([f"{b}|{s}|{d}" for b, s, d in
                     zip(batch_tier(df["batch_size"]), stress, depth_tier(df["depth"]))], dtype=object)


def device_slug(device_name: str) -> str:
    """Registry-friendly slug of a device name: 'NVIDIA H200' -> 'nvidia-h200'."""
    s = re.sub(r"[^a-z0-9]+", "-", str(device_name).lower()).strip("-")
    return s or "unknown"


# --------------------------------------------------------------------------- split

@dataclass(frozen=True)
class Split:
    """Row-index partition of a dataset (positions into the frame passed to :func:`split_dataset`)."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray

    def frames(self, df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        return (df.iloc[self.train].reset_index(drop=True), df.iloc[self.val].reset_index(drop=True),
                df.iloc[self.test].reset_index(drop=True))


def split_dataset(df: pd.DataFrame, seed: int = 0, fractions: tuple[float, float, float] = (0.7, 0.15, 0.15),
                  min_rows: int = 20) -> Split:
    """Seeded stratified train/val/test split on :func:`strata_key`.

    Within each stratum rows are shuffled with ``seed`` and cut at the fractions (rounded), so every
    regime is represented proportionally; strata with fewer than 4 rows are pooled by batch tier, and
    what is still below 4 rows is pooled together. Raises :class:`DatasetError` when the frame has fewer
    than ``min_rows`` rows or the validation/test part would be empty.
    """
    n = len(df)
    if n < min_rows:
        raise DatasetError(f"too few rows for a stratified {fractions} split: {n} rows, need at least "
                           f"{min_rows}")
    if abs(sum(fractions) - 1.0) > 1e-9 or min(fractions) < 0:
        raise DatasetError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    key = pd.Series(strata_key(df))
    coarse = pd.Series(batch_tier(df["batch_size"]))
    counts = key.map(key.value_counts())
    key = key.where(counts >= 4, coarse)
    counts = key.map(key.value_counts())
    key = key.where(counts >= 4, "pooled")
    rng = np.random.default_rng(seed)
    parts: tuple[list[int], list[int], list[int]] = ([], [], [])
    for k in sorted(key.unique()):
        idx = np.flatnonzero((key == k).to_numpy())
        rng.shuffle(idx)
        m = len(idx)
        n_val = int(round(fractions[1] * m))
        n_test = int(round(fractions[2] * m))
        n_train = m - n_val - n_test
        parts[0].extend(idx[:n_train])
        parts[1].extend(idx[n_train:n_train + n_val])
        parts[2].extend(idx[n_train + n_val:])
    tr, va, te = (np.sort(np.array(p, dtype=int)) for p in parts)
    if len(va) == 0 or len(te) == 0:
        raise DatasetError(f"too few rows per stratum for a {fractions} split: validation has {len(va)}, "
                           f"test {len(te)} rows")
    return Split(tr, va, te)


# --------------------------------------------------------------------------- validation and IO

def _first_rows(mask: np.ndarray, k: int = 5) -> str:
    rows = np.flatnonzero(mask)[:k].tolist()
    return ", ".join(map(str, rows))


def empty_frame() -> pd.DataFrame:
    """An empty frame with the schema's columns and dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=SCHEMA[c]) for c in COLUMNS})


def conform(df: pd.DataFrame, fill_missing: Iterable[str] = ()) -> pd.DataFrame:
    """Add the columns named in ``fill_missing`` (as NaN/NA) and order columns as the schema does
    (extra columns are kept at the end). Used by importers of third-party tables."""
    df = df.copy()
    for c in fill_missing:
        if c not in df.columns:
            df[c] = pd.Series(pd.NA if SCHEMA.get(c) == _STR else np.nan, index=df.index,
                              dtype=SCHEMA.get(c, _FLOAT) if SCHEMA.get(c) != _INT else _FLOAT)
    extra = [c for c in df.columns if c not in SCHEMA]
    return df[[c for c in COLUMNS if c in df.columns] + extra]


def validate_dataset(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Check a frame against the schema and return it with canonical dtypes.

    Raises :class:`DatasetError` naming the column and the first offending rows for: a missing column,
    a value that does not fit the column's dtype, an unknown status/block/precision, a non-positive
    target where a value is given, or a duplicate ``config_id`` on one device.
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"{source}: missing column(s) {missing}; a dataset needs all of "
                           f"carb.dataset.COLUMNS")
    out = df.copy()
    for c, dt in SCHEMA.items():
        col = out[c]
        if dt == _STR:
            out[c] = col.astype("string")
        elif dt == _BOOL:
            if col.dtype == bool:
                continue
            mapped = col.map(lambda v: {"true": True, "false": False, "1": True, "0": False}.get(
                str(v).strip().lower(), None) if not isinstance(v, (bool, np.bool_)) else bool(v))
            bad = mapped.isna().to_numpy()
            if bad.any():
                raise DatasetError(f"{source}: column {c!r} must be boolean (true/false); bad values in "
                                   f"rows {_first_rows(bad)}")
            out[c] = mapped.astype(bool)
        else:
            num = pd.to_numeric(col, errors="coerce")
            bad = (num.isna() & col.notna()).to_numpy()
            if bad.any():
                raise DatasetError(f"{source}: column {c!r} must be numeric ({dt}); non-numeric values "
                                   f"in rows {_first_rows(bad)}")
            if dt == _INT:
                if num.isna().any():
                    raise DatasetError(f"{source}: column {c!r} must be an integer with no missing "
                                       f"values; missing in rows {_first_rows(num.isna().to_numpy())}")
                if (num != np.round(num)).any():
                    raise DatasetError(f"{source}: column {c!r} must be an integer; fractional values "
                                       f"in rows {_first_rows((num != np.round(num)).to_numpy())}")
                out[c] = num.astype("int64")
            else:
                out[c] = num.astype("float64")
    for c, allowed in (("status", STATUSES), ("block", ("basic", "bottleneck")),
                       ("precision", ("fp32", "fp16", "bf16"))):
        bad = (~out[c].isin(allowed)).to_numpy()
        if bad.any():
            raise DatasetError(f"{source}: column {c!r} allows {list(allowed)}; other values in rows "
                               f"{_first_rows(bad)}")
    for c in TARGETS:
        bad = (out[c] <= 0).fillna(False).to_numpy()
        if bad.any():
            raise DatasetError(f"{source}: target {c!r} must be positive where given (missing is NaN, "
                               f"never 0); non-positive in rows {_first_rows(bad)}")
    dup = out.duplicated(["device_name", "config_id"], keep="first").to_numpy()
    if dup.any():
        raise DatasetError(f"{source}: duplicate config_id on one device in rows {_first_rows(dup)}")
    extra = [c for c in out.columns if c not in SCHEMA]
    return out[list(COLUMNS) + extra].reset_index(drop=True)


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
    """Map a named dataset ('reference') or a path to a file or folder path."""
    if str(path_or_name) in ("reference", "cpu-reference"):
        return _REFERENCE
    return Path(path_or_name)


def load_dataset(path_or_folder: str | Path, validate: bool = True) -> pd.DataFrame:
    """Load a dataset from a parquet or CSV file, a folder of shard files (all ``*.parquet`` and
    ``*.csv`` inside, read as one dataset), or the name ``reference``; validate it against the schema."""
    p = resolve_path(path_or_folder)
    if not p.exists():
        raise DatasetError(f"dataset {str(p)!r} does not exist (give a .parquet/.csv file, a folder of "
                           f"shards, or 'reference')")
    if p.is_dir():
        files = sorted([*p.glob("*.parquet"), *p.glob("*.csv")])
        if not files:
            raise DatasetError(f"dataset folder {str(p)!r} holds no .parquet or .csv files")
        frames = [_read_one(f) for f in files]
        df = pd.concat([f for f in frames if len(f)] or frames[:1], ignore_index=True)
    else:
        df = _read_one(p)
    return validate_dataset(df, source=str(p)) if validate else df


def save_dataset(df: pd.DataFrame, path: str | Path) -> Path:
    """Validate and write a dataset (parquet or CSV by suffix), atomically (temp file + rename)."""
    p = Path(path)
    out = validate_dataset(df, source=str(p))
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    if p.suffix.lower() == ".csv":
        out.to_csv(tmp, index=False)
    elif p.suffix.lower() == ".parquet":
        out.to_parquet(tmp, index=False)
    else:
        raise DatasetError(f"dataset {str(p)!r}: unsupported format {p.suffix!r}; allowed: .parquet, .csv")
    tmp.replace(p)
    return p


def reference_dataset() -> pd.DataFrame:
    """The shipped real CPU dataset (``carb/data/cpu-reference.parquet``; provenance beside it)."""
    if not _REFERENCE.exists():
        raise DatasetError(f"the shipped reference dataset {str(_REFERENCE)!r} is missing from this install")
    return load_dataset(_REFERENCE)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with ``status == 'ok'`` (index reset)."""
    return df[df["status"] == "ok"].reset_index(drop=True)


def available_targets(df: pd.DataFrame) -> list[str]:
    """Targets with at least one measured (non-NaN) value among ok rows, in cascade order."""
    ok = ok_rows(df) if "status" in df.columns else df
    return [t for t in TARGETS if t in ok.columns and ok[t].notna().any()]


def telemetry_medians(df: pd.DataFrame, columns: Sequence[str] = RUNTIME_FEATURES) -> dict[str, dict[str, float]]:
    """Median of each runtime feature per batch tier (``{"small": {"avg_sm_util": 41.0, ...}, ...,
    "all": {...}}``); NaN where the device never reported it. Screening fixes telemetry to these."""
    tiers = batch_tier(df["batch_size"]) if len(df) else np.array([], dtype=object)
    out: dict[str, dict[str, float]] = {}
    overall = {c: float(pd.to_numeric(df[c], errors="coerce").median()) if c in df.columns and len(df)
               else float("nan") for c in columns}
    out["all"] = overall
    for name, _ in BATCH_TIERS:
        sub = df[tiers == name] if len(df) else df
        out[name] = {c: (float(pd.to_numeric(sub[c], errors="coerce").median())
                         if len(sub) and c in sub.columns and sub[c].notna().any() else overall[c])
                     for c in columns}
    return out
