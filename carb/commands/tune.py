"""``carb-tune``: Optuna tuning of CARB's specialists and blend weights on the validation split.

For each target (cascade order) and each specialist (XGBoost, LightGBM, ExtraTrees) a sub-study
``<study>.<target>.<member>`` minimizes the validation metric (default MAE, in the target's unit) over
the search space of ``conf/tune/*.yaml``; then ``<study>.<target>.blend`` tunes the blend weights of the
three best specialists. Everything that does not depend on a trial is built once, outside the
objectives: the split, a base cascade of the ``model`` preset (its out-of-fold upstream predictions are
the downstream stages' inputs, its log-space choice per target is kept), and the design matrices.

Sampler: TPE, seeded (worker ``i`` uses ``seed + i``). Pruner: median pruner on intermediate
validation scores reported by XGBoost and LightGBM every ``report_every`` boosting rounds. Storage: any
Optuna RDB URL (default ``sqlite:///mlruns/optuna.db``), so several workers share one study and Optuna
hands out trial numbers. Each trial is a nested MLflow run under one parent run per study; the parent
gets the best params and Optuna's optimization-history and parameter-importance figures.

``carb-train model=tuned tune.study=<name>`` fits the cascade with the best parameters
(:func:`tuned_per_target`).

"""
from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from carb.commands.cli import hydra_command, sweep_tags, to_dict
from carb.commands.progress import Progress
from carb.errors import ConfigError
from carb.model.tuning import (
    TuneSettings,
    metric_fn,
    quiet_warnings,
    stage_data,
    storage_for,
    sub_name,
    tune_target,
)


class TrialLogger:
    """One nested MLflow run per trial under the study's parent run (few lines, no Optuna callback)."""

    def __init__(self, cfg: Any, parent_run_id: str | None, enabled: bool) -> None:
        self.cfg, self.parent, self.enabled = cfg, parent_run_id, enabled and parent_run_id is not None

    def __call__(self, study, trial) -> None:
        if not self.enabled:
            return
        from carb import tracking

        with tracking.start_run("tune", f"{study.study_name}/trial-{trial.number}", self.cfg.tracking.uri,
                                tags={"carb.study": self.cfg.tune.study, "carb.sub_study": study.study_name,
                                      "carb.role": "trial", "carb.worker": self.cfg.tune.worker,
                                      "trial_state": trial.state.name},
                                parent_run_id=self.parent, artifact_root=self.cfg.tracking.get("artifact_root")):
            tracking.log_params({**trial.params, "trial_number": trial.number})
            if trial.value is not None:
                tracking.log_metrics({val_metric(study.study_name, self.cfg.tune.metric): trial.value})


#: The params of a study's parent run (``fnmatch`` patterns on dotted keys); the whole config (the search
#: space included) is its ``config.yaml``.
TUNE_PARAMS = ("tune.study", "tune.storage", "tune.worker", "tune.n_trials", "tune.blend_trials", "tune.timeout_s",
               "tune.metric", "tune.members", "tune.targets", "tune.seed", "tune.n_startup_trials", "tune.pruner.*",
               "model.name", "model.members", "model.log_target", "features.name", "data.path", "data.device",
               "split.seed", "split.fractions", "prior.enabled")


def val_metric(sub_study: str, metric: str, suffix: str = "") -> str:
    """The validation metric's name as ``carb-train`` logs it: ``val_<target>_<metric>`` (the target from
    a sub-study name ``<study>.<target>.<member>``), plus ``_<suffix>`` (``xgb``, ``base``, ...)."""
    parts = sub_study.split(".")
    target = parts[-2] if len(parts) >= 3 else parts[-1]
    return f"val_{target}_{metric}" + (f"_{suffix}" if suffix else "")


#: Weight of one blend-weight trial against one specialist trial (a fit), for the ETA.
BLEND_TRIAL_WEIGHT = 0.05


def metric_unit(metric: str, target: str) -> str:
    """Unit of a validation metric on ``target``: ``%`` for MAPE, else the target's (``latency_ms`` -> ms)."""
    return "%" if metric == "mape" else target.rsplit("_", 1)[-1]


class TrialProgress:
    """Optuna callback: one progress line per finished trial (throttled by ``progress.min_interval_s``)
    with its state and value and the sub-study's best value so far, in the metric's unit."""

    def __init__(self, progress: Progress, metric: str) -> None:
        self.progress, self.metric = progress, metric

    def __call__(self, study, trial) -> None:
        sub = study.study_name
        target = sub.split(".")[-2] if sub.count(".") >= 2 else ""
        unit = metric_unit(self.metric, target)
        blend = sub.endswith(".blend")
        try:
            best = f"best {self.metric} {study.best_value:.4g} {unit}"
        except ValueError:  # no completed trial yet
            best = "no completed trial yet"
        value = f" {trial.value:.4g} {unit}" if trial.value is not None else ""
        self.progress.advance(f"{sub} trial {trial.number} {trial.state.name.lower()}{value}; {best}",
                              BLEND_TRIAL_WEIGHT if blend else 1.0)


