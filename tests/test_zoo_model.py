"""A zoo network as a first-class input of the model (issue 43, items 3 and 6): the cascade fitted on zoo rows
reads the layer table's features (never ResNet knobs), its domain and new-architecture folds work by family, and
``carb.load_model(uri).predict`` takes an ``nn.Module``, a list of names or a frame with ``model_name``.
Synthetic targets on real traced networks (tests/synthetic.py), never a measurement."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.predictor import Predictor
from carb.design.zoo_features import ZOO_KIND_FEATURES
from carb.errors import ConfigError
from carb.model.cascade import CarbCascade
from carb.model.encoding import FULL_FEATURES, MODEL_KNOBS, features_for
from tests.synthetic import synthetic_dataset, zoo_schema_frame

SMALL = {"xgb": {"n_estimators": 20, "max_depth": 3}, "lgbm": {"n_estimators": 20, "num_leaves": 7},
         "et": {"n_estimators": 10}}
HELD_OUT = "tv:googlenet"   # its family (googlenet) is never in the training rows


@pytest.fixture(scope="module")
def zoo():
    return zoo_schema_frame()


TARGETS = ["peak_memory_MB", "latency_ms"]


def _make():
    return CarbCascade(specialists=SMALL, oof_folds=2, probe_estimators=15, n_jobs=1)


@pytest.fixture(scope="module")
def cascade(zoo):
    """Fitted on every family but googlenet's, split-conformal intervals on a fifth of the rows, and the
    new-architecture entry from folds that hold out whole families."""
    from carb.model.intervals import architecture_calibration, calibrate

    rows = zoo[zoo["model_name"] != HELD_OUT].reset_index(drop=True)
    cal = rows.sample(frac=0.2, random_state=0)
    train = rows.drop(index=cal.index).reset_index(drop=True)
    model = _make().fit(train, train[TARGETS])
    model.intervals_ = calibrate(model, cal, cal[TARGETS])
    for t, entry in architecture_calibration(_make, train, train[TARGETS], folds=3).items():
        model.intervals_[t]["new_arch"] = entry
    return model


def test_zoo_fit_reads_layer_table_features_never_resnet_knobs(cascade):
    assert cascade.input_kind_ == "zoo"
    names = set(cascade.feature_names_)
    assert not names & {"block", "depth", "width_mult", "early_downsample", "inner_mult"}
    assert {"peak_live_MB", "flops_conv_depthwise", "bytes_norm_MB", "input_size", "precision"} <= names
    assert cascade.input_columns_[0] == "model_name" and not set(ZOO_KIND_FEATURES) & set(cascade.input_columns_)
    assert "per_peak_live_MB" in cascade.priors_["peak_memory_MB"]["coef"]   # memory prior from the liveness peak


def test_resnet_feature_list_unchanged():
    df = synthetic_dataset(30, seed=1)
    assert features_for(df, FULL_FEATURES) == list(FULL_FEATURES)
    assert set(MODEL_KNOBS) <= set(features_for(df, FULL_FEATURES))


def test_zoo_predictions_follow_the_law_on_a_held_out_family(cascade, zoo):
    """The frame as a collected file has no per-kind columns: predict traces them; the held-out family's
    memory (30 MB + params + liveness peak + input) is predicted within 15 %."""
    test = zoo[zoo["model_name"] == HELD_OUT].reset_index(drop=True)
    assert not set(ZOO_KIND_FEATURES) & set(test.columns)
    pred = cascade.predict(test)
    err = np.abs(pred["pred_peak_memory_MB"] / test["peak_memory_MB"] - 1)
    assert err.median() < 0.15
    assert np.isfinite(pred["pred_latency_ms"]).all() and (pred["pred_latency_ms"] > 0).all()


def test_domain_and_architecture_folds_by_family(cascade, zoo):
    from carb.model.domain import architecture_keys, check_domain
    from carb.model.intervals import architecture_folds

    assert "googlenet" not in cascade.domain_["categorical"]["family"]
    inside, why = check_domain(cascade.domain_, zoo[zoo["model_name"] == HELD_OUT])
    assert not inside.any() and all("family googlenet never measured" in w for w in why)
    keys = np.asarray(architecture_keys(zoo))
    k, n_groups, folds = architecture_folds(zoo, 4)
    assert n_groups == zoo["family"].nunique()
    for tr, te in folds:   # a family is never on both sides of a fold
        assert not set(keys[tr]) & set(keys[te])


def test_family_intervals_widen_an_outside_new_family():
    """A zoo new-architecture entry (unit family) widens a never-measured family's rows though they are
    outside; a ResNet entry (no unit) leaves outside rows to the outside bounds, as before."""
    from carb.model.intervals import interval

    r = list(np.linspace(-0.05, 0.05, 199))
    wide = list(np.linspace(-0.5, 0.5, 199))
    cal = {"coverage": 0.9, "latency_ms": {"lower": -0.05, "upper": 0.05, "n": 199, "coverage": 0.9,
                                           "log_ratios": r, "new_arch": {"log_ratios": wide, "coverage": 0.9}}}
    pred = pd.DataFrame({"pred_latency_ms": [10.0, 10.0]})
    kw = {"outside": np.array([True, False]), "new_arch": np.array([True, True])}
    old = interval(cal, pred, **kw)
    assert old["hi_latency_ms"].iloc[0] == pytest.approx(10 * np.exp(0.05), rel=0.01)   # outside: not widened
    cal["latency_ms"]["new_arch"]["unit"] = "family"
    fam = interval(cal, pred, **kw)
    assert (fam["hi_latency_ms"] > 14.0).all() and (fam["lo_latency_ms"] < 7.0).all()


def test_predict_takes_a_module_names_and_frames(cascade):
    from carb.design.zoo import import_torchvision

    tv = import_torchvision()
    model = Predictor(cascade, "models:/zoo-test@champion")
    one = model.predict(tv.models.mobilenet_v3_large(), batch_size=8, precision="fp32", input_size=64)
    assert len(one) == 1 and one["model_name"].iloc[0] == "tv:mobilenet_v3_large"
    assert one["pred_latency_ms"].iloc[0] > 0 and one["lo_latency_ms"].iloc[0] <= one["pred_latency_ms"].iloc[0]
    assert bool(one["in_domain"].iloc[0]) and not bool(one["new_architecture"].iloc[0])
    names = model.predict(["tv:resnet18", "tv:vgg11", "no_such_net"], batch_size=[1, 4], input_size=32)
    assert list(names["batch_size"]) == [1, 4] * 3
    r18 = names[names["model_name"] == "tv:resnet18"]["pred_latency_ms"].to_numpy()
    assert r18[1] > r18[0]                                      # batch 4 costs more than batch 1
    vgg = names[names["model_name"] == "tv:vgg11"]
    assert (~vgg["in_domain"]).all() and vgg["outside"].str.contains("family vgg never measured").all()
    assert vgg["new_architecture"].all()
    assert cascade.intervals_["latency_ms"]["new_arch"]["unit"] == "family"
    rel = (names["hi_latency_ms"] - names["lo_latency_ms"]) / names["pred_latency_ms"]
    assert (rel[vgg.index] >= rel[names.index[:2]].max() - 1e-12).all()   # never narrower than a seen family's
    bad = names[names["model_name"] == "no_such_net"]
    assert bad["pred_latency_ms"].isna().all() and bad["outside"].str.contains("unknown model").all()
    top = model.predict(["tv:resnet18", "tv:squeezenet1_1"], input_size=224, accuracy="timm")
    assert top["top1"].iloc[0] > 0.6 and top["top1_source"].iloc[0].startswith("resnet18.")
    assert np.isnan(top["top1"].iloc[1])
    frame = model.predict(pd.DataFrame({"model_name": ["tv:resnet18"], "batch_size": [4], "note": ["x"]}),
                          input_size=32, precision="fp32")
    assert frame["pred_latency_ms"].iloc[0] == pytest.approx(r18[1]) and frame["note"].iloc[0] == "x"
    with pytest.raises(ConfigError, match="model_name"):
        model.predict(pd.DataFrame({"block": ["basic"], "depth": [18]}))


def test_a_resnet_model_refuses_named_networks():
    from tests.test_screening import AnalyticModel

    with pytest.raises(ConfigError, match="ResNet knobs"):
        Predictor(AnalyticModel(), "m").predict(["tv:resnet18"])


@pytest.fixture(scope="module")
def registered(cascade, zoo, tmp_path_factory):
    """The zoo cascade logged as carb-train logs it (ServedModel, a knob example) in a fresh store."""
    from carb import tracking
    from carb.analysis.predictor import ServedModel, knob_example, served_inputs

    uri = f"sqlite:///{tmp_path_factory.mktemp('zoo-store')}/mlflow.db"
    with tracking.start_run("train", "zoo", uri):
        info = tracking.log_cascade(ServedModel(cascade), knob_example(cascade, zoo), registered_name="carb-zoo-test",
                                    inputs=served_inputs(cascade))
    return {"uri": uri, "model": f"models:/carb-zoo-test/{info['version']}"}


def test_load_model_predicts_a_torchvision_module(registered):
    """The registered zoo model through carb.load_model: an nn.Module in, the prediction frame out."""
    import carb
    from carb.design.zoo import import_torchvision

    tv = import_torchvision()
    model = carb.load_model(registered["model"], tracking_uri=registered["uri"])
    assert type(model.cascade).__name__ == "CarbCascade"   # the served wrapper is unwrapped
    out = model.predict(tv.models.mobilenet_v3_large(), batch_size=8, precision="fp32")
    assert len(out) == 1 and out["model_name"].iloc[0] == "tv:mobilenet_v3_large"
    assert out["input_size"].iloc[0] == 224 and np.isfinite(out["pred_peak_memory_MB"].iloc[0])
    assert "input_size 224 > 64" in out["outside"].iloc[0]      # trained on 32-64 px: said, not hidden


KNOB_ROWS = pd.DataFrame({"model_name": ["tv:resnet18", "tv:mobilenet_v2"], "input_size": [32, 64],
                          "batch_size": [4, 1], "precision": ["fp32", "bf16"]})


def test_mlflow_pyfunc_takes_model_names(registered):
    """MLflow's own client: the logged signature asks for the knobs, not the internal features, and the
    pyfunc returns carb.load_model's frame."""
    import carb
    import mlflow

    from carb import tracking

    tracking.configure(registered["uri"])
    pyfunc = mlflow.pyfunc.load_model(registered["model"])
    names = pyfunc.metadata.get_input_schema().input_names()
    assert names == ["model_name", "input_size", "batch_size", "precision"]
    assert pyfunc.metadata.get_input_schema().required_input_names() == ["model_name"]
    bare = pyfunc.predict(KNOB_ROWS[["model_name"]])   # names alone: the knobs' defaults, as carb.load_model
    assert list(bare["batch_size"]) == [1, 1] and list(bare["input_size"]) == [224, 224]
    out = pyfunc.predict(KNOB_ROWS)
    ref = carb.load_model(registered["model"], tracking_uri=registered["uri"]).predict(KNOB_ROWS)
    assert np.allclose(out["pred_latency_ms"], ref["pred_latency_ms"]) and "hi_latency_ms" in out
    assert list(out["in_domain"]) == list(ref["in_domain"])


