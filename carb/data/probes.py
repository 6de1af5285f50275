"""Device probes on disk: the shipped single-convolution timings (``carb/data/device-probes.csv``, one
table, a ``device_id`` column) and any a user measured with ``carb-probe`` (``<carb home>/probes/*.csv``,
``$CARB_HOME`` when set), looked up by the fingerprinted device they ran on. See :mod:`carb.measure.probe` for what a probe is."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from carb.errors import DatasetError
from carb.resources import DATA_DIR, carb_home

#: Columns of a probe table: the device and torch threads it ran on, the precision, the convolution
#: (``cin -> cout`` channels, ``kernel x kernel``, ``stride``, padding ``kernel // 2``, input ``H_in x H_in``),
#: the batch, the best time per call in ms, and the backend torch picked ("Mkldnn", "Slow2d", ...).
PROBE_COLUMNS: tuple[str, ...] = ("device_id", "threads", "precision", "cin", "cout", "kernel", "stride", "H_in",
                                  "batch_size", "time_ms", "backend")
#: The probes shipped with the package.
SHIPPED_PROBES: Path = DATA_DIR / "device-probes.csv"


def user_probe_path(device_id: str) -> Path:
    """Where ``carb-probe`` writes a device's probe: ``<carb home>/probes/<device_id>.csv``
    (:func:`carb.resources.carb_home`: ``$CARB_HOME`` when set)."""
    return carb_home() / "probes" / f"{device_id}.csv"


def probe_paths() -> list[Path]:
    """Probe tables to search, shipped first, then ``<carb home>/probes/*.csv`` (later ones win)."""
    paths = [SHIPPED_PROBES] if SHIPPED_PROBES.exists() else []
    return paths + sorted((carb_home() / "probes").glob("*.csv"))


def load_probe(device_id: str, paths: list[Path] | None = None) -> pd.DataFrame | None:
    """The probe rows of ``device_id`` from the last table in ``paths`` (default :func:`probe_paths`)
    that has any, or None when no table does. Raises :class:`DatasetError` for an unreadable table."""
    found = None
    for p in (probe_paths() if paths is None else paths):
        try:
            t = pd.read_csv(p)
        except Exception as e:
            raise DatasetError(f"cannot read device probe {str(p)!r}: {' '.join(str(e).split())}") from None
        if "device_id" not in t.columns:
            raise DatasetError(f"device probe {str(p)!r}: no device_id column")
        rows = t[t["device_id"].astype(str) == str(device_id)]
        if len(rows):
            found = rows.reset_index(drop=True)
    return found


def missing_precisions(probe: pd.DataFrame | None, precisions: Iterable[str]) -> list[str]:
    """The precisions of ``precisions`` (e.g. what a source model predicts) that ``probe`` (a device's probe
    table, :func:`load_probe`; None: no probe) has no timing of, in the order given; [] when it covers them
    all. A precision a probe lacks is predicted by a stand-in, not from this device's kernels."""
    have: set[str] = set()
    if probe is not None and len(probe) and "precision" in probe.columns:
        t = pd.to_numeric(probe["time_ms"], errors="coerce") if "time_ms" in probe.columns else None
        rows = probe if t is None else probe[(t > 0).fillna(False).to_numpy()]
        have = set(rows["precision"].astype(str))
    seen: list[str] = []
    for p in precisions:
        if str(p) not in have and str(p) not in seen:
            seen.append(str(p))
    return seen


def probe_ids(paths: list[Path] | None = None) -> list[str]:
    """The device ids with a probe in ``paths`` (default :func:`probe_paths`), sorted."""
    ids: set[str] = set()
    for p in (probe_paths() if paths is None else paths):
        try:
            ids |= set(pd.read_csv(p, usecols=["device_id"])["device_id"].astype(str))
        except Exception:   # an unreadable table is load_probe's error to report
            continue
    return sorted(ids)


def probe_fingerprint(device_id: str) -> str | None:
    """The fingerprint (compact JSON, sorted keys: the datasets' ``device_fingerprint`` form) of the CPU a
    probe of ``device_id`` ran on, from the probe's provenance (shipped: keyed by device id; carb-probe's:
    ``<device_id>.provenance.json`` beside its table); None when none records it."""
    import json

    found = None
    for prov in [SHIPPED_PROBES.with_suffix(".provenance.json"), user_probe_path(device_id).with_suffix(".provenance.json")]:
        try:
            d = json.loads(prov.read_text())
        except (OSError, ValueError):
            continue
        rec = d.get(str(device_id)) if str(device_id) in d else (d if str(d.get("device_id")) == str(device_id) else None)
        if isinstance(rec, dict) and isinstance(rec.get("fingerprint"), dict):
            found = json.dumps(rec["fingerprint"], sort_keys=True, separators=(",", ":"))
    return found
