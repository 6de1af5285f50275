"""NVML access for the CUDA backend: energy counter, temperature, utilization sampling and clock
locking, with every ``NVMLError`` turned into a one-line :class:`~carb.errors.MeasurementError`.

``import pynvml`` comes from the ``nvidia-ml-py`` package (the ``pynvml`` package on PyPI is a
deprecated wrapper of it). Nothing here imports torch, so the logic is testable with a mocked
``pynvml`` module (``sys.modules["pynvml"] = fake`` or the ``nvml=`` argument).

Rules implemented here (what users of energy tools trip over):

- the total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, millijoules since driver load)
  exists on Volta and newer; :meth:`NvmlDevice.energy_support` checks it once;
- clocks: :meth:`NvmlDevice.lock_clocks` locks graphics (SM) and optionally memory clocks when
  permitted (root); when refused it warns and records the actual clocks. Locked clocks are ALWAYS
  reset: by :meth:`NvmlDevice.close` (called by ``with`` on any exception and on Ctrl-C, which raises
  KeyboardInterrupt), by an ``atexit`` hook, and on SIGTERM (a handler that raises ``SystemExit``
  so the same cleanup runs);
- utilization is sampled in a background thread (:class:`UtilizationSampler`).
"""
from __future__ import annotations

import atexit
import signal
import threading
import time
import warnings
from typing import Any

from carb.errors import MeasurementError


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
        """Reset locked clocks (if any) and shut NVML down. Idempotent; never raises."""
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

    def lock_clocks(self, sm_MHz: int | None, mem_MHz: int | None = None) -> dict[str, Any]:
        """Lock SM (and memory) clocks to the given MHz. Refusal (no permission, not supported) is
        a warning, not an error: the actual clocks are read and recorded in :attr:`lock_reason`.

        Returns ``{"sm_locked_MHz", "mem_locked_MHz", "reason", "actual": {"sm", "mem"}}``."""
        n = self.nvml
        problems = []
        if sm_MHz is not None:
            try:
                n.nvmlDeviceSetGpuLockedClocks(self.handle, int(sm_MHz), int(sm_MHz))
                self._locked_sm = int(sm_MHz)
            except n.NVMLError as e:
                problems.append(f"SM clock {int(sm_MHz)} MHz refused ({_err_text(e)})")
        if mem_MHz is not None:
            try:
                n.nvmlDeviceSetMemoryLockedClocks(self.handle, int(mem_MHz), int(mem_MHz))
                self._locked_mem = int(mem_MHz)
            except (n.NVMLError, AttributeError) as e:
                problems.append(f"memory clock {int(mem_MHz)} MHz refused ({_err_text(e)})")
        if self._locked_sm is not None or self._locked_mem is not None:
            self._arm_restore()
        try:
            actual = self.clocks_MHz()
        except MeasurementError:
            actual = {"sm": float("nan"), "mem": float("nan")}
        if problems:
            self._lock_reason = (f"clock locking refused: {'; '.join(problems)}; ran at the actual clocks "
                                 f"(SM {actual['sm']:.0f} MHz, memory {actual['mem']:.0f} MHz at start)")
            warnings.warn(f"GPU {self.index}: {self._lock_reason}", RuntimeWarning, stacklevel=2)
        return {"sm_locked_MHz": self._locked_sm, "mem_locked_MHz": self._locked_mem,
                "reason": self._lock_reason, "actual": actual}

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

    def restore_clocks(self) -> None:
        """Reset the clocks this object locked (NVML default: unlocked). Never raises."""
        n = self.nvml
        if self._locked_sm is not None:
            try:
                n.nvmlDeviceResetGpuLockedClocks(self.handle)
            except Exception as e:  # noqa: BLE001
                warnings.warn(f"GPU {self.index}: could not reset the SM clock lock: {_err_text(e)}",
                              RuntimeWarning, stacklevel=2)
            self._locked_sm = None
        if self._locked_mem is not None:
            try:
                n.nvmlDeviceResetMemoryLockedClocks(self.handle)
            except Exception as e:  # noqa: BLE001
                warnings.warn(f"GPU {self.index}: could not reset the memory clock lock: {_err_text(e)}",
                              RuntimeWarning, stacklevel=2)
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
