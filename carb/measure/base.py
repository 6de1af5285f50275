"""The meter abstraction: one object per device that measures a model the way the paper's Section 3.3
does, and knows what its device cannot report.

A :class:`Meter` runs one fixed protocol (:meth:`Meter.measure`) and delegates the device-specific
parts to small hooks that the backends (:class:`carb.measure.cpu.CpuMeter`,
:class:`carb.measure.cuda.CudaMeter`) implement:

1. cool-down: garbage-collect, empty the device cache, synchronize, sleep ``cooldown_s``;
2. move the model to the device and precision, eval mode, synthetic input ``(B, 3, H, W)``;
3. ``n_warmup`` forward passes (also used to estimate the time per batch);
4. peak memory over one forward (after a peak reset);
5. the timed loop: ``n_runs`` forwards between two synchronized reads of the clock and the energy
   counter. If the loop lasts less than ``min_window_s`` (the energy counter updates coarsely), it is
   repeated with more runs (up to ``max_runs``); the ``n_runs`` used, the window length
   (``window_s``) and its energy (``energy_window_J``) are recorded, and ``energy_J`` is the energy
   per batch (``energy_window_J / n_runs``). On the CPU a contention probe brackets the window: a
   window in which the process did not get its cores is measured again (``guard`` settings), and a
   row whose windows were all contended gets ``status=contended``. Temperature is the mean of a
   reading before and after the loop;
6. kernel launches over one forward (GPU only);
7. utilization sampled over ``util_window_s`` of training-mode forward+backward (GPU only).

Whatever a device cannot report is NaN with the reason in ``missing_reason`` (``"col, col: reason;
col: reason"``, see :func:`parse_missing_reason`), never 0. Units are in the names: seconds ``_s``,
milliseconds ``_ms``, joules ``_J``, MB = 2**20 bytes.

A meter is a context manager: leaving it (also by an exception or Ctrl-C) calls :meth:`Meter.close`,
which restores what the meter changed (GPU clocks, thread count, cudnn flags).
"""
from __future__ import annotations

import gc
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from carb.data.schema import RECORD, RUNTIME_FEATURES, TARGETS
from carb.design.arch import TORCH_DTYPES
from carb.errors import ConfigError

#: Columns a meter returns: the schema's runtime features, targets and measurement record, plus
#: ``missing_reason``.
MEASURED_COLUMNS: tuple[str, ...] = (*RUNTIME_FEATURES, *TARGETS, *RECORD, "missing_reason")
MB = 2.0**20
NAN = float("nan")
#: Orders of the collector's later passes (``measure.repeat.order``; :func:`carb.measure.collector.pass_order`).
REPEAT_ORDERS: tuple[str, ...] = ("rotated", "reversed", "shuffled")


