"""Tuning (Optuna), promotion (registry aliases) and loading registered cascades.

Synthetic rows come from tests/synthetic.py (test-only). Sizes are tiny so the whole file stays fast.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pandas as pd
import pytest

from carb import load_model, tracking
from carb.commands.cli import compose
from carb.data.io import save_dataset
from carb.errors import ConfigError, ModelError

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402

TINY = ["model.specialists.xgb.n_estimators=20", "model.specialists.lgbm.n_estimators=20",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=20",
        "tune.search_space.xgb.n_estimators.low=10", "tune.search_space.xgb.n_estimators.high=40",
        "tune.search_space.xgb.n_estimators.step=10",
        "tune.search_space.lgbm.n_estimators.low=10", "tune.search_space.lgbm.n_estimators.high=40",
        "tune.search_space.lgbm.n_estimators.step=10",
        "tune.search_space.et.n_estimators.low=10", "tune.search_space.et.n_estimators.high=30",
        "tune.search_space.et.n_estimators.step=10", "tune.pruner.n_warmup_steps=5",
        "tune.pruner.report_every=5", "model.n_jobs=1"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("tune")
    data = d / "syn.parquet"
    save_dataset(synthetic_dataset(160, seed=3, device_name="Synthetic GPU"), data)
    return {"dir": d, "data": str(data), "uri": f"sqlite:///{d}/mlflow.db", "storage": f"sqlite:///{d}/optuna.db"}


def _over(env, *extra):
    return [f"data.path={env['data']}", f"tracking.uri={env['uri']}", f"tune.storage={env['storage']}",
            f"paths.output_dir={env['dir']}/out", *extra]


@pytest.fixture(scope="module")
def study(env):
    from carb.commands.tune import run_tune

    cfg = compose("tune", _over(env, "tune.study=s3", "tune.n_trials=3", "tune.blend_trials=3", *TINY))
    return run_tune(cfg)


def test_three_trial_study(env, study):
    assert study["trials_run"] == 3 * 3 * 3 + 3 * 3  # 3 targets x (3 members + blend) x 3 trials
    for t in ("peak_memory_MB", "energy_J", "latency_ms"):
        s = optuna.load_study(study_name=f"s3.{t}.lgbm", storage=env["storage"])
        assert len(s.trials) == 3
        w = study["results"][f"s3.{t}.blend"]["weights"]
        assert len(w) == 3 and abs(sum(w) - 1) < 1e-9 and min(w) >= 0
    tracking.configure(env["uri"])
    parents = tracking.find_runs("tune", {"carb.study": "s3", "carb.role": "parent"})
    assert len(parents) == 1
    children = tracking.find_runs("tune", {"carb.study": "s3", "carb.role": "trial"})
    assert len(children) == study["trials_run"]


def test_search_space_errors(env):
    from carb.commands.tune import run_tune
    from carb.model.tuning import metric_fn

    with pytest.raises(ConfigError, match="tune.metric"):
        metric_fn("r2")
    cfg = compose("tune", _over(env, "tune.study=bad", "tune.members=[xgb,catboost]", *TINY))
    with pytest.raises(ConfigError, match="catboost"):
        run_tune(cfg)


@pytest.mark.slow
def test_two_workers_share_one_study(env):
    """The README's `carb-tune -m tune.worker=0,1 hydra/launcher=joblib` on one SQLite study."""
    cmd = [sys.executable, "-m", "carb.tune", "-m", "tune.worker=0,1", "hydra/launcher=joblib",
           "hydra.launcher.n_jobs=2", "tune.study=shared", "tune.n_trials=2", "tune.blend_trials=2",
           "tune.targets=[peak_memory_MB]", "tune.members=[lgbm,et]", "tune.log_trials=false",
           *_over(env), *TINY]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    for m in ("lgbm", "et", "blend"):
        s = optuna.load_study(study_name=f"shared.peak_memory_MB.{m}", storage=env["storage"])
        numbers = [t.number for t in s.trials]
        assert len(numbers) == 4 and len(set(numbers)) == 4  # 2 workers x 2 trials, no duplicates
    assert out.stdout.count("worker 0") == 1 and out.stdout.count("worker 1") == 1


