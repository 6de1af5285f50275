"""``carb-promote``: set the registry alias ``champion`` on the best version of a registered model.

The best version is chosen by a run metric and direction (default: lowest ``val_energy_J_mae``,
falling back to ``val_latency_ms_mae`` when no version measured energy). The version it replaces stays
reachable as ``previous``. Running it twice changes nothing the second time. Only versions evaluated on
the champion's dataset and split compete; a newest version evaluated on other data is refused in one
line naming both datasets (``promote.across_datasets=true`` compares it anyway).

A zoo latency model (``carb-train data=timm_zoo``, ``ZooLatencyModel``) logs the held-out families' metrics
(``heldout/*``), not ``val_*``: its versions compete with each other only, by ``promote.zoo_metric`` (default
``heldout/latency_ms_mape``) in ``promote.zoo_direction``, on the same rows and family folds (its run's
``dataset_digest`` and ``split`` tags); cascade versions of the same name are left out (a line names them).

Which model: ``promote.name``; else the device of ``promote.data``; else the one CARB model the store holds
(several: one line listing them).
"""
from __future__ import annotations

import math
from typing import Any

from carb import tracking
from carb.commands.cli import hydra_command, wrap_line
from carb.commands.progress import Progress
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


def only_model(tracking_uri: str) -> str:
    """The name of the only registered CARB model (``carb-...``) in the configured store; otherwise one
    line: none registered, or the names to choose from with ``promote.name``."""
    names = [n for n in tracking.registered_models() if n.startswith("carb-")]
    if len(names) == 1:
        return names[0]
    if not names:
        raise ModelError(f"promote.name: not given and {tracking_uri} holds no registered CARB model; "
                         f"train one with carb-train (or give promote.name=<name>)")
    raise ConfigError(f"promote.name: not given and {tracking_uri} holds {len(names)} registered models; "
                      f"choose one with promote.name=<name>; allowed: {names}")


def evaluation_key(v: dict[str, Any]) -> tuple[str, str]:
    """``(dataset_digest, split)`` a version was evaluated on (``"?"`` where its run does not say)."""
    tags = v.get("tags") or {}
    return str(tags.get("dataset_digest", "?")), str(tags.get("split", "?"))


