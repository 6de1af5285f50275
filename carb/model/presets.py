"""A :class:`~carb.model.cascade.CarbCascade` from plain config sections (``conf/model/*.yaml``,
``conf/features/*.yaml`` and ``conf/prior/*.yaml`` as dicts): the YAML presets are the source of every
size, and :class:`carb.model.prior_config.PriorSettings` of every prior setting.
"""
from __future__ import annotations

from typing import Any

from carb.errors import ConfigError

#: Keys of the model config that are not CarbCascade parameters.
_NON_PARAMS = ("name",)


#: Keys ``model=auto`` takes from its ``large`` preset once the data is large enough (tree sizes).
SIZE_KEYS = ("specialists", "probe_estimators")


def resolve_auto(model_cfg: dict[str, Any], n_rows: int) -> tuple[dict[str, Any], str]:
    """The model config ``model=auto`` stands for with ``n_rows`` training rows: its own keys (the
    ``carb_fast`` sizes) below ``threshold_rows``, else the same with the tree sizes (:data:`SIZE_KEYS`
    and the corrector model) of ``large``. Other presets pass through. Returns ``(config, name)``,
    the name as ``auto:carb_fast`` or ``auto:carb``."""
    if model_cfg.get("name") != "auto":
        return model_cfg, str(model_cfg.get("name", "custom"))
    cfg = {k: v for k, v in model_cfg.items() if k not in ("large", "threshold_rows")}
    try:
        threshold = int(model_cfg["threshold_rows"])
        large = dict(model_cfg["large"])
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"model=auto needs `large` and an integer `threshold_rows` ({e})") from None
    if n_rows < threshold:
        return {**cfg, "name": "carb_fast"}, "auto:carb_fast"
    cfg.update({k: large[k] for k in SIZE_KEYS if k in large})
    if isinstance(large.get("correctors"), dict) and "model" in large["correctors"]:
        cfg["correctors"] = {**dict(cfg.get("correctors") or {}), "model": large["correctors"]["model"]}
    return {**cfg, "name": large.get("name", "carb")}, f"auto:{large.get('name', 'carb')}"


def build_cascade(model_cfg: dict[str, Any], features: dict[str, Any], prior: dict[str, Any] | None = None):
    """A :class:`carb.model.cascade.CarbCascade` from the model, features and prior config sections
    (``prior`` None: ``prior=auto``, :func:`carb.model.prior_config.cascade_params`)."""
    from carb.model.cascade import CarbCascade
    from carb.model.prior_config import cascade_params

    moved = sorted(set(model_cfg) & {"physics", "prior"})
    if moved:
        raise ConfigError(f"model: {moved} moved to the prior group; allowed: prior=auto|cpu|cuda|off and "
                          f"prior.<setting> (model.physics=false is prior=off)")
    params = {**{k: v for k, v in model_cfg.items() if k not in _NON_PARAMS}, **cascade_params(prior)}
    cols = list(features.get("columns") or [])
    if not cols:
        raise ConfigError("features.columns: the feature list is empty")
    try:
        return CarbCascade(features=cols, feature_set=str(features.get("name", "custom")), **params)
    except TypeError as e:
        from inspect import signature

        allowed = [p for p in signature(CarbCascade).parameters if p not in ("features", "feature_set")]
        raise ConfigError(f"model: {e}; allowed keys: {allowed}") from None


def effective_columns(frame, columns: list[str]) -> list[str]:
    """The columns of a feature set that a cascade fitted on ``frame`` uses: the listed columns that
    are not all NaN there (interaction features computed from the telemetry as the fit computes them),
    in list order. Two feature sets with the same effective columns fit the same model."""
    from carb.data.schema import INTERACTION_FEATURES
    from carb.model.encoding import add_interactions

    X = add_interactions(frame) if any(c in INTERACTION_FEATURES for c in columns) else frame
    return [c for c in columns if c in X.columns and not X[c].isna().all()]
