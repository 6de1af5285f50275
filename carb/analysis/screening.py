"""Design-space screening with fitted cascades (paper Section 7), as pure functions on DataFrames.

Enumerate -> score (fast static features, telemetry fixed to the model's training medians per batch
tier, cascade prediction) -> screen (budget per target, rank by an objective, Pareto front) ->
prioritize (:mod:`carb.analysis.decisions`: ``reject`` when a target's interval lies above its budget line,
``accept`` when every interval lies within, else ``borderline`` with the probability of feasibility from
the calibrated predictive distribution; models without calibrated intervals fall back to one test-set
MAE) -> a short "profile next" list of borderline candidates. Every candidate is checked against the
model's training domain (``in_domain``, ``outside``); one outside it, of a precision never measured, or
with an unbounded interval is never ``accept`` (``unverified`` instead).
Two-stage: rank the whole grid with a source device's model, keep the top K, re-score them with the
target device's model (``rescore="top_k"``, the paper's: only those K rows are scored by the target, the
others keep the source's objective and rank, ``reject``, and NaN target predictions; ``rescore="all"``:
the target scores every row too, e.g. for the Spearman of both models over the whole grid).

No torch import here: screening runs on the closed-form features of :mod:`carb.design.features`.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.axes import add_per_image, apply_axes, mark_front
from carb.analysis.decisions import add_probabilities, decide, interval_context, profile_next
from carb.analysis.evaluate import budget_classification
from carb.analysis.hj_score import HJ_SCORE, add_hj_score, check_direction, hj_missing
from carb.analysis.hj_score import named as hj_named
from carb.analysis.scale import ChunkPool, chunk_plan, parallel_chunks, pareto_mask
from carb.compute import limited, parallel_threads
from carb.data.schema import TARGETS
from carb.design.candidates import arch_codes, arch_knobs
from carb.design.arch import RECORD_COLUMNS
from carb.design.features import STATIC_FEATURES, grid_features
from carb.errors import ConfigError, DatasetError
from carb.model.domain import check_domain, unseen_mask
from carb.model.encoding import interaction_features, pred_name
from carb.model.ensemble import member_threads
from carb.model.monotone import batch_knots, monotone_in_batch
from carb.model.intervals import interval, screening_features, with_telemetry  # the one imputation

#: Pareto axes in order of preference: energy and memory (the paper), else what the model has.
PARETO_PREFERENCE = ("energy_J", "peak_memory_MB", "latency_ms")


def as_cascade(model: Any) -> Any:
    """The fitted cascade itself: ``model.cascade`` for what :func:`carb.load_model` returns (a
    :class:`carb.analysis.predictor.Predictor`, whose class says ``WRAPS_CASCADE``), else ``model``."""
    return model.cascade if getattr(type(model), "WRAPS_CASCADE", False) else model


#: Whose speed a screen's latency and energy intervals describe (``screen.interval_scope``).
INTERVAL_SCOPES = ("later_session", "this_session")


def scoped_model(model: Any, scope: str) -> tuple[Any, str | None]:
    """``(model, note)``: ``model`` as screening should score it for ``scope`` (:data:`INTERVAL_SCOPES`). A model
    whose intervals carry a session drift (:func:`carb.model.intervals.with_session`, ``carb-train`` on CPU rows)
    keeps it for ``later_session`` (a measurement on a later day) and comes back as a copy without it for
    ``this_session`` (the training rows' own window); the note says which, with the drift's figures (None for a
    model without a session drift). A bad scope raises :class:`carb.errors.ConfigError` naming the values."""
    import copy

    from carb.model.intervals import session_term, without_session

    if scope not in INTERVAL_SCOPES:
        raise ConfigError(f"interval_scope: must be one of {', '.join(INTERVAL_SCOPES)}, got {scope!r}")
    cal = getattr(as_cascade(model), "intervals_", None)
    term = session_term(cal)
    if term is None:
        return model, None
    if scope == "this_session":
        inner = copy.copy(as_cascade(model))
        inner.intervals_ = without_session(cal)
        return inner, ("latency/energy intervals hold for the model's rows' own measuring session "
                       "(interval_scope=this_session); a later session of the device moves its speed")
    kind = str(term.get("kind", "device")).upper()
    return model, (f"latency/energy intervals hold for a later session of this {kind}: widened "
                   f"by the measured session drift (log sd {float(term['sd_log']):.3f} over {term.get('windows', '?')} "
                   f"windows of {term.get('devices', '?')} devices, carb/data/session-drift.csv; "
                   "interval_scope=this_session for the rows' own session)")


def model_targets(model: Any) -> list[str]:
    """Targets a fitted cascade predicts, in cascade order."""
    targets = getattr(model, "targets_", None)
    if targets is None:
        raise ConfigError("model: not a fitted CARB cascade (no targets_)")
    return [t for t in TARGETS if t in targets]


#: Cost of featurizing a candidate against scoring it in the first pass (a million on two cores: 5 s of one
#: core against 36 s of prediction): the featurizing chunks' part of :func:`screen`'s progress.
FEATURIZE_WEIGHT = 0.15


def needs_features(frame: pd.DataFrame) -> bool:
    """Whether ``frame`` is a knob frame that :func:`screen` featurizes itself (it lacks static features)."""
    return not set(STATIC_FEATURES) <= set(map(str, frame.columns))


def split_knobs(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(the record columns (knobs, num_classes, config_id), the other columns)`` of a candidate frame."""
    knobs = [c for c in frame.columns if c in RECORD_COLUMNS]
    return frame[knobs], frame.drop(columns=knobs)


def with_features(frame: pd.DataFrame, features: pd.DataFrame | None = None) -> pd.DataFrame:
    """A knob frame (n rows, maybe with other columns, e.g. a grid file's ``top1``) featurized: its knob
    columns through :func:`carb.design.features.grid_features` (or ``features``, n rows already computed
    for them), then the other columns; index 0..n-1."""
    knobs, other = split_knobs(frame)
    feats = grid_features(knobs) if features is None else features
    return pd.concat([feats, other.reset_index(drop=True)], axis=1) if len(other.columns) else feats


#: Values of ``screen.outside``: keep all candidates (flagged), only in-domain ones, only outside ones.
OUTSIDE_MODES = ("flag", "drop", "only")
#: Values of ``screen.rescore`` (two-stage): the target scores the source's top K only (the paper), or all rows.
RESCORE_MODES = ("top_k", "all")


def score(model: Any, features: pd.DataFrame, with_medians: bool = True,
          coverage: float | None = None, monotone: bool = True) -> pd.DataFrame:
    """Predictions of ``model`` for each row of ``features`` (static features + knobs; runtime features
    are filled as screening fills them when ``with_medians``: :func:`carb.model.intervals.screening_features`). Returns ``features`` with the runtime
    columns and ``pred_<target>`` columns added, plus ``lo_<target>`` / ``hi_<target>`` (the target's
    unit) when the model carries a calibration (``intervals_``), at ``coverage`` (default: calibrated).
    ``monotone``: predictions non-decreasing in batch size per architecture
    (:func:`carb.model.monotone.monotone_in_batch`)."""
    model = as_cascade(model)
    if getattr(type(model), "OWN_SCORING", False):   # ZooLatencyModel behind the interface (zoo_predictor)
        return model.score_rows(features, coverage)

    def prepare(F: pd.DataFrame) -> pd.DataFrame:
        return screening_features(model, F) if with_medians else interaction_features(F)

    X = prepare(features)
    pred = monotone_in_batch(model, X, prepare) if monotone else None
    if pred is None:
        pred = model.predict(X)
    out = X.copy()
    for c in pred.columns:
        out[c] = pred[c].to_numpy()
    cal = getattr(model, "intervals_", None)
    if cal:
        iv = interval(cal, pred, coverage, **interval_context(model, X))
        for c in iv.columns:
            out[c] = iv[c].to_numpy()
    return out


def source_objective(model: Any, features: pd.DataFrame, obj: str, monotone: bool = True) -> np.ndarray:
    """(n,) objective values (:func:`objective_values`) of ``model``'s screening predictions for the rows
    of ``features``: the numbers :func:`score` gives, without what stage 1 of a two-stage screen does not
    keep (intervals, the rows' own imputed telemetry: batch-monotone predictions read the architectures at
    the model's knots, whose telemetry is imputed there, and the physics priors read no telemetry)."""
    model = as_cascade(model)
    if getattr(type(model), "OWN_SCORING", False):   # ZooLatencyModel behind the interface (zoo_predictor)
        return objective_values(model.score_rows(features), obj)

    def prepare(F: pd.DataFrame) -> pd.DataFrame:
        return screening_features(model, F)

    base = obj[: -len(PER_IMAGE)] if obj.endswith(PER_IMAGE) else obj   # a cascade predicts the stages it needs
    pred = monotone_in_batch(model, with_telemetry(features, getattr(model, "telemetry_medians_", {}) or {}),
                             prepare, targets=[base]) if monotone else None
    if pred is None:
        pred = model.predict(prepare(features))
    return objective_values(pred.assign(batch_size=features["batch_size"].to_numpy()), obj)


def domain_filter(model: Any, features: pd.DataFrame, outside: str = "flag"
                  ) -> tuple[pd.DataFrame, dict[str, int], list[str]]:
    """Check ``features`` (n rows) against ``model.domain_`` and keep rows per ``outside`` (one of
    :data:`OUTSIDE_MODES`). Returns the kept rows with ``in_domain`` / ``outside`` columns, the counts
    ``{"n_in_domain", "n_outside"}`` over all n rows, and notes (one line for a model without a domain)."""
    if outside not in OUTSIDE_MODES:
        raise ConfigError(f"screen.outside: {outside!r} is not allowed; allowed: {list(OUTSIDE_MODES)}")
    domain = getattr(model, "domain_", None)
    own = getattr(type(as_cascade(model)), "OWN_SCORING", False)   # ZooLatencyModel: its own domain check
    notes = [] if domain or own else [("the model stores no training domain (fitted before domains): every "
                                       "candidate is treated as in domain")]
    inside, reasons = as_cascade(model).domain_rows(features) if own else check_domain(domain, features)
    out = features.assign(in_domain=inside, outside=reasons)
    counts = {"n_in_domain": int(inside.sum()), "n_outside": int((~inside).sum())}
    if outside == "drop":
        out = out[inside]
    elif outside == "only":
        out = out[~inside]
    return out.reset_index(drop=True), counts, notes


def none_left_note(features: pd.DataFrame, outside: str, counts: Mapping[str, int]) -> str:
    """One line saying why ``screen.outside`` (``drop`` or ``only``) left none of the n rows of ``features``
    (knobs or features): how many were on the other side of the training domain, and what keeps them."""
    n = len(features)
    if not n:
        return "the grid has no candidate: the shortlist is empty"
    side = "outside" if outside == "drop" else "inside"
    return (f"screen.outside={outside} left no candidate: all {n} are {side} the model's training domain "
            f"({counts.get('n_outside', 0)} outside); the shortlist is empty (screen.outside=flag keeps "
            f"them all, those outside marked unverified)")


def check_budget(budget: Mapping[str, Any], targets: Sequence[str]) -> dict[str, float]:
    """Keep the budget entries that are set (not None); raise :class:`ConfigError` for a target the
    model does not predict or a non-positive limit."""
    clean: dict[str, float] = {}
    for k, v in (budget or {}).items():
        if v is None:
            continue
        if k not in TARGETS:
            raise ConfigError(f"screen.budget.{k}: unknown target; allowed: {list(TARGETS)}")
        if k not in targets:
            raise ConfigError(f"screen.budget.{k}: the model does not predict {k} (it predicts "
                              f"{list(targets)}); drop that budget or use another model")
        f = float(v)
        if not math.isfinite(f) or f <= 0:
            raise ConfigError(f"screen.budget.{k}: must be a positive number, got {v!r}")
        clean[k] = f
    return clean


def prioritize(scored: pd.DataFrame, budget: Mapping[str, float], mae: Mapping[str, float]) -> pd.DataFrame:
    """``feasible``, ``margin_<target>``, ``decision`` and ``decision_reason`` per candidate
    (:func:`carb.analysis.decisions.decide`): ``reject`` when some budgeted target's interval
    ``[lo_<target>, hi_<target>]`` lies above its limit, ``unverified`` (never ``accept``) when the candidate
    is outside the training domain, of a precision never measured or has an unbounded interval, ``accept``
    when every interval lies within, else ``borderline``. Without ``lo_``/``hi_`` columns (a model without
    calibrated intervals) the prediction +- one test-set MAE (``mae``) plays the interval."""
    return decide(scored, budget, mae)


def pareto_axes(targets: Sequence[str]) -> list[str]:
    """The (up to) two axes of the front: energy and memory when predicted, else what is there."""
    return [t for t in PARETO_PREFERENCE if t in targets][:2]


def default_objective(targets: Sequence[str]) -> str:
    """Predicted energy, or latency where the model has no energy stage, else memory."""
    for t in ("energy_J", "latency_ms", "peak_memory_MB"):
        if t in targets:
            return t
    raise ConfigError("model: predicts no target")


#: Suffix of a throughput-normalised objective: ``<target>_per_image`` = the per-batch prediction / batch size.
PER_IMAGE = "_per_image"


def allowed_objectives(targets: Sequence[str]) -> list[str]:
    """Objectives a model with ``targets`` can rank by: each target (per batch) and, for energy and
    latency, the same per image (``energy_J_per_image``: J per image; ``latency_ms_per_image``)."""
    return [*targets, *(f"{t}{PER_IMAGE}" for t in ("energy_J", "latency_ms") if t in targets)]


def objective_values(scored: pd.DataFrame, objective: str) -> np.ndarray:
    """(n,) values to rank ``scored`` (n rows with ``pred_<target>`` and ``batch_size``) by, lower is
    better: the prediction itself, or divided by the batch size for a ``..._per_image`` objective;
    ``hj_score`` (:mod:`carb.analysis.hj_score`, better when larger) negated."""
    if objective == HJ_SCORE:
        return -scored[HJ_SCORE].to_numpy(dtype=float)
    if objective.endswith(PER_IMAGE):
        base = objective[: -len(PER_IMAGE)]
        return (scored[pred_name(base)].to_numpy(dtype=float)
                / pd.to_numeric(scored["batch_size"], errors="coerce").to_numpy(dtype=float))
    return scored[pred_name(objective)].to_numpy(dtype=float)


def profile_values(scored: pd.DataFrame, objective: str) -> np.ndarray:
    """(n,) positive values, lower is better, for the "profile next" ratio best / own
    (:func:`carb.analysis.decisions.profile_next`): :func:`objective_values`, or 1 / ``hj_score`` (so the
    ratio is own / best score)."""
    if objective == HJ_SCORE:
        with np.errstate(divide="ignore"):
            return 1.0 / scored[HJ_SCORE].to_numpy(dtype=float)
    return objective_values(scored, objective)


def check_hj(targets: Sequence[str], features: pd.DataFrame, objective: str | None, source_model: Any,
             pareto: Sequence[str] | None, require: Mapping[str, Any] | None) -> str:
    """Refuse (one-line :class:`ConfigError` naming the field) a setting that names ``hj_score`` where it
    cannot be computed (:func:`carb.analysis.hj_score.hj_missing`: no predicted energy, no ``top1``), a
    minimized ``hj_score`` axis, and ``hj_score`` as a two-stage objective. Returns why the score cannot be
    computed (``""`` when it can: it is then added to every screening's columns)."""
    missing = hj_missing(targets, features)
    check_direction(pareto)
    for field in hj_named(pareto, objective, dict(require or {})):
        if missing:
            extra = (f"; allowed: {allowed_objectives(targets)}" if field == "screen.objective" else "")
            raise ConfigError(f"{field}: {HJ_SCORE} {missing}{extra}")
    if objective == HJ_SCORE and source_model is not None:
        raise ConfigError(f"screen.objective: {HJ_SCORE} is relative to the screened set (its top-1 and "
                          f"energy), not a two-stage objective; allowed with screen.source: "
                          f"{allowed_objectives(targets)}")
    return missing


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    ra = pd.Series(a).rank().to_numpy()
    rb = pd.Series(b).rank().to_numpy()
    if np.std(ra) == 0 or np.std(rb) == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


@dataclass
class ScreenResult:
    """Everything a screening produced. ``scored`` holds the whole grid (one row per candidate)."""

    scored: pd.DataFrame
    shortlist: pd.DataFrame
    objective: str
    axes: list[str]
    budget: dict[str, float]
    stages: dict[str, Any] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profile: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The frame columns of the Pareto axes (``axes`` are their labels, ``-`` = maximized).
    axis_columns: list[str] = field(default_factory=list)
    #: The requirements applied: ``{column: (limit, maximized)}`` (:mod:`carb.analysis.axes`).
    require: dict[str, tuple[float, bool]] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        """Decision counts, grid size, front, shortlist and (whole-grid) domain counts."""
        d = self.scored["decision"].value_counts().to_dict() if "decision" in self.scored else {}
        c = {f"n_{k}": int(d.get(k, 0)) for k in ("accept", "borderline", "unverified", "reject")}
        c.update({k: int(self.stages[k]) for k in ("n_in_domain", "n_outside") if k in self.stages})
        c["n_candidates"] = int(len(self.scored))
        c["n_pareto"] = int(self.scored.get("pareto", pd.Series(dtype=bool)).sum())
        c["n_shortlist"] = int(len(self.shortlist))
        c["n_profile_next"] = int(len(self.profile))
        return c


def screen(features: pd.DataFrame, target_model: Any, budget: Mapping[str, Any] | None = None,
           objective: str | None = None, source_model: Any = None, top_k: int = 100,
           shortlist_size: int = 20, outside: str = "flag", coverage: float | None = None,
           profile_size: int = 10, pareto: Sequence[str] | None = None,
           require: Mapping[str, Any] | None = None, maximize: Sequence[str] = ("top1", "top5", "hj_score"),
           chunk_rows: int | None = None, progress: Callable[[str, float], None] | None = None,
           workers: int | None = None, rescore: str = "top_k", hj_weight: float = 0.5) -> ScreenResult:
    """Screen a grid: a knob frame (:func:`carb.design.space.space_frame`, a grid file's
    :func:`carb.design.gridfile.read_grid_frame`; other columns, e.g. ``top1``, are kept) or one featurized
    already (:func:`carb.design.features.grid_features`). A knob frame is featurized here, in the chunk
    workers when the first pass has several (:meth:`_Run.featurize`): the static features of a million
    candidates cost 5 s of one core, which then runs beside the other.

    Single-stage with only ``target_model``; two-stage with ``source_model``: the source ranks the whole
    grid by ``objective``, the best ``top_k`` are re-scored by the target model, and only those can be
    accepted. ``rescore`` (``screen.rescore``, one of :data:`RESCORE_MODES`): ``top_k`` (the paper's) scores
    only those ``top_k`` rows with the target model (the other rows keep the source's objective
    ``source_pred_<objective>`` and ``stage1_rank``, are ``reject`` and have NaN target predictions,
    intervals, probabilities and imputed telemetry); ``all`` scores every row with the target too (the
    numbers of the kept rows are the same either way). ``stages["spearman_source_target"]`` is the Spearman
    correlation of the source's and the target's objective over the rows the target scored
    (``stages["stage2_rescored"]`` of them: the top K, or the whole grid under ``all``).
    Returns a :class:`ScreenResult`; ``scored`` has ``rank`` (by objective among feasible
    candidates, 1 = best), ``pareto`` (on the front among feasible candidates), ``decision``,
    ``in_domain`` / ``outside`` (the target model's training domain; ``outside`` keeps all candidates
    (``flag``), the in-domain ones (``drop``) or the others (``only``)) and, for a calibrated model,
    ``lo_<target>`` / ``hi_<target>`` at ``coverage``, ``p_within_<target>`` / ``p_feasible`` (probability
    of meeting the budget, :mod:`carb.analysis.decisions`) and ``profile_rank`` (1 = measure first; the
    ``profile_size`` best borderline candidates by probability x objective, also ``ScreenResult.profile``).
    ``pareto``: the front's axes with directions (``["energy_J_per_image", "-top1"]``; default: the
    objective against memory), ``require``: limits on known columns, ``maximize``: columns better when
    larger (:mod:`carb.analysis.axes`); the front uses point values and ``pareto_ties`` reports ties
    within the intervals. Where energy is predicted and the candidates have ``top1``, ``scored`` has
    ``hj_score`` (CARB's energy-efficiency score, :mod:`carb.analysis.hj_score`; ``hj_weight``: its
    accuracy weight), usable as a Pareto axis (``-hj_score``), a requirement and ``objective="hj_score"``
    (ranked largest first; single-stage only).

    ``chunk_rows`` (``screen.chunk_rows``; None = one chunk): score, intervals and decisions run on
    chunks of about that many rows, each holding whole architectures (:func:`carb.analysis.scale.chunk_plan`),
    so a million candidates need the memory of one chunk's intermediates; the results are the same as
    one chunk's, row for row (two-stage ``top_k``: the source's pass runs in chunks, then the target's on
    the top K rows). ``progress(label, share)`` is called as each chunk starts (when there are
    several; ``share``: the chunk's fraction of the work, the shares sum to 1).
    In this process the models of a pass predict side by side on the free cores (:mod:`carb.compute`:
    ``compute.n_jobs`` / ``CARB_N_JOBS`` cap them; :func:`carb.model.ensemble.member_threads`, same numbers),
    with BLAS and OpenMP threads as :func:`carb.compute.limited` gives them (as ``carb-screen`` runs).
    ``workers``: processes for the chunks (None or 1: this process; ``carb-screen`` passes
    :func:`carb.compute.estimator_threads` of the grid's rows, so 1 on a busy machine or with
    ``compute.n_jobs=1``). Spawned workers re-import the caller's ``__main__``: a script that passes
    ``workers > 1`` needs the ``if __name__ == "__main__":`` guard.
    """
    if rescore not in RESCORE_MODES:
        raise ConfigError(f"screen.rescore: {rescore!r} is not allowed; allowed: {list(RESCORE_MODES)}")
    timings: dict[str, float] = {"predict_target_s": 0.0, "screen_pareto_s": 0.0}
    target_model = as_cascade(target_model)
    source_model = None if source_model is None else as_cascade(source_model)
    targets = model_targets(target_model)
    obj = objective or default_objective(targets)
    hj_off = check_hj(targets, features, obj, source_model, pareto, require)
    if obj != HJ_SCORE and obj not in allowed_objectives(targets):
        raise ConfigError(f"screen.objective: {obj!r} is not predicted by the target model; allowed: "
                          f"{allowed_objectives(targets)}")
    if source_model is not None and obj not in allowed_objectives(model_targets(source_model)):
        raise ConfigError(f"screen.source: the source model does not predict the objective {obj!r}")
    clean_budget = check_budget(budget or {}, targets)
    stages: dict[str, Any] = {"n_grid": int(len(features))}
    cal = getattr(target_model, "intervals_", None) or {}
    if cal:
        stages["interval_coverage"] = float(coverage if coverage is not None else cal.get("coverage", 0.9))
    run = _Run(obj, clean_budget, coverage, chunk_rows, progress, timings, workers,
               _early_pool(_first_pass_models(target_model, source_model, rescore), len(features), chunk_rows, workers))
    with run:   # the early workers end with the scoring passes, also on an error
        if needs_features(features):
            features = run.featurize(features)
        every = features
        features, dom_counts, notes = domain_filter(target_model, features, outside)
        stages.update(dom_counts)
        none_left = not len(features)
        if none_left:   # the scoring runs on one row for the columns, then no row is kept
            notes.append(none_left_note(every, outside, dom_counts))
            features = domain_filter(target_model, every.iloc[:1], "flag")[0]
        features["never_measured"] = unseen_mask(getattr(target_model, "domain_", None), features, "precision")
        if clean_budget and not getattr(target_model, "intervals_", None) and not getattr(
                type(target_model), "OWN_SCORING", False):
            notes.append("the model has no calibrated intervals (fitted before intervals): borderline = within "
                         "one test-set MAE of a budget line")
        if source_model is None:
            scored = run.score_all(features, target_model, None)[0]
            keep = np.ones(len(scored), dtype=bool)
        else:
            k = int(min(max(int(top_k), 0), len(features)))
            if rescore == "all":
                scored, src_pred = run.score_all(features, target_model, source_model)
                keep = top_rows(src_pred, k)
                rescored = np.ones(len(scored), dtype=bool)
            else:
                scored, src_pred, keep = run.two_stage(features, target_model, source_model, k)
                rescored = keep
            stages.update({"stage1_kept": int(keep.sum()), "stage2_rescored": int(rescored.sum()),
                           "spearman_source_target": spearman(src_pred[rescored],
                                                              objective_values(scored, obj)[rescored])})
    if none_left:
        scored, keep = scored.iloc[:0].copy(), keep[:0]
        if "stage1_kept" in stages:
            stages.update({"stage1_kept": 0, "stage2_rescored": 0, "spearman_source_target": float("nan")})
    scored["stage1_kept"] = keep
    t = time.perf_counter()
    if not keep.all():
        scored.loc[~keep, "decision"] = "reject"
        scored.loc[~keep, "decision_reason"] = f"not in the source model's top {int(keep.sum())}"
        scored.loc[~keep, "feasible"] = False
    if not hj_off:   # the score over the whole screened set, whatever the budget decided
        add_hj_score(scored, hj_weight)
    axes = pareto_axes(targets)   # default: the objective (per image where it is) against the other axis
    if obj.endswith(PER_IMAGE):
        axes = [obj if a == obj[: -len(PER_IMAGE)] else a for a in axes]
    if obj == HJ_SCORE:   # energy is inside the score: against the other predicted axis
        axes = [f"-{HJ_SCORE}", *[a for a in axes if a != "energy_J"][:1]]
    scored, axis_list, required, req_counts = apply_axes(scored, targets, pareto or axes, require, maximize,
                                                          notes)
    stages.update(req_counts)
    scored = add_per_image(scored, [obj], targets)   # a per-image objective that is no Pareto axis still ranks
    feas = scored["feasible"].to_numpy()
    key = objective_values(scored, obj)   # lower is better
    scored["rank"] = np.nan
    if feas.any():
        scored.loc[feas, "rank"] = pd.Series(key[feas]).rank(method="first").to_numpy()
    scored = mark_front(scored, axis_list, feas, pareto_mask)
    axes = [a.label for a in axis_list]
    timings["screen_pareto_s"] += time.perf_counter() - t
    stages["stage2_feasible"] = int(feas.sum())
    shortlist = _shortlist(scored, feas, key, shortlist_size)
    nxt = profile_next(scored, profile_values(scored, obj), profile_size)
    scored["profile_rank"] = np.nan
    scored.loc[nxt.index, "profile_rank"] = nxt["profile_rank"].to_numpy(dtype=float)
    return ScreenResult(scored=scored, shortlist=shortlist, objective=obj, axes=axes,
                        budget=clean_budget, stages=stages, timings_s=timings, notes=notes,
                        profile=nxt.reset_index(drop=True), axis_columns=[a.column for a in axis_list],
                        require=required)


def _first_pass_models(target_model: Any, source_model: Any, rescore: str) -> tuple[Any, Any]:
    """``(target, source)`` as the first scoring pass of :func:`screen` takes them (None: not used)."""
    if source_model is None:
        return target_model, None
    return (None, source_model) if rescore == "top_k" else (target_model, source_model)


def _early_pool(models: tuple[Any, Any], n: int, chunk_rows: int | None, workers: int | None) -> ChunkPool | None:
    """The worker processes of the first pass, started now (their start-up runs beside the domain check and
    the chunk plan) when that pass will have several chunks and ``workers`` > 1; else None."""
    if not chunk_rows or n <= int(chunk_rows) or int(workers or 1) <= 1:
        return None
    return ChunkPool(models, min(int(workers), -(-n // int(chunk_rows))))


def top_rows(values: np.ndarray, k: int) -> np.ndarray:
    """(n,) mask of the ``k`` lowest ``values`` (n,) (ties and NaN: by position, NaN last)."""
    keep = np.zeros(len(values), dtype=bool)
    keep[np.argsort(values, kind="stable")[:k]] = True
    return keep


@dataclass
class _Run:
    """The settings one screening's scoring passes share (see :func:`screen`), and the chunking of a pass."""

    obj: str
    budget: dict[str, float]
    coverage: float | None
    chunk_rows: int | None
    progress: Callable[[str, float], None] | None
    timings: dict[str, float]
    workers: int | None
    pool: ChunkPool | None = None   # the first pass's workers, started early (:func:`_early_pool`); closed after use
    scale: float = 1.0              # the scoring passes' part of the progress (less the featurizing's)

    def __enter__(self) -> "_Run":
        return self

    def __exit__(self, *exc: Any) -> None:
        """End the early workers if no pass took them (e.g. on an error, or when one chunk was left)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.close()

    def featurize(self, frame: pd.DataFrame) -> pd.DataFrame:
        """``frame`` (n rows: knob columns, maybe others) with the static features (n rows, in order): its
        knob columns through :func:`carb.design.features.grid_features` (``config_id`` built there), the other
        columns after them. With the early workers, in chunks of whole architectures there (``progress``: a
        :data:`FEATURIZE_WEIGHT` part); a knob fault raised there is raised again here, by featurizing the
        whole frame in this process, so that it names the frame's own row."""
        t = time.perf_counter()
        knobs = split_knobs(frame)[0]
        feats = None
        if self.pool is not None:
            chunks = chunk_plan(knobs, self.chunk_rows)
            if len(chunks) > 1:
                weight = FEATURIZE_WEIGHT / (1.0 + FEATURIZE_WEIGHT)
                report = None if self.progress is None else (
                    lambda what, share: self.progress(f"featurizing: {what}", share * weight))
                try:
                    parts = self.pool.map(_featurize_part, [knobs.iloc[r] for r in chunks], (), report)
                except (ConfigError, DatasetError):
                    parts = None          # raised again below, naming the frame's row
                if parts is not None:
                    feats = pd.concat(parts, ignore_index=True).iloc[_inverse(chunks)].reset_index(drop=True)
                    self.scale = 1.0 - weight
        feats = with_features(frame, feats)
        self.timings["featurize_s"] = self.timings.get("featurize_s", 0.0) + time.perf_counter() - t
        return feats

    def _chunks(self, fn: Callable, models: tuple[Any, Any], features: pd.DataFrame, args: tuple,
                share: float = 1.0, label: str = "", always: bool = False) -> tuple[list[Any], list[np.ndarray]]:
        """``fn(models, rows, *args)`` for each chunk of ``features`` (:func:`chunk_plan`), in ``workers``
        processes where there are several chunks; returns ``(results in row order of the chunks, the
        chunks' row positions)``. ``progress`` gets the chunks' shares times ``share`` (also for a single
        chunk when ``always``); timings (``r[-1]`` of each result) are summed into ``timings``."""
        knots = max([len(batch_knots(m)) for m in models if m is not None])
        chunks = chunk_plan(features, self.chunk_rows, knots)
        n_workers = 1 if len(chunks) == 1 else min(len(chunks), max(1, int(self.workers or 1)))
        report = self.progress if self.progress is not None and (len(chunks) > 1 or always) else None
        n = max(1, len(features))
        if n_workers > 1:
            def scaled(what: str, s: float) -> None:
                report(label + what, s * share * self.scale)
            parts = [features.iloc[r] for r in chunks]
            pool, self.pool = self.pool, None
            if pool is not None and all(a is b for a, b in zip(pool.models, models)):
                with pool:
                    results = pool.map(fn, parts, args, scaled if report is not None else None)
            else:
                if pool is not None:
                    pool.close()
                results = parallel_chunks(fn, models, parts, args, n_workers, scaled if report is not None else None)
        else:
            results = []
            with limited(), member_threads(parallel_threads()):   # as carb-screen: BLAS/OpenMP by carb.compute;
                # each model on one thread, several at once (the free cores)
                for i, rows in enumerate(chunks):
                    if report is not None:
                        report(f"{label}chunk {i + 1}/{len(chunks)} ({len(rows)} candidates)",
                               len(rows) / n * share * self.scale)
                    results.append(fn(models, features if len(chunks) == 1 else features.iloc[rows], *args))
        for r in results:
            for k, v in r[-1].items():
                self.timings[k] = self.timings.get(k, 0.0) + v
        return results, chunks

    def score_all(self, features: pd.DataFrame, target_model: Any, source_model: Any
                  ) -> tuple[pd.DataFrame, np.ndarray | None]:
        """Score, probabilities and decisions of every row of ``features`` (n rows, index 0..n-1) by the
        target model, in the rows' order; with a source model also its objective values (n,) and the
        ``source_pred_<objective>`` / ``stage1_rank`` columns."""
        results, chunks = self._chunks(_score_part, (target_model, source_model), features,
                                       (self.obj, self.budget, self.coverage))
        lead = list(results[0][2])
        src_pred = np.concatenate([r[1] for r in results]) if source_model is not None else None
        scored = _concat_parts([r[0] for r in results])
        del results
        inverse = _inverse(chunks)
        if inverse is not None:   # back to the rows' order
            scored = scored.iloc[inverse].reset_index(drop=True)
            src_pred = src_pred[inverse] if src_pred is not None else None
        return _with_source(scored, lead, src_pred, self.obj), src_pred

    def two_stage(self, features: pd.DataFrame, target_model: Any, source_model: Any, k: int
                  ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
        """The paper's two-stage screen: the source's objective over every row (in chunks), then the
        target's score, probabilities and decisions on the ``k`` best rows only. Returns ``(scored (n rows:
        the other rows with NaN target columns), the source's objective (n,), the kept rows (n,) mask)``.
        Each kept row is scored with the first row of its architecture beside it (dropped after), as in
        the one-pass scoring, so its batch-monotone knots are the same numbers."""
        n = len(features)
        text = [c for c in ("config_id", "outside") if c in features.columns]   # no input of a model: not sent
        results, chunks = self._chunks(_source_part, (None, source_model), features.drop(columns=text), (self.obj,),
                                       share=n / max(1, n + k))
        src_pred = np.concatenate([r[0] for r in results])
        inverse = _inverse(chunks)
        src_pred = src_pred[inverse] if inverse is not None else src_pred
        keep = top_rows(src_pred, k)
        rows = _with_first_rows(features, np.flatnonzero(keep))
        several = len(chunks) > 1
        results, chunks = self._chunks(_score_part, (target_model, None), features.iloc[rows].reset_index(drop=True),
                                       (self.obj, self.budget, self.coverage), share=k / max(1, n + k),
                                       label=f"re-scoring the source's top {k}: ", always=several)
        lead = list(results[0][2])
        part = _concat_parts([r[0] for r in results])
        inverse = _inverse(chunks)
        part = part.iloc[inverse].reset_index(drop=True) if inverse is not None else part
        mine = keep[rows]
        scored = _spread(features, part[mine], rows[mine])
        return _with_source(scored, lead, src_pred, self.obj), src_pred, keep


def _inverse(chunks: list[np.ndarray]) -> np.ndarray | None:
    """Positions that put the concatenated chunks back in row order (None for one chunk)."""
    if len(chunks) == 1:
        return None
    pos = np.concatenate(chunks)
    inverse = np.empty_like(pos)
    inverse[pos] = np.arange(len(pos))
    return inverse


def _concat_parts(parts: list[pd.DataFrame]) -> pd.DataFrame:
    return parts[0] if len(parts) == 1 else pd.concat(parts)


def _with_source(scored: pd.DataFrame, lead: list[str], src_pred: np.ndarray | None, obj: str) -> pd.DataFrame:
    """``scored`` with the source's ``source_pred_<obj>`` and ``stage1_rank`` (with a source) and
    ``stage1_kept``, the columns in the order one pass gave them: ``lead``, those, the rest."""
    src_cols: list[str] = []
    if src_pred is not None:
        scored[f"source_{pred_name(obj)}"] = src_pred
        scored["stage1_rank"] = pd.Series(src_pred).rank(method="first").astype(int).to_numpy()
        src_cols = [f"source_{pred_name(obj)}", "stage1_rank"]
    scored["stage1_kept"] = True
    order = [*lead, *src_cols, "stage1_kept"]
    return scored[order + [c for c in scored.columns if c not in order]]


def _with_first_rows(features: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """``rows`` (positions) and the first row of each of their architectures, sorted: scored together,
    each architecture's batch knots are built from the same row as in a pass over the whole grid."""
    keys = arch_knobs(features)
    if not keys or not len(rows):
        return rows
    codes, _ = arch_codes(features, keys)
    first = np.unique(codes, return_index=True)[1]      # codes are 0..m-1
    return np.union1d(rows, first[np.unique(codes[rows])])


def _spread(features: pd.DataFrame, part: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """A frame of ``len(features)`` rows with ``part``'s columns, ``part`` (the scored rows at positions
    ``rows``) in place and the other rows filled: a feature column the scoring left as it was keeps every
    row's value; any other column is NaN (numbers), False (flags) or "" (text) there."""
    n = len(features)
    cols: dict[str, Any] = {}
    for c in part.columns:
        v = part[c]
        if c in features.columns and _unchanged(features[c], v, rows):
            cols[c] = features[c].array      # as it is (text stays text: no million Python strings)
            continue
        if pd.api.types.is_bool_dtype(v.dtype):
            full = np.zeros(n, dtype=bool)
        elif pd.api.types.is_numeric_dtype(v.dtype):
            full = np.full(n, np.nan)
        else:
            full = np.full(n, "", dtype=object)
        full[rows] = v.to_numpy()
        cols[c] = full if full.dtype != object else pd.array(full, dtype=v.dtype)
    return pd.DataFrame(cols)


def _unchanged(column: pd.Series, part: pd.Series, rows: np.ndarray) -> bool:
    """Whether ``part`` (the scored rows' values of a column) is ``column`` at positions ``rows``, as
    ``Series.equals`` says it (same dtype, same values, NaN equal to NaN); numbers compared as arrays."""
    if column.dtype != part.dtype:
        return False
    if isinstance(column.dtype, np.dtype) and column.dtype.kind in "biuf":
        return np.array_equal(column.to_numpy()[rows], part.to_numpy(), equal_nan=column.dtype.kind == "f")
    return column.iloc[rows].reset_index(drop=True).equals(part.reset_index(drop=True))


def _featurize_part(models: tuple[Any, Any], part: pd.DataFrame) -> pd.DataFrame:
    """One chunk of a knob frame featurized (:func:`carb.design.features.grid_features`; ``models`` unused)."""
    return grid_features(part)


def _source_part(models: tuple[Any, Any], part: pd.DataFrame, obj: str) -> tuple[np.ndarray, dict[str, float]]:
    """Stage 1 on one chunk: ``(the source's objective values (len(part),), seconds)``."""
    t = time.perf_counter()
    src = source_objective(models[1], part, obj)
    return src, {"predict_source_s": time.perf_counter() - t}


def _score_part(models: tuple[Any, Any], part: pd.DataFrame, obj: str, budget: dict[str, float],
                coverage: float | None) -> tuple[pd.DataFrame, np.ndarray | None, list[str], dict[str, float]]:
    """One chunk: ``(scored rows with probabilities and decisions, the source's objective values or None,
    the scored columns before the decisions, seconds per step)``."""
    target_model, source_model = models
    tm: dict[str, float] = {}
    t = time.perf_counter()
    sc = score(target_model, part, coverage=coverage)
    tm["predict_target_s"] = time.perf_counter() - t
    src = None
    if source_model is not None:
        src, seconds = _source_part(models, part, obj)
        tm.update(seconds)
    lead = list(sc.columns)
    t = time.perf_counter()
    sc = prioritize(add_probabilities(target_model, sc, budget), budget, getattr(target_model, "test_mae_", {}) or {})
    tm["screen_pareto_s"] = time.perf_counter() - t
    return sc, src, lead, tm


def _shortlist(scored: pd.DataFrame, feas: np.ndarray, key: np.ndarray, size: int) -> pd.DataFrame:
    """The front (by ``key``, (n,) objective values, ascending; NaN last), then the best other feasible rows:
    the first ``size`` rows; sorts only the rows that can make it, not the whole grid."""
    front_mask = scored["pareto"].to_numpy(dtype=bool)
    front_pos = np.flatnonzero(front_mask)   # sorted as DataFrame.sort_values(col) sorts them, on the one column
    front_pos = front_pos[pd.Series(key[front_pos]).sort_values().index.to_numpy()]
    if len(front_pos) >= size:
        return scored.iloc[front_pos[:size]]   # one take of the rows shown, not of the whole front twice
    front = scored.iloc[front_pos]
    rest_idx = np.flatnonzero(feas & ~front_mask)
    need = size - len(front)
    if need > 0 and len(rest_idx) > need:
        v = key[rest_idx]
        cut = np.partition(np.nan_to_num(v, nan=np.inf), need - 1)[need - 1]
        rest_idx = rest_idx[(v <= cut) | np.isnan(v) & (cut == np.inf)]
    rest = scored.iloc[rest_idx[np.argsort(key[rest_idx], kind="stable")]]   # NaN last, as sort_values
    return pd.concat([front, rest]).head(size)


def closest_candidates(scored: pd.DataFrame, budget: Mapping[str, float], n: int = 5) -> pd.DataFrame:
    """When nothing meets the budget: the ``n`` candidates with the smallest worst relative overshoot."""
    if not budget:
        return scored.head(0)
    over = np.zeros(len(scored))
    for t, limit in budget.items():
        over = np.maximum(over, scored[pred_name(t)].to_numpy(dtype=float) / limit - 1.0)
    if len(scored) > 4 * n:   # sort only the rows that can make it, not a million
        cut = np.partition(np.nan_to_num(over, nan=np.inf), n - 1)[n - 1]
        sel = np.flatnonzero(over <= cut)
        scored, over = scored.iloc[sel], over[sel]
    out = scored.assign(worst_overshoot=over)
    return out.sort_values("worst_overshoot", kind="stable").head(n)


def _decision_metrics(prefix: str, m: np.ndarray, p: np.ndarray, limit: float) -> dict[str, Any]:
    """Budget-decision rates and MAEs (target's unit) of predictions ``p`` against measurements ``m``
    (n,), keys ``<prefix>_{accuracy,false_accept_rate,false_reject_rate,n,...,mae,feasible_mae}``."""
    out = {f"{prefix}_{k}": v for k, v in budget_classification(m, p, limit).items()}
    ok = np.isfinite(m)
    out[f"{prefix}_mae"] = float(np.mean(np.abs(m[ok] - p[ok]))) if ok.any() else float("nan")
    feas = ok & (p <= limit)
    out[f"{prefix}_feasible_mae"] = float(np.mean(np.abs(m[feas] - p[feas]))) if feas.any() else float("nan")
    return out


def validate(model: Any, measured: pd.DataFrame, budget: Mapping[str, float]) -> dict[str, Any]:
    """Score measured configs with their REAL features (measured telemetry) and compare each budgeted
    target's decision with the measurement (paper Section 7.3). Returns flat metrics:
    ``validate_<target>_{accuracy,false_accept_rate,false_reject_rate,n}``, ``validate_<target>_mae``
    over all rows and ``validate_<target>_feasible_mae`` over the predicted-feasible ones.

    The same metrics for the path that screens (telemetry predicted from the architecture, :func:`screening_features`) are
    ``validate_screening_<target>_*``, plus ``validate_screening_<target>_interval_coverage`` (share of
    rows with ``lo <= measured <= hi``) when the model has calibrated intervals."""
    model = as_cascade(model)
    targets = model_targets(model)
    screened = score(model, measured)
    scored = score(model, measured, with_medians=False)
    out: dict[str, Any] = {"validate_n_rows": int(len(scored))}
    for t, limit in budget.items():
        if t not in targets or t not in measured or measured[t].notna().sum() == 0:
            continue
        m = measured[t].to_numpy(dtype=float)
        out.update(_decision_metrics(f"validate_{t}", m, scored[pred_name(t)].to_numpy(dtype=float), limit))
        out.update(_decision_metrics(f"validate_screening_{t}", m,
                                     screened[pred_name(t)].to_numpy(dtype=float), limit))
        if f"lo_{t}" in screened:
            ok = np.isfinite(m)
            inside = (screened[f"lo_{t}"].to_numpy(dtype=float) <= m) & (m <= screened[f"hi_{t}"].to_numpy(dtype=float))
            out[f"validate_screening_{t}_interval_coverage"] = float(inside[ok].mean()) if ok.any() else float("nan")
    return out


def featurize(configs: Sequence[Any] | pd.DataFrame) -> pd.DataFrame:
    """Fast static features of the candidates (see :func:`carb.design.features.grid_features`)."""
    return grid_features(configs)
