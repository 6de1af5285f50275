"""The one walk of a ResNet (carb.design.layers): the built torch module, the closed-form counts
(carb.design.features) and the GEMM shapes (carb.design.shapes) agree with it layer by layer, read
off the real network with forward hooks; a walk that is wrong in one layer is caught."""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pytest
import torch
from torch import nn

from carb.design.arch import ArchConfig
from carb.design.features import per_image_counts
from carb.design.layers import LayerSpec, arch_key, layer_specs, parts
from carb.design.resnet import Residual, build_model
from carb.design.shapes import _walk

CONFIGS = [
    ArchConfig("basic", 8, 0.25, 32, 2, "fp32", False, num_classes=10),
    ArchConfig("basic", 18, 0.5, 37, 1, "fp16", True, num_classes=7),       # odd side: floors in every stride
    ArchConfig("bottleneck", 26, 0.25, 33, 2, "bf16", True, inner_mult=2.0),
    ArchConfig("bottleneck", 26, 0.75, 32, 1, "fp32", False, stages=(1, 2, 3, 2)),
    ArchConfig("basic", 14, 1.5, 16, 1, "fp32", True, stages=(1, 3, 2)),     # maps reach 1 x 1 early
]
KIND_OF = {nn.Conv2d: "conv", nn.BatchNorm2d: "bn", nn.ReLU: "relu", nn.MaxPool2d: "maxpool",
           nn.AdaptiveAvgPool2d: "avgpool", nn.Linear: "linear", Residual: "add"}


@lru_cache(maxsize=None)
def _hooked_shapes(cfg: ArchConfig) -> tuple[nn.Module, dict[str, tuple[tuple[int, ...], tuple[int, ...]]]]:
    """The built network and, per leaf module and residual block (whose output is its add's, after the
    last ReLU: same shape), the per-image ``(input shape, output shape)`` of one forward."""
    model = build_model(cfg)
    seen: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}

    def record(name: str):
        def hook(_module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            seen.setdefault(name, (tuple(inputs[0].shape[1:]), tuple(output.shape[1:])))
        return hook

    hooks = [m.register_forward_hook(record(name)) for name, m in model.named_modules()
             if isinstance(m, Residual) or not list(m.children())]
    with torch.no_grad():
        model(torch.zeros(cfg.batch_size, 3, cfg.input_size, cfg.input_size))
    for h in hooks:
        h.remove()
    return model, seen


def _spec_shape(channels: int, size: int, kind: str) -> tuple[int, ...]:
    return (channels,) if kind == "linear" else (channels, size, size)


def disagreements(cfg: ArchConfig, specs: list[LayerSpec]) -> list[str]:
    """Where the network built for ``cfg`` differs from ``specs``: each spec names a module of its kind
    with its channels, window and parameters, whose hooked input and output shapes are the spec's;
    every leaf module is named by a spec."""
    model, seen = _hooked_shapes(cfg)
    modules = dict(model.named_modules())
    out = []
    for s in specs:
        m = modules.get(s.name)
        if m is None or KIND_OF.get(type(m)) != s.kind:
            out.append(f"{s.name}: {s.kind} is {type(m).__name__} in the network")
            continue
        got = seen[s.name]
        want = (_spec_shape(s.in_channels, s.in_size, s.kind), _spec_shape(s.out_channels, s.out_size, s.kind))
        if s.kind == "add":   # the block's input is its first layer's
            want = (got[0], want[1])
        if got != want:
            out.append(f"{s.name}: shapes {got} in the network, {want} in the walk")
        if isinstance(m, nn.Conv2d) and (m.kernel_size, m.stride, m.padding, m.groups) != (
                (s.kernel,) * 2, (s.stride,) * 2, (s.padding,) * 2, s.groups):
            out.append(f"{s.name}: window {m.kernel_size, m.stride, m.padding, m.groups} in the network")
        if s.kind != "add" and sum(p.numel() for p in m.parameters()) != s.params:
            out.append(f"{s.name}: {sum(p.numel() for p in m.parameters())} parameters in the network, {s.params} in the walk")
    named = {s.name for s in specs}
    out += [f"{n}: not in the walk" for n, m in modules.items() if not list(m.children()) and n not in named]
    return out


def _counts_from_network(cfg: ArchConfig) -> tuple[float, int, float, float, int]:
    """:func:`per_image_counts` read off the built network's modules and hooked shapes (fvcore's FLOP
    convention: multiply-adds of convs and the classifier, 2 per batch-norm element, 1 per pooled input element)."""
    model, seen = _hooked_shapes(cfg)
    flops = act_total = act_max = 0
    for name, m in model.named_modules():
        if list(m.children()):
            continue
        (i, o), n_out = seen[name], int(np.prod(seen[name][1]))
        act_total, act_max = act_total + n_out, max(act_max, n_out)
        if isinstance(m, nn.Conv2d):
            flops += n_out * m.weight[0].numel()
        elif isinstance(m, nn.BatchNorm2d):
            flops += 2 * n_out
        elif isinstance(m, nn.AdaptiveAvgPool2d):
            flops += int(np.prod(i))
        elif isinstance(m, nn.Linear):
            flops += m.weight.numel()
    return (float(flops), sum(p.numel() for p in model.parameters()), float(act_total), float(act_max),
            sum(isinstance(m, nn.Conv2d) for m in model.modules()))


def _gemm_rows_from_network(cfg: ArchConfig) -> np.ndarray:
    """The :data:`carb.design.shapes.CONV_COLUMNS` rows read off the built network: each convolution in
    module order, then the classifier."""
    model, seen = _hooked_shapes(cfg)
    rows = [(seen[n][1][1] * seen[n][1][2], m.out_channels, m.weight[0].numel(), m.kernel_size[0], m.stride[0],
             seen[n][0][1]) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]
    rows.append((1, model.fc.out_features, model.fc.in_features, 0, 1, 1))
    return np.array(rows, dtype=float)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.block}-{c.stages_str}-w{c.width_mult}-{c.input_size}px")
