"""The one walk of a configuration's network: every layer of one forward of one image, in order.

:func:`layer_specs` (or :func:`walk` on the bare architecture knobs) yields one :class:`LayerSpec`
per layer: the stem (conv, batch norm, ReLU, max-pool on the ImageNet stem), each residual block (its
main path, the projection shortcut where the shape changes, the residual add, the ReLU after it) and
the head (adaptive average pool, linear classifier). Three consumers read this walk and nothing
else for the topology, so they cannot disagree:

* :mod:`carb.design.resnet` builds the torch module from it (each spec's ``name`` is the qualified
  name of the module it becomes);
* :func:`carb.design.features.per_image_counts` sums the closed-form FLOPs, parameters and
  activation sizes over it;
* :mod:`carb.design.shapes` turns its convolutions into GEMM shapes and its element-wise layers into
  memory passes.

The walk is planned in parts (:func:`parts`: the stem, each residual block, the head) whose layers
depend only on the part's ``shape`` (:func:`part_layers`, cached), so the closed-form consumers can
count each distinct part once over a large grid instead of every layer of every network.

Maps are square: a size is the side of a map in pixels (1 after the pool). Torch-free; imports only
:mod:`carb.design.arch`.
"""
from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from typing import NamedTuple

from carb.design.arch import EXPANSION, ArchConfig, base_widths, scaled

#: Layer kinds, in the order a block or the network first meets them.
KINDS: tuple[str, ...] = ("conv", "bn", "relu", "maxpool", "add", "avgpool", "linear")
#: ``stage`` of the stem's layers (the head's is the number of stages).
STEM_STAGE = -1


