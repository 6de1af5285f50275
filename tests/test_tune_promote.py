"""Tuning (Optuna), promotion (registry aliases) and loading registered cascades.

Synthetic rows come from tests/synthetic.py (test-only). Sizes are tiny so the whole file stays fast.
"""
from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import optuna
import pandas as pd
import pytest
from registry_store import one_model_store
from sizes import NO_EVALUATION
from synthetic import synthetic_dataset

from carb import load_model, tracking
from carb.commands.cli import compose
from carb.data.io import save_dataset
from carb.errors import ConfigError, ModelError

NAME = "carb-synthetic-gpu"   # registered name of the synthetic dataset's device
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


def test_tune_metrics_are_named_as_train_names_them(env, study):
    """One name for one thing: the tuned blend's validation MAE is val_<t>_mae as in carb-train, the base
    preset's val_<t>_mae_base, the best specialists' val_<t>_mae_<member>; trials log val_<t>_mae; the
    parent run has the split's train/val parts as inputs and the tuning durations."""
    import mlflow

    tracking.configure(env["uri"])
    parent = mlflow.get_run(tracking.find_runs("tune", {"carb.study": "s3", "carb.role": "parent"})[0])
    m = parent.data.metrics
    for t in ("peak_memory_MB", "energy_J", "latency_ms"):
        assert m[f"val_{t}_mae"] == pytest.approx(study["results"][f"s3.{t}.blend"]["value"])
        assert m[f"val_{t}_mae_base"] == pytest.approx(study["results"][f"base.{t}"]["value"])
        assert {f"val_{t}_mae_{w}" for w in ("xgb", "lgbm", "et")} <= set(m)
    assert not [k for k in m if k.startswith("best_val")]
    assert m["worker0_tune_s"] > 0 and m["worker0_base_fit_s"] > 0
    worse = set(study["worse"])
    assert set(filter(None, parent.data.tags.get("tuned_worse_than_base", "").split(","))) == worse
    inputs = {i.dataset.name: [t.value for t in i.tags] for i in parent.inputs.dataset_inputs}
    assert inputs == {"syn.train": ["training"], "syn.val": ["validation"]}
    trial = mlflow.get_run(tracking.find_runs("tune", {"carb.sub_study": "s3.latency_ms.xgb"})[0])
    assert set(trial.data.metrics) <= {"val_latency_ms_mae"}


def test_tuning_that_makes_a_model_worse_says_so():
    """A tuned blend worse than the base preset on validation is a warning line naming both values."""
    from carb.commands.tune import worse_lines, worse_targets

    res = {"base.latency_ms": {"value": 0.094}, "s.latency_ms.blend": {"value": 0.247},
           "base.energy_J": {"value": 2.0}, "s.energy_J.blend": {"value": 1.5}}
    worse = worse_targets(res, "s", ["latency_ms", "energy_J"])
    assert worse == {"latency_ms": (0.094, 0.247)}
    (line,) = worse_lines(worse, "mae", "carb_fast")
    assert line.startswith("carb-tune: warning: latency_ms: tuning made the model worse")
    assert "0.247 ms" in line and "0.094 ms" in line and "2.6x" in line and "model=carb_fast" in line


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

    over = _over(env, *NO_EVALUATION, *TINY[:5])
    pcfg = compose("promote", [f"tracking.uri={env['uri']}", f"promote.data={env['data']}"])
    r1 = run_train(compose("train", [*over, "model=carb_fast"]))
    first = run_promote(pcfg)                     # promote.name from the dataset's device
    assert first["changed"] and (first["champion"], first["previous"]) == (r1["version"], None)
    assert first["metric"] == "val_energy_J_mae" and first["value"] == r1["metrics"]["val_energy_J_mae"]
    r2 = run_train(compose("train", [*over, "model=tuned", "tune.study=s3"]))
    assert r2["version"] == str(int(r1["version"]) + 1)
    tracking.configure(env["uri"])
    import mlflow

    run = mlflow.get_run(r2["run_id"])
    assert run.data.tags["tuned_study"] == "s3" and "blend_trial" in run.data.tags["tuned_trials"]
    second = run_promote(pcfg)                    # the champion follows the lower validation energy MAE
    best = min((r1, r2), key=lambda r: (r["metrics"]["val_energy_J_mae"], -int(r["version"])))
    assert second["champion"] == best["version"] == tracking.get_alias(NAME, "champion")
    moved = best is r2                            # moved: the old champion stays reachable as previous
    assert second["changed"] == moved
    assert tracking.get_alias(NAME, "previous") == (r1["version"] if moved else None)
    again = run_promote(pcfg)
    assert not again["changed"] and again["champion"] == best["version"]
    model = load_model(f"models:/{NAME}@champion", tracking_uri=env["uri"])
    assert model.device_name_ == "Synthetic GPU" and set(model.test_mae_) == set(model.targets_)
    assert "small" in model.telemetry_medians_ and model.feature_names_
    by_version = load_model(f"models:/{NAME}/{best['version']}", tracking_uri=env["uri"])
    by_run = load_model(f"runs:/{best['run_id']}/model", tracking_uri=env["uri"])
    other = load_model(f"models:/{NAME}/{({r1['version'], r2['version']} - {best['version']}).pop()}",
                       tracking_uri=env["uri"])
    X = synthetic_dataset(20, seed=9, device_name="Synthetic GPU")
    pd.testing.assert_frame_equal(model.cascade.predict(X), by_version.cascade.predict(X))
    pd.testing.assert_frame_equal(model.cascade.predict(X), by_run.cascade.predict(X))
    assert not model.cascade.predict(X).equals(other.cascade.predict(X))       # the alias picks a specific version
    from carb.errors import DatasetError

    with pytest.raises(DatasetError, match="flops"):   # the cascade's own predict needs the features
        model.cascade.predict(X.drop(columns=["flops"]))


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


