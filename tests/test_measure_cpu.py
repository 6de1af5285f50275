"""The CPU meter on tiny real models: latency, peak live-tensor memory, energy missing with a reason."""
from __future__ import annotations

import math

import pytest

from carb.measure import get_meter
from carb.measure.base import MEASURED_COLUMNS
from carb.design.resnet import build_model
from carb.design.arch import ArchConfig

FAST = dict(n_runs=2, n_warmup=1, min_window_s=0.0, cooldown_s=0.0, util_window_s=0.0, kernel_launches=False,
            threads=1)


def test_cpu_row(tmp_path):
    import torch

    cfg = ArchConfig("basic", 8, 0.25, 32, 2, "fp32", False, num_classes=10)
    prev = torch.get_num_threads()
    with get_meter("cpu", settings={**FAST, "threads": 2, "rapl_root": str(tmp_path / "none")}) as m:
        assert torch.get_num_threads() == 2
        row = m.measure(build_model(cfg), cfg)
        facts = m.device_facts()
    assert set(row) == set(MEASURED_COLUMNS)
    assert row["latency_ms"] > 0 and row["peak_memory_MB"] > 0 and row["threads"] == 2.0
    assert math.isnan(row["energy_J"]) and "RAPL" in row["missing_reason"]
    assert math.isnan(row["avg_sm_util"]) and "avg_sm_util" in row["missing_reason"]
    assert facts["device_kind"] == "cpu" and facts["rapl_available"] is False and facts["threads"] == 2
    assert torch.get_num_threads() == prev  # restored on exit


def test_peak_memory_grows_with_batch():
    peaks = []
    with get_meter("cpu", settings=FAST) as m:
        for bs in (1, 8):
            cfg = ArchConfig("basic", 8, 0.25, 32, bs, "fp32", False, num_classes=10)
            peaks.append(m.measure(build_model(cfg), cfg)["peak_memory_MB"])
    assert peaks[1] > 2 * peaks[0]


def test_bad_device_and_settings():
    from carb.errors import ConfigError

    with pytest.raises(ConfigError, match="allowed"):
        get_meter("tpu")
    with pytest.raises(ConfigError, match="n_runs"):
        get_meter("cpu", settings={"n_runs": 0})
    with pytest.raises(ConfigError, match="unknown setting"):
        get_meter("cpu", settings={"n_rnus": 3})
