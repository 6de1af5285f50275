"""What one CNN configuration is: the knob tables (blocks, precisions, layouts) and the
immutable, validated :class:`ArchConfig` with its stable ``config_id``.

This is the ground floor of the design layer: it imports nothing of CARB but :mod:`carb.errors`.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from carb.errors import ConfigError

BLOCKS: tuple[str, ...] = ("basic", "bottleneck")
#: The numeric formats, one table: bytes per stored element. Every other precision table (bits, the
#: allowed values, the order in reports, torch dtypes) derives from this one.
BYTES_PER_ELEMENT: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2}
#: Allowed precisions, in display order (widest first).
PRECISIONS: tuple[str, ...] = tuple(BYTES_PER_ELEMENT)
#: Bits per element (fp16 and bf16 are both 16 bits; bf16 keeps fp32's 8-bit exponent).
PRECISION_BITS: dict[str, int] = {p: 8 * b for p, b in BYTES_PER_ELEMENT.items()}
#: torch dtype attribute name of each precision (``getattr(torch, TORCH_DTYPES[p])``).
TORCH_DTYPES: dict[str, str] = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
#: Named stage layouts (blocks per stage). Basic: CIFAR pattern depth = 6n+2 (three stages of n
#: blocks) plus ImageNet 18/34; bottleneck: ImageNet layouts.
BASIC_CIFAR_DEPTHS: tuple[int, ...] = (8, 14, 20, 32, 44, 56, 110, 152)
LAYOUTS: dict[str, dict[int, tuple[int, ...]]] = {
    "basic": {**{d: ((d - 2) // 6,) * 3 for d in BASIC_CIFAR_DEPTHS},
              18: (2, 2, 2, 2), 34: (3, 4, 6, 3)},
    "bottleneck": {26: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3),
                   200: (3, 24, 36, 3)},
}
#: Layers per block (convolutions on the main path).
LAYERS_PER_BLOCK = {"basic": 2, "bottleneck": 3}
#: Bottleneck expansion factor.
EXPANSION = {"basic": 1, "bottleneck": 4}
#: The knobs of a configuration (dataset columns of the same names).
KNOBS: tuple[str, ...] = ("block", "depth", "width_mult", "input_size", "batch_size", "precision",
                          "early_downsample", "stages", "inner_mult")
#: The columns a configuration record (a grid file's row, a knob frame's row) may carry: the knobs, the
#: classifier's ``num_classes`` and the ``config_id`` that names it.
RECORD_COLUMNS: tuple[str, ...] = (*KNOBS, "num_classes", "config_id")
#: Default of each knob that a configuration need not name (older datasets lack the column; a
#: configuration with the default value keeps the ``config_id`` it had before the knob existed).
KNOB_DEFAULTS: dict[str, Any] = {"inner_mult": 1.0}
_TRUE, _FALSE = ("true", "1"), ("false", "0")


def to_bool(value: Any) -> bool | None:
    """``value`` as a bool, or None when it is not one: bools and numpy bools as they are, the numbers
    1/0, and the strings true/false or 1/0 (any case, surrounding blanks ignored). The one parser of
    boolean knobs and columns (configs, grid files, datasets, model inputs)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    v = str(value).strip().lower()
    return True if v in _TRUE else False if v in _FALSE else None


def parse_bool(value: Any, field: str = "value") -> bool:
    """:func:`to_bool`, raising :class:`ConfigError` naming ``field`` for anything that is not a bool."""
    b = to_bool(value)
    if b is None:
        raise ConfigError(f"{field}: must be true or false, got {value!r}")
    return b


def lookup(values: Any, table: Mapping[Any, float]) -> Any:
    """``table[v]`` for each element of ``values`` (a pandas Series or a 1-D array), NaN where the table has no
    entry or the value is missing: a float array, shape (n,). What ``Series.map(table).to_numpy(float)`` gives,
    with each distinct value looked up once (``map`` on pandas' Arrow strings walks every row: 3.6 ms for the
    6,912 knot rows of a 3,072-candidate screening, 0.16 ms here, and screening asks a dozen times)."""
    import numpy as np
    import pandas as pd

    codes, uniq = pd.factorize(values)
    found = np.array([*(table.get(u, np.nan) for u in uniq), np.nan], dtype=float)   # -1 (missing) takes the last
    return found[codes]