@pytest.mark.slow
def test_mlflow_models_serve_answers_a_rest_query(registered, tmp_path):
    """``mlflow models serve`` (local env) on the registered model answers a REST query of model names."""
    rows = serve_and_query(registered, tmp_path, {"dataframe_split": KNOB_ROWS.to_dict(orient="split")})
    assert len(rows) == 2 and rows[0]["model_name"] == "tv:resnet18" and rows[0]["pred_latency_ms"] > 0


def pyfunc_beside_carb(registered: dict, X: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(MLflow pyfunc's frame, carb.load_model's frame) for ``X`` on ``registered["model"]`` (store
    ``registered["uri"]``); asserts they share columns and have one row per row of ``X``."""
    import mlflow

    import carb
    from carb import tracking

    tracking.configure(registered["uri"])
    out = mlflow.pyfunc.load_model(registered["model"]).predict(X)
    ref = carb.load_model(registered["model"], tracking_uri=registered["uri"]).predict(X)
    assert list(out.columns) == list(ref.columns) and len(out) == len(X)
    return out, ref


def serve_and_query(registered: dict, tmp_path, payload: dict) -> list[dict]:
    """Serve ``registered["model"]`` (from the store ``registered["uri"]``) with ``mlflow models serve``
    (local env, one worker, a free localhost port), POST ``payload`` to ``/invocations`` once it answers
    (at most 120 s) and return the answer's ``predictions`` rows; the server is stopped after."""
    import json
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_bin = str(Path(sys.executable).with_name("mlflow"))
    # the registry too: mlflow.set_registry_uri (MLflow 3) sets MLFLOW_REGISTRY_URI in this process, and a server
    # inheriting another test's would serve that store's version
    env = {**os.environ, "MLFLOW_TRACKING_URI": registered["uri"], "MLFLOW_REGISTRY_URI": registered["uri"],
           # the venv's bin first: mlflow runs uvicorn
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([mlflow_bin, "models", "serve", "-m", registered["model"], "--env-manager", "local",
                             "-h", "127.0.0.1", "-p", str(port), "-w", "1"], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.log", "w"))
    try:
        body = json.dumps(payload).encode()
        answer = None
        for _ in range(120):
            time.sleep(1)
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                             headers={"Content-Type": "application/json"})
                answer = json.loads(urllib.request.urlopen(req, timeout=60).read())
                break
            except urllib.error.HTTPError as e:   # the server answered: its error is the test's failure
                raise AssertionError(e.read().decode()[-2000:]) from None
            except OSError:
                if proc.poll() is not None:
                    break
        assert answer is not None, (tmp_path / "serve.log").read_text()[-2000:]
        return answer["predictions"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_top1_of_zoo_names_resolved_or_unknown():
    """timm names take their own top-1; a torchvision name the timm architecture of the same network (same
    parameter count) or none; only at the evaluated input size."""
    from carb.analysis.zoo_screen import timm_equivalent, zoo_top1
    from carb.data.timm_accuracy import top1_table

    assert timm_equivalent("tv:resnet18") == "resnet18"
    assert timm_equivalent("tv:mobilenet_v3_large") == "mobilenetv3_large_100"
    assert timm_equivalent("tv:squeezenet1_1") is None            # timm has no squeezenet: top-1 unknown
    assert timm_equivalent("timm:ghostnet_100") == "ghostnet_100"
    rows = pd.DataFrame({"model_name": ["tv:resnet18", "tv:squeezenet1_1", "tv:resnet18"],
                         "input_size": [224, 224, 64]})
    out = zoo_top1(rows)
    t = top1_table()
    ref = t[(t["model"] == "resnet18") & (t["eval_img_size"] == 224)]["top1"].iloc[0]
    assert out["top1"].iloc[0] == pytest.approx(ref) and out["top1_source"].iloc[0].startswith("resnet18.")
    assert np.isnan(out["top1"].iloc[1]) and out["top1_source"].iloc[1] == ""
    assert np.isnan(out["top1"].iloc[2])                          # no published top-1 at 64 px


def test_carb_screen_ranks_a_zoo_space(registered, tmp_path, capsys):
    """carb-screen space=zoo against a zoo model: networks scored with top-1 where known, the refused ones
    named with their reasons, never a traceback."""
    from carb.commands.cli import compose
    from carb.commands.screen import run_screen

    over = [f"tracking.uri={registered['uri']}", f"screen.target={registered['model']}",
            f"paths.output_dir={tmp_path}", "space=zoo", "space.mode=grid", "space.max_flops=null",
            "space.models=[tv:resnet18,tv:mobilenet_v2,tv:squeezenet1_1,timm:vit_tiny_patch16_224,no_such_net]",
            "space.input_sizes=[64]", "space.batch_sizes=[1,4]", "space.precisions=[fp32]",
            "screen.budget.latency_ms=1000", "screen.pareto=[latency_ms,-top1]", "progress.enabled=false"]
    r = run_screen(compose("screen", over))
    err = capsys.readouterr().err
    assert "refused no_such_net: model 'no_such_net': unknown model" in err
    scored = pd.read_parquet(f"{r['output_dir']}/scored.parquet")
    assert sorted(scored["model_name"].unique()) == ["timm:vit_tiny_patch16_224", "tv:mobilenet_v2", "tv:resnet18",
                                                     "tv:squeezenet1_1"]
    assert len(scored) == 8 and scored["pred_latency_ms"].gt(0).all()
    vit = scored[scored["model_name"] == "timm:vit_tiny_patch16_224"]
    assert (vit["input_size"] == 224).all() and vit["top1"].notna().all()    # the space's own size for it
    assert (~vit["in_domain"]).all() and vit["outside"].str.contains("family vit never measured").all()


def test_latency_prior_takes_per_kind_terms_where_they_earn_it(zoo):
    """Zoo rows whose cost differs by operation kind (depthwise FLOPs 20x a dense one's, normalisation bytes
    costly): the per-kind form wins on held-out families and fits the law; on the aggregate law of
    zoo_schema_frame the aggregate form stays (the choice is measured, not assumed)."""
    from carb.design.zoo_features import zoo_kind_columns
    from carb.model.physics import make_prior

    k = zoo_kind_columns(zoo)
    X = zoo.assign(**k)
    y = (0.05 + 1e-8 * (k["flops_conv_regular"] + 20 * k["flops_conv_depthwise"] + k["flops_conv_pointwise"]
                        + k["flops_linear"]) + 0.05 * k["bytes_norm_MB"] + 0.001 * X["n_ops"].to_numpy())
    prior = make_prior("latency_ms").fit(X, y)
    assert prior.form_ == "kinds" and prior.train_mape_ < 0.02
    assert prior.coef_["per_flop_conv_depthwise_fp32"] > 5 * prior.coef_["per_flop_conv_regular_fp32"]
    assert make_prior("latency_ms").fit(X, X["latency_ms"]).form_ == "aggregate"


def test_a_zoo_frame_reads_the_current_tracer_not_its_stored_static_columns():
    """The rows a zoo model is fitted on and the names it predicts read one tracer: a dataset's stored static
    columns (the tracer's of the day it was collected) are replaced where the tracer knows the model and kept
    where it refuses it. On the shipped CPU zoo, SqueezeNet 1.1 bf16 at batch 4, 128 px: the stored liveness
    (integer max-pool indices at 2 bytes) plus parameters was 19 % under the measured peak; the tracer's now
    gives it within 1 %."""
    from carb.data.io import load_dataset
    from carb.model.cascade_data import with_zoo_kinds

    d = load_dataset("zoo-cpu")
    row = d[(d["model_name"] == "tv:squeezenet1_1") & (d["precision"] == "bf16") & (d["batch_size"] == 4)
            & (d["input_size"] == 128)].head(1)
    unknown = row.assign(model_name="module:NotInAnyZoo", peak_live_MB=5.0)
    X = with_zoo_kinds(pd.concat([row, unknown], ignore_index=True), ["flops_conv_regular"])
    measured = float(row["peak_memory_MB"].iloc[0])
    assert float((row["peak_live_MB"] + row["param_size_MB"]).iloc[0]) < 0.85 * measured   # the stored column
    assert float(X["peak_live_MB"].iloc[0] + X["param_size_MB"].iloc[0]) == pytest.approx(measured, rel=0.01)
    assert X["peak_live_MB"].iloc[1] == 5.0 and np.isnan(X["flops_conv_regular"].iloc[1])
    assert X["flops_conv_regular"].iloc[0] > 0
