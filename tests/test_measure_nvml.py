"""The CUDA/NVML meter against a fake ``pynvml`` module and fake torch.cuda operations (no GPU),
the way Zeus tests its GPU code: energy delta and units (per batch and per window), counter support,
clocks left alone by default, clock locking refused (a one-line ConfigError), the previous clock state
read before locking and restored in order (close, exception, SIGTERM), clocks and throttle reasons
observed under load, fallback reasons in ``missing_reason``, and the minimum timed window."""
from __future__ import annotations

import math
import signal
import sys
import time
import types

import pytest
import torch
from torch import nn

from carb.errors import ConfigError, MeasurementError
from carb.measure.base import LoopTimer, MeasureSettings
from carb.measure.cuda import CudaMeter
from carb.measure.nvml import NvmlDevice
from carb.design.arch import ArchConfig

CFG = ArchConfig("basic", 8, 0.25, 32, 2, "fp32", False, num_classes=10)


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


def fake_pynvml(energy_step_mJ: int = 250, energy_supported: bool = True, lock_allowed: bool = True,
                app_clocks: tuple[int, int] = (1755, 2619), throttle_mask: int | None = 0x4 | 0x8,
                event_reasons: bool = True):
    """A stand-in for the pynvml module that records calls. The energy counter advances by
    ``energy_step_mJ`` at every read. ``app_clocks``: the current application clocks (SM, memory);
    the defaults are (1755, 2619). ``throttle_mask``: the clock event reasons (None: unsupported);
    ``event_reasons=False``: only the older ``...ThrottleReasons`` name exists."""
    calls: list[str] = []
    state = {"energy": 1_000_000, "sm": 1980, "mem": 2619, "app_sm": app_clocks[0], "app_mem": app_clocks[1]}
    m = types.SimpleNamespace(calls=calls, state=state, NVMLError=FakeNVMLError,
                              NVML_ERROR_NOT_SUPPORTED=3, NVML_ERROR_NO_PERMISSION=4,
                              NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0)

    def rec(name, result=None, fn=None):
        def f(*args):
            calls.append(name)
            return fn(*args) if fn else result
        return f

    def energy(_h):
        calls.append("energy")
        if not energy_supported:
            raise FakeNVMLError(3)
        state["energy"] += energy_step_mJ
        return state["energy"]

    def lock_sm(_h, lo, hi):
        calls.append("lock_sm")
        if not lock_allowed:
            raise FakeNVMLError(4)
        state["sm"] = lo

    def lock_mem(_h, lo, hi):
        calls.append("lock_mem")
        if not lock_allowed:
            raise FakeNVMLError(4)
        state["mem"] = lo

    def reset_sm(_h):
        calls.append("reset_sm")
        state["sm"] = 1980

    def reset_mem(_h):
        calls.append("reset_mem")
        state["mem"] = 2619

    def get_app(_h, which):
        calls.append("get_app_sm" if which == 1 else "get_app_mem")
        return state["app_sm"] if which == 1 else state["app_mem"]

    def set_app(_h, mem, sm):
        calls.append("set_app")
        state["app_sm"], state["app_mem"] = sm, mem

    def reset_app(_h):
        calls.append("reset_app")
        state["app_sm"], state["app_mem"] = 1755, 2619

    def reasons(_h):
        calls.append("throttle")
        if throttle_mask is None:
            raise FakeNVMLError(3)
        return throttle_mask

    m.nvmlInit = rec("init")
    m.nvmlShutdown = rec("shutdown")
    m.nvmlDeviceGetHandleByIndex = rec("handle", result="h0")
    m.nvmlDeviceGetHandleByUUID = rec("handle_uuid", result="h0")
    m.nvmlDeviceGetName = rec("name", result="Fake GPU 100")
    m.nvmlSystemGetDriverVersion = rec("driver", result="999.1")
    m.nvmlDeviceGetTotalEnergyConsumption = energy
    m.nvmlDeviceGetTemperature = rec("temp", result=50)
    m.nvmlDeviceGetClockInfo = lambda h, which: state["sm"] if which == 1 else state["mem"]
    m.nvmlDeviceGetMaxClockInfo = lambda h, which: 2100 if which == 1 else 2619
    m.nvmlDeviceGetPowerManagementLimit = rec("power", result=300_000)
    m.nvmlDeviceGetUtilizationRates = rec("util", result=types.SimpleNamespace(gpu=80, memory=40))
    m.nvmlDeviceSetGpuLockedClocks = lock_sm
    m.nvmlDeviceSetMemoryLockedClocks = lock_mem
    m.nvmlDeviceResetGpuLockedClocks = reset_sm
    m.nvmlDeviceResetMemoryLockedClocks = reset_mem
    m.nvmlDeviceGetApplicationsClock = get_app
    m.nvmlDeviceGetDefaultApplicationsClock = lambda h, which: 1755 if which == 1 else 2619
    m.nvmlDeviceSetApplicationsClocks = set_app
    m.nvmlDeviceResetApplicationsClocks = reset_app
    if event_reasons:
        m.nvmlDeviceGetCurrentClocksEventReasons = reasons
    m.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
    return m


