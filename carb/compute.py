"""How many threads CARB's estimators may use, so that fits never oversubscribe the machine.

The thread count is derived from the cores this process may run on (CPU affinity and a cgroup CPU quota),
the current load (other busy processes) and the size of the training data, and is never above the
cores available; the one setting ``compute.n_jobs`` (``conf/compute/default.yaml``, or ``CARB_N_JOBS``)
overrides it. BLAS libraries (numpy/scipy OpenBLAS) run single-threaded inside CARB's fits: their
matrices are small, and their spinning worker threads competed with the boosters' OpenMP threads.
OpenMP libraries without an ``n_jobs`` (scikit-learn's histogram boosting) get the same count as the
boosters (:func:`limited`).

Measured on a 2-core VM (1,350-row CPU reference, ``carb-train`` defaults, idle): every library at 2
threads 79 s wall / 155 s CPU; boosters at 2 threads with BLAS at 1: 35 s; everything at 1 thread:
30 s / 30 s CPU. Two ``carb-tune`` workers side by side with 2 OpenMP threads each: 418 s each, against
21 s with 1 thread each (OpenMP threads spin while they wait for a core).

The settings are process-wide, like ``sklearn.set_config``: commands call :func:`configure` once with
their ``compute`` group; a library user may call it too.
"""
from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from carb.errors import ConfigError

#: Process-wide settings: ``n_jobs`` ("auto" or a positive int), ``rows_per_thread`` (training rows a
#: thread must have before a second one pays; conf/compute/default.yaml holds the shipped value).
_SETTINGS: dict[str, Any] = {"n_jobs": "auto", "rows_per_thread": 50_000, "blas_threads": 1}


def configure(n_jobs: int | str | None = None, rows_per_thread: int | None = None,
              blas_threads: int | None = None) -> None:
    """Set the process-wide thread policy; ``None`` keeps a value as it is.

    n_jobs : "auto" (or -1/0) derives it from cores, load and data size; a positive int is a ceiling
        that is still capped at the cores this process may use."""
    if n_jobs is not None:
        _SETTINGS["n_jobs"] = parse_n_jobs(n_jobs)
    if rows_per_thread is not None:
        _SETTINGS["rows_per_thread"] = max(1, int(rows_per_thread))
    if blas_threads is not None:
        _SETTINGS["blas_threads"] = max(1, int(blas_threads))


def configure_from(cfg: Any) -> None:
    """:func:`configure` from a command's ``compute`` group (a mapping or None: nothing changes)."""
    if cfg:
        configure(cfg.get("n_jobs"), cfg.get("rows_per_thread"), cfg.get("blas_threads"))


def parse_n_jobs(value: int | str | None) -> int | str:
    """The one rule for ``compute.n_jobs`` (library and config schema alike): ``"auto"``, ``None``, ``-1`` or
    ``0`` -> ``"auto"``; a positive int (or its text, e.g. from ``CARB_N_JOBS``) -> the int; anything else
    (below -1, a fraction, a word) -> :class:`ConfigError` naming the field and the allowed values."""
    if value is None or str(value).strip().lower() in ("auto", "null", "none", "-1", "0", ""):
        return "auto"
    try:
        n = None if isinstance(value, (bool, float)) else int(str(value).strip())
    except ValueError:
        n = None
    if n is None or n < 1:
        raise ConfigError(f"compute.n_jobs: {value!r} is not allowed; use auto (also -1 or 0) or an integer >= 1 "
                          "(e.g. CARB_N_JOBS=2)")
    return n


