"""What a ``carb-train`` or ``carb-screen`` run records, kept out of the commands' control flow: the few
params a person compares (the whole config goes in ``config.yaml``), counts and flags moved out of the
metrics, the headline metrics (scalars grouped by prefix: ``test/``, ``val/``, ``extrap/``, ...) and the
table of every metric, the feature-set identity check of an ablation, the descriptions and sortable tags
of a registered model version, and a screen run's name, tags and params (what differs between screenings).
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: The train config's params (``fnmatch`` patterns on dotted keys): what a person compares across runs.
#: Everything else of the resolved config is in the run's ``config.yaml``; keys a sweep varies are params too.
TRAIN_PARAMS = (
    "data.path", "data.device", "features.name", "model.name", "model.members", "model.log_target",
    "model.telemetry", "model.power_cap", "model.oof_folds", "model.random_state", "model.tuned_from.study",
    "model.specialists.*.n_estimators", "model.specialists.*.max_depth", "model.specialists.*.num_leaves",
    "model.specialists.*.learning_rate", "model.specialists.*.min_samples_leaf", "model.correctors.*.enabled",
    "prior.enabled", "prior.device_probe", "split.seed", "split.fractions", "evaluate.interval_coverage",
    "evaluate.budget.target", "evaluate.budget.value", "evaluate.lobo.enabled", "evaluate.lobo.max_batch",
    "evaluate.extrapolation.enabled", "evaluate.architecture_intervals.enabled", "register", "run_suffix",
)

#: Metrics that are counts or settings, not measurements: logged as params.
_COUNT = re.compile(r"(^|_)n($|_)|^lobo_max_batch$|^interval_nominal$|^budget_(peak_memory_MB|energy_J|latency_ms)$")
#: Metrics that are yes/no choices of the fit: logged as tags (``true``/``false``).
_FLAG = re.compile(r"^log_target_.+$|^corrector_.+_kept$")


def swept(sweep: Mapping[str, str] | None) -> list[str]:
    """Dotted keys a multirun job overrides (from its ``sweep_overrides`` tag; group choices such as
    ``features=no_util`` give ``features``)."""
    import shlex

    text = str((sweep or {}).get("sweep_overrides", ""))
    try:
        parts = shlex.split(text)
    except ValueError:
        parts = text.split()
    return [p.split("=", 1)[0].lstrip("+~") for p in parts if "=" in p]


def train_params(config: Mapping[str, Any], counts: Mapping[str, str],
                 sweep: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A train run's params: :data:`TRAIN_PARAMS` and the keys the sweep varies, from ``config``, plus
    ``counts`` (from :func:`split_metrics`); at most :data:`carb.tracking.MAX_PARAMS`."""
    from carb.tracking import select_params

    return {**select_params(config, [*TRAIN_PARAMS, *swept(sweep)]), **counts}


#: Headline scalars of a train run per target ``{t}``: logged name -> name in the evaluation's metrics.
#: The ``/`` groups them into sections of MLflow's charts (``test``, ``val``, ``vs_b1``, ...). MLflow's UI
#: orders metric columns and chart sections by name (compare view, runs table), so the baselines are
#: ``vs_b1/`` and ``vs_b2/`` ("against baseline 1"): after the headline ``test/`` and ``val/``, not before.
HEADLINE_PER_TARGET = {
    **{f"test/{{t}}_{k}": f"test_{{t}}_{k}" for k in ("r2", "mae", "mape", "rmse")},
    "val/{t}_mae": "val_{t}_mae",
    **{f"vs_b1/{{t}}_{k}": f"b1_{{t}}_{k}" for k in ("r2", "mape")},
    **{f"lobo/{{t}}_{k}": f"lobo_{{t}}_{k}" for k in ("r2", "mape")},
    "vs_b2/{t}_r2": "b2_{t}_r2",
    "interval/test_{t}_coverage": "interval_test_{t}_coverage",
    "interval/test_{t}_width": "interval_test_{t}_width",
}
#: Headline scalars not per target: logged name -> name in the evaluation's metrics.
HEADLINE = {"budget/accuracy": "budget_accuracy", "budget/false_accept_rate": "budget_false_accept_rate",
            "budget/false_reject_rate": "budget_false_reject_rate", "sanity/memory_below_params":
            "sanity_memory_below_params", "time/fit_total_s": "fit_total_s", "time/calibrate_s": "calibrate_s",
            "time/evaluate_s": "evaluate_s"}


