"""NVML access for the CUDA backend: energy counter, temperature, utilization sampling, clocks
observed under load with their throttle reasons, and (only when asked) clock locking, with every
``NVMLError`` turned into a one-line :class:`~carb.errors.MeasurementError`.

``import pynvml`` comes from the ``nvidia-ml-py`` package (the ``pynvml`` package on PyPI is a
deprecated wrapper of it). Nothing here imports torch, so the logic is testable with a mocked
``pynvml`` module (``sys.modules["pynvml"] = fake`` or the ``nvml=`` argument).

Rules implemented here (what users of energy tools trip over):

- the total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since driver load)
  exists on Volta and newer; :meth:`NvmlDevice.energy_support` checks it once;
- clocks are global device state: nothing here changes them unless :meth:`NvmlDevice.lock_clocks` is
  called (``measure.clocks.lock=true``). It first reads the previous state (application clocks and
  their defaults; NVML has no getter for an existing clock lock, so that is recorded as unknown),
  then locks graphics (SM) and optionally memory clocks. A refusal (no permission, not supported)
  raises :class:`~carb.errors.ConfigError` naming ``measure.clocks.lock`` (nothing measured yet).
  The previous state is ALWAYS restored: by :meth:`NvmlDevice.close` (called by ``with`` on any
  exception and on Ctrl-C, which raises KeyboardInterrupt), by an ``atexit`` hook, and on SIGTERM (a
  handler that raises ``SystemExit`` so the same cleanup runs). Restoring resets the locks, then
  re-applies the previous application clocks where they were not the defaults (else resets them);
  each step's failure is a warning;
- throttle reasons (``nvmlDeviceGetCurrentClocksEventReasons``, older drivers
  ``...ThrottleReasons``) are decoded to names (:data:`THROTTLE_REASONS`);
- utilization is sampled in a background thread (:class:`UtilizationSampler`).
"""
from __future__ import annotations

import atexit
import signal
import threading
import time
import warnings
from typing import Any

from carb.errors import ConfigError, MeasurementError


def load_pynvml():
    """Import ``pynvml`` (package ``nvidia-ml-py``) or raise :class:`MeasurementError`."""
    try:
        import pynvml
    except ImportError:
        raise MeasurementError("device: cuda needs NVML; install nvidia-ml-py (provides `import pynvml`)") from None
    return pynvml


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _err_text(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


#: NVML clock event (throttle) reason bits and their names in ``throttle_reasons``.
THROTTLE_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)


def decode_throttle_reasons(mask: int) -> str:
    """Names of the set bits of an NVML clock event reason mask, comma-joined (``"none"`` for 0;
    unknown bits as hex)."""
    mask = int(mask)
    if mask == 0:
        return "none"
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in THROTTLE_REASONS)
    if rest:
        names.append(hex(rest))
    return ",".join(names)


