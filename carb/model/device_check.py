"""Is a CPU model used on the CPU it describes?

A model's predictions describe the device it was trained (or calibrated, or zero-shot transferred) for:
its ``device_fingerprint_`` (the CPU's fingerprint, :mod:`carb.data.fingerprint`; a GPU's spec record). On
another CPU the same network can run 3x to 35x faster or slower (another instruction set, core count or
microarchitecture), and nothing in the predictions says so. :func:`other_device` compares a CPU model's
fingerprint with this machine's on the hardware fields (:data:`HARDWARE_FIELDS`; torch threads and the
hypervisor are settings, not hardware) and returns one warning line when they differ, which
``carb-screen`` and :meth:`carb.analysis.predictor.Predictor.predict` print once, flagging every candidate
(``other_device``). A GPU model is never flagged: screening for a GPU usually runs on another machine.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

#: Fingerprint fields that describe the CPU's hardware (a difference in any changes its costs).
HARDWARE_FIELDS: tuple[str, ...] = ("vendor", "family", "model", "stepping", "model_name", "isa", "logical_cpus")


@lru_cache(maxsize=1)
def this_cpu() -> dict[str, Any]:
    """This machine's CPU fingerprint (read once per process; the threads field is a placeholder)."""
    from carb.data.fingerprint import read_cpu_fingerprint

    return read_cpu_fingerprint(threads=1)


def model_cpu(model: Any) -> dict[str, Any] | None:
    """The fingerprint of the CPU ``model`` describes (a dict), or None for a GPU model, a model without
    one or an unreadable one."""
    try:
        fp = json.loads(getattr(model, "device_fingerprint_", None) or "null")
    except (TypeError, ValueError):
        return None
    return fp if isinstance(fp, dict) and fp.get("kind", "cpu") == "cpu" and fp.get("isa") is not None else None


def other_device(model: Any, here: Mapping[str, Any] | None = None) -> str | None:
    """One warning line when ``model`` describes a CPU whose hardware differs from ``here`` (default: this
    machine's, :func:`this_cpu`), naming both and the differences; None when they match or the model is not
    a CPU model."""
    fp = model_cpu(model)
    if fp is None:
        return None
    here = dict(this_cpu() if here is None else here)
    diffs = [k for k in HARDWARE_FIELDS if k in fp and fp.get(k) != here.get(k)]
    if not diffs:
        return None
    parts = []
    for k in diffs:
        if k == "isa":
            gained = sorted(set(here.get("isa") or []) - set(fp.get("isa") or []))
            lost = sorted(set(fp.get("isa") or []) - set(here.get("isa") or []))
            parts.append("isa " + " ".join([*(f"+{f}" for f in gained), *(f"-{f}" for f in lost)]))
        else:
            parts.append(f"{k} {fp.get(k)!r} vs {here.get(k)!r}")
    dev = getattr(model, "device_id_", None)
    return (f"warning: this model describes the CPU {fp.get('model_name', '?')!r}"
            + (f" (device_id {dev})" if dev else "") + f", not this machine's {here.get('model_name', '?')!r} ("
            + "; ".join(parts) + "): its predictions are the other CPU's (other_device=True); carb-calibrate "
            "measure=cpu k=10 probe=true calibrates it to this one")
