"""A combined model (ResNet and zoo rows of one device, ``input_kind_ == "mixed"``) end to end as a user uses it
(issue 43, items 3 and 6): ``carb.load_model(uri).predict`` and MLflow's own pyfunc take ResNet knobs, zoo names
or one frame holding both kinds of rows and return the same frame, the logged signature says which columns
it reads (none required where a row names its network by one kind or the other), ``mlflow models serve``
answers a mixed REST query; ``carb.analysis.assess`` reads the model's kinds from its identity, not ResNet
columns. Synthetic targets on real traced networks (tests/synthetic.py), never a measurement."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.predictor import Predictor, ServedModel, is_mixed_frame, knob_example, served_inputs
from carb.design.identity import architecture_unit, kinds_of_input, row_kinds
from carb.errors import ConfigError

SMALL = {"xgb": {"n_estimators": 20, "max_depth": 3}, "lgbm": {"n_estimators": 20, "num_leaves": 7},
         "et": {"n_estimators": 10}}
TARGETS = ["peak_memory_MB", "latency_ms"]


@pytest.fixture(scope="module")
def combined():
    """Synthetic ResNet rows and synthetic zoo rows of one (synthetic) CPU, as one dataset."""
    from tests.synthetic import synthetic_dataset, zoo_schema_frame

    zoo = zoo_schema_frame(models=("tv:squeezenet1_1", "tv:mobilenet_v3_small", "tv:shufflenet_v2_x0_5",
                                   "tv:mnasnet0_5", "tv:resnet18"), sizes=(32, 64), batches=(1, 4, 16))
    res = synthetic_dataset(120, seed=3, energy=False, telemetry=False)
    res = res[(res["input_size"] <= 96) & (res["batch_size"] <= 16)
              & res["depth"].isin([14, 18, 34, 50, 101, 152])].reset_index(drop=True)
    res["stages"] = pd.NA
    for c in ("device_name", "device_kind", "device_id"):
        res[c] = zoo[c].iloc[0]
    return pd.concat([res, zoo], ignore_index=True)


@pytest.fixture(scope="module")
def model(combined):
    """One cascade fitted on both kinds, split-conformal intervals on a quarter of the rows."""
    from carb.model.cascade import CarbCascade
    from carb.model.intervals import calibrate

    cal = combined.sample(frac=0.25, random_state=0)
    train = combined.drop(index=cal.index).reset_index(drop=True)
    m = CarbCascade(specialists=SMALL, oof_folds=2, probe_estimators=15, n_jobs=1).fit(train, train[TARGETS])
    m.intervals_ = calibrate(m, cal, cal[TARGETS])
    assert m.input_kind_ == "mixed"
    return m


@pytest.fixture(scope="module")
def registered(model, combined, tmp_path_factory):
    """The combined cascade logged and registered as carb-train logs it (ServedModel, its knob example and
    :func:`served_inputs`) in a fresh store."""
    from carb import tracking

    uri = f"sqlite:///{tmp_path_factory.mktemp('mixed-store')}/mlflow.db"
    with tracking.start_run("train", "mixed", uri):
        info = tracking.log_cascade(ServedModel(model, quiet=True), knob_example(model, combined),
                                    registered_name="carb-mixed-test", inputs=served_inputs(model))
    return {"uri": uri, "model": f"models:/carb-mixed-test/{info['version']}"}


KNOBS = pd.DataFrame({"block": ["basic", "bottleneck", "basic"], "depth": [18, 50, 34],
                      "width_mult": [1.0, 0.5, 0.75], "input_size": [64, 32, 96], "batch_size": [4, 2, 1],
                      "precision": ["fp32", "bf16", "fp32"]})
NAMES = pd.DataFrame({"model_name": ["tv:resnet18", "tv:mobilenet_v3_small"], "input_size": [32, 64],
                      "batch_size": [4, 1], "precision": ["fp32", "bf16"]})
#: Both kinds in one frame, interleaved: each row names its network by one kind's columns, the other's null.
MIXED = pd.concat([KNOBS, NAMES], ignore_index=True).iloc[[0, 3, 1, 4, 2]].reset_index(drop=True)


def test_kinds_of_a_combined_model_come_from_its_identity():
    assert kinds_of_input("mixed") == ("resnet", "zoo") and kinds_of_input("zoo") == ("zoo",)
    assert kinds_of_input("resnet") == ("resnet",)
    assert architecture_unit("mixed") == "family" == architecture_unit("zoo")
    assert architecture_unit("resnet") == "architecture"


def test_a_mixed_frame_is_predicted_row_by_row_in_its_order(model):
    """One frame of both kinds: each row as its own kind's frame alone predicts it, in the frame's order."""
    p = Predictor(model, "models:/combined@test")
    assert is_mixed_frame(MIXED) and not is_mixed_frame(KNOBS) and not is_mixed_frame(NAMES)
    out = p.predict(MIXED)
    knobs, names = p.predict(KNOBS), p.predict(NAMES)
    assert len(out) == len(MIXED) and list(out.index) == list(MIXED.index)
    assert list(row_kinds(out)) == ["resnet", "zoo", "resnet", "zoo", "resnet"]
    for col in ("pred_latency_ms", "hi_peak_memory_MB", "in_domain"):
        np.testing.assert_array_equal(out.loc[[0, 2, 4], col].to_numpy(), knobs[col].to_numpy())
        np.testing.assert_array_equal(out.loc[[1, 3], col].to_numpy(), names[col].to_numpy())
    assert list(out.loc[[1, 3], "model_name"]) == list(NAMES["model_name"])
    assert out.attrs["model_uri"] == "models:/combined@test"
    bad = MIXED.copy()
    bad.loc[2, "block"] = None
    with pytest.raises(ConfigError, match=r"rows 2: name no network"):
        p.predict(bad)


def test_missing_stages_in_a_string_column_are_the_named_layout():
    """A knob frame whose ``stages`` is a pandas string column with ``<NA>`` (a parquet file of both kinds read
    back, or MLflow's schema enforcement of a ``stages: null`` REST query) takes the depth's named layout; it was
    "boolean value of NA is ambiguous"."""
    from carb.design.candidates import records_frame

    f = pd.DataFrame({"block": ["basic", "basic"], "depth": [18, 20],
                      "stages": pd.array([pd.NA, "3-3-3"], dtype="string")})
    out = records_frame(f, "knobs")
    assert list(out["stages"]) == ["2-2-2-2", "3-3-3"]


def test_the_signature_says_what_a_combined_model_reads(registered):
    """The logged signature names the zoo name, the ResNet identity columns and the run knobs, none required;
    the old one was inferred from ResNet knobs alone, every one required, so names were refused."""
    import mlflow

    from carb import tracking

    tracking.configure(registered["uri"])
    pyfunc = mlflow.pyfunc.load_model(registered["model"])
    schema = pyfunc.metadata.get_input_schema()
    assert schema.input_names() == ["model_name", "block", "depth", "width_mult", "inner_mult", "stages",
                                    "early_downsample", "input_size", "batch_size", "precision"]
    assert schema.required_input_names() == []


@pytest.mark.parametrize("frame", ["knobs", "names", "mixed"])
def test_mlflow_pyfunc_of_a_combined_model_returns_carbs_frame(registered, frame):
    """MLflow's own client takes what carb.load_model takes (knobs, names, a mixed frame) and returns its frame."""
    from tests.test_zoo_model import pyfunc_beside_carb

    X = {"knobs": KNOBS, "names": NAMES, "mixed": MIXED}[frame]
    out, ref = pyfunc_beside_carb(registered, X)
    for c in ("pred_latency_ms", "lo_latency_ms", "hi_peak_memory_MB"):
        np.testing.assert_allclose(out[c].to_numpy(float), ref[c].to_numpy(float))
    assert list(out["in_domain"]) == list(ref["in_domain"])


def test_a_zoo_models_run_knobs_are_optional_in_its_signature(tmp_path):
    """A zoo model's signature requires the name alone (its run knobs have defaults), so a frame of names
    passes MLflow's schema check."""
    from carb.analysis.predictor import ZOO_DEFAULTS

    class Zoo:
        input_kind_ = "zoo"

    spec = served_inputs(Zoo())
    assert spec[0] == ("model_name", "string", True)
    assert {c for c, _, req in spec if not req} == set(ZOO_DEFAULTS)
    res = served_inputs(type("R", (), {"input_kind_": "resnet"})())   # ResNet: block and depth required
    assert [c for c, _, req in res if req] == ["block", "depth"]
    assert {c: typ for c, typ, _ in res}["inner_mult"] == "double" and len(res) == 10


def test_sanity_of_a_combined_model_covers_its_zoo_networks(model, monkeypatch):
    """``assess.sanity_metrics`` of a combined model predicts the ResNet grid and its own zoo networks (it
    predicted the ResNet grid alone, as for a ResNet model: the zoo rows were never checked)."""
    import carb.analysis.extrapolation as ex
    from carb.analysis import assess

    grids = []
    real = ex.sanity_report

    def spy(m, grid, tol=1e-9):
        grids.append(grid)
        return real(m, grid, tol)

    monkeypatch.setattr(ex, "sanity_report", spy)
    out = assess.sanity_metrics(model, "smoke")
    assert [set(row_kinds(g)) for g in grids] == [{"resnet"}, {"zoo"}]
    assert set(grids[1]["model_name"]) == set(model.domain_["models"]) and len(model.domain_["models"]) == 5
    assert out["sanity_n"] == sum(len(g) for g in grids)
    assert out["sanity_memory_below_params"] >= 0


def test_worst_sanity_takes_the_worse_kind():
    from carb.analysis.assess import worst_sanity

    out = worst_sanity([{"sanity_n": 10.0, "sanity_latency_ms_batch_violations": 0.1, "x": float("nan")},
                        {"sanity_n": 4.0, "sanity_latency_ms_batch_violations": 0.25, "x": 0.5}])
    assert out == {"sanity_n": 14.0, "sanity_latency_ms_batch_violations": 0.25, "x": 0.5}


@pytest.mark.slow
def test_mlflow_models_serve_answers_a_mixed_rest_query(registered, tmp_path):
    """``mlflow models serve`` (local env) on the registered combined model answers one REST query holding
    ResNet knob rows and zoo name rows (null where a row's kind has no such column)."""
    import json

    from tests.test_zoo_model import serve_and_query

    body = json.loads(MIXED.to_json(orient="split", index=False))
    rows = serve_and_query(registered, tmp_path, {"dataframe_split": body})
    assert [r.get("model_name") for r in rows][1::2] == list(NAMES["model_name"])
    assert [r.get("block") for r in rows][0::2] == list(KNOBS["block"])
    assert all(r["pred_latency_ms"] > 0 for r in rows)


@pytest.mark.slow
def test_carb_train_on_a_combined_folder_registers_a_model_mlflow_serves_by_name(combined, tmp_path):
    """``carb-train data.path=<folder of both kinds>`` as a user runs it: the registered version's signature is the
    combined one, MLflow's pyfunc answers knobs, names and a mixed frame as carb.load_model does, the memory
    intervals carry the configured floor and the sanity check covered the zoo networks too."""
    import mlflow

    import carb
    from carb import tracking
    from carb.commands.cli import compose
    from carb.commands.train import run_train
    from carb.data.io import save_dataset

    folder = tmp_path / "data"
    folder.mkdir()
    res = combined["block"].notna()
    save_dataset(combined[res].drop(columns=["model_name", "family"], errors="ignore"), folder / "resnet.parquet")
    from carb.design.identity import RESNET

    save_dataset(combined[~res].drop(columns=list(RESNET.identity), errors="ignore"), folder / "zoo.parquet")
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    r = run_train(compose("train", [
        f"data.path={folder}", f"tracking.uri={uri}", f"paths.output_dir={tmp_path}/out", "model=carb_fast",
        "model.specialists.xgb.n_estimators=15", "model.specialists.lgbm.n_estimators=15",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=15", "model.n_jobs=1",
        "print_table=false", "evaluate.figures=false", "evaluate.lobo.enabled=false",
        "evaluate.extrapolation.enabled=false", "evaluate.architecture_intervals.folds=2",
        "evaluate.sanity.space=smoke", "evaluate.memory_floor.min_log=0.001", "evaluate.refits.workers=1",
        "register=true"]))
    model_uri = f"models:/{r['registered_name']}/{r['version']}"
    loaded = carb.load_model(model_uri, tracking_uri=uri)
    assert loaded.input_kind_ == "mixed" and loaded.intervals_["peak_memory_MB"]["floor_log"] == 0.001
    from carb.analysis.assess import zoo_sanity_grid
    from carb.analysis.screening import featurize
    from carb.design.space import load_space

    n_grids = len(featurize(load_space("smoke"))) + len(zoo_sanity_grid(loaded.cascade))
    tracking.configure(uri)
    assert int(mlflow.get_run(r["run_id"]).data.params["sanity_n"]) == n_grids   # the ResNet grid and the zoo networks
    pyfunc = mlflow.pyfunc.load_model(model_uri)
    assert pyfunc.metadata.get_input_schema().required_input_names() == []
    for X in (KNOBS, NAMES, MIXED):
        out, ref = pyfunc.predict(X), loaded.predict(X)
        assert list(out.columns) == list(ref.columns)
        np.testing.assert_allclose(out["pred_latency_ms"].to_numpy(float), ref["pred_latency_ms"].to_numpy(float))
        hi, p = ref["hi_peak_memory_MB"].to_numpy(float), ref["pred_peak_memory_MB"].to_numpy(float)
        assert (hi >= p * np.exp(0.001) * (1 - 1e-12)).all()


def test_a_calibrated_combined_model_is_served_as_carb_load_model_serves_it(registered, combined, tmp_path):
    """``carb-calibrate`` of the combined model on K rows of another (synthetic) CPU registers a transferred model
    whose MLflow pyfunc takes knobs, names and a mixed frame as carb.load_model does; it was logged with the
    signature MLflow inferred from its example (every column required: names alone refused)."""
    import mlflow

    import carb
    from carb import tracking
    from carb.commands.calibrate import run_calibrate
    from carb.commands.cli import compose
    from carb.data.io import save_dataset

    b = combined.copy()
    b["latency_ms"] *= 1.7
    b["device_name"], b["device_id"], b["device_fingerprint"] = "Synthetic CPU B", "synthetic-bbbbbbbb", '{"name": "B"}'
    save_dataset(b, tmp_path / "b.parquet")
    res = run_calibrate(compose("calibrate", [f"tracking.uri={registered['uri']}", f"source={registered['model']}",
                                              f"data.path={tmp_path}/b.parquet", "k=12",
                                              f"paths.output_dir={tmp_path}/out", "progress.enabled=false"]))
    uri = f"models:/{res['registered_name']}/{res['version']}"
    tracking.configure(registered["uri"])
    pyfunc = mlflow.pyfunc.load_model(uri)
    assert pyfunc.metadata.get_input_schema().required_input_names() == []
    loaded = carb.load_model(uri, tracking_uri=registered["uri"])
    for X in (KNOBS, NAMES, MIXED, KNOBS[["block", "depth"]]):
        out, ref = pyfunc.predict(X), loaded.predict(X)
        assert list(out.columns) == list(ref.columns) and len(out) == len(X)
        np.testing.assert_allclose(out["pred_latency_ms"].to_numpy(float), ref["pred_latency_ms"].to_numpy(float))