def test_train_tuned_promote_load(env, study):
    from carb.commands.promote import run_promote
    from carb.commands.train import run_train

    over = _over(env, "evaluate.lobo.enabled=false", "evaluate.figures=false", *TINY[:5])
    r1 = run_train(compose("train", [*over, "model=carb_fast"]))
    r2 = run_train(compose("train", [*over, "model=tuned", "tune.study=s3"]))
    assert r2["version"] == str(int(r1["version"]) + 1)
    tracking.configure(env["uri"])
    import mlflow

    run = mlflow.get_run(r2["run_id"])
    assert run.data.tags["tuned_study"] == "s3" and "blend_trial" in run.data.tags["tuned_trials"]
    pcfg = compose("promote", [f"tracking.uri={env['uri']}", f"promote.data={env['data']}"])
    first = run_promote(pcfg)
    assert first["changed"] and first["metric"] == "val_energy_J_mae"
    best = min((r1, r2), key=lambda r: r["metrics"]["val_energy_J_mae"])
    assert first["champion"] == best["version"]
    again = run_promote(pcfg)
    assert not again["changed"] and again["champion"] == first["champion"]
    model = load_model("models:/carb-synthetic-gpu@champion", tracking_uri=env["uri"])
    assert model.device_name_ == "Synthetic GPU" and set(model.test_mae_) == set(model.targets_)
    assert "small" in model.telemetry_medians_ and model.feature_names_
    by_version = load_model(f"models:/carb-synthetic-gpu/{first['champion']}", tracking_uri=env["uri"])
    by_run = load_model(f"runs:/{best['run_id']}/model", tracking_uri=env["uri"])
    X = synthetic_dataset(20, seed=9, device_name="Synthetic GPU")
    pd.testing.assert_frame_equal(model.predict(X), by_version.predict(X))
    pd.testing.assert_frame_equal(model.predict(X), by_run.predict(X))
    from carb.errors import DatasetError

    with pytest.raises(DatasetError, match="flops"):
        model.predict(X.drop(columns=["flops"]))
    # a better version appears: champion moves, the old one stays reachable as previous
    versions = tracking.model_versions("carb-synthetic-gpu")
    assert {v["version"] for v in versions} == {r1["version"], r2["version"]}


def test_load_errors(env, study):
    with pytest.raises(ModelError, match="carb-nope"):
        load_model("models:/carb-nope@champion", tracking_uri=env["uri"])
    with pytest.raises(ModelError, match="cannot load"):
        load_model("models:/carb-synthetic-gpu@no-such-alias", tracking_uri=env["uri"])
    with pytest.raises(ModelError):
        load_model("runs:/0123456789abcdef/model", tracking_uri=env["uri"])


def test_promote_refuses(env, tmp_path):
    from carb.commands.promote import choose, run_promote

    with pytest.raises(ModelError, match="no versions"):
        run_promote(compose("promote", [f"tracking.uri=sqlite:///{tmp_path}/empty.db", "promote.name=carb-x"]))
    with pytest.raises(ModelError, match="no version has"):
        choose([{"version": "1", "metrics": {}}], "val_energy_J_mae", "val_latency_ms_mae", "minimize")
    best, metric = choose([{"version": "1", "metrics": {"val_latency_ms_mae": 2.0}},
                           {"version": "2", "metrics": {"val_latency_ms_mae": 1.0}}],
                          "val_energy_J_mae", "val_latency_ms_mae", "minimize")
    assert best["version"] == "2" and metric == "val_latency_ms_mae"


def test_promote_moves_previous(env, study):
    from carb.commands.promote import run_promote

    tracking.configure(env["uri"])
    vs = tracking.model_versions("carb-synthetic-gpu")
    champ = tracking.get_alias("carb-synthetic-gpu", "champion")
    other = next(v["version"] for v in vs if v["version"] != champ) if champ else None
    if other is None:
        pytest.skip("needs the two versions of test_train_tuned_promote_load")
    tracking.set_alias("carb-synthetic-gpu", "champion", other)  # someone pinned a worse version
    r = run_promote(compose("promote", [f"tracking.uri={env['uri']}", f"promote.data={env['data']}"]))
    assert r["changed"] and r["champion"] == champ and r["previous"] == other
    assert tracking.get_alias("carb-synthetic-gpu", "previous") == other
