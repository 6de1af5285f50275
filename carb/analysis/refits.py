"""The evaluation refits of ``carb-train`` as independent tasks, run in worker processes.

A fitted cascade is evaluated by refitting copies of it on other rows: leave-one-batch-tier-out
(:func:`carb.analysis.evaluate.leave_one_batch_tier_out`), one refit per extrapolation split
(:func:`carb.analysis.extrapolation.fit_split`) and one per new-architecture fold
(:func:`carb.model.intervals.fold_log_ratios`): 11 refits on the CPU reference. None of them needs the
main fit, so :func:`plan_refits` lists them before it, :class:`RefitRunner` starts them, and the
evaluation (:func:`carb.analysis.assess.evaluate_cascade`) collects their results after it.

Workers: ``evaluate.refits.workers`` (``auto``: :func:`carb.compute.available_cores`, not the free cores:
single-thread processes time-slice a busy core fairly and never spin, and beside a busy process pinned to one
core two workers took 17-21 s where one took 22-32 s; an int is capped at the available cores). With one worker, or where ``forkserver`` is not available, the
refits run in this process, one after another, when they are collected (as before). Otherwise each worker is
forked from a fork server (:func:`worker_context`: never from this process, whose OpenMP pools a forked child
cannot use), with the modules of :data:`PRELOAD` loaded; the tasks and frames travel pickled (a few hundred
kB); a script that calls ``run_train`` itself needs the ``if __name__ == "__main__":`` guard, as for any
multiprocessing. Each worker's fits run at one thread (:func:`worker_threads`): processes x threads
never exceed the cores. The pool starts before the main fit, which then runs beside it at one thread.

Lighter refits (``evaluate.refits.light``): a refit's result is a score or a calibration, not the
registered model, so it may grow fewer trees: :func:`light_params` keeps ``tree_share`` of each
booster's and forest's trees and of the correctors' iterations, with the boosters' learning rate
raised by ``1 / tree_share`` (at most ``max_learning_rate``) so they reach a similar fit. Measured on
the CPU reference (``python -m scripts.studies.refit_preset``, split seeds 0-2, tree_share 0.3): 34 of 38
figures (extrapolation R^2, MAPE and interval coverage per split, new-architecture bounds, LOBO R^2, test
coverage) moved less than their seed-to-seed spread, the other 4 by at most 1.6 spreads (depth-split latency
coverage -0.007, precision-split latency MAPE +0.3 points), at 0.6x the refits' time.

The main process meanwhile queues the sanity check and the figures to the same workers
(:meth:`RefitRunner.submit`) and sets up the tracking store (``carb.commands.train``).
"""
from __future__ import annotations

import copy
import functools
import heapq
import itertools
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from carb.compute import available_cores
from carb.errors import ConfigError


@dataclass
class Task:
    """One refit: ``fn(*args, note=...)`` (a top-level function: a worker process runs it), its kind
    (``lobo``, ``split``, ``arch``), its index within the kind, the progress label (None: silent) and its
    ``priority`` (:data:`PRIORITY`)."""

    kind: str
    index: int
    label: str | None
    fn: Callable[..., Any]
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: Workers take the waiting task with the lowest priority first (ties: in submission order).
    priority: float = 0.0


@dataclass
class Done:
    """A finished refit: its result, the lines it had to say (skips) and its wall seconds."""

    result: Any
    notes: list[str]
    seconds: float


def run_task(fn: Callable[..., Any], args: tuple, kwargs: Mapping[str, Any]) -> Done:
    """Run one task, catching its ``note`` lines (said by the parent, in order); its warnings are the
    main fit's (dropped targets and columns), already said once."""
    import warnings

    notes: list[str] = []
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = fn(*args, note=notes.append, **kwargs)
    return Done(result, notes, time.perf_counter() - t0)


