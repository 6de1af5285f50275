"""carb-train end to end: metrics, tags, figures, registered model round trip, ablation multirun, errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from carb import load_model
from carb.cli import compose
from carb.dataset import save_dataset
from carb.errors import DatasetError

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402

TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=20", "model.specialists.lgbm.n_estimators=20",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=20", "model.n_jobs=1"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    save_dataset(synthetic_dataset(220, seed=7), d / "syn.parquet")
    return {"dir": d, "data": str(d / "syn.parquet"), "uri": f"sqlite:///{d}/mlflow.db"}


@pytest.fixture(scope="module")
def trained(env):
    from carb.train import run_train

    return run_train(compose("train", [f"data.path={env['data']}", f"tracking.uri={env['uri']}", *TINY]))


def test_metrics_tags_figures(env, trained):
    m = trained["metrics"]
    for k in ("test_peak_memory_MB_r2", "test_energy_J_mae", "test_latency_ms_mape", "val_energy_J_mae",
              "lobo_latency_ms_r2", "b1_energy_J_r2", "b2_energy_J_mae", "budget_accuracy",
              "budget_false_accept_rate"):
        assert k in m, k
    assert m["test_peak_memory_MB_r2"] > m["b1_peak_memory_MB_r2"]
    run = mlflow.get_run(trained["run_id"])
    for tag in ("device", "feature_set", "preset", "dataset_digest", "git_commit"):
        assert run.data.tags.get(tag), tag
    assert run.info.run_name == "synthetic-gpu/full/carb_fast"
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(trained["run_id"], "figures")}
    assert {"figures/pred_vs_measured.png", "figures/importances.png",
            "figures/residuals_by_batch_tier.png"} <= arts
    assert len(run.inputs.dataset_inputs) == 1


def test_registered_model_round_trip(env, trained):
    by_version = load_model(f"models:/carb-synthetic-gpu/{trained['version']}", tracking_uri=env["uri"])
    by_run = load_model(f"runs:/{trained['run_id']}/model", tracking_uri=env["uri"])
    X = synthetic_dataset(30, seed=11)
    pd.testing.assert_frame_equal(by_version.predict(X), by_run.predict(X))
    # the stored test MAE is the number logged for the run
    assert by_version.test_mae_["energy_J"] == pytest.approx(trained["metrics"]["test_energy_J_mae"])
    import mlflow.pyfunc

    pyf = mlflow.pyfunc.load_model(f"models:/carb-synthetic-gpu/{trained['version']}")
    out = pyf.predict(X[by_version.input_columns_])
    assert list(out.columns) == ["pred_peak_memory_MB", "pred_energy_J", "pred_latency_ms"]


def test_reference_dataset_drops_energy(env):
    from carb.train import run_train

    r = run_train(compose("train", [f"tracking.uri={env['uri']}", "evaluate.lobo.enabled=false",
                                    "evaluate.figures=false", *TINY]))
    assert r["targets"] == ["peak_memory_MB", "latency_ms"] and "energy_J" in r["dropped_targets"]
    assert "val_latency_ms_mae" in r["metrics"] and "test_energy_J_mae" not in r["metrics"]
    assert r["registered_name"] == "carb-amd-epyc"


def test_too_few_rows(env, tmp_path):
    from carb.train import run_train

    save_dataset(synthetic_dataset(12, seed=1), tmp_path / "small.parquet")
    with pytest.raises(DatasetError, match="too few rows"):
        run_train(compose("train", [f"data.path={tmp_path}/small.parquet", f"tracking.uri={env['uri']}", *TINY]))


def test_ablation_multirun(env):
    cmd = [sys.executable, "-m", "carb.train", "-m", "features=full,no_util,arch_only", f"data.path={env['data']}",
           f"tracking.uri={env['uri']}", f"paths.output_dir={env['dir']}/out", "evaluate.lobo.enabled=false",
           "evaluate.figures=false", *TINY]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    mlflow.set_tracking_uri(env["uri"])
    runs = mlflow.search_runs(experiment_names=["carb-train"], output_format="list")
    names = {x.info.run_name for x in runs}
    assert {"synthetic-gpu/full/carb_fast", "synthetic-gpu/no_util/carb_fast",
            "synthetic-gpu/arch_only/carb_fast"} <= names
