"""Optuna tuning of the cascade's specialists and blend weights, as library functions: the search-space
sampler, the shared (file-locked) storage, per-stage design matrices, specialist fits that report to a
pruner, and the reading of a finished study back as the cascade's ``per_target`` parameters.

Optuna and the boosting libraries are imported inside the functions; the ``carb-tune`` command
(:mod:`carb.commands.tune`) drives these and logs trials to MLflow.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.errors import ConfigError, ModelError
from carb.files import locked

METRICS = ("mae", "rmse", "mape")


def metric_fn(name: str):
    """Validation metric (lower is better) on arrays in the target's unit."""
    if name == "mae":
        return lambda y, p: float(np.mean(np.abs(y - p)))
    if name == "rmse":
        return lambda y, p: float(np.sqrt(np.mean((y - p) ** 2)))
    if name == "mape":
        return lambda y, p: float(np.mean(np.abs(y - p) / np.abs(y)) * 100.0)
    raise ConfigError(f"tune.metric: {name!r} is not allowed; allowed: {list(METRICS)}")


def suggest(trial, space: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Sample one value per entry of a search space (``{name: {type, low, high, log, step, choices}}``)."""
    out: dict[str, Any] = {}
    for name, spec in space.items():
        kind = spec.get("type")
        if kind == "int":
            out[name] = trial.suggest_int(name, int(spec["low"]), int(spec["high"]),
                                          step=int(spec.get("step", 1)), log=bool(spec.get("log", False)))
        elif kind == "float":
            kw = {"log": bool(spec.get("log", False))}
            if spec.get("step") is not None:
                kw = {"step": float(spec["step"])}
            out[name] = trial.suggest_float(name, float(spec["low"]), float(spec["high"]), **kw)
        elif kind == "categorical":
            out[name] = trial.suggest_categorical(name, list(spec["choices"]))
        else:
            raise ConfigError(f"tune.search_space.{name}.type: {kind!r} is not allowed; allowed: "
                              f"['int', 'float', 'categorical']")
    return out


def storage_for(url: str):
    """An Optuna RDB storage; SQLite gets a long lock timeout so concurrent workers wait, not fail."""
    import optuna

    if url.startswith("sqlite:///"):
        db = Path(url[len("sqlite:///"):]).resolve()
        with locked(db):  # workers on a fresh file: one migrates the schema, the others wait
            return optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 120}})
    return _server_storage(optuna, url)


def _server_storage(optuna, url: str, attempts: int = 5):
    """An RDB storage on a database server; workers that start together on a fresh database race on
    creating the schema (PostgreSQL: duplicate key in pg_type): the losers retry and find it made."""
    import time

    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url)
        except Exception as e:  # sqlalchemy IntegrityError / ProgrammingError from CREATE TABLE races
            if attempt == attempts - 1 or "duplicate" not in str(e).lower() and "already exists" not in str(e):
                raise
            time.sleep(0.5 * (attempt + 1))


def make_study(name: str, storage, seed: int, n_startup: int, pruner_cfg: Mapping[str, Any]):
    """Create or load the Optuna study ``name`` (TPE sampler seeded, median pruner); retries briefly
    when two workers create it at once."""
    import optuna

    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=int(pruner_cfg.get("n_startup_trials", 3)),
                                         n_warmup_steps=int(pruner_cfg.get("n_warmup_steps", 30)))
    for attempt in range(5):  # two workers creating the same study at once: one wins, the other loads
        try:
            return optuna.create_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner,
                                       direction="minimize", load_if_exists=True)
        except Exception:
            if attempt == 4:
                raise
            time.sleep(0.5 + attempt)
    raise RuntimeError("unreachable")


class StageData:
    """Design matrices of one cascade stage: train/validation rows in the stage's fitting space.

    ``ytr`` / ``yva``: what the specialists fit (the target, or ``log(y / prior)`` on a physics stage:
    unitless). ``prior_va``: the physics prior on the validation rows (target's unit), None without one.
    Trials are scored in the target's unit (:meth:`units`, :attr:`yva_units`): the metric ``carb-train``
    reports, so the base preset and the tuned blend are compared on one scale."""

    def __init__(self, target: str, Dtr: pd.DataFrame, ytr: np.ndarray, Dva: pd.DataFrame, yva: np.ndarray,
                 log_target: bool, prior_va: np.ndarray | None = None) -> None:
        self.target, self.Dtr, self.Dva, self.log_target = target, Dtr, Dva, log_target
        mtr, mva = np.isfinite(ytr), np.isfinite(yva)
        self.Dtr, self.ytr = Dtr[mtr], ytr[mtr]
        self.Dva, self.yva = Dva[mva], yva[mva]
        #: (n_val,) mask of the validation rows kept (finite ``yva``), to pick the same rows elsewhere
        self.val_rows = mva
        self.prior_va = None if prior_va is None else np.asarray(prior_va, dtype=float)[mva]

    def fwd(self, y: np.ndarray) -> np.ndarray:
        return np.log(y) if self.log_target else y

    def inv(self, z: np.ndarray) -> np.ndarray:
        return np.exp(z) if self.log_target else z

    def units(self, p: np.ndarray) -> np.ndarray:
        """(n_val,) validation predictions ``p`` of what the specialists fit, in the target's unit:
        ``prior * exp(p)`` on a physics stage (as the stage predicts), else ``p``."""
        return p if self.prior_va is None else self.prior_va * np.exp(p)

    @property
    def yva_units(self) -> np.ndarray:
        """(n_val,) the validation rows' measured target, in its unit."""
        return self.units(self.yva)

    def score(self, metric: Callable[[np.ndarray, np.ndarray], float], p: np.ndarray) -> float:
        """``metric`` of the validation predictions ``p`` (fitting space, as :meth:`units` takes them), in
        the target's unit."""
        return metric(self.yva_units, self.units(p))


def stage_data(base, train: pd.DataFrame, val: pd.DataFrame) -> dict[str, StageData]:
    """Per-target design matrices from a fitted base cascade: encoded features plus upstream
    predictions (out-of-fold on train rows, the fitted stages' on validation rows)."""
    from carb.model.encoding import add_interactions, encode, pred_name

    Xtr = add_interactions(train.reset_index(drop=True))
    Xva = add_interactions(val.reset_index(drop=True))
    Dtr, Dva = encode(Xtr, base.feature_names_), encode(Xva, base.feature_names_)
    val_pred = base.predict(Xva)
    out: dict[str, StageData] = {}
    for t in base.targets_:  # upstream pred_* columns are added before the stage that needs them
        stage = base.stages_[t]
        cols = list(stage.columns)
        ytr, yva, log_space = Xtr[t].to_numpy(float), Xva[t].to_numpy(float), bool(base.log_target_[t])
        prior_va = None
        if getattr(stage, "prior", None) is not None:  # physics stage: specialists fit log(y / prior)
            prior_va = stage.prior.predict(Xva)
            with np.errstate(divide="ignore", invalid="ignore"):
                ytr, yva = np.log(ytr / stage.prior.predict(Xtr)), np.log(yva / prior_va)
            log_space = False
        out[t] = StageData(t, Dtr[cols].copy(), ytr, Dva[cols].copy(), yva, log_space, prior_va)
        Dtr[pred_name(t)] = base.oof_predictions_[pred_name(t)].to_numpy()
        Dva[pred_name(t)] = val_pred[pred_name(t)].to_numpy()
    return out


def fit_member(member: str, params: dict[str, Any], sd: StageData, n_jobs: int, seed: int,
                trial=None, report_every: int = 10, metric=None):
    """Fit one specialist on the stage's train rows; with ``trial``, report validation scores during
    boosting and raise ``optuna.TrialPruned`` when the pruner says so."""
    from carb.model.ensemble import make_member

    model = make_member(member, params, n_jobs, seed)
    y = sd.fwd(sd.ytr)
    if trial is None or member == "et":
        return model.fit(sd.Dtr, y)
    import optuna

    if member == "lgbm":
        def cb(env):
            it = env.iteration + 1
            if it % report_every == 0:
                p = sd.inv(env.model.predict(sd.Dva.to_numpy(float), num_iteration=it))
                trial.report(sd.score(metric, p), it)
                if trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at boosting round {it}")
        return model.fit(sd.Dtr, y, callbacks=[cb])
    import xgboost as xgb

    class Report(xgb.callback.TrainingCallback):
        def after_iteration(self, booster, epoch, evals_log):
            it = epoch + 1
            if it % report_every == 0:
                p = sd.inv(booster.inplace_predict(sd.Dva.to_numpy(float), iteration_range=(0, it)))
                trial.report(sd.score(metric, p), it)
                if trial.should_prune():
                    raise optuna.TrialPruned(f"pruned at boosting round {it}")
            return False

    model.set_params(callbacks=[Report()])
    model.fit(sd.Dtr, y)
    model.set_params(callbacks=None)
    return model


def member_predict(model, sd: StageData) -> np.ndarray:
    """A fitted specialist's validation predictions of the stage, in target units."""
    return sd.inv(model.predict(sd.Dva))


def group_name(study: str, target: str) -> str:
    """The name one target's sub-studies share: ``<study>.<target>`` (the prefix of their names, and their
    ``group`` user attribute, which optuna-dashboard shows on each study's page; its study list filters on
    the name)."""
    return f"{study}.{target}"


def group_study(st: Any, study: str, target: str) -> None:
    """Mark a sub-study as one of ``<study>.<target>``'s (user attributes ``group``, ``study``, ``target``),
    once: a worker that loads it finds them set."""
    attrs = {"group": group_name(study, target), "study": study, "target": target}
    have = st.user_attrs
    for k, v in attrs.items():
        if have.get(k) != v:
            st.set_user_attr(k, v)


def sub_name(study: str, target: str, member: str) -> str:
    """Name of a sub-study: ``<study>.<target>.<member>`` (member ``blend`` for the weights)."""
    return f"{study}.{target}.{member}"


class quiet_warnings:
    """Context manager that silences warnings (Optuna's experimental-feature notes) in its block."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *a):
        self._w.__exit__(*a)


def tuned_per_target(study: str, storage_url: str, targets=None, members=("xgb", "lgbm", "et")) -> tuple[dict, dict]:
    """Best parameters of a finished study as the cascade's ``per_target`` dict
    (``{target: {"xgb": {...}, "lgbm": {...}, "et": {...}, "weights": [...]}}``) and provenance
    (``{target: {"<member>_trial": n, "blend_trial": n}}``). Raises :class:`ModelError` when the study
    does not exist or has no completed trial."""
    import optuna

    from carb.data.schema import TARGETS

    storage = storage_for(storage_url)
    names = {s.study_name for s in optuna.get_all_study_summaries(storage)}
    per_target: dict[str, Any] = {}
    prov: dict[str, Any] = {}
    for t in (targets or TARGETS):
        if sub_name(study, t, "blend") not in names:
            continue
        entry: dict[str, Any] = {}
        p: dict[str, Any] = {}
        for m in members:
            s = optuna.load_study(study_name=sub_name(study, t, m), storage=storage)
            try:
                b = s.best_trial
            except ValueError:
                raise ModelError(f"tune.study: {sub_name(study, t, m)!r} has no completed trial") from None
            entry[m] = dict(b.params)
            p[f"{m}_trial"] = b.number
        s = optuna.load_study(study_name=sub_name(study, t, "blend"), storage=storage)
        try:
            b = s.best_trial
            entry["weights"] = list(b.user_attrs["weights"])
            p["blend_trial"] = b.number
        except (ValueError, KeyError):
            pass
        per_target[t], prov[t] = entry, p
    if not per_target:
        known = sorted({n.split(".")[0] for n in names})
        if study in known:
            mine = sorted(n for n in names if n.split(".")[0] == study)
            raise ModelError(f"tune.study: study {study!r} in {storage_url} has no finished blend "
                             f"({study}.<target>.blend; it has {mine}): its tuning stopped early; run carb-tune "
                             f"tune.study={study} again (finished trials are kept)")
        raise ModelError(f"tune.study: no tuned study {study!r} in {storage_url} (known: {known or 'none'}); "
                         f"run carb-tune tune.study={study} first")
    return per_target, prov


@dataclass
class TuneSettings:
    """How one worker tunes a stage: trials per specialist sub-study and for the blend, a per-study
    timeout (s, None = none), the TPE seed and its random start-up trials, the median pruner's settings
    (``n_startup_trials``, ``n_warmup_steps``), how often boosting reports to it (rounds), threads per
    specialist, the specialists' seed, and the objective ``metric(y_true, y_pred)`` (target units)."""

    n_trials: int
    blend_trials: int
    timeout_s: float | None
    seed: int
    n_startup_trials: int
    pruner: Mapping[str, Any]
    report_every: int
    n_jobs: int
    fit_seed: int
    metric: Callable[[np.ndarray, np.ndarray], float]


def tune_target(sd: StageData, study: str, members: Sequence[str], specialists: Mapping[str, Any],
                space: Mapping[str, Any], storage, s: TuneSettings, callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Tune one cascade stage: a sub-study per specialist (``<study>.<target>.<member>``, the preset's
    ``specialists`` params overridden by the sampled ones, pruned on intermediate boosting scores), then
    the blend weights of the best specialists (``<study>.<target>.blend``, equal weights enqueued first).

    Returns ``{sub-study name: {"value", "trial", "params" | "weights" (+ "member_trials")}}``."""
    t = sd.target
    results: dict[str, Any] = {}
    best_models = {}
    for m in members:
        name = sub_name(study, t, m)
        st = make_study(name, storage, s.seed, s.n_startup_trials, s.pruner)
        group_study(st, study, t)
        base_params = dict(specialists.get(m) or {})

        def objective(trial, m=m, base_params=base_params):
            params = {**base_params, **suggest(trial, space.get(m) or {})}
            model = fit_member(m, params, sd, s.n_jobs, s.fit_seed, trial, s.report_every, s.metric)
            return sd.score(s.metric, member_predict(model, sd))

        st.optimize(objective, n_trials=s.n_trials, timeout=s.timeout_s, callbacks=list(callbacks), catch=())
        best = st.best_trial
        results[name] = {"value": best.value, "params": best.params, "trial": best.number}
        best_models[m] = fit_member(m, {**base_params, **best.params}, sd, s.n_jobs, s.fit_seed)
    P = np.column_stack([member_predict(best_models[m], sd) for m in members])
    bname = sub_name(study, t, "blend")
    bstudy = make_study(bname, storage, s.seed, s.n_startup_trials, s.pruner)
    group_study(bstudy, study, t)

    def blend_objective(trial):
        w = np.array([trial.suggest_float(f"w_{m}", 0.0, 1.0) for m in members])
        if w.sum() <= 0:
            w = np.ones(len(members))
        w = w / w.sum()
        trial.set_user_attr("weights", w.tolist())
        z = np.column_stack([sd.fwd(P[:, i]) for i in range(len(members))]) @ w
        return sd.score(s.metric, sd.inv(z))

    bstudy.enqueue_trial({f"w_{m}": 1.0 for m in members}, skip_if_exists=True)
    bstudy.optimize(blend_objective, n_trials=s.blend_trials, timeout=s.timeout_s, callbacks=list(callbacks))
    bb = bstudy.best_trial
    results[bname] = {"value": bb.value, "weights": bb.user_attrs.get("weights"), "trial": bb.number,
                      "member_trials": {m: results[sub_name(study, t, m)]["trial"] for m in members}}
    return results