class LayerSpec(NamedTuple):
    """One layer of one forward of one image (immutable: a named tuple, which is about seven times
    cheaper to make than a frozen dataclass; a network has hundreds of layers and a grid thousands of networks).

    kind: one of :data:`KINDS`.
    role: the module's name inside its residual block (``conv1``, ``downsample.0``; empty for the
        ``add``, which is no module) or, outside blocks, in the network (``conv1``, ``maxpool``, ``fc``);
        :attr:`name` is the qualified name.
    in_channels, out_channels: channels of the input and output maps (features for ``linear``).
    kernel, stride, padding, groups: as ``nn.Conv2d`` / ``nn.MaxPool2d`` take them; 1, 1, 0, 1 for
        layers without a window (an ``avgpool`` reduces its whole input map to one pixel).
    in_size, out_size: sides (px) of the square input and output maps (1 for ``linear``).
    stage: :data:`STEM_STAGE` for the stem, 0.. for the residual stages, the number of stages for the head.
    block: index of the residual block in its stage; -1 outside blocks (and in the unplaced layers
        of :func:`part_layers`).
    """

    kind: str
    role: str
    in_channels: int
    out_channels: int
    kernel: int
    stride: int
    padding: int
    groups: int
    in_size: int
    out_size: int
    stage: int
    block: int

    @property
    def name(self) -> str:
        """Qualified name of the module it builds to (``layers.1.0.downsample.0``; ``layers.1.0`` for an
        ``add``, its block's name)."""
        if self.block < 0:
            return self.role
        return f"layers.{self.stage}.{self.block}" + (f".{self.role}" if self.role else "")

    @property
    def in_elements(self) -> int:
        """Elements of the input map of one image."""
        return self.in_channels * self.in_size * self.in_size

    @property
    def out_elements(self) -> int:
        """Elements of the output map of one image."""
        return self.out_channels * self.out_size * self.out_size

    @property
    def weight_elements(self) -> int:
        """Weights of a convolution (``out x in / groups x k x k``) or linear layer (``out x in``); 0 otherwise."""
        if self.kind == "conv":
            return self.out_channels * (self.in_channels // self.groups) * self.kernel * self.kernel
        return self.in_channels * self.out_channels if self.kind == "linear" else 0

    @property
    def params(self) -> int:
        """Parameters of the module it builds to: the weights (convolutions have no bias), batch norm's
        scale and shift, the classifier's bias."""
        if self.kind == "bn":
            return 2 * self.out_channels
        return self.weight_elements + (self.out_channels if self.kind == "linear" else 0)

    @property
    def macs(self) -> int:
        """Multiply-adds of one image: weights x output pixels for a convolution or linear layer; 0 otherwise."""
        return self.weight_elements * self.out_size * self.out_size


def out_side(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output side (px) of a convolution or pooling window over a map of side ``size``."""
    return (size + 2 * padding - kernel) // stride + 1


def stage_widths(n_stages: int, width_mult: float) -> tuple[int, ...]:
    """Channel width (planes) per stage after the width multiplier."""
    return tuple(scaled(w, width_mult) for w in base_widths(n_stages))


class Part(NamedTuple):
    """A run of layers the walk plans as one: ``kind`` 'stem', 'block' (a residual block at
    ``layers.<stage>.<index>``) or 'head'; ``shape`` holds all its layers depend on but their place
    (stem: channels, input side, ImageNet stem?; block: family, input channels, planes, stride, input
    side, inner width multiplier; head: channels, input side, classes, number of stages)."""

    kind: str
    stage: int
    index: int
    shape: tuple

    def layers(self) -> tuple[LayerSpec, ...]:
        """Its layers, placed (a block's carry its stage and index)."""
        specs = part_layers(self.kind, self.shape)
        if self.kind != "block":
            return specs
        return tuple(s._replace(stage=self.stage, block=self.index) for s in specs)


def layer_specs(cfg: ArchConfig) -> Iterator[LayerSpec]:
    """Every layer of one forward of one image of ``cfg``'s network, in order (see :func:`walk`)."""
    return walk(*arch_key(cfg))


def arch_key(cfg: ArchConfig) -> tuple:
    """The arguments of :func:`walk` (and of the per-architecture caches) for ``cfg``:
    ``(block, layout, width_mult, input_size, early_downsample, num_classes, inner_mult)``."""
    return (cfg.block, tuple(cfg.layout), cfg.width_mult, cfg.input_size, cfg.early_downsample,
            cfg.num_classes, cfg.inner_mult)


def walk(block: str, layout: tuple[int, ...], width_mult: float, input_size: int, early_downsample: bool,
         num_classes: int = 1000, inner_mult: float = 1.0) -> Iterator[LayerSpec]:
    """Every layer of one forward of one image, in order: the layers of each of :func:`parts`."""
    for part in parts(block, layout, width_mult, input_size, early_downsample, num_classes, inner_mult):
        yield from part.layers()


def parts(block: str, layout: tuple[int, ...], width_mult: float, input_size: int, early_downsample: bool,
          num_classes: int = 1000, inner_mult: float = 1.0) -> Iterator[Part]:
    """The network in order: the stem, the residual blocks (first stage stride 1, the first block of
    every later stage stride 2) and the head. Arguments are the architecture knobs of
    :class:`~carb.design.arch.ArchConfig` (``layout``: blocks per stage; ``input_size``: input side in px)."""
    widths = stage_widths(len(layout), width_mult)
    part = Part("stem", STEM_STAGE, -1, (widths[0], input_size, bool(early_downsample)))
    yield part
    for i, (n_blocks, planes) in enumerate(zip(layout, widths)):
        for j in range(n_blocks):
            last = part_layers(part.kind, part.shape)[-1]
            stride = 2 if (i > 0 and j == 0) else 1
            part = Part("block", i, j, (block, last.out_channels, planes, stride, last.out_size, inner_mult))
            yield part
    last = part_layers(part.kind, part.shape)[-1]
    yield Part("head", len(layout), -1, (last.out_channels, last.out_size, num_classes, len(layout)))


def part_runs(block: str, layout: tuple[int, ...], width_mult: float, input_size: int, early_downsample: bool,
              num_classes: int = 1000, inner_mult: float = 1.0) -> list[tuple[Part, int]]:
    """:func:`parts` as runs ``(part, count)``: consecutive parts of the same kind and shape collapsed (the
    blocks of a stage after its first are alike), so a closed-form sum over a 200-layer network visits
    a dozen parts, not seventy. Same arguments as :func:`parts`, a layout of at least one block per stage
    (as :class:`~carb.design.arch.ArchConfig` validates it; ValueError otherwise); ``sum(count)`` is the
    number of parts. The parts' shapes come from :func:`stage_parts`, shared by the family's depths."""
    if not layout or min(layout) < 1:
        raise ValueError(f"layout: need at least one stage of >= 1 block, got {list(layout)}")
    stem, stages, head = stage_parts(block, len(layout), width_mult, input_size, early_downsample,
                                     num_classes, inner_mult)
    runs = [(stem, 1)]
    for (first, second), n_blocks in zip(stages, layout):
        for part, count in ((first, 1), (second, n_blocks - 1))[: min(n_blocks, 2)]:
            if runs[-1][0].kind == "block" and runs[-1][0].shape == part.shape:
                runs[-1] = (runs[-1][0], runs[-1][1] + count)
            else:
                runs.append((part, count))
    runs.append((head, 1))
    return runs


@lru_cache(maxsize=65536)
def stage_parts(block: str, n_stages: int, width_mult: float, input_size: int, early_downsample: bool,
                num_classes: int = 1000, inner_mult: float = 1.0) -> tuple[Part, tuple[tuple[Part, Part], ...], Part]:
    """``(stem, ((first block, second block) per stage), head)`` of a network of ``n_stages`` stages, as
    :func:`part_runs` walks them: a stage's later blocks are shaped like its second, and a block's output
    shape does not depend on its stride's place (the first and second block of a stage give the same), so
    these are the same for every number of blocks per stage (at least one each). Cached: the depths of a
    family at one width, input size and stem share them."""
    widths = stage_widths(n_stages, width_mult)
    part = stem = Part("stem", STEM_STAGE, -1, (widths[0], input_size, bool(early_downsample)))
    stages = []
    for i, planes in enumerate(widths):
        pair = []
        for j in range(2):
            channels, side = part_output(part.kind, part.shape)
            part = Part("block", i, j, (block, channels, planes, 2 if (i > 0 and j == 0) else 1, side, inner_mult))
            pair.append(part)
        stages.append((pair[0], pair[1]))
    channels, side = part_output(part.kind, part.shape)
    return stem, tuple(stages), Part("head", n_stages, -1, (channels, side, num_classes, n_stages))


#: Fields of :func:`part_summary` and :func:`network_summary`, in order: FLOPs (fvcore's), parameters,
#: activation elements in all and of the largest layer output, convolutions (the counts of
#: :func:`carb.design.features.per_image_counts`); over the GEMM rows (a convolution's ``M`` output pixels,
#: ``N`` output channels, ``K`` input channels x kernel area; the classifier's 1, classes, features) the sums
#: of ``M N K``, ``M K``, ``M N``, ``N K`` and ``M``; elements the other layers pass (a pool its input, the
#: rest their output), GEMM rows plus those layers, the largest ``M K`` of a kernel over 1 x 1 (0: none)
#: and ``M N K`` of the first row (what :func:`carb.design.shapes.per_image_terms` and the im2col term read).
SUMMARY_FIELDS = ("flops", "params", "act_total", "act_max", "n_conv", "mnk", "mk", "mn", "nk", "m",
                  "elem", "passes", "im2col_max", "first_mnk")


@lru_cache(maxsize=65536)
def part_summary(kind: str, shape: tuple) -> tuple[int, ...]:
    """:data:`SUMMARY_FIELDS` of one image over the layers of one part (:func:`part_plan`: those of
    :func:`part_layers`), whole numbers, in one pass over them."""
    flops = params = act_total = act_max = n_conv = mnk = mk = mn = nk = msum = elem = passes = im2col = 0
    first = None
    for k, _role, cin, cout, kernel, _stride, _pad, in_size, side, _stage in part_plan(kind, shape):
        out = cout * side * side
        if k == "conv" or k == "linear":
            if k == "conv":
                K = cin * kernel * kernel
                m, n = side * side, cout
                params += cout * K
                flops += cout * K * side * side
                n_conv += 1
                if kernel > 1:
                    im2col = max(im2col, m * K)
            else:
                m, n, K = 1, cout, cin
                params += cin * cout + cout
                flops += cin * cout * side * side
            mnk, mk, mn, nk, msum, passes = mnk + m * n * K, mk + m * K, mn + m * n, nk + n * K, msum + m, passes + 1
            first = m * n * K if first is None else first
        else:
            pooled = k == "maxpool" or k == "avgpool"
            elem += cin * in_size * in_size if pooled else out
            passes += 1
            if k == "bn":
                params += 2 * cout
                flops += 2 * out
            elif k == "avgpool":
                flops += cin * in_size * in_size
        if k != "add":
            act_total += out
            act_max = max(act_max, out)
    return (flops, params, act_total, act_max, n_conv, mnk, mk, mn, nk, msum, elem, passes, im2col, first or 0)


def part_plan(kind: str, shape: tuple) -> list[tuple[str, str, int, int, int, int, int, int, int, int]]:
    """The layers of a part of this kind and shape, in order, each a plain tuple ``(kind, role, in_channels,
    out_channels, kernel, stride, padding, in_size, out_size, stage)`` (no groups: none of these layers has
    any): the one definition of the network's layers. :func:`part_layers` makes them
    :class:`LayerSpec`\ s; the counts read the tuples, without a named tuple per layer (a
    million-candidate grid has some fifty thousand distinct parts, half a million layers).
    ``tests/test_walk.py`` holds them to PyTorch's modules, layer by layer.

    Stem: 7x7 stride-2 conv + batch norm + ReLU + 3x3 stride-2 max-pool (ImageNet), or 3x3 stride-1 conv
    + batch norm + ReLU (CIFAR). Block: its main path (:func:`block_path`), each conv followed by batch
    norm and all but the last by ReLU; then a projection shortcut (1x1 conv + batch norm) where the shape
    changes, the residual add and a ReLU (stage -1: unplaced). Head: adaptive average pool to one pixel,
    then the linear classifier."""
    if kind == "stem":
        channels, size, early = shape
        k, st, pad = (7, 2, 3) if early else (3, 1, 1)
        s1 = out_side(size, k, st, pad)
        plan = [("conv", "conv1", 3, channels, k, st, pad, size, s1, STEM_STAGE),
                ("bn", "bn1", channels, channels, 1, 1, 0, s1, s1, STEM_STAGE),
                ("relu", "relu", channels, channels, 1, 1, 0, s1, s1, STEM_STAGE)]
        if early:
            plan.append(("maxpool", "maxpool", channels, channels, 3, 2, 1, s1, out_side(s1, 3, 2, 1), STEM_STAGE))
        return plan
    if kind == "head":
        channels, size, num_classes, n_stages = shape
        return [("avgpool", "avgpool", channels, channels, size, 1, 0, size, 1, n_stages),
                ("linear", "fc", channels, num_classes, 1, 1, 0, 1, 1, n_stages)]
    block, cin, planes, stride, size, inner_mult = shape
    cout, path = block_path(block, planes, stride, inner_mult)
    plan, c, s = [], cin, size
    for n, (channels, kernel, conv_stride, padding) in enumerate(path, start=1):
        s2 = out_side(s, kernel, conv_stride, padding)
        plan.append(("conv", f"conv{n}", c, channels, kernel, conv_stride, padding, s, s2, -1))
        c, s = channels, s2
        plan.append(("bn", f"bn{n}", c, c, 1, 1, 0, s, s, -1))
        if n < len(path):
            plan.append(("relu", f"relu{n}", c, c, 1, 1, 0, s, s, -1))
    if stride != 1 or cin != cout:
        s3 = out_side(size, 1, stride, 0)
        plan += [("conv", "downsample.0", cin, cout, 1, stride, 0, size, s3, -1),
                 ("bn", "downsample.1", cout, cout, 1, 1, 0, s3, s3, -1)]
    plan += [("add", "", cout, cout, 1, 1, 0, s, s, -1), ("relu", f"relu{len(path)}", cout, cout, 1, 1, 0, s, s, -1)]
    return plan


def part_output(kind: str, shape: tuple) -> tuple[int, int]:
    """``(channels, side)`` of a part's output map: its last layer's (:func:`part_plan`)."""
    last = part_plan(kind, shape)[-1]
    return last[3], last[8]


@lru_cache(maxsize=65536)
def network_summary(block: str, layout: tuple[int, ...], width_mult: float, input_size: int, early_downsample: bool,
                    num_classes: int = 1000, inner_mult: float = 1.0) -> tuple[int, ...]:
    """:data:`SUMMARY_FIELDS` of one image of a network (arguments of :func:`parts`): each part's
    (:func:`part_summary`) times its count in :func:`part_runs`, the largest ones the largest over its parts,
    the first row the stem's; whole numbers, so any order of summing gives the same."""
    tot = [0] * len(SUMMARY_FIELDS)
    first = None
    for part, count in part_runs(block, layout, width_mult, input_size, early_downsample, num_classes, inner_mult):
        p = part_summary(part.kind, part.shape)
        for i in (0, 1, 2, 4, 5, 6, 7, 8, 9, 10, 11):
            tot[i] += count * p[i]
        tot[3], tot[12] = max(tot[3], p[3]), max(tot[12], p[12])
        first = p[13] if first is None else first
    tot[13] = first or 0
    return tuple(tot)


@lru_cache(maxsize=65536)
def part_layers(kind: str, shape: tuple) -> tuple[LayerSpec, ...]:
    """The layers of a :class:`Part` of this kind and shape (:func:`part_plan`), in order; a block's are
    unplaced (stage and block -1, so :attr:`LayerSpec.name` is the role inside the block)."""
    return tuple(LayerSpec(k, role, cin, cout, kernel, stride, pad, 1, in_size, out_size, stage, -1)
                 for k, role, cin, cout, kernel, stride, pad, in_size, out_size, stage in part_plan(kind, shape))


def block_path(block: str, planes: int, stride: int, inner_mult: float) -> tuple[int, tuple[tuple[int, int, int, int], ...]]:
    """``(output channels, its main path's convolutions as (channels, kernel, stride, padding))`` of a
    residual block: basic, two 3x3; bottleneck, 1x1 reduce to ``int(planes * inner_mult)``, 3x3 strided, 1x1
    expand x4 (:func:`part_plan` builds on it)."""
    if block == "basic":
        return planes, ((planes, 3, stride, 1), (planes, 3, 1, 1))
    width = max(1, int(planes * inner_mult))
    cout = planes * EXPANSION["bottleneck"]
    return cout, ((width, 1, 1, 0), (width, 3, stride, 1), (cout, 1, 1, 0))
