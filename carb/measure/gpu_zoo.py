"""Zoo networks in the lent-GPU collector (``python -m carb.measure.gpu_run --space zoo``; issue 43 item 2).

The plan: the model names of ``conf/space/<space>.yaml`` (the zoo space, :mod:`carb.design.zoo_space`) with
the knobs of ``conf/gpu_run.yaml``'s ``zoo`` block laid over it (input sizes, batch sizes, precisions, a
seeded sample of ``n`` configurations); each name is first resolved by the machine's own torchvision and timm
(:func:`carb.design.zoo.resolve`): a name they lack is refused with its one-line reason and its
configurations are left out, never a crash. The networks are then measured with the ResNet sweep's protocol
(:func:`carb.measure.sweep.measure_config`: latency, peak memory, NVML energy between counter update edges),
one network built once per group and swept over its precisions, input sizes and batch sizes; a network whose
constructor fails on that machine is refused the same way. Rows follow the zoo schema
(:mod:`carb.data.zoo_schema`); static features come from the layer table (:func:`carb.design.zoo_features.
zoo_static`, traced on the meta device when the group starts; NaN where the tracer refuses the network).

Imports torch, timm/torchvision (when a zoo name needs them), pandas and pyyaml only: no Hydra, no MLflow.
"""
from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Knobs of ``gpu_run.yaml``'s ``zoo`` block that replace the zoo space's (anything else is refused).
ZOO_PLAN_KEYS = ("space", "models", "input_sizes", "batch_sizes", "precisions", "n", "seed")
#: FLOPs (fvcore count) per image assumed for the deadline when the tracer refused a network.
UNTRACED_FLOPS = 2.0e10


def plan_space(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The zoo space the run plans from: ``conf/space/<zoo.space>.yaml`` (default ``zoo``) with the ``zoo``
    block's knobs laid over it, no FLOPs cap, ``mode: random`` with ``n`` (None: the whole product).
    A ``ValueError`` (one line naming the key) for an unknown key or a space that is no zoo."""
    import yaml

    from carb.design.zoo_space import is_zoo_space
    from carb.resources import CONF_DIR

    block = dict(cfg.get("zoo") or {})
    unknown = sorted(set(block) - set(ZOO_PLAN_KEYS))
    if unknown:
        raise ValueError(f"zoo: unknown setting(s) {unknown}; allowed: {list(ZOO_PLAN_KEYS)}")
    name = str(block.pop("space", "zoo"))
    path = Path(CONF_DIR) / "space" / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"zoo.space: {name!r} is not a space of conf/space/")
    space = yaml.safe_load(path.read_text()) or {}
    if not is_zoo_space(space):
        raise ValueError(f"zoo.space: {name!r} is not a zoo space (it has no models list)")
    n = block.pop("n", None)
    space.update(block)
    space.update({"max_flops": None, "mode": "random" if n is not None else "grid"})
    if n is not None:
        space["n"] = int(n)
    return space


def available(models: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``(names this machine's torchvision/timm know, {refused name: one-line reason})``, in order."""
    from carb.design.zoo import resolve
    from carb.errors import ZooError

    ok, refused = [], {}
    for m in models:
        try:
            resolve(m)
            ok.append(m)
        except ZooError as e:
            refused[m] = str(e)
    return ok, refused


def zoo_plan(cfg: Mapping[str, Any], seed: int) -> tuple[list[list[Any]], dict[str, str]]:
    """``(groups, refused)``: the sampled configurations (:func:`plan_space`) of the names the machine's
    libraries know, grouped by network (networks in an order shuffled with ``seed``; inside a group by
    precision, input size, batch size), and the refused names with their reasons. A ``ValueError`` (one line)
    when no configuration is left."""
    from carb.design.zoo_space import zoo_configs
    from carb.errors import ConfigError

    space = plan_space(cfg)
    try:
        models, refused = available(list(space.get("models") or []))
        if not models:
            raise ValueError(f"zoo: no model of the plan is known here (refused: {refused})")
        configs, _ = zoo_configs({**space, "models": models})
    except ConfigError as e:
        raise ValueError(str(e)) from None
    groups: dict[str, list[Any]] = {}
    for c in configs:
        groups.setdefault(c.model_name, []).append(c)
    order = sorted(groups)
    random.Random(int(seed)).shuffle(order)
    return [sorted(groups[m], key=lambda c: (c.precision, c.input_size, c.batch_size)) for m in order], refused


def static_for(group: Sequence[Any], log: Any = None) -> dict[str, dict[str, Any]]:
    """``{config_id: ZOO_STATIC columns}`` of one group (:func:`carb.design.zoo_features.zoo_static`: traced
    on the meta device, cached). NaN where the tracer refuses the network or fails on this machine's torch
    (another version than the one the tracer was written on): the row is still measured, and ``log`` (a
    callable, optional) gets one line per failing (network, size, precision)."""
    from carb.design.zoo_features import ZOO_STATIC, zoo_static

    out: dict[str, dict[str, Any]] = {}
    failed: set[tuple] = set()
    for c in group:
        key = (c.model_name, c.input_size, c.precision)
        try:
            out[c.config_id] = dict(zoo_static(c.model_name, c.input_size, c.batch_size, c.precision))
        except Exception as e:   # noqa: BLE001 - a feature the tracer cannot give is NaN, never a crash
            out[c.config_id] = {k: math.nan for k in ZOO_STATIC}
            if log is not None and key not in failed:
                log(f"no layer table for {c.model_name} at {c.input_size} px {c.precision}: "
                    f"{type(e).__name__}: {str(e).strip().splitlines()[0][:160] if str(e).strip() else ''}")
            failed.add(key)
    return out


def deadline_flops(static: Mapping[str, Any], batch_size: int) -> float:
    """The FLOPs the deadline's latency model takes for a configuration: its own, or
    :data:`UNTRACED_FLOPS` per image when the tracer gave none."""
    f = float(static.get("flops", math.nan))
    return f if math.isfinite(f) and f > 0 else UNTRACED_FLOPS * int(batch_size)


def build(c: Any) -> Any:
    """The network of zoo configuration ``c`` with random fp32 weights on the CPU (moved and cast by the
    caller); raises :class:`carb.errors.ZooError` (one line) when this machine's library cannot build it."""
    from carb.design.zoo import build_model

    return build_model(c.model_name, device="cpu")   # as carb-collect space=zoo builds it


def kernel_key(c: Any) -> tuple:
    """The key kernel launches are counted once per: the network and precision."""
    return (c.model_name, c.precision)


def config_of(row: Mapping[str, Any]) -> Any:
    """The :class:`carb.design.zoo_space.ZooConfig` of a zoo row (for the drift re-measure)."""
    from carb.design.zoo_space import ZooConfig

    return ZooConfig(str(row["model_name"]), int(row["input_size"]), int(row["batch_size"]), str(row["precision"]))


def library_versions() -> dict[str, str | None]:
    """The versions of torchvision and timm on this machine (None when absent or failing to import): the
    provenance's record of which model lists the plan was checked against."""
    out: dict[str, str | None] = {}
    for name in ("torchvision", "timm"):
        try:
            if name == "torchvision":
                from carb.design.zoo import import_torchvision

                out[name] = str(import_torchvision().__version__)
            else:
                from carb.design.zoo import import_timm

                out[name] = str(import_timm().__version__)
        except Exception:   # noqa: BLE001 - a fact, not a failure
            out[name] = None
    return out
