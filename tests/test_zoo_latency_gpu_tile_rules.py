"""The tile rules of round zg43d's study (scripts/studies/zoo_gpu_tile_rules.py): the FLOPs a convolution computes
in vain under each rule, the census parts and the ``nofill`` share. Synthetic tables (tests only)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "studies"))


def _table() -> pd.DataFrame:
    """An 18-channel 3x3 convolution on 56x56, a 144-channel one on 28x28, a 256-channel point-wise one on 14x14 and
    a depthwise one (FLOPs 1e6 .. 4e6)."""
    return pd.DataFrame({"kind": ["conv_regular", "conv_regular", "conv_pointwise", "conv_depthwise"],
                         "weight_shape": [(18, 18, 3, 3), (144, 72, 3, 3), (256, 64, 1, 1), (64, 1, 3, 3)],
                         "groups": [1, 1, 1, 64], "flops": [1e6, 2e6, 3e6, 4e6],
                         "out_shape": [(1, 18, 56, 56), (1, 144, 28, 28), (1, 256, 14, 14), (1, 64, 7, 7)]})


def test_rule_ratio_per_rule():
    """18 and 144 channels: a 128 tile wastes 128/18 - 1 and 256/144 - 1; ``f128g64`` keeps the narrow one's whole
    tile but rounds 144 to 192; ``p2g64`` puts 18 in 32; a cap bounds the ratio; ``narrow`` / ``wide`` split it;
    an unknown rule raises naming the allowed ones."""
    from zoo_gpu_tile_rules import rule_ratio

    c = np.array([18.0, 144.0, 256.0])
    assert np.allclose(rule_ratio(c, "v128"), [128 / 18 - 1, 256 / 144 - 1, 0])
    assert np.allclose(rule_ratio(c, "f128g64"), [128 / 18 - 1, 192 / 144 - 1, 0])
    assert np.allclose(rule_ratio(c, "f128g32"), [128 / 18 - 1, 160 / 144 - 1, 0])
    assert np.allclose(rule_ratio(c, "p2g64"), [32 / 18 - 1, 192 / 144 - 1, 0])
    assert np.allclose(rule_ratio(c, "v128cap1"), [1, 256 / 144 - 1, 0])
    assert np.allclose(rule_ratio(c, "narrow") + rule_ratio(c, "wide"), rule_ratio(c, "v128"))
    with pytest.raises(ValueError, match="rule='x' is not allowed; allowed: v128"):
        rule_ratio(c, "x")


def test_table_columns_match_the_shipped_term_and_split_it():
    """``w_v128`` equals :func:`carb.model.zoo_latency.conv_pad_flops`' 128 column (depthwise not counted); the
    parts by output channels add up to it; ``nofill`` counts only convolutions whose batch x pixels is under one wave
    of 128-pixel tiles on 188 SMs (at batch 8: 14x14 and 28x28 maps do not fill it, 56x56 does)."""
    from zoo_gpu_tile_rules import table_columns

    from carb.model.zoo_latency import conv_pad_flops

    t = _table()
    col = table_columns(t, batch=1024.0)
    assert col["w_v128"] == pytest.approx(conv_pad_flops(t)["flops_conv_pad128"])
    assert col["c_le32"] + col["c_33_128"] + col["c_gt128"] == pytest.approx(col["w_v128"])
    assert col["c_gt128"] == pytest.approx(2e6 * (256 / 144 - 1)) and col["nofill"] == 0.0
    small = table_columns(t, batch=8.0)   # 8 x 784 < 128 x 188 <= 8 x 3136
    assert small["nofill"] == pytest.approx(2e6 * (256 / 144 - 1))
