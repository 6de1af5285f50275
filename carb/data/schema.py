"""The dataset schema as code: one row = one configuration measured on one device.

Units are in the column names. ``MB`` means MiB (2**20 bytes), the unit torch reports.
FLOPs follow fvcore's convention: one multiply-add counts as ONE flop (``FlopCounterMode`` counts 2).

Columns by group (dtype in brackets):

identity
    ``config_id`` [str] stable hash of the architecture knobs (see :class:`carb.design.arch.ArchConfig`);
    ``device_name`` [str] human-readable; ``device_kind`` [str] cuda | cpu | import (a third-party device
    CARB knows nothing about; an imported GPU with a spec record, :mod:`carb.data.gpu_specs`, is cuda);
    ``device_id`` [str] short hash of the device fingerprint (two machines with the same name but
    different ISA flags, cores, hypervisor or GPU power limit get different ids; NA for data that
    predates fingerprints); ``device_fingerprint`` [str] the fingerprint as compact JSON (see
    :mod:`carb.measure.fingerprint`); ``protocol_id`` [str] hash of the measurement settings and
    ``device_id`` (resume refuses to mix protocols in one file);
    ``driver`` [str]; ``torch_version`` [str]; ``measured_at`` [str, ISO-8601 UTC];
    ``session_id`` [str] short hash of the operating system's boot (Linux ``boot_id``) the row was measured
    in: a device's speed moves between sessions, and a session is a boot and an unbroken window of
    ``measured_at`` (the Xeon VM ran 11-15 % apart in two windows of one boot three hours apart); NA for files
    written before it;
    ``status`` [str] ok | oom | error | contended (the CPU's contention guard found no clean window
    after ``guard.max_tries`` tries); ``error`` [str] message for non-ok rows;
    ``missing_reason`` [str] why a target or runtime feature is NaN ("energy_J: ...; avg_sm_util: ...");
    ``memory_kind`` [str] what ``peak_memory_MB`` is: ``allocator_peak`` (the framework allocator's
    peak over one forward, what CARB's meters measure) | ``device_used`` (device-wide used memory as
    NVML reports it, e.g. optimum-benchmark's ``max_global_vram``); NA where no memory is given;
    ``source`` [str] where the row came from (``carb-import`` writes the importer and file; NA for
    CARB's own measurements).
knobs
    ``block`` [str] basic | bottleneck; ``depth`` [int]; ``width_mult`` [float]; ``input_size`` [int]
    (H = W, pixels); ``batch_size`` [int]; ``precision`` [str] fp32 | fp16 | bf16;
    ``early_downsample`` [bool] ImageNet stem (True) or CIFAR stem (False); ``stages`` [str] blocks
    per stage, e.g. "2-2-2-2"; ``inner_mult`` [float] bottleneck inner width multiplier (torchvision's
    ``width_per_group / 64``; 1.0 for basic blocks; files written before it are read as 1.0).
static features
    ``flops`` [float] fvcore count for one forward of the whole batch; ``params`` [int];
    ``param_size_MB`` [float] parameter bytes at the precision / 2**20 (a zoo row's: parameters and
    buffers, :data:`carb.design.zoo_features.ZOO_STATIC`); ``total_activation_MB`` and
    ``max_activation_MB`` [float] sum / max of leaf-module output bytes (whole batch) / 2**20;
    ``flops_per_param_log`` [float] log10(flops / params); ``compute_intensity`` [float]
    flops / (param_size_MB + total_activation_MB), FLOPs per MB; ``n_conv`` [int] conv layers.
runtime features (NaN where the device cannot report them)
    ``avg_sm_util`` [float, %]; ``avg_mem_util`` [float, %]; ``gpu_temp_C`` [float, deg C];
    ``kernel_launches`` [float, count per forward].
targets (NaN where not measured, never 0)
    ``peak_memory_MB`` [float] max allocated over one forward after a peak reset;
    ``energy_J`` [float] energy per batch, J: ``energy_window_J / n_runs``;
    ``latency_ms`` [float] mean per batch.
measurement record
    ``n_runs``, ``n_warmup`` [int]; ``latency_std_ms`` [float, ms];
    ``energy_window_J`` [float, J] the energy counter's difference over the timed window of
    ``n_runs`` batches; ``window_s`` [float, s] length of that window; ``avg_power_W`` [float, W]
    ``energy_window_J / window_s``;
    ``locked_sm_clock_MHz``, ``locked_mem_clock_MHz`` [float, NaN when not locked];
    ``sm_clock_MHz``, ``mem_clock_MHz`` [float] clocks observed under load (GPU);
    ``throttle_reasons`` [str] NVML clock-throttle reasons seen under load (GPU);
    ``cpu_share`` [float, 0-1] CPU time the measuring threads got / (wall time x threads) over the
    accepted window (CPU); ``steal_share`` [float, 0-1] hypervisor steal time / wall time of all
    cores over that window; ``n_windows`` [int] timed windows tried (a contended one is repeated);
    ``threads`` [int] CPU threads (NaN on GPU rows is allowed); ``protocol_s`` [float] wall time of
    the whole measurement protocol of the row (warm-up, timed loop, utilization window, cool-down).
repeatability (the collector's later passes, ``measure.repeat``; see :mod:`carb.data.repeatability`)
    ``latency_passes`` [float, count] passes over the rows whose timed windows ``latency_ms`` is the mean of
    (each pass in another order, so a row's windows are separated by other configurations' work);
    ``latency_repeat_spread`` [float, fraction] ``(max - min) / mean`` of those passes' latencies (0.05 = 5 %),
    NaN with the reason in ``missing_reason`` where fewer than two passes were measured;
    ``peak_memory_repeat_spread`` [float, fraction] the same of those passes' peak memory (``peak_memory_MB``
    stays the first pass's), NaN with the reason where fewer than two passes gave a peak memory. Files written
    before them (and rows of other collectors) read as NaN: not measured.

Files written before per-batch energy (``duration_s``, energy per timed window) are converted on
loading by :func:`upgrade_legacy` (and it says so once per file).

"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from carb.design.arch import KNOB_DEFAULTS, KNOBS, PRECISIONS, to_bool
from carb.design.identity import INNER, is_zoo, knob_type, text_categories
from carb.design.features import STATIC_FEATURES
from carb.errors import DatasetError

#: Targets in cascade order (memory -> energy -> latency).
TARGETS: tuple[str, ...] = ("peak_memory_MB", "energy_J", "latency_ms")
IDENTITY: tuple[str, ...] = ("config_id", "device_name", "device_kind", "device_id", "device_fingerprint",
                             "protocol_id", "driver", "torch_version", "measured_at", "status", "error",
                             "missing_reason", "memory_kind", "source", "session_id")
#: Identity columns added after files were written: read as NA where a file lacks them.
ADDED_IDENTITY: tuple[str, ...] = ("session_id",)
RUNTIME_FEATURES: tuple[str, ...] = ("avg_sm_util", "avg_mem_util", "gpu_temp_C", "kernel_launches")
RECORD: tuple[str, ...] = ("n_runs", "n_warmup", "latency_std_ms", "energy_window_J", "window_s", "avg_power_W",
                           "locked_sm_clock_MHz", "locked_mem_clock_MHz", "sm_clock_MHz", "mem_clock_MHz",
                           "throttle_reasons", "cpu_share", "steal_share", "n_windows", "threads",
                           "protocol_s")
#: Run-to-run repeatability of the latency and the peak memory (the collector's later passes;
#: :mod:`carb.data.repeatability`).
REPEATABILITY: tuple[str, ...] = ("latency_passes", "latency_repeat_spread", "peak_memory_repeat_spread")
#: Interaction features of the paper's Section 5.1 (functions of runtime features; see carb.model.encoding).
INTERACTION_FEATURES: tuple[str, ...] = ("batch_x_sm", "flops_x_sm", "act_x_mem", "util_product")
_STR, _INT, _FLOAT, _BOOL = "string", "int64", "float64", "bool"
#: Column dtype of each knob (names and order from :data:`carb.design.arch.KNOBS`, types from
#: :func:`carb.design.identity.knob_type`).
_KNOB_DTYPES: dict[str, str] = {k: {"str": _STR, "int": _INT, "float": _FLOAT, "bool": _BOOL}[knob_type(k)]
                                for k in KNOBS}
SCHEMA: dict[str, str] = {
    **{c: _STR for c in IDENTITY},
    **{k: _KNOB_DTYPES[k] for k in KNOBS},
    **{c: (_INT if c in ("params", "n_conv") else _FLOAT) for c in STATIC_FEATURES},
    **{c: _FLOAT for c in RUNTIME_FEATURES},
    **{c: _FLOAT for c in TARGETS},
    **{c: (_STR if c == "throttle_reasons" else _FLOAT) for c in RECORD},
    **{c: _FLOAT for c in REPEATABILITY},
}
COLUMNS: tuple[str, ...] = tuple(SCHEMA)
STATUSES = ("ok", "oom", "error", "contended")
#: Allowed values of ``memory_kind`` (see the module docstring).
MEMORY_KINDS = ("allocator_peak", "device_used")
#: Legacy column names -> current ones (see :func:`upgrade_legacy`).
RENAMED: dict[str, str] = {"duration_s": "window_s"}
_ANNOUNCED: set[str] = set()


def device_slug(device_name: str) -> str:
    """Registry-friendly slug of a device name: 'NVIDIA H200' -> 'nvidia-h200'."""
    s = re.sub(r"[^a-z0-9]+", "-", str(device_name).lower()).strip("-")
    return s or "unknown"


def device_ids(df: pd.DataFrame) -> list[str]:
    """The distinct ``device_id`` values of a frame (sorted; NA skipped; [] for legacy data)."""
    if "device_id" not in df.columns:
        return []
    return sorted(df["device_id"].dropna().astype(str).unique())


def model_name(df: pd.DataFrame) -> str:
    """The registered model name for a single-device frame: ``carb-<device-slug>-<device_id>``
    (``carb-<device-slug>`` for data without a fingerprint; an id that ends in ``-<device-slug>``, as timm's
    imported ``timm-rtx-4090``, without it: ``carb-rtx-4090-timm-zoo``), with ``-zoo`` for zoo rows (a ``model_name``
    column, no ResNet ``block``): a zoo model takes networks, a ResNet model knobs, so the two kinds of one
    device are two registered models. Two machines with the same name but a different fingerprint get
    different models. Raises :class:`DatasetError` for several devices."""
    names = sorted(df["device_name"].dropna().astype(str).unique())
    ids = device_ids(df)
    if len(names) != 1 or len(ids) > 1:
        raise DatasetError(f"dataset holds several devices (names {names}, device_id {ids}); one model per device")
    fps = df["device_fingerprint"].dropna().astype(str) if "device_fingerprint" in df.columns else []
    spec = spec_model_name(fps.iloc[0]) if len(fps) else None
    zoo = "-zoo" if is_zoo(df) else ""
    slug = device_slug(names[0])
    ident = ids[0].removesuffix(f"-{slug}") or ids[0] if ids else ""   # timm's 'timm-rtx-4090': no device twice
    return (spec or f"carb-{slug}" + (f"-{ident}" if ident else "")) + zoo


def spec_model_name(fingerprint: str | None) -> str | None:
    """The registered model name of a GPU described by a spec record (rows imported under one, or a zero-shot
    model): ``carb-<record slug>-<id of the record's own fingerprint>``, the same whatever name the rows or the
    ``spec=`` gave the GPU (``RTX 4090`` or ``GeForce RTX 4090``: one device, one model). None for any other
    fingerprint (a measured device keeps ``carb-<device slug>-<device_id>``) or a record no longer in the table."""
    import json

    from carb.data.gpu_specs import find_spec, fingerprint_id, gpu_spec, spec_fingerprint

    try:
        fp = json.loads(fingerprint) if fingerprint else None
    except (TypeError, ValueError):
        return None
    if not isinstance(fp, dict) or fp.get("kind") != "cuda" or not fp.get("spec") or \
            fp.get("clock_policy") != "spec sheet" or find_spec(fp["spec"]) is None:
        return None
    rec = gpu_spec(str(fp["spec"]), field="spec")
    return f"carb-{device_slug(rec['name'])}-{fingerprint_id(spec_fingerprint(rec))}"


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


def upgrade_legacy(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Convert a frame written before per-batch energy and fingerprints to the current schema.

    A legacy file has ``duration_s`` (the timed window, s) and ``energy_J`` = energy of the whole
    window of ``n_runs`` batches. Converted: ``window_s = duration_s``, ``energy_window_J`` = old
    ``energy_J``, ``energy_J = energy_window_J / n_runs`` (J per batch); columns added since then
    (``device_id``, ``device_fingerprint``, ``protocol_id``, clocks under load, guard columns) are
    filled as missing. Says so once per ``source`` (a :class:`UserWarning`). Current frames are
    returned unchanged."""
    legacy = [c for c in RENAMED if c in df.columns and RENAMED[c] not in df.columns]
    if not legacy:
        return df
    out = df.rename(columns={c: RENAMED[c] for c in legacy})
    if "energy_window_J" not in out.columns:
        e = pd.to_numeric(out.get("energy_J"), errors="coerce") if "energy_J" in out.columns else np.nan
        n = pd.to_numeric(out.get("n_runs"), errors="coerce") if "n_runs" in out.columns else np.nan
        out["energy_window_J"] = e
        if "energy_J" in out.columns:
            out["energy_J"] = e / n
    for c in COLUMNS:
        if c not in out.columns:
            out[c] = pd.Series(pd.NA if SCHEMA[c] == _STR else np.nan, index=out.index,
                               dtype=SCHEMA[c] if SCHEMA[c] != _INT else _FLOAT)
    if source not in _ANNOUNCED:
        _ANNOUNCED.add(source)
        import warnings

        warnings.warn(f"{source}: written before per-batch energy; converted on loading (energy_J = "
                      f"energy_window_J / n_runs, duration_s -> window_s, no device fingerprint)",
                      UserWarning, stacklevel=3)
    return out


