"""The fast GPU protocol of a lent machine: many trustworthy rows per minute, within a hard deadline.

Where :class:`carb.measure.base.Meter` follows the paper's protocol per configuration (sleep, fixed
window, a separate training-mode utilization window, a profiler each time), a lent GPU has minutes.
This protocol (used by :mod:`carb.measure.gpu_run`):

- measures the energy counter's update period once, then sizes each timed window as
  ``max(k_periods x period, m_latencies x latency)``;
- takes energy from the counter's update edges inside the window (:mod:`carb.measure.counter`: a
  background poller, as Zeus does), utilization and temperature from the same poller's ticks inside
  the same inference window, clocks and throttle reasons right after it;
- warms up by time, not count; no sleeps between configurations (temperature is recorded instead);
- builds each architecture once and sweeps its precisions, input sizes and batch sizes
  (:func:`group_by_architecture`);
- stops before the deadline whatever the next configuration's size: :class:`LatencyModel` predicts a
  configuration's latency from what was measured so far (per precision, ms = a + flops / rate) and
  :func:`expected_seconds` its cost; configurations predicted not to fit are skipped.

Shared with :class:`~carb.measure.base.Meter` (one code, settings apart): the warm-up
(:func:`~carb.measure.base.warm_up`: ``min_warmup`` calls and ``warmup_s`` seconds here, ``n_warmup`` calls
there), the peak-memory forward (:func:`~carb.measure.base.forward_peak_MB`), kernel counting
(``ops.count_kernels``), out-of-memory detection and the ``missing_reason`` text. What differs is method,
not settings: energy from the counter's update edges (a background poller) instead of two snapshots around
the loop; utilization and temperature from that poller inside the inference window instead of a separate
training-mode window and two reads; the window sized from the measured update period instead of a fixed
``min_window_s`` with lengthening; no contention guard (GPU only) and no per-row cool-down sleep.

Everything device-specific goes through two small objects, so tests drive the real code with fakes
on a virtual clock: ``ops`` (``sync``, ``empty_cache``, ``reset_peak``, ``max_allocated_bytes``,
``device``, optionally ``count_kernels``) and ``gpu`` (``read_energy_mJ``, ``temperature_C``,
``utilization_pct``, ``clocks_MHz``, ``throttle_reasons``). torch is imported inside the functions.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from carb.design.arch import KNOB_DEFAULTS
from carb.design.identity import ARCH_COLUMNS
from carb.measure.base import NAN, forward_peak_MB, tail_mean_s, warm_up
from carb.measure.counter import CounterSampler, window_energy_J, window_runs

#: Messages of CUDA errors after which the context is unusable (the run ends with what it has).
STICKY = ("illegal memory access", "device-side assert", "unspecified launch failure", "misaligned address",
          "CUDA error: an illegal instruction", "uncorrectable ECC")


@dataclass(frozen=True)
class SweepSettings:
    """Protocol settings (``protocol`` of ``conf/gpu_run.yaml``). Seconds in ``_s``.

    k_periods / m_latencies: the window lasts at least k counter-update periods and m batches.
    min_runs: fewest batches in a window. warmup_s / min_warmup: warm-up time and fewest warm-up batches.
    poll_s: energy-counter poll interval. kernels: count kernels once per (architecture, precision).
    overhead_s: per-configuration bookkeeping assumed by the deadline logic.
    """

    k_periods: float = 6.0
    m_latencies: float = 20.0
    min_runs: int = 3
    warmup_s: float = 0.15
    min_warmup: int = 2
    poll_s: float = 0.002
    kernels: bool = True
    overhead_s: float = 0.05

    @classmethod
    def from_mapping(cls, d: dict[str, Any]) -> "SweepSettings":
        """Settings from a mapping; unknown keys are a one-line ValueError naming the allowed ones."""
        allowed = set(cls.__dataclass_fields__)
        bad = sorted(set(d) - allowed)
        if bad:
            raise ValueError(f"protocol: unknown setting(s) {bad}; allowed: {sorted(allowed)}")
        return cls(**d)


def is_sticky(exc: BaseException) -> bool:
    """True for CUDA errors that leave the context unusable."""
    msg = str(exc)
    return any(s in msg for s in STICKY)


def group_by_architecture(configs: Sequence[Any]) -> list[list[Any]]:
    """Configurations grouped by the model they need (block, depth, width, inner width, stem, classes), groups in
    order of first appearance (a seeded shuffle of the space stays a random sample of architectures);
    inside a group by precision, then input size, then batch size."""
    groups: dict[tuple, list[Any]] = {}
    for c in configs:
        key = (*(getattr(c, k, KNOB_DEFAULTS.get(k)) for k in ARCH_COLUMNS), c.num_classes)
        groups.setdefault(key, []).append(c)
    return [sorted(g, key=lambda c: (c.precision, c.input_size, c.batch_size)) for g in groups.values()]


@dataclass
class LatencyModel:
    """Predicts latency (ms) from FLOPs per precision: ``ms = a + flops / rate`` fitted by least squares on
    the rows measured so far (a prior rate before that). Conservative: the prediction is scaled by
    ``safety``."""

    prior_rate: float = 5e10     # FLOPs per ms (50 TFLOP/s of fvcore FLOPs): an H200-class guess
    prior_a_ms: float = 1.0
    safety: float = 1.5
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def add(self, precision: str, flops: float, latency_ms: float) -> None:
        if math.isfinite(latency_ms) and latency_ms > 0:
            self.points.setdefault(precision, []).append((float(flops), float(latency_ms)))

    def predict_ms(self, precision: str, flops: float) -> float:
        pts = self.points.get(precision) or [p for v in self.points.values() for p in v]
        a, rate = self.prior_a_ms, self.prior_rate
        if len(pts) >= 3:
            n = len(pts)
            mx = sum(p[0] for p in pts) / n
            my = sum(p[1] for p in pts) / n
            sxx = sum((p[0] - mx) ** 2 for p in pts)
            if sxx > 0:
                slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
                if slope > 0:
                    rate, a = 1.0 / slope, max(my - slope * mx, 0.0)
        elif pts:
            rate = max(f / max(ms - a, 1e-3) for f, ms in pts)
        return self.safety * (a + flops / rate)


def expected_seconds(latency_ms: float, period_s: float, s: SweepSettings) -> float:
    """Wall seconds one configuration costs: warm-up, peak-memory forward, the timed window, overhead."""
    lat = latency_ms / 1e3
    warm = max(s.warmup_s, s.min_warmup * lat)
    n = window_runs(lat, period_s, s.k_periods, s.m_latencies, s.min_runs)
    return warm + lat + n * lat + s.overhead_s


def measure_config(model: Any, x: Any, ops: Any, gpu: Any, sampler: CounterSampler, s: SweepSettings,
                   period_s: float, clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Measure one prepared ``model`` on input ``x`` (both on the device, in the precision). Returns the
    runtime columns of a dataset row (per-batch ``energy_J``, ``energy_window_J``, ``window_s``,
    ``latency_ms``, ``peak_memory_MB``, telemetry of the same window, clocks) plus ``missing_reason``
    entries as ``{"_reasons": {column: reason}}``."""
    import torch

    reasons: dict[str, str] = {}
    with torch.no_grad():
        times = warm_up(lambda: model(x), ops.sync, s.min_warmup, s.warmup_s, clock)
        lat_s = max(tail_mean_s(times), 1e-6)
        peak = forward_peak_MB(ops, model, x)
        n = window_runs(lat_s, period_s, s.k_periods, s.m_latencies, s.min_runs)
        ops.sync()
        t0 = clock()
        for _ in range(n):
            model(x)
        ops.sync()
        t1 = clock()
    sampler.poll()
    sampler.check()
    energy, why = window_energy_J(sampler.edges_between(t0, t1 + 1e-9), t0, t1)
    if why:
        reasons["energy_J"] = reasons["energy_window_J"] = reasons["avg_power_W"] = why
    side = sampler.side_means(t0, t1)
    util_sm, util_mem, temp = side.get("sm", NAN), side.get("mem", NAN), side.get("temp", NAN)
    if math.isnan(util_sm):
        reasons["avg_sm_util"] = reasons["avg_mem_util"] = "no utilization sample inside the timed window"
    if math.isnan(temp):
        reasons["gpu_temp_C"] = "no temperature sample inside the timed window"
    try:
        clk = gpu.clocks_MHz()
    except Exception as e:  # noqa: BLE001 - optional fact
        clk = {"sm": NAN, "mem": NAN}
        reasons["sm_clock_MHz"] = reasons["mem_clock_MHz"] = f"clocks not readable: {e}"
    try:
        throttle = gpu.throttle_reasons()
    except Exception:  # noqa: BLE001 - optional fact
        throttle = None
    window = t1 - t0
    return {
        "latency_ms": window * 1e3 / n, "n_runs": float(n), "window_s": window, "energy_window_J": energy,
        "energy_J": energy / n if math.isfinite(energy) else NAN,
        "avg_power_W": energy / window if math.isfinite(energy) and window > 0 else NAN,
        "peak_memory_MB": peak, "avg_sm_util": util_sm, "avg_mem_util": util_mem, "gpu_temp_C": temp,
        "sm_clock_MHz": float(clk.get("sm", NAN)), "mem_clock_MHz": float(clk.get("mem", NAN)),
        "throttle_reasons": throttle, "n_warmup": float(len(times)), "_reasons": reasons,
    }


def render_reasons(reasons: dict[str, str]) -> str | None:
    """``missing_reason`` text (columns grouped by reason, as :class:`carb.measure.base.Reasons`)."""
    from carb.measure.base import Reasons

    r = Reasons()
    for col, why in reasons.items():
        r.add(why, col)
    return r.render() or None