@dataclass(frozen=True)
class MeasureSettings:
    """The measurement protocol (``conf/measure/*.yaml``).

    n_runs: batches in the timed loop (raised when the loop would be shorter than ``min_window_s``).
    n_warmup: forward passes before anything is measured.
    min_window_s: shortest timed loop, seconds (the NVML energy counter updates every ~10-100 ms).
    max_runs: upper bound for the raised ``n_runs``.
    util_window_s: seconds of training-mode forward+backward during which utilization is sampled
        (0 disables it; the columns are then NaN with a reason).
    util_interval_s: seconds between two utilization samples.
    cooldown_s: sleep before each configuration, after gc / empty_cache / synchronize.
    threads: CPU threads for torch (``torch.set_num_threads``); None = all cores this process may use.
    malloc_mmap_threshold_MB: CPU: glibc's mmap threshold for this process (``mallopt``), the trim
        threshold set to twice it; None leaves glibc's default, under which every allocation of
        32 MiB or more gets fresh pages (page faults and zeroing) on every forward.
    lock_clocks: lock GPU clocks (needs root); the previous application clocks are restored on exit,
        error and SIGTERM; a refusal is a one-line ConfigError. False (default) leaves clocks alone.
    sm_clock_MHz / mem_clock_MHz: clocks to lock (None = leave that clock unlocked).
    require_energy: on a GPU without the NVML energy counter, refuse to start (True) or record
        energy as missing (False).
    kernel_launches: count kernel launches with torch.profiler over one forward (GPU).
    rapl_root: the powercap folder read for CPU energy.
    guard: the CPU contention guard on (``guard.enabled``); a window is repeated when the measuring
        threads got less than ``guard_min_cpu_share`` of wall time x threads, or the hypervisor stole
        more than ``guard_max_steal_share`` of all cores' time; after ``guard_max_tries`` windows the
        row gets ``status=contended``. Shares are fractions in (0, 1].
    repeat_passes: passes of the collector over the rows (``repeat.passes``): each configuration's latency is
        the mean of one timed window per pass, and the passes' relative range is the row's
        ``latency_repeat_spread`` (:func:`carb.measure.collector.measure_configs`); 1 measures once.
    repeat_order: the order of each later pass (``repeat.order``): ``rotated`` (the first pass's order
        started at pass x N / passes: every row's windows at least N / passes rows apart), ``reversed`` or
        ``shuffled`` (seeded by the pass).
    """

    n_runs: int = 100
    n_warmup: int = 10
    min_window_s: float = 1.0
    max_runs: int = 10000
    util_window_s: float = 2.0
    util_interval_s: float = 0.05
    cooldown_s: float = 1.0
    threads: int | None = None
    lock_clocks: bool = False
    sm_clock_MHz: int | None = None
    mem_clock_MHz: int | None = None
    require_energy: bool = True
    kernel_launches: bool = True
    rapl_root: str = "/sys/class/powercap"
    guard: bool = True
    guard_min_cpu_share: float = 0.9
    guard_max_steal_share: float = 0.05
    guard_max_tries: int = 3
    malloc_mmap_threshold_MB: int | None = None
    repeat_passes: int = 1
    repeat_order: str = "rotated"

    def __post_init__(self) -> None:
        for name in ("n_runs", "max_runs"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"measure.{name}: must be an integer >= 1, got {getattr(self, name)!r}")
        if int(self.n_warmup) < 0:
            raise ConfigError(f"measure.n_warmup: must be an integer >= 0, got {self.n_warmup!r}")
        for name in ("min_window_s", "util_window_s", "cooldown_s"):
            if float(getattr(self, name)) < 0:
                raise ConfigError(f"measure.{name}: must be >= 0 seconds, got {getattr(self, name)!r}")
        if float(self.util_interval_s) <= 0:
            raise ConfigError(f"measure.util_interval_s: must be > 0 seconds, got {self.util_interval_s!r}")
        m = self.malloc_mmap_threshold_MB
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 4096):
            raise ConfigError(f"measure.malloc_mmap_threshold_MB: must be null or an integer in 1..4096 (MB), got {m!r}")
        if self.threads is not None and int(self.threads) < 1:
            raise ConfigError(f"measure.threads: must be null or an integer >= 1, got {self.threads!r}")
        for name in ("guard_min_cpu_share", "guard_max_steal_share"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) <= 1:
                raise ConfigError(f"measure.guard.{name[6:]}: must be a fraction in (0, 1], got {v!r}")
        if isinstance(self.guard_max_tries, bool) or int(self.guard_max_tries) < 1:
            raise ConfigError(f"measure.guard.max_tries: must be an integer >= 1, got {self.guard_max_tries!r}")
        if isinstance(self.repeat_passes, bool) or not isinstance(self.repeat_passes, int) or not 1 <= self.repeat_passes <= 10:
            raise ConfigError(f"measure.repeat.passes: must be an integer in 1..10, got {self.repeat_passes!r}")
        if self.repeat_order not in REPEAT_ORDERS:
            raise ConfigError(f"measure.repeat.order: {self.repeat_order!r} is not allowed; allowed: {list(REPEAT_ORDERS)}")
        for name in ("guard", "lock_clocks", "require_energy", "kernel_launches"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"measure.{name}: must be true or false, got {getattr(self, name)!r}")

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> "MeasureSettings":
        """Build from a (possibly nested) mapping such as the composed ``measure`` node.

        A nested ``clocks: {lock, sm_MHz, mem_MHz}`` maps to ``lock_clocks`` / ``sm_clock_MHz`` /
        ``mem_clock_MHz``. Unknown keys raise :class:`ConfigError` naming the allowed ones."""
        flat = dict(settings)
        clocks = flat.pop("clocks", None) or {}
        guard = flat.pop("guard", None)
        repeat = flat.pop("repeat", None) or {}
        for src, dst in (("passes", "repeat_passes"), ("order", "repeat_order")):
            if src in repeat:
                flat[dst] = repeat[src]
        if isinstance(guard, bool) or guard is None:
            guard = {} if guard is None else {"enabled": guard}
        for src, dst in (("lock", "lock_clocks"), ("sm_MHz", "sm_clock_MHz"), ("mem_MHz", "mem_clock_MHz")):
            if src in clocks:
                flat[dst] = clocks[src]
        for src, dst in (("enabled", "guard"), ("min_cpu_share", "guard_min_cpu_share"),
                         ("max_steal_share", "guard_max_steal_share"), ("max_tries", "guard_max_tries")):
            if src in guard:
                flat[dst] = guard[src]
        bad = sorted(f"clocks.{k}" for k in set(clocks) - {"lock", "sm_MHz", "mem_MHz"})
        bad += sorted(f"guard.{k}" for k in set(guard) - {"enabled", "min_cpu_share", "max_steal_share",
                                                           "max_tries"})
        bad += sorted(f"repeat.{k}" for k in set(repeat) - {"passes", "order"})
        allowed = [f.name for f in fields(cls) if not f.name.startswith(("guard", "repeat"))]
        bad += sorted(k for k in flat if k not in {f.name for f in fields(cls)})
        if bad:
            raise ConfigError(f"measure: unknown setting(s) {bad}; allowed: {allowed} "
                              f"(clocks: lock, sm_MHz, mem_MHz; guard: enabled, min_cpu_share, "
                              f"max_steal_share, max_tries; repeat: passes, order)")
        return cls(**flat)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def knobs_of(cfg: Any) -> tuple[int, int, str]:
    """``(batch_size, input_size, precision)`` of an :class:`~carb.design.arch.ArchConfig` (or any object
    with those attributes)."""
    try:
        return int(cfg.batch_size), int(cfg.input_size), str(cfg.precision)
    except AttributeError as e:
        raise ConfigError(f"measure: config needs batch_size, input_size and precision ({e})") from None


