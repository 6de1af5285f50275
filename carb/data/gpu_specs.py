"""GPU spec records: the public spec-sheet figures of the GPUs in the shipped and importable data and the
common ones (``carb/data/gpu_specs.csv``, one row per GPU, each with its ``source``).

Columns (:data:`SPEC_FIELDS` with their units; peaks are **dense**, at the boost clock, no sparsity):

- ``name`` [str] the record's name (``importer.spec=<name>``); ``aliases`` [str] other spellings,
  ``;``-separated (torch's / nvidia-smi's device names, the timm benchmark's ``gpu`` column);
  ``architecture`` [str].
- ``compute_capability`` [str, "major.minor"], ``sms`` [count] streaming multiprocessors.
- ``fp32_TFLOPS`` / ``fp16_TFLOPS`` [TFLOP/s] without tensor cores (CUDA cores);
  ``tf32_tensor_TFLOPS``, ``fp16_tensor_TFLOPS``, ``bf16_tensor_TFLOPS`` [TFLOP/s] on tensor cores with
  FP32 accumulate (what PyTorch's autocast convolutions use; GeForce cards run it at half the FP16-accumulate
  rate), ``fp16_tensor_fp16acc_TFLOPS`` the FP16-accumulate headline figure; empty where the GPU has no
  such unit (no tensor cores before compute capability 7.0, no TF32/BF16 before 8.0).
- ``memory_bandwidth_GBps`` [GB/s, 10**9 B/s], ``l2_MB`` [MB as the sheet gives it], ``memory_GB`` [GB
  as marketed], ``power_limit_W`` [W, board power limit].
- ``source`` [str] the public spec sheet / whitepaper (URL) the figures come from; ``checked`` [str] a
  public page the figures were cross-checked against when the table was written (empty: none found);
  ``unverified`` [str] the ``;``-separated fields that could not be confirmed against any public page then
  (transcribed from the source, or derived: cores x 2 x boost clock), to be read with care.

:func:`find_spec` matches a device name to a record (case, ``NVIDIA``/``GeForce``/``Tesla`` and punctuation
ignored); :func:`gpu_spec` returns a record by name, or one-line :class:`~carb.errors.ConfigError` naming
the allowed names; :func:`spec_fingerprint` is the device description imported GPU rows carry in
``device_fingerprint`` (``kind = cuda``, ``compute_capability``, ``multiprocessors``, ``power_limit_W``:
the keys the CUDA physics prior reads, as a measured fingerprint has them, plus the peaks).
"""
from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from carb.errors import ConfigError, DatasetError
from carb.resources import DATA_DIR

#: The shipped table.
GPU_SPECS = DATA_DIR / "gpu_specs.csv"
#: Numeric fields -> unit.
SPEC_FIELDS: dict[str, str] = {
    "sms": "count", "fp32_TFLOPS": "TFLOP/s", "fp16_TFLOPS": "TFLOP/s", "tf32_tensor_TFLOPS": "TFLOP/s",
    "fp16_tensor_TFLOPS": "TFLOP/s", "fp16_tensor_fp16acc_TFLOPS": "TFLOP/s", "bf16_tensor_TFLOPS": "TFLOP/s",
    "memory_bandwidth_GBps": "GB/s", "l2_MB": "MB", "memory_GB": "GB", "power_limit_W": "W",
}
#: Optional numeric fields -> unit (read when the table has the column; empty: unknown). ``static_W``: the
#: board's static power while active (W), the floor of its average power (:mod:`carb.model.power`), with
#: ``static_source`` saying where it comes from; empty where no public or measured figure exists (the
#: zero-shot energy then derives it as a stated fraction of the power limit, ``zero_shot.power``).
OPTIONAL_FIELDS: dict[str, str] = {"static_W": "W"}
#: Fields the CUDA physics prior needs from a record (tensor cores from the compute capability, the power
#: cap, the rates a transfer re-evaluates): a record lacking one is refused (one line).
PRIOR_FIELDS: tuple[str, ...] = ("compute_capability", "sms", "fp32_TFLOPS", "memory_bandwidth_GBps",
                                 "power_limit_W")
#: Peak columns that bound one precision's rate (TFLOP/s), for the plausibility checks.
PRECISION_PEAKS: dict[str, tuple[str, ...]] = {
    "fp32": ("fp32_TFLOPS", "tf32_tensor_TFLOPS"),
    "fp16": ("fp16_TFLOPS", "fp16_tensor_TFLOPS", "fp16_tensor_fp16acc_TFLOPS"),
    "bf16": ("fp32_TFLOPS", "bf16_tensor_TFLOPS"),
}
_TEXT = ("name", "aliases", "architecture", "compute_capability", "source", "checked", "unverified")
#: Optional text columns (read as text when present).
_OPTIONAL_TEXT = ("static_source",)
_NOISE = re.compile(r"\b(nvidia|geforce|tesla)\b")


def _keys(name: str, aliases: str) -> set[str]:
    """The normalised name and aliases of one record."""
    return {norm_name(name), *(norm_name(a) for a in aliases.split(";") if a.strip())}


def norm_name(name: Any) -> str:
    """A device name reduced for matching: lower case, without ``NVIDIA``/``GeForce``/``Tesla``, runs of
    other characters than letters and digits as one space."""
    s = _NOISE.sub(" ", str(name).lower())
    return " ".join(re.sub(r"[^a-z0-9.]+", " ", s).split())