class NvmlDevice:
    """One GPU seen through NVML.

    index: NVML device index (used when ``uuid`` is None or not found).
    uuid: the device UUID as torch reports it (``GPU-`` prefix optional); maps torch's device to NVML's
        even when ``CUDA_VISIBLE_DEVICES`` reorders devices.
    nvml: the pynvml module (injectable for tests).
    """

    def __init__(self, index: int = 0, uuid: str | None = None, nvml: Any = None) -> None:
        self.nvml = nvml if nvml is not None else load_pynvml()
        self.index = int(index)
        self._initialized = False
        self._locked_sm: int | None = None
        self._locked_mem: int | None = None
        self._lock_reason: str | None = None
        self._previous: dict[str, Any] | None = None
        self._restore_pending = False
        self._atexit = False
        self._prev_sigterm: Any = None
        self._sigterm_installed = False
        self.call("nvmlInit", self.nvml.nvmlInit)
        self._initialized = True
        self.handle = None
        if uuid:
            u = uuid if str(uuid).startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            try:
                self.handle = self.nvml.nvmlDeviceGetHandleByUUID(u)
            except Exception:
                self.handle = None
        if self.handle is None:
            self.handle = self.call(f"nvmlDeviceGetHandleByIndex({self.index})",
                                    self.nvml.nvmlDeviceGetHandleByIndex, self.index)

    # ------------------------------------------------------------------ plumbing
    def call(self, what: str, fn, *args):
        """Call an NVML function; an ``NVMLError`` becomes a one-line :class:`MeasurementError`."""
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            raise MeasurementError(f"NVML {what} failed on GPU {self.index}: {_err_text(e)}") from None

    def _is(self, e: BaseException, const: str) -> bool:
        return getattr(e, "value", None) == getattr(self.nvml, const, object())

    def __enter__(self) -> "NvmlDevice":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Restore the clocks (if this object locked them) and shut NVML down. Idempotent; never raises."""
        self.restore_clocks()
        if self._initialized:
            self._initialized = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - cleanup must not mask the original error
                pass

    # ------------------------------------------------------------------ facts
    def name(self) -> str:
        return _text(self.call("nvmlDeviceGetName", self.nvml.nvmlDeviceGetName, self.handle))

    def driver_version(self) -> str:
        return _text(self.call("nvmlSystemGetDriverVersion", self.nvml.nvmlSystemGetDriverVersion))

    def clocks_MHz(self) -> dict[str, float]:
        """Current SM and memory clocks, MHz."""
        n = self.nvml
        return {"sm": float(self.call("nvmlDeviceGetClockInfo(SM)", n.nvmlDeviceGetClockInfo, self.handle,
                                      n.NVML_CLOCK_SM)),
                "mem": float(self.call("nvmlDeviceGetClockInfo(MEM)", n.nvmlDeviceGetClockInfo, self.handle,
                                       n.NVML_CLOCK_MEM))}

    def max_clocks_MHz(self) -> dict[str, float]:
        n = self.nvml
        return {"sm": float(self.call("nvmlDeviceGetMaxClockInfo(SM)", n.nvmlDeviceGetMaxClockInfo,
                                      self.handle, n.NVML_CLOCK_SM)),
                "mem": float(self.call("nvmlDeviceGetMaxClockInfo(MEM)", n.nvmlDeviceGetMaxClockInfo,
                                       self.handle, n.NVML_CLOCK_MEM))}

    def power_limit_W(self) -> float | None:
        try:
            return float(self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle)) / 1000.0
        except Exception:  # noqa: BLE001 - optional fact
            return None

    def application_clocks_MHz(self) -> dict[str, float | None]:
        """Current application clocks (SM, memory) and their defaults, MHz; None where unreadable."""
        n = self.nvml
        out: dict[str, float | None] = {}
        for key, fn_name, clk in (("sm", "nvmlDeviceGetApplicationsClock", n.NVML_CLOCK_SM),
                                  ("mem", "nvmlDeviceGetApplicationsClock", n.NVML_CLOCK_MEM),
                                  ("default_sm", "nvmlDeviceGetDefaultApplicationsClock", n.NVML_CLOCK_SM),
                                  ("default_mem", "nvmlDeviceGetDefaultApplicationsClock", n.NVML_CLOCK_MEM)):
            try:
                out[key] = float(getattr(n, fn_name)(self.handle, clk))
            except Exception:  # noqa: BLE001 - optional fact (not supported on many boards)
                out[key] = None
        return out

    def throttle_reasons(self) -> str | None:
        """The current clock event (throttle) reasons decoded to names (``"none"`` when no bit is set),
        or None when neither NVML call is supported."""
        for fn_name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            fn = getattr(self.nvml, fn_name, None)
            if fn is None:
                continue
            try:
                return decode_throttle_reasons(fn(self.handle))
            except Exception:  # noqa: BLE001, S112 - unsupported: try the older name, then give None
                continue
        return None

    # ------------------------------------------------------------------ energy
    def energy_support(self) -> tuple[bool, str | None]:
        """Whether the total-energy counter is readable: ``(True, None)`` or ``(False, reason)``."""
        try:
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            return True, None
        except self.nvml.NVMLError as e:
            if self._is(e, "NVML_ERROR_NOT_SUPPORTED"):
                return False, (f"NVML total-energy counter not supported on {self.name()} "
                               f"(needs Volta or newer)")
            return False, f"NVML total-energy counter not readable: {_err_text(e)}"

    def check_energy_support(self) -> None:
        """Raise :class:`MeasurementError` when the energy counter is not available."""
        ok, reason = self.energy_support()
        if not ok:
            raise MeasurementError(f"device: {reason}; set measure.require_energy=false to record "
                                   f"energy as missing instead")

    def read_energy_mJ(self) -> int:
        """Total energy since the driver loaded, millijoules."""
        return int(self.call("nvmlDeviceGetTotalEnergyConsumption",
                             self.nvml.nvmlDeviceGetTotalEnergyConsumption, self.handle))

    def read_energy_J(self) -> float:
        """Total energy since the driver loaded, joules."""
        return self.read_energy_mJ() / 1000.0

    @staticmethod
    def energy_between_J(before_mJ: int, after_mJ: int) -> float:
        """Joules between two counter readings (mJ)."""
        return (int(after_mJ) - int(before_mJ)) / 1000.0

    # ------------------------------------------------------------------ sensors
    def temperature_C(self) -> float:
        n = self.nvml
        return float(self.call("nvmlDeviceGetTemperature", n.nvmlDeviceGetTemperature, self.handle,
                               n.NVML_TEMPERATURE_GPU))

    def utilization_pct(self) -> tuple[float, float]:
        """``(sm %, memory %)`` as NVML's last sample period reports them."""
        r = self.call("nvmlDeviceGetUtilizationRates", self.nvml.nvmlDeviceGetUtilizationRates, self.handle)
        return float(r.gpu), float(r.memory)

    # ------------------------------------------------------------------ clocks
    @property
    def locked_clocks_MHz(self) -> tuple[int | None, int | None]:
        return self._locked_sm, self._locked_mem

    @property
    def lock_reason(self) -> str | None:
        """Why the requested clocks are not locked (None when locked or not requested)."""
        return self._lock_reason

    @property
    def previous_clocks(self) -> dict[str, Any] | None:
        """The state read before locking (``app_sm``, ``app_mem``, ``default_sm``, ``default_mem``
        MHz or None, ``locked``: None as NVML cannot read an existing lock); None when never locked."""
        return self._previous

    def lock_clocks(self, sm_MHz: int | None, mem_MHz: int | None = None) -> dict[str, Any]:
        """Lock SM (and memory) clocks to the given MHz, after reading the previous state (restored by
        :meth:`restore_clocks`). A refusal (no permission, not supported) restores what was locked
        and raises :class:`ConfigError` naming ``measure.clocks.lock``.

        Returns ``{"sm_locked_MHz", "mem_locked_MHz", "reason", "actual": {"sm", "mem"}, "previous"}``."""
        n = self.nvml
        app = self.application_clocks_MHz()
        self._previous = {"app_sm": app.get("sm"), "app_mem": app.get("mem"),
                          "default_sm": app.get("default_sm"), "default_mem": app.get("default_mem"),
                          "locked": None}
        self._restore_pending = True
        self._arm_restore()
        problems = []
        if sm_MHz is not None:
            try:
                n.nvmlDeviceSetGpuLockedClocks(self.handle, int(sm_MHz), int(sm_MHz))
                self._locked_sm = int(sm_MHz)
            except (n.NVMLError, AttributeError) as e:
                problems.append(f"SM clock {int(sm_MHz)} MHz refused ({_err_text(e)})")
        if mem_MHz is not None and not problems:
            try:
                n.nvmlDeviceSetMemoryLockedClocks(self.handle, int(mem_MHz), int(mem_MHz))
                self._locked_mem = int(mem_MHz)
            except (n.NVMLError, AttributeError) as e:
                problems.append(f"memory clock {int(mem_MHz)} MHz refused ({_err_text(e)})")
        if problems:
            self.restore_clocks()
            raise ConfigError(
                f"measure.clocks.lock: locking the clocks of GPU {self.index} was refused "
                f"({'; '.join(problems)}); it needs root (or clock permission) on a GPU that supports it; "
                f"the default measure.clocks.lock=false leaves the clocks alone")
        try:
            actual = self.clocks_MHz()
        except MeasurementError:
            actual = {"sm": float("nan"), "mem": float("nan")}
        return {"sm_locked_MHz": self._locked_sm, "mem_locked_MHz": self._locked_mem,
                "reason": self._lock_reason, "actual": actual, "previous": dict(self._previous)}

    def _arm_restore(self) -> None:
        if not self._atexit:
            atexit.register(self.restore_clocks)
            self._atexit = True
        if threading.current_thread() is threading.main_thread() and not self._sigterm_installed:
            try:
                self._prev_sigterm = signal.getsignal(signal.SIGTERM)
                signal.signal(signal.SIGTERM, self._on_sigterm)
                self._sigterm_installed = True
            except (ValueError, OSError):  # not allowed here (embedded interpreter)
                pass

    def _on_sigterm(self, signum, frame) -> None:
        self.restore_clocks()
        raise SystemExit(128 + signum)

    def _warn(self, what: str, e: BaseException) -> None:
        warnings.warn(f"GPU {self.index}: could not {what}: {_err_text(e)}", RuntimeWarning, stacklevel=3)

    def restore_clocks(self) -> None:
        """Restore the state :meth:`lock_clocks` found: reset the SM and memory clock locks, then
        re-apply the previous application clocks where they were not the defaults (else reset them).
        Each failing step is a warning. Idempotent; never raises; does nothing when never locked."""
        n = self.nvml
        if self._restore_pending:
            self._restore_pending = False
            if self._locked_sm is not None:
                try:
                    n.nvmlDeviceResetGpuLockedClocks(self.handle)
                except Exception as e:  # noqa: BLE001
                    self._warn("reset the SM clock lock", e)
            if self._locked_mem is not None:
                try:
                    n.nvmlDeviceResetMemoryLockedClocks(self.handle)
                except Exception as e:  # noqa: BLE001
                    self._warn("reset the memory clock lock", e)
            prev = self._previous or {}
            sm, mem = prev.get("app_sm"), prev.get("app_mem")
            custom = (sm is not None and mem is not None
                      and (sm != prev.get("default_sm") or mem != prev.get("default_mem")))
            try:
                if custom:
                    n.nvmlDeviceSetApplicationsClocks(self.handle, int(mem), int(sm))
                else:
                    n.nvmlDeviceResetApplicationsClocks(self.handle)
            except Exception as e:  # noqa: BLE001
                self._warn("restore the previous application clocks" if custom
                           else "reset the application clocks", e)
        self._locked_sm = None
        self._locked_mem = None
        if self._atexit:
            atexit.unregister(self.restore_clocks)
            self._atexit = False
        if self._sigterm_installed and threading.current_thread() is threading.main_thread():
            try:
                signal.signal(signal.SIGTERM, self._prev_sigterm if self._prev_sigterm is not None
                              else signal.SIG_DFL)
            except (ValueError, OSError, TypeError):
                pass
            self._sigterm_installed = False


