"""Leave-one-family-out (LOFO) on a measured zoo (``carb-collect space=zoo`` rows, e.g. ``zoo-cpu``):
latency and peak memory of a family never measured.

Input: zoo rows with the layer-table features the collector stores (per batch: ``flops`` (fvcore count, one
multiply-add = one FLOP), ``activations``, ``peak_live_MB``, ``bytes_read_MB``, ``bytes_written_MB``;
per network: ``params``, ``param_size_MB`` (at the row's precision), ``n_ops``), the knobs ``model_name``,
``family``, ``input_size``, ``batch_size``, ``precision`` and the targets ``latency_ms`` (per batch) and
``peak_memory_MB``. Every family is held out in turn (``min_models=1``: most CPU-zoo families have one
network); the models are fitted on every other family's rows and predict the held-out one.

CARB (``carb``) is the registered model: the :class:`carb.model.cascade.CarbCascade` that ``carb-train
data.path=zoo-cpu`` fits (its zoo input path: the layer table's features from the current tracer, the
physics priors under each stage; :class:`RegisteredCascade`, built from the same config sections), fitted
once per held-out family on every other family's rows, predicting latency and memory from that one fit
(:func:`cascade_lofo`). Beside it, on the same splits:

Latency (log time per image, as :mod:`carb.model.zoo_latency`):
- ``b1``: FLOPs only, ``log t = a + b log FLOPs``;
- ``hj``: Hidden Joules' regression on log params, log GMACs, log activations.

Memory (log peak MB per batch):
- ``physics``: the liveness estimate ``peak_live_MB + param_size_MB``, no fitting;
- ``b1`` / ``hj``: the same two regressions on log peak memory (per batch).

Intervals: 90 % cross-conformal over families (:func:`carb.analysis.zoo_eval.family_intervals`: each held-out
family's band from the other held-out families' log ratios, each family weighing alike).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.zoo_eval import device_summary, family_intervals, family_table, lofo_splits
from carb.errors import DatasetError

#: Columns a measured zoo row needs here.
CPU_NEEDED: tuple[str, ...] = ("latency_ms", "peak_memory_MB", "batch_size", "input_size", "flops", "params",
                               "activations", "peak_live_MB", "param_size_MB", "bytes_read_MB",
                               "bytes_written_MB", "n_ops")


def usable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s rows with every :data:`CPU_NEEDED` value finite and positive, ``model`` = ``model_name``."""
    missing = [c for c in CPU_NEEDED + ("family", "model_name", "precision") if c not in frame.columns]
    if missing:
        raise DatasetError(f"zoo LOFO: missing column(s) {missing}")
    vals = frame[list(CPU_NEEDED)].apply(pd.to_numeric, errors="coerce").to_numpy(float)
    ok = np.isfinite(vals).all(axis=1) & (vals > 0).all(axis=1)
    out = frame[ok].reset_index(drop=True).copy()
    out["model"] = out["model_name"].astype(str)
    out["family"] = out["family"].astype(str)
    return out


def features(frame: pd.DataFrame) -> pd.DataFrame:
    """Log features (n rows): per image ``log_flops``, ``log_bytes`` (MB read + written), ``log_act``,
    ``log_live`` (MB); per network ``log_params_M``, ``log_n_ops``; ``log_batch``, ``log_input``, ``bf16``
    (0/1), ``bf16_log_flops``; ratios ``log_ai`` (FLOPs per byte), ``log_live_per_flop``; per batch
    ``log_physics_MB`` (log of peak_live_MB + param_size_MB), ``log_param_MB``, ``log_flops_batch``,
    ``log_act_batch``."""
    f = lambda c: pd.to_numeric(frame[c], errors="coerce").to_numpy(float)  # noqa: E731
    b = f("batch_size")
    flops, byt = f("flops") / b, (f("bytes_read_MB") + f("bytes_written_MB")) / b
    bf16 = (frame["precision"].astype(str) == "bf16").to_numpy(float)
    out = {"log_flops": np.log(flops), "log_bytes": np.log(byt), "log_act": np.log(f("activations") / b),
           "log_live": np.log(f("peak_live_MB") / b), "log_params_M": np.log(f("params") / 1e6),
           "log_n_ops": np.log(f("n_ops")), "log_batch": np.log(b), "log_input": np.log(f("input_size")),
           "bf16": bf16, "bf16_log_flops": bf16 * np.log(flops)}
    out |= {"log_ai": out["log_flops"] - np.log(byt * 1e6),
            "log_live_per_flop": out["log_live"] - out["log_flops"],
            "log_physics_MB": np.log(f("peak_live_MB") + f("param_size_MB")),
            "log_param_MB": np.log(f("param_size_MB")),
            "log_flops_batch": np.log(f("flops")), "log_act_batch": np.log(f("activations"))}
    return pd.DataFrame(out, index=frame.index)


