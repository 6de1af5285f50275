"""Device fingerprints: what distinguishes hardware that behaves differently, and a short id for it.

Two VMs both called "AMD EPYC" measured the same configurations 3x to 35x apart (one had native bf16
instructions): a device name does not identify a device. A fingerprint is a small JSON-serializable
dict of the facts that change kernels or throughput; :func:`device_id` is a 10-hex-digit hash of it
that every dataset row and registered model carries.

- CPU (:func:`cpu_fingerprint`): vendor, family/model/stepping, model name, the ISA flags that
  change kernels (:data:`KERNEL_FLAGS`, those present), cores this process may use, torch threads,
  logical cores, and the hypervisor (``/sys/hypervisor/type``, the DMI vendor, or the kernel's
  ``Hypervisor detected`` line; ``"unknown"`` when only the cpuinfo ``hypervisor`` flag says so).
- GPU (:func:`gpu_fingerprint`): name, total memory (GiB, rounded), compute capability, SM count,
  power limit (W), driver, CUDA version and clock policy (locked clocks or ``"default"``).

Software versions (torch, oneDNN) are columns of their own, not part of the device id. Parsing takes
text (``/proc/cpuinfo`` as recorded), so it is tested on recorded files of different CPUs; nothing
here imports torch.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from carb.data.fingerprint import (  # noqa: F401  (re-exported: the CPU parts live in the data layer)
    KERNEL_FLAGS,
    cpu_fingerprint,
    fingerprint_diff,
    hypervisor_from_dmesg,
    parse_cpuinfo,
    read_cpu_fingerprint,
    read_hypervisor,
)


def gpu_fingerprint(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The GPU fingerprint from a CUDA meter's device facts (``device_name``, ``total_memory_MB``,
    ``compute_capability``, ``multiprocessors``, ``power_limit_W``, ``driver``, ``cuda_version``,
    ``clocks``). The clock policy is ``"default"`` unless clocks were locked
    (``"sm=<MHz>,mem=<MHz>"``)."""
    clocks = facts.get("clocks") or {}
    sm, mem = clocks.get("locked_sm_MHz"), clocks.get("locked_mem_MHz")
    policy = "default" if sm is None and mem is None else f"sm={sm},mem={mem}"
    mem_mb = facts.get("total_memory_MB")
    limit = facts.get("power_limit_W")
    return {
        "kind": "cuda", "name": str(facts.get("device_name") or "unknown"),
        "memory_GiB": round(float(mem_mb) / 1024.0) if mem_mb else None,
        "compute_capability": facts.get("compute_capability"),
        "multiprocessors": facts.get("multiprocessors"),
        "power_limit_W": round(float(limit)) if limit else None,
        "driver": facts.get("driver"), "cuda": facts.get("cuda_version"), "clock_policy": policy,
    }


def canonical_json(obj: Any) -> str:
    """Compact JSON with sorted keys: the stored form of a fingerprint (and what is hashed)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def device_id(fingerprint: Mapping[str, Any]) -> str:
    """Ten hex digits of the SHA-256 of the canonical fingerprint JSON."""
    return hashlib.sha256(canonical_json(dict(fingerprint)).encode()).hexdigest()[:10]


#: Where Linux names the current boot (a UUID that changes at every boot of the machine or VM).
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def session_id(path: Path = BOOT_ID_PATH) -> str | None:
    """Ten hex digits of the SHA-256 of the operating system's boot id (``path``): the boot a row was measured in.
    Two boots are two measuring sessions, but one boot can hold several: the Xeon VM ran 11-15 % apart in two
    windows of one boot three hours apart (carb/data/cpu-intel-xeon.md), so carb-calibrate also splits a boot's
    rows on gaps in ``measured_at`` (``data.session_gap_h``). None where the file is missing or unreadable."""
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return hashlib.sha256(text.encode()).hexdigest()[:10] if text else None


def protocol_id(settings: Mapping[str, Any], device: str) -> str:
    """Ten hex digits identifying a measurement protocol: the settings (as a mapping) and the
    ``device_id`` they ran on. Resuming a file with another protocol id mixes two protocols."""
    return hashlib.sha256(canonical_json({"settings": dict(settings), "device_id": device}).encode()).hexdigest()[:10]
