"""carb.tracking against a temporary SQLite store: experiments per kind, tags/params/metrics as stored,
flattening and truncation, the flock-guarded set-up of a fresh store by two processes at once, run
search by tags, the model registry round trip (log, alias, versions, resolve, load) and one-line
ModelErrors for URIs that do not resolve.

A fresh SQLite store costs one schema migration (several seconds on a disk), so the module shares one
store. It is created by two worker processes racing on the fresh file (the parallel-workers case the
lock exists for); the first test to ask for it pays that set-up once.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")

import mlflow  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from carb import tracking  # noqa: E402
from carb.data.schema import TARGETS  # noqa: E402
from carb.errors import CarbError, ModelError  # noqa: E402
from carb.files import lock_path  # noqa: E402
from carb.model.baselines import FlopsLinear  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402

#: A worker that waits until the other one has imported everything, then opens a run on the store.
_WORKER = r"""
import json, sys, time
from pathlib import Path

uri, me, other = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
from carb import tracking
import mlflow  # noqa: F401  (imported before the barrier, so both workers set the store up together)

me.touch()
t0 = time.time()
while not other.exists():
    if time.time() - t0 > 120:
        sys.exit("the other worker never started")
    time.sleep(0.005)
with tracking.start_run("collect", me.name, uri, tags={"worker": me.name}) as run_id:
    tracking.log_metrics({"worker_id": float(me.name[-1])})
