"""Import the files a lent-GPU run brought back (``python -m carb.measure.gpu_run --out DIR``) as a dataset.

``import_gpu_run(dir)`` reads ``dataset.parquet`` (validated against :mod:`carb.data.schema`) and
``provenance.json`` (device facts, fingerprint, ``device_id``, protocol, counts, drift), checks that
they agree (one device id, the provenance's), and returns ``(frame, provenance)``. The rows are the
device's own measurements (``device_kind = cuda``), not a third-party table. ``carb-collect
import_run=DIR out=<file>`` writes them with the provenance beside and logs them to MLflow;
``carb-train data.path=<file>`` then registers ``carb-<gpu-slug>-<device_id>``.

``merge_gpu_run(old, old_prov, new, new_prov)`` appends a later run of the same device (same
``device_id``, i.e. the same fingerprint) to an existing dataset: a configuration measured again keeps its
first measurement (one row per ``config_id``), and the repeat is not thrown away but summarised in the
provenance (``runs[i]["repeats"]``: new / first ratios of each target), which is the only across-session
reproducibility figure a lent GPU gives. A different device is refused: it belongs in its own file.

``keep_run(dir, keep, seed)`` keeps a copy of the returned files under ``keep/<gpu>-run-<day>-seed<N>/``
(refusing to overwrite); ``carb-import importer=gpu_run`` (:mod:`carb.commands.gpu_import`) does that, the
append above and prints the counts (:func:`dataset_counts`) and the 2**31 check's ratios
(:func:`large_tensor_ratios`).
"""
from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.data.io import load_dataset
from carb.design.identity import ARCH_COLUMNS, is_zoo
from carb.errors import DatasetError

#: The files a run writes (run.py: at most 8, flat).
RUN_FILES = ("dataset.parquet", "counter_trace.csv", "period.json", "provenance.json", "run.log")


def read_provenance(path: str | Path) -> dict[str, Any]:
    """The JSON object of a run's (or an imported dataset's) provenance file; :class:`DatasetError` (one
    line) when it is not JSON or holds anything but an object (a list, a string, a number)."""
    p = Path(path)
    try:
        prov = json.loads(p.read_text())
    except ValueError as e:
        raise DatasetError(f"import_run: {str(p)!r} is not JSON ({e})") from None
    if not isinstance(prov, dict):
        raise DatasetError(f"import_run: {str(p)!r} holds a JSON {type(prov).__name__}, not the object "
                           f"(device_id, config, runs, ...) python -m carb.measure.gpu_run writes")
    return prov


