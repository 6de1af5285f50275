"""Model names of outside benchmarks -> CARB configurations (plain torchvision / timm ResNets only).

A name maps when, after normalization, it is one of :data:`PLAIN_RESNETS`: the torchvision ImageNet
ResNets (resnet18/34/50/101/152, wide_resnet50_2, wide_resnet101_2) and timm's plain ResNets of the same
definition (the same names, plus resnet26 and resnet200; timm's wide_resnet* are torchvision's). Those
are ``early_downsample=True`` (7x7/2 conv + max-pool stem), ``width_mult=1.0``, 1000 classes, and the
wide ones ``inner_mult=2.0`` (``width_per_group=128``). Normalization lowercases, drops a hub prefix
(``timm/``, ``torchvision/``, ``torchvision.models.``) and a timm pretrained tag (``resnet50.a1_in1k`` ->
``resnet50``; ``tv_resnet50`` -> ``resnet50``, timm's old alias for torchvision weights). Variants
(``resnet50d``, ``seresnet50``, ``resnet50_gn``, ...) do not map: their stems, blocks or norms differ
from the builder's.
"""
from __future__ import annotations

from carb.design.arch import ArchConfig
from carb.design.identity import resnet_knobs

#: Plain ResNet name -> (block, depth, inner_mult).
PLAIN_RESNETS: dict[str, tuple[str, int, float]] = {
    "resnet18": ("basic", 18, 1.0), "resnet34": ("basic", 34, 1.0),
    "resnet26": ("bottleneck", 26, 1.0), "resnet50": ("bottleneck", 50, 1.0),
    "resnet101": ("bottleneck", 101, 1.0), "resnet152": ("bottleneck", 152, 1.0),
    "resnet200": ("bottleneck", 200, 1.0),
    "wide_resnet50_2": ("bottleneck", 50, 2.0), "wide_resnet101_2": ("bottleneck", 101, 2.0),
}
_PREFIXES = ("timm/", "torchvision/", "torchvision.models.", "tv_")


def normalize_model_name(name: object) -> str:
    """``name`` lowercased without hub prefix and timm pretrained tag (see the module docstring)."""
    s = str(name).strip().lower()
    changed = True
    while changed:
        changed = False
        for p in _PREFIXES:
            if s.startswith(p):
                s, changed = s[len(p):], True
    return s.split(".", 1)[0]


def model_knobs(name: object) -> tuple[dict[str, object] | None, str]:
    """``(knobs, '')`` for a mappable name: block, depth, width_mult, inner_mult, early_downsample and
    num_classes of :class:`~carb.design.arch.ArchConfig`; ``(None, reason)`` otherwise."""
    if name is None or str(name).strip() in ("", "nan", "<NA>", "None"):
        return None, "no model name"
    key = normalize_model_name(name)
    if key not in PLAIN_RESNETS:
        return None, (f"model {str(name)!r} is not a plain torchvision/timm ResNet; allowed: "
                      f"{sorted(PLAIN_RESNETS)}")
    block, depth, inner = PLAIN_RESNETS[key]
    return {**resnet_knobs(block=block, depth=depth, width_mult=1.0, inner_mult=inner, early_downsample=True),
            "num_classes": 1000}, ""


def model_config(name: object, input_size: int = 224, batch_size: int = 1, precision: str = "fp32") -> ArchConfig:
    """The :class:`ArchConfig` of a mappable model name; :class:`~carb.errors.ConfigError` naming
    ``model`` and the allowed names otherwise."""
    from carb.errors import ConfigError

    knobs, reason = model_knobs(name)
    if knobs is None:
        raise ConfigError(reason)
    return ArchConfig(input_size=input_size, batch_size=batch_size, precision=precision, **knobs)