def depth_of(block: str, stages: Sequence[int]) -> int:
    """Nominal depth of a layout: layers per block x blocks + stem conv + classifier."""
    return LAYERS_PER_BLOCK[block] * int(sum(stages)) + 2


def scaled(channels: int, width_mult: float) -> int:
    """Channels after the width multiplier: ``max(1, round(channels * width_mult))``."""
    return max(1, int(round(channels * width_mult)))


def base_widths(n_stages: int) -> tuple[int, ...]:
    """Base channel widths per stage: ImageNet (64, 128, 256, 512) for four stages, CIFAR
    (16, 32, 64, ...) otherwise."""
    base = 64 if n_stages == 4 else 16
    return tuple(base * 2**i for i in range(n_stages))


def _parse_stages(stages: Any) -> tuple[int, ...] | None:
    if stages is None or stages == "" or (isinstance(stages, float) and math.isnan(stages)):
        return None
    if isinstance(stages, str):
        parts = [p for p in stages.replace(",", "-").split("-") if p.strip()]
        try:
            return tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(f"stages: expected blocks per stage like '2-2-2-2' or [2,2,2,2], got {stages!r}") from None
    try:
        return tuple(int(s) for s in stages)
    except (TypeError, ValueError):
        raise ConfigError(f"stages: expected a list of positive ints, got {stages!r}") from None


