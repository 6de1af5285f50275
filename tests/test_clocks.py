"""GPU clocks left alone by default, and restored when asked to lock them (issue 16), against the fake
``pynvml`` of :mod:`test_measure_nvml` that records calls: no clock setter runs by default; with
``lock=true`` the previous application clocks are read before locking and restored in order (locks reset,
then the previous application clocks) on close, on an exception and on SIGTERM; a refused lock is a
one-line ConfigError; the clocks and throttle reasons observed under load, the device fingerprint and the
fallback reasons (eval-mode utilization, host-side kernel counts) land in the row."""
from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import pytest
import torch
import yaml
from test_measure_nvml import (
    CFG,
    CLOCK_SETTERS,
    FakeOps,
    fake_pynvml,
    settings,
    tiny_model,
)
from torch import nn

from carb.errors import ConfigError
from carb.measure.base import MeasureSettings, parse_missing_reason
from carb.measure.cuda import CudaMeter
from carb.measure.nvml import NvmlDevice, decode_throttle_reasons

ROOT = Path(__file__).resolve().parents[1]
LOCK = {"lock_clocks": True, "sm_clock_MHz": 1350, "mem_clock_MHz": 5001}


def clock_calls(nv) -> list[str]:
    """The clock-changing calls (and reads of the application clocks, and shutdown), in order."""
    keep = (*CLOCK_SETTERS, "get_app_sm", "get_app_mem", "shutdown")
    return [c for c in nv.calls if c in keep]


def test_gpu_conf_leaves_clocks_alone():
    conf = yaml.safe_load((ROOT / "conf/measure/gpu.yaml").read_text())
    assert conf["clocks"]["lock"] is False and conf["clocks"]["sm_MHz"] == 1350
    s = MeasureSettings.from_mapping({"clocks": conf["clocks"]})
    assert s.lock_clocks is False and s.sm_clock_MHz == 1350
    assert MeasureSettings.from_mapping({"clocks": {**conf["clocks"], "lock": True}}).lock_clocks is True