class LogLinear:
    """Least squares of ``log(target)`` (per image when ``per_image``) on some :func:`features` columns."""

    def __init__(self, target: str, columns: tuple[str, ...], per_image: bool):
        self.target, self.columns, self.per_image = target, columns, per_image

    def _y(self, frame: pd.DataFrame) -> np.ndarray:
        y = np.log(frame[self.target].to_numpy(float))
        return y - np.log(frame["batch_size"].to_numpy(float)) if self.per_image else y

    def fit(self, frame: pd.DataFrame) -> LogLinear:
        """Fit on ``frame`` (rows of :func:`usable`); returns self."""
        X = features(frame)[list(self.columns)].to_numpy(float)
        A = np.c_[np.ones(len(X)), X]
        self.coef_, *_ = np.linalg.lstsq(A, self._y(frame), rcond=None)
        return self

    def predict_log(self, frame: pd.DataFrame) -> np.ndarray:
        """The fitted log target (n,), per image when ``per_image``."""
        return self.coef_[0] + features(frame)[list(self.columns)].to_numpy(float) @ self.coef_[1:]

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """The target (n,): ``latency_ms`` per batch or ``peak_memory_MB``."""
        out = np.exp(self.predict_log(frame))
        return out * frame["batch_size"].to_numpy(float) if self.per_image else out


class PhysicsMemory:
    """The liveness estimate, no fitting: ``peak_live_MB + param_size_MB`` (n,)."""

    def fit(self, frame: pd.DataFrame) -> PhysicsMemory:
        """Nothing to fit; returns self."""
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Peak memory in MB (n,)."""
        return frame["peak_live_MB"].to_numpy(float) + frame["param_size_MB"].to_numpy(float)


#: Latency models compared, by column prefix.
LATENCY_MODELS: dict[str, Callable[[], object]] = {
    "b1": lambda: LogLinear("latency_ms", ("log_flops",), per_image=True),
    "hj": lambda: LogLinear("latency_ms", ("log_params_M", "log_flops", "log_act"), per_image=True)}
#: Memory models compared, by column prefix.
MEMORY_MODELS: dict[str, Callable[[], object]] = {
    "b1": lambda: LogLinear("peak_memory_MB", ("log_flops_batch",), per_image=False),
    "hj": lambda: LogLinear("peak_memory_MB", ("log_params_M", "log_flops_batch", "log_act_batch"), per_image=False),
    "physics": PhysicsMemory}


def lofo(frame: pd.DataFrame, models: Mapping[str, Callable[[], object]]) -> pd.DataFrame:
    """``frame`` with ``pred_<name>`` per model: each family predicted by a fit on every other family."""
    out = frame.copy()
    for k in models:
        out[f"pred_{k}"] = np.nan
    for _, train, test in lofo_splits(frame, sorted(frame["family"].astype(str).unique())):
        for k, make in models.items():
            out.loc[test, f"pred_{k}"] = make().fit(frame[train]).predict(frame[test])
    return out


class RegisteredCascade:
    """What ``carb-train`` fits on the same rows: :func:`carb.model.presets.resolve_auto` of ``model`` for the
    training rows' count, then :func:`carb.model.presets.build_cascade` with ``features`` and ``prior``
    (plain config sections, as the command passes them), fitted on the measured targets."""

    def __init__(self, model: Mapping[str, Any], features: Mapping[str, Any], prior: Mapping[str, Any] | None):
        self.model, self.features, self.prior = dict(model), dict(features), prior

    def fit(self, frame: pd.DataFrame) -> RegisteredCascade:
        """Fit on ``frame`` (zoo rows with their targets); returns self."""
        from carb.data.schema import TARGETS
        from carb.model.presets import build_cascade, resolve_auto

        cfg, self.preset_ = resolve_auto(self.model, len(frame))
        targets = [t for t in TARGETS if t in frame.columns and frame[t].notna().any()]
        self.cascade_ = build_cascade(cfg, self.features, self.prior).fit(frame, frame[targets])
        return self

    def predict(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``pred_<target>`` per fitted target (n rows, index of ``frame``)."""
        return self.cascade_.predict(frame)


def cascade_lofo(rows: pd.DataFrame, make: Callable[[], Any],
                 progress: Callable[[str], None] | None = None) -> pd.DataFrame:
    """``pred_latency_ms`` and ``pred_peak_memory_MB`` (index of ``rows``) of every family from one fit of
    ``make()`` (e.g. :class:`RegisteredCascade`) on every other family's rows; ``progress`` gets each
    family's name as it is held out."""
    out = pd.DataFrame(np.nan, index=rows.index, columns=["pred_latency_ms", "pred_peak_memory_MB"])
    for f, train, test in lofo_splits(rows, sorted(rows["family"].astype(str).unique())):
        if progress is not None:
            progress(f)
        pred = make().fit(rows[train]).predict(rows[test])
        for c in out.columns:
            if c in pred:
                out.loc[test, c] = pred[c].to_numpy(float)
    return out