def torch_dtype(precision: str):
    """The torch dtype of a precision knob ('fp32' | 'fp16' | 'bf16')."""
    import torch

    if precision not in TORCH_DTYPES:
        raise ConfigError(f"precision: {precision!r} is not allowed; allowed: {list(TORCH_DTYPES)}")
    return getattr(torch, TORCH_DTYPES[precision])


class Reasons:
    """Collects ``column -> reason`` for NaN values and renders them grouped by reason."""

    def __init__(self) -> None:
        self._by_col: dict[str, str] = {}

    def add(self, reason: str, *columns: str) -> None:
        for c in columns:
            self._by_col.setdefault(c, " ".join(str(reason).split()))

    def render(self) -> str:
        groups: dict[str, list[str]] = {}
        for col, reason in self._by_col.items():
            groups.setdefault(reason, []).append(col)
        return "; ".join(f"{', '.join(cols)}: {reason}" for reason, cols in groups.items())


def parse_missing_reason(text: str | None) -> dict[str, str]:
    """Inverse of the ``missing_reason`` rendering: ``{"energy_J": "RAPL ...", ...}``."""
    out: dict[str, str] = {}
    if not text or (isinstance(text, float) and math.isnan(text)):
        return out
    groups: list[list[str]] = []
    for part in str(text).split("; "):
        if _GROUP_HEAD.match(part) or not groups:
            groups.append([part])
        else:  # a reason that itself contains "; "
            groups[-1].append(part)
    for g in groups:
        part = "; ".join(g)
        if ": " not in part:
            continue
        cols, reason = part.split(": ", 1)
        for c in cols.split(", "):
            out[c.strip()] = reason
    return out


#: The start of one ``missing_reason`` group: column names (identifiers) and ``: ``.
_GROUP_HEAD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(, [A-Za-z_][A-Za-z0-9_]*)*: ")


class LoopTimer:
    """Per-iteration wall-clock timer (``time.perf_counter``); the CUDA backend uses CUDA events."""

    def __init__(self) -> None:
        self._t: list[float] = []

    def mark(self) -> None:
        self._t.append(time.perf_counter())

    def intervals_ms(self) -> list[float]:
        """Milliseconds between consecutive marks (call after the final synchronize)."""
        return [(b - a) * 1e3 for a, b in zip(self._t, self._t[1:])]