@pytest.fixture
def registry(tmp_path):
    """A fresh store holding one registered model whose versions carry only what promotion reads (their
    run's metrics; no training): ``registry.add(**metrics)`` registers the next version."""
    name = "carb-promote-test"
    uri, register = one_model_store(tmp_path, name, "train")

    def add(**metrics: float) -> str:
        return register(metrics=metrics)

    def promote() -> dict:
        from carb.commands.promote import run_promote

        return run_promote(compose("promote", [f"tracking.uri={uri}", f"promote.name={name}"]))

    def aliases() -> tuple[str | None, str | None]:
        return tracking.get_alias(name, "champion"), tracking.get_alias(name, "previous")

    return SimpleNamespace(uri=uri, name=name, add=add, promote=promote, aliases=aliases)


def test_promote_moves_champion_and_keeps_previous(registry):
    v1 = registry.add(val_energy_J_mae=2.0, val_latency_ms_mae=5.0)
    r = registry.promote()
    assert r["changed"] and (r["champion"], r["previous"]) == (v1, None)
    assert registry.aliases() == (v1, None)
    v2 = registry.add(val_energy_J_mae=1.0, val_latency_ms_mae=9.0)      # better energy: the champion moves
    r = registry.promote()
    assert r["changed"] and (r["champion"], r["previous"], r["value"]) == (v2, v1, 1.0)
    assert registry.aliases() == (v2, v1)
    v3 = registry.add(val_energy_J_mae=3.0, val_latency_ms_mae=0.1)      # worse energy: nothing moves
    r = registry.promote()
    assert not r["changed"] and r["champion"] == v2 and registry.aliases() == (v2, v1)
    tracking.set_alias(registry.name, "champion", v3)                   # someone pinned a worse version
    r = registry.promote()
    assert r["changed"] and (r["champion"], r["previous"]) == (v2, v3)
    assert registry.aliases() == (v2, v3)


def test_promote_falls_back_to_latency_without_energy(registry):
    """CPU models measure no energy: the fallback metric ranks them (lower latency MAE wins)."""
    registry.add(val_latency_ms_mae=4.0)
    v2 = registry.add(val_latency_ms_mae=2.0)
    r = registry.promote()
    assert r["metric"] == "val_latency_ms_mae" and r["champion"] == v2 and registry.aliases() == (v2, None)


def test_a_study_that_stopped_before_its_blend_is_named_as_such(tmp_path):
    """Issue 33 item 7: not "no tuned study 'z0' (known: ['z0'])" but what is missing and how to finish."""
    from carb.model.tuning import tuned_per_target

    url = f"sqlite:///{tmp_path}/optuna.db"
    optuna.create_study(study_name="z0.latency_ms.xgb", storage=url)
    with pytest.raises(ModelError, match=r"study 'z0' .* has no finished blend .*run carb-tune tune.study=z0 again"):
        tuned_per_target("z0", url)
    with pytest.raises(ModelError, match=r"no tuned study 'z1' .*known: \['z0'\]"):
        tuned_per_target("z1", url)