def fill_added_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Fill the columns added to the schema after files were written: ``inner_mult`` (missing or NaN:
    1.0, the default knob), ``memory_kind`` (missing or NA where ``peak_memory_MB`` is given:
    ``allocator_peak``, what CARB's meters measure), ``source`` and ``session_id`` (missing: NA), the
    repeatability columns (:data:`REPEATABILITY`, missing: NaN, not measured). Returns a new frame (or ``df``
    itself when nothing is missing)."""
    todo = (any(c not in df.columns or df[c].isna().any() for c in KNOB_DEFAULTS)
            or "memory_kind" not in df.columns or any(c not in df.columns for c in ("source", *ADDED_IDENTITY))
            or any(c not in df.columns for c in REPEATABILITY)
            or ("peak_memory_MB" in df.columns and (df["memory_kind"].isna() & df["peak_memory_MB"].notna()).any()))
    if not todo:
        return df
    out = df.copy()
    for c, default in KNOB_DEFAULTS.items():   # knobs added after files were written (the inner width: 1.0)
        out[c] = default if c not in out.columns else out[c].fillna(default)
    kind = out["memory_kind"].astype("string") if "memory_kind" in out.columns else \
        pd.Series(pd.NA, index=out.index, dtype="string")
    if "peak_memory_MB" in out.columns:
        given = pd.to_numeric(out["peak_memory_MB"], errors="coerce").notna()
        kind = kind.mask(kind.isna() & given, "allocator_peak")
    out["memory_kind"] = kind
    for c in ("source", *ADDED_IDENTITY):
        if c not in out.columns:
            out[c] = pd.Series(pd.NA, index=out.index, dtype="string")
    for c in REPEATABILITY:
        if c not in out.columns:
            out[c] = np.nan
    return out


def validate_dataset(df: pd.DataFrame, source: str = "dataset") -> pd.DataFrame:
    """Check a frame against the schema and return it with canonical dtypes.

    Raises :class:`DatasetError` naming the column and the first offending rows for: a missing column,
    a value that does not fit the column's dtype, an unknown status/block/precision, an infinite or
    non-positive target where a value is given, or a duplicate ``config_id`` on one device.
    """
    df = fill_added_columns(upgrade_legacy(df, source))
    out = coerce_columns(df, SCHEMA, source, "carb.data.schema.COLUMNS")
    for c, allowed in (("status", STATUSES), *text_categories().items(), ("precision", PRECISIONS)):
        bad = (~out[c].isin(allowed)).to_numpy()
        if bad.any():
            raise DatasetError(f"{source}: column {c!r} allows {list(allowed)}; other values in rows "
                               f"{_first_rows(bad)}")
    bad = ~(out[INNER] > 0).to_numpy()
    if bad.any():
        raise DatasetError(f"{source}: knob {INNER!r} must be a positive number; bad values in rows "
                           f"{_first_rows(bad)}")
    check_targets(out, source)
    extra = [c for c in out.columns if c not in SCHEMA]
    return out[list(COLUMNS) + extra].reset_index(drop=True)


def coerce_columns(df: pd.DataFrame, schema: dict[str, str], source: str, name: str) -> pd.DataFrame:
    """A copy of ``df`` with every column of ``schema`` (``{column: dtype}``) in its dtype; raises
    :class:`DatasetError` naming the column and the first offending rows (``name``: the schema's name in
    the message)."""
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise DatasetError(f"{source}: missing column(s) {missing}; a dataset needs all of {name}")
    out = df.copy()
    for c, dt in schema.items():
        col = out[c]
        if dt == _STR:
            out[c] = col.astype("string")
        elif dt == _BOOL:
            if col.dtype == bool:
                continue
            mapped = col.map(to_bool)
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
    return out


def check_targets(out: pd.DataFrame, source: str) -> None:
    """The checks every dataset shares: ``memory_kind`` values, finite positive targets where given, one
    row per device and ``config_id`` (:class:`DatasetError` naming the rows)."""
    bad = (out["memory_kind"].notna() & ~out["memory_kind"].isin(MEMORY_KINDS)).to_numpy()
    if bad.any():
        raise DatasetError(f"{source}: column 'memory_kind' allows {list(MEMORY_KINDS)}; other values in rows "
                           f"{_first_rows(bad)}")
    for c in TARGETS:
        bad = np.isinf(out[c].to_numpy(float))
        if bad.any():
            raise DatasetError(f"{source}: target {c!r} must be a finite number (missing is NaN); infinite in rows "
                               f"{_first_rows(bad)}")
        bad = (out[c] <= 0).fillna(False).to_numpy()
        if bad.any():
            raise DatasetError(f"{source}: target {c!r} must be positive where given (missing is NaN, "
                               f"never 0); non-positive in rows {_first_rows(bad)}")
    dup = out.duplicated(["device_name", "config_id"], keep="first").to_numpy()
    if dup.any():
        raise DatasetError(f"{source}: duplicate config_id on one device in rows {_first_rows(dup)}")


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows with ``status == 'ok'`` (index reset)."""
    return df[df["status"] == "ok"].reset_index(drop=True)


def available_targets(df: pd.DataFrame) -> list[str]:
    """Targets with at least one measured (non-NaN) value among ok rows, in cascade order."""
    ok = ok_rows(df) if "status" in df.columns else df
    return [t for t in TARGETS if t in ok.columns and ok[t].notna().any()]
