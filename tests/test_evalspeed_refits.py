"""The evaluation refits of carb-train (carb/analysis/refits.py): worker processes give the serial results,
run at one thread each, and one core runs them in this process; the lighter refit preset."""
from __future__ import annotations

import os

import numpy as np
import pytest

from carb.analysis import refits as R
from carb.errors import ConfigError
from carb.model.cascade import CarbCascade

EV = {"interval_coverage": 0.9, "lobo": {"enabled": True, "max_batch": 8},
      "extrapolation": {"enabled": True, "train_share": 0.7, "min_rows": 20},
      "architecture_intervals": {"enabled": True, "folds": 3}, "refits": {"light": True, "tree_share": 0.3}}


@pytest.fixture(scope="module")
def planned():
    """Three refits of a small cascade on physics rows (one of each kind: lobo, a split, a fold)."""
    from tests.test_physics import FAST, KNOB_FEATURES, physics_rows

    rows = physics_rows(120, seed=3)
    model = CarbCascade(features=KNOB_FEATURES, **FAST)
    targets = ["peak_memory_MB", "latency_ms"]
    tasks, plan = R.plan_refits(model, rows, rows, EV, targets, calibrated=True)
    kinds = {t.kind for t in tasks}
    assert kinds == {"lobo", "split", "arch"} and plan["arch"][0] == 3 and len(plan["splits"]) >= 2
    return [next(t for t in tasks if t.kind == k) for k in ("lobo", "split", "arch")]


def _same(a, b) -> None:
    """Equal results: dicts, lists, frames and arrays compared exactly (same seeds, same fits), fit times
    (``fit_s``) left out."""
    import pandas as pd

    if isinstance(a, dict):
        assert set(a) == set(b)
        for k in a:
            if k != "fit_s":
                _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    elif isinstance(a, str) or a is None or np.isscalar(a):
        assert a == b or (a is None and b is None)


def test_parallel_refits_give_the_serial_results(planned):
    with R.RefitRunner(1).start(planned) as serial:
        assert not serial.parallel
        one = serial.collect()
    with R.RefitRunner(2).start(planned) as pool:
        assert pool.parallel
        labels: list[str] = []
        two = pool.collect(progress=labels.append)
    assert set(one) == set(two) == {("lobo", 0), ("split", 0), ("arch", 0)}
    assert sorted(labels) == sorted(f"{t.label} (done)" for t in planned)
    assert one[("lobo", 0)].result["lobo_latency_ms_r2"] > 0.5      # a real refit, not an empty result
    assert one[("split", 0)].result["rows"] and one[("arch", 0)].result
    for key in one:
        _same(one[key].result, two[key].result)
        assert one[key].notes == two[key].notes


def threads_seen(note=None) -> dict:
    """A task: the thread counts inside the process that runs it."""
    return R.worker_threads()


def test_workers_fit_at_one_thread():
    from carb import compute

    compute.configure(n_jobs=2)      # the parent's setting must not leak into the workers
    try:
        with R.RefitRunner(2).start([R.Task("t", i, None, threads_seen) for i in range(2)]) as pool:
            seen = [d.result for d in pool.collect().values()]
    finally:
        compute.configure(n_jobs="auto")
    for s in seen:
        assert s["pid"] != os.getpid()
        assert s["estimator"] == 1
        assert s["openmp"] and set(s["openmp"]) == {1}
        assert set(s["blas"]) <= {1}


def test_one_core_runs_in_this_process(monkeypatch):
    """``auto`` = the available cores (single-thread workers share a busy core, they do not spin); one
    available core (or workers=1) runs the refits in this process."""
    monkeypatch.setattr(R, "available_cores", lambda: 2)
    assert R.refit_workers("auto", 11) == 2
    assert R.refit_workers(8, 11) == 2            # capped at the available cores
    assert R.refit_workers("auto", 1) == 1        # never more workers than tasks
    monkeypatch.setattr(R, "available_cores", lambda: 1)
    assert R.refit_workers("auto", 11) == 1
    with pytest.raises(ConfigError, match="evaluate.refits.workers"):
        R.refit_workers("many")
    with R.RefitRunner(R.refit_workers("auto", 2)).start([R.Task("t", i, f"t{i}", threads_seen)
                                                          for i in range(2)]) as runner:
        labels: list[str] = []
        seen = runner.collect(progress=labels.append)
    assert not runner.parallel and labels == ["t0", "t1"]
    assert {d.result["pid"] for d in seen.values()} == {os.getpid()}


