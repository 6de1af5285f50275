"""Real GPU checks (skipped without an NVIDIA GPU): NVML energy over a timed loop, CUDA peak memory."""
from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu


def test_cuda_row_has_energy_and_memory():
    from carb.measure import get_meter
    from carb.design.resnet import build_model
    from carb.design.arch import ArchConfig

    cfg = ArchConfig("basic", 20, 1.0, 64, 16, "fp16", False)
    with get_meter("cuda", settings=dict(n_runs=20, n_warmup=5, min_window_s=1.0, util_window_s=1.0,
                                         cooldown_s=0.0, require_energy=True)) as m:
        row = m.measure(build_model(cfg), cfg)
    assert row["energy_J"] > 0 and row["duration_s"] >= 1.0
    assert row["peak_memory_MB"] > 0 and row["latency_ms"] > 0
    assert not math.isnan(row["avg_sm_util"]) and row["gpu_temp_C"] > 0


def test_energy_counter_updates():
    from carb.measure.cuda import energy_update_period_under_load

    res = energy_update_period_under_load(0, seconds=1.5)
    assert res["n_updates"] >= 3 and 0 < res["median_period_ms"] < 1000