def import_gpu_run(folder: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``(rows, provenance)`` of a returned run folder; :class:`DatasetError` (one line) when the folder
    lacks the dataset or the provenance, or they disagree on the device."""
    d = Path(folder)
    for name in ("dataset.parquet", "provenance.json"):
        if not (d / name).exists():
            raise DatasetError(f"import_run: {str(d)!r} has no {name} (a folder written by python -m carb.measure.gpu_run "
                               f"holds {', '.join(RUN_FILES)})")
    df = load_dataset(d / "dataset.parquet")
    prov = read_provenance(d / "provenance.json")
    ids = sorted(df["device_id"].dropna().astype(str).unique())
    if ids != [str(prov.get("device_id"))]:
        raise DatasetError(f"import_run: the rows' device_id {ids} differ from the provenance's "
                           f"{prov.get('device_id')!r}")
    return df, prov


#: Targets whose repeat ratios a merge reports.
REPEAT_TARGETS = ("latency_ms", "energy_J", "peak_memory_MB")
#: Repeats at or above this latency (ms per batch) are reported apart: below it the host's kernel-launch
#: rate, not the GPU, sets the time, and it differs between sessions.
HEAVY_LATENCY_MS = 5.0
#: Per-run facts a merged provenance keeps in ``runs``.
RUN_KEYS = ("finished_at", "seconds", "minutes_budget", "rows", "counts", "stopped", "configs_per_minute",
            "drift", "update_period_s", "protocol", "torch", "python")


def _ratio_summary(ratio: pd.Series) -> dict[str, float | int]:
    """``{n, median, q10, q90}`` of finite positive ratios (new / first)."""
    r = ratio[np.isfinite(ratio) & (ratio > 0)]
    if r.empty:
        return {"n": 0}
    return {"n": int(len(r)), "median": float(r.median()), "q10": float(r.quantile(0.1)),
            "q90": float(r.quantile(0.9))}


def repeat_ratios(first: pd.DataFrame, again: pd.DataFrame) -> dict[str, Any]:
    """How configurations measured in two runs compare: per target, ratios ``again / first`` over all the
    shared ``ok`` configurations and over the heavy ones (first latency >= :data:`HEAVY_LATENCY_MS`)."""
    a = first[first["status"] == "ok"].set_index("config_id")
    b = again[again["status"] == "ok"].set_index("config_id")
    ids = a.index.intersection(b.index)
    out: dict[str, Any] = {"n": int(len(ids)), "heavy_latency_ms": HEAVY_LATENCY_MS}
    if not len(ids):
        return out
    heavy = a.loc[ids, "latency_ms"].astype(float) >= HEAVY_LATENCY_MS
    for t in REPEAT_TARGETS:
        if t not in a or t not in b:
            continue
        r = b.loc[ids, t].astype(float) / a.loc[ids, t].astype(float)
        out[t] = {"all": _ratio_summary(r), "heavy": _ratio_summary(r[heavy.values])}
    return out


def _run_entry(prov: dict[str, Any]) -> dict[str, Any]:
    """The per-run part of a run's provenance (seed from its config)."""
    e = {k: prov[k] for k in RUN_KEYS if k in prov}
    e["seed"] = (prov.get("config") or {}).get("seed")
    return e


def merge_gpu_run(old: pd.DataFrame, old_prov: dict[str, Any], new: pd.DataFrame,
                  new_prov: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``(rows, provenance)`` of ``old`` with the run ``new`` appended. Configurations already in ``old``
    keep their first row; the new run's repeats of them are summarised in its ``runs`` entry. The
    provenance keeps the first run's device facts at the top, lists every run in ``runs``, and sums
    ``rows`` and ``counts``. :class:`DatasetError` (one line) when the device ids differ."""
    if str(old_prov.get("device_id")) != str(new_prov.get("device_id")):
        raise DatasetError(f"import_run: the run's device_id {new_prov.get('device_id')!r} differs from the "
                           f"existing dataset's {old_prov.get('device_id')!r} (another device, or the same board "
                           f"with another driver, clock policy or power limit): write it to its own file")
    runs = list(old_prov.get("runs") or [_run_entry(old_prov)])
    entry = _run_entry(new_prov)
    seen = set(old["config_id"].astype(str))
    is_new = ~new["config_id"].astype(str).isin(seen)
    entry["rows_added"] = int(is_new.sum())
    entry["repeats"] = repeat_ratios(old, new)
    runs.append(entry)
    rows = pd.concat([old, new[is_new.values]], ignore_index=True)
    prov = {k: v for k, v in old_prov.items() if k not in RUN_KEYS or k in ("protocol",)}
    prov["runs"] = runs
    prov["rows"] = int(len(rows))
    counts: dict[str, int] = {}
    for r in runs:
        for k, v in (r.get("counts") or {}).items():
            counts[k] = counts.get(k, 0) + int(v)
    prov["counts"] = counts
    prov["seconds"] = float(sum(float(r.get("seconds") or 0) for r in runs))
    return rows, prov


def run_day(prov: dict[str, Any]) -> str:
    """``YYYY-MM-DD`` of a run's ``finished_at`` (its provenance); :class:`DatasetError` without one."""
    day = str(prov.get("finished_at") or "")[:10]
    if len(day) != 10:
        raise DatasetError("importer.date: the run's provenance.json has no finished_at; give importer.date=YYYY-MM-DD")
    return day


def kept_name(prov: dict[str, Any], day: str, seed: int) -> str:
    """The folder name a kept run gets: ``<gpu>-run-<day>-seed<seed>`` (``<gpu>``: the device slug without
    its vendor, e.g. ``h200`` for 'NVIDIA H200'); a zoo run (``--space zoo``) ``<gpu>-zoo-run-<day>-seed<seed>``,
    so that it never collides with the ResNet run of the same day and seed."""
    slug = str(prov.get("slug") or "gpu")
    for vendor in ("nvidia-", "amd-", "intel-"):
        slug = slug.removeprefix(vendor)
    zoo = "-zoo" if str(prov.get("space") or "") == "zoo" else ""
    return f"{slug}{zoo}-run-{day}-seed{seed}"


def keep_run(folder: str | Path, keep: str | Path, seed: int, date: str | None = None) -> Path:
    """Copy the plain files of a returned run folder into ``keep/<kept_name>/`` and return that folder.
    The folder must be a run's (:func:`import_gpu_run` reads it first); an existing destination is refused
    with one line (:class:`DatasetError`): a run is kept once, nothing is overwritten."""
    src = Path(folder)
    _, prov = import_gpu_run(src)
    dest = Path(keep) / kept_name(prov, date or run_day(prov), seed)
    if dest.exists():
        raise DatasetError(f"importer.keep: {str(dest)!r} exists; a run is kept once (remove it or give another "
                           f"importer.seed or importer.date)")
    dest.mkdir(parents=True)
    for f in sorted(src.iterdir()):
        if f.is_file():
            shutil.copy2(f, dest / f.name)
    return dest


def large_tensor_ratios(path: str | Path) -> dict[str, float]:
    """``{"<precision>/<operator>": above / below time per element}`` from the ``large_tensors.csv`` of the
    2**31-element check (``scripts/studies/large_tensors.py``) when it ran in the same call; pairs with an
    error or a non-positive time are left out."""
    side: dict[tuple[str, str], dict[bool, float]] = {}
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            try:
                v = float(r["ns_per_Melement"])
            except (TypeError, ValueError):
                continue
            if math.isfinite(v) and v > 0 and not r.get("error"):
                side.setdefault((r["precision"], r["operator"]), {})[r["above_2_31"] in ("True", "true", "1")] = v
    return {f"{p}/{o}": s[True] / s[False] for (p, o), s in sorted(side.items()) if True in s and False in s}


def dataset_counts(df: pd.DataFrame) -> tuple[int, int]:
    """``(ok rows, architectures)`` of a dataset: the counts the documents that describe it quote (a zoo
    dataset's architectures: its distinct ``model_name`` values)."""
    ok = df[df["status"] == "ok"]
    if is_zoo(ok):   # zoo rows (carb.design.identity.is_zoo)
        return len(ok), int(ok["model_name"].nunique())
    arch = ok[list(ARCH_COLUMNS)].astype(str)
    return len(ok), len(arch.drop_duplicates())
