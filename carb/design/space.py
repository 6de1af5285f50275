"""The design space: the expansion of a space config (``conf/space/*.yaml``) into a list of
:class:`~carb.design.arch.ArchConfig` (grid or seeded random sample, optionally capped by FLOPs), or into
the same candidates as a knob frame (:func:`space_frame`, for grids of a million: no object per row).

Nothing here imports torch, Hydra or OmegaConf: spaces are plain YAML, and overrides follow Hydra's
dotlist syntax, so ``load_space("screening", ["batch_sizes=[1,8]"])`` gives the same configs as
``carb-screen space.batch_sizes=[1,8]``.
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import BLOCKS, LAYOUTS, ArchConfig
from carb.design.candidates import ARCH_COLUMNS, FRAME_COLUMNS, arch_codes, arch_record
from carb.design.features import arch_args, per_image_counts
from carb.errors import ConfigError
from carb.resources import CONF_DIR

SPACE_KEYS: tuple[str, ...] = ("name", "mode", "n", "seed", "blocks", "depths", "width_mults",
                               "input_sizes", "batch_sizes", "precisions", "early_downsample",
                               "stages", "num_classes", "description", "max_flops", "inner_mults")
_CONF_SPACE = CONF_DIR / "space"


def _as_plain(node: Any) -> Any:
    """A plain dict/list copy of a mapping or sequence node (a composed OmegaConf node resolves its
    interpolations on access, so no OmegaConf import is needed here)."""
    if isinstance(node, Mapping):
        return {str(k): _as_plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)) or (isinstance(node, Sequence) and not isinstance(node, (str, bytes))):
        return [_as_plain(v) for v in node]
    return node


def _set_dotted(cfg: dict[str, Any], key: str, value: Any) -> None:
    node = cfg
    *parents, leaf = key.split(".")
    for k in parents:
        nxt = node.get(k)
        if not isinstance(nxt, dict):
            nxt = node[k] = {}
        node = nxt
    node[leaf] = value


def _listify(name: str, v: Any) -> list:
    if isinstance(v, (list, tuple)):
        if not v:
            raise ConfigError(f"space.{name}: empty list; give at least one value")
        return list(v)
    return [v]


def space_size(space: Mapping[str, Any]) -> int:
    """Size of the full product of a space's knob values."""
    return len(_product(space))


def _product_check(space: Mapping[str, Any]) -> list[str]:
    """The space's block families, after checking its keys, ``blocks`` and ``depths``
    (:class:`ConfigError` naming the key otherwise)."""
    unknown = sorted(set(space) - set(SPACE_KEYS))
    if unknown:
        raise ConfigError(f"space: unknown key(s) {unknown}; allowed: {list(SPACE_KEYS)}")
    blocks = _listify("blocks", space.get("blocks", list(BLOCKS)))
    depths = space.get("depths")
    if not isinstance(depths, Mapping):
        raise ConfigError("space.depths: must map each block family to its depths, e.g. "
                          "{basic: [14, 20], bottleneck: [50]}")
    bad = sorted(set(depths) - set(BLOCKS))
    if bad:
        raise ConfigError(f"space.depths: unknown block family {bad}; allowed: {list(BLOCKS)}")
    for block in blocks:
        if block not in BLOCKS:
            raise ConfigError(f"space.blocks: {block!r} is not allowed; allowed: {list(BLOCKS)}")
        if block not in depths or depths[block] in (None, []):
            raise ConfigError(f"space.depths.{block}: no depths given for block family {block!r}")
    return blocks


def _product(space: Mapping[str, Any]) -> list[tuple]:
    blocks = _product_check(space)
    depths = space["depths"]
    rows = []
    for block in blocks:
        for combo in itertools.product(
                _listify(f"depths.{block}", depths[block]), _listify("width_mults", space.get("width_mults", [1.0])),
                _listify("input_sizes", space.get("input_sizes", [224])),
                _listify("batch_sizes", space.get("batch_sizes", [1])),
                _listify("precisions", space.get("precisions", ["fp32"])),
                _listify("early_downsample", space.get("early_downsample", [True]))):
            for inner in _inner_values(block, space):
                rows.append((block, *combo, inner))
    return rows