def _cgroup_cores() -> float | None:
    """CPU quota of this process's cgroup in cores (v2 ``cpu.max``, v1 ``cfs_quota_us``), None if unset."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        q = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        p = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if q <= 0 else q / p
    except (OSError, ValueError):
        return None


def available_cores() -> int:
    """Cores this process may run on: CPU affinity, capped by a cgroup CPU quota (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = _cgroup_cores()
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def free_cores() -> int:
    """Available cores less those other processes keep busy, at least 1. Busy others: the 1-minute load
    average less this process's own share, but never more than the tasks runnable at this instant less
    this one (:func:`runnable_now`): the average lags a minute, so a process that has just ended (a
    ``carb-train`` run before a ``carb-screen``) would still count; a busy competitor is runnable in both."""
    cores = available_cores()
    try:
        load = os.getloadavg()[0]
    except OSError:
        return cores
    busy_others = max(0, round(load) - 1)
    now = runnable_now()
    if now is not None:
        busy_others = min(busy_others, max(0, now - 1))
    return max(1, cores - busy_others)


_RUNNABLE: list[float] = []   # [monotonic time, value] of the last runnable_now reading


def runnable_now(samples: int = 3, gap_s: float = 0.001, max_age_s: float = 1.0) -> int | None:
    """Tasks (threads) runnable on the machine at this instant, the reader included: the least of
    ``samples`` reads ``gap_s`` apart of Linux ``/proc/loadavg`` (4th field ``running/total``; one read
    alone now and then catches a kernel thread's blip, a busy process is in every read); None where it
    cannot be read. A reading younger than ``max_age_s`` is reused (a screening asks five times: 12 ms of
    its 0.3 s for 3,072 candidates)."""
    import time

    now = time.monotonic()
    if _RUNNABLE and now - _RUNNABLE[0] < max_age_s:
        return int(_RUNNABLE[1])
    seen = []
    for i in range(max(1, int(samples))):
        try:
            seen.append(int(Path("/proc/loadavg").read_text().split()[3].split("/")[0]))
        except (OSError, IndexError, ValueError):
            return None
        if i + 1 < samples:
            time.sleep(gap_s)
    _RUNNABLE[:] = [now, min(seen)]
    return min(seen)


def estimator_threads(n_rows: int | None = None, n_jobs: int | str | None = None) -> int:
    """Threads for one estimator fit on ``n_rows`` training rows.

    ``n_jobs`` (else the process-wide ``compute.n_jobs``): a positive int is used, capped at the
    available cores; "auto" gives one thread per ``rows_per_thread`` rows, at most the free cores."""
    setting = parse_n_jobs(n_jobs) if n_jobs is not None else _SETTINGS["n_jobs"]
    if setting != "auto":
        return max(1, min(int(setting), available_cores()))
    by_rows = 1 if n_rows is None else math.ceil(max(1, n_rows) / _SETTINGS["rows_per_thread"])
    return max(1, min(by_rows, free_cores()))


def parallel_threads() -> int:
    """Threads for work that splits into independent pieces of any size (models predicting side by side, a
    worker's fits): ``compute.n_jobs`` when set, else the free cores (no ``rows_per_thread`` rule)."""
    return estimator_threads(10 ** 9)


_WORKER_LIMITS: list[Any] = []   # threadpoolctl limits of a worker process, kept for its life


def one_thread_process() -> None:
    """Make this (worker) process run every library at one thread: the environment that OpenMP and BLAS
    runtimes read when they load (``OMP_NUM_THREADS`` ...), :func:`configure` at ``n_jobs=1`` and
    ``blas_threads=1``, and threadpoolctl's limit of 1 on the runtimes loaded now (it reaches only those: call it
    after loading what brings them, e.g. unpickling fitted boosters). Pools of worker processes call it in
    their initializer: the workers are the parallelism, and nested threads would multiply and spin."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    configure(n_jobs=1, blas_threads=1)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return
    _WORKER_LIMITS.append(threadpool_limits(limits=1))


@contextlib.contextmanager
def limited(n_rows: int | None = None) -> Iterator[None]:
    """Run the block with BLAS (OpenBLAS/MKL) at ``blas_threads`` threads (default 1) and OpenMP
    libraries at :func:`estimator_threads` for ``n_rows`` rows (scikit-learn's histogram boosting has no
    ``n_jobs`` and would take every core); XGBoost and LightGBM get their count as ``n_jobs``. A no-op
    where threadpoolctl is missing."""
    try:
        ctl = _controller()
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        yield
        return
    with ctl.limit(limits=_SETTINGS["blas_threads"], user_api="blas"), \
            ctl.limit(limits=estimator_threads(n_rows), user_api="openmp"):
        yield


_CONTROLLER: list[Any] = []   # [modules imported when it was made, threadpoolctl.ThreadpoolController]


def _controller() -> Any:
    """A ``threadpoolctl.ThreadpoolController`` of the libraries loaded now, made again only after modules were
    imported (a new shared library comes with an import): making one scans every loaded library, about 2 ms with
    the boosters loaded, and a screening sets limits four times."""
    import sys

    from threadpoolctl import ThreadpoolController

    n = len(sys.modules)
    if not _CONTROLLER or _CONTROLLER[0] != n:
        _CONTROLLER[:] = [n, ThreadpoolController()]
    return _CONTROLLER[1]
