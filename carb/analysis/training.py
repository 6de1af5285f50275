"""The training steps of ``carb-train`` below the commands layer: the split, the plan of the work (for the
ETA), the main fit with the evaluation's refits in worker processes beside it, the interval calibration,
the evaluation, and the saved fit (``<run folder>/fit``) that ``carb-train log_only=<folder>`` logs later.

No Hydra, no MLflow, no printing: settings come in as plain dicts (``evaluate``), report lines go to a
``note(line)`` callable, progress to ``progress(label)`` callables, and what only the command does (import
MLflow before the workers fork, set the store up while they refit, queue the figures, which
:mod:`carb.plots.train` draws) comes in as :class:`Hooks`.
"""
from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from carb.data.split import split_dataset

#: Weight of logging a run (figures, model, registration) against one cascade stage, for the ETA.
LOG_WEIGHT = 2.0


def _quiet(line: str) -> None:
    """A ``note`` that says nothing."""


@dataclass
class Hooks:
    """What the command adds around the library's steps (each optional).

    ``fitted(cascade)``: right after the main fit (the command prints which feature sets coincide);
    ``parallel()``: the refit workers started before the main fit (the command imports MLflow first);
    ``waiting()``: this process only waits for the workers from here (the command sets its store up in a
    thread and returns it, joined before the evaluation); ``figures``: ``(first(runner, folder, test, pred,
    importances, targets) -> jobs, splits(runner, plan, runs, folder, targets, combined) -> jobs)``, the
    figures queued to the workers (:func:`carb.plots.train.submit_figures`)."""

    fitted: Callable[[Any], None] | None = None
    parallel: Callable[[], None] | None = None
    waiting: Callable[[], Any] | None = None
    figures: tuple[Callable[..., list[Any]], Callable[..., list[Any]]] | None = None


@dataclass
class Trained:
    """A fitted and evaluated cascade: ``metrics`` (flat names), ``extras`` (test predictions, importances,
    the extrapolation table and predictions), ``figure_files`` (the figure jobs the workers drew, or [])."""

    cascade: Any
    metrics: dict[str, float]
    extras: dict[str, Any]
    figure_files: list[Any] = field(default_factory=list)


def split_frames(full: Any, seed: int, fractions: tuple[float, ...]) -> tuple[Any, Any, Any, Any]:
    """``(train, val, cal, test)`` frames of ``full``: the stratified split (:func:`carb.data.split.split_dataset`)."""
    return split_dataset(full, seed=seed, fractions=fractions).frames4(full)


def deferred_parts(ev: dict[str, Any]) -> dict[str, bool]:
    """What ``run_train(defer=True)`` leaves for later: ``{"leave-one-batch-tier-out": True, "figures": True}``
    where ``evaluate`` enables them."""
    parts = {"leave-one-batch-tier-out": bool((ev.get("lobo") or {}).get("enabled", True)),
             "figures": bool(ev.get("figures", True))}
    return {k: v for k, v in parts.items() if v}


def train_plan(ev: dict[str, Any], full: Any, n_targets: int, n_cal: int = 0) -> float:
    """Planned weight of a ``carb-train`` run for :class:`~carb.commands.progress.Progress`: one unit per
    cascade stage, ``n_targets`` per refit (leave-one-batch-tier-out, each extrapolation split, the
    cross-conformal folds when the ``n_cal`` calibration rows are too few), and :data:`LOG_WEIGHT` for logging."""
    refits = int(bool((ev.get("lobo") or {}).get("enabled", True)))
    xcfg = ev.get("extrapolation") or {}
    if xcfg.get("enabled", True):
        from carb.analysis.extrapolation import default_splits

        refits += len(default_splits(full, float(xcfg.get("train_share", 0.7)), int(xcfg.get("min_rows", 20))))
    acfg = ev.get("architecture_intervals") or {}
    if acfg.get("enabled", True) and float(ev.get("interval_coverage", 0.9) or 0) > 0:
        refits += int(acfg.get("folds", 5))
    cc = ev.get("cross_conformal") or {}
    if 0 < n_cal < int(cc.get("min_cal_rows", 40)):
        refits += int(cc.get("folds", 5))
    return n_targets * (1 + refits) + LOG_WEIGHT


