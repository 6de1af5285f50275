"""The CPU's fingerprint, read from this machine (``/proc/cpuinfo``, the hypervisor): the device
description every dataset row and model carries (:mod:`carb.measure.fingerprint` adds the GPU's, the
device id and the protocol id, and re-exports these). In the data layer so that the model and analysis
layers can compare a model's training CPU with the one it is used on (:mod:`carb.model.device_check`)
without reaching into the measuring code. Parsing takes text (``/proc/cpuinfo`` as recorded), so it is
tested on recorded files of different CPUs; nothing here imports torch.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from functools import lru_cache
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


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints: ``["isa: [...] vs [...]", ...]``."""
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} vs {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]
