"""The CARB cascade (paper Sections 5.3 and 5.5): peak memory -> energy -> latency.

:class:`CarbCascade` is a scikit-learn meta-estimator on raw dataset frames. Per target it fits a
:class:`carb.model.ensemble.BlendedRegressor` (XGBoost + LightGBM + ExtraTrees, validation-calibrated blend).
Each downstream stage gets the upstream predictions as extra features (``pred_peak_memory_MB`` for
energy, ``pred_peak_memory_MB`` and ``pred_energy_J`` for latency). On the training rows those priors
are out-of-fold (seeded ``KFold``: each row's prior comes from a stage model that never saw the row),
on validation and at serving they come from the stage fitted on all training rows, so training and
serving see the same kind of input.

Regime correctors (a small ``HistGradientBoostingRegressor`` on the stage's out-of-fold residuals,
in the stage's fitting space) are fitted for the low-batch regime (``batch_size <= 8``, every target)
and the high-load regime (SM or memory utilization > 65 %, memory only by default), one after the
other, and each is kept only when it lowers the stage's validation MAE (``corrector_report_`` says
what happened and why).

Predictions are floored at half the smallest positive training value of each target (costs are
positive; raw-space boosting with correctors can otherwise extrapolate below zero), before they feed
the next stage.

The estimator encodes the categorical knobs itself (``block`` -> ``block_bottleneck``, ``precision``
-> ``precision_bits`` and ``precision_bf16``, ``early_downsample`` -> 0/1) and computes the
interaction features (:func:`carb.model.encoding.interaction_features`) when they are named but absent, so
the logged model takes raw frames. A target that ``y`` does not measure (all NaN, e.g. energy on a CPU
without RAPL) drops its stage with a warning; the other stages still fit. A feature column that is
all-NaN in training (telemetry a device cannot report) is dropped with a warning.

"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils.validation import check_is_fitted

from carb.data.schema import RUNTIME_FEATURES
from carb.data.tiers import telemetry_medians
from carb.compute import limited
from carb.design.shapes import shared_architectures
from carb.errors import ConfigError, DatasetError
from carb.model.correctors import (
    Design,
    Stage,
    corrector_config,
    fit_correctors,
    mae,
)
from carb.model.cascade_data import (
    device_identity,
    measured_targets,
    prepare,
    raw_inputs,
    targets_frame,
    training_frames,
    usable_features,
    with_graph,
)
from carb.model.encoding import FULL_FEATURES, UTIL_COLUMNS, encode, pred_name
from carb.model.ensemble import MEMBERS, BlendedRegressor
from carb.model.stages import fit_prior, out_of_fold, stage_estimator, to_units

log = logging.getLogger(__name__)


class CarbCascade(RegressorMixin, BaseEstimator):
    """Memory -> energy -> latency cascade of blended specialists with regime correctors.

    Parameters (every one can come straight from ``conf/model/*.yaml``)
    ----------
    features : sequence of str or None
        Raw feature columns (knobs, static, runtime, interaction names); None = :data:`FULL_FEATURES`.
    feature_set : str
        Name of the feature set (``full`` / ``no_util`` / ``arch_only``), recorded for serving.
    specialists : dict or None
        ``{"xgb": {...}, "lgbm": {...}, "et": {...}}`` constructor params; None = each library's own defaults.
        The paper's sizes (Section 5.3) are the ``model=carb`` preset, ``conf/model/carb.yaml``: the YAML
        presets are the only place sizes are written down (:func:`carb.model.presets.build_cascade`).
    per_target : dict or None
        Per-target overrides ``{target: {"xgb": {...}, "lgbm": {...}, "et": {...}, "weights": [...],
        "log_target": ...}}`` merged over ``specialists`` (what a tuned preset supplies).
    members : sequence of str
        Specialists to blend (subset of ``("xgb", "lgbm", "et")``).
    log_target : "auto", bool or dict
        Fitting space per target (see :mod:`carb.model.ensemble`); a dict maps target -> value.
    probe_estimators : int
        Trees of the LightGBM probe behind ``log_target="auto"``.
    oof_folds : int
        Folds of the out-of-fold predictions (priors for downstream stages, residuals for correctors).
    correctors : dict or None
        ``{"low_batch": {"enabled", "targets"}, "high_load": {"enabled", "targets"}, "model": {...},
        "min_rows": int, "min_gain": float}`` (missing keys from :data:`DEFAULT_CORRECTORS`).
        ``min_gain`` is the relative validation-MAE reduction a corrector must bring to be kept.
    val_fraction : float
        Validation share of an internal stratified split when ``fit`` gets no validation set.
    n_jobs : int or None
        Threads per specialist; None = every available core.
    random_state : int
        Seed of specialists, folds and internal split.
    physics : bool
        Physics-informed stages (:mod:`carb.model.physics`): each stage fits an analytical prior
        (memory: parameters + peak activations + input; latency and energy: a per-device roofline)
        and the specialists learn the log-ratio of the target to it, so predictions scale like the
        physics outside the measured range. Peak memory is never predicted below the parameter
        bytes. False: the specialists fit the target itself (the paper's cascade). From the config:
        ``prior.enabled`` (``prior=off`` is false).
    prior : dict or None
        Settings of the latency and energy priors (:func:`carb.model.physics.make_prior`): the
        ``prior`` config group's other keys, each described once in
        :class:`carb.model.prior_config.PriorSettings`; None = the priors' own defaults (no device terms).
    telemetry : {"model", "medians"}
        How screening fills the runtime features of a configuration nobody ran: ``model`` (default)
        predicts each from the knobs and static features (:class:`carb.model.telemetry.TelemetryImputer`,
        fitted on the training rows: a network's kernel launches, SM utilisation, ...); ``medians``
        fixes them to the training medians of the row's batch tier (the paper's rule).
    power_cap : bool
        On GPU data with both energy and latency stages and a known power limit
        (:func:`carb.model.physics.power_cap_W`): no prediction implies an average power above the cap,
        so ``latency_ms >= 1000 * energy_J / cap``. A board at its power limit lowers its clocks, and
        the heaviest configurations run slower than a roofline fitted on lighter ones predicts (on
        the H200, trained on batch <= 32: latency R2 0.875 -> 0.979 on batches 64-256).
    shrink : dict or None
        How far a physics stage's correction may move a row from its prior (:mod:`carb.model.shrink`;
        keys of :data:`carb.model.shrink.DEFAULT_SHRINK`): chosen by grouped cross-validation over the
        training rows' families, so a family never measured keeps closer to the prior. Rows without
        families (ResNet knobs) are unchanged. ``shrink_report_`` says what was chosen per target.

    Fitted attributes: ``targets_`` (cascade order), ``dropped_targets_`` (target -> reason),
    ``feature_names_`` (raw feature columns used), ``feature_set_``, ``dropped_features_``,
    ``input_columns_`` (raw columns ``predict`` needs), ``stages_`` (target -> :class:`Stage`),
    ``log_target_``, ``priors_`` (target -> the fitted prior's coefficients), ``blend_weights_``,
    ``probe_val_mae_``, ``corrector_report_``, ``val_mae_``,
    ``test_mae_`` (filled by :meth:`record_test_mae`), ``power_cap_W_`` (None when not applied),
    ``telemetry_medians_``, ``telemetry_imputer_``
    (None with ``telemetry="medians"`` or no runtime feature), ``device_name_``,
    ``device_id_`` and ``device_fingerprint_`` (JSON; None for data without a fingerprint),
    ``domain_`` (knob values and feature ranges of the training rows, :mod:`carb.model.domain`),
    ``oof_predictions_`` (train rows), ``fit_seconds_`` (per stage, incl. out-of-fold fits), ``input_kind_``
    (``"resnet"``: rows of ResNet knobs; ``"zoo"``: rows of named networks, :mod:`carb.data.zoo_schema`, whose
    features are the layer table's, :func:`carb.model.encoding.zoo_features`; ``"mixed"``: both, each row
    featurized from its own layer table; decided by :func:`carb.design.identity.input_kind`).
    """

    def __init__(self, features: Sequence[str] | None = None, feature_set: str = "full",
                 specialists: Mapping[str, Mapping[str, Any]] | None = None,
                 per_target: Mapping[str, Mapping[str, Any]] | None = None,
                 members: Sequence[str] = MEMBERS, log_target: Any = "auto", probe_estimators: int = 200,
                 oof_folds: int = 5, correctors: Mapping[str, Any] | None = None,
                 val_fraction: float = 0.15, n_jobs: int | None = None, random_state: int = 0,
                 physics: bool = True, prior: Mapping[str, Any] | None = None, telemetry: str = "model",
                 power_cap: bool = True, shrink: Mapping[str, Any] | None = None):
        self.features = features
        self.feature_set = feature_set
        self.specialists = specialists
        self.per_target = per_target
        self.members = members
        self.log_target = log_target
        self.probe_estimators = probe_estimators
        self.oof_folds = oof_folds
        self.correctors = correctors
        self.val_fraction = val_fraction
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.physics = physics
        self.prior = prior
        self.telemetry = telemetry
        self.power_cap = power_cap
        self.shrink = shrink

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        tags.target_tags.multi_output = True
        tags.target_tags.single_output = False
        tags.non_deterministic = False
        return tags

    # ------------------------------------------------------------------ fitting
    def fit(self, X: pd.DataFrame, y, X_val: pd.DataFrame | None = None, y_val=None,
            progress: Callable[[str], None] | None = None) -> CarbCascade:
        """Fit the cascade on raw frames. ``y``: DataFrame of target columns (NaN where unmeasured);
        ``X_val``/``y_val``: validation rows for blend weights, log-space choice and corrector gating
        (an internal stratified ``val_fraction`` split of (X, y) when not given). ``progress``: called
        with ``"<i>/<n>: <target>"`` as each stage starts (the command prints it)."""
        t_start = time.perf_counter()
        if not isinstance(X, pd.DataFrame):
            raise DatasetError(f"X must be a pandas DataFrame with the feature columns (got {type(X).__name__})")
        features = list(self.features if self.features is not None else FULL_FEATURES)
        if not features:
            raise ConfigError("features: the feature list is empty")
        from carb.design.identity import input_kind
        from carb.model.encoding import features_for

        self.input_kind_ = input_kind(X)   # what predict takes: knobs, zoo model names, or either ("mixed")
        from carb.design.zoo_features import reparam_flags

        # zoo rows of the folded inference graph (timm's files timed with --reparam): names predicted on it too
        self.zoo_reparam_ = bool(reparam_flags(X).any())
        features = features_for(X, features)   # zoo rows present: the layer table's features, never ResNet knobs
        X, yf, X_val, yv = training_frames(X, y, X_val, y_val, features, self.feature_set, self.val_fraction,
                                           self.random_state)
        targets, self.dropped_targets_ = measured_targets(yf, yv)
        self._select_features(X, X_val, features)
        self._fit_telemetry(X)
        from carb.model.domain import fit_domain

        self.domain_ = fit_domain(X)
        self.device_name_, self.device_id_, self.device_fingerprint_ = device_identity(X)
        with limited(len(X)):  # threads for this many rows; BLAS at 1 (spinning BLAS threads: 2x slower)
            self._fit_stages(targets, X, yf, X_val, yv, progress)
        self.targets_ = targets
        self.power_cap_W_ = self._power_cap(X, targets)
        self.test_mae_: dict[str, float] = {}
        self.fit_seconds_["total"] = time.perf_counter() - t_start
        return self

    def _select_features(self, X: pd.DataFrame, X_val: pd.DataFrame, features: list[str]) -> None:
        """Set ``feature_names_`` (all-NaN columns dropped into ``dropped_features_``), ``feature_set_``
        and ``input_columns_`` (raw columns, plus those the physics priors read)."""
        self.feature_names_, self.dropped_features_ = usable_features(X, features, self.feature_set)
        self.feature_set_ = str(self.feature_set)
        from carb.design.identity import naming_columns
        from carb.design.zoo_features import ZOO_KIND_FEATURES

        # a network's name where the kind needs one; the per-kind columns come from its layer table
        self.input_columns_ = [*naming_columns(self.input_kind_),
                               *(c for c in raw_inputs(self.feature_names_) if c not in ZOO_KIND_FEATURES)]
        if self.physics:
            from carb.model.physics import LAYER_INPUTS, PRIOR_INPUTS

            missing = [c for c in PRIOR_INPUTS if c not in X.columns or c not in X_val.columns]
            if missing:
                raise DatasetError(f"prior.enabled=true needs column(s) {missing}; the data lacks them "
                                   f"(or set prior=off)")
            self.input_columns_ += [c for c in PRIOR_INPUTS if c not in self.input_columns_]
            self.input_columns_ += [c for c in LAYER_INPUTS if c in X.columns and c not in self.input_columns_]

    def _fit_telemetry(self, X: pd.DataFrame) -> None:
        """Set what screening fills runtime features with: ``telemetry_medians_`` (per batch tier) and
        ``telemetry_imputer_`` (fitted on the training rows with ``telemetry="model"``, else None)."""
        self.telemetry_medians_ = telemetry_medians(X) if "batch_size" in X.columns else {}
        self.telemetry_imputer_ = None
        if self.telemetry not in ("model", "medians"):
            raise ConfigError(f"model.telemetry: {self.telemetry!r} is not allowed; allowed: ['model', 'medians']")
        runtime = [c for c in self.feature_names_ if c in RUNTIME_FEATURES]
        if self.telemetry == "model" and runtime:
            from carb.model.telemetry import TelemetryImputer

            self.telemetry_imputer_ = TelemetryImputer(columns=tuple(runtime), random_state=self.random_state).fit(X)

    def _power_cap(self, X: pd.DataFrame, targets: list[str]) -> float | None:
        """The board's power limit (W) that bounds latency from below, or None when not applied."""
        if self.power_cap and {"energy_J", "latency_ms"} <= set(targets):
            from carb.model.physics import power_cap_W

            return power_cap_W(X)
        return None

    def _fit_stages(self, targets: list[str], X: pd.DataFrame, y: pd.DataFrame, X_val: pd.DataFrame,
                    y_val: pd.DataFrame, progress: Callable[[str], None] | None) -> None:
        """Fit the stages in cascade order, each seeing the upstream predictions (out-of-fold on the
        training rows); sets ``stages_``, ``oof_predictions_``, ``fit_seconds_`` and the per-target reports."""
        D, Dv = encode(X, self.feature_names_), encode(X_val, self.feature_names_)
        self.encoded_names_ = list(D.columns)
        ccfg = corrector_config(self.correctors)
        has_util = any(c in self.feature_names_ for c in UTIL_COLUMNS)
        latency = y["latency_ms"].to_numpy(float) if "latency_ms" in y.columns else None
        self.stages_: dict[str, Stage] = {}
        self.log_target_, self.blend_weights_, self.probe_val_mae_ = {}, {}, {}
        self.corrector_report_, self.val_mae_, self.fit_seconds_ = {}, {}, {}
        self.shrink_report_: dict[str, dict[str, Any]] = {}
        self.priors_: dict[str, dict[str, Any]] = {}
        oof = pd.DataFrame(index=D.index)
        upstream: list[str] = []
        with shared_architectures(X, X_val):   # the priors read these rows' architectures again and again
            for i, t in enumerate(targets):
                if progress is not None:
                    progress(f"{i + 1}/{len(targets)}: {t}")
                t0 = time.perf_counter()
                cols = self.encoded_names_ + [pred_name(u) for u in upstream]
                stage, oof_t, val_t = self._fit_stage(t, cols, D, Dv, X, X_val, y[t].to_numpy(float),
                                                      y_val[t].to_numpy(float), ccfg, has_util, latency=latency)
                self.stages_[t] = stage
                D[pred_name(t)] = oof_t
                Dv[pred_name(t)] = val_t
                oof[pred_name(t)] = oof_t
                upstream.append(t)
                self.fit_seconds_[t] = time.perf_counter() - t0
        self.oof_predictions_ = oof

    def _fit_stage(self, t: str, cols: list[str], D: pd.DataFrame, Dv: pd.DataFrame, X: pd.DataFrame,
                   Xv: pd.DataFrame, y: np.ndarray, yv: np.ndarray, ccfg: dict[str, Any],
                   has_util: bool, latency: np.ndarray | None = None) -> tuple[Stage, np.ndarray, np.ndarray]:
        """One stage: its physics prior (the energy prior also reads the rows' measured ``latency``, ms,
        shape (n,), for its static-power term), the blended ensemble on the log-ratio, correctors.
        Returns the stage and its floored predictions on the training (out-of-fold) and validation rows."""
        m, mv = np.isfinite(y), np.isfinite(yv)
        est = stage_estimator(t, self.specialists, self.per_target, self.members, self.log_target,
                              self.probe_estimators, self.n_jobs, self.random_state)
        prior, z, zv = None, y, yv
        if self.physics:
            prior, z, zv = fit_prior(t, self.prior, X, Xv, y, yv, m, latency)
            est = est.set_params(log_target=False)
        model = clone(est).fit(D.loc[m, cols], z[m], X_val=Dv.loc[mv, cols], y_val=zv[mv])
        stage = Stage(target=t, columns=cols, model=model, log_target=bool(model.log_target_) or prior is not None,
                      prior=prior)
        self._record_stage(t, stage, model)
        base_oof = to_units(prior, out_of_fold(est, model, D, cols, z, m, self.oof_folds, self.random_state), X)
        base_val = to_units(prior, model.predict(Dv[cols]), Xv)

        # regime correctors, greedily, each kept only if it lowers validation MAE
        report, cur_oof, cur_val = fit_correctors(stage, ccfg, (D, X, y, m, base_oof), (Dv, Xv, yv, mv, base_val),
                                                  has_util=has_util, random_state=self.random_state)
        self.corrector_report_[t] = report
        if prior is not None:   # the correction shrunk toward the prior away from the training rows (carb.model.shrink)
            cur_oof, cur_val = self._fit_shrink(stage, est, model, D, Dv, X, Xv, z, m, cur_oof, cur_val)
        pos = y[m][y[m] > 0]
        stage.floor = float(0.5 * pos.min()) if len(pos) else 0.0
        cur_oof, cur_val = np.maximum(cur_oof, stage.row_floor(X)), np.maximum(cur_val, stage.row_floor(Xv))
        self.val_mae_[t] = mae(yv[mv], cur_val[mv])
        return stage, cur_oof, cur_val

    def _fit_shrink(self, stage: Stage, est: BlendedRegressor, model: BlendedRegressor, D: pd.DataFrame,
                    Dv: pd.DataFrame, X: pd.DataFrame, Xv: pd.DataFrame, z: np.ndarray, m: np.ndarray,
                    cur_oof: np.ndarray, cur_val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Fit ``stage.shrink`` (:func:`carb.model.shrink.fit_shrink`; report in ``shrink_report_``) and return
        the training and validation predictions (n,) with it applied (unchanged without one)."""
        from carb.model.shrink import distance_columns, fit_shrink

        space = distance_columns(X, self.feature_names_, self.input_kind_ == "zoo")
        stage.shrink, rep = fit_shrink(self.shrink, est, model, D, stage.columns, space, X, z, m, self.random_state)
        self.shrink_report_ = {**getattr(self, "shrink_report_", {}), stage.target: rep}
        if stage.shrink is None:
            return cur_oof, cur_val
        return (stage.shrink.apply(cur_oof, stage.prior.predict(X), X),
                stage.shrink.apply(cur_val, stage.prior.predict(Xv), Xv))

    def _record_stage(self, t: str, stage: Stage, model: BlendedRegressor) -> None:
        """Per-target reports of a fitted stage: fitting space, blend weights, probe MAE, the prior's
        coefficients and, in ``domain_``, the precisions only the prior's device probe can speak for."""
        self.log_target_[t] = stage.log_target  # True with a prior: the stage works in log(y)
        self.blend_weights_[t] = model.weights_by_member()
        self.probe_val_mae_[t] = dict(model.probe_val_mae_)
        prior = stage.prior
        if prior is not None:
            self.priors_[t] = prior.to_dict()
            probe = getattr(prior, "probe_", None)
            if probe is not None and getattr(self, "domain_", None) is not None:   # what screening can say of an unmeasured precision
                self.domain_.setdefault("probed", {})[t] = [q for q in probe.precisions_ if q not in prior.precisions_]

    # ------------------------------------------------------------------ serving
    def predict(self, X: pd.DataFrame, targets: Sequence[str] | None = None,
                priors: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
        """Predictions for raw rows: a DataFrame (index of ``X``) with ``pred_<target>`` for each
        fitted target in cascade order (``pred_peak_memory_MB`` MB, ``pred_energy_J`` J,
        ``pred_latency_ms`` ms). ``targets``: only the stages up to the last of these in cascade order
        (a stage reads only earlier stages' predictions, so theirs are the same numbers). ``priors``: a
        dict that receives each predicted stage's physics prior for the rows ((n,), target units; what
        :meth:`prior_frame` gives), computed once for the prediction and the caller."""
        check_is_fitted(self, "stages_")
        X = prepare(with_graph(X, getattr(self, "zoo_reparam_", False)), self.feature_names_, self.feature_set,
                    "prediction")
        idx = X.index
        Xr = X.reset_index(drop=True)
        last = max((self.targets_.index(t) for t in targets or () if t in self.targets_), default=len(self.targets_) - 1)
        D = Design(encode(Xr, self.feature_names_), extra=last + 1)   # grown by each stage's prediction
        out = {}
        with shared_architectures(Xr):   # the stages' priors read the same rows' architectures
            for t in self.targets_[: last + 1]:
                stage = self.stages_[t]
                prior = stage.prior.predict(Xr) if stage.prior is not None else None
                if prior is not None and priors is not None:
                    priors[t] = prior
                p = stage.predict(D, Xr, prior=prior)
                D.add(pred_name(t), p)
                out[pred_name(t)] = p
        cap = getattr(self, "power_cap_W_", None)   # absent on models pickled before it existed
        if cap and "pred_energy_J" in out and "pred_latency_ms" in out:
            out["pred_latency_ms"] = np.maximum(out["pred_latency_ms"], 1000.0 * np.asarray(out["pred_energy_J"]) / cap)
        return pd.DataFrame(out, index=idx)

    def batch_nonmonotone_targets(self) -> list[str]:
        """Targets whose physics prior may fall as the batch grows, which screening therefore does not
        project onto non-decreasing sequences (:func:`carb.model.monotone.monotone_in_batch`): those
        with the CPU native-path term (:func:`carb.design.shapes.native_terms`), because with one torch
        thread PyTorch moves 1 x 1 convolutions from a GEMM per image to oneDNN at batch 16 and measured
        latency falls there (bottleneck-152 at 32 px: 272 ms at batch 15, 68 ms at batch 16)."""
        return [t for t, s in getattr(self, "stages_", {}).items()
                if s.prior is not None and getattr(s.prior, "native_", None)]

    def prior_frame(self, X: pd.DataFrame) -> pd.DataFrame:
        """Physics priors of the stages that have one, for raw rows ``X``: a DataFrame (index of ``X``)
        with one column per such target, in target units (MB, J, ms). Empty without physics."""
        check_is_fitted(self, "stages_")
        P = prepare(with_graph(X, getattr(self, "zoo_reparam_", False)), self.feature_names_, self.feature_set,
                    "prediction")
        Pr = P.reset_index(drop=True)
        cols = {t: s.prior.predict(Pr) for t, s in self.stages_.items() if s.prior is not None}
        return pd.DataFrame(cols, index=P.index)

    def score(self, X: pd.DataFrame, y, sample_weight=None) -> float:
        """Mean R^2 over the fitted targets that ``y`` measures (rows with NaN skipped)."""
        from sklearn.metrics import r2_score

        yf = targets_frame(y)
        pred = self.predict(X)
        scores = []
        for t in self.targets_:
            if t in yf.columns:
                yt = yf[t].to_numpy(float)
                ok = np.isfinite(yt)
                if ok.sum() >= 2:
                    scores.append(r2_score(yt[ok], pred[pred_name(t)].to_numpy()[ok]))
        return float(np.mean(scores)) if scores else float("nan")

    def record_test_mae(self, X: pd.DataFrame, y) -> dict[str, float]:
        """Compute the test-set MAE per fitted target (target units), store it in ``test_mae_`` (used
        by screening for borderline flags) and return it. Predicted as screening predicts
        (:func:`carb.model.intervals.screening_predict`: imputed telemetry, monotone in batch size)."""
        from carb.model.intervals import screening_predict

        check_is_fitted(self, "stages_")
        yf = targets_frame(y)
        pred = screening_predict(self, X)
        res = {}
        for t in self.targets_:
            if t in yf.columns:
                yt = yf[t].to_numpy(float)
                ok = np.isfinite(yt)
                res[t] = mae(yt[ok], pred[pred_name(t)].to_numpy()[ok])
        self.test_mae_ = res
        return res

    def stage_columns(self) -> dict[str, list[str]]:
        """Design columns per stage (encoded features, then upstream ``pred_*`` columns)."""
        check_is_fitted(self, "stages_")
        return {t: list(s.columns) for t, s in self.stages_.items()}

    def importances(self, top: int = 10, kind: str = "split") -> dict[str, pd.Series]:
        """Top-``top`` LightGBM importances per target (``split`` counts by default)."""
        check_is_fitted(self, "stages_")
        return {t: s.model.importances(kind).head(top) for t, s in self.stages_.items()
                if "lgbm" in s.model.members_}

    def summary(self) -> dict[str, Any]:
        """What the fitted cascade is, as plain data (for logging)."""
        check_is_fitted(self, "stages_")
        return {"targets": list(self.targets_), "dropped_targets": dict(self.dropped_targets_),
                "feature_set": self.feature_set_, "features": list(self.feature_names_),
                "dropped_features": dict(self.dropped_features_), "device_name": self.device_name_, "device_id": self.device_id_,
                "log_target": dict(self.log_target_), "blend_weights": dict(self.blend_weights_),
                "priors": dict(getattr(self, "priors_", {})),
                "probe_val_mae": dict(self.probe_val_mae_), "correctors": self.corrector_report_,
                "shrink": dict(getattr(self, "shrink_report_", {})),
                "val_mae": dict(self.val_mae_), "test_mae": dict(self.test_mae_),
                "fit_seconds": dict(self.fit_seconds_), "stage_columns": self.stage_columns()}