def headline_metrics(metrics: Mapping[str, float], targets: list[str]) -> dict[str, float]:
    """The scalars a train run logs (:data:`HEADLINE_PER_TARGET`, :data:`HEADLINE`, and per target the
    lowest extrapolation R^2 of CARB and of B1 over the splits, ``extrap/min_<t>_r2`` and
    ``extrap/min_<t>_b1_r2``); every metric is in the run's table (:func:`metric_rows`). Missing or
    non-finite ones are left out."""
    out = {new: metrics[old] for new, old in HEADLINE.items() if _finite(metrics.get(old))}
    for t in targets:
        out.update({new.format(t=t): metrics[old.format(t=t)] for new, old in HEADLINE_PER_TARGET.items()
                    if _finite(metrics.get(old.format(t=t)))})
        for tail in ("r2", "b1_r2"):
            xr = [float(v) for k, v in metrics.items() if re.fullmatch(rf"xval_[a-z]+_{t}_{tail}", k) and _finite(v)]
            if xr:
                out[f"extrap/min_{t}_{tail}"] = min(xr)
    return out


#: Sections of the metric table: the metric name's leading words (longest first).
SECTIONS = ("resid_spearman_sm", "arch_interval", "interval", "xval", "test", "val", "lobo", "b1", "b2",
            "budget", "sanity", "weight", "fit", "calibrate", "evaluate")


def metric_rows(metrics: Mapping[str, float], targets: list[str]) -> list[dict[str, Any]]:
    """Every finite metric as a row ``{metric, section, split, target, measure, value}``, e.g.
    ``xval_batch_energy_J_b1_r2`` -> ``xval``, ``batch``, ``energy_J``, ``b1_r2``: the run's one table
    artifact (``metrics.json``) instead of hundreds of scalar metrics."""
    rows = []
    for name, v in metrics.items():
        if not _finite(v):
            continue
        head, target, measure = name, "", ""
        for t in sorted(targets, key=len, reverse=True):
            m = re.fullmatch(rf"(?:(.*?)_)?{t}(?:_(.*))?", name)
            if m:
                head, target, measure = m.group(1) or "", t, m.group(2) or ""
                break
        section = next((p for p in SECTIONS if head == p or head.startswith(p + "_")), head.split("_")[0])
        split = head[len(section):].strip("_")
        if not target and not measure:
            split, measure = "", split
        rows.append({"metric": name, "section": section, "split": split, "target": target,
                     "measure": measure, "value": float(v)})
    return rows


def split_metrics(metrics: Mapping[str, float]) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """``(metrics, params, tags)``: counts and settings (``test_<regime>_n``, ``lobo_n_train``,
    ``sanity_n``, ``budget_n``, ``lobo_max_batch``, ``interval_nominal``, the budget limit) become
    params, flags (``log_target_<t>``, ``corrector_<name>_<t>_kept``) become ``true``/``false`` tags,
    the rest stay metrics."""
    keep: dict[str, float] = {}
    params: dict[str, str] = {}
    tags: dict[str, str] = {}
    for k, v in metrics.items():
        if _FLAG.match(k):
            tags[k] = str(bool(v)).lower() if _finite(v) else "unknown"
        elif _COUNT.search(k):
            params[k] = (str(int(v)) if float(v).is_integer() else f"{v:g}") if _finite(v) else "nan"
        else:
            keep[k] = v
    return keep, params, tags


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def feature_sets() -> dict[str, list[str]]:
    """Every shipped feature set: ``conf/features/<name>.yaml`` name -> columns."""
    import yaml

    from carb.resources import CONF_DIR

    out = {}
    for p in sorted((CONF_DIR / "features").glob("*.yaml")):
        d = yaml.safe_load(p.read_text()) or {}
        out[str(d.get("name", p.stem))] = list(d.get("columns") or [])
    return out


def identical_feature_sets(frame, name: str, used: list[str],
                           sets: Mapping[str, list[str]] | None = None) -> list[str]:
    """Other feature sets (:func:`feature_sets`) whose effective columns on ``frame``
    (:func:`carb.model.presets.effective_columns`) are exactly ``used``, the columns the fit of
    feature set ``name`` kept: on this data they fit the same model."""
    from carb.model.presets import effective_columns

    sets = feature_sets() if sets is None else sets
    return sorted(n for n, cols in sets.items() if n != name and set(effective_columns(frame, cols)) == set(used))


def identity_line(name: str, same: list[str], used: list[str], dropped: list[str]) -> str:
    """``feature sets X and Y are identical on this data: <n> columns ...`` for :func:`identical_feature_sets`."""
    names = sorted([name, *same])
    listed = ", ".join(names[:-1]) + " and " + names[-1]
    why = f"; all missing here: {', '.join(dropped)}" if dropped else ""
    return (f"feature sets {listed} are identical on this data: {len(used)} columns ({', '.join(used)}){why}. "
            f"Their runs fit the same model; compare them on data with telemetry")