def tune_plan(n_targets: int, n_members: int, n_trials: int, blend_trials: int) -> float:
    """Planned weight of a worker's trials: specialist trials weigh 1, blend trials
    :data:`BLEND_TRIAL_WEIGHT`."""
    return n_targets * (n_members * n_trials + BLEND_TRIAL_WEIGHT * blend_trials)


def worse_lines(worse: dict[str, tuple[float, float]], metric: str, preset: str) -> list[str]:
    """One warning line per target of :func:`worse_targets`, both values in the metric's unit."""
    out = []
    for t, (base, tuned) in worse.items():
        unit = metric_unit(metric, t)
        out.append(f"carb-tune: warning: {t}: tuning made the model worse: the tuned blend's validation {metric} "
                   f"{tuned:.4g} {unit} is {tuned / base:.2g}x the base preset's {base:.4g} {unit}; carb-train "
                   f"model=tuned would predict {t} worse than model={preset} (run more trials, or keep {preset})")
    return out


def parent_run(cfg: Any, frames: dict[str, Any] | None = None) -> str:
    """The study's parent MLflow run: found by tag, or created by the first worker, which logs the
    split's ``frames`` (``{"train": ..., "val": ...}``) as its dataset inputs."""
    from carb import tracking

    tags = {"carb.study": cfg.tune.study, "carb.role": "parent"}
    tracking.configure(cfg.tracking.uri, cfg.tracking.get("artifact_root"))
    if int(cfg.tune.worker) > 0:
        time.sleep(2.0 + int(cfg.tune.worker))  # let worker 0 create it
    found = tracking.find_runs("tune", tags)
    if found:
        return found[0]
    with tracking.start_run("tune", f"tune/{cfg.tune.study}", cfg.tracking.uri, tags=tags, sweep=sweep_tags(),
                            artifact_root=cfg.tracking.get("artifact_root")) as run_id:
        tracking.log_config(to_dict(cfg), tracking.select_params(to_dict(cfg), TUNE_PARAMS))
        if frames:
            from carb.data.io import resolve_path

            src = resolve_path(str(cfg.data.get("path") or "reference"))
            for part, frame in frames.items():
                tracking.log_dataset(frame, name=f"{src.stem}.{part}", source=str(src), context=SPLIT_CONTEXTS[part])
    return run_id


#: MLflow input contexts of the split parts tuning uses (as carb-train logs them).
SPLIT_CONTEXTS = {"train": "training", "val": "validation"}


def worse_targets(results: dict[str, Any], study: str, targets: list[str]) -> dict[str, tuple[float, float]]:
    """Targets whose tuned blend scores worse on validation than the base preset:
    ``{target: (base value, tuned value)}``."""
    out = {}
    for t in targets:
        base, tuned = results[f"base.{t}"]["value"], results[sub_name(study, t, "blend")]["value"]
        if np.isfinite(base) and np.isfinite(tuned) and tuned > base:
            out[t] = (float(base), float(tuned))
    return out


def base_value(base: Any, val: Any, sd: Any, metric: Any) -> float:
    """The base preset's validation metric on target ``sd.target``, in the target's unit: its cascade's
    predictions of the validation rows the trials score (``sd.val_rows``), against their measurements,
    as the trials are scored (:meth:`carb.model.tuning.StageData.score`) and as ``carb-train`` reports it."""
    pred = base.predict(val)[f"pred_{sd.target}"].to_numpy(dtype=float)[sd.val_rows]
    return metric(sd.yva_units, pred)


