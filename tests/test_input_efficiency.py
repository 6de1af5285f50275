"""The per-multiply-add excess of input sizes in timm's benchmark (carb/analysis/input_efficiency.py)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.input_efficiency import INT32_LIMIT, input_excess, largest_output, summary
from carb.design.arch import ArchConfig
from carb.design.features import grid_features


def _rows(latency: dict[int, float]) -> pd.DataFrame:
    """ResNet-50 rows at batch 1024, one per input size, with the given latency (ms)."""
    cfgs = [ArchConfig("bottleneck", 50, 1.0, px, 1024, "fp16", True) for px in latency]
    g = grid_features(cfgs)
    return g.assign(latency_ms=list(latency.values()), device_name="gpu", timm_precision="amp_fp16",
                    compile="eager", memory_layout="nchw", torch_version="2.9.1", model="resnet50")


def test_excess_is_time_ratio_over_flops_ratio():
    flops = _rows({224: 1.0, 288: 1.0})["flops"].to_numpy()
    ratio = flops[1] / flops[0]
    t = _rows({224: 100.0, 288: 100.0 * ratio * 1.05})
    e = input_excess(t)
    assert len(e) == 1 and e["input_size"].iloc[0] == 288
    assert e["excess"].iloc[0] == pytest.approx(1.05)


def test_largest_output_and_the_index_limit():
    t = _rows({224: 1.0, 288: 1.0})
    big = largest_output(t).to_numpy()
    # stage 1 of a bottleneck ResNet: 256 channels at a quarter of the input
    assert big[0] == pytest.approx(max(256 * 56 * 56, 64 * 112 * 112) * 1024)
    assert big[1] == pytest.approx(max(256 * 72 * 72, 64 * 144 * 144) * 1024)
    e = input_excess(t.assign(batch_size=2048))
    assert bool(e["past_int32"].iloc[0]) == (big[1] * 2 >= INT32_LIMIT)
    assert np.isnan(largest_output(t.assign(block=pd.NA)).to_numpy()).all()


def test_shipped_table_max_q_is_slowest_off_224_px_not_past_the_index_limit():
    """The Max-Q's eager bottleneck ResNets are further from their FLOPs at 160 px (nothing past 2**31)
    than at 288 px (stage 1 past 2**31), and torch.compile flattens every size."""
    s = summary(input_excess())
    mq = s[(s["device_name"] == "RTX PRO 6000 Blackwell Max-Q") & (s["block"] == "bottleneck")]
    eager = mq[mq["compile"] == "eager"].set_index("input_size")
    assert bool(eager.loc[288, "past_int32"]) and not bool(eager.loc[160, "past_int32"])
    assert eager.loc[288, "median"] > 1.03
    assert eager.loc[160, "median"] > eager.loc[288, "median"]
    compiled = mq[mq["compile"] != "eager"]
    assert (compiled["median"].between(0.97, 1.03)).all()
