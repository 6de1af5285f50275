"""The bottleneck inner width knob (``inner_mult`` = torchvision's ``width_per_group / 64``): exact wide
ResNet parameter counts, closed form equal to fvcore, stable ids of default configs, spaces, schema."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from carb.data.schema import validate_dataset
from carb.design.arch import ArchConfig, configs_from_records
from carb.design.features import STATIC_FEATURES, grid_features, static_features
from carb.design.resnet import build_model, torchvision_equivalent
from carb.design.space import load_space, space_config, space_size
from carb.errors import ConfigError, DatasetError

WIDE = {"wide_resnet50_2": (50, 68_883_240), "wide_resnet101_2": (101, 126_886_696)}


def _meta_params(cfg: ArchConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in build_model(cfg).parameters())


@pytest.mark.parametrize("name", sorted(WIDE))
def test_wide_resnet_param_counts_are_torchvision_exact(name):
    depth, params = WIDE[name]
    cfg = ArchConfig("bottleneck", depth, inner_mult=2.0)
    assert _meta_params(cfg) == params                       # the builder
    assert int(grid_features([cfg])["params"].iloc[0]) == params  # the closed form
    with torch.device("meta"):
        assert sum(p.numel() for p in torchvision_equivalent(name).parameters()) == params


def test_inner_mult_widens_only_the_inner_convolutions():
    m = build_model(ArchConfig("bottleneck", 26, 0.25, 32, inner_mult=2.0))
    block = m.layers[1][0]
    assert block.conv1.out_channels == 64 and block.conv2.out_channels == 64   # 2 x 32 planes
    assert block.conv3.out_channels == 128                                     # 4 x 32 planes, unchanged


@pytest.mark.parametrize("inner", [0.5, 1.5, 2.0, 3.0])
def test_closed_form_equals_fvcore_with_inner_width(inner):
    cfg = ArchConfig("bottleneck", 26, 0.25, 32, 2, "fp16", True, num_classes=10, inner_mult=inner)
    fast = grid_features([cfg]).iloc[0]
    ref = static_features(cfg)
    for k in STATIC_FEATURES:
        assert fast[k] == pytest.approx(ref[k], rel=1e-12), k
    base = grid_features([cfg.replace(inner_mult=1.0)]).iloc[0]
    assert (fast["flops"] > base["flops"]) == (inner > 1.0)


def test_default_inner_keeps_config_ids_and_others_differ():
    plain = ArchConfig("bottleneck", 50)
    assert ArchConfig("bottleneck", 50, inner_mult=1.0).config_id == plain.config_id
    assert plain.config_id == "65c0e2fed040ce55"    # pinned before the knob existed (tests/test_space.py)
    wide = plain.replace(inner_mult=2.0)
    assert wide.config_id != plain.config_id and wide.to_dict()["inner_mult"] == 2.0
    assert wide.replace(inner_mult=2).config_id == wide.config_id   # int and float spell one id


def test_shipped_reference_ids_unchanged():
    from carb.data.io import reference_dataset

    ref = reference_dataset()
    assert (ref["inner_mult"] == 1.0).all()
    knobs = ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample",
             "stages", "inner_mult"]
    ids = [c.config_id for c in configs_from_records(ref[knobs].head(200).to_dict("records"))]
    assert ids == ref["config_id"].head(200).tolist()


@pytest.mark.parametrize("kwargs, match", [
    ({"block": "basic", "depth": 18, "inner_mult": 2.0}, r"inner_mult: 2 is not allowed for basic.*allowed: \[1.0\]"),
    ({"block": "bottleneck", "depth": 50, "inner_mult": 0}, "inner_mult: must be a positive number"),
    ({"block": "bottleneck", "depth": 50, "inner_mult": "wide"}, "inner_mult: must be a positive number"),
])
def test_bad_inner_mult_names_the_field(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        ArchConfig(**kwargs)


def test_records_with_missing_inner_mult_mean_the_default():
    recs = [{"block": "bottleneck", "depth": 50, "inner_mult": float("nan")}, {"block": "basic", "depth": 18}]
    a, b = configs_from_records(recs)
    assert a.inner_mult == 1.0 and b.inner_mult == 1.0


def test_space_inner_mults_multiply_only_bottleneck_configs():
    base = space_config("screening")
    wide = space_config("screening", ["inner_mults=[1.0,2.0]"])
    n_basic = space_size({**base, "blocks": ["basic"]})
    assert space_size(wide) == 2 * space_size(base) - n_basic
    cfgs = load_space("smoke", ["inner_mults=[1.0,2.0]"])
    assert {c.inner_mult for c in cfgs if c.block == "basic"} <= {1.0}
    if any(c.block == "bottleneck" for c in cfgs):
        assert {c.inner_mult for c in cfgs if c.block == "bottleneck"} == {1.0, 2.0}
    feats = grid_features(cfgs)
    assert feats["config_id"].is_unique and "inner_mult" in feats.columns


def test_max_flops_cap_counts_the_inner_width():
    space = {"mode": "grid", "blocks": ["bottleneck"], "depths": {"bottleneck": [50]}, "inner_mults": [1.0, 2.0],
             "input_sizes": [224], "batch_sizes": [1]}
    one = grid_features([ArchConfig("bottleneck", 50)])["flops"].iloc[0]
    from carb.design.space import configs_from_cfg

    capped = configs_from_cfg({**space, "max_flops": one * 1.01})
    assert [c.inner_mult for c in capped] == [1.0]


def test_schema_reads_old_files_and_checks_new_columns():
    row = {**ArchConfig("bottleneck", 50).to_dict(), "config_id": "x", "device_name": "d", "device_kind": "cpu",
           "status": "ok", "peak_memory_MB": 10.0, "params": 1, "n_conv": 1}
    from carb.data.schema import COLUMNS, conform

    old = conform(pd.DataFrame([row]), fill_missing=COLUMNS).drop(columns=["inner_mult", "memory_kind", "source"])
    out = validate_dataset(old)
    assert out.loc[0, "inner_mult"] == 1.0 and out.loc[0, "memory_kind"] == "allocator_peak"
    assert pd.isna(out.loc[0, "source"])
    with pytest.raises(DatasetError, match="memory_kind"):
        validate_dataset(out.assign(memory_kind="nvml"))
    with pytest.raises(DatasetError, match="inner_mult"):
        validate_dataset(out.assign(inner_mult=-1.0))


def test_screening_grids_carry_the_inner_width(tmp_path):
    from carb.commands.cli import compose
    from carb.commands.screen import load_grid

    grid = pd.DataFrame([{"block": "bottleneck", "depth": 50, "inner_mult": 2.0, "batch_size": 4},
                         {"block": "bottleneck", "depth": 50, "inner_mult": 1.0, "batch_size": 4}])
    grid.to_csv(tmp_path / "grid.csv", index=False)
    g = load_grid(compose("screen", [f"screen.grid_file={tmp_path / 'grid.csv'}",
                                     "screen.grid_defaults={width_mult: 1.0, input_size: 224, precision: fp32, "
                                     "early_downsample: true}"]))
    assert g["inner_mult"].tolist() == [2.0, 1.0] and g["params"].tolist() == [68_883_240, 25_557_032]
    s = load_grid(compose("screen", ["space=screening", "space.inner_mults=[1.0,2.0]", "space.blocks=[bottleneck]"]))
    assert set(s["inner_mult"]) == {1.0, 2.0} and s["config_id"].is_unique


def test_gpu_sweep_builds_one_model_per_inner_width():
    from carb.measure.sweep import group_by_architecture

    a = ArchConfig("bottleneck", 50, batch_size=1)
    groups = group_by_architecture([a, a.replace(inner_mult=2.0), a.replace(batch_size=2)])
    assert sorted(len(g) for g in groups) == [1, 2]