def test_default_never_touches_clocks():
    nv = fake_pynvml()
    with CudaMeter(settings(sm_clock_MHz=1350), nvml=nv, ops=FakeOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
        facts = meter.device_facts()
    assert not [c for c in nv.calls if c in CLOCK_SETTERS]
    assert math.isnan(row["locked_sm_clock_MHz"]) and math.isnan(row["locked_mem_clock_MHz"])
    assert "locked" not in (row["missing_reason"] or "")
    assert facts["clocks_locked"] is False and facts["fingerprint"]["clock_policy"] == "default"


def test_lock_reads_previous_first_and_restores_in_order_on_close():
    nv = fake_pynvml(app_clocks=(1500, 2619))  # non-default application clocks set by someone else
    with CudaMeter(settings(**LOCK), nvml=nv, ops=FakeOps()) as meter:
        assert nv.state["sm"] == 1350 and nv.state["mem"] == 5001
        row = meter.measure(tiny_model(), CFG)
        assert meter.device_facts()["clocks"]["previous"]["app_sm"] == 1500
    calls = clock_calls(nv)
    assert calls[:4] == ["get_app_sm", "get_app_mem", "lock_sm", "lock_mem"]  # read BEFORE locking
    assert calls[-4:] == ["reset_sm", "reset_mem", "set_app", "shutdown"]
    assert (nv.state["app_sm"], nv.state["app_mem"]) == (1500, 2619)  # previous state, not the default
    assert row["locked_sm_clock_MHz"] == 1350.0 and row["locked_mem_clock_MHz"] == 5001.0
    assert row["sm_clock_MHz"] == 1350.0  # observed under load


def test_lock_restored_once_after_exception_default_app_clocks_reset():
    nv = fake_pynvml()  # application clocks at their defaults -> reset, not set

    class Boom(nn.Module):
        def forward(self, x):
            raise RuntimeError("kernel exploded")

    with pytest.raises(RuntimeError, match="exploded"), CudaMeter(settings(**LOCK), nvml=nv, ops=FakeOps()) as m:
        m.measure(Boom(), CFG)
    calls = clock_calls(nv)
    assert calls[-4:] == ["reset_sm", "reset_mem", "reset_app", "shutdown"]
    assert calls.count("reset_sm") == 1 and "set_app" not in calls


def test_lock_restored_on_sigterm():
    nv = fake_pynvml(app_clocks=(1500, 2619))
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as ei, CudaMeter(settings(**LOCK), nvml=nv, ops=FakeOps()):
        assert signal.getsignal(signal.SIGTERM) is not before
        signal.raise_signal(signal.SIGTERM)
    assert ei.value.code == 128 + signal.SIGTERM
    calls = clock_calls(nv)
    assert calls[-4:] == ["reset_sm", "reset_mem", "set_app", "shutdown"]
    assert calls.count("reset_sm") == 1 and nv.state["sm"] == 1980
    assert signal.getsignal(signal.SIGTERM) == before  # the previous handler is back


def test_restore_step_failure_is_a_warning_and_later_steps_run():
    nv = fake_pynvml(app_clocks=(1500, 2619))

    def broken(_h):
        nv.calls.append("reset_sm")
        raise RuntimeError("driver went away")

    nv.nvmlDeviceResetGpuLockedClocks = broken
    meter = CudaMeter(settings(**LOCK), nvml=nv, ops=FakeOps())
    with pytest.warns(RuntimeWarning, match="could not reset the SM clock lock"):
        meter.close()
    assert clock_calls(nv)[-4:] == ["reset_sm", "reset_mem", "set_app", "shutdown"]


def test_refused_lock_is_one_line_config_error_and_undoes_partial_lock():
    nv = fake_pynvml()

    def mem_refused(_h, lo, hi):
        nv.calls.append("lock_mem")
        raise nv.NVMLError(nv.NVML_ERROR_NOT_SUPPORTED)

    nv.nvmlDeviceSetMemoryLockedClocks = mem_refused
    with pytest.raises(ConfigError) as ei:
        CudaMeter(settings(**LOCK), nvml=nv, ops=FakeOps())
    msg = str(ei.value)
    assert "\n" not in msg and msg.startswith("measure.clocks.lock:") and "root" in msg
    assert "default measure.clocks.lock=false leaves the clocks alone" in msg
    assert clock_calls(nv)[-4:] == ["lock_mem", "reset_sm", "reset_app", "shutdown"]
    assert nv.state["sm"] == 1980


@pytest.mark.parametrize("mask, event_api, text", [
    (0x4 | 0x8, True, "sw_power_cap,hw_slowdown"), (0, True, "none"), (0x40, False, "hw_thermal_slowdown"),
    (None, True, None),
])
def test_observed_clocks_and_throttle_reasons_in_row(mask, event_api, text):
    nv = fake_pynvml(throttle_mask=mask, event_reasons=event_api)
    nv.state["sm"], nv.state["mem"] = 1710, 2619  # what the board runs under load
    with CudaMeter(settings(), nvml=nv, ops=FakeOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
    assert row["sm_clock_MHz"] == 1710.0 and row["mem_clock_MHz"] == 2619.0
    assert row["throttle_reasons"] == text
    assert math.isnan(row["locked_sm_clock_MHz"])


def test_decode_throttle_reasons():
    assert decode_throttle_reasons(0) == "none"
    assert decode_throttle_reasons(0x1 | 0x20) == "gpu_idle,sw_thermal_slowdown"
    assert decode_throttle_reasons(0x10000) == "0x10000"


def test_facts_flags_fingerprint_and_identity():
    nv = fake_pynvml()
    with CudaMeter(settings(), nvml=nv, ops=FakeOps()) as meter:
        facts = meter.device_facts()
        ident = meter.identity()
    assert facts["tf32_matmul"] is bool(torch.backends.cuda.matmul.allow_tf32)
    assert facts["tf32_cudnn"] is bool(torch.backends.cudnn.allow_tf32)
    assert facts["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert {"cudnn_enabled", "cudnn_benchmark", "cudnn_deterministic"} <= set(facts)
    assert facts["power_limit_W"] == 300.0 and facts["clocks"]["application"]["sm"] == 1755.0
    assert facts["fingerprint"]["kind"] == "cuda" and len(facts["device_id"]) == 10
    assert set(ident) - {"session_id"} == {"device_name", "device_kind", "driver", "torch_version", "device_id",
                                           "device_fingerprint"}
    assert ident.get("session_id") == facts["session_id"]   # the boot (None off Linux: not in the identity)
    assert ident["device_id"] == facts["device_id"]
    assert json.loads(ident["device_fingerprint"]) == json.loads(json.dumps(facts["fingerprint"]))


class TrainingFailsBN(nn.Module):
    """Batch norm that fails in training mode (like a 1x1 map at batch 1) and works in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        if self.bn.training:
            raise ValueError("Expected more than 1 value per channel when training")
        return self.bn(self.conv(x)).mean()


def test_eval_mode_utilization_fallback_reason_in_missing_reason():
    nv = fake_pynvml()
    with CudaMeter(settings(util_window_s=0.05, util_interval_s=0.01), nvml=nv, ops=FakeOps()) as meter:
        row = meter.measure(TrainingFailsBN(), CFG)
        assert meter.extra_reasons()["avg_sm_util"].startswith("training-mode window failed")
        again = meter.measure(tiny_model(), CFG)  # reasons are per measurement
    assert row["avg_sm_util"] == 80.0 and row["avg_mem_util"] == 40.0
    reasons = parse_missing_reason(row["missing_reason"])
    for col in ("avg_sm_util", "avg_mem_util"):
        assert "Expected more than 1 value per channel" in reasons[col]
        assert "measured with batch norm in eval mode" in reasons[col]
    assert "avg_sm_util" not in parse_missing_reason(again["missing_reason"])


class HostCountOps(FakeOps):
    def count_kernels(self, fn):
        fn()
        self.last_count_source = "host"
        return 7.0


def test_host_side_kernel_count_reason_in_missing_reason():
    with CudaMeter(settings(), nvml=fake_pynvml(), ops=HostCountOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
    assert row["kernel_launches"] == 7.0
    assert "host-side cudaLaunchKernel" in parse_missing_reason(row["missing_reason"])["kernel_launches"]
    with CudaMeter(settings(), nvml=fake_pynvml(), ops=FakeOps()) as meter:
        row = meter.measure(tiny_model(), CFG)
    assert "kernel_launches" not in parse_missing_reason(row["missing_reason"])


def test_nvml_device_without_lock_restores_nothing():
    nv = fake_pynvml()
    dev = NvmlDevice(0, nvml=nv)
    dev.close()
    assert not [c for c in nv.calls if c in CLOCK_SETTERS] and dev.previous_clocks is None