#: How many times a too-short timed loop is lengthened before the row records the short window.
MAX_LENGTHENINGS = 4


@dataclass
class Window:
    """One accepted timed window: ``n`` batches in ``seconds``; ``iters_ms`` per batch; ``energy_J``
    the counter difference over the window (NaN when not measured); ``cpu_share`` / ``steal_share``
    from the contention probe (NaN where not applicable); ``tries`` windows measured; ``contended`` the
    guard's reason when no window passed."""

    n: int
    seconds: float
    iters_ms: list[float]
    energy_J: float
    cpu_share: float = NAN
    steal_share: float = NAN
    tries: int = 1
    contended: str | None = None


class ContentionProbe:
    """Interface of a contention probe: ``stop(wall_s)`` returns ``(cpu_share, steal_share)``."""

    def stop(self, wall_s: float) -> tuple[float, float]:  # pragma: no cover - interface
        raise NotImplementedError


def contention_reason(cpu_share: float, steal_share: float, settings: "MeasureSettings") -> str | None:
    """Why a window counts as contended under ``settings``' thresholds, or None when it is clean
    (NaN shares, where a device has no probe, are clean)."""
    parts = []
    if not math.isnan(cpu_share) and cpu_share < settings.guard_min_cpu_share:
        parts.append(f"cpu_share {cpu_share:.2f} < {settings.guard_min_cpu_share:g}")
    if not math.isnan(steal_share) and steal_share > settings.guard_max_steal_share:
        parts.append(f"steal_share {steal_share:.2f} > {settings.guard_max_steal_share:g}")
    return " and ".join(parts) or None


def warm_up(step: Callable[[], Any], sync: Callable[[], None], n_min: int, min_s: float = 0.0,
            clock: Callable[[], float] = time.perf_counter) -> list[float]:
    """Warm-up shared by both protocols: call ``step`` (then ``sync``) at least ``n_min`` times and for at
    least ``min_s`` seconds (the paper's protocol: a count, ``min_s=0``; the sweep: both). Returns the
    seconds of each call."""
    times: list[float] = []
    t_w = clock()
    while len(times) < n_min or clock() - t_w < min_s:
        t = clock()
        step()
        sync()
        times.append(clock() - t)
    return times