def evaluate(frame: pd.DataFrame, target: str, models: Mapping[str, Callable[[], object]],
             coverage: float = 0.9, carb: Any = None, floor_log: float = 0.0
             ) -> tuple[pd.DataFrame, dict, pd.DataFrame]:
    """LOFO of ``target`` (``latency_ms`` or ``peak_memory_MB``) over every family of a measured zoo:
    (per-family table, summary as :func:`carb.analysis.zoo_eval.device_summary` gives it with the target's
    column, predictions with intervals). ``carb``: CARB's LOFO predictions of ``usable(frame)``'s rows
    ((n,), :func:`cascade_lofo`), else ``models`` must hold a ``carb`` entry. ``floor_log``: the narrowest
    half-width of CARB's intervals (a log ratio; :func:`carb.model.intervals.memory_floor` for memory). Needs
    >= 3 families."""
    rows = usable(frame)
    if rows["family"].nunique() < 3:
        raise DatasetError(f"zoo LOFO: {rows['family'].nunique()} families; need at least 3")
    pred = lofo(rows, models)
    if carb is not None:
        pred["pred_carb"] = np.asarray(carb, float)
        models = {**models, "carb": None}
    if "pred_carb" not in pred:
        raise DatasetError("zoo LOFO: no CARB predictions (give carb= or a 'carb' model)")
    pred = family_intervals(pred, coverage=coverage, target=target)
    if floor_log > 0:   # never narrower than the device's measured run-to-run spread (carb.model.intervals)
        from carb.model.intervals import floored

        p = pred["pred_carb"].to_numpy(float)
        lo, hi = floored(np.log(pred["lo_ms"].to_numpy(float) / p), np.log(pred["hi_ms"].to_numpy(float) / p),
                         floor_log)
        pred["lo_ms"], pred["hi_ms"] = p * np.exp(lo), p * np.exp(hi)
    table = family_table(pred, tuple(models), target=target)
    as_lat = pred if target == "latency_ms" else (
        pred.drop(columns=["latency_ms"]).rename(columns={target: "latency_ms"}))
    summ = device_summary(table, as_lat)
    for m in models:
        if m not in ("b1", "hj", "carb"):
            y = pred[target].to_numpy(float)
            summ[f"{m}_pooled_pct"] = float(100 * np.mean(np.abs(pred[f"pred_{m}"].to_numpy(float) / y - 1)))
            summ[f"{m}_mape_max"] = float(table[f"{m}_mape_pct"].max())
            summ[f"{m}_within20_fams"] = int((table[f"{m}_mape_pct"] <= 20).sum())
    return table, summ, pred


def evaluate_zoo(frame: pd.DataFrame, make: Callable[[], Any], coverage: float = 0.9,
                 progress: Callable[[str], None] | None = None, memory_floor: Mapping[str, Any] | None = None
                 ) -> dict[str, tuple[pd.DataFrame, dict, pd.DataFrame]]:
    """LOFO of latency and memory with CARB = ``make()`` (:class:`RegisteredCascade`), fitted once per held-out
    family for both targets: ``{"latency_ms": evaluate(...), "peak_memory_MB": evaluate(...)}``. Every model
    reads the layer-table columns of the current tracer (:func:`carb.model.cascade_data.with_zoo_kinds`; the
    stored ones where it refuses a network), the cascade as it does itself and the baselines alike.
    ``memory_floor``: ``evaluate.memory_floor`` of ``conf/train.yaml`` (the memory intervals' narrowest
    half-width, :func:`carb.model.intervals.memory_floor`); None: no floor."""
    from carb.model.cascade_data import with_zoo_kinds
    from carb.model.intervals import memory_floor as floor_of

    rows = usable(with_zoo_kinds(frame, ()))
    if rows["family"].nunique() < 3:
        raise DatasetError(f"zoo LOFO: {rows['family'].nunique()} families; need at least 3")
    carb = cascade_lofo(rows, make, progress)
    floors = {"peak_memory_MB": floor_of(rows, memory_floor)}
    return {t: evaluate(rows, t, models, coverage, carb=carb[f"pred_{t}"].to_numpy(float), floor_log=floors.get(t, 0.0))
            for t, models in (("latency_ms", LATENCY_MODELS), ("peak_memory_MB", MEMORY_MODELS))}