def worker_threads() -> dict[str, Any]:
    """What a worker's fits may use: ``{"estimator": carb.compute.parallel_threads(), "openmp": [thread
    counts of the loaded OpenMP libraries], "blas": [...]}`` (tests read it)."""
    from threadpoolctl import threadpool_info

    from carb.compute import parallel_threads

    info = threadpool_info()
    return {"estimator": parallel_threads(),
            "openmp": [i["num_threads"] for i in info if i.get("user_api") == "openmp"],
            "blas": [i["num_threads"] for i in info if i.get("user_api") == "blas"], "pid": os.getpid()}


def _init_worker() -> None:
    """A worker's set-up: one thread for every estimator, OpenMP and BLAS library (the pool holds one
    process per core); Ctrl-C and SIGTERM are the parent's to handle (it stops the workers)."""
    import signal

    from carb.compute import one_thread_process

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    one_thread_process()   # forked from the fork server, which loaded the runtimes with PRELOAD


def refit_workers(setting: Any = "auto", n_tasks: int | None = None) -> int:
    """Worker processes for the refits: ``auto`` (or None) the available cores (each worker runs at one
    thread, so a busy core is shared, not oversubscribed with spinning threads), a positive int capped at
    the available cores, and never more than ``n_tasks``; 1 means in this process."""
    if setting is None or str(setting).strip().lower() == "auto":
        n = available_cores()
    else:
        try:
            n = int(setting)
        except (TypeError, ValueError):
            raise ConfigError(f"evaluate.refits.workers: {setting!r} is not allowed; use auto or a positive "
                              f"integer") from None
        if n < 1:
            raise ConfigError(f"evaluate.refits.workers: {setting!r} is not allowed; use auto or a positive integer")
        n = min(n, available_cores())
    if n_tasks is not None:
        n = min(n, max(1, n_tasks))
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, n)


#: Modules the fork server imports once, so that each worker it forks starts with them loaded.
PRELOAD = ["carb.analysis.refits", "carb.analysis.extrapolation", "carb.analysis.evaluate", "carb.model.cascade",
           "carb.model.intervals", "carb.plots.train"]


