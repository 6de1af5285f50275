"""The output-channel tile term of the zoo latency model's additive base (issue 43, round zg43c): the FLOPs an
implicit-GEMM convolution computes in vain when its output channels per group do not fill a tile
(:func:`carb.model.zoo_latency.conv_pad_flops`, ``conv_tile``). Synthetic tables and frames (tests only)."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _table() -> pd.DataFrame:
    """A layer table: an 18-channel 3x3 convolution, a 256-channel point-wise one, a grouped one of 4 groups of
    16 output channels, a depthwise one and a linear layer (FLOPs 1e6 .. 5e6)."""
    return pd.DataFrame({"kind": ["conv_regular", "conv_pointwise", "conv_grouped", "conv_depthwise", "linear"],
                         "weight_shape": [(18, 18, 3, 3), (256, 64, 1, 1), (64, 16, 3, 3), (64, 1, 3, 3), (10, 64)],
                         "groups": [1, 1, 4, 64, 1], "flops": [1e6, 2e6, 3e6, 4e6, 5e6]})


def test_conv_pad_flops_counts_the_empty_part_of_output_channel_tiles():
    """At a 128 tile the 18-channel convolution computes 128 / 18 - 1 of its FLOPs in vain, the grouped one
    (16 channels per group) 7x; a 256-channel one, a depthwise convolution and a linear layer nothing; at a
    64 tile less; ``pow2`` puts each in the narrowest of 32 / 64 / 128 that holds it (18 and 16 in 32);
    gpu_parts carries every tile's column."""
    from carb.model.zoo_latency import CONV_TILES, conv_pad_flops, gpu_parts

    pad = conv_pad_flops(_table())
    assert set(pad) == {f"flops_conv_pad{t}" for t in CONV_TILES}
    assert pad["flops_conv_pad128"] == pytest.approx(1e6 * (128 / 18 - 1) + 3e6 * 7)
    assert pad["flops_conv_pad64"] == pytest.approx(1e6 * (64 / 18 - 1) + 3e6 * 3)
    assert pad["flops_conv_padpow2"] == pytest.approx(1e6 * (32 / 18 - 1) + 3e6 * 1)   # 18 in 32, 16 in 32
    assert conv_pad_flops(_table().iloc[1:2])["flops_conv_pad256"] == 0.0
    assert conv_pad_flops(_table().iloc[1:2])["flops_conv_padpow2"] == 0.0   # 256 channels: two whole 128 tiles
    assert gpu_parts(_table().assign(out_shape=[(1, 1)] * 5))["flops_conv_pad128"] == pad["flops_conv_pad128"]
    no_groups = conv_pad_flops(_table().drop(columns="groups").iloc[:2])   # a table without groups: 1 each
    assert no_groups["flops_conv_pad128"] == pytest.approx(1e6 * (128 / 18 - 1))


def _frame(device_kind: str) -> pd.DataFrame:
    """Two traced zoo rows of a GPU or CPU file, with the tile columns (GFLOPs wasted: 1 and 0)."""
    from tests.synthetic import zoo_frame, zoo_trace_frame

    df = zoo_frame({"a": 2}, seed=0).iloc[:2]
    tr = zoo_trace_frame(df, seed=1)
    tr = tr.rename(columns={c: f"tr_{c}" for c in tr.columns if c not in ("model", "input_size")})
    out = df.merge(tr, on=["model", "input_size"]).assign(device_kind=device_kind)
    return out.assign(tr_flops_conv_pad64=[5e8, 0.0], tr_flops_conv_pad128=[1e9, 0.0], tr_flops_conv_pad256=[2e9, 0.0],
                      tr_flops_conv_padpow2=[2.5e8, 0.0])


def test_conv_tile_term_on_gpu_rows_only_and_off_by_default():
    """``conv_tile=128`` adds ``gflop_conv_pad`` from ``tr_flops_conv_pad128`` on GPU rows (0 on CPU rows); off
    (0) or without the column, no term and every other term unchanged."""
    from carb.model.zoo_latency import additive_terms

    gpu, cpu = _frame("gpu"), _frame("cpu")
    on, off = additive_terms(gpu, conv_tile=128), additive_terms(gpu)
    assert np.allclose(on["gflop_conv_pad"], [1.0, 0.0]) and "gflop_conv_pad" not in off.columns
    assert on.drop(columns="gflop_conv_pad").equals(off)
    assert np.allclose(additive_terms(gpu, conv_tile=64)["gflop_conv_pad"], [0.5, 0.0])
    assert np.allclose(additive_terms(gpu, conv_tile="pow2")["gflop_conv_pad"], [0.25, 0.0])
    assert np.allclose(additive_terms(cpu, conv_tile=128)["gflop_conv_pad"], 0.0)
    missing = gpu.drop(columns=["tr_flops_conv_pad128"])
    assert "gflop_conv_pad" not in additive_terms(missing, conv_tile=128).columns


def test_conv_tile_reaches_the_base_and_a_bad_value_is_one_line():
    """ZooLatencyModel passes ``conv_tile`` to its additive base; a tile outside 0 / CONV_TILES is a one-line
    DatasetError naming the key and the allowed values."""
    from carb.errors import DatasetError
    from carb.model.zoo_latency import ZooLatencyModel

    assert ZooLatencyModel(conv_tile=128)._additive(True).conv_tile == 128
    assert ZooLatencyModel(conv_tile="pow2")._additive(True).conv_tile == "pow2"
    with pytest.raises(DatasetError, match=r"conv_tile=96 is not allowed; allowed: 0, 64, 128, 256, pow2"):
        ZooLatencyModel(conv_tile=96)


def test_conv_tile_conf_key_is_checked():
    """The conf's ``conv_tile`` is read by scripts/bench/zoo.py's settings; an override outside the schema's values
    exits 2 with one line naming the key."""
    sys.path.insert(0, str(ROOT / "scripts" / "bench"))
    from zoo import zoo_latency_settings

    assert zoo_latency_settings([], device_kind="gpu")["conv_tile"] in (0, 64, 128, 256, "pow2")
    assert zoo_latency_settings(["conv_tile=64"], device_kind="gpu")["conv_tile"] == 64
    with pytest.raises(SystemExit) as e:
        zoo_latency_settings(["conv_tile=96"])
    assert e.value.code == 2


def test_nested_tiles_never_use_the_held_out_family():
    """The study's nested choice picks, per family, the tile best on the other families summed over GPUs: a family
    that alone favours a tile does not get it through its own rows."""
    sys.path.insert(0, str(ROOT / "scripts" / "studies"))
    from zoo_gpu_tail import nested_tiles

    fams = ["a", "b", "c"]
    mape = {("g1", 0): pd.Series([10.0, 10.0, 50.0], index=fams), ("g1", 128): pd.Series([5.0, 5.0, 90.0], index=fams),
            ("g2", 0): pd.Series([10.0, 10.0, 10.0], index=fams), ("g2", 128): pd.Series([6.0, 6.0, 10.0], index=fams)}
    chosen = nested_tiles(mape, {"g1": fams, "g2": fams})
    assert chosen == {"a": 0, "b": 0, "c": 128}