# --------------------------------------------------------------------------- registered versions

#: Units of the targets in descriptions.
UNITS = {"peak_memory_MB": "MB", "energy_J": "J per batch", "latency_ms": "ms per batch"}


def version_tags(metrics: Mapping[str, float], targets: list[str]) -> dict[str, str]:
    """Sortable metric tags of a registered version: ``test_<t>_{r2,mae,mape}``, the lowest
    extrapolation R^2 ``xval_min_<t>_r2`` and ``interval_test_<t>_coverage`` where they exist."""
    out = {}
    for t in targets:
        for k in (f"test_{t}_r2", f"test_{t}_mae", f"test_{t}_mape", f"interval_test_{t}_coverage"):
            if _finite(metrics.get(k)):
                out[k] = f"{float(metrics[k]):.6g}"
        xr = [float(v) for k, v in metrics.items() if re.fullmatch(rf"xval_[a-z]+_{t}_r2", k) and _finite(v)]
        if xr:
            out[f"xval_min_{t}_r2"] = f"{min(xr):.6g}"
    return out


def model_description(name: str, device: str, device_id: str | None, fingerprint: str | None,
                      targets: list[str]) -> str:
    """The registered model's description: the device it describes and what it predicts."""
    fp = ""
    if fingerprint:
        try:
            d = json.loads(fingerprint)
            fp = "; ".join(f"{k} {v if not isinstance(v, list) else ','.join(map(str, v))}" for k, v in d.items())
        except ValueError:
            fp = fingerprint
    what = ", ".join(f"{t} ({UNITS.get(t, '')})" for t in targets)
    return (f"{name}: CARB cost model of {device} (device_id {device_id or 'unknown'}). It predicts {what} "
            f"of ResNet-family CNN configurations (block, depth, width, inner width, input size, batch size, "
            f"precision) from their architecture, for screening designs on this device.\n\n"
            f"Device fingerprint: {fp or 'none recorded'}.\n\n"
            f"One version per carb-train run; carb-promote sets the `champion` alias. Each version's "
            f"description gives its data, preset, feature set and test metrics.")


