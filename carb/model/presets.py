"""A :class:`~carb.model.cascade.CarbCascade` from plain config sections (``conf/model/*.yaml`` and
``conf/features/*.yaml`` as dicts): the YAML presets are the source of every size and setting.
"""
from __future__ import annotations

from typing import Any

from carb.errors import ConfigError

#: Keys of the model config that are not CarbCascade parameters.
_NON_PARAMS = ("name",)


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