def _inner_values(block: str, space: Mapping[str, Any]) -> list[float]:
    """The space's ``inner_mults`` (bottleneck inner width multipliers; default [1.0]) for bottleneck
    blocks; basic blocks have no inner width, so they take only 1.0 whatever the list says."""
    values = _listify("inner_mults", space.get("inner_mults", [1.0]))
    return [1.0] if block == "basic" else values


def _cap_flops(rows: list[tuple], max_flops: float, num_classes: int) -> list[tuple]:
    """Keep the rows whose forward of the whole batch costs at most ``max_flops`` (fvcore count)."""
    keep = []
    for row in rows:
        block, depth, w, size, bs, _prec, ed, inner = row
        layout = LAYOUTS.get(block, {}).get(int(depth))
        if layout is None:  # invalid depth: let ArchConfig raise the clear error
            keep.append(row)
            continue
        if per_image_counts(block, layout, float(w), int(size), bool(ed), num_classes,
                            float(inner))[0] * bs <= max_flops:
            keep.append(row)
    return keep


def _plain_space(space: Mapping[str, Any]) -> tuple[dict[str, Any], str, int]:
    """``(space as plain data, its mode (checked: grid | random), its class count)``."""
    space = _as_plain(space)
    mode = space.get("mode", "grid")
    if mode not in ("grid", "random"):
        raise ConfigError(f"space.mode: {mode!r} is not allowed; allowed: ['grid', 'random']")
    return space, mode, int(space.get("num_classes", 1000) or 1000)


def configs_from_cfg(space: Mapping[str, Any]) -> list[ArchConfig]:
    """Expand a space config (the composed ``space`` node or a plain dict) into validated configs.

    ``max_flops`` (optional) drops configs whose whole-batch forward exceeds that fvcore count before
    sampling. ``mode: grid`` gives the full product in a fixed order; ``mode: random`` gives ``n`` distinct
    configs drawn with ``seed`` (all of them, shuffled, when ``n`` >= the product size). Every config is
    validated before anything is built; the first invalid one raises :class:`ConfigError`.
    """
    space, mode, num_classes = _plain_space(space)
    rows = _product(space)
    max_flops = space.get("max_flops")
    if max_flops is not None:
        rows = _cap_flops(rows, float(max_flops), num_classes)
    if mode == "random":
        n = space.get("n")
        if n is None or int(n) <= 0:
            raise ConfigError(f"space.n: random mode needs a positive sample size, got {n!r}")
        rng = random.Random(int(space.get("seed", 0) or 0))
        rows = rng.sample(rows, min(int(n), len(rows)))
    out = []
    for block, depth, w, size, bs, prec, ed, inner in rows:
        out.append(ArchConfig(block=block, depth=depth, width_mult=w, input_size=size, batch_size=bs,
                              precision=prec, early_downsample=ed, num_classes=num_classes, inner_mult=inner))
    if not out:
        raise ConfigError("space: yields no configurations")
    return out


def _block_frame(space: Mapping[str, Any], block: str, num_classes: int) -> pd.DataFrame:
    """The rows of one block family of :func:`carb.design.space._product`, in its order (depth, width,
    input size, batch size, precision, stem, inner width; the last varies fastest), validated."""
    depths = space.get("depths") or {}
    dims = [_listify(f"depths.{block}", depths[block]), _listify("width_mults", space.get("width_mults", [1.0])),
            _listify("input_sizes", space.get("input_sizes", [224])),
            _listify("batch_sizes", space.get("batch_sizes", [1])),
            _listify("precisions", space.get("precisions", ["fp32"])),
            _listify("early_downsample", space.get("early_downsample", [True])), _inner_values(block, space)]
    shape = tuple(len(d) for d in dims)
    d, w, s, b, p, e, i = np.unravel_index(np.arange(int(np.prod(shape)), dtype=np.int64), shape)
    # validate: every architecture once (at the first batch size and precision), then each batch size
    # and precision once (with the first architecture), in the order the object path meets them
    arch_shape = (shape[0], shape[1], shape[2], shape[5], shape[6])
    recs = []
    first: ArchConfig | None = None
    for di, wi, si, ei, ii in np.ndindex(*arch_shape):
        cfg = ArchConfig(block=block, depth=dims[0][di], width_mult=dims[1][wi], input_size=dims[2][si],
                         batch_size=dims[3][0], precision=dims[4][0], early_downsample=dims[5][ei],
                         num_classes=num_classes, inner_mult=dims[6][ii])
        first = first or cfg
        recs.append(arch_record(cfg))
    batches = [first.replace(batch_size=v).batch_size for v in dims[3]]
    precs = [first.replace(precision=v).precision for v in dims[4]]
    arch = pd.DataFrame(recs, columns=list(ARCH_COLUMNS))
    code = np.ravel_multi_index((d, w, s, e, i), arch_shape)
    out = arch.iloc[code].reset_index(drop=True)
    out["batch_size"] = np.asarray(batches, dtype=np.int64)[b]
    out["precision"] = np.asarray(precs, dtype=object)[p]
    return out


