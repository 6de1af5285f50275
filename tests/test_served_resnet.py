"""A ResNet model as MLflow serves it (issue 43 follow-up): its logged signature requires ``block`` and ``depth``
alone, the other knobs optional with the defaults :func:`carb.load_model` uses, so MLflow's own pyfunc takes a knob
frame without ``inner_mult`` / ``early_downsample`` (it was refused: the inferred signature required every knob of
the example) and returns carb.load_model's frame. Synthetic rows (tests/synthetic.py), never a measurement."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

SMALL = {"xgb": {"n_estimators": 15, "max_depth": 3}, "lgbm": {"n_estimators": 15, "num_leaves": 7},
         "et": {"n_estimators": 8}}
TARGETS = ["peak_memory_MB", "latency_ms"]
#: Knob frames a user may send: without inner_mult / early_downsample / stages, and the bare minimum.
PARTIAL = pd.DataFrame({"block": ["basic", "bottleneck", "basic"], "depth": [18, 50, 34],
                        "width_mult": [1.0, 0.5, 0.75], "input_size": [64, 32, 96], "batch_size": [4, 2, 1],
                        "precision": ["fp32", "bf16", "fp32"]})
BARE = pd.DataFrame({"block": ["basic", "bottleneck"], "depth": [18, 50]})
#: Explicit stages on one row, the named layout (null) on the others, and a classifier size.
STAGES = PARTIAL.assign(stages=[None, "3-4-6-3", None], num_classes=[10, 1000, 100])


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    """A small ResNet cascade on synthetic rows, logged as the commands log it (:func:`served_model`)."""
    from carb import tracking
    from carb.commands.train import served_model
    from carb.model.cascade import CarbCascade
    from tests.synthetic import synthetic_dataset

    rows = synthetic_dataset(120, seed=4, energy=False, telemetry=False)
    model = CarbCascade(specialists=SMALL, oof_folds=2, probe_estimators=10, n_jobs=1).fit(rows, rows[TARGETS])
    named = rows[rows["depth"].isin([18, 34, 50, 101])].assign(stages=pd.NA)   # each depth's named layout
    served, example, inputs = served_model(model, named)
    assert served is not model and {"inner_mult", "early_downsample"} <= set(example.columns)
    uri = f"sqlite:///{tmp_path_factory.mktemp('resnet-store')}/mlflow.db"
    with tracking.start_run("train", "resnet", uri):
        info = tracking.log_cascade(served, example, registered_name="carb-resnet-test", inputs=inputs)
    return {"uri": uri, "model": f"models:/carb-resnet-test/{info['version']}"}


def test_a_resnet_signature_requires_block_and_depth_alone(registered):
    import mlflow

    from carb import tracking

    tracking.configure(registered["uri"])
    schema = mlflow.pyfunc.load_model(registered["model"]).metadata.get_input_schema()
    assert schema.required_input_names() == ["block", "depth"]
    assert {"inner_mult", "early_downsample", "stages", "num_classes"} <= set(schema.input_names())


@pytest.mark.parametrize("frame", ["partial", "bare", "stages"])
def test_mlflow_pyfunc_takes_what_carb_load_model_takes(registered, frame):
    """Knobs left out take ArchConfig's defaults through MLflow's client as through carb.load_model."""
    from tests.test_zoo_model import pyfunc_beside_carb

    X = {"partial": PARTIAL, "bare": BARE, "stages": STAGES}[frame]
    out, ref = pyfunc_beside_carb(registered, X)
    np.testing.assert_allclose(out["pred_latency_ms"].to_numpy(float), ref["pred_latency_ms"].to_numpy(float))
    assert np.isfinite(out["pred_peak_memory_MB"].to_numpy(float)).all()