def test_light_params_scale_trees_and_learning_rates():
    from tests.test_physics import FAST, KNOB_FEATURES

    params = CarbCascade(features=KNOB_FEATURES, **{**FAST, "specialists": {
        "xgb": {"n_estimators": 150, "learning_rate": 0.1}, "lgbm": {"n_estimators": 150, "learning_rate": 0.05},
        "et": {"n_estimators": 100}}, "per_target": {"latency_ms": {"xgb": {"n_estimators": 20}, "weights": [1, 0, 0]}},
        "correctors": {"model": {"max_iter": 100, "learning_rate": 0.05}}}).get_params(deep=False)
    light = R.light_params(params, tree_share=0.3, max_learning_rate=0.3)
    assert light["specialists"]["xgb"] == {"n_estimators": 45, "learning_rate": 0.3}          # 0.1 / 0.3, capped
    assert light["specialists"]["lgbm"] == {"n_estimators": 45, "learning_rate": pytest.approx(0.05 / 0.3)}
    assert light["specialists"]["et"] == {"n_estimators": 30}
    assert light["per_target"]["latency_ms"] == {"xgb": {"n_estimators": 10}, "weights": [1, 0, 0]}  # min_trees
    assert light["correctors"]["model"]["max_iter"] == 30
    assert params["specialists"]["xgb"]["n_estimators"] == 150          # the model's own config is untouched
    model = R.refit_model(CarbCascade(**params), {"light": False})
    assert model.get_params(deep=False)["specialists"] == params["specialists"]
    with pytest.raises(ConfigError, match="tree_share"):
        R.light_params(params, tree_share=0.0)


def test_refit_settings_are_checked(tmp_path):
    from carb.commands.checks import check_config
    from carb.commands.cli import compose

    check_config("train", compose("train", ["evaluate.refits.workers=2", "evaluate.refits.tree_share=0.5"]))
    with pytest.raises(ConfigError, match="evaluate.refits.tree_share"):
        check_config("train", compose("train", ["evaluate.refits.tree_share=1.5"]))
    with pytest.raises(ConfigError, match="evaluate.refits.workers"):
        check_config("train", compose("train", ["evaluate.refits.workers=many"]))


SCRIPT = '''
import sys, warnings
import numpy as np
warnings.simplefilter("ignore")


def fit_small(note=None):
    """A task: a small LightGBM fit (an OpenMP parallel region) in the worker."""
    import lightgbm as lgb
    from carb.analysis import refits as R

    X = np.random.default_rng(1).random((2000, 8))
    lgb.LGBMRegressor(n_estimators=10, verbose=-1).fit(X, X.sum(1))
    return R.worker_threads()


def main():
    import lightgbm as lgb
    from carb.analysis import refits as R

    if sys.argv[1:] == ["fork"]:   # the old start method, to show the hang this guards against
        import multiprocessing
        R.worker_context = lambda: multiprocessing.get_context("fork")
    X = np.random.default_rng(0).random((4000, 16))
    lgb.LGBMRegressor(n_estimators=20, n_jobs=2, verbose=-1).fit(X, X.sum(1))   # this process's OpenMP pool
    with R.RefitRunner(2).start([R.Task("t", i, f"t{i}", fit_small) for i in range(2)]) as runner:
        seen = runner.collect()
    print("workers", sorted(d.result["estimator"] for d in seen.values()))


if __name__ == "__main__":
    main()
'''


def test_workers_start_clean_after_this_process_used_openmp(tmp_path):
    """A process that already ran a 2-thread LightGBM fit (a previous test, a multirun's previous job, a
    notebook) and then starts refit workers: forked from it, the workers hung in their first OpenMP call
    (LightGBM's Dataset construction, seen in the slow suite); from the fork server they run."""
    import subprocess
    import sys

    script = tmp_path / "refit_after_openmp.py"
    script.write_text(SCRIPT)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "OMP_NUM_THREADS": "2"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "workers [1, 1]" in r.stdout