class UtilizationSampler:
    """Samples ``nvmlDeviceGetUtilizationRates`` every ``interval_s`` in a daemon thread between
    :meth:`start` and :meth:`stop`; ``stop()`` returns ``(mean sm %, mean memory %, n samples)``.
    An NVML error in the thread is re-raised by ``stop()``."""

    def __init__(self, device: NvmlDevice, interval_s: float = 0.05) -> None:
        self.device = device
        self.interval_s = float(interval_s)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="carb-nvml-util", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.device.utilization_pct())
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                self._error = e
                return
            self._stop.wait(self.interval_s)

    def start(self) -> "UtilizationSampler":
        self._thread.start()
        return self

    def stop(self) -> tuple[float, float, int]:
        self._stop.set()
        self._thread.join(timeout=5.0)
        if self._error is not None:
            raise self._error
        if not self.samples:
            return float("nan"), float("nan"), 0
        sm = sum(s[0] for s in self.samples) / len(self.samples)
        mem = sum(s[1] for s in self.samples) / len(self.samples)
        return sm, mem, len(self.samples)


def measure_energy_update_period(device: NvmlDevice, seconds: float = 3.0, poll_s: float = 0.0005) -> dict[str, Any]:
    """Poll the energy counter for ``seconds`` and report how often its value changes.

    Run it while the GPU is busy (an idle GPU's counter may advance slowly). Returns
    ``{"n_polls", "n_updates", "median_period_ms", "min_period_ms", "max_period_ms", "seconds"}``."""
    t_end = time.perf_counter() + seconds
    last = device.read_energy_mJ()
    changes: list[float] = []
    polls = 0
    while time.perf_counter() < t_end:
        v = device.read_energy_mJ()
        polls += 1
        if v != last:
            changes.append(time.perf_counter())
            last = v
        if poll_s:
            time.sleep(poll_s)
    periods = sorted((b - a) * 1e3 for a, b in zip(changes, changes[1:]))
    med = periods[len(periods) // 2] if periods else float("nan")
    return {"n_polls": polls, "n_updates": len(changes), "median_period_ms": med,
            "min_period_ms": periods[0] if periods else float("nan"),
            "max_period_ms": periods[-1] if periods else float("nan"), "seconds": seconds}