@lru_cache(maxsize=4)
def _load(path: str) -> pd.DataFrame:
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"GPU spec table {path!r} does not exist")
    df = pd.read_csv(p, dtype={c: str for c in (*_TEXT, *_OPTIONAL_TEXT)}, keep_default_na=False, na_values={
        c: [""] for c in (*SPEC_FIELDS, *OPTIONAL_FIELDS)})
    missing = [c for c in (*_TEXT, *SPEC_FIELDS) if c not in df.columns]
    if missing:
        raise DatasetError(f"GPU spec table {path!r}: missing column(s) {missing}")
    for c in OPTIONAL_FIELDS:
        if c not in df.columns:
            df[c] = float("nan")
    if "static_source" not in df.columns:
        df["static_source"] = ""
    for c in (*SPEC_FIELDS, *OPTIONAL_FIELDS):
        num = pd.to_numeric(df[c], errors="coerce")
        bad = (num.isna() & df[c].notna()) | (num <= 0)
        if bad.any():
            raise DatasetError(f"GPU spec table {path!r}: {c} must be a positive number; bad in "
                               f"{list(df.loc[bad, 'name'])}")
        df[c] = num.astype(float)
    no_source = df["source"].str.strip() == ""
    if no_source.any():
        raise DatasetError(f"GPU spec table {path!r}: rows without a source: {list(df.loc[no_source, 'name'])}")
    keys = [k for n, s in zip(df["name"], df["aliases"]) for k in _keys(n, s)]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise DatasetError(f"GPU spec table {path!r}: names or aliases match more than one row: {dup}")
    return df


def load_gpu_specs(path: str | Path | None = None) -> pd.DataFrame:
    """The spec table (default :data:`GPU_SPECS`), checked: every column present, numeric fields positive
    numbers or empty, every row a ``source``, no name or alias on two rows. Raises :class:`DatasetError`."""
    return _load(str(path or GPU_SPECS)).copy()


def spec_names(path: str | Path | None = None) -> list[str]:
    """The records' names."""
    return list(load_gpu_specs(path)["name"])


def find_spec(device_name: Any, path: str | Path | None = None) -> str | None:
    """The name of the record whose name or an alias matches ``device_name`` (:func:`norm_name`), or None."""
    key = norm_name(device_name)
    for r in load_gpu_specs(path).itertuples():
        if key in _keys(r.name, r.aliases):
            return str(r.name)
    return None


def gpu_spec(name: str, field: str = "importer.spec", path: str | Path | None = None) -> dict[str, Any]:
    """The record named ``name`` (its name or an alias) as a dict (empty fields None). One-line
    :class:`ConfigError` naming ``field`` for an unknown name, or a record lacking a :data:`PRIOR_FIELDS`
    field."""
    found = find_spec(name, path)
    if found is None:
        raise ConfigError(f"{field}: {name!r} is not in the GPU spec table ({GPU_SPECS.name}); allowed: "
                          f"{spec_names(path)}")
    df = load_gpu_specs(path)
    rec = df[df["name"] == found].iloc[0].to_dict()
    rec = {k: (None if (isinstance(v, float) and v != v) or v == "" else v) for k, v in rec.items()}
    lacking = [f for f in PRIOR_FIELDS if rec.get(f) is None]
    if lacking:
        raise ConfigError(f"{field}: the spec record {found!r} lacks {lacking}, which the CUDA physics prior "
                          f"needs; complete the record or import with importer.device_kind=import")
    return rec


def spec_fingerprint(rec: dict[str, Any], device_name: str | None = None) -> dict[str, Any]:
    """The device description of GPU rows imported under the spec record ``rec`` (:func:`gpu_spec`): the
    keys a measured GPU fingerprint has that the CUDA prior reads (``kind``, ``name``: ``device_name`` or
    the record's,
    ``compute_capability``, ``multiprocessors``, ``power_limit_W``), ``spec`` (the record's name),
    ``clock_policy = "spec sheet"`` and every numeric field of the record that is given."""
    fp: dict[str, Any] = {"kind": "cuda", "name": str(device_name or rec["name"]), "spec": rec["name"],
                          "compute_capability": str(rec["compute_capability"]),
                          "multiprocessors": int(rec["sms"]), "power_limit_W": float(rec["power_limit_W"]),
                          "clock_policy": "spec sheet"}
    for f in SPEC_FIELDS:
        if f not in ("sms", "power_limit_W") and rec.get(f) is not None:
            fp[f] = float(rec[f])
    return fp


def fingerprint_json(fp: dict[str, Any]) -> str:
    """Compact, key-sorted JSON: the stored form of a fingerprint (as :mod:`carb.measure.fingerprint`)."""
    return json.dumps(fp, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint_id(fp: dict[str, Any]) -> str:
    """Ten hex digits of the SHA-256 of :func:`fingerprint_json` (the ``device_id`` of measured rows)."""
    return hashlib.sha256(fingerprint_json(fp).encode()).hexdigest()[:10]


def peak_TFLOPS(rec: dict[str, Any], precision: str) -> float | None:
    """The highest peak (TFLOP/s) a ``precision`` row may reach on the record ``rec`` (a record or a
    fingerprint holding its fields, :data:`PRECISION_PEAKS`), None when the record gives none."""
    vals = [float(rec[c]) for c in PRECISION_PEAKS.get(precision, ()) if rec.get(c) is not None]
    return max(vals) if vals else None


def record_for_fingerprint(fp: dict[str, Any]) -> dict[str, Any] | None:
    """The spec record a GPU fingerprint describes: its own fields when it came from the table (``spec``),
    else the record matching its ``name``; None when neither (a GPU the table lacks)."""
    if fp.get("spec") and fp.get("fp32_TFLOPS") is not None:
        return fp
    found = find_spec(fp.get("name", ""))
    if found is None:
        return None
    df = load_gpu_specs()
    rec = df[df["name"] == found].iloc[0].to_dict()
    return {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