def calibrate_intervals(cascade: Any, parts: tuple[Any, Any, Any], targets: list[str], ev: dict[str, Any],
                        progress: Any = None, seed: int = 0, note: Callable[[str], None] = _quiet) -> float:
    """Calibrate the cascade's prediction intervals (``intervals_``) at ``evaluate.interval_coverage``
    on the calibration rows of ``parts`` (``(train, val, cal)`` frames). When the calibration part has
    fewer than ``evaluate.cross_conformal.min_cal_rows`` rows, the intervals are cross-conformal instead
    (:func:`carb.model.intervals.cross_calibrate` on every train, validation and calibration row), and a
    line says so; without a calibration part the model gets none. Returns the seconds it took."""
    t0 = time.perf_counter()
    train, val, cal = parts
    coverage = float(ev.get("interval_coverage", 0.9))
    cc = ev.get("cross_conformal") or {}
    if not len(cal):
        note("split.fractions has no calibration part; the model gets no prediction intervals")
    elif len(cal) >= int(cc.get("min_cal_rows", 40)):
        from carb.model.intervals import calibrate

        cascade.intervals_ = calibrate(cascade, cal, cal[targets], coverage=coverage)
    else:
        import pandas as pd
        from sklearn.base import clone

        from carb.model.intervals import cross_calibrate

        rows = pd.concat([train, val, cal], ignore_index=True)
        folds = int(cc.get("folds", 5))
        note(f"the calibration part has {len(cal)} rows (< evaluate.cross_conformal.min_cal_rows="
             f"{int(cc.get('min_cal_rows', 40))}): intervals are cross-conformal, {folds}-fold out-of-fold "
             f"log-ratios of the {len(rows)} train, validation and calibration rows")
        cascade.intervals_ = cross_calibrate(lambda: clone(cascade), rows, rows[targets], coverage, folds, seed,
                                             progress=progress, note=note)
    if getattr(cascade, "intervals_", None):   # never narrower than the device's measured memory spread
        from carb.model.intervals import memory_floor, with_floor

        with_floor(cascade.intervals_, "peak_memory_MB", memory_floor(train, ev.get("memory_floor")))
        add_session_drift(cascade, train, ev.get("session_drift"), note)
    return time.perf_counter() - t0


def add_session_drift(cascade: Any, rows: Any, settings: dict[str, Any] | None,
                      note: Callable[[str], None] = _quiet) -> dict[str, Any] | None:
    """Store the measured session drift of the rows' device kind on the cascade's latency and energy intervals
    (:func:`carb.model.intervals.with_session`; ``evaluate.session_drift``: ``enabled``, ``kinds``): screening's
    intervals then hold for a later session of the device, not only the rows' own. Returns the term (None: not
    applied: disabled, another kind, or no device of the kind measured in two windows; a line says which)."""
    from carb.data.session_drift import shipped_drift
    from carb.model.intervals import with_session

    settings = settings or {}
    kinds = [str(k) for k in settings.get("kinds") or []]
    known = rows["device_kind"].dropna() if "device_kind" in rows else []
    kind = str(known.mode().iloc[0]) if len(known) else ""
    if not settings.get("enabled") or kind not in kinds:
        return None
    term = shipped_drift(kind)
    if term is None:
        note(f"no {kind} device was measured in two sessions: the intervals hold for the rows' own session only")
        return None
    with_session(cascade.intervals_, term)
    note(f"latency/energy intervals for a later session of this {kind.upper()}: screening adds the measured session "
         f"drift (log sd {term['sd_log']:.3f}, {term['windows']} windows of {term['devices']} devices; "
         "evaluate.session_drift); the coverage figures here are of this session's held-out rows")
    return term


