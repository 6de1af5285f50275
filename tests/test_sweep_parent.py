"""A multirun's parent run (issue 15 item 1): one per sweep even when parallel jobs race to make it,
none on a read-only store, and a real `-m` of carb-import grouped under `import/sweep/<id>`."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow
import pytest

from carb import tracking

DATA = Path(__file__).parent / "data" / "import"


@pytest.fixture
def uri(tmp_path):
    u = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    tracking.configure(u)
    tracking._SWEEP_PARENTS.clear()
    yield u
    tracking._SWEEP_PARENTS.clear()


def _parents(client: mlflow.MlflowClient, kind: str, sid: str) -> list:
    exp = client.get_experiment_by_name(tracking.EXPERIMENTS[kind]).experiment_id
    return client.search_runs([exp], f"tags.`carb.sweep_parent` = 'true' and tags.sweep = '{sid}'")


def test_jobs_racing_to_make_the_parent_keep_one(uri, monkeypatch):
    """A job of another process that searched before the first parent existed makes a second one,
    sees the older one and deletes its own: both jobs end under the first parent."""
    sid = f"2026-12-04_05-00-00-{uuid.uuid4().hex[:6]}-multirun"
    with tracking.start_run("train", "job0", uri, sweep={"sweep": sid, "sweep_overrides": "a=1", "sweep_job": "0"}) as r0:
        pass
    tracking._SWEEP_PARENTS.clear()                      # another process: nothing cached
    real, calls = tracking.sweeps._first_sweep_parent, []

    def late(*args):                                     # its first search ran before the parent existed
        calls.append(args)
        return None if len(calls) == 1 else real(*args)

    monkeypatch.setattr(tracking.sweeps, "_first_sweep_parent", late)
    with tracking.start_run("train", "job1", uri, sweep={"sweep": sid, "sweep_overrides": "a=2", "sweep_job": "1"}) as r1:
        pass
    assert len(calls) == 2
    client = mlflow.MlflowClient()
    (parent,) = _parents(client, "train", sid)
    assert parent.info.status == "FINISHED" and parent.info.run_name == f"train/sweep/{sid}"
    assert {client.get_run(r).data.tags["mlflow.parentRunId"] for r in (r0, r1)} == {parent.info.run_id}
    assert parent.data.tags["job.0"] == "a=1" and parent.data.tags["job.1"] == "a=2"


def test_no_parent_on_a_read_only_store(uri, monkeypatch, capsys):
    """carb-screen on a read-only store runs unlogged: no sweep parent, no run at all."""
    sid = f"ro-{uuid.uuid4().hex[:6]}-multirun"
    with tracking.start_run("screen", "warm", uri) as rid:  # the experiment exists, as on a shared store
        pass
    monkeypatch.setattr(tracking.runs, "store_read_only", lambda _uri: True)
    with tracking.start_run("screen", "s", uri, sweep={"sweep": sid, "sweep_overrides": "b=1", "sweep_job": "0"}) as none:
        assert none == ""
    assert "read-only" in capsys.readouterr().err
    client = mlflow.MlflowClient()
    assert _parents(client, "screen", sid) == []
    exp = client.get_experiment_by_name(tracking.EXPERIMENTS["screen"]).experiment_id
    assert [r.info.run_id for r in client.search_runs([exp])] == [rid]


def test_no_parent_outside_a_multirun(uri):
    """No sweep tags, or those of a plain run (empty id): no parent run, no parentRunId."""
    ids = []
    for sweep in ({}, {"sweep": "", "sweep_overrides": ""}):
        with tracking.start_run("import", "one", uri, sweep=sweep) as rid:
            ids.append(rid)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(tracking.EXPERIMENTS["import"]).experiment_id
    assert client.search_runs([exp], "tags.`carb.sweep_parent` = 'true'") == []
    assert all("mlflow.parentRunId" not in client.get_run(r).data.tags for r in ids)


def test_a_real_import_multirun_is_one_group(tmp_path):
    """`carb-import -m importer.gpu=...,...` (two jobs in one process, Hydra's basic launcher): one
    FINISHED parent import/sweep/<time>-multirun, both job runs its children with their overrides."""
    db = tmp_path / "m.db"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "1"}
    r = subprocess.run([sys.executable, "-m", "carb.import_data", "-m", "importer.gpu=RTX 5090,RTX 4090",
                        f"importer.path={DATA / 'timm_small.csv'}", f"out={tmp_path}/out.parquet",
                        f"tracking.uri=sqlite:///{db}", f"paths.output_dir={tmp_path}/outputs"],
                       check=False, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    client = mlflow.MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name(tracking.EXPERIMENTS["import"]).experiment_id
    runs = client.search_runs([exp])
    parents = [x for x in runs if x.data.tags.get("carb.sweep_parent") == "true"]
    kids = [x for x in runs if x not in parents]
    assert len(parents) == 1 and len(kids) == 2
    (p,) = parents
    sid = p.data.tags["sweep"]
    assert sid.endswith("-multirun") and p.info.run_name == f"import/sweep/{sid}" and p.info.status == "FINISHED"
    assert p.data.tags["carb.kind"] == "import"
    assert all(k.data.tags["mlflow.parentRunId"] == p.info.run_id and k.data.tags["sweep"] == sid for k in kids)
    assert sorted(k.data.tags["sweep_job"] for k in kids) == ["0", "1"]
    note = p.data.tags["mlflow.note.content"]
    assert "5090" in note and "4090" in note and {"job.0", "job.1"} <= set(p.data.tags)
    # run names say what differs between the jobs (the swept value, Hydra's escaped space undone)
    names = sorted(k.info.run_name for k in kids)
    assert names[0] != names[1] and all(n.startswith("import/timm/") for n in names), names
    assert any(n.endswith("gpu=RTX 5090") for n in names) and any(n.endswith("gpu=RTX 4090") for n in names), names
