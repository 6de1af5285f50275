"""The model zoo as a design space: named networks (torchvision classifiers, timm backbones) with
``input_size``, ``batch_size`` and ``precision`` as knobs.

A zoo space config (``conf/space/zoo.yaml``) lists ``models`` by name (see :mod:`carb.design.zoo` for the
names), the knob values, and optionally ``input_sizes_of`` (models that take only some input sizes, e.g. a
ViT built for 224 px) and ``max_flops`` (a cap on the whole-batch forward, fvcore count: one multiply-add
is one FLOP). :func:`zoo_configs` expands it into :class:`ZooConfig` values, each with a stable
``config_id``, the zoo's counterpart of :class:`carb.design.arch.ArchConfig`; the collector measures them
with the same protocol. A model the library cannot build or trace is not a configuration: it is listed in
``refused`` with its one-line reason (:func:`zoo_configs_checked`).

Nothing here imports torch at module level (the FLOP cap traces on the meta device inside a function).
"""
from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from carb.design.arch import PRECISIONS
from carb.errors import ConfigError, ZooError

#: Keys a zoo space config may have (``kind: zoo`` tells it from a ResNet space).
ZOO_SPACE_KEYS: tuple[str, ...] = ("name", "kind", "description", "mode", "n", "seed", "models", "input_sizes",
                                   "batch_sizes", "precisions", "input_sizes_of", "max_flops", "num_classes")
#: The knob columns of a zoo row, in order.
ZOO_KNOBS: tuple[str, ...] = ("model_name", "family", "input_size", "batch_size", "precision")