@dataclass(frozen=True)
class ArchConfig:
    """One CNN configuration: a ResNet-style network plus its input and numeric format.

    block: 'basic' (two 3x3 convs) or 'bottleneck' (1x1-3x3-1x1, expansion 4).
    depth: nominal depth; must be a named layout of the block family unless ``stages`` is given,
        in which case it must equal ``layers_per_block * sum(stages) + 2``.
    width_mult: multiplier (> 0) on every stage's channel width.
    input_size: square input side H = W in pixels; at least the network's total downsampling.
    batch_size: images per forward (> 0).
    precision: 'fp32' | 'fp16' | 'bf16'.
    early_downsample: True = 7x7 stride-2 conv + 3x3 stride-2 max-pool stem (ImageNet);
        False = 3x3 stride-1 conv stem (CIFAR).
    stages: explicit blocks per stage, or None for the named layout of ``depth``.
    num_classes: classifier outputs.
    inner_mult: bottleneck inner width multiplier (> 0): the 1x1-3x3-1x1 block's inner width is
        ``int(planes * inner_mult)`` while its output stays ``4 * planes``; torchvision's
        ``width_per_group / 64`` (wide_resnet50_2 and wide_resnet101_2: 2.0). Basic blocks have no
        inner width: only 1.0 is allowed there.
    """

    block: str
    depth: int
    width_mult: float = 1.0
    input_size: int = 224
    batch_size: int = 1
    precision: str = "fp32"
    early_downsample: bool = True
    stages: tuple[int, ...] | None = None
    num_classes: int = 1000
    inner_mult: float = 1.0
    _layout: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.block not in BLOCKS:
            raise ConfigError(f"block: {self.block!r} is not allowed; allowed: {list(BLOCKS)}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision: {self.precision!r} is not allowed; allowed: {list(PRECISIONS)}")
        for name in ("depth", "input_size", "batch_size", "num_classes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int,)) and not (isinstance(v, float) and v.is_integer()):
                raise ConfigError(f"{name}: must be a positive integer, got {v!r}")
            object.__setattr__(self, name, int(v))
            if int(v) <= 0:
                raise ConfigError(f"{name}: must be a positive integer, got {v!r}")
        try:
            w = float(self.width_mult)
        except (TypeError, ValueError):
            raise ConfigError(f"width_mult: must be a positive number, got {self.width_mult!r}") from None
        if not math.isfinite(w) or w <= 0:
            raise ConfigError(f"width_mult: must be a positive number, got {self.width_mult!r}")
        object.__setattr__(self, "width_mult", w)
        object.__setattr__(self, "inner_mult", _inner_mult(self.inner_mult, self.block))
        if not isinstance(self.early_downsample, bool):
            object.__setattr__(self, "early_downsample", parse_bool(self.early_downsample, "early_downsample"))
        stages = _parse_stages(self.stages)
        object.__setattr__(self, "stages", stages)
        if stages is None:
            allowed = LAYOUTS[self.block]
            if self.depth not in allowed:
                raise ConfigError(f"depth: {self.depth} is not a {self.block} layout; allowed: "
                                  f"{sorted(allowed)} (or give explicit stages)")
            layout = allowed[self.depth]
        else:
            if not stages or any(s <= 0 for s in stages):
                raise ConfigError(f"stages: need at least one stage of >= 1 block, got {list(stages)}")
            if depth_of(self.block, stages) != self.depth:
                raise ConfigError(f"depth: {self.depth} does not match stages {list(stages)} for {self.block} "
                                  f"blocks (expected {depth_of(self.block, stages)})")
            layout = stages
        object.__setattr__(self, "_layout", tuple(layout))
        if self.input_size < self.min_input_size:
            raise ConfigError(f"input_size: {self.input_size} is too small for this network's downsampling "
                              f"(stem {'7x7/2 + maxpool/2' if self.early_downsample else '3x3/1'}, "
                              f"{len(layout)} stages); allowed: >= {self.min_input_size}")

    # ----------------------------------------------------------------- derived
    @property
    def layout(self) -> tuple[int, ...]:
        """Blocks per stage actually built."""
        return self._layout

    @property
    def min_input_size(self) -> int:
        """Smallest input side the network can downsample: stem factor x 2**(stages - 1)."""
        return (4 if self.early_downsample else 1) * 2 ** (len(self._layout) - 1)

    @property
    def stages_str(self) -> str:
        return "-".join(map(str, self._layout))

    def to_dict(self) -> dict[str, Any]:
        """Knob columns of the dataset schema (``stages`` as '2-2-2-2'), in :data:`KNOBS` order."""
        return {"block": self.block, "depth": self.depth, "width_mult": self.width_mult,
                "input_size": self.input_size, "batch_size": self.batch_size, "precision": self.precision,
                "early_downsample": self.early_downsample, "stages": self.stages_str,
                "inner_mult": self.inner_mult}

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit hash of the knobs (same on every machine and Python version).

        A knob at its :data:`KNOB_DEFAULTS` value is left out of the hash, so configurations that
        existed before that knob keep their ids (the shipped datasets key on them)."""
        d = self.to_dict()
        for k, default in KNOB_DEFAULTS.items():
            if d[k] == default:
                del d[k]
            else:
                d[k] = repr(float(d[k]))
        d["width_mult"] = repr(float(d["width_mult"]))
        d["num_classes"] = self.num_classes
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def replace(self, **changes: Any) -> "ArchConfig":
        d = {k: v for k, v in asdict(self).items() if k != "_layout"}
        d.update(changes)
        return ArchConfig(**d)


def _inner_mult(value: Any, block: str) -> float:
    """The inner width multiplier as a float: NaN/None mean the default 1.0; a positive finite number,
    and 1.0 only for basic blocks. Raises :class:`ConfigError` naming ``inner_mult``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return 1.0
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"inner_mult: must be a positive number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise ConfigError(f"inner_mult: must be a positive number, got {value!r}")
    if block == "basic" and v != 1.0:
        raise ConfigError(f"inner_mult: {v:g} is not allowed for basic blocks (no inner width); allowed: [1.0]")
    return v


def configs_from_records(records: Iterable[Mapping[str, Any]], source: str = "grid") -> list[ArchConfig]:
    """Build configs from rows of knob values (e.g. a CSV/parquet grid file).

    Unknown columns raise :class:`ConfigError` naming them and the allowed knobs; NaN ``stages`` means
    the named layout."""
    allowed = set(RECORD_COLUMNS)
    out = []
    for i, rec in enumerate(records):
        unknown = sorted(set(rec) - allowed)
        if unknown:
            raise ConfigError(f"{source}: unknown knob column(s) {unknown}; allowed: {list(KNOBS)}")
        d = {k: v for k, v in rec.items() if k != "config_id"}
        try:
            out.append(ArchConfig(**d))
        except TypeError as e:
            raise ConfigError(f"{source}: row {i}: {e}") from None
        except ConfigError as e:
            raise ConfigError(f"{source}: row {i}: {e}") from None
    return out
