"""What keeps screening linear at a million candidates: row chunks that keep an architecture whole, a
row-wise :func:`numpy.interp`, and the Pareto front by sorting.

* :func:`chunk_plan`: the grid's rows in chunks of about ``chunk_rows`` rows (``screen.chunk_rows``),
  each holding whole architectures (every batch size of a network), so batch-monotone predictions
  (:func:`carb.model.monotone.monotone_in_batch`, which predict each architecture at the model's batch
  knots) see the same rows whatever the chunking and memory stays bounded by the chunk;
* :func:`interp_rows`: ``np.interp(x, xp[i][finite], fp[finite])`` for every row ``i`` at once, the same
  numbers (:func:`carb.analysis.decisions.prob_within` read a million CDFs one Python call at a time);
* :class:`ChunkPool` / :func:`parallel_chunks`: the chunks in worker processes (spawned, one thread each,
  started before the chunks exist), results in order;
* :func:`pareto_mask`: the non-dominated rows, O(n log n) in 2-D (sort and running minimum) and a
  sort-filter skyline in more dimensions (each point compared only with the front found so far).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from carb.design.candidates import arch_codes, arch_knobs


def chunk_plan(features: pd.DataFrame, chunk_rows: int | None, knots: int = 0) -> list[np.ndarray]:
    """Row positions (0-based) of each chunk of ``features``: one chunk (``arange(n)``) when ``chunk_rows``
    is None or at least the rows; else rows grouped by architecture (knob columns other than
    ``batch_size``; first-seen order, rows of one architecture in their order; the architectures of one network,
    its precisions, side by side, so a worker computes its layer shapes once), cut between architectures
    once a chunk holds ``chunk_rows`` of weight (a row weighs 1, an architecture ``knots`` more: the rows
    a batch-monotone prediction adds). An architecture with more rows than ``chunk_rows`` stays whole."""
    n = len(features)
    if not chunk_rows or n <= int(chunk_rows):
        return [np.arange(n)]
    keys = arch_knobs(features)
    codes, _ = arch_codes(features, keys) if keys else (np.arange(n), None)
    net_keys = [k for k in keys if k != "precision"]     # a network's precisions side by side: one chunk walks
    net = arch_codes(features, net_keys)[0] if net_keys and len(net_keys) < len(keys) else codes   # its layers once
    order = np.lexsort((np.arange(n), codes, net))     # by network, architecture, then row
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])   # first row of each arch
    sizes = np.diff(np.r_[starts, n]) + int(knots)
    cum = np.cumsum(sizes)
    chunks, lo, base = [], 0, 0
    while lo < len(starts):
        hi = int(np.searchsorted(cum, base + int(chunk_rows), side="right"))
        hi = max(hi, lo + 1)                          # at least one architecture per chunk
        end = starts[hi] if hi < len(starts) else n
        chunks.append(order[starts[lo]:end])
        base, lo = cum[hi - 1], hi
    return chunks


_MODELS: tuple = ()   # a worker process's models (set once by _init_worker)


def _init_worker(blob: bytes) -> None:
    """Worker set-up: unpickle the models once, every library at one thread (the workers are the
    parallelism: nested threads would multiply). The OpenMP and BLAS runtimes are loaded by the
    unpickling (LightGBM, XGBoost, scikit-learn), so :func:`carb.compute.one_thread_process` runs after
    it (threadpoolctl limits only runtimes already loaded): a limit set before left LightGBM and the
    histogram boosters at every core, two workers on two cores then ran four threads and spun (1M
    candidates: 44 CPU-s of prediction against 36)."""
    import pickle

    global _MODELS
    from carb.compute import one_thread_process

    _MODELS = pickle.loads(blob)
    one_thread_process()   # after the unpickling, which loads the runtimes it must limit
    for model in _MODELS:
        for stage in (getattr(model, "stages_", None) or {}).values():
            for est in getattr(getattr(stage, "model", None), "members_", {}).values():
                if "n_jobs" in getattr(est, "get_params", dict)():
                    est.set_params(n_jobs=1)


def _run_chunk(fn: Callable, part: pd.DataFrame, args: tuple) -> Any:
    return fn(_MODELS, part, *args)


def _ready() -> None:
    """A task that returns at once: submitting one per worker makes the pool start them all now."""


class ChunkPool:
    """``workers`` spawned processes that hold ``models`` (pickled to each once, every library at one thread
    there: :func:`_init_worker`), started when the pool is made, so their start-up (spawn, imports, the
    models' unpickling: about a second) runs beside the caller's own set-up before the chunks exist.
    :meth:`map` runs chunks in order; :meth:`close` ends the workers without waiting for their exit (they
    are idle then: a worker's orderly exit took 0.4-1 s, in which the caller's last serial steps waited).
    Spawned, not forked: a forked child of a process whose OpenMP runtime has started threads may hang in
    its first parallel region. Use it as a context manager (closed on exit, also on an error)."""

    def __init__(self, models: tuple, workers: int) -> None:
        import multiprocessing as mp
        import pickle
        from concurrent.futures import ProcessPoolExecutor

        self.models = models
        self.workers = int(workers)
        blob = pickle.dumps(models, protocol=pickle.HIGHEST_PROTOCOL)
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                         initializer=_init_worker, initargs=(blob,))
        for _ in range(self.workers):    # one spawn per submit while no worker is idle: all start now
            self._pool.submit(_ready)

    def map(self, fn: Callable, parts: list[pd.DataFrame], args: tuple,
            progress: Callable[[str, float], None] | None = None) -> list[Any]:
        """``[fn(models, part, *args) for part in parts]`` in the workers, in the order of ``parts``
        (``fn``: a module-level function). ``progress(label, share)`` is called as each chunk's result
        arrives (``share``: its fraction of the rows)."""
        from concurrent.futures import as_completed

        out: list[Any] = [None] * len(parts)
        total = max(1, sum(len(p) for p in parts))
        futures = {self._pool.submit(_run_chunk, fn, p, args): i for i, p in enumerate(parts)}
        for done, fut in enumerate(as_completed(futures), start=1):
            out[futures[fut]] = fut.result()
            if progress is not None:
                n = len(parts[futures[fut]])
                progress(f"chunk {done}/{len(parts)} done ({n} candidates, {self.workers} workers)", n / total)
        return out

    def close(self) -> None:
        """Cancel what has not started and end the workers now (SIGTERM: they hold nothing to save); returns
        when the pool's own thread has reaped them."""
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        manager = getattr(self._pool, "_executor_manager_thread", None)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        if manager is not None:
            manager.join(timeout=10)     # it joins the (dead) workers: no second reaper racing it

    def __enter__(self) -> "ChunkPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def parallel_chunks(fn: Callable, models: tuple, parts: list[pd.DataFrame], args: tuple, workers: int,
                    progress: Callable[[str, float], None] | None = None) -> list[Any]:
    """``[fn(models, part, *args) for part in parts]`` in ``workers`` spawned processes (a
    :class:`ChunkPool` made for this call), in the order of ``parts``; ``progress`` as :meth:`ChunkPool.map`."""
    with ChunkPool(models, workers) as pool:
        return pool.map(fn, parts, args, progress)