def run_tune(cfg: Any) -> dict[str, Any]:
    """Run this worker's share of the study. Returns best values/params per sub-study and timing."""
    from carb.commands.checks import check_config

    check_config('tune', cfg)
    import optuna

    tc = cfg.tune
    metric = metric_fn(str(tc.metric))
    members = _members(tc)
    space = to_dict(tc.search_space)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = storage_for(str(tc.storage))
    worker = int(tc.worker)
    base, model_cfg, train, val, device, base_fit_s = _fit_base(cfg)
    wanted = list(tc.targets) if tc.get("targets") else list(base.targets_)
    unknown = [t for t in wanted if t not in base.targets_]
    if unknown:
        raise ConfigError(f"tune.targets: {unknown} not measured in the data; allowed: {list(base.targets_)}")
    data = stage_data(base, train, val)
    parent = parent_run(cfg, {"train": train, "val": val}) if tc.get("log_trials", True) else None
    logger = TrialLogger(cfg, parent, bool(tc.get("log_trials", True)))
    settings = _settings(cfg, model_cfg, metric, len(train))
    results: dict[str, Any] = {}
    prog = Progress.from_cfg("carb-tune", tune_plan(len(wanted), len(members), int(tc.n_trials),
                                                    int(tc.blend_trials)), cfg)
    callbacks = [logger, TrialProgress(prog, str(tc.metric))]
    specialists = model_cfg.get("specialists") or {}
    n_done, t0 = 0, time.perf_counter()
    for t in wanted:
        sd = data[t]
        res = tune_target(sd, tc.study, members, specialists, space, storage, settings, callbacks=callbacks)
        results.update(res)
        n_done += len(members) * int(tc.n_trials) + int(tc.blend_trials)
        results[f"base.{t}"] = {"value": base_value(base, val, sd, metric)}
    elapsed = time.perf_counter() - t0
    prog.finish(f"{n_done} trials")
    per_min = n_done / elapsed * 60 if elapsed > 0 else float("nan")
    summary = {"study": tc.study, "worker": worker, "device": device, "trials_run": n_done,
               "elapsed_s": elapsed, "trials_per_minute": per_min, "results": results, "base_fit_s": base_fit_s,
               "worse": worse_targets(results, str(tc.study), wanted)}
    if parent:
        _log_parent(cfg, parent, storage, wanted, members, summary)
    _print_summary(cfg, summary, wanted)
    print("\n".join(dashboard_lines(str(tc.storage), str(tc.study), wanted, members)))
    if parent:
        from carb.commands.cli import say_run_page

        say_run_page(parent, cfg.tracking.uri)
    return summary


def dashboard_lines(storage: str, study: str, targets: list[str], members: list[str]) -> list[str]:
    """Where the trials are and how to look at them: the Optuna storage, each target's sub-studies as one
    group (``<study>.<target>``: :func:`carb.model.tuning.group_name`) and the ``optuna-dashboard`` command
    (a separate package: ``pip install optuna-dashboard``), each line within 120 columns."""
    from carb.commands.cli import wrap_command
    from carb.model.tuning import group_name

    import textwrap

    subs = "|".join([*members, "blend"])
    text = (f"{group_name(study, '<target>')}.{{{subs}}}, one group per target ({', '.join(targets)}): the "
            f"dashboard's filter and each study's user attribute group")
    return [*wrap_command("  Optuna storage  ", storage),
            *textwrap.wrap(text, 120, initial_indent="  sub-studies     ", subsequent_indent=" " * 18),
            *wrap_command("  dashboard       ", f"optuna-dashboard {storage}", "   (pip install optuna-dashboard)")]


def _members(tc: Any) -> list[str]:
    """``tune.members``, each one of :data:`carb.model.ensemble.MEMBERS` (one-line error otherwise)."""
    from carb.model.ensemble import MEMBERS

    members = list(tc.members)
    bad = [m for m in members if m not in MEMBERS]
    if bad or not members:
        raise ConfigError(f"tune.members: {bad or members} not allowed; allowed: {list(MEMBERS)}")
    return members


def _fit_base(cfg: Any) -> tuple[Any, dict[str, Any], Any, Any, str, float]:
    """The base cascade of the ``model`` preset fitted on the split's training rows:
    ``(cascade, model config, train rows, validation rows, device name, fit seconds)``."""
    from carb.data.io import load_training_frame
    from carb.data.schema import TARGETS
    from carb.data.split import split_dataset
    from carb.model.presets import build_cascade, resolve_auto

    full, device = load_training_frame(str(cfg.data.get("path") or "reference"), cfg.data.get("device"))
    fractions = tuple(float(f) for f in cfg.split.get("fractions", (0.7, 0.15, 0.15)))
    train, val, _cal, _test = split_dataset(full, seed=int(cfg.split.seed), fractions=fractions).frames4(full)
    model_cfg, _ = resolve_auto(to_dict(cfg.model), len(train))
    model_cfg.pop("tuned_from", None)
    base = build_cascade(model_cfg, to_dict(cfg.features), to_dict(cfg.prior))
    targets_all = [t for t in TARGETS if t in full.columns]
    base_prog = Progress.from_cfg("carb-tune", len(targets_all), cfg, throttle=False)
    t_base = time.perf_counter()
    base.fit(train, train[targets_all], val, val[targets_all], progress=base_prog.hook(1.0, "base preset fit, stage "))
    base_prog.finish("base preset fitted")
    return base, model_cfg, train, val, device, time.perf_counter() - t_base