def start_refits(cascade: Any, train: Any, full: Any, ev: dict[str, Any], targets: list[str], calibrated: bool,
                 note: Callable[[str], None] = _quiet) -> tuple[Any, dict[str, Any]]:
    """Plan the evaluation's refits of ``cascade`` (:func:`carb.analysis.refits.plan_refits`) and start
    them in ``evaluate.refits.workers`` processes (one: in this process, when collected). Returns
    ``(runner, plan)``; the caller closes the runner."""
    from carb.analysis.refits import RefitRunner, plan_refits, refit_workers

    tasks, plan = plan_refits(cascade, train, full, ev, targets, calibrated, note=note)
    workers = refit_workers((ev.get("refits") or {}).get("workers", "auto"), len(tasks))
    return RefitRunner(workers).start(tasks), plan


def start_thread(target: Any, *args: Any) -> Any:
    """``target(*args)`` in a daemon thread, started; returns the thread."""
    import threading

    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def fit_and_evaluate(cascade: Any, parts: tuple[Any, Any, Any, Any], full: Any, targets: list[str],
                     ev: dict[str, Any], seed: int, fractions: tuple[float, ...], progress: Any,
                     note: Callable[[str], None] = _quiet, hooks: Hooks | None = None) -> Iterator[Trained]:
    """Fit ``cascade`` on ``parts`` (``(train, val, cal, test)``), record its test MAE and split, calibrate
    its intervals and run the evaluation (:func:`carb.analysis.assess.evaluate_cascade`) with its refits
    in worker processes: started before the main fit when it runs on one thread (they need nothing of it),
    else after it. Yields a :class:`Trained`; on exit the workers stop and the figures' folder goes (log
    the figure files inside the block). ``progress``: a :class:`~carb.commands.progress.Progress` (its
    ``hook``); ``targets``: the dataset's target columns."""
    import shutil
    import tempfile

    from carb.compute import estimator_threads

    hooks = hooks or Hooks()
    train, val, cal, test = parts
    measured = [t for t in targets if train[t].notna().any()]
    beside = estimator_threads(len(train)) == 1
    runner, plan = start_refits(cascade, train, full, ev, measured, len(cal) > 0, note) if beside else (None, None)
    if runner is not None and runner.parallel and hooks.parallel:
        hooks.parallel()
    figure_dir = None
    try:
        cascade.fit(train, train[targets], val, val[targets], progress=progress.hook(1.0, "fit stage "))
        if hooks.fitted:
            hooks.fitted(cascade)
        cascade.record_test_mae(test, test[targets])
        cascade.split_seed_, cascade.split_fractions_ = seed, list(fractions)
        t_cal = calibrate_intervals(cascade, (train, val, cal), targets, ev, progress=progress.hook(float(len(measured))),
                                    seed=seed, note=note)
        t_eval = time.perf_counter()
        if runner is None:
            runner, plan = start_refits(cascade, train, full, ev, measured, len(cal) > 0, note)
        figures: list[Any] = []
        sanity, first = None, None
        if runner.parallel:   # while the workers refit: the main fit's metrics here, the sanity check and the
            from carb.analysis.assess import main_fit_metrics, sanity_metrics   # figures queued to the workers
            from carb.analysis.refits import PRIORITY, Task

            first = main_fit_metrics(cascade, train, test, ev)
            scfg = ev.get("sanity") or {}
            if scfg.get("enabled", True):   # queued after the predictions above: the worker gets the cascade pickled
                sanity = runner.submit(Task("sanity", 0, None, sanity_metrics,
                                            (cascade, str(scfg.get("space", "screening"))), priority=PRIORITY["sanity"]))
        early: dict[str, Any] = {}
        combined: list[Any] = []   # the splits' table and predictions, made once for the figure and the metrics
        if runner.parallel and ev.get("figures", True) and hooks.figures:
            first_figures, split_figures = hooks.figures
            figure_dir = tempfile.mkdtemp(prefix="carb-figures-")
            targets_ = list(cascade.targets_)
            figures.extend(first_figures(runner, figure_dir, test, first[1]["pred"], first[1]["importances"],
                                         targets_))

            def queue_extrapolation(runs: list[Any]) -> None:
                """The extrapolation figure as soon as the splits are in; logged first, as before."""
                figures[:0] = split_figures(runner, plan, runs, figure_dir, targets_, combined)
            early["split"] = queue_extrapolation
        ready = hooks.waiting() if runner.parallel and hooks.waiting else None   # this thread only waits from here
        done = runner.collect(progress.hook(float(len(measured))), note, early)
        if ready is not None:
            ready.join()
        if sanity is not None:
            done[("sanity", 0)] = sanity.result()
        workers = runner.workers if runner.parallel else 1
        from carb.analysis.assess import evaluate_cascade

        metrics, extras = evaluate_cascade(cascade, train, val, test, full, ev, note=note, refits=(plan, done),
                                           first=first, combined=combined[0] if combined else None)
        metrics.update({"calibrate_s": t_cal, "evaluate_s": time.perf_counter() - t_eval,
                        "refit_workers": float(workers)})
        yield Trained(cascade, metrics, extras, figures)
    finally:
        if runner is not None:
            runner.close()
        if figure_dir is not None:
            shutil.rmtree(figure_dir, ignore_errors=True)


