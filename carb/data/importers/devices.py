"""Device descriptions of imported rows: ``device_kind`` and, for GPUs, the spec record's fingerprint.

``importer.device_kind`` (:data:`DEVICE_KINDS`) and ``importer.spec`` decide, per device of the import:

- ``auto`` (default): ``cuda`` with the spec record matching the device name
  (:func:`carb.data.gpu_specs.find_spec`) or the one ``importer.spec`` names; else ``cpu`` where the
  source says it ran on a CPU (optimum-benchmark's ``backend.device``); else ``import`` (a device CARB
  knows nothing about: no device physics).
- ``cuda``: every device needs a spec record (matched or named), or one line and exit 2.
- ``cpu``: CPU rows (the CPU prior terms apply); no spec allowed. ``import``: no device physics.

A GPU row carries ``device_fingerprint`` = :func:`carb.data.gpu_specs.spec_fingerprint` (compute
capability, SMs, power limit, peaks, bandwidth, ``spec``) and ``device_id`` its hash, so the CUDA physics
prior (tensor cores from the compute capability, the power cap, launch/device overlap) applies to it as
to a measured GPU's rows.
"""
from __future__ import annotations

import pandas as pd

from carb.data.gpu_specs import GPU_SPECS, find_spec, fingerprint_id, fingerprint_json, gpu_spec, spec_fingerprint, \
    spec_names
from carb.errors import ConfigError

#: ``importer.device_kind`` values.
DEVICE_KINDS: tuple[str, ...] = ("auto", "cuda", "cpu", "import")


def device_kind_of(rows: pd.DataFrame, kind: str, spec: str | None) -> dict[str, tuple[str, str | None]]:
    """``{device_name: (device_kind, spec record name or None)}`` for every device of ``rows`` under the
    settings (see the module docstring). One-line :class:`ConfigError` naming ``importer.device_kind`` /
    ``importer.spec`` for a bad value, an unknown spec, a spec naming one GPU for several devices, or a
    ``cuda`` device without a record."""
    if kind not in DEVICE_KINDS:
        raise ConfigError(f"importer.device_kind: {kind!r} is not allowed; allowed: {list(DEVICE_KINDS)}")
    devices = list(dict.fromkeys(rows["device_name"].astype(str)))
    if spec is not None and str(spec).strip():
        if kind in ("cpu", "import"):
            raise ConfigError(f"importer.spec: a GPU spec ({spec!r}) needs importer.device_kind=cuda or auto, "
                              f"not {kind}")
        if len(devices) > 1:
            raise ConfigError(f"importer.spec: {spec!r} describes one GPU but the source holds devices {devices}; "
                              f"import one device (e.g. importer.gpu=<name>) or leave importer.spec=null")
        return {devices[0]: ("cuda", str(gpu_spec(str(spec))["name"]))}
    out: dict[str, tuple[str, str | None]] = {}
    for dev in devices:
        found = find_spec(dev) if kind in ("auto", "cuda") else None
        if found is not None:
            out[dev] = ("cuda", found)
        elif kind == "cuda":
            raise ConfigError(f"importer.spec: no GPU spec record matches device {dev!r} ({GPU_SPECS.name}); give "
                              f"importer.spec=<name> (allowed: {spec_names()}) or importer.device_kind=import")
        elif kind == "auto":
            ran = rows.loc[rows["device_name"].astype(str) == dev, "ob_device"] if "ob_device" in rows else None
            on_cpu = ran is not None and len(ran) > 0 and ran.astype(str).str.startswith("cpu").all()
            out[dev] = ("cpu" if on_cpu else "import", None)
        else:
            out[dev] = (kind, None)
    return out


def describe_devices(df: pd.DataFrame, kind: str = "auto", spec: str | None = None) -> pd.DataFrame:
    """``df`` (an imported dataset) with ``device_kind``, ``device_fingerprint`` and ``device_id`` set per
    device (:func:`device_kind_of`); GPU rows get their spec record's fingerprint. Returns a new frame."""
    out = df.copy()
    names = out["device_name"].astype(str)
    kinds = out["device_kind"].astype("string")
    fps = out["device_fingerprint"].astype("string") if "device_fingerprint" in out else \
        pd.Series(pd.NA, index=out.index, dtype="string")
    ids = out["device_id"].astype("string") if "device_id" in out else fps.copy()
    for dev, (k, rec_name) in device_kind_of(out, kind, spec).items():
        at = names == dev
        kinds[at] = k
        if rec_name is not None:
            fp = spec_fingerprint(gpu_spec(rec_name), device_name=dev)
            fps[at], ids[at] = fingerprint_json(fp), fingerprint_id(fp)
    out["device_kind"], out["device_fingerprint"], out["device_id"] = kinds, fps, ids
    return out
