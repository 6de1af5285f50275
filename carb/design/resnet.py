"""Configurable ResNet builder: the ``nn.Module`` for an :class:`~carb.design.arch.ArchConfig`,
one module per layer of the walk (:func:`carb.design.layers.layer_specs`).

The module structure mirrors torchvision's ResNet (same layer order, projection shortcuts, zero
biases in convolutions), so with the ImageNet stem, base width 64 and 1000 classes the parameter
counts equal torchvision's exactly (see :func:`torchvision_equivalent`). The CIFAR stem is a 3x3
stride-1 convolution without max-pool. ``width_mult`` scales every stage's channels;
``inner_mult`` (bottleneck only) scales the inner width of each block, as torchvision's
``width_per_group / 64`` does (wide_resnet50_2 / wide_resnet101_2: 2.0).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby

import torch
from torch import nn

from carb.design.arch import ArchConfig
from carb.design.layers import LayerSpec, layer_specs


def layer_module(spec: LayerSpec) -> nn.Module | None:
    """The torch module of one layer of the walk (None for the residual add, which is no module)."""
    if spec.kind == "conv":
        return nn.Conv2d(spec.in_channels, spec.out_channels, spec.kernel, spec.stride, spec.padding,
                         groups=spec.groups, bias=False)
    if spec.kind == "bn":
        return nn.BatchNorm2d(spec.out_channels)
    if spec.kind == "relu":
        return nn.ReLU(inplace=True)
    if spec.kind == "maxpool":
        return nn.MaxPool2d(spec.kernel, spec.stride, spec.padding)
    if spec.kind == "avgpool":
        return nn.AdaptiveAvgPool2d(spec.out_size)
    if spec.kind == "linear":
        return nn.Linear(spec.in_channels, spec.out_channels)
    return None


class Residual(nn.Module):
    """A residual block built from its layers of the walk: the main path (convolutions, batch norms and
    ReLUs in order), a projection shortcut (``downsample``: 1x1 conv + batch norm) where the shape
    changes, the add and the last ReLU. Module names as torchvision's BasicBlock / Bottleneck."""

    def __init__(self, specs: Sequence[LayerSpec]) -> None:
        super().__init__()
        self.downsample: nn.Sequential | None = None
        shortcut = []
        self.main_path: list[str] = []
        for spec in specs:
            module = layer_module(spec)
            if spec.role.startswith("downsample."):
                shortcut.append(module)
            elif module is not None:
                self.add_module(spec.role, module)
                self.main_path.append(spec.role)
        self.out_relu = self.main_path.pop()   # after the add
        if shortcut:
            self.downsample = nn.Sequential(*shortcut)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = x
        for role in self.main_path:
            out = getattr(self, role)(out)
        return getattr(self, self.out_relu)(out + identity)


class ResNet(nn.Module):
    """Stem, stages of residual blocks, global average pool, linear classifier, built from the walk
    (:func:`carb.design.layers.walk`): every layer's module sits at its spec's ``name``.
    Input (B, 3, H, W); output (B, num_classes)."""

    def __init__(self, specs: Iterable[LayerSpec]) -> None:
        super().__init__()
        self.maxpool: nn.Module | None = None   # the CIFAR stem has none
        for (stage, index), group in groupby(specs, key=lambda spec: (spec.stage, spec.block)):
            if index < 0:   # stem or head: one module per layer
                for spec in group:
                    setattr(self, spec.role, layer_module(spec))
                continue
            if not hasattr(self, "layers"):
                self.layers = nn.Sequential()
            if len(self.layers) == stage:
                self.layers.append(nn.Sequential())
            self.layers[stage].append(Residual(list(group)))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_model(cfg: ArchConfig) -> ResNet:
    """The network for ``cfg``: fp32 weights on the CPU, in eval mode (callers move/cast it)."""
    return ResNet(layer_specs(cfg)).eval()


#: torchvision model name -> (block, depth, inner width multiplier).
TORCHVISION = {
    "resnet18": ("basic", 18, 1.0), "resnet34": ("basic", 34, 1.0), "resnet50": ("bottleneck", 50, 1.0),
    "resnet101": ("bottleneck", 101, 1.0), "resnet152": ("bottleneck", 152, 1.0),
    "wide_resnet50_2": ("bottleneck", 50, 2.0), "wide_resnet101_2": ("bottleneck", 101, 2.0),
}


def torchvision_equivalent(name: str) -> ResNet:
    """Our module equivalent to a torchvision ImageNet ResNet (same parameter count, eval mode)."""
    if name not in TORCHVISION:
        from carb.errors import ConfigError

        raise ConfigError(f"name: {name!r} has no equivalent; allowed: {sorted(TORCHVISION)}")
    block, depth, inner = TORCHVISION[name]
    return build_model(ArchConfig(block=block, depth=depth, width_mult=1.0, input_size=224,
                                  early_downsample=True, inner_mult=inner))
