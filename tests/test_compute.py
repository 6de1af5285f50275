"""Thread policy (carb/compute.py): never above the cores this process may use, one thread per
``rows_per_thread`` rows, fewer under load, ``compute.n_jobs`` overrides, BLAS limited inside fits."""
from __future__ import annotations

import pytest

from carb import compute
from carb.errors import ConfigError


@pytest.fixture(autouse=True)
def _restore():
    saved = dict(compute._SETTINGS)
    yield
    compute._SETTINGS.clear()
    compute._SETTINGS.update(saved)


def _machine(monkeypatch, cores: int, load: float, quota: float | None = None):
    monkeypatch.setattr(compute.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(compute.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(compute, "_cgroup_cores", lambda: quota)
    monkeypatch.setattr(compute, "runnable_now", lambda: None)    # the load average alone (tested below)


def test_auto_gives_one_thread_per_rows_per_thread_rows_up_to_the_free_cores(monkeypatch):
    _machine(monkeypatch, cores=8, load=0.0)
    compute.configure(n_jobs="auto", rows_per_thread=1000)
    assert compute.estimator_threads(1_350) == 2
    assert compute.estimator_threads(500) == 1
    assert compute.estimator_threads(10**6) == 8
    _machine(monkeypatch, cores=8, load=5.2)      # 4 other busy processes (own share excluded)
    assert compute.estimator_threads(10**6) == 4
    _machine(monkeypatch, cores=8, load=30.0)
    assert compute.estimator_threads(10**6) == 1


def test_a_lagging_load_average_counts_only_the_tasks_runnable_now(monkeypatch):
    _machine(monkeypatch, cores=2, load=1.9)      # a busy minute that has just ended
    monkeypatch.setattr(compute, "runnable_now", lambda: 1)       # only this process runs now
    assert compute.free_cores() == 2
    monkeypatch.setattr(compute, "runnable_now", lambda: 2)       # a competitor runs too
    assert compute.free_cores() == 1
    _machine(monkeypatch, cores=8, load=0.2)
    monkeypatch.setattr(compute, "runnable_now", lambda: 6)       # a momentary burst: the average wins
    assert compute.free_cores() == 8


def test_runnable_now_reads_this_machine():
    n = compute.runnable_now()
    assert n is None or n >= 1          # this test's own process is running


def test_cgroup_quota_and_explicit_n_jobs_are_capped(monkeypatch):
    _machine(monkeypatch, cores=16, load=0.0, quota=2.5)
    assert compute.available_cores() == 3
    compute.configure(n_jobs=64)
    assert compute.estimator_threads(10) == 3          # an explicit value never exceeds the cores
    assert compute.estimator_threads(10, n_jobs=2) == 2
    compute.configure(n_jobs=-1)
    assert compute._SETTINGS["n_jobs"] == "auto"


def test_defaults_give_small_data_one_thread_on_any_machine(monkeypatch):
    _machine(monkeypatch, cores=2, load=0.0)
    compute.configure(n_jobs="auto", rows_per_thread=50_000)
    assert compute.estimator_threads(1_350) == 1


def test_bad_n_jobs_names_the_field():
    for bad in ("two", -5, 1.5):
        with pytest.raises(ConfigError, match=r"compute.n_jobs: .* is not allowed; use auto \(also -1 or 0\) or an integer >= 1"):
            compute.configure(n_jobs=bad)


def test_schema_and_library_take_the_same_n_jobs_values():
    """One rule: the config schema accepts exactly what the library accepts, with the same result."""
    from pydantic import ValidationError

    from carb.commands.schema.groups import Compute

    for ok, want in (("auto", "auto"), (None, "auto"), (-1, "auto"), (0, "auto"), ("3", 3), (2, 2)):
        assert compute.parse_n_jobs(ok) == want
        assert Compute(n_jobs=ok, rows_per_thread=1, blas_threads=1).n_jobs == want
    for bad in ("two", -5, 1.5):
        with pytest.raises(ValidationError, match="must be auto"):
            Compute(n_jobs=bad, rows_per_thread=1, blas_threads=1)


def test_blas_is_limited_inside_and_restored_after():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import numpy  # noqa: F401  (loads OpenBLAS)

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    with compute.limited():
        assert all(n == 1 for n in blas_threads())
    assert blas_threads() == before


def test_ensemble_threads_follow_the_policy(monkeypatch):
    """A specialist ensemble fits with the policy's thread count: one per rows_per_thread rows, an explicit
    n_jobs capped at the cores."""
    import numpy as np

    from carb.model.ensemble import BlendedRegressor

    _machine(monkeypatch, cores=4, load=0.0)
    compute.configure(n_jobs="auto", rows_per_thread=100)
    X = np.random.default_rng(0).normal(size=(250, 3))
    y = np.exp(X[:, 0])
    small = {"n_estimators": 5}
    auto = BlendedRegressor(xgb=small, lgbm=small, et=small, log_target=False).fit(X, y)
    assert {m.get_params()["n_jobs"] for m in auto.members_.values()} == {3}
    capped = BlendedRegressor(xgb=small, lgbm=small, et=small, log_target=False, n_jobs=8).fit(X, y)
    assert {m.get_params()["n_jobs"] for m in capped.members_.values()} == {4}
