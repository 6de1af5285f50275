"""What a person sees of CARB's runs in MLflow (issue 31 item 4), read back through the MLflow client on a
temporary store: the experiments' kind (model training, not GenAI), run start and end times that are the
command's, at most 60 params with the whole config in ``config.yaml``, headline metrics grouped by prefix
and every metric in one table, screen runs named and tagged by what differs, with the grid as a dataset
input. One cheap train run (tiny synthetic data, the evaluation's refits off) and two screens of it."""
from __future__ import annotations

import json
import time

import mlflow
import pytest
import yaml
from synthetic import synthetic_dataset

from carb import tracking
from carb.commands.cli import compose, to_dict
from carb.data.io import save_dataset

TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=10", "model.specialists.xgb.max_depth=3",
        "model.specialists.lgbm.n_estimators=10", "model.specialists.lgbm.num_leaves=7",
        "model.specialists.et.n_estimators=5", "model.oof_folds=2", "model.probe_estimators=10",
        "model.correctors.model.max_iter=20", "model.n_jobs=1", "print_table=false", "progress.enabled=false",
        "evaluate.lobo.enabled=false", "evaluate.architecture_intervals.enabled=false", "evaluate.figures=false",
        "evaluate.sanity.enabled=false", "evaluate.extrapolation.min_rows=10"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlflowview")
    data = d / "syn.parquet"
    save_dataset(synthetic_dataset(120, seed=3, device_name="Synthetic GPU"), data)
    uri = f"sqlite:///{d}/mlruns/mlflow.db"
    tracking.configure(uri)          # the store's tables, made once for every test here (seconds)
    return {"dir": d, "data": str(data), "uri": uri}


@pytest.fixture(scope="module")
def train(env):
    """One carb-train run, timed from outside: ``(result, config, t0_ms, t1_ms)``."""
    from carb.commands.train import run_train

    cfg = compose("train", [f"data.path={env['data']}", f"tracking.uri={env['uri']}",
                            f"paths.output_dir={env['dir']}/out", *TINY])
    t0 = time.time()
    r = run_train(cfg)
    t1 = time.time()
    return r, cfg, int(t0 * 1000), int(t1 * 1000)


def _screen(env, *extra):
    from carb.commands.screen import run_screen

    return run_screen(compose("screen", [f"tracking.uri={env['uri']}", "screen.target=models:/carb-synthetic-gpu/1",
                                         "space=smoke", f"paths.output_dir={env['dir']}/out",
                                         "progress.enabled=false", *extra]))


def _run(env, run_id):
    tracking.configure(env["uri"])
    return mlflow.MlflowClient().get_run(run_id)


def test_experiments_open_in_the_model_training_view(env):
    """New experiments carry mlflow.experimentKind=custom_model_development; one made before (no kind) gets
    it the first time CARB uses it; the UI address asks for the Machine learning view."""
    uri = env["uri"]
    tracking.configure(uri)
    client = mlflow.MlflowClient()
    old = client.create_experiment("carb-older", tags={"mlflow.note.content": "made by an older CARB"})
    assert "mlflow.experimentKind" not in client.get_experiment(old).tags
    with tracking.start_run("train", "new", uri):
        pass
    with tracking.start_run("train", "old", uri, experiment="carb-older"):
        pass
    for name in ("carb-train", "carb-older"):
        assert client.get_experiment_by_name(name).tags["mlflow.experimentKind"] == "custom_model_development"
    assert tracking.experiment_url("carb-older") == (f"http://127.0.0.1:5000/#/experiments/{old}/runs"
                                                      "?workflowType=machine_learning")


def test_a_run_starts_when_its_command_started_and_ends_when_it_finished(env):
    """A command marks its start (check_config does, first thing); its run, opened seconds later, starts
    there; the next run without a mark starts when it is opened."""
    uri = env["uri"]
    tracking.command_started(time.time() - 30)
    with tracking.start_run("train", "marked", uri, experiment="carb-times") as rid:
        opened = int(time.time() * 1000)
    run = _run(env, rid)
    assert opened - run.info.start_time >= 29_000 and run.info.end_time >= opened
    with tracking.start_run("train", "unmarked", uri, experiment="carb-times") as rid2:
        pass
    assert _run(env, rid2).info.start_time >= opened


def test_sweep_parent_spans_its_jobs(env):
    """A multirun's parent run starts with its first job's command and ends with its last job."""
    uri = env["uri"]
    tracking._SWEEP_PARENTS.clear()
    sweep = {"sweep": "s1", "sweep_overrides": "a=1", "sweep_job": "0"}
    t0 = time.time()
    tracking.command_started(t0 - 5)
    with tracking.start_run("train", "job0", uri, sweep=sweep, experiment="carb-sweeps"):
        pass
    tracking.command_started()
    with tracking.start_run("train", "job1", uri, sweep={**sweep, "sweep_overrides": "a=2", "sweep_job": "1"},
                            experiment="carb-sweeps") as r1:
        time.sleep(0.05)
    client = mlflow.MlflowClient()
    job1 = client.get_run(r1)
    parent = client.get_run(job1.data.tags["mlflow.parentRunId"])
    tracking._SWEEP_PARENTS.clear()
    assert parent.info.start_time <= int((t0 - 5) * 1000) + 1
    assert parent.info.end_time >= job1.info.end_time and parent.info.status == "FINISHED"


def test_log_params_caps_and_log_config_keeps_everything(env):
    uri = env["uri"]
    config = {"model": {"name": "carb", "xgb": {f"k{i}": i for i in range(80)}}, "seed": 0}
    with tracking.start_run("train", "cfg", uri, experiment="carb-config") as rid:
        tracking.log_config(config, tracking.select_params(config, ["model.name", "model.xgb.k1?", "seed"]))
    run = _run(env, rid)
    assert run.data.params == {"model.name": "carb", "seed": "0", **{f"model.xgb.k1{i}": str(10 + i) for i in range(10)}}
    assert yaml.safe_load(mlflow.artifacts.load_text(f"runs:/{rid}/config.yaml")) == config