print(json.dumps({"run_id": run_id}))
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING")}
    env.pop("MLFLOW_RUN_ID", None)
    env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="1",
               MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR="false", PYTHONWARNINGS="ignore")
    return env


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One SQLite store for the module, set up by two processes on the fresh file at the same time.
    Returns the uri, the db path and what each worker reported (asserted in the concurrency test)."""
    d = tmp_path_factory.mktemp("tracking")
    db = d / "mlruns" / "mlflow.db"
    uri = f"sqlite:///{db}"
    script = d / "worker.py"
    script.write_text(_WORKER)
    flags = [d / "w1", d / "w2"]
    procs = [subprocess.Popen([sys.executable, str(script), uri, str(me), str(other)], cwd=d, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, other in (flags, flags[::-1])]
    workers = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        workers.append({"rc": p.returncode, "stdout": out, "stderr": err})
    tracking.configure(uri)
    return {"uri": uri, "db": db, "dir": d, "workers": workers}


@pytest.fixture
def uri(store):
    tracking.configure(store["uri"])
    return store["uri"]


def _client() -> mlflow.MlflowClient:
    return mlflow.MlflowClient()


def _one_line(err: BaseException) -> str:
    msg = str(err)
    assert msg.strip() and "\n" not in msg, repr(msg)
    return msg


# --------------------------------------------------------------------------- store set-up

def test_two_processes_set_up_a_fresh_store_at_once(store):
    """Both workers succeed on the fresh file (without the lock one of them dies on the schema
    migration), both runs land in one experiment, and the lock file sits beside the database."""
    for w in store["workers"]:
        assert w["rc"] == 0, w["stderr"][-3000:]
        assert "Traceback" not in w["stderr"]
    ids = [json.loads(w["stdout"].strip().splitlines()[-1])["run_id"] for w in store["workers"]]
    assert len(set(ids)) == 2
    tracking.configure(store["uri"])
    exps = [e for e in _client().search_experiments() if e.name == tracking.EXPERIMENTS["collect"]]
    assert len(exps) == 1
    runs = {r: _client().get_run(r) for r in ids}
    assert {r.info.experiment_id for r in runs.values()} == {exps[0].experiment_id}
    assert sorted(r.data.metrics["worker_id"] for r in runs.values()) == [1.0, 2.0]
    assert lock_path(store["db"]).exists()


def test_artifact_root_for():
    assert tracking.artifact_root_for("sqlite:///some/dir/mlflow.db") == \
        (Path("some/dir").resolve() / "artifacts").as_uri()
    assert tracking.artifact_root_for("http://host:5000") is None
    assert tracking.artifact_root_for("http://host:5000", "elsewhere") == Path("elsewhere").resolve().as_uri()
    assert tracking.artifact_root_for("sqlite:///a/mlflow.db", "/x/y") == Path("/x/y").as_uri()


# --------------------------------------------------------------------------- runs

def test_no_empty_default_experiment(tmp_path):
    """A fresh store shows only CARB's experiments: MLflow's empty "Default" is deleted at set-up."""
    uri = f"sqlite:///{tmp_path}/fresh.db"
    with tracking.start_run("train", "r", uri):
        pass
    client = mlflow.MlflowClient(uri)
    assert [e.name for e in client.search_experiments()] == [tracking.EXPERIMENTS["train"]]
    assert client.get_experiment("0").lifecycle_stage == "deleted"     # restorable, not destroyed


def test_start_run_files_the_run_under_its_kind(uri, store):
    tags = {"device": "Dev A", "n_rows": 3}
    with tracking.start_run("train", "dev-a/full", uri, tags=tags) as rid:
        assert tracking.active_run_id() == rid
    assert tracking.active_run_id() is None
    run = _client().get_run(rid)
    exp = _client().get_experiment(run.info.experiment_id)
    assert exp.name == tracking.EXPERIMENTS["train"]
    # new experiments store artifacts beside the SQLite file
    assert exp.artifact_location == (store["db"].parent / "artifacts" / exp.name).as_uri()
    assert run.info.run_name == "dev-a/full" and run.info.status == "FINISHED"
    assert run.data.tags["carb.kind"] == "train"
    assert run.data.tags["device"] == "Dev A" and run.data.tags["n_rows"] == "3"   # stringified
    assert run.data.tags["git_commit"]
    with tracking.start_run("screen", "s", uri) as rid2:
        pass
    with tracking.start_run("brand-new", "b", uri) as rid3:
        pass
    with tracking.start_run("train", "elsewhere", uri, experiment="carb-test-elsewhere") as rid4:
        pass
    names = {r: _client().get_experiment(_client().get_run(r).info.experiment_id).name
             for r in (rid2, rid3, rid4)}
    assert names == {rid2: "carb-screen", rid3: "carb-brand-new", rid4: "carb-test-elsewhere"}
    assert _client().get_run(rid4).data.tags["carb.kind"] == "train"


def test_failed_block_marks_the_run_failed(uri):
    with pytest.raises(RuntimeError), tracking.start_run("train", "boom", uri) as rid:
        raise RuntimeError("boom")
    assert _client().get_run(rid).info.status == "FAILED"
    assert tracking.active_run_id() is None


def test_nested_parent_and_resumed_runs(uri):
    with tracking.start_run("tune", "study", uri) as parent:
        with tracking.start_run("tune", "trial-0", uri, nested=True) as child:
            tracking.log_metrics({"val_mae": 1.5})
        assert tracking.active_run_id() == parent
    assert _client().get_run(child).data.tags["mlflow.parentRunId"] == parent
    # a worker in another process attaches its trials to the study's parent by id
    with tracking.start_run("tune", "trial-1", uri, parent_run_id=parent) as other:
        pass
    assert _client().get_run(other).data.tags["mlflow.parentRunId"] == parent
    # resuming a run logs into the same run
    with tracking.start_run("tune", "ignored", uri, run_id=child) as again:
        tracking.log_metrics({"test_mae": 2.5})
    assert again == child
    assert _client().get_run(child).data.metrics == {"val_mae": 1.5, "test_mae": 2.5}


def test_sweep_jobs_nest_under_one_finished_parent_run(uri):
    sid = f"2026-12-04/05-{uuid.uuid4().hex[:6]}"
    kids = []
    for job, ov in enumerate(("features=full", "features=arch_only")):
        with tracking.start_run("train", f"dev/{ov}", uri, sweep={"sweep": sid, "sweep_overrides": ov,
                                                                  "sweep_job": str(job)}) as rid:
            kids.append(rid)
    tracking._SWEEP_PARENTS.clear()          # a second process finds the parent through the store
    with tracking.start_run("train", "dev/no_util", uri, sweep={"sweep": sid, "sweep_overrides": "features=no_util",
                                                                "sweep_job": "2"}) as rid:
        kids.append(rid)
    exp = _client().get_experiment_by_name(tracking.EXPERIMENTS["train"]).experiment_id
    parents = _client().search_runs([exp], f"tags.`carb.sweep_parent` = 'true' and tags.sweep = '{sid}'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED" and parent.info.run_name == f"train/sweep/{sid}"
    assert all(_client().get_run(k).data.tags["mlflow.parentRunId"] == parent.info.run_id for k in kids)
    assert all(_client().get_run(k).data.tags["sweep"] == sid for k in kids)
    note = parent.data.tags["mlflow.note.content"]
    assert all(ov in note for ov in ("features=full", "features=arch_only", "features=no_util"))
    assert parent.data.tags["job.1"] == "features=arch_only"
    # outside a multirun: no parent
    with tracking.start_run("train", "single", uri, sweep={"sweep": "", "sweep_overrides": ""}) as one:
        pass
    assert "mlflow.parentRunId" not in _client().get_run(one).data.tags


def test_find_runs_by_tags(uri):
    marker = uuid.uuid4().hex[:8]
    ids = {}
    for name, tags in (("a1", {"device": f"a-{marker}", "split": "x"}),
                       ("a2", {"device": f"a-{marker}", "split": "y"}),
                       ("b1", {"device": f"b-{marker}", "split": "x"})):
        with tracking.start_run("characterize", name, uri, tags=tags) as rid:
            ids[name] = rid
        time.sleep(0.005)                     # distinct start times: "oldest first" is well defined
    assert tracking.find_runs("characterize", {"device": f"a-{marker}"}) == [ids["a1"], ids["a2"]]
    assert tracking.find_runs("characterize", {"device": f"a-{marker}", "split": "y"}) == [ids["a2"]]
    assert tracking.find_runs("characterize", {"split": "x", "device": f"b-{marker}"}) == [ids["b1"]]
    assert tracking.find_runs("characterize", {"device": f"c-{marker}"}) == []
    # the runs are in the characterize experiment, not any other
    assert tracking.find_runs("screen", {"device": f"a-{marker}"}) == []
    assert tracking.find_runs("never-used-kind", {"device": f"a-{marker}"}) == []


# --------------------------------------------------------------------------- params and metrics

def test_flatten():
    nested = {"model": {"xgb": {"n_estimators": 15, "max_depth": 4}, "name": "carb"},
              "targets": ["energy_J"], "seed": 0, "empty": {}}
    assert tracking.flatten(nested) == {"model.xgb.n_estimators": 15, "model.xgb.max_depth": 4,
                                        "model.name": "carb", "targets": ["energy_J"], "seed": 0}
    assert tracking.flatten({"a": {"b": 1}}, prefix="screen.") == {"screen.a.b": 1}
    assert tracking.flatten({}) == {}


def test_log_params_flattens_stringifies_and_truncates(uri):
    n = tracking._MAX_PARAM_LEN
    long_text = "".join(chr(ord("a") + i % 26) for i in range(3 * n))
    long_list = list(range(n))                       # JSON longer than the limit
    params = {"model": {"name": "carb", "depth": 4, "targets": ["energy_J", "latency_ms"],
                        "blob": long_text, "big_list": long_list},
              "flag": True, "none": None,
              "many": {f"p{i:03d}": i for i in range(250)}}   # more than one batch of 100
    with tracking.start_run("train", "params", uri) as rid:
        tracking.log_params(params)
    got = _client().get_run(rid).data.params
    assert got["model.name"] == "carb" and got["model.depth"] == "4"
    assert got["model.targets"] == json.dumps(["energy_J", "latency_ms"])
    assert got["model.blob"] == long_text[:n] and len(got["model.blob"]) == n
    assert got["model.big_list"] == json.dumps(long_list)[:n]
    assert got["flag"] == "True" and got["none"] == "None"
    # at most MAX_PARAMS params per run: the keys past it are in the artifact params_overflow.json
    assert len(got) == tracking.MAX_PARAMS == 60
    over = mlflow.artifacts.load_dict(f"runs:/{rid}/params_overflow.json")
    assert {**{k: got[k] for k in got if k.startswith("many.")}, **over} == {f"many.p{i:03d}": str(i) for i in range(250)}


def test_log_metrics_keeps_finite_numbers_only(uri):
    metrics = {"r2": 0.93, "n": 12, "np32": np.float32(2.5), "np64": np.float64(-1.25), "as_text": "3.5",
               "flag": True, "nan": float("nan"), "np_nan": np.nan, "inf": math.inf, "neg_inf": -math.inf,
               "none": None, "word": "fast", "list": [1, 2]}
    with tracking.start_run("train", "metrics", uri) as rid:
        logged = tracking.log_metrics(metrics)
        assert tracking.log_metrics({"nan_only": float("nan"), "none": None}) == {}
        tracking.log_metrics({"loss": 3.0}, step=0)
        tracking.log_metrics({"loss": 2.0}, step=1)
    expected = {"r2": 0.93, "n": 12.0, "np32": 2.5, "np64": -1.25, "as_text": 3.5, "flag": 1.0}
    assert logged == expected
    assert all(type(v) is float for v in logged.values())
    stored = _client().get_run(rid).data.metrics
    assert stored == {**expected, "loss": 2.0}
    history = _client().get_metric_history(rid, "loss")
    assert sorted((m.step, m.value) for m in history) == [(0, 3.0), (1, 2.0)]


def test_tags_artifacts_and_dataset_inputs(uri, tmp_path):
    from matplotlib.figure import Figure

    folder = tmp_path / "tables"
    folder.mkdir()
    (folder / "a.csv").write_text("x\n1\n")
    (folder / "b.md").write_text("# b\n")
    single = tmp_path / "note.txt"
    single.write_text("hello")
    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2], [3, 4])
    df = synthetic_dataset(12, seed=4)
    with tracking.start_run("characterize", "artifacts", uri) as rid:
        tracking.set_tags({"stage": 2, "device": "X"})
        tracking.log_artifact(folder, "tables")
        tracking.log_artifact(single)
        tracking.log_text("some text", "notes/readme.txt")
        tracking.log_dict({"a": 1, "b": [1, 2]}, "notes/summary.json")
        tracking.log_figure(fig, "figures/line.png")
        digest = tracking.log_dataset(df, "syn", source=tmp_path / "syn.parquet", targets="energy_J")
    c = _client()
    run = c.get_run(rid)
    assert run.data.tags["stage"] == "2" and run.data.tags["device"] == "X"

    def files(path=None):
        out = []
        for f in c.list_artifacts(rid, path):
            out += files(f.path) if f.is_dir else [f.path]
        return out

    assert sorted(files()) == ["figures/line.png", "note.txt", "notes/readme.txt", "notes/summary.json",
                               "tables/a.csv", "tables/b.md"]
    local = Path(c.download_artifacts(rid, "notes/summary.json", str(tmp_path / "dl")))
    assert json.loads(local.read_text()) == {"a": 1, "b": [1, 2]}
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1
    assert inputs[0].dataset.name == "syn" and inputs[0].dataset.digest == digest and digest
    assert {t.key: t.value for t in inputs[0].tags}.get("mlflow.data.context") == "training"


# --------------------------------------------------------------------------- registry

@pytest.fixture(scope="module")
def registry(store):
    """Two registered versions of a tiny model (B1 on synthetic rows), with a metric on each run."""
    tracking.configure(store["uri"])
    name = "carb-test-registry"
    df = synthetic_dataset(60, seed=11)
    X = df[["flops"]]
    out = {"name": name, "X": X, "runs": [], "models": []}
    for i, (rows, r2) in enumerate(((slice(0, 30), 0.5), (slice(30, 60), 0.8))):
        model = FlopsLinear().fit(df.iloc[rows], df.iloc[rows][list(TARGETS)])
        with tracking.start_run("train", f"registry-{i}", store["uri"]) as rid:
            tracking.log_metrics({"test_energy_J_r2": r2})
            info = tracking.log_cascade(model, X.head(3), registered_name=name,
                                        metadata={"device": f"dev-{i}", "preset": "tiny"})
        out["runs"].append(rid)
        out["models"].append(model)
        out.setdefault("infos", []).append(info)
    mlflow.end_run()
    return out


def test_log_cascade_registers_versions_with_metadata(uri, registry):
    name = registry["name"]
    assert [i["version"] for i in registry["infos"]] == ["1", "2"]
    assert all(i["registered_name"] == name and i["model_uri"] for i in registry["infos"])
    assert name in tracking.registered_models()
    c = _client()
    for i, v in enumerate(("1", "2")):
        mv = c.get_model_version(name, v)
        assert mv.run_id == registry["runs"][i]
        assert mv.tags["device"] == f"dev-{i}" and mv.tags["preset"] == "tiny"


def test_aliases_versions_and_resolution_round_trip(uri, registry):
    name, runs = registry["name"], registry["runs"]
    tracking.set_alias(name, "test-champion", "1")
    assert tracking.get_alias(name, "test-champion") == "1"
    tracking.set_alias(name, "test-champion", 2)          # moves; version may be an int
    tracking.set_alias(name, "test-previous", "1")
    assert tracking.get_alias(name, "test-champion") == "2"
    assert tracking.get_alias(name, "no-such-alias") is None
    assert tracking.get_alias("carb-no-such-model", "champion") is None
    versions = tracking.model_versions(name)
    assert [v["version"] for v in versions] == ["1", "2"]
    assert [v["run_id"] for v in versions] == runs
    assert [v["metrics"]["test_energy_J_r2"] for v in versions] == [0.5, 0.8]
    assert tracking.model_versions("carb-no-such-model") == []
    assert tracking.resolve_version(f"models:/{name}@test-champion") == \
        {"name": name, "version": "2", "run_id": runs[1]}
    assert tracking.resolve_version(f"models:/{name}/1") == {"name": name, "version": "1", "run_id": runs[0]}
    assert tracking.resolve_version(f"runs:/{runs[0]}/model") == {}
    assert tracking.resolve_version("/some/local/path") == {}
    with pytest.raises(ModelError) as ei:
        tracking.resolve_version(f"models:/{name}@no-such-alias")
    assert f"models:/{name}@no-such-alias" in _one_line(ei.value)
    with pytest.raises(ModelError) as ei:
        tracking.resolve_version(f"models:/{name}/99")
    _one_line(ei.value)


def test_model_versions_lists_each_versions_aliases(uri, registry):
    """model_versions() promises ``"aliases": [...]`` per version (what points at it)."""
    name = registry["name"]
    tracking.set_alias(name, "test-current", "2")
    tracking.set_alias(name, "test-old", "1")
    by_version = {v["version"]: set(v["aliases"]) for v in tracking.model_versions(name)}
    assert "test-current" in by_version["2"] and "test-current" not in by_version["1"]
    assert "test-old" in by_version["1"] and "test-old" not in by_version["2"]


def test_load_cascade_by_alias_version_and_run(uri, registry, store):
    name, runs, X = registry["name"], registry["runs"], registry["X"]
    tracking.set_alias(name, "test-load", "2")
    mlflow.set_tracking_uri(f"sqlite:///{store['dir']}/other/never.db")   # load_cascade re-points it
    by_alias = tracking.load_cascade(f"models:/{name}@test-load", tracking_uri=uri)
    assert mlflow.get_tracking_uri() == uri
    by_version = tracking.load_cascade(f"models:/{name}/1")
    by_run = tracking.load_cascade(f"runs:/{runs[1]}/model")
    assert by_alias.model_uri_ == f"models:/{name}@test-load"
    assert by_version.model_uri_ == f"models:/{name}/1"
    expected_v2 = registry["models"][1].predict(X)
    pd.testing.assert_frame_equal(by_alias.predict(X), expected_v2)
    pd.testing.assert_frame_equal(by_run.predict(X), expected_v2)
    pd.testing.assert_frame_equal(by_version.predict(X), registry["models"][0].predict(X))
    assert not by_version.predict(X).equals(expected_v2)   # the two versions are different models


@pytest.mark.parametrize("bad", ["models:/carb-no-such-model@champion", "models:/carb-no-such-model/3",
                                 "runs:/0123456789abcdef0123456789abcdef/model", "__LOCAL__"])
def test_load_cascade_of_an_unknown_uri_is_a_one_line_model_error(uri, bad, tmp_path):
    if bad == "__LOCAL__":
        bad = str(tmp_path / "no" / "model")
    with pytest.raises(ModelError) as ei:
        tracking.load_cascade(bad, tracking_uri=uri)
    msg = _one_line(ei.value)
    assert isinstance(ei.value, CarbError)
    assert repr(bad) in msg and uri in msg
    assert ei.value.__cause__ is None and ei.value.__suppress_context__   # raised `from None`


def test_one_default_store_whatever_the_working_directory(tmp_path):
    """The commands and carb.load_model use one default store (CARB_HOME, else the checkout): from
    another directory nothing is created in the working directory."""
    import subprocess
    import sys

    code = ("import carb, carb.tracking as t\n"
            "from carb.resources import default_tracking_uri\n"
            "print(default_tracking_uri())\n"
            "try:\n    carb.load_model('models:/nope@champion')\nexcept Exception as e:\n    print(e)\n")
    home = tmp_path / "home"
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run([sys.executable, "-c", code], cwd=work, capture_output=True, text=True,
                       env={**os.environ, "CARB_HOME": str(home)})
    uri, err = r.stdout.splitlines()[:2]
    assert uri == f"sqlite:///{home}/mlruns/mlflow.db"
    assert str(home) in err and list(work.iterdir()) == []
    r2 = subprocess.run([sys.executable, "-c", "from carb.resources import carb_home; print(carb_home())"],
                        cwd=work, capture_output=True, text=True, env={k: v for k, v in os.environ.items() if k != "CARB_HOME"})
    assert r2.stdout.strip() == str(Path(__file__).resolve().parent.parent)   # the source checkout


def test_a_tracking_server_that_is_down_fails_fast_in_one_line():
    import time as _t

    from carb.errors import TrackingError

    t0 = _t.perf_counter()
    with pytest.raises(TrackingError) as e:
        tracking.configure("http://127.0.0.1:9")
    assert _t.perf_counter() - t0 < 15 and "no MLflow server answers" in str(e.value) and "\n" not in str(e.value)


def test_a_read_only_store_can_be_read(tmp_path, monkeypatch):
    """An existing store whose folder nobody may write (shared read-only, so the lock file cannot be
    created): reading works without the lock; a missing store in such a folder is one line."""
    from contextlib import contextmanager

    from carb.errors import TrackingError

    uri = f"sqlite:///{tmp_path}/ro/mlflow.db"
    tracking.configure(uri)

    @contextmanager
    def read_only(path):
        raise PermissionError(13, "Permission denied", str(path) + ".lock")
        yield  # pragma: no cover

    monkeypatch.setattr(tracking.store, "locked", read_only)
    tracking._INITIALIZED.clear()
    tracking.configure(uri)
    assert tracking.model_versions("nothing") == []
    with pytest.raises(TrackingError, match="not writable and holds no store"):
        tracking.configure(f"sqlite:///{tmp_path}/other/mlflow.db")
