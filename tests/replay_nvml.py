"""A replayed GPU for tests of the lent-GPU protocol without a GPU: a virtual clock, an energy counter
that steps at update edges on that clock (constant power, or a recorded trace), and fake ops whose
"forward pass" advances the clock by a given latency while the counter's poller ticks (as the real
background thread would)."""
from __future__ import annotations

import math


class VirtualClock:
    """Seconds that pass only when something advances them."""

    def __init__(self, t0: float = 1000.0) -> None:
        self.t = t0

    def __call__(self) -> float:
        return self.t


class SteppingCounter:
    """``read_mJ()``: the energy at the last update edge, edges every ``period_s`` (phase ``phase_s``)
    at ``power_W``; or, with ``trace`` ([(t_s, mJ), ...] recorded on a real device), the trace's value at
    the clock's time (offset so the trace starts at the clock's start)."""

    def __init__(self, clock: VirtualClock, period_s: float = 0.1, power_W: float = 400.0, phase_s: float = 0.0,
                 trace: list[tuple[float, float]] | None = None) -> None:
        self.clock, self.period_s, self.power_W, self.phase_s = clock, period_s, power_W, phase_s
        self.trace, self.t_start = trace, clock()

    def read_mJ(self) -> float:
        t = self.clock() - self.t_start
        if self.trace:
            t0 = self.trace[0][0]
            last = self.trace[0][1]
            for ts, v in self.trace:
                if ts - t0 > t:
                    break
                last = v
            return last
        k = math.floor((t + self.phase_s) / self.period_s)
        return 1000.0 * self.power_W * self.period_s * k


class FakeModel:
    """A forward pass that takes ``latency_s`` on the virtual clock, polling ``sampler`` every ``tick_s``
    meanwhile (the real sampler polls from its own thread)."""

    def __init__(self, clock: VirtualClock, latency_s: float, sampler=None, tick_s: float = 0.001) -> None:
        self.clock, self.latency_s, self.sampler, self.tick_s = clock, latency_s, sampler, tick_s
        self.calls = 0

    def __call__(self, x=None):
        self.calls += 1
        left = self.latency_s
        while left > 1e-12:
            dt = min(self.tick_s, left)
            self.clock.t += dt
            left -= dt
            if self.sampler is not None:
                self.sampler.poll()
        return None


class FakeOps:
    """``ops`` for :func:`carb.measure.sweep.measure_config`: nothing to synchronize, a fixed peak."""

    device = "cpu"

    def __init__(self, peak_bytes: int = 64 << 20) -> None:
        self.peak_bytes = peak_bytes

    def sync(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def reset_peak(self) -> None:
        pass

    def max_allocated_bytes(self) -> int:
        return self.peak_bytes


class FakeGpu:
    """``gpu`` readings besides the counter."""

    def __init__(self, counter: SteppingCounter) -> None:
        self.counter = counter

    def read_energy_mJ(self) -> float:
        return self.counter.read_mJ()

    def utilization_pct(self) -> tuple[float, float]:
        return 90.0, 50.0

    def temperature_C(self) -> float:
        return 50.0

    def clocks_MHz(self) -> dict:
        return {"sm": 1980.0, "mem": 3201.0}

    def throttle_reasons(self) -> str:
        return "none"
