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
import os
from functools import lru_cache
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: x86/ARM feature flags that select different compute kernels (oneDNN, MKL, torch's CPU
#: dispatch): vector width, bf16/fp16/int8 units, matrix tiles.
KERNEL_FLAGS: tuple[str, ...] = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
    "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8", "amx_tile", "amx_fp16",
    "asimd", "sve", "sve2", "bf16", "i8mm", "fphp", "asimdhp",
)


def parse_cpuinfo(text: str) -> dict[str, Any]:
    """The first processor block of a ``/proc/cpuinfo`` text: ``vendor``, ``family``, ``model``,
    ``stepping``, ``model_name``, ``flags`` (the :data:`KERNEL_FLAGS` present, sorted),
    ``hypervisor_flag`` (bool) and ``logical_cpus`` (number of ``processor`` entries)."""
    first: dict[str, str] = {}
    n_cpus = 0
    for line in text.splitlines():
        if ":" not in line:
            continue
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "processor":
            n_cpus += 1
        if n_cpus > 1:
            continue
        first.setdefault(key, value.strip())
    flags = set((first.get("flags") or first.get("features") or "").split())
    return {
        "vendor": first.get("vendor_id") or first.get("cpu implementer") or "unknown",
        "family": first.get("cpu family") or first.get("cpu architecture") or "unknown",
        "model": first.get("model") or first.get("cpu part") or "unknown",
        "stepping": first.get("stepping") or first.get("cpu revision") or "unknown",
        "model_name": first.get("model name") or "unknown",
        "flags": sorted(f for f in KERNEL_FLAGS if f in flags),
        "hypervisor_flag": "hypervisor" in flags,
        "logical_cpus": max(n_cpus, 1),
    }


def cpu_fingerprint(cpuinfo: str, usable_cores: int, threads: int, hypervisor_type: str | None = None) -> dict[str, Any]:
    """The CPU fingerprint from a ``/proc/cpuinfo`` text, the cores this process may use, the torch
    threads it measures with, and the hypervisor type (``/sys/hypervisor/type``; None if unknown)."""
    info = parse_cpuinfo(cpuinfo)
    hyper = hypervisor_type or ("unknown" if info["hypervisor_flag"] else None)
    return {
        "kind": "cpu", "vendor": info["vendor"], "family": str(info["family"]), "model": str(info["model"]),
        "stepping": str(info["stepping"]), "model_name": info["model_name"], "isa": info["flags"],
        "logical_cpus": int(info["logical_cpus"]), "usable_cores": int(usable_cores), "threads": int(threads),
        "hypervisor": hyper,
    }


def hypervisor_from_dmesg(text: str) -> str | None:
    """The vendor in the kernel's ``Hypervisor detected: <vendor>`` boot line, or None."""
    for line in text.splitlines():
        if "Hypervisor detected:" in line:
            return line.split("Hypervisor detected:", 1)[1].strip() or None
    return None


@lru_cache(maxsize=4)
def read_hypervisor(paths: tuple[str, ...] = ("/sys/hypervisor/type", "/sys/class/dmi/id/sys_vendor")) -> str | None:
    """The hypervisor this machine runs under: the first readable of ``paths``, else the kernel's boot
    log (``dmesg``, when permitted); None when nothing says."""
    for p in paths:
        try:
            v = Path(p).read_text().strip()
        except OSError:
            continue
        if v:
            return v
    import subprocess

    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=3)
    except (OSError, subprocess.SubprocessError):
        return None
    return hypervisor_from_dmesg(out.stdout) if out.returncode == 0 else None


def read_cpu_fingerprint(threads: int, cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """:func:`cpu_fingerprint` of this machine (reads ``/proc/cpuinfo`` and :func:`read_hypervisor`)."""
    try:
        text = Path(cpuinfo_path).read_text()
    except OSError:
        text = ""
    hyper = read_hypervisor()
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    fp = cpu_fingerprint(text, usable, threads, hyper)
    if not text:
        import platform

        fp["model_name"] = platform.processor() or platform.machine() or "unknown cpu"
    return fp


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


def protocol_id(settings: Mapping[str, Any], device: str) -> str:
    """Ten hex digits identifying a measurement protocol: the settings (as a mapping) and the
    ``device_id`` they ran on. Resuming a file with another protocol id mixes two protocols."""
    return hashlib.sha256(canonical_json({"settings": dict(settings), "device_id": device}).encode()).hexdigest()[:10]


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints: ``["isa: [...] vs [...]", ...]``."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]