def interp_rows(x: float, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """``np.interp(x, xp[i][ok], fp[ok])`` for each row ``i`` of ``xp`` (n, k), ``ok = isfinite(xp[i])``,
    ``fp`` (k,); NaN for a row without a finite entry. Rows whose finite entries are one run and
    non-decreasing (the CDF knots of :func:`carb.analysis.decisions.prob_within`) are computed at once,
    with numpy's rules (ends held flat, a tie takes the value at its last entry); any other row by
    ``np.interp`` itself. Returns shape (n,)."""
    xp = np.asarray(xp, dtype=float)
    fp = np.asarray(fp, dtype=float)
    n, k = xp.shape
    out = np.full(n, np.nan)
    if n == 0 or k == 0:
        return out
    fin = np.isfinite(xp)
    cnt = fin.sum(axis=1)
    first = np.where(cnt > 0, fin.argmax(axis=1), 0)
    last = first + cnt - 1
    col = np.arange(k)
    run = (col >= first[:, None]) & (col <= last[:, None])
    filled = np.where(col < first[:, None], -np.inf, np.where(col > last[:, None], np.inf, xp))
    with np.errstate(invalid="ignore"):
        ordered = (filled[:, 1:] >= filled[:, :-1]).all(axis=1)
    fast = (cnt > 0) & (run == fin).all(axis=1) & ordered
    rows = np.flatnonzero(fast)
    if len(rows):
        f = filled[rows]
        j = (f <= x).sum(axis=1) - 1                  # last entry <= x (the -inf ones count)
        fr, la = first[rows], last[rows]
        left = j < fr                                  # x below the first finite entry
        jc = np.clip(j, 0, k - 1)
        j1 = np.minimum(jc + 1, k - 1)
        xj, xj1 = f[np.arange(len(rows)), jc], f[np.arange(len(rows)), j1]
        with np.errstate(invalid="ignore", divide="ignore"):
            slope = (fp[j1] - fp[jc]) / (xj1 - xj)
            mid = slope * (x - xj) + fp[jc]
        val = np.where(left, fp[fr], np.where(jc >= la, fp[la], np.where(xj == x, fp[jc], mid)))
        out[rows] = val
    for i in np.flatnonzero(~fast & (cnt > 0)):
        ok = fin[i]
        out[i] = float(np.interp(x, xp[i][ok], fp[ok]))
    return out


def pareto_mask(values: np.ndarray, block: int = 4096) -> np.ndarray:
    """Boolean mask of the non-dominated rows of ``values`` (n x d, all minimized): a row is dominated
    when another is <= on every axis and < on one (exact duplicates do not dominate each other, so both
    stay on the front).

    d = 1: the rows at the minimum. d = 2: sort by (x, y); a row is on the front iff every row before its
    group of duplicates has a larger y (running minimum), O(n log n). d >= 3: sort-filter skyline: in
    lexicographic order no row is dominated by a later one, so each block of rows is compared with the
    front found so far and within itself; O(n x front)."""
    v = np.asarray(values, dtype=float)
    if v.ndim == 1:
        v = v.reshape(-1, 1)
    n, d = v.shape
    if n == 0:
        return np.zeros(0, dtype=bool)
    if d == 1:
        col = v[:, 0]
        return col == col.min()
    order = np.lexsort(v[:, ::-1].T)                   # by axis 0, then 1, ...
    s = v[order]
    mask = np.zeros(n, dtype=bool)
    if d == 2:
        new_group = np.r_[True, (s[1:] != s[:-1]).any(axis=1)]
        group_start = np.maximum.accumulate(np.where(new_group, np.arange(n), 0))
        prefix_min = np.r_[np.inf, np.fmin.accumulate(s[:, 1])[:-1]]   # min y of the rows before each
        mask[order] = prefix_min[group_start] > s[:, 1]
        return mask
    front = np.zeros((0, d))
    for start in range(0, n, block):
        b = s[start:start + block]
        keep = ~_dominated_by(b, front)
        cand = b[keep]
        inner = ~_dominated_by(cand, cand)
        idx = np.flatnonzero(keep)[inner]
        mask[order[start + idx]] = True
        front = np.vstack([front, cand[inner]])
    return mask


def _dominated_by(points: np.ndarray, by: np.ndarray) -> np.ndarray:
    """(len(points),) whether some row of ``by`` is <= a point on every axis and < on one."""
    if len(by) == 0 or len(points) == 0:
        return np.zeros(len(points), dtype=bool)
    out = np.zeros(len(points), dtype=bool)
    step = max(1, 4_000_000 // max(1, len(by) * points.shape[1]))
    for i in range(0, len(points), step):
        p = points[i:i + step]
        le = (by[None, :, :] <= p[:, None, :]).all(axis=2)
        lt = (by[None, :, :] < p[:, None, :]).any(axis=2)
        out[i:i + step] = (le & lt).any(axis=1)
    return out

