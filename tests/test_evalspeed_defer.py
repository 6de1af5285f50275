"""carb-train's deferred evaluation (carb-quickstart shows its shortlist first): run_train(defer=True) leaves
the leave-one-batch-tier-out refit and the figures out of the run, finish_deferred logs them to it later,
and the registered version (what promote and the screen read) is complete without them."""
from __future__ import annotations

import mlflow
import pytest
from synthetic import synthetic_dataset

from carb import tracking
from carb.commands.cli import compose
from carb.data.io import save_dataset

TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=10", "model.specialists.xgb.max_depth=3",
        "model.specialists.lgbm.n_estimators=10", "model.specialists.lgbm.num_leaves=7",
        "model.specialists.et.n_estimators=5", "model.oof_folds=2", "model.correctors.model.max_iter=10",
        "print_table=false", "progress.enabled=false", "evaluate.extrapolation.enabled=false",
        "evaluate.sanity.enabled=false", "evaluate.architecture_intervals.folds=2", "evaluate.refits.workers=1"]


@pytest.mark.slow   # a fresh MLflow store and a registered model: 8 s near idle (the fast suite's quickstart test runs it too)
def test_deferred_evaluation_is_logged_to_the_same_run_after(tmp_path):
    from carb.commands.train import finish_deferred, run_train

    data = tmp_path / "syn.parquet"
    save_dataset(synthetic_dataset(160, seed=5, device_name="Synthetic GPU", energy=False), data)
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    cfg = compose("train", [f"data.path={data}", f"tracking.uri={uri}", f"paths.output_dir={tmp_path}/out", *TINY])
    out = run_train(cfg, defer=True)
    later = out["deferred"]
    assert later["parts"] == ["leave-one-batch-tier-out", "figures"] and later["run_id"] == out["run_id"]
    tracking.configure(uri)
    run = mlflow.get_run(out["run_id"])
    assert not [k for k in run.data.metrics if k.startswith("lobo")]
    assert "val/latency_ms_mae" in run.data.metrics                       # what promote compares is there
    client = mlflow.MlflowClient()
    table = _metric_table(client, out["run_id"], tmp_path / "before")
    assert any(m.startswith("interval_new_arch_") for m in table)          # what the screen reads too
    assert not [m for m in table if m.startswith("lobo_")]
    assert not [a for a in client.list_artifacts(out["run_id"]) if a.path == "figures"]

    added = finish_deferred(later)
    assert added["lobo_latency_ms_r2"] == added["lobo_latency_ms_r2"]   # a number, not NaN
    run = mlflow.get_run(out["run_id"])
    assert run.data.metrics["lobo/latency_ms_r2"] == added["lobo_latency_ms_r2"]
    assert _metric_table(client, out["run_id"], tmp_path / "after")["lobo_latency_ms_r2"] == added["lobo_latency_ms_r2"]
    assert run.info.status == "FINISHED"
    figures = [a.path for a in client.list_artifacts(out["run_id"], "figures")]
    assert "figures/pred_vs_measured.png" in figures
    assert [v["version"] for v in tracking.model_versions(out["registered_name"])] == ["1"]


def _metric_table(client, run_id: str, dest) -> dict[str, float]:
    """The run's ``metrics.json`` table as ``{metric: value}``."""
    import json

    dest.mkdir(parents=True, exist_ok=True)
    doc = json.loads(open(client.download_artifacts(run_id, "metrics.json", str(dest))).read())
    cols = doc["columns"]
    return {row[cols.index("metric")]: row[cols.index("value")] for row in doc["data"]}


def test_without_defer_nothing_is_left_for_later(tmp_path):
    from carb.commands.train import deferred_parts

    assert deferred_parts({"lobo": {"enabled": False}, "figures": False}) == {}
    assert list(deferred_parts({"lobo": {"enabled": True}, "figures": False})) == ["leave-one-batch-tier-out"]
