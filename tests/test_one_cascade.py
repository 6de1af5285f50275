"""One cascade across network kinds (issue 43 item 3): a ResNet row's layer-table features come from its walk
and equal those of the traced torchvision model; each row of a combined dataset (ResNet and zoo rows of one
device) is featurized from its own layer table, validated against its own schema, and one cascade fits
and predicts both kinds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.design import zoo_features as Z
from carb.design.identity import input_kind, kinds_in, row_kinds
from carb.design.zoo import build_model


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CARB_CACHE", str(tmp_path / "cache"))


RESNET_ROWS = pd.DataFrame({"block": ["basic", "bottleneck", "basic"], "depth": [18, 50, 18],
                            "width_mult": [1.0, 1.0, 1.0], "input_size": [64, 64, 96], "batch_size": [3, 2, 5],
                            "precision": ["bf16", "fp32", "fp32"], "early_downsample": [True, True, True],
                            "stages": [None, None, None], "inner_mult": [1.0, 1.0, 1.0]})
TORCHVISION_OF = ["tv:resnet18", "tv:resnet50", "tv:resnet18"]


def test_resnet_rows_layer_table_features_are_the_traced_torchvision_models():
    cols = Z.layer_columns(RESNET_ROWS)
    for i, name in enumerate(TORCHVISION_OF):
        r = RESNET_ROWS.iloc[i]
        s = Z.module_summary(build_model(name), int(r["input_size"]), str(r["precision"]))   # the meta-device trace
        ref = {**Z.static_of(s, int(r["batch_size"])), **Z.kinds_of(s, int(r["batch_size"]))}
        assert set(ref) == set(cols) == {*Z.ZOO_STATIC, *Z.ZOO_KIND_FEATURES}
        for c, v in ref.items():
            assert cols[c][i] == pytest.approx(v, rel=1e-12, abs=0), (name, c)
        assert cols["peak_live_MB"][i] > 0 and cols["flops_conv_pointwise"][i] > (0 if "50" in name else -1)


def test_resnet_rows_layer_flops_are_the_resnet_static_flops():
    """The layer table's ``flops`` (fvcore's count) and parameters equal the ResNet grid features' (a
    second, independent count: :func:`carb.design.features.grid_features`)."""
    from carb.design.features import grid_features

    cols = Z.layer_columns(RESNET_ROWS)
    grid = grid_features(RESNET_ROWS)
    np.testing.assert_allclose(cols["flops"], grid["flops"].to_numpy(float), rtol=1e-12)
    np.testing.assert_array_equal(cols["params"], grid["params"].to_numpy(float))


def test_each_row_of_a_combined_frame_takes_its_own_kind():
    from tests.synthetic import zoo_schema_frame

    zoo = zoo_schema_frame(models=("tv:squeezenet1_1", "tv:resnet18"), sizes=(64,), batches=(3,),
                           precisions=("bf16",))
    mixed = pd.concat([RESNET_ROWS, zoo], ignore_index=True)
    assert list(row_kinds(mixed)) == ["resnet"] * 3 + ["zoo"] * 2
    assert kinds_in(mixed) == ("resnet", "zoo") and input_kind(mixed) == "mixed"
    assert input_kind(RESNET_ROWS) == "resnet" and input_kind(zoo) == "zoo"
    cols = Z.layer_columns(mixed)
    # ResNet-18 as knobs (row 0: 64 px, batch 3, bf16) and as the zoo name tv:resnet18 (row 4): one network
    for c in (*Z.ZOO_STATIC, *Z.ZOO_KIND_FEATURES):
        assert cols[c][0] == pytest.approx(cols[c][4], rel=1e-12), c
    assert cols["flops"][3] != cols["flops"][4]