def _settings(cfg: Any, model_cfg: dict[str, Any], metric: Any, n_rows: int) -> TuneSettings:
    """The study's settings: trials, timeout, sampler seed (``tune.seed`` + worker), pruner, threads
    (for ``n_rows`` training rows, carb/compute.py)."""
    from carb.compute import estimator_threads

    tc = cfg.tune
    return TuneSettings(n_trials=int(tc.n_trials), blend_trials=int(tc.blend_trials), timeout_s=tc.get("timeout_s"),
                        seed=int(tc.seed) + int(tc.worker), n_startup_trials=int(tc.n_startup_trials),
                        pruner=dict(tc.pruner), report_every=int(tc.pruner.get("report_every", 10)),
                        n_jobs=estimator_threads(n_rows, model_cfg.get("n_jobs")), fit_seed=int(cfg.split.seed), metric=metric)


def _print_summary(cfg: Any, summary: dict[str, Any], wanted: list[str]) -> None:
    """Trials and speed, base preset -> tuned blend per target, warnings where tuning made it worse."""
    tc = cfg.tune
    results, n_done, elapsed = summary["results"], summary["trials_run"], summary["elapsed_s"]
    print(f"carb-tune: study {tc.study!r} worker {summary['worker']}: {n_done} trials in {elapsed:.0f} s "
          f"({summary['trials_per_minute']:.1f} trials/min) on {summary['device']}")
    for t in wanted:
        b, unit = results[sub_name(tc.study, t, "blend")], metric_unit(str(tc.metric), t)
        print(f"  {t}: base preset val {tc.metric} {results[f'base.{t}']['value']:.4g} {unit} -> tuned blend "
              f"{b['value']:.4g} {unit} (weights {np.round(b['weights'], 3).tolist()})")
    for line in worse_lines(summary["worse"], str(tc.metric), str(cfg.model.get("name", "the base preset"))):
        print(line, file=sys.stderr)
    print(f"  use it: carb-train model=tuned tune.study={tc.study}")


def _log_parent(cfg, parent: str, storage, targets, members, summary) -> None:
    import optuna

    from carb import tracking
    from carb.plots.tune import history_figure, importance_figure

    tc = cfg.tune
    with tracking.start_run("tune", "", cfg.tracking.uri, run_id=parent):
        w = f"worker{summary['worker']}"
        metrics = {f"{w}_trials_per_minute": summary["trials_per_minute"], f"{w}_tune_s": summary["elapsed_s"],
                   f"{w}_base_fit_s": summary["base_fit_s"]}
        best = {}
        for name, r in summary["results"].items():
            key = name.replace(f"{tc.study}.", "")
            if name.startswith("base."):  # the base preset's cascade: val_<t>_<metric>_base
                metrics[f"val_{key.split('.', 1)[1]}_{tc.metric}_base"] = r["value"]
            else:  # the tuned blend is the model: val_<t>_<metric>; its best specialists: ..._<member>
                member = key.rsplit(".", 1)[-1]
                metrics[val_metric(name, tc.metric, "" if member == "blend" else member)] = r["value"]
            if "params" in r:
                best[key] = {"params": r["params"], "trial": r["trial"], "value": r["value"]}
            elif "weights" in r:
                best[key] = {"weights": r["weights"], "trial": r["trial"], "value": r["value"]}
        tracking.log_metrics(metrics)
        if summary["worse"]:
            tracking.set_tags({"tuned_worse_than_base": ",".join(summary["worse"])})
        tracking.log_dict(best, "best_params.json")
        for t in targets:
            for m in members + ["blend"]:
                study = optuna.load_study(study_name=sub_name(tc.study, t, m), storage=storage)
                done = [x for x in study.trials if x.state == optuna.trial.TrialState.COMPLETE]
                if len(done) < 2:
                    continue
                pruned = [x.number for x in study.trials if x.state == optuna.trial.TrialState.PRUNED]
                title = f"{sub_name(tc.study, t, m)} ({len(done)} completed, {len(pruned)} pruned)"
                fig = history_figure([x.number for x in done], [x.value for x in done], tc.metric, title,
                                     target=t, pruned=pruned)
                tracking.log_figure(fig, f"figures/{t}/{m}_history.png")
                with quiet_warnings():
                    try:
                        imp = optuna.importance.get_param_importances(study)
                    except Exception:  # too few distinct trials for importances
                        imp = {}
                if imp:
                    tracking.log_figure(importance_figure(imp, title), f"figures/{t}/{m}_importances.png")


main = hydra_command("tune")(run_tune)


if __name__ == "__main__":
    main()
