"""Predictions of a zoo latency model (:class:`carb.model.zoo_predictor.ZooLatencyPredictor`: ``ZooLatencyModel``
fitted on one of timm's published files) in the frame :meth:`carb.analysis.predictor.Predictor.predict` gives for a
zoo cascade: per-batch latency with its band from held-out families, domain flags, and with a budget the decision
columns. Here, in the analysis layer, because it composes the decisions, the budget check and the top-1 join."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import ConfigError
from carb.model.zoo_predictor import NOT_PREDICTED


def predict_zoo_latency(model: Any, frame: pd.DataFrame, modules: Mapping[str, Any],
                        budget: Mapping[str, float] | None = None, coverage: float | None = None,
                        features: bool = False, accuracy: str | None = None) -> pd.DataFrame:
    """:meth:`carb.analysis.predictor.Predictor.predict` for a :class:`carb.model.zoo_predictor.ZooLatencyPredictor`
    ``model``, of ``(frame, modules)`` (:func:`carb.analysis.predictor.zoo_knobs` of the input); n rows in input order
    with ``config_id``, the knobs, ``pred_latency_ms`` / ``lo_`` / ``hi_`` (per batch),
    ``pred_latency_ms_per_image``, ``pred_energy_J`` / ``pred_peak_memory_MB`` NaN and ``not_predicted``,
    ``in_domain``, ``outside``, ``never_measured``, ``new_architecture``, ``unbounded``, ``other_device``,
    ``features_source``; with ``budget`` the decision columns; with ``accuracy`` timm's top-1."""
    from carb.analysis.decisions import add_probabilities, decide
    from carb.analysis.screening import check_budget
    from carb.design.zoo_space import ZooConfig

    cols = ["model_name", "input_size", "batch_size", "precision"]
    F, refused = model.features(frame[cols], modules)
    ok = refused == ""
    if len(ok) and not ok.any():
        raise ConfigError(all_refused_line(list(frame["model_name"].astype(str)), list(refused)))
    out = frame[cols].reset_index(drop=True).copy()
    out.insert(0, "config_id", [ZooConfig(model_name=str(m), input_size=int(s), batch_size=int(b),
                                          precision=str(p)).config_id for m, s, b, p in out[cols].to_numpy()])
    out["family"] = F["family"].to_numpy() if "family" in F else np.nan
    pred = np.full(len(out), np.nan)
    inside = np.zeros(len(out), dtype=bool)
    why = list(refused.astype(str))
    if ok.any():
        pred[ok] = model.predict_latency(F[ok])
        i, r = model.check_rows(F[ok])
        inside[ok] = i
        for k, reason in zip(np.flatnonzero(ok), r):
            why[k] = reason
    lo, hi = model.band(coverage)
    out["pred_latency_ms"] = pred
    out["lo_latency_ms"] = pred * math.exp(lo)
    out["hi_latency_ms"] = pred * math.exp(hi)
    out["pred_latency_ms_per_image"] = pred / out["batch_size"].to_numpy(float)
    out["pred_energy_J"] = np.nan
    out["pred_peak_memory_MB"] = np.nan
    out["not_predicted"] = NOT_PREDICTED
    out["in_domain"] = inside
    out["outside"] = why
    out["never_measured"] = ~out["precision"].astype(str).isin(model.precisions_).to_numpy()
    out["new_architecture"] = ~out["family"].astype(str).isin(model.families_).to_numpy() | ~ok
    out["unbounded"] = not (math.isfinite(lo) and math.isfinite(hi))
    out["other_device"] = False
    out["features_source"] = F["features_source"].to_numpy() if "features_source" in F else ""
    clean = check_budget(budget or {}, list(model.targets_))
    if clean:
        out = decide(add_probabilities(model, out, clean), clean, {})
    if accuracy:
        from carb.analysis.zoo_screen import zoo_top1

        out = zoo_top1(out)
    if features:
        out = pd.concat([out, F.drop(columns=[c for c in F.columns if c in out]).reset_index(drop=True)], axis=1)
    extra = frame.drop(columns=[c for c in frame.columns if c in cols or c in out])
    out = pd.concat([out, extra.reset_index(drop=True)], axis=1)
    out.index = frame.index
    out.attrs.update({"interval_families": model.interval_["families"],
                      "interval_method": model.interval_["method"], "not_predicted": NOT_PREDICTED})
    return out


def all_refused_line(names: Sequence[str], refused: Sequence[str]) -> str:
    """One line for a call whose every network the tracer refused: the reason itself for one network,
    else each network with its reason (first reason per network, in input order)."""
    first = dict.fromkeys(names)
    for n, why in zip(names, refused):
        first[n] = first[n] or str(why)
    if len(first) == 1:
        return next(iter(first.values()))
    return "every network was refused: " + "; ".join(
        why if why.startswith(f"model {n!r}") else f"{n}: {why}" for n, why in first.items())
