"""Energy from a coarsely updating cumulative counter, measured between its update edges.

NVML's total-energy counter (mJ) changes only every few tens of milliseconds (about 100 ms on some
boards). The difference of two reads around an unaligned window is off by up to one update period
of energy at each end: a 1 s window at 400 W with a 100 ms counter is off by -7 % to +6 %. Estimating
the power between the first and last *update edges* inside the window, and multiplying by the window
length, removes that error (+-0.2 % with a 0.6 s window in simulation).

:class:`CounterSampler` polls a counter (``read_mJ()``) and keeps the edges: the times at which a read
saw a new value, with that value. It polls from a daemon thread (:meth:`CounterSampler.start`), as
Zeus does for power, or synchronously through :meth:`CounterSampler.poll` (how the replay tests drive
it on a virtual clock). Optional side readers (utilization, temperature) are sampled on the same
ticks, so those figures come from the same window as the energy. :func:`window_energy_J` turns the
edges inside ``[t0, t1]`` into joules. Nothing here imports torch or pynvml.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Edge:
    """A counter update seen by a poll: ``t_s`` (the sampler's clock, s) and the new value ``mJ``."""

    t_s: float
    mJ: float


@dataclass
class CounterSampler:
    """Polls ``read_mJ`` every ``poll_s`` (thread) or on :meth:`poll`; records update edges and, on the
    same ticks, ``side`` readers (name -> callable returning a float, e.g. SM utilization %).

    ``clock``: seconds (default ``time.perf_counter``; tests pass a virtual clock). ``keep_trace``:
    also keep every poll ``(t_s, mJ)`` for the returned trace file (bounded by ``max_trace``)."""

    read_mJ: Callable[[], float]
    clock: Callable[[], float] = time.perf_counter
    poll_s: float = 0.002
    side: Mapping[str, Callable[[], float]] = field(default_factory=dict)
    keep_trace: bool = False
    max_trace: int = 200_000
    edges: list[Edge] = field(default_factory=list)
    side_samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    trace: list[tuple[float, float]] = field(default_factory=list)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._last: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def poll(self) -> None:
        """One read of the counter (and the side readers); an edge is recorded when the value changed."""
        v = float(self.read_mJ())
        t = self.clock()
        side = {k: float(f()) for k, f in self.side.items()} if self.side else None
        with self._lock:
            if self._last is None or v != self._last:
                self.edges.append(Edge(t, v))
                self._last = v
            if side is not None:
                self.side_samples.append((t, side))
            if self.keep_trace and len(self.trace) < self.max_trace:
                self.trace.append((t, v))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll()
            except BaseException as e:  # noqa: BLE001 - handed to the caller by stop()/check()
                self.error = e
                return
            self._stop.wait(self.poll_s)

    def start(self) -> "CounterSampler":
        """Poll in a daemon thread until :meth:`stop`."""
        self.poll()
        self._thread = threading.Thread(target=self._run, name="carb-energy-counter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread; re-raise an error it met."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self.check()

    def check(self) -> None:
        """Re-raise the polling thread's error, if any."""
        if self.error is not None:
            raise self.error

    def edges_between(self, t0: float, t1: float) -> list[Edge]:
        """Edges with ``t0 <= t_s <= t1``."""
        with self._lock:
            return [e for e in self.edges if t0 <= e.t_s <= t1]

    def side_means(self, t0: float, t1: float) -> dict[str, float]:
        """Mean of each side reader over the ticks inside ``[t0, t1]`` (NaN without ticks)."""
        with self._lock:
            rows = [s for t, s in self.side_samples if t0 <= t <= t1]
        return {k: (sum(r[k] for r in rows) / len(rows) if rows else math.nan) for k in self.side}

    def update_period_s(self) -> float:
        """Median time between consecutive edges (s); NaN with fewer than 3 edges."""
        with self._lock:
            ts = [e.t_s for e in self.edges]
        d = sorted(b - a for a, b in zip(ts, ts[1:]))
        return d[len(d) // 2] if len(d) >= 2 else math.nan

    def drop_before(self, t: float) -> None:
        """Forget edges and side samples older than ``t`` (keeps memory flat over a long run; the last
        edge before ``t`` is kept as the reference value)."""
        with self._lock:
            old = [e for e in self.edges if e.t_s < t]
            self.edges = old[-1:] + [e for e in self.edges if e.t_s >= t]
            self.side_samples = [s for s in self.side_samples if s[0] >= t]


def window_energy_J(edges: list[Edge], t0: float, t1: float) -> tuple[float, str | None]:
    """Energy over ``[t0, t1]`` (J) from the counter's update edges inside it: the mean power between
    the first and the last edge (``(E_last - E_first) / (t_last - t_first)``, mJ/s) times the window
    length. Returns ``(energy_J, None)``, or ``(NaN, reason)`` with fewer than two edges inside."""
    inside = [e for e in edges if t0 <= e.t_s <= t1]
    if len(inside) < 2:
        return math.nan, f"fewer than 2 energy-counter updates inside the {t1 - t0:.3f} s window"
    first, last = inside[0], inside[-1]
    if last.t_s <= first.t_s:
        return math.nan, "energy-counter edges without elapsed time"
    power_W = (last.mJ - first.mJ) / 1000.0 / (last.t_s - first.t_s)
    if power_W <= 0:
        return math.nan, "energy counter did not advance inside the window"
    return power_W * (t1 - t0), None


def window_runs(latency_s: float, period_s: float, k_periods: float, m_latencies: float, min_runs: int = 3,
                max_runs: int = 100_000) -> int:
    """Batches in a timed window of ``max(k_periods x period, m_latencies x latency)`` seconds (at least
    ``min_runs``). With an unknown period (NaN) only the latency term counts."""
    window = m_latencies * latency_s
    if math.isfinite(period_s):
        window = max(window, k_periods * period_s)
    n = math.ceil(window / latency_s - 1e-9) if latency_s > 0 else min_runs
    return int(min(max(n, min_runs), max_runs))


def summary(sampler: CounterSampler) -> dict[str, Any]:
    """What the sampler saw over its lifetime: edges, median update period (ms), polls kept."""
    return {"n_edges": len(sampler.edges), "update_period_ms": 1e3 * sampler.update_period_s(),
            "n_trace": len(sampler.trace), "poll_s": sampler.poll_s}
