"""Screening's chunk workers run every library at one thread, including the OpenMP runtimes that only
load while the models are unpickled (two workers on two cores must not run four spinning threads)."""
from __future__ import annotations

import multiprocessing as mp
import pickle
from concurrent.futures import ProcessPoolExecutor

from carb.analysis.scale import _init_worker


def _openmp_threads() -> list[int]:
    from threadpoolctl import threadpool_info

    return [int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "openmp"]


def test_worker_openmp_runtimes_loaded_by_the_models_run_one_thread():
    from lightgbm import LGBMRegressor     # its unpickling loads LightGBM's OpenMP runtime in the worker

    blob = pickle.dumps((LGBMRegressor(n_estimators=2),))
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"), initializer=_init_worker,
                             initargs=(blob,)) as pool:
        threads = pool.submit(_openmp_threads).result(timeout=120)
    assert threads and max(threads) == 1
