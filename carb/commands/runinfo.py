"""What a ``carb-train`` run records besides its metrics, kept out of the command's control flow:
lean params (the config without what configures nothing of the fit), counts and flags moved out of the
metrics, the feature-set identity check of an ablation, and the descriptions and sortable tags of a
registered model version.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

#: Config sections never logged as params of a train run: display settings, the store the run lives
#: in, and the tuning settings (only ``model=tuned`` reads them; its study is in the tags).
UNLOGGED_SECTIONS = ("progress", "print_table", "log_only", "tracking", "tune", "compute")

#: Metrics that are counts or settings, not measurements: logged as params.
_COUNT = re.compile(r"(^|_)n($|_)|^lobo_max_batch$|^interval_nominal$|^budget_(peak_memory_MB|energy_J|latency_ms)$")
#: Metrics that are yes/no choices of the fit: logged as tags (``true``/``false``).
_FLAG = re.compile(r"^log_target_.+$|^corrector_.+_kept$")


def lean_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The train config to log as params: without :data:`UNLOGGED_SECTIONS` (the tuning search space
    alone was 73 params of every run)."""
    return {k: v for k, v in config.items() if k not in UNLOGGED_SECTIONS}


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