def test_train_run_times_params_config_and_metrics(env, train):
    r, cfg, t0, t1 = train
    run = _run(env, r["run_id"])
    # the run's times are the command's: it opened when the fit was done, but starts when run_train began
    assert t0 <= run.info.start_time <= t0 + 1500, (run.info.start_time - t0)
    assert t1 - 1500 <= run.info.end_time <= t1
    assert run.info.end_time - run.info.start_time >= 0.9 * (t1 - t0)
    # at most 60 params: what a person compares; the whole config in config.yaml
    p = run.data.params
    assert 20 <= len(p) <= tracking.MAX_PARAMS, len(p)
    assert p["model.name"] == "carb_fast" and p["features.name"] == "full" and p["split.seed"] == str(cfg.split.seed)
    assert p["data.path"] == env["data"] and p["model.specialists.xgb.n_estimators"] == "10"
    assert "model.specialists.xgb.subsample" not in p and not [k for k in p if k.startswith(("tune.", "progress."))]
    logged = yaml.safe_load(mlflow.artifacts.load_text(f"runs:/{r['run_id']}/config.yaml"))
    assert logged == yaml.safe_load(yaml.safe_dump(to_dict(cfg)))
    assert logged["model"]["specialists"]["xgb"]["subsample"] == cfg.model.specialists.xgb.subsample
    # headline metrics grouped by prefix (MLflow's chart sections split on '/'); every metric in one table
    m = run.data.metrics
    assert len(m) <= 60 and all("/" in k for k in m), sorted(m)
    for t in ("peak_memory_MB", "energy_J", "latency_ms"):
        assert {f"test/{t}_r2", f"test/{t}_mae", f"val/{t}_mae", f"vs_b1/{t}_r2", f"interval/test_{t}_coverage",
                f"extrap/min_{t}_r2"} <= set(m)
    table = mlflow.MlflowClient().load_table(run.info.experiment_id, "metrics.json", run_ids=[r["run_id"]])
    assert list(table.columns[:6]) == ["metric", "section", "split", "target", "measure", "value"]
    every = dict(zip(table["metric"], table["value"]))
    assert every == pytest.approx(r["metrics"], rel=1e-12) and len(every) > 3 * len(m)
    assert {"path": "metrics.json", "type": "table"} in json.loads(run.data.tags["mlflow.loggedArtifacts"])
    assert m["test/latency_ms_r2"] == pytest.approx(every["test_latency_ms_r2"])
    xr = [v for k, v in every.items() if k.startswith("xval_") and k.endswith("_latency_ms_r2") and "_b1_" not in k]
    assert m["extrap/min_latency_ms_r2"] == pytest.approx(min(xr))
    row = table[table["metric"] == "test_low_batch_latency_ms_r2"].iloc[0]
    assert (row["section"], row["split"], row["target"], row["measure"]) == ("test", "low_batch", "latency_ms", "r2")


def test_promote_reads_prefixed_metrics_under_their_flat_names(env, train):
    """carb-promote's metric names (val_energy_J_mae) still find a version logged as val/energy_J_mae."""
    r = train[0]
    tracking.configure(env["uri"])
    (v,) = tracking.model_versions(r["registered_name"])
    assert v["metrics"]["val_energy_J_mae"] == v["metrics"]["val/energy_J_mae"] == pytest.approx(
        r["metrics"]["val_energy_J_mae"])
    assert v["metrics"]["fit_total_s"] == v["metrics"]["time/fit_total_s"]


def test_screen_runs_say_what_differs(env, train):
    """Two screenings of one model with another budget and objective: different names and tags, the
    resolved target and objective as params (never None), the grid as a dataset input."""
    a = _screen(env, "screen.budget.latency_ms=50")
    b = _screen(env, "screen.budget.energy_J=5", "screen.objective=latency_ms_per_image")
    ra, rb = _run(env, a["run_id"]), _run(env, b["run_id"])
    assert ra.info.run_name == "synthetic-gpu-screen-v1/latency_ms<=50/energy_J/smoke-8"
    assert rb.info.run_name == "synthetic-gpu-screen-v1/energy_J<=5/latency_ms_per_image/smoke-8"
    for run, objective, budget in ((ra, "energy_J", "latency_ms<=50"), (rb, "latency_ms_per_image", "energy_J<=5")):
        tags, p = run.data.tags, run.data.params
        assert (tags["grid"], tags["grid_rows"], tags["objective"], tags["budget"]) == ("smoke", "8", objective, budget)
        assert tags["target_model"] == "models:/carb-synthetic-gpu/1" and tags["target_version"] == "1"
        assert p["screen.target"] == "models:/carb-synthetic-gpu/1" and p["screen.objective"] == objective
        assert "None" not in p.values() and len(p) <= tracking.MAX_PARAMS and p["space.name"] == "smoke"
        (inp,) = run.inputs.dataset_inputs
        assert inp.dataset.name == "smoke" and "space/smoke.yaml" in inp.dataset.source
        assert [t.value for t in inp.tags if t.key == "mlflow.data.context"] == ["candidates"]
        assert "depth" in inp.dataset.schema and "flops" not in inp.dataset.schema
        config = yaml.safe_load(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/config.yaml"))
        assert config["screen"]["objective"] == objective and config["space"]["name"] == "smoke"
    assert float(ra.data.params["screen.budget.latency_ms"]) == 50 and "screen.budget.energy_J" not in ra.data.params