def test_builder_counts_and_shapes_agree_with_the_walk_layer_by_layer(cfg):
    specs = list(layer_specs(cfg))
    assert disagreements(cfg, specs) == []
    assert len({s.name for s in specs}) == len(specs)
    assert per_image_counts(*arch_key(cfg)) == _counts_from_network(cfg)
    convs, elementwise, passes = _walk(*arch_key(cfg))
    assert np.array_equal(convs, _gemm_rows_from_network(cfg))
    assert passes == sum(s.kind not in ("conv", "linear") for s in specs)
    assert elementwise == sum(s.in_elements if s.kind in ("maxpool", "avgpool") else s.out_elements
                              for s in specs if s.kind not in ("conv", "linear"))


def test_walk_is_its_parts_in_order():
    cfg = CONFIGS[2]
    flat = [s for p in parts(*arch_key(cfg)) for s in p.layers()]
    assert flat == list(layer_specs(cfg))
    assert [s.name for s in flat[:4]] == ["conv1", "bn1", "relu", "maxpool"]
    assert [s.name for s in flat[-2:]] == ["avgpool", "fc"]
    assert {s.name for s in flat if s.kind == "add"} == {f"layers.{i}.{j}" for i, n in enumerate(cfg.layout)
                                                        for j in range(n)}


@pytest.mark.parametrize("wrong", [
    lambda s: s._replace(stride=1) if s.name == "layers.1.0.downsample.0" else s,
    lambda s: s._replace(out_channels=s.out_channels + 1) if s.name == "layers.0.0.bn1" else s,
    lambda s: s._replace(out_size=s.out_size + 1) if s.name == "maxpool" else s,
    lambda s: s._replace(role="relu9") if s.name == "layers.2.0.relu2" else s,
])
def test_a_walk_wrong_in_one_layer_is_caught(wrong):
    cfg = CONFIGS[1]
    specs = [wrong(s) for s in layer_specs(cfg)]
    assert specs != list(layer_specs(cfg))
    assert disagreements(cfg, specs)
