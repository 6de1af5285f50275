"""Meters: measure a model's latency, peak memory and energy on one device.

``get_meter(device, **settings)`` returns the backend for ``device``:

- ``"cuda"``: :class:`~carb.measure.cuda.CudaMeter` (torch.cuda + NVML; the paper's protocol);
- ``"cpu"``: :class:`~carb.measure.cpu.CpuMeter` (latency, peak tensor memory, RAPL energy where
  readable);
- ``"auto"``: CUDA when ``torch.cuda.is_available()``, else CPU.

Settings are those of :class:`~carb.measure.base.MeasureSettings` (the ``measure`` config group),
plus ``index`` (CUDA device index). Use a meter as a context manager so what it changed (GPU clocks,
threads, cudnn flags) is restored, also after an error or Ctrl-C::

    with get_meter("auto", **measure_cfg) as meter:
        row = meter.measure(model, cfg)

Only this package touches torch.cuda and pynvml.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from carb.errors import ConfigError
from carb.measure.base import (
    MEASURED_COLUMNS,
    MeasureSettings,
    Meter,
    is_oom,
    parse_missing_reason,
)

DEVICES = ("auto", "cuda", "cpu")

__all__ = ["DEVICES", "MEASURED_COLUMNS", "MeasureSettings", "Meter", "cuda_available", "get_meter",
           "is_oom", "parse_missing_reason"]


def cuda_available() -> bool:
    """Whether torch sees a CUDA device."""
    import torch

    return bool(torch.cuda.is_available())


def get_meter(device: str = "auto", index: int = 0, settings: Mapping[str, Any] | MeasureSettings | None = None,
              **kwargs: Any) -> Meter:
    """The meter for ``device`` ('auto' | 'cuda' | 'cpu') with measurement settings given as a
    mapping/``MeasureSettings`` and/or keyword arguments (``n_runs=100, clocks={...}``)."""
    if device not in DEVICES:
        raise ConfigError(f"device.kind: {device!r} is not allowed; allowed: {list(DEVICES)}")
    if isinstance(settings, MeasureSettings):
        s = settings if not kwargs else MeasureSettings.from_mapping({**settings.to_dict(), **kwargs})
    else:
        s = MeasureSettings.from_mapping({**dict(settings or {}), **kwargs})
    if device == "auto":
        device = "cuda" if cuda_available() else "cpu"
    if device == "cuda":
        from carb.measure.cuda import CudaMeter

        return CudaMeter(s, index=index)
    from carb.measure.cpu import CpuMeter

    return CpuMeter(s)