def worker_context() -> multiprocessing.context.BaseContext:
    """The workers' start method: ``forkserver``. A plain ``fork`` copies this process as it is, and a process
    that has run an OpenMP parallel region (LightGBM, XGBoost: a previous fit, a previous job of a multirun, a
    notebook) leaves the child a thread pool it cannot use: the child hangs in its first OpenMP call (seen:
    LightGBM's Dataset construction in a refit worker forked inside the test suite). The fork server is a fresh
    process that only imported :data:`PRELOAD`; workers forked from it start clean and nearly as fast."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_fork_server() -> bool:
    """Start the workers' fork server now, when there will be more than one worker at all (``forkserver``
    available, more than one available core): it imports :data:`PRELOAD` (about a second) on another core while
    this process starts up, so the first worker forks at once later. Returns whether it runs. ``carb-train``
    calls it first thing; if the run then needs no workers, the server only waits (and ends with this process)."""
    if "forkserver" not in multiprocessing.get_all_start_methods() or available_cores() < 2:
        return False
    from multiprocessing import forkserver

    worker_context()   # sets the preload list
    forkserver.ensure_running()
    return True


class _Lazy:
    """A task run in this process when its result is first asked for (the serial path)."""

    def __init__(self, task: Task):
        self.task, self._done = task, None

    def result(self) -> Done:
        if self._done is None:
            self._done = run_task(self.task.fn, self.task.args, self.task.kwargs)
        return self._done


class RefitRunner:
    """Runs :class:`Task` s in ``workers`` processes (``workers`` 1: in this process, lazily).
    Use as a context manager, or call :meth:`close`; :meth:`start` submits, :meth:`collect` waits.

    With workers, tasks wait in this process and a feeder thread hands the waiting task of lowest
    ``priority`` to the pool whenever a worker is free (never more tasks in the pool than workers), so a task
    submitted later (the extrapolation figure once its splits are in) can still run before tasks that were
    waiting. :meth:`start` returns at once: the first worker's start (the fork server importing
    :data:`PRELOAD`, about a second) happens in the feeder thread while the caller fits the main model."""

    def __init__(self, workers: int = 1):
        self.workers = max(1, int(workers))
        self._pool: ProcessPoolExecutor | None = None
        self._jobs: list[tuple[Task, Any]] = []
        self._waiting: list[tuple[float, int, Task, Future]] = []
        self._seq = itertools.count()
        self._running = 0
        self._closed = False
        self._cond = threading.Condition()
        self._feeder: threading.Thread | None = None

    @property
    def parallel(self) -> bool:
        """Whether the tasks run in worker processes."""
        return self._pool is not None

    def start(self, tasks: list[Task]) -> RefitRunner:
        """Submit ``tasks`` (with more than one worker and task, the pool and its feeder thread start now)."""
        if self.workers > 1 and len(tasks) > 1:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=worker_context(), initializer=_init_worker)
            self._feeder = threading.Thread(target=self._feed, name="carb-refit-feeder", daemon=True)
            self._jobs = [(t, self.submit(t)) for t in tasks]
            self._feeder.start()
        else:
            self._jobs = [(t, _Lazy(t)) for t in tasks]
        return self

    def submit(self, task: Task) -> Any:
        """Run one more task (in a worker when there are workers, else in this process when its result is
        asked for); returns an object whose ``result()`` is its :class:`Done`."""
        if self._pool is None:
            return _Lazy(task)
        out: Future = Future()
        with self._cond:
            heapq.heappush(self._waiting, (float(task.priority), next(self._seq), task, out))
            self._cond.notify_all()
        return out

    def _feed(self) -> None:
        """The feeder thread: hand the waiting task of lowest priority to the pool while a worker is free."""
        pool = self._pool
        while True:
            with self._cond:
                while not self._closed and (not self._waiting or self._running >= self.workers):
                    self._cond.wait()
                if self._closed:
                    return
                _, _, task, out = heapq.heappop(self._waiting)
                self._running += 1
            if not out.set_running_or_notify_cancel():
                self._finished(None, None)
                continue
            try:   # the first submits start the workers (the fork server's imports): here, not in the caller
                job = pool.submit(run_task, task.fn, task.args, task.kwargs)
            except BaseException as e:  # noqa: BLE001 - a broken or closed pool: the task's result raises it
                out.set_exception(e)
                self._finished(None, None)
                continue
            job.add_done_callback(functools.partial(self._finished, out))

    def _finished(self, out: Future | None, job: Future | None) -> None:
        """A pool job ended: pass its outcome on to ``out`` and free its worker for the next waiting task."""
        if out is not None and job is not None:
            if job.cancelled():
                out.set_exception(CancelledError())
            elif job.exception() is not None:
                out.set_exception(job.exception())
            else:
                out.set_result(job.result())
        with self._cond:
            self._running -= 1
            self._cond.notify_all()

    def collect(self, progress: Callable[[str], None] | None = None,
                note: Callable[[str], None] | None = None,
                when_done: Mapping[str, Callable[[list[Done]], None]] | None = None) -> dict[tuple[str, int], Done]:
        """Wait for every task: ``{(kind, index): Done}``. ``progress(label)`` is called as each serial
        task starts, or as each parallel one finishes; ``note`` gets each task's lines, in task order;
        ``when_done[kind]`` is called with that kind's results (index order) as soon as all are in (e.g.
        to queue a figure of the extrapolation splits while the other refits run)."""
        out: dict[tuple[str, int], Done] = {}
        left = {k: sum(t.kind == k for t, _ in self._jobs) for k in (when_done or {})}

        def arrived(t: Task, done: Done) -> None:
            out[(t.kind, t.index)] = done
            if t.kind in left:
                left[t.kind] -= 1
                if left[t.kind] == 0:
                    mine = sorted((i, d) for (k, i), d in out.items() if k == t.kind)
                    when_done[t.kind]([d for _, d in mine])

        if self._pool is None:
            for t, job in self._jobs:
                if progress is not None and t.label:
                    progress(t.label)
                arrived(t, job.result())
        else:
            from concurrent.futures import as_completed

            label = {id(f): t for t, f in self._jobs}
            for f in as_completed([f for _, f in self._jobs]):
                t = label[id(f)]
                arrived(t, f.result())
                if progress is not None and t.label:
                    progress(f"{t.label} (done)")
        if note is not None:
            for t, _ in self._jobs:
                for line in out[(t.kind, t.index)].notes:
                    note(line)
        return out

    def close(self) -> None:
        """Stop the workers (at once when the tasks were not all collected, e.g. after Ctrl-C)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        with self._cond:
            self._closed = True
            waiting, self._waiting = self._waiting, []
            self._cond.notify_all()
        if self._feeder is not None:
            self._feeder.join()
        for _, _, _, out in waiting:
            out.cancel()
        unfinished = bool(waiting) or any(not f.done() for _, f in self._jobs if isinstance(f, Future))
        if unfinished:
            for p in list((getattr(pool, "_processes", None) or {}).values()):   # the executor's own workers
                p.terminate()
        pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RefitRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ---------------------------------------------------------------------------------------- the plan
