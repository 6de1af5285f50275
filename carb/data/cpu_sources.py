"""The CPU datasets CARB ships as extra sources of its multi-source transfer base (issue 44).

``transfer.extra_sources: auto`` (``conf/calibrate.yaml``) makes ``carb-calibrate`` combine the source model's
probe zero-shot with a model of each of these CPUs, trained on the fly on its shipped rows: the AMD EPYC Zen 4
VM (``cpu-amd-zen4.parquet``, device ``34cc4b132c``) and the Intel Xeon with AMX and AVX-512 FP16
(``cpu-intel-xeon.parquet``, ``6a0ea403ee``), each with its device probe in ``device-probes.csv`` and its
provenance JSON and README beside it. :func:`auto_sources` picks those that are neither the source's nor the
target's CPU (by ``device_id`` or by fingerprint) and have a probe.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from carb.resources import DATA_DIR

#: The shipped CPU datasets usable as extra sources (file names in ``carb/data``, each with a provenance JSON).
CPU_SOURCE_FILES: tuple[str, ...] = ("cpu-amd-zen4.parquet", "cpu-intel-xeon.parquet")


@dataclass(frozen=True)
class CpuSource:
    """One shipped CPU dataset: its file, device id, fingerprint (a dict as the rows record it) and name."""

    path: Path
    device_id: str
    fingerprint: dict
    device_name: str

    def sha256(self) -> str:
        """The SHA-256 of the dataset file (hex), the key of its cached model."""
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def shipped_cpu_sources(data_dir: Path = DATA_DIR) -> list[CpuSource]:
    """The shipped CPU datasets of :data:`CPU_SOURCE_FILES` present in ``data_dir``, with device id,
    fingerprint and name read from each one's provenance JSON."""
    out = []
    for name in CPU_SOURCE_FILES:
        path = data_dir / name
        prov = path.with_name(name.removesuffix(".parquet") + ".provenance.json")
        if not (path.exists() and prov.exists()):
            continue
        meta = json.loads(prov.read_text())
        out.append(CpuSource(path, str(meta["device_id"]), dict(meta.get("fingerprint") or {}),
                             str(meta.get("device_name") or meta["device_id"])))
    return out


def same_fingerprint(a: dict | str | None, b: dict | str | None) -> bool:
    """Whether two CPU fingerprints (dicts or their JSON) name the same CPU: equal once parsed; False where
    either is missing or unreadable."""
    try:
        da = json.loads(a) if isinstance(a, str) else a
        db = json.loads(b) if isinstance(b, str) else b
    except (TypeError, ValueError):
        return False
    return bool(da) and bool(db) and da == db


def auto_sources(exclude: list[tuple[str | None, dict | str | None]], has_probe,
                 data_dir: Path = DATA_DIR,
                 roles: tuple[str, ...] = ("the source's", "the target's")) -> tuple[list[CpuSource], list[str]]:
    """``transfer.extra_sources: auto``: the shipped CPU datasets (:func:`shipped_cpu_sources`) except those
    of a device in ``exclude`` (``(device_id, fingerprint)`` pairs, named by ``roles`` in order: the source's and
    the target's CPU; a match on either skips it) and those ``has_probe(device_id)`` says lack a device probe.
    Returns the sources kept and one phrase per dataset skipped (its name and why: whose CPU it is)."""
    kept, skipped = [], []
    for s in shipped_cpu_sources(data_dir):
        hit = [i for i, (d, fp) in enumerate(exclude) if s.device_id == str(d) or same_fingerprint(s.fingerprint, fp)]
        if hit:
            who = " and ".join(roles[i] if i < len(roles) else "an excluded" for i in hit)
            skipped.append(f"{s.path.name} ({s.device_id}: {who} CPU)")
        elif not has_probe(s.device_id):
            skipped.append(f"{s.path.name} ({s.device_id}: no device probe)")
        else:
            kept.append(s)
    return kept, skipped