def save_fit(fit: dict[str, Any], folder: Path) -> Path:
    """Save a finished fit locally (``cascade.pkl``, the frames as parquet, the rest as JSON) so a
    tracking-store fault cannot throw it away; ``carb-train log_only=<folder>`` logs it later. The files
    are written to a temporary sibling folder renamed to ``folder`` at the end: a full disk leaves no
    half-written fit (the partial folder is removed and the ``OSError`` raised)."""
    import json
    import os
    import pickle
    import shutil

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    try:
        tmp.mkdir()
        with open(tmp / "cascade.pkl", "wb") as f:
            pickle.dump(fit["cascade"], f)
        fit["full"].to_parquet(tmp / "dataset.parquet", index=False)
        ex = fit["extras"]
        fit["test"].assign(**{c: ex["pred"][c].to_numpy() for c in ex["pred"].columns}).to_parquet(
            tmp / "test_predictions.parquet", index=False)
        if ex.get("extrapolation") is not None:
            ex["extrapolation"].to_parquet(tmp / "extrapolation.parquet", index=False)
        if ex.get("extrapolation_predictions"):
            from carb.analysis.extrapolation import xval_frame

            xval_frame(ex["extrapolation_predictions"]).to_parquet(tmp / "extrapolation_predictions.parquet", index=False)
        info = {k: fit[k] for k in ("metrics", "sizes", "device", "data_path", "preset", "run_name", "reg_name",
                                    "tags", "split", "config", "sweep")}
        info["importances"] = {t: [[n, v] for n, v in items] for t, items in ex["importances"].items()}
        (tmp / "fit.json").write_text(json.dumps(info, indent=1, default=str))
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def load_fit(folder: Path) -> dict[str, Any]:
    """A fit saved by :func:`save_fit` (for ``log_only``); :class:`ConfigError` when ``folder`` is not one."""
    import json
    import pickle

    import pandas as pd

    from carb.errors import ConfigError

    if not (folder / "fit.json").exists() or not (folder / "cascade.pkl").exists():
        raise ConfigError(f"log_only: {str(folder)!r} is not a saved fit (needs fit.json and cascade.pkl, as "
                          f"carb-train writes under <run folder>/fit)")
    info = json.loads((folder / "fit.json").read_text())
    with open(folder / "cascade.pkl", "rb") as f:
        cascade = pickle.load(f)
    tp = pd.read_parquet(folder / "test_predictions.parquet")
    pred_cols = [c for c in tp.columns if c.startswith("pred_")]
    xp = folder / "extrapolation.parquet"
    xpp = folder / "extrapolation_predictions.parquet"
    from carb.analysis.extrapolation import xval_from_frame

    extras = {"pred": tp[pred_cols], "importances": {t: [tuple(x) for x in v] for t, v in info["importances"].items()},
              "extrapolation": pd.read_parquet(xp) if xp.exists() else None,
              "extrapolation_predictions": xval_from_frame(pd.read_parquet(xpp)) if xpp.exists() else None}
    return {**info, "cascade": cascade, "extras": extras, "full": pd.read_parquet(folder / "dataset.parquet"),
            "test": tp.drop(columns=pred_cols)}