#: Task priorities (lower runs first): longest first, so that the two workers end together. The
#: extrapolation figure as soon as its splits are in (1.8 s, the longest task after them), the precision
#: split (it also fits the device-probe cost model: about twice another split), the other splits,
#: leave-one-batch-tier-out and the sanity check (0.3 s, queued after the main fit; the evaluation needs it
#: first), the new-architecture folds (0.7 s each), and last the main fit's three figures (0.2-0.4 s each,
#: logged last). Results do not depend on the order.
PRIORITY: dict[str, float] = {"extrapolation figure": -2.0, "precision split": -1.0, "split": 0.0, "lobo": 1.0,
                              "sanity": 1.0, "arch": 2.0, "figures": 3.0}


def light_params(params: Mapping[str, Any], tree_share: float = 0.3, max_learning_rate: float = 0.3,
                 min_trees: int = 10) -> dict[str, Any]:
    """The :class:`~carb.model.cascade.CarbCascade` parameters (``get_params()``) of a lighter refit:
    ``specialists``, ``per_target`` and the correctors' model with ``tree_share`` of their trees
    (``n_estimators``, ``max_iter``; at least ``min_trees``) and the learning rates of the boosted ones
    divided by ``tree_share`` (at most ``max_learning_rate``, never lowered). Returns only the changed
    keys, for ``set_params``."""
    if not 0 < tree_share <= 1:
        raise ConfigError(f"evaluate.refits.tree_share: must be in (0, 1], got {tree_share!r}")

    def scale(d: Mapping[str, Any], trees_key: str) -> dict[str, Any]:
        d = dict(d)
        if trees_key in d and d[trees_key] is not None:
            d[trees_key] = max(min_trees, math.ceil(int(d[trees_key]) * tree_share))
            if "learning_rate" in d and d["learning_rate"] is not None:
                lr = float(d["learning_rate"])
                d["learning_rate"] = max(lr, min(max_learning_rate, lr / tree_share))
        return d

    out: dict[str, Any] = {}
    if params.get("specialists"):
        out["specialists"] = {m: scale(v or {}, "n_estimators") for m, v in params["specialists"].items()}
    if params.get("per_target"):
        out["per_target"] = {t: {m: (scale(v, "n_estimators") if isinstance(v, Mapping) else copy.deepcopy(v))
                                 for m, v in (o or {}).items()} for t, o in params["per_target"].items()}
    corr = params.get("correctors")
    if isinstance(corr, Mapping) and isinstance(corr.get("model"), Mapping):
        out["correctors"] = {**copy.deepcopy(dict(corr)), "model": scale(corr["model"], "max_iter")}
    return out