def space_frame(space: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`carb.design.space.configs_from_cfg` as a knob frame (:data:`FRAME_COLUMNS`): the same
    candidates in the same order (``mode: grid``: the full product; ``mode: random``: the same seeded
    sample), ``max_flops`` applied. Raises :class:`ConfigError` as the object path does."""
    space, mode, num_classes = _plain_space(space)
    blocks = _product_check(space)
    frames = [_block_frame(space, b, num_classes) for b in blocks]
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(FRAME_COLUMNS))
    max_flops = space.get("max_flops")
    if max_flops is not None and len(df):
        codes, archs = arch_codes(df)
        per = np.array([per_image_counts(*arch_args(r))[0] for r in archs.itertuples(index=False)], dtype=float)
        df = df[per[codes] * df["batch_size"].to_numpy(float) <= float(max_flops)].reset_index(drop=True)
    if mode == "random":
        n = space.get("n")
        if n is None or int(n) <= 0:
            raise ConfigError(f"space.n: random mode needs a positive sample size, got {n!r}")
        rng = random.Random(int(space.get("seed", 0) or 0))
        # random.sample picks by position only, so sampling positions gives the object path's sample
        idx = rng.sample(range(len(df)), min(int(n), len(df)))
        df = df.iloc[np.asarray(idx, dtype=np.int64)].reset_index(drop=True)
    if not len(df):
        raise ConfigError("space: yields no configurations")
    return df[list(FRAME_COLUMNS)]


def _yaml_loader():
    """PyYAML's safe loader that also reads ``5e8`` as a float (YAML 1.2, as OmegaConf/Hydra do)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                    |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                    |\.[0-9_]+(?:[eE][-+][0-9]+)?
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""", re.X),
        list("-+0123456789."))
    return Loader


def space_config(name: str, overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Read ``conf/space/<name>.yaml`` and apply dotlist overrides (``batch_sizes=[1,8]``,
    ``depths.basic=[14]``, with or without a leading ``space.``) as Hydra does on the command line:
    each value is parsed as YAML (lists, numbers, booleans, null)."""
    import yaml

    path = _CONF_SPACE / f"{name}.yaml"
    if not path.exists():
        allowed = sorted(p.stem for p in _CONF_SPACE.glob("*.yaml"))
        raise ConfigError(f"space: {name!r} is not a known space; allowed: {allowed}")
    loader = _yaml_loader()
    cfg = yaml.load(path.read_text(), Loader=loader) or {}
    for o in overrides:
        o = o[len("space."):] if o.startswith("space.") else o
        key, sep, raw = o.partition("=")
        key = key.lstrip("+~")
        if not sep or not key:
            raise ConfigError(f"space: override {o!r} is not key=value")
        if key.split(".")[0] not in SPACE_KEYS:
            raise ConfigError(f"space: unknown key {key!r}; allowed: {list(SPACE_KEYS)}")
        try:
            value = yaml.load(raw, Loader=loader) if raw.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"space.{key}: cannot parse {raw!r}") from None
        _set_dotted(cfg, key, value)
    return cfg


def load_space(name: str, overrides: Iterable[str] = ()) -> list[ArchConfig]:
    """The configs of ``conf/space/<name>.yaml`` with overrides applied (see :func:`space_config`)."""
    return configs_from_cfg(space_config(name, overrides))