def comparable(versions: list[dict[str, Any]], across: bool, anchor: dict[str, Any] | None = None
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(compared, skipped)``: versions evaluated on the same data and split as ``anchor`` (the champion;
    without one, the newest version), all of them with ``across``. Metrics of versions evaluated on other
    data do not compare."""
    if across or not versions:
        return list(versions), []
    key = evaluation_key(anchor or max(versions, key=lambda v: int(v["version"])))
    same = [v for v in versions if evaluation_key(v) == key]
    return same, [v for v in versions if evaluation_key(v) != key]


def describe_data(v: dict[str, Any]) -> str:
    """``dataset <path> (digest <12 hex>, split <split>)`` a version was evaluated on."""
    digest, split = evaluation_key(v)
    return f"dataset {v['tags'].get('dataset', '?')} (digest {digest[:12]}, split {split})"


def refuse_other_data(name: str, newest: dict[str, Any], champion: dict[str, Any]) -> None:
    """Raise a one-line :class:`ModelError`: the newest version was evaluated on other data than the
    champion, so its metrics cannot show that it is better (a 40-row experiment's MAE is not the full
    dataset's)."""
    raise ModelError(f"promote: version {newest['version']} of {name} was evaluated on {describe_data(newest)}, "
                     f"the champion version {champion['version']} on {describe_data(champion)}: their metrics "
                     f"do not compare, so the champion stays; train the new version on the champion's dataset, "
                     f"set promote.across_datasets=true to compare them anyway, or promote.version="
                     f"{newest['version']} to choose it without comparing")


def estimator_kind(v: dict[str, Any]) -> str:
    """``zoo_latency`` for a version of ``ZooLatencyModel`` (``carb-train data=timm_zoo``: its run logs the
    held-out families' ``heldout/*`` metrics), else ``cascade`` (``val_*`` metrics)."""
    return "zoo_latency" if (v.get("tags") or {}).get("estimator") == "zoo_latency" else "cascade"


def like_with_like(name: str, versions: list[dict[str, Any]], champion: dict[str, Any] | None
                   ) -> list[dict[str, Any]]:
    """The versions of the anchor's estimator kind (:func:`estimator_kind`; the anchor: the champion, else the
    newest version): a zoo latency model and a cascade log different metrics, so they never compete. The others
    are named in one printed line; a newest version of the other kind than the champion is refused in one
    :class:`ModelError` line (``promote.version`` chooses it without comparing)."""
    newest = max(versions, key=lambda v: int(v["version"]))
    kind = estimator_kind(champion or newest)
    other = [v for v in versions if estimator_kind(v) != kind]
    if champion is not None and newest in other:
        raise ModelError(f"promote: version {newest['version']} of {name} is a {estimator_kind(newest)} model, the "
                         f"champion version {champion['version']} a {kind} model: their metrics do not compare, "
                         f"so the champion stays; promote.version={newest['version']} chooses it without comparing")
    if other:
        print(wrap_line(f"carb-promote: left out {len(other)} version(s) of {name} of another estimator than "
                        f"{kind} ({[v['version'] for v in other]}): their metrics do not compare"))
    return [v for v in versions if v not in other]


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
    prog = Progress.from_cfg("carb-promote", 2.0, cfg, throttle=False)
    prog.begin("finding the model and its versions")
    name = p.name or (default_name(p.data) if p.get("data") else only_model(cfg.tracking.uri))
    versions = tracking.model_versions(name)
    prog.begin(f"comparing the versions of {name}")
    out = _promote(p, name, versions, cfg.tracking.uri)
    prog.finish(f"{name}@{p.alias} is version {out['champion']}")
    return out


def _promote(p: Any, name: str, versions: list[dict[str, Any]], tracking_uri: str) -> dict[str, Any]:
    """:func:`run_promote` once the model is known: ``p`` is the ``promote`` config node."""
    if not versions:
        raise ModelError(f"promote.name: registered model {name!r} has no versions in {tracking_uri} "
                         f"(train one with carb-train)")
    across = p.get("across_datasets", False)
    if not isinstance(across, bool):
        raise ConfigError(f"promote.across_datasets: must be true or false, got {across!r}")
    if p.get("version") is not None:
        return move_alias(name, versions, str(p.version), p.alias, p.previous_alias)
    calibrated = [v for v in versions if v["tags"].get("carb.kind") == "calibrate"]
    if calibrated:   # few-shot transfers have no validation split: their held-out numbers do not compare
        print(wrap_line(f"carb-promote: left out {len(calibrated)} calibrated version(s) of {name} "
              f"({[v['version'] for v in calibrated]}: their held-out rows differ; promote.version=<N> "
              f"chooses one)"))
        versions = [v for v in versions if v not in calibrated]
        if not versions:
            raise ModelError(f"promote.name: {name!r} has only calibrated versions "
                             f"({[v['version'] for v in calibrated]}), whose held-out rows differ, so no metric "
                             f"compares them: choose one with promote.version=<N> (e.g. promote.version="
                             f"{calibrated[-1]['version']}, the newest)")
    current = tracking.get_alias(name, p.alias)
    champion = next((v for v in versions if v["version"] == current), None)
    versions = like_with_like(name, versions, champion)
    zoo = estimator_kind(versions[0]) == "zoo_latency"
    metric, fallback, direction = ((p.zoo_metric, None, p.zoo_direction) if zoo
                                   else (p.metric, p.get("fallback_metric"), p.direction))
    pool, skipped = comparable(versions, across, champion)
    newest = max(versions, key=lambda v: int(v["version"]))
    if champion is not None and newest in skipped:
        refuse_other_data(name, newest, champion)
    digest, split = evaluation_key(champion or pool[-1])
    by = (f"by {metric} (ZooLatencyModel: the held-out families' metric, promote.zoo_metric), {direction}" if zoo
          else f"by {metric}" + (f" (else {fallback})" if fallback else "") + f", {direction}")
    print(wrap_line(f"carb-promote: comparing {len(pool)} version(s) of {name} evaluated on dataset {digest[:12]} split "
          f"{split} {by}" + (f"; skipped {len(skipped)} evaluated on other data (versions "
                        f"{[v['version'] for v in skipped]}; promote.across_datasets=true compares them anyway)"
                        if skipped else "")))
    best, metric = choose(pool, metric, fallback, direction)
    value = best["metrics"][metric]
    tol = float(p.get("tie_tolerance", 0.0) or 0.0)
    cur = next((v for v in pool if v["version"] == current), None)
    if cur is not None and current != best["version"] and math.isfinite(cur["metrics"].get(metric, math.nan)):
        old_v = cur["metrics"][metric]
        gain = (old_v - value) if direction == "minimize" else (value - old_v)
        if gain <= tol * abs(old_v):
            print(wrap_line(f"carb-promote: version {best['version']} ({metric}={value:.6g}) is within the tie tolerance "
                  f"({tol:g} relative) of the champion version {current} ({old_v:.6g}); nothing changed"))
            return {"name": name, "champion": current, "previous": tracking.get_alias(name, p.previous_alias),
                    "metric": metric, "value": old_v, "changed": False}
    if current == best["version"]:
        print(wrap_line(f"carb-promote: {name}@{p.alias} is already version {current} ({metric}={value:.4g}); "
              f"nothing changed"))
        return {"name": name, "champion": current, "previous": tracking.get_alias(name, p.previous_alias),
                "metric": metric, "value": value, "changed": False}
    if current is not None:
        tracking.set_alias(name, p.previous_alias, current)
    tracking.set_alias(name, p.alias, best["version"])
    old = next((v for v in versions if v["version"] == current), None)
    old_txt = (f"version {current} ({metric}={old['metrics'].get(metric, math.nan):.4g}) -> now "
               f"{name}@{p.previous_alias}" if old else "none")
    print(wrap_line(f"carb-promote: {name}@{p.alias}: {old_txt}; new champion version {best['version']} "
          f"({metric}={value:.4g}, chosen among {len(pool)} compared versions, {direction})"))
    return {"name": name, "champion": best["version"], "previous": current, "metric": metric,
            "value": value, "changed": True}


def move_alias(name: str, versions: list[dict[str, Any]], version: str, alias: str,
               previous_alias: str) -> dict[str, Any]:
    """``promote.version``: point ``name@alias`` at ``version`` without comparing (the way onto a calibrated
    version); the replaced version becomes ``previous_alias``. :class:`ModelError` when no such version."""
    known = [v["version"] for v in versions]
    if version not in known:
        raise ModelError(f"promote.version: {name!r} has no version {version}; allowed: {known}")
    current = tracking.get_alias(name, alias)
    if current == version:
        print(wrap_line(f"carb-promote: {name}@{alias} is already version {version}; nothing changed"))
        return {"name": name, "champion": version, "previous": tracking.get_alias(name, previous_alias),
                "metric": None, "value": None, "changed": False}
    if current is not None:
        tracking.set_alias(name, previous_alias, current)
    tracking.set_alias(name, alias, version)
    print(wrap_line(f"carb-promote: {name}@{alias}: version {version} as asked (promote.version, not compared)"
          + (f"; version {current} -> now {name}@{previous_alias}" if current is not None else "")))
    return {"name": name, "champion": version, "previous": current, "metric": None, "value": None, "changed": True}


main = hydra_command("promote")(run_promote)

if __name__ == "__main__":
    main()
