"""A :class:`~carb.model.cascade.CarbCascade` from plain config sections (``conf/model/*.yaml`` and
``conf/features/*.yaml`` as dicts): the YAML presets are the source of every size and setting.
"""
from __future__ import annotations

from typing import Any

from carb.errors import ConfigError

#: Keys of the model config that are not CarbCascade parameters.
_NON_PARAMS = ("name",)


def resolve_auto(model_cfg: dict[str, Any], n_rows: int) -> tuple[dict[str, Any], str]:
    """The preset ``model=auto`` stands for with ``n_rows`` training rows: ``small`` below
    ``threshold_rows``, else ``large`` (``conf/model/auto.yaml``). Other presets pass through.
    Returns ``(model config, name)``, the name as ``auto:<chosen>``."""
    if model_cfg.get("name") != "auto":
        return model_cfg, str(model_cfg.get("name", "custom"))
    try:
        threshold = int(model_cfg["threshold_rows"])
        small, large = dict(model_cfg["small"]), dict(model_cfg["large"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"model=auto needs small, large and an integer threshold_rows ({e})") from None
    chosen = small if n_rows < threshold else large
    return chosen, f"auto:{chosen.get('name', 'custom')}"


def build_cascade(model_cfg: dict[str, Any], features: dict[str, Any]):
    """A :class:`carb.model.cascade.CarbCascade` from the model and features config sections."""
    from carb.model.cascade import CarbCascade

    params = {k: v for k, v in model_cfg.items() if k not in _NON_PARAMS}
    cols = list(features.get("columns") or [])
    if not cols:
        raise ConfigError("features.columns: the feature list is empty")
    try:
        return CarbCascade(features=cols, feature_set=str(features.get("name", "custom")), **params)
    except TypeError as e:
        from inspect import signature

        allowed = [p for p in signature(CarbCascade).parameters if p not in ("features", "feature_set")]
        raise ConfigError(f"model: {e}; allowed keys: {allowed}") from None