#: Every NVML call that changes global clock state.
CLOCK_SETTERS = ("lock_sm", "lock_mem", "reset_sm", "reset_mem", "set_app", "reset_app")


class FakeOps:
    """torch.cuda operations replaced by CPU equivalents."""

    device = torch.device("cpu")

    def uuid(self):
        return None

    def sync(self):
        pass

    def empty_cache(self):
        pass

    def reset_peak(self):
        self.reset = True

    def max_allocated_bytes(self):
        return 3 * 2**20

    def timer(self):
        return LoopTimer()

    def count_kernels(self, fn):
        fn()
        return 42.0

    def facts(self):
        return {"device_name": "Fake GPU 100", "cuda_version": "13.0", "torch_version": torch.__version__}

    def is_cuda_oom(self, exc):
        return False


def settings(**kw) -> MeasureSettings:
    base = dict(n_runs=3, n_warmup=1, min_window_s=0.0, util_window_s=0.0, cooldown_s=0.0,
                kernel_launches=True)
    base.update(kw)
    return MeasureSettings(**base)


def tiny_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10))


def test_energy_delta_in_joules():
    nv = fake_pynvml(energy_step_mJ=250)
    with CudaMeter(settings(), nvml=nv, ops=FakeOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
    # one read before, one after the loop: 250 mJ over the window of n_runs=3 batches
    assert row["energy_window_J"] == pytest.approx(0.250)
    assert row["energy_J"] == pytest.approx(0.250 / 3)  # per batch
    assert row["avg_power_W"] == pytest.approx(0.25 / row["window_s"])
    assert row["peak_memory_MB"] == pytest.approx(3.0) and row["kernel_launches"] == 42.0
    assert row["gpu_temp_C"] == 50.0 and row["n_runs"] == 3.0
    assert NvmlDevice.energy_between_J(1_000, 3_500) == pytest.approx(2.5)
    assert "shutdown" in nv.calls


def test_counter_not_supported():
    nv = fake_pynvml(energy_supported=False)
    with pytest.raises(MeasurementError, match="not supported"):
        CudaMeter(settings(require_energy=True), nvml=nv, ops=FakeOps())
    assert "shutdown" in nv.calls  # cleaned up on the failed start
    nv = fake_pynvml(energy_supported=False)
    with CudaMeter(settings(require_energy=False), nvml=nv, ops=FakeOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
    assert math.isnan(row["energy_J"]) and "not supported" in row["missing_reason"]
    assert row["energy_J"] != 0


def test_clock_locking_denied_is_a_one_line_config_error():
    nv = fake_pynvml(lock_allowed=False)
    with pytest.raises(ConfigError) as ei:
        CudaMeter(settings(lock_clocks=True, sm_clock_MHz=1350, mem_clock_MHz=5001), nvml=nv, ops=FakeOps())
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("measure.clocks.lock:")
    assert "root" in msg and "refused" in msg and "false" in msg and "leaves the clocks alone" in msg
    assert "reset_sm" not in nv.calls  # nothing was locked, no lock to reset
    assert "shutdown" in nv.calls and nv.state["app_sm"] == 1755  # cleaned up, application clocks default


def test_clocks_restored_after_exception():
    nv = fake_pynvml(lock_allowed=True)

    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("kernel exploded")

    with pytest.raises(RuntimeError, match="exploded"):
        with CudaMeter(settings(lock_clocks=True, sm_clock_MHz=1350, mem_clock_MHz=5001), nvml=nv,
                       ops=FakeOps()) as meter:
            assert meter.locked_clocks_MHz() == (1350.0, 5001.0)
            assert nv.state["sm"] == 1350
            meter.measure(Boom(), CFG)
    assert nv.calls.count("reset_sm") == 1 and nv.calls.count("reset_mem") == 1
    assert nv.state["sm"] == 1980 and "shutdown" in nv.calls
    setters = [c for c in nv.calls if c in CLOCK_SETTERS or c == "shutdown"]
    assert setters == ["lock_sm", "lock_mem", "reset_sm", "reset_mem", "reset_app", "shutdown"]


def test_locked_clocks_recorded_when_permitted():
    nv = fake_pynvml(lock_allowed=True)
    with CudaMeter(settings(lock_clocks=True, sm_clock_MHz=1350, mem_clock_MHz=5001), nvml=nv,
                   ops=FakeOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
    assert row["locked_sm_clock_MHz"] == 1350.0 and row["locked_mem_clock_MHz"] == 5001.0


def test_short_configs_get_more_runs():
    class Slow(nn.Module):
        def forward(self, x):
            time.sleep(0.01)
            return x.mean()

    with CudaMeter(settings(n_runs=2, n_warmup=2, min_window_s=0.15), nvml=fake_pynvml(), ops=FakeOps()) as m:
        row = m.measure(Slow(), CFG)
    assert row["window_s"] >= 0.15 and row["n_runs"] > 2
    assert row["latency_ms"] == pytest.approx(row["window_s"] * 1e3 / row["n_runs"])


def test_nvml_error_becomes_measurement_error():
    nv = fake_pynvml()

    def broken(*_args):
        raise FakeNVMLError(999)

    nv.nvmlDeviceGetTemperature = broken
    dev = NvmlDevice(0, nvml=nv)
    with pytest.raises(MeasurementError, match="nvmlDeviceGetTemperature failed"):
        dev.temperature_C()
    dev.close()


# --------------------------------------------------------------------------- Zeus style: sys.modules + torch.cuda


def real_error_pynvml(log: list[str], energy_supported: bool = True, lock_allowed: bool = True):
    """The fake module of :func:`fake_pynvml` raising the real ``pynvml`` error classes (nvidia-ml-py:
    ``NVMLError(NVML_ERROR_NO_PERMISSION)`` is an ``NVMLError_NoPermission``), logging energy reads."""
    real = pytest.importorskip("pynvml")
    m = fake_pynvml(energy_supported=True, lock_allowed=True)
    m.NVMLError = real.NVMLError
    m.NVML_ERROR_NOT_SUPPORTED = real.NVML_ERROR_NOT_SUPPORTED
    m.NVML_ERROR_NO_PERMISSION = real.NVML_ERROR_NO_PERMISSION

    def energy(_h):
        log.append("energy")
        if not energy_supported:
            raise real.NVMLError(real.NVML_ERROR_NOT_SUPPORTED)
        m.state["energy"] += 250
        return m.state["energy"]

    def denied(*_args):
        raise real.NVMLError(real.NVML_ERROR_NO_PERMISSION)

    m.nvmlDeviceGetTotalEnergyConsumption = energy
    if not lock_allowed:
        m.nvmlDeviceSetGpuLockedClocks = denied
        m.nvmlDeviceSetMemoryLockedClocks = denied
    return m


@pytest.fixture
def fake_cuda(monkeypatch):
    """The real :class:`TorchCudaOps` over monkeypatched ``torch.cuda`` functions (no GPU); returns the
    call log shared with the fake NVML module. Tensors stay on the CPU (``ops.device`` is set to cpu)."""
    import carb.measure.cuda as cuda_mod

    log: list[str] = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            self.t = time.perf_counter()

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    props = types.SimpleNamespace(major=9, minor=0, total_memory=80 * 2**30, multi_processor_count=132,
                                  uuid="0000-fake")
    for name, fn in {
        "is_available": lambda: True, "device_count": lambda: 1, "set_device": lambda d: None,
        "synchronize": lambda d=None: log.append("sync"), "empty_cache": lambda: log.append("empty_cache"),
        "reset_peak_memory_stats": lambda d=None: log.append("reset_peak"),
        "max_memory_allocated": lambda d=None: 5 * 2**20, "get_device_properties": lambda i: props,
        "get_device_name": lambda i=0: "Fake GPU 100", "Event": Event,
    }.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    real_init = cuda_mod.TorchCudaOps.__init__

    def init_on_cpu(self, index=0):
        real_init(self, index)
        self.device = torch.device("cpu")

    monkeypatch.setattr(cuda_mod.TorchCudaOps, "__init__", init_on_cpu)
    return log


def test_zeus_style_energy_units_and_sync(monkeypatch, fake_cuda):
    nv = real_error_pynvml(fake_cuda)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    from carb.measure import get_meter

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    with get_meter("cuda", settings=settings(kernel_launches=False)) as meter:
        assert torch.backends.cudnn.benchmark is False  # off while measuring
        start = len(fake_cuda)
        row = meter.measure(tiny_model(), CFG)
        facts = meter.device_facts()
    loop = fake_cuda[start:]
    reads = [i for i, e in enumerate(loop) if e == "energy"]
    assert len(reads) == 2 and all(loop[i - 1] == "sync" for i in reads)  # counter read after a synchronize
    assert row["energy_window_J"] == pytest.approx(0.25)  # 250 mJ between the two reads -> J
    assert row["energy_J"] == pytest.approx(0.25 / row["n_runs"])
    assert row["peak_memory_MB"] == pytest.approx(5.0) and "reset_peak" in loop
    assert "empty_cache" in loop  # cool-down empties the cache
    assert facts["device_name"] == "Fake GPU 100" and facts["driver"] == "999.1"
    assert facts["compute_capability"] == "9.0" and facts["cudnn_benchmark"] is False
    assert torch.backends.cudnn.benchmark is True and "shutdown" in nv.calls  # restored on exit


def test_zeus_style_not_supported_message(monkeypatch, fake_cuda):
    monkeypatch.setitem(sys.modules, "pynvml", real_error_pynvml(fake_cuda, energy_supported=False))
    from carb.measure import get_meter

    with pytest.raises(MeasurementError) as ei:
        get_meter("cuda", settings=settings(require_energy=True))
    msg = str(ei.value)
    assert "\n" not in msg and "not supported on Fake GPU 100" in msg and "require_energy=false" in msg


def test_zeus_style_no_permission_is_a_config_error(monkeypatch, fake_cuda):
    nv = real_error_pynvml(fake_cuda, lock_allowed=False)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    from carb.measure import get_meter

    with pytest.raises(ConfigError) as ei:
        get_meter("cuda", settings=settings(lock_clocks=True, sm_clock_MHz=1350, mem_clock_MHz=3201,
                                            kernel_launches=False))
    msg = str(ei.value)
    assert "\n" not in msg and "measure.clocks.lock" in msg and "Insufficient Permissions" in msg
    assert "shutdown" in nv.calls


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_zeus_style_clocks_restored_after_error_or_ctrl_c(monkeypatch, fake_cuda, exc):
    nv = real_error_pynvml(fake_cuda)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    from carb.measure import get_meter

    class Boom(nn.Module):
        def forward(self, x):
            raise exc

    with pytest.raises(type(exc)):
        with get_meter("cuda", settings=settings(lock_clocks=True, sm_clock_MHz=1350)) as meter:
            assert nv.state["sm"] == 1350
            meter.measure(Boom(), CFG)
    assert nv.state["sm"] == 1980 and nv.calls.count("reset_sm") == 1 and "shutdown" in nv.calls
    assert "reset_mem" not in nv.calls  # the memory clock was not locked, so not reset


def test_zeus_style_window_raised_to_min_window(monkeypatch, fake_cuda):
    monkeypatch.setitem(sys.modules, "pynvml", real_error_pynvml(fake_cuda))
    from carb.measure import get_meter

    class Slow(nn.Module):
        def forward(self, x):
            time.sleep(0.005)
            return x.mean()

    with get_meter("cuda", settings=settings(n_runs=2, n_warmup=2, min_window_s=0.1,
                                             kernel_launches=False)) as m:
        row = m.measure(Slow(), CFG)
    assert row["n_runs"] > 2 and row["window_s"] >= 0.1
    assert row["latency_std_ms"] >= 0 and row["latency_ms"] >= 5.0