def interval_summary(entry: dict[str, Any]) -> dict[str, Any]:
    """One target's calibration as logged (``intervals.json``): the stored log-ratios left out, each
    regime's (``groups``) and the outside calibration's (and its per-precision bounds) replaced by their row
    count and bounds."""
    from carb.model.intervals import conformal_bounds

    out = {k: v for k, v in entry.items() if k not in ("log_ratios", "groups", "outside", "new_arch")}
    cov = float(entry.get("coverage", 0.9))
    for g, r in (entry.get("groups") or {}).items():
        lo, hi = conformal_bounds(r, cov)
        out.setdefault("groups", {})[g] = {"n": len(r), "lower": lo, "upper": hi}
    if isinstance(entry.get("new_arch"), dict):
        a = entry["new_arch"]
        out["new_arch"] = {"n": a.get("n"), "lower": a.get("lower"), "upper": a.get("upper"),
                           "architectures": a.get("architectures"), "folds": a.get("folds")}
        for g, r in (a.get("groups") or {}).items():
            lo, hi = conformal_bounds(r, cov)
            out["new_arch"].setdefault("groups", {})[g] = {"n": len(r), "lower": lo, "upper": hi}
    if isinstance(entry.get("outside"), dict):
        o = entry["outside"]
        out["outside"] = {"n": o.get("n"), "lower": o.get("lower"), "upper": o.get("upper")}
        if isinstance(o.get("by_precision"), dict):
            from carb.model.intervals import _widest

            out["outside"]["by_precision"] = {
                p: dict(zip(("lower", "upper"), _widest(d, float(o.get("coverage", cov)))),
                        n=sum(len(v) for v in d.values())) for p, d in o["by_precision"].items()}
    return out


def fit_zoo_latency(device: str, conf: dict[str, Any], coverage: float, folds: int, seed: int,
                    note: Callable[[str], None] = _quiet) -> tuple[Any, Any, dict[str, float]]:
    """``carb-train data=timm_zoo`` with ``data.estimator`` ``zoo_latency``: ``ZooLatencyModel`` behind the
    cascade's interface (:class:`carb.model.zoo_predictor.ZooLatencyPredictor`) fitted on ``device``'s rows of
    timm's file (:func:`carb.model.zoo_predictor.timm_rows`), ``conf`` (``conf/zoo_latency/default.yaml``'s
    dict, its ``per_device`` section by the file's device kind), intervals at ``coverage`` from ``folds`` groups
    of whole families (``seed``: their shuffle). Returns ``(model, rows, metrics)``; the metrics (flat names,
    units in them) are the held-out families' (``heldout/latency_ms_mape`` %, ``heldout/families_within20``,
    ``heldout/families``) and the band's (``interval/latency_ms_lower`` / ``_upper``: log-ratios,
    ``interval/families``, ``interval/rows``, ``interval/median_hi_lo``: hi / lo of every row)."""
    import math

    from carb.model.zoo_predictor import ZooLatencyPredictor, device_settings, timm_rows

    rows = timm_rows(device)
    settings = device_settings(conf, str(rows["device_kind"].iloc[0]))
    t0 = time.perf_counter()
    model = ZooLatencyPredictor(settings, coverage=coverage, folds=folds, seed=seed,
                                thresholds=conf.get("cpu_parts")).fit(rows, note)
    iv = model.interval_
    metrics = {"heldout/latency_ms_mape": iv["heldout_mape"],
               "heldout/families_within20": float(iv["families_within20"]),
               "heldout/families": float(iv["heldout_families"]),
               "heldout/families5_within20": float(iv["families5_within20"]),
               "heldout/families5": float(iv["heldout_families5"]), "interval/latency_ms_lower": iv["lower"],
               "interval/latency_ms_upper": iv["upper"], "interval/families": float(iv["families"]),
               "interval/rows": float(iv["rows"]), "interval/nominal": float(coverage),
               "interval/median_hi_lo": math.exp(iv["upper"] - iv["lower"]),
               "interval/fold_coverage_min": min(iv["fold_coverage"]),
               "interval/fold_coverage_max": max(iv["fold_coverage"]),
               "time/fit_s": time.perf_counter() - t0, "rows": float(len(rows))}
    return model, rows, metrics
