"""A fitted cascade with a predict that takes knobs: what :func:`carb.load_model` returns.

The cascade's own ``predict`` (sklearn contract) needs the static and runtime feature columns it was
fitted on. :class:`Predictor.predict` takes the configurations themselves (a DataFrame of knob columns,
``ArchConfig`` objects or dicts), featurizes them, fills the runtime telemetry as screening does and returns,
per row in one frame: the predictions with their calibrated intervals, the domain flags and, given a
budget, the decision inputs and the decision exactly as ``carb-screen`` makes them.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.decisions import add_probabilities, decide
from carb.analysis.axes import add_per_image
from carb.analysis.screening import PER_IMAGE, check_budget, domain_filter, model_targets, score
from carb.data.accuracy import join_top1
from carb.design.arch import KNOBS, ArchConfig
from carb.design.features import grid_features
from carb.model.domain import unseen_mask
from carb.model.device_check import other_device
from carb.model.intervals import new_architecture_mask

#: Columns of a knob frame that describe the configuration (the rest pass through to the output).
CONFIG_COLUMNS = (*KNOBS, "num_classes")


class Predictor:
    """``cascade`` (a fitted CARB cascade) with :meth:`predict` on knobs. Every fitted attribute of the
    cascade (``targets_``, ``intervals_``, ``domain_``, ``test_mae_``, ``device_name_``, ...) reads through;
    ``cascade.predict(X)`` is the feature-level predict. ``uri``: where it was loaded from. The screening
    functions take either (:func:`carb.analysis.screening.as_cascade`)."""

    #: Read by :func:`carb.analysis.screening.as_cascade` (no import of this module there: no cycle).
    WRAPS_CASCADE = True

    def __init__(self, cascade: Any, uri: str = "", version: str = "") -> None:
        self.cascade = cascade
        self.uri = uri
        self.version = str(version or "")

    def __getattr__(self, name: str) -> Any:
        cascade = self.__dict__.get("cascade")
        if cascade is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(cascade, name)

    def __repr__(self) -> str:
        return (f"Predictor({self.uri or 'cascade'}: device {getattr(self.cascade, 'device_name_', '?')}, "
                f"targets {model_targets(self.cascade)})")

    def predict(self, knobs: pd.DataFrame | Sequence[ArchConfig | Mapping[str, Any]],
                budget: Mapping[str, float] | None = None, coverage: float | None = None,
                features: bool = False, accuracy: str | None = None) -> pd.DataFrame:
        """Predict n configurations in one call.

        ``knobs``: a DataFrame with knob columns (``block``, ``depth``, ``width_mult``, ``input_size``,
        ``batch_size``, ``precision``, ``early_downsample``; optional ``stages``, ``inner_mult``; a knob
        left out takes :class:`~carb.design.arch.ArchConfig`'s default; other columns, e.g. ``top1``, pass
        through), or a list of ``ArchConfig`` / dicts of knobs. ``budget``: ``{target: limit}`` in the
        target's unit per batch (``latency_ms``, ``energy_J``, ``peak_memory_MB``). ``coverage``: of the
        intervals (default: the calibrated one, 0.9). ``features``: keep the feature columns too.
        ``accuracy``: ``IMAGENET1K_V1`` / ``IMAGENET1K_V2`` adds ``top1``, ``top5`` and ``top1_model``
        (torchvision's published ImageNet accuracy, NaN for non-standard networks; :mod:`carb.data.accuracy`).

        Returns n rows in input order: the knobs and ``config_id``; ``pred_<target>`` and, for a calibrated
        model, ``lo_<target>`` / ``hi_<target>`` (target's unit, per batch); per image
        ``pred_energy_J_per_image`` / ``pred_latency_ms_per_image`` and the average power
        ``pred_avg_power_W`` where energy and latency are predicted (:func:`with_rates`); the domain flags ``in_domain``,
        ``outside`` (why not), ``never_measured`` (precision), ``new_architecture``, ``unbounded`` (some
        interval has no finite end at this coverage: ``interval_unbounded_<target>`` of
        :func:`carb.model.intervals.interval`, the flag screening reads); with a budget also ``p_within_<target>``,
        ``p_feasible``, ``margin_<target>``, ``feasible``, ``decision`` and ``decision_reason``
        (:mod:`carb.analysis.decisions`). ``attrs``: :meth:`provenance` (model URI, version, device,
        interval coverage). Bad knobs raise :class:`carb.errors.ConfigError`."""
        frame = knobs if isinstance(knobs, pd.DataFrame) else None
        if frame is None:
            records = [k.to_dict() if isinstance(k, ArchConfig) else dict(k) for k in knobs]
            frame = pd.DataFrame.from_records(records)
        if not len(frame):   # no configuration: 0 rows back, with the columns of a prediction
            return self._empty(frame, budget, coverage, features, accuracy)
        config_cols = [c for c in frame.columns if c in CONFIG_COLUMNS]
        F = grid_features(frame[config_cols].reset_index(drop=True))
        model = self.cascade
        F, _, _ = domain_filter(model, F, "flag")
        F["never_measured"] = unseen_mask(getattr(model, "domain_", None), F, "precision")
        F["new_architecture"] = new_architecture_mask(model, F)
        out = score(model, F, coverage=coverage)
        note = other_device(model)   # a CPU model used on another CPU: one line per Predictor, every row flagged
        out["other_device"] = note is not None
        if note and not self.__dict__.setdefault("_warned", False):
            print(f"carb: {note}", file=sys.stderr)
            self._warned = True
        targets = model_targets(model)
        out = with_rates(out, targets)
        flags = [f"interval_unbounded_{t}" for t in targets if f"interval_unbounded_{t}" in out]
        out["unbounded"] = out[flags].to_numpy(dtype=bool).any(axis=1) if flags else False
        clean = check_budget(budget or {}, targets)
        if clean:
            out = decide(add_probabilities(model, out, clean), clean, getattr(model, "test_mae_", {}) or {})
        if accuracy:
            out = join_top1(out, accuracy, field="accuracy")
        if not features:
            keep = ["config_id", *(c for c in CONFIG_COLUMNS if c in out)]
            keep += [c for c in out.columns if c.startswith(("pred_", "lo_", "hi_", "p_within_", "margin_"))]
            keep += [c for c in ("p_feasible", "feasible", "decision", "decision_reason", "in_domain", "outside",
                                 "never_measured", "new_architecture", "unbounded", "other_device", "top1", "top5",
                                 "top1_model") if c in out]
            out = out[list(dict.fromkeys(keep))]
        extra = frame.drop(columns=[c for c in frame.columns if c in config_cols or c in out])
        out = pd.concat([out.reset_index(drop=True), extra.reset_index(drop=True)], axis=1)
        out.index = frame.index
        out.attrs.update(self.provenance(coverage))
        from carb.model.transfer import describe_origin

        out.attrs["origin"] = describe_origin(model) or f"trained on measured rows of {getattr(model, 'device_name_', '?')}"
        return out

    def _empty(self, frame: pd.DataFrame, budget: Mapping[str, float] | None, coverage: float | None,
               features: bool, accuracy: str | None) -> pd.DataFrame:
        """The answer to 0 configurations (``frame`` has no row): 0 rows with the columns :meth:`predict`
        gives for one (those of ``ArchConfig("basic", 18)``, with the same arguments),
        then ``frame``'s other columns; the index is ``frame``'s (empty)."""
        one = self.predict([ArchConfig("basic", 18)], budget=budget, coverage=coverage, features=features, accuracy=accuracy)
        out = one.iloc[:0]
        extra = [c for c in frame.columns if c not in CONFIG_COLUMNS and c not in out]
        out = pd.concat([out, frame[extra].iloc[:0]], axis=1) if extra else out
        out.index = frame.index
        return out

    def provenance(self, coverage: float | None = None) -> dict[str, Any]:
        """What a prediction frame came from, for its ``attrs``: ``model_uri`` and ``model_version`` (as
        :func:`carb.load_model` resolved them; "" when not from a registry), ``device`` (the model's), and
        ``interval_coverage``: the nominal coverage of the ``lo_``/``hi_`` columns (``coverage`` as asked,
        else the calibrated one; None for a model without intervals)."""
        cal = getattr(self.cascade, "intervals_", None) or {}
        nominal = next((float(v["coverage"]) for v in cal.values() if isinstance(v, dict) and "coverage" in v), None)
        return {"model_uri": self.uri, "model_version": self.version,
                "device": str(getattr(self.cascade, "device_name_", "") or ""),
                "interval_coverage": (float(coverage) if coverage is not None and cal else nominal)}


def with_rates(out: pd.DataFrame, targets: Sequence[str]) -> pd.DataFrame:
    """``out`` (n rows with ``pred_<target>`` per batch and ``batch_size``) with the per-image predictions
    ``pred_energy_J_per_image`` (J/image) and ``pred_latency_ms_per_image`` (ms/image) of the predicted
    targets, and, where both energy and latency are predicted, the average power over a batch
    ``pred_avg_power_W`` = ``pred_energy_J`` / (``pred_latency_ms`` / 1000) (W)."""
    out = add_per_image(out, [f"{t}{PER_IMAGE}" for t in ("energy_J", "latency_ms") if t in targets], targets)
    if "energy_J" in targets and "latency_ms" in targets:
        e = out["pred_energy_J"].to_numpy(dtype=float)
        t_s = out["pred_latency_ms"].to_numpy(dtype=float) / 1e3
        with np.errstate(divide="ignore", invalid="ignore"):
            out = out.assign(pred_avg_power_W=np.where(t_s > 0, e / t_s, np.nan))
    return out