def tail_mean_s(times: list[float]) -> float:
    """Mean of the second half of warm-up call times (seconds per call, the first calls being slow)."""
    tail = times[len(times) // 2:]
    return sum(tail) / len(tail)


def forward_peak_MB(ops: Any, model: Any, x: Any) -> float:
    """Peak device memory (MB = 2**20 bytes) over one forward of ``x``, after a peak reset: the allocator's
    peak, as ``ops.max_allocated_bytes`` reports it (``ops``: ``sync``, ``reset_peak``,
    ``max_allocated_bytes``; :class:`carb.measure.cuda.TorchCudaOps` or a fake)."""
    ops.sync()
    ops.reset_peak()
    out = model(x)
    ops.sync()
    note = getattr(ops, "note_forward", None)   # a fake device without an allocator (fake_gpu.CpuOps)
    if note is not None:
        note(model, x, out)
    peak = ops.max_allocated_bytes() / MB
    del out
    return peak


class Meter:
    """Base class of the device backends. Subclasses set :attr:`kind` and implement the hooks."""

    kind = "abstract"

    def __init__(self, settings: MeasureSettings | Mapping[str, Any] | None = None) -> None:
        if settings is None:
            settings = MeasureSettings()
        elif not isinstance(settings, MeasureSettings):
            settings = MeasureSettings.from_mapping(settings)
        self.settings = settings
        self._closed = False
        #: Seconds spent inside the protocol by the last :meth:`measure` call, by phase.
        self.last_phases: dict[str, float] = {}

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "Meter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Restore what the meter changed. Idempotent."""
        self._closed = True

    # ------------------------------------------------------------------ hooks
    def device_facts(self) -> dict[str, Any]:
        """Identity of the device and the software: ``device_name``, ``device_kind``, ``driver``,
        ``torch_version``, ``cuda_version``, clocks, ``threads``, ... (JSON-serializable)."""
        raise NotImplementedError

    def identity(self) -> dict[str, str]:
        """The identity columns the dataset stores for each row of this device: ``device_name``,
        ``device_kind``, ``driver``, ``torch_version``, ``device_id`` and ``device_fingerprint``
        (canonical JSON of ``device_facts()["fingerprint"]``; see :mod:`carb.measure.fingerprint`), and
        ``session_id`` where the facts give one (the boot, :func:`carb.measure.fingerprint.session_id`)."""
        from carb.measure.fingerprint import canonical_json, device_id

        f = self.device_facts()
        out = {k: str(f.get(k, "unknown")) for k in ("device_name", "device_kind", "driver", "torch_version")}
        if f.get("session_id"):
            out["session_id"] = str(f["session_id"])
        fp = f.get("fingerprint")
        if fp:
            out["device_id"] = str(f.get("device_id") or device_id(fp))
            out["device_fingerprint"] = canonical_json(fp)
        return out

    def sync(self) -> None:
        """Wait for queued device work (no-op on CPU)."""

    def release(self) -> None:
        """Free what the last configuration left: gc and the device cache (also after an OOM)."""
        gc.collect()

    def cool_down(self) -> float:
        """gc, empty the device cache, synchronize, sleep ``cooldown_s``. Returns seconds spent."""
        t0 = time.perf_counter()
        self.release()
        self.sync()
        if self.settings.cooldown_s > 0:
            time.sleep(self.settings.cooldown_s)
        return time.perf_counter() - t0

    def prepare(self, model, cfg: Any):
        """Move/cast the model, eval mode; return ``(model, input)`` with input ``(B, 3, H, W)``."""
        raise NotImplementedError

    def make_timer(self) -> LoopTimer:
        return LoopTimer()

    def energy_snapshot(self) -> Any:
        """An opaque reading of the energy counter (None when energy is not measurable)."""
        return None

    def energy_since_J(self, snapshot: Any) -> float:
        """Joules consumed since ``snapshot`` (NaN when not measurable)."""
        return NAN

    def energy_missing_reason(self) -> str | None:
        """Why energy is not measured on this device, or None when it is."""
        return "no energy counter on this device"

    def read_temperature_C(self) -> float:
        return NAN

    def temperature_missing_reason(self) -> str | None:
        return "no GPU temperature sensor on this device"

    def peak_memory_MB(self, model, x) -> float:
        """Peak memory (MB) over one forward of ``x`` (no grad)."""
        raise NotImplementedError

    def kernel_launches(self, model, x) -> float:
        return NAN

    def kernel_launches_missing_reason(self) -> str | None:
        return "no GPU kernels on this device"

    def utilization(self, model, x) -> tuple[float, float]:
        """``(avg_sm_util %, avg_mem_util %)`` over the training-mode window."""
        return NAN, NAN

    def utilization_missing_reason(self) -> str | None:
        return "no GPU utilization counters on this device"

    def after_timed_loop(self) -> None:
        """Called right after the timed loop (the CUDA backend reads the clocks under load)."""

    def locked_clocks_MHz(self) -> tuple[float, float]:
        """``(sm, mem)`` clocks locked for the run, NaN where not locked."""
        return NAN, NAN

    def clocks_missing_reason(self) -> str | None:
        return None

    def threads(self) -> float:
        import torch

        return float(torch.get_num_threads())

    # ------------------------------------------------------------------ protocol
    def _timed_loop(self, step: Callable[[], Any], n: int) -> tuple[float, list[float], float]:
        """Run ``step`` n times between two synchronized reads. Returns ``(seconds, per-iteration ms,
        energy J)``."""
        timer = self.make_timer()
        self.sync()
        snap = self.energy_snapshot()
        t0 = time.perf_counter()
        for _ in range(n):
            timer.mark()
            step()
        timer.mark()
        self.sync()
        t1 = time.perf_counter()
        energy = self.energy_since_J(snap) if snap is not None else NAN
        return t1 - t0, timer.intervals_ms(), energy

    def _lengthened_window(self, step: Callable[[], Any], n: int) -> Window:
        """The timed loop, lengthened (at most :data:`MAX_LENGTHENINGS` times, up to ``max_runs``)
        until it lasts ``min_window_s``; the contention probe brackets the final try."""
        s = self.settings
        for attempt in range(MAX_LENGTHENINGS + 1):
            probe = self.contention_probe()
            duration, iters_ms, energy = self._timed_loop(step, n)
            share = probe.stop(duration) if probe is not None else (NAN, NAN)
            if duration >= s.min_window_s or n >= s.max_runs or attempt == MAX_LENGTHENINGS:
                break
            n = int(min(s.max_runs, max(n + 1, math.ceil(1.1 * n * s.min_window_s / max(duration, 1e-9)))))
        return Window(n, duration, iters_ms, energy, share[0], share[1])

    def _guarded_window(self, step: Callable[[], Any], n: int) -> Window:
        """A timed window the contention guard accepts: a window in which the measuring threads got
        less than ``guard.min_cpu_share`` of their cores (or the hypervisor stole more than
        ``guard.max_steal_share``) is measured again, up to ``guard.max_tries`` windows; the last
        one is returned with ``contended`` set when none passed."""
        g = self.settings
        w = self._lengthened_window(step, n)
        tries = 1
        while True:
            why = contention_reason(w.cpu_share, w.steal_share, g) if g.guard else None
            if why is None:
                w.tries = tries
                return w
            if tries >= g.guard_max_tries:
                w.tries = tries
                w.contended = f"contention guard: {why} in all {tries} windows"
                return w
            tries += 1
            w = self._lengthened_window(step, w.n)

    def contention_probe(self) -> ContentionProbe | None:
        """A started probe of the CPU time this process gets (CPU backend); None where not applicable."""
        return None

    def observed_clocks(self) -> dict[str, Any]:
        """``sm_clock_MHz``, ``mem_clock_MHz`` (NaN) and ``throttle_reasons`` (None) observed under
        load; the CUDA backend reads them after the timed loop."""
        return {"sm_clock_MHz": NAN, "mem_clock_MHz": NAN, "throttle_reasons": None}

    def extra_reasons(self) -> dict[str, str]:
        """``column -> reason`` for fallbacks a backend took in the last measurement (e.g. utilization
        measured in eval mode), added to ``missing_reason``."""
        return {}

    def runs_for(self, per_batch_s: float) -> int:
        """``n_runs`` raised so that the timed loop lasts at least ``min_window_s`` (5 % margin)."""
        s = self.settings
        n = s.n_runs
        if per_batch_s > 0 and s.min_window_s > 0:
            n = max(n, math.ceil(1.05 * s.min_window_s / per_batch_s))
        return int(min(max(n, 1), s.max_runs))

    def measure(self, model, cfg: Any) -> dict[str, Any]:
        """Measure ``model`` (an ``nn.Module``, fp32 on the CPU, as built) for the batch size, input
        size and precision of ``cfg``. Returns exactly :data:`MEASURED_COLUMNS`.

        Exceptions (including out-of-memory) propagate; the collector turns them into rows."""
        import torch

        t_start = time.perf_counter()
        phases: dict[str, float] = {}
        reasons = Reasons()
        s = self.settings
        phases["cooldown_s"] = self.cool_down()
        t = time.perf_counter()
        model, x = self.prepare(model, cfg)
        phases["prepare_s"] = time.perf_counter() - t

        t = time.perf_counter()
        with torch.no_grad():
            step = lambda: model(x)  # noqa: E731
            per_batch = 0.0
            if s.n_warmup:
                per_batch = tail_mean_s(warm_up(step, self.sync, s.n_warmup))
            phases["warmup_s"] = time.perf_counter() - t

            t = time.perf_counter()
            peak = self.peak_memory_MB(model, x)
            phases["peak_memory_s"] = time.perf_counter() - t

            t = time.perf_counter()
            n = self.runs_for(per_batch)
            temp0 = self.read_temperature_C()
            window = self._guarded_window(step, n)
            n, duration, iters_ms, energy = window.n, window.seconds, window.iters_ms, window.energy_J
            temp1 = self.read_temperature_C()
            self.after_timed_loop()
            phases["timed_loop_s"] = time.perf_counter() - t

            t = time.perf_counter()
            kernels = NAN
            if s.kernel_launches:
                kernels = self.kernel_launches(model, x)
            phases["kernel_launches_s"] = time.perf_counter() - t

        t = time.perf_counter()
        sm_util, mem_util = NAN, NAN
        if s.util_window_s > 0:
            sm_util, mem_util = self.utilization(model, x)
        phases["utilization_s"] = time.perf_counter() - t
        del x

        if duration < s.min_window_s:
            cap = (f"max_runs={s.max_runs} reached" if n >= s.max_runs
                   else f"window still short after {MAX_LENGTHENINGS} lengthenings")
            reasons.add(f"timed loop of {n} runs lasted {duration:.3f} s < min_window_s={s.min_window_s} "
                        f"({cap})", "energy_J", "energy_window_J", "avg_power_W")
            energy = NAN
        if math.isnan(energy):
            reasons.add(self.energy_missing_reason() or "energy counter gave no reading", "energy_J",
                        "energy_window_J", "avg_power_W")
        elif energy <= 0:
            reasons.add(f"energy counter did not advance over the {duration:.3f} s loop", "energy_J",
                        "energy_window_J", "avg_power_W")
            energy = NAN
        temp = (temp0 + temp1) / 2.0
        if math.isnan(temp):
            reasons.add(self.temperature_missing_reason() or "no temperature reading", "gpu_temp_C")
        if math.isnan(kernels):
            reasons.add("disabled (measure.kernel_launches=false)" if not s.kernel_launches
                        else self.kernel_launches_missing_reason() or "profiler gave no count",
                        "kernel_launches")
        if math.isnan(sm_util) or math.isnan(mem_util):
            why = ("disabled (measure.util_window_s=0)" if s.util_window_s <= 0
                   else self.utilization_missing_reason() or "no utilization samples")
            if math.isnan(sm_util):
                reasons.add(why, "avg_sm_util")
            if math.isnan(mem_util):
                reasons.add(why, "avg_mem_util")
        if math.isnan(peak):
            reasons.add("peak memory not measurable on this device", "peak_memory_MB")
        sm_clk, mem_clk = self.locked_clocks_MHz()
        clk_reason = self.clocks_missing_reason()
        if clk_reason:
            if math.isnan(sm_clk):
                reasons.add(clk_reason, "locked_sm_clock_MHz")
            if math.isnan(mem_clk):
                reasons.add(clk_reason, "locked_mem_clock_MHz")
        if window.contended:
            reasons.add(window.contended, "cpu_share")
        for col, reason in self.extra_reasons().items():
            reasons.add(reason, col)
        mean_ms = duration * 1e3 / n
        std_ms = _std(iters_ms)
        out = {
            "avg_sm_util": sm_util, "avg_mem_util": mem_util, "gpu_temp_C": temp,
            "kernel_launches": kernels,
            "peak_memory_MB": peak, "energy_J": energy / n if not math.isnan(energy) else NAN,
            "latency_ms": mean_ms,
            "n_runs": float(n), "n_warmup": float(s.n_warmup), "latency_std_ms": std_ms,
            "energy_window_J": energy, "window_s": duration,
            "avg_power_W": energy / duration if not math.isnan(energy) and duration > 0 else NAN,
            "locked_sm_clock_MHz": sm_clk, "locked_mem_clock_MHz": mem_clk,
            **self.observed_clocks(),
            "cpu_share": window.cpu_share, "steal_share": window.steal_share,
            "n_windows": float(window.tries), "threads": self.threads(),
            "protocol_s": time.perf_counter() - t_start,
            "missing_reason": reasons.render() or None,
        }
        if window.contended:
            out["status"] = "contended"
            out["error"] = window.contended
        phases["protocol_s"] = out["protocol_s"]
        self.last_phases = phases
        return out


def _std(values: list[float]) -> float:
    """Sample standard deviation (ddof=1); NaN for fewer than two values."""
    n = len(values)
    if n < 2:
        return NAN
    m = sum(values) / n
    return math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))


def error_line(exc: BaseException, limit: int = 500) -> str:
    """One line: ``Type: message`` (whitespace collapsed, truncated)."""
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg}"[:limit] if msg else type(exc).__name__


def is_oom(exc: BaseException) -> bool:
    """True for out-of-memory errors: ``torch.cuda.OutOfMemoryError``, a RuntimeError saying
    'out of memory', the CPU allocator's "can't allocate memory", or ``MemoryError``."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    if isinstance(exc, RuntimeError):
        msg = str(exc).lower()
        return "out of memory" in msg or "can't allocate memory" in msg or "cannot allocate memory" in msg
    return False