def version_description(info: Mapping[str, Any], metrics: Mapping[str, float], targets: list[str]) -> str:
    """A registered version's description (Markdown): data, rows, preset, feature set, test metrics,
    extrapolation metrics (``xval_*``) and interval coverage (``interval_*``) when they exist, and the
    source run. ``info``: ``data_path``, ``digest``, ``rows`` (total), ``sizes`` (train/val/cal/test),
    ``split``, ``preset``, ``feature_set``, ``columns``, ``dropped_targets``, ``run_id``, ``run_name``,
    ``git_commit``."""
    tr, va, ca, te = info["sizes"]
    lines = [f"- **Data**: {info['data_path']} (digest {info['digest']}), {info['rows']} rows: {tr} train, "
             f"{va} validation, {ca} calibration, {te} test ({info['split']})",
             f"- **Model**: preset {info['preset']}, feature set {info['feature_set']} "
             f"({len(info['columns'])} columns used: {', '.join(info['columns'])})"]
    if info.get("dropped_targets"):
        lines.append(f"- **Not predicted**: {'; '.join(info['dropped_targets'].values())}")
    test = [f"{t} R2 {metrics[f'test_{t}_r2']:.3f}, MAE {metrics[f'test_{t}_mae']:.4g} {UNITS.get(t, '').split()[0]}, "
            f"MAPE {metrics[f'test_{t}_mape']:.1f}%" for t in targets if _finite(metrics.get(f"test_{t}_r2"))]
    if test:
        lines.append(f"- **Test**: {'; '.join(test)}")
    splits = sorted({m.group(1) for k in metrics if (m := re.fullmatch(r"xval_([a-z]+)_.+_r2", k))
                     and not k.endswith("_b1_r2")})
    if splits:
        parts = []
        for s in splits:
            r = [f"{t} {metrics[f'xval_{s}_{t}_r2']:.3f} (B1 {metrics.get(f'xval_{s}_{t}_b1_r2', float('nan')):.3f})"
                 for t in targets if _finite(metrics.get(f"xval_{s}_{t}_r2"))]
            if r:
                parts.append(f"{s}: {', '.join(r)}")
        lines.append(f"- **Extrapolation R2** (train on the lower range, test on the upper; B1 = FLOPs-only): "
                     f"{'; '.join(parts)}")
    cov = [(k[len("interval_"):-len("_coverage")], v) for k, v in metrics.items()
           if k.startswith("interval_") and k.endswith("_coverage") and _finite(v)]
    if cov:
        nominal = info.get("interval_nominal")
        head = f"nominal {float(nominal):.2f}" if _finite(nominal) else "calibrated"
        lines.append(f"- **Interval coverage** ({head}): " + ", ".join(f"{k} {float(v):.3f}" for k, v in cov))
    lines.append(f"- **Source run**: {info['run_name']} ({info['run_id']}, experiment carb-train), git "
                 f"{info.get('git_commit', 'unknown')}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- screen runs

#: The screen config's params (``fnmatch`` patterns on dotted keys), with the target, objective and
#: budget resolved; the whole resolved config is the run's ``config.yaml``. ``space.*`` only without a grid file.
SCREEN_PARAMS = (
    "screen.target", "screen.source", "screen.objective", "screen.budget.*", "screen.grid_file",
    "screen.grid_defaults.*", "screen.top_k", "screen.rescore", "screen.shortlist_size", "screen.profile_next", "screen.outside",
    "screen.interval_coverage", "screen.validate", "screen.validate_split", "screen.pareto", "screen.require.*",
    "screen.hj.*",
    "space.name", "space.mode", "space.n", "space.seed", "space.blocks", "space.depths.*", "space.width_mults",
    "space.input_sizes", "space.batch_sizes", "space.precisions", "space.early_downsample", "space.inner_mults",
)


def grid_source(config: Mapping[str, Any]) -> tuple[str, str]:
    """``(name, source)`` of a screening's grid: the grid file's stem and path, or the space's name and
    its ``conf/space/<name>.yaml``."""
    from pathlib import Path

    from carb.resources import CONF_DIR

    grid_file = (config.get("screen") or {}).get("grid_file")
    if grid_file:
        return Path(str(grid_file)).stem, str(grid_file)
    name = str((config.get("space") or {}).get("name") or "space")
    return name, str(CONF_DIR / "space" / f"{name}.yaml")


def screen_record(config: Mapping[str, Any], result: Any, target_uri: str, target_version: str, device: str,
                  mode: str, n_candidates: int, sweep: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a screen run records besides its counts: ``run_name``
    (``<device>-screen-v<target version>/<budget>/<objective>/<grid>-<candidates>[/two-stage]``: the device
    first, as the runs table cuts long names and two devices' screenings must not read the same, then what
    differs between screenings, most often changed first), ``tags`` (``grid``, ``grid_rows``, ``objective``, ``budget``, ``target_model``,
    ``target_version``, ``device``, ``mode``, ``pareto_axes``), ``config`` (the config with the target,
    objective and budget it used) and ``params`` (:data:`SCREEN_PARAMS` and swept keys from it, no nulls).
    ``result``: a :class:`carb.analysis.screening.ScreenResult`."""
    from carb.data.schema import device_slug
    from carb.tracking import select_params

    screen = dict(config.get("screen") or {})
    grid, _ = grid_source(config)
    budget = ",".join(f"{k}<={v:g}" for k, v in result.budget.items()) or "no-budget"
    version = f"v{target_version}" if target_version else "unregistered"
    resolved = {**config, "screen": {**screen, "target": target_uri, "objective": result.objective,
                                     "budget": {**dict(screen.get("budget") or {}), **dict(result.budget)}}}
    pats = [p for p in (*SCREEN_PARAMS, *swept(sweep)) if not (screen.get("grid_file") and p.startswith("space."))]
    params = {k: v for k, v in select_params(resolved, pats).items() if v is not None}
    tags = {"grid": grid, "grid_rows": str(n_candidates), "objective": result.objective, "budget": budget,
            "target_model": target_uri, "target_version": str(target_version or ""), "device": device,
            "mode": mode, "pareto_axes": " x ".join(getattr(result, "axes", []) or [])}
    name = "/".join([f"{device_slug(device or 'model')}-screen-{version}", budget, result.objective,
                     f"{grid}-{n_candidates}"] + ([mode] if mode != "single-stage" else []))
    return {"run_name": name, "tags": tags, "config": resolved, "params": params}


def grid_frame(features: Any) -> Any:
    """The grid's knob columns (:data:`carb.design.arch.KNOBS`) of featurized candidates: the run's
    ``candidates`` dataset input."""
    from carb.design.arch import KNOBS

    return features[[k for k in KNOBS if k in features.columns]]
