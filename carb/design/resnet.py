"""Configurable ResNet builder: the ``nn.Module`` for an :class:`~carb.design.arch.ArchConfig`.

The module structure mirrors torchvision's ResNet (same layer order, projection shortcuts, zero
biases in convolutions), so with the ImageNet stem, base width 64 and 1000 classes the parameter
counts equal torchvision's exactly (see :func:`torchvision_equivalent`). The CIFAR stem is a 3x3
stride-1 convolution without max-pool. ``width_mult`` scales every stage's channels;
``inner_mult`` (bottleneck only) scales the inner width of each block, as torchvision's
``width_per_group / 64`` does (wide_resnet50_2 / wide_resnet101_2: 2.0).
"""
from __future__ import annotations

import torch
from torch import nn

from carb.design.arch import EXPANSION, ArchConfig, base_widths, scaled


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with a residual connection (projection when shape changes)."""

    expansion = 1

    def __init__(self, in_ch: int, planes: int, stride: int = 1, inner_mult: float = 1.0) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, planes, 1, stride, bias=False),
                                            nn.BatchNorm2d(planes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu2(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand (x4) with a residual connection (torchvision v1.5:
    stride on the 3x3). ``inner_mult`` widens the inner 3x3 (wide_resnet50_2 uses 2)."""

    expansion = 4

    def __init__(self, in_ch: int, planes: int, stride: int = 1, inner_mult: float = 1.0) -> None:
        super().__init__()
        width = max(1, int(planes * inner_mult))
        out_ch = planes * self.expansion
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu3 = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride, bias=False),
                                            nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu1(self.bn1(self.conv1(x)))
        out = self.relu2(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu3(out + identity)


class ResNet(nn.Module):
    """Stem, stages of residual blocks (first stage stride 1, the rest stride 2), global average
    pool, linear classifier. Input (B, 3, H, W); output (B, num_classes)."""

    def __init__(self, block: str, layout: tuple[int, ...], widths: tuple[int, ...],
                 early_downsample: bool = True, num_classes: int = 1000, inner_mult: float = 1.0) -> None:
        super().__init__()
        block_cls = BasicBlock if block == "basic" else Bottleneck
        stem = widths[0]
        if early_downsample:
            self.conv1 = nn.Conv2d(3, stem, 7, 2, 3, bias=False)
        else:
            self.conv1 = nn.Conv2d(3, stem, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1) if early_downsample else None
        in_ch = stem
        stages = []
        for i, (n_blocks, planes) in enumerate(zip(layout, widths)):
            blocks = []
            for j in range(n_blocks):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(block_cls(in_ch, planes, stride, inner_mult))
                in_ch = planes * EXPANSION[block]
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


def stage_widths(cfg: ArchConfig) -> tuple[int, ...]:
    """Channel width (planes) per stage after the width multiplier."""
    return tuple(scaled(w, cfg.width_mult) for w in base_widths(len(cfg.layout)))


def build_model(cfg: ArchConfig) -> ResNet:
    """The network for ``cfg``: fp32 weights on the CPU, in eval mode (callers move/cast it)."""
    model = ResNet(cfg.block, cfg.layout, stage_widths(cfg), cfg.early_downsample, cfg.num_classes,
                   cfg.inner_mult)
    return model.eval()


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