def refit_model(model: Any, refits: Mapping[str, Any] | None = None) -> Any:
    """An unfitted copy of ``model`` for the evaluation refits: lighter (:func:`light_params`) when
    ``refits["light"]`` is true and the model is a cascade, else a plain clone."""
    from sklearn.base import clone

    refits = dict(refits or {})
    out = clone(model)
    if refits.get("light", True) and hasattr(out, "oof_folds"):
        out.set_params(**light_params(out.get_params(deep=False), float(refits.get("tree_share", 0.3)),
                                      float(refits.get("max_learning_rate", 0.3))))
    return out


def plan_refits(model: Any, train: pd.DataFrame, full: pd.DataFrame, ev: Mapping[str, Any], targets: list[str],
                calibrated: bool, note: Callable[[str], None] | None = None) -> tuple[list[Task], dict[str, Any]]:
    """Every refit of the evaluation ``ev`` (``carb-train``'s ``evaluate`` group) of ``model`` (unfitted)
    on the split's ``train`` rows and the ``full`` frame: ``(tasks, plan)``. ``calibrated``: whether the
    model will have intervals (the new-architecture folds and the splits' interval coverage need them).
    ``plan`` holds what combining the results needs (``splits``, ``arch``: ``(k, architectures)``,
    ``coverage``, the enabled parts); ``note`` gets one line per part skipped for lack of rows."""
    from carb.analysis.evaluate import lobo_or_skip
    from carb.analysis.extrapolation import default_splits, fit_split

    refits = dict(ev.get("refits") or {})
    coverage = float(ev.get("interval_coverage", 0.9) or 0) if calibrated else 0.0
    tasks: list[Task] = []
    plan: dict[str, Any] = {"lobo": False, "splits": None, "arch": None, "coverage": coverage or None}
    lcfg = ev.get("lobo") or {}
    if lcfg.get("enabled", True):
        mb = int(lcfg.get("max_batch", 8))
        plan["lobo"] = True
        tasks.append(Task("lobo", 0, f"leave-one-batch-tier-out refit (train bs > {mb})", lobo_or_skip,
                          (refit_model(model, refits), full, targets, mb), priority=PRIORITY["lobo"]))
    xcfg = ev.get("extrapolation") or {}
    if xcfg.get("enabled", True):
        splits = default_splits(full, float(xcfg.get("train_share", 0.7)), int(xcfg.get("min_rows", 20)))
        if not splits and note is not None:
            note(f"extrapolation splits skipped: no knob or precision leaves {int(xcfg.get('min_rows', 20))} rows "
                 f"(evaluate.extrapolation.min_rows) on each side of a cut in {len(full)} rows")
        plan["splits"] = splits
        say = xcfg.get("progress", True)
        for i, sp in enumerate(splits):
            tasks.append(Task("split", i, f"extrapolation split {i + 1}/{len(splits)}: {sp.name} ({sp.description})"
                              if say else None, fit_split, (refit_model(model, refits), full, sp, targets, coverage or None),
                              priority=PRIORITY["precision split" if sp.name.startswith("precision") else "split"]))
    acfg = ev.get("architecture_intervals") or {}
    if acfg.get("enabled", True) and coverage:
        from carb.model.intervals import architecture_folds, fold_log_ratios

        folds = architecture_folds(train, int(acfg.get("folds", 5)), note)
        if folds is not None:
            k, n_groups, parts = folds
            plan["arch"] = (k, n_groups)
            for i, (tr, te) in enumerate(parts):
                label = f"new-architecture intervals: fold {i + 1}/{k}"
                tasks.append(Task("arch", i, label, fold_log_ratios,
                                  (refit_model(model, refits), train, train[targets], tr, te, label),
                                  priority=PRIORITY["arch"]))
    return tasks, plan
