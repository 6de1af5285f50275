"""``carb-promote``: set the registry alias ``champion`` on the best version of a registered model.

The best version is chosen by a run metric and direction (default: lowest ``val_energy_J_mae``,
falling back to ``val_latency_ms_mae`` when no version measured energy). The version it replaces stays
reachable as ``previous``. Running it twice changes nothing the second time.
"""
from __future__ import annotations

import math
from typing import Any

from carb import tracking
from carb.commands.cli import hydra_command
from carb.errors import ConfigError, ModelError


def default_name(data: str) -> str:
    """``carb-<device-slug>-<device_id>`` of the (single) device in a dataset
    (:func:`carb.data.schema.model_name`)."""
    from carb.data.io import load_dataset
    from carb.data.schema import model_name, ok_rows
    from carb.errors import DatasetError

    try:
        return model_name(ok_rows(load_dataset(data)))
    except DatasetError as e:
        raise ConfigError(f"promote.name: dataset {data!r}: {e}; give promote.name") from None


def choose(versions: list[dict[str, Any]], metric: str, fallback: str | None, direction: str) -> tuple[dict, str]:
    """The best version and the metric used; raises :class:`ModelError` when no version has either."""
    if direction not in ("minimize", "maximize"):
        raise ConfigError(f"promote.direction: {direction!r} is not allowed; allowed: ['minimize', 'maximize']")
    for m in [metric] + ([fallback] if fallback else []):
        scored = [v for v in versions if math.isfinite(v["metrics"].get(m, math.nan))]
        if scored:
            sign = 1 if direction == "minimize" else -1
            return min(scored, key=lambda v: (sign * v["metrics"][m], -int(v["version"]))), m
    raise ModelError(f"promote.metric: no version has {metric!r}" + (f" or {fallback!r}" if fallback else "")
                     + f" (versions: {[v['version'] for v in versions]})")


def run_promote(cfg: Any) -> dict[str, Any]:
    """Promote and print what changed. Returns ``{"name", "champion", "previous", "metric", "changed"}``."""
    p = cfg.promote
    tracking.configure(cfg.tracking.uri, cfg.tracking.get("artifact_root"))
    name = p.name or default_name(p.data)
    versions = tracking.model_versions(name)
    if not versions:
        raise ModelError(f"promote.name: registered model {name!r} has no versions in {cfg.tracking.uri} "
                         f"(train one with carb-train)")
    best, metric = choose(versions, p.metric, p.get("fallback_metric"), p.direction)
    current = tracking.get_alias(name, p.alias)
    value = best["metrics"][metric]
    if current == best["version"]:
        print(f"carb-promote: {name}@{p.alias} is already version {current} ({metric}={value:.4g}); "
              f"nothing changed")
        return {"name": name, "champion": current, "previous": tracking.get_alias(name, p.previous_alias),
                "metric": metric, "value": value, "changed": False}
    if current is not None:
        tracking.set_alias(name, p.previous_alias, current)
    tracking.set_alias(name, p.alias, best["version"])
    old = next((v for v in versions if v["version"] == current), None)
    old_txt = (f"version {current} ({metric}={old['metrics'].get(metric, math.nan):.4g}) -> now "
               f"{name}@{p.previous_alias}" if old else "none")
    print(f"carb-promote: {name}@{p.alias}: {old_txt}; new champion version {best['version']} "
          f"({metric}={value:.4g}, chosen among {len(versions)} versions, {p.direction})")
    return {"name": name, "champion": best["version"], "previous": current, "metric": metric,
            "value": value, "changed": True}


main = hydra_command("promote")(run_promote)

if __name__ == "__main__":
    main()