@dataclass(frozen=True)
class ZooConfig:
    """One named network at one input size (H = W, pixels), batch size and precision.

    ``model_name`` is the name as the space lists it (``tv:mobilenet_v3_large``, ``timm:ghostnet_100``);
    ``family`` follows from it (:func:`carb.design.zoo.family_of`)."""

    model_name: str
    input_size: int
    batch_size: int
    precision: str
    num_classes: int = 1000

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision: {self.precision!r} is not allowed; allowed: {list(PRECISIONS)}")
        for k in ("input_size", "batch_size", "num_classes"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"{k}: must be a positive integer, got {v!r}")

    @property
    def family(self) -> str:
        """The model's family (leading letters of its base name)."""
        from carb.design.zoo import family_of

        return family_of(self.model_name)

    def to_dict(self) -> dict[str, Any]:
        """The knob columns of a zoo row (:data:`ZOO_KNOBS`)."""
        return {"model_name": self.model_name, "family": self.family, "input_size": self.input_size,
                "batch_size": self.batch_size, "precision": self.precision}

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit hash of the model name and knobs (prefixed ``z`` in the hash input so a zoo
        id never equals a ResNet configuration's)."""
        d = {"zoo": self.model_name, "input_size": self.input_size, "batch_size": self.batch_size,
             "precision": self.precision, "num_classes": self.num_classes}
        return hashlib.sha1(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def is_zoo_space(space: Mapping[str, Any]) -> bool:
    """Whether a space config describes a model zoo (``kind: zoo`` or a ``models`` list)."""
    return str(space.get("kind", "")) == "zoo" or "models" in space


def _int_list(space: Mapping[str, Any], key: str, label: str | None = None) -> list[int]:
    """``space[key]`` as a non-empty list of positive integers (:class:`ConfigError` naming ``label``)."""
    v = space.get(key)
    vals = list(v) if isinstance(v, (list, tuple)) or (isinstance(v, Sequence) and not isinstance(v, str)) else [v]
    if not vals or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in vals):
        raise ConfigError(f"space.{label or key}: a non-empty list of positive integers, got {v!r}")
    return vals


def zoo_product(space: Mapping[str, Any]) -> list[ZooConfig]:
    """Every (model, input size, batch size, precision) of a zoo space, models in the listed order,
    after checking its keys (:class:`ConfigError` naming the key)."""
    unknown = sorted(set(space) - set(ZOO_SPACE_KEYS))
    if unknown:
        raise ConfigError(f"space: unknown key(s) {unknown} for a zoo space; allowed: {list(ZOO_SPACE_KEYS)}")
    models = space.get("models")
    if not isinstance(models, (list, tuple)) or not models or not all(isinstance(m, str) and m for m in models):
        raise ConfigError("space.models: a non-empty list of model names, e.g. [tv:resnet18, timm:ghostnet_100]")
    sizes, batches = _int_list(space, "input_sizes"), _int_list(space, "batch_sizes")
    precs = list(space.get("precisions") or [])
    bad = [p for p in precs if p not in PRECISIONS]
    if not precs or bad:
        raise ConfigError(f"space.precisions: allowed {list(PRECISIONS)}, got {precs!r}")
    only = space.get("input_sizes_of") or {}
    if not isinstance(only, Mapping):
        raise ConfigError("space.input_sizes_of: a mapping model name -> its input sizes")
    # entries for models not listed are ignored: `space.models=[...]` narrows a space from the command line
    n_classes = int(space.get("num_classes", 1000) or 1000)
    out = []
    for m in models:
        m_sizes = _int_list(only, m, f"input_sizes_of.{m}") if m in only else sizes
        out += [ZooConfig(m, s, b, p, n_classes) for s in m_sizes for b in batches for p in precs]
    return out


#: Knob values a zoo network takes when neither the call nor its frame gives one (``Predictor.predict``,
#: a zoo grid file).
ZOO_DEFAULTS = {"batch_size": 1, "precision": "fp32", "input_size": 224}


def check_zoo_knobs(frame: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming the knob and the allowed values when ``frame`` (a zoo
    knob frame) holds an ``input_size`` or ``batch_size`` that is not a positive integer (pixels, images)
    or a ``precision`` outside :data:`carb.design.arch.PRECISIONS`: a typo of the call, not a network the
    tracer refuses, so it stops the call rather than giving NaN rows."""
    import numpy as np

    for k in ("input_size", "batch_size"):
        bad = [v for v in frame[k] if isinstance(v, bool) or not isinstance(v, (int, np.integer, float, np.floating))
               or not np.isfinite(v) or v < 1 or float(v) != int(v)]
        if bad:
            raise ConfigError(f"{k}: must be a positive integer, got {bad[0]!r}")
    bad = [v for v in frame["precision"] if v not in PRECISIONS]
    if bad:
        raise ConfigError(f"precision: {bad[0]!r} is not allowed; allowed: {list(PRECISIONS)}")


def zoo_configs(space: Mapping[str, Any], flops_of: Any = None) -> tuple[list[ZooConfig], dict[str, str]]:
    """Expand a zoo space: ``(configs, refused)``. ``refused`` maps a model that cannot be built or traced
    to its one-line reason; its configurations are left out. ``max_flops`` drops configurations whose
    whole-batch forward exceeds it (``flops_of(model_name, input_size) -> FLOPs per image``, default
    :func:`flops_per_image`). ``mode: random`` draws ``n`` of them with ``seed``."""
    rows = zoo_product(space)
    flops_of = flops_of or flops_per_image
    failed: dict[tuple[str, int], str] = {}   # (model, input size) -> why: a size one model refuses
    cap = space.get("max_flops")
    kept = []
    for cfg in rows:
        key = (cfg.model_name, cfg.input_size)
        if key in failed:
            continue
        try:
            per_image = flops_of(cfg.model_name, cfg.input_size) if cap is not None else None
        except ZooError as e:
            failed[key] = str(e)
            continue
        if cap is None or per_image * cfg.batch_size <= float(cap):
            kept.append(cfg)
    refused = refusals(failed, {(c.model_name, c.input_size) for c in rows})
    mode = str(space.get("mode", "grid"))
    if mode not in ("grid", "random"):
        raise ConfigError(f"space.mode: {mode!r} is not allowed; allowed: ['grid', 'random']")
    if mode == "random":
        n = space.get("n")
        if n is None or int(n) <= 0:
            raise ConfigError(f"space.n: random mode needs a positive sample size, got {n!r}")
        kept = random.Random(int(space.get("seed", 0) or 0)).sample(kept, min(int(n), len(kept)))
    if not kept and refused and all(m in refused for m in {c.model_name for c in rows}):
        raise ConfigError(all_refused(refused))
    if not kept:
        raise ConfigError("space: the zoo space yields no configurations"
                          + (f" (refused: {'; '.join(f'{m}: {w}' for m, w in refused.items())})" if refused else ""))
    return kept, refused


def all_refused(refused: Mapping[str, str], sizes_from: str | None = None) -> str:
    """The one line for a zoo space whose every network was refused (``{label: reason}``, :func:`refusals`):
    ``space.models: <reason>`` for one network, else each label with its reason; when every refusal is of
    the input, the setting that gives a network its sizes (``sizes_from``; default ``space.input_sizes_of``)."""
    if len(refused) == 1:
        return f"space.models: {next(iter(refused.values()))}" + _sizes_hint(refused, sizes_from)
    parts = []
    for label, why in refused.items():
        name = label.split(" at input ")[0]
        why = why[len(f"model {name!r}: "):] if why.startswith(f"model {name!r}: ") else why
        parts.append(f"{label}: {why}")
    return "space.models: every network was refused: " + "; ".join(parts) + _sizes_hint(refused, sizes_from)


def _sizes_hint(refused: Mapping[str, str], sizes_from: str | None = None) -> str:
    """The setting that fixes a space whose every refusal is of the input (a network built for one input
    size, e.g. a ViT at 160 px): ``" (a network that takes only some input sizes: ...)"``; ``""`` otherwise."""
    if not refused or not all("refuses the input" in why for why in refused.values()):
        return ""
    return f" (a network that takes only some input sizes gets them from {sizes_from or _SIZES_FROM})"


#: Where a zoo space gives a network built for one input size its sizes (:func:`all_refused`).
_SIZES_FROM = ("space.input_sizes_of: model name -> sizes in px, e.g. 'timm:vit_tiny_patch16_224: [224]' in "
               "conf/space/zoo.yaml, or space.input_sizes")


def refusals(failed: Mapping[tuple[str, int], str], tried: Any) -> dict[str, str]:
    """``{label: reason}`` of the networks refused: ``failed`` maps ``(model, input size)`` to why, ``tried``
    holds every ``(model, input size)`` asked for. A model refused at every size it was asked at is labelled
    by its name; one refused at some sizes only by ``<name> at input <sizes>`` (its other sizes are kept),
    with the first reason."""
    out: dict[str, str] = {}
    for m in dict.fromkeys(name for name, _ in failed):
        bad = sorted(s for name, s in failed if name == m)
        asked = {s for name, s in tried if name == m}
        label = m if asked <= set(bad) else f"{m} at input {', '.join(str(s) for s in bad)}"
        out[label] = failed[(m, bad[0])]
    return out


def flops_per_image(model_name: str, input_size: int) -> float:
    """FLOPs of one image's forward (fvcore count: one per multiply-add), from the layer table
    (:func:`carb.design.trace.trace_summary`), cached on disk by the tracer. Raises :class:`ZooError`
    when the model cannot be built or traced at that size."""
    from carb.design.zoo_features import zoo_summary

    return float(zoo_summary(model_name, input_size)["flops"])


def zoo_frame(configs: Sequence[ZooConfig]) -> "Any":
    """The configurations as a knob frame (:data:`ZOO_KNOBS` + ``config_id``)."""
    import pandas as pd

    return pd.DataFrame([{**c.to_dict(), "config_id": c.config_id} for c in configs],
                        columns=[*ZOO_KNOBS, "config_id"])
