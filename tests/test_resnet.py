"""Model builder: torchvision parameter counts and forward shapes."""
from __future__ import annotations

import pytest
import torch

from carb.errors import ConfigError
from carb.design.resnet import build_model, torchvision_equivalent
from carb.design.arch import ArchConfig

TORCHVISION_PARAMS = {"resnet18": 11_689_512, "resnet34": 21_797_672, "resnet50": 25_557_032,
                      "resnet101": 44_549_160, "resnet152": 60_192_808, "wide_resnet50_2": 68_883_240}


@pytest.mark.parametrize("name", sorted(TORCHVISION_PARAMS))
def test_torchvision_param_counts(name):
    m = torchvision_equivalent(name)
    assert sum(p.numel() for p in m.parameters()) == TORCHVISION_PARAMS[name]


def test_unknown_torchvision_name():
    with pytest.raises(ConfigError, match="allowed"):
        torchvision_equivalent("resnet9000")


@pytest.mark.parametrize("cfg", [
    ArchConfig("basic", 8, 0.25, 32, 2, "fp32", False, num_classes=10),
    ArchConfig("basic", 18, 0.5, 64, 1, "fp32", True, num_classes=10),
    ArchConfig("bottleneck", 26, 0.25, 32, 2, "fp32", True, num_classes=7),
])
def test_forward_shape(cfg):
    m = build_model(cfg)
    with torch.no_grad():
        out = m(torch.zeros(cfg.batch_size, 3, cfg.input_size, cfg.input_size))
    assert out.shape == (cfg.batch_size, cfg.num_classes)
    assert not m.training


def test_width_mult_scales_channels():
    small = build_model(ArchConfig("basic", 20, 0.5, 32, early_downsample=False))
    big = build_model(ArchConfig("basic", 20, 2.0, 32, early_downsample=False))
    assert small.conv1.out_channels == 8 and big.conv1.out_channels == 32
