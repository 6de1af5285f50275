"""Training the CARB cascade on one device of timm's published benchmark (issue 43, item 6: screening the zoo
for one of timm's GPUs): ``data.path=timm-zoo data.device=<GPU>`` converts that device's rows to a zoo dataset
(:func:`carb.data.importers.timm_zoo.as_zoo_dataset`), the cascade fits its latency on the layer table's
features, and ``Predictor.predict`` takes zoo names. The fast tests use a timm-like benchmark frame made here
(real traced networks, latency from a known cost law: never a measurement); the slow one the shipped file."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.predictor import Predictor
from carb.data.importers.timm_zoo import ZOO_COLUMNS, as_zoo_dataset
from carb.errors import ConfigError, DatasetError
from carb.model.cascade import CarbCascade

SMALL = {"xgb": {"n_estimators": 20, "max_depth": 3}, "lgbm": {"n_estimators": 20, "num_leaves": 7},
         "et": {"n_estimators": 10}}
MODELS = ("resnet18", "resnet34", "resnet50", "mobilenetv3_small_100", "mobilenetv3_large_100",
          "efficientnet_b0", "regnety_004", "regnetx_002", "ghostnet_100")
GPU = "Synthetic GPU"


def timm_like_bench(models=MODELS, sizes=(160, 224), batches=(64, 256)) -> pd.DataFrame:
    """A frame with :func:`load_zoo_bench`'s columns: two devices, latency from a cost law on timm's own
    GMACs (``0.2 ms + 2 GMAC per ms x batch``; the other device 3x slower), never a measurement."""
    from carb.design.zoo_features import zoo_summary

    rows = []
    for m in models:
        for s in sizes:
            gmacs = zoo_summary(f"timm:{m}", s)["flops"] / 1e9   # fvcore count: multiply-adds per image
            for b in batches:
                for dev, slow in ((GPU, 1.0), ("Other GPU", 3.0)):
                    rows.append({"zoo_id": f"{m}-{s}-{b}", "model": m, "family": m[:4], "input_size": s,
                                 "batch_size": b, "precision": "fp16", "timm_precision": "amp_fp16",
                                 "device_name": dev, "device_kind": "gpu", "memory_layout": "nchw",
                                 "compile": "eager", "torch_version": "2.9.1", "cuda_version": "12.8",
                                 "latency_ms": slow * (0.2 + b * gmacs / 2.0), "samples_per_sec": np.nan,
                                 "params": np.nan, "gmacs_per_image": gmacs, "macts_M_per_image": np.nan,
                                 "source_file": "synthetic.csv", "source_row": "synthetic.csv:1", "main": True,
                                 "missing_reason": None})
    return pd.DataFrame(rows, columns=list(ZOO_COLUMNS))


@pytest.fixture(scope="module")
def bench():
    return timm_like_bench()


def test_one_device_becomes_a_zoo_dataset(bench):
    df = as_zoo_dataset(GPU, bench)
    assert len(df) == (bench["device_name"] == GPU).sum()
    assert df["model_name"].str.startswith("timm:").all() and (df["device_name"] == GPU).all()
    assert df["flops"].notna().all() and (df["flops"] > 0).all()        # the layer table's features
    assert df["energy_J"].isna().all() and df["peak_memory_MB"].isna().all()   # not published: NaN, never 0
    assert df["missing_reason"].str.contains("not in timm's published benchmark").all()
    src = bench[bench["device_name"] == GPU].reset_index(drop=True)
    assert np.allclose(df["latency_ms"].to_numpy(), src["latency_ms"].to_numpy())


def test_registered_name_names_the_device_once(bench):
    """carb-train data=timm_zoo data.device='RTX 4090' registered 'carb-rtx-4090-timm-rtx-4090-zoo' (the slug
    and the imported device_id 'timm-rtx-4090' both named the GPU); measured ids keep their name."""
    from carb.data.schema import model_name

    df = as_zoo_dataset(GPU, bench)
    slug = GPU.lower().replace(" ", "-")
    assert model_name(df) == f"carb-{slug}-timm-zoo"
    assert model_name(df.assign(device_id="34cc4b132c")) == f"carb-{slug}-34cc4b132c-zoo"


def test_unknown_device_is_one_line_naming_the_devices(bench):
    with pytest.raises(DatasetError) as e:
        as_zoo_dataset("RTX 9999", bench)
    msg = str(e.value)
    assert "\n" not in msg and "data.device" in msg and GPU in msg and "Other GPU" in msg


def test_timm_zoo_alias_needs_a_device():
    from carb.data.io import load_training_frame

    with pytest.raises(ConfigError) as e:
        load_training_frame("timm-zoo", None)
    assert "data.device" in str(e.value) and "RTX 4090" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="RTX 4090"):
        load_training_frame("timm-zoo", "RTX 9999")


def test_cascade_trained_on_one_device_predicts_zoo_names(bench):
    """Latency-only fit on every model but one family; predictions of the held-out network by name at a
    batch timm never timed follow the law within 30 %, and grow with the batch."""
    df = as_zoo_dataset(GPU, bench)
    train = df[~df["model_name"].str.startswith("timm:ghostnet")].reset_index(drop=True)
    cascade = CarbCascade(specialists=SMALL, oof_folds=2, probe_estimators=15, n_jobs=1)
    cascade.fit(train, train[["latency_ms"]])
    model = Predictor(cascade, "models:/timm-zoo-test@champion")
    out = model.predict(["timm:ghostnet_100", "timm:resnet50"], batch_size=128, precision="fp16")
    assert list(out["model_name"]) == ["timm:ghostnet_100", "timm:resnet50"]
    gmacs = bench[bench["input_size"] == 224].groupby("model")["gmacs_per_image"].first()
    truth = 0.2 + 128 * gmacs[["ghostnet_100", "resnet50"]].to_numpy() / 2.0   # the law at batch 128
    err = np.abs(out["pred_latency_ms"].to_numpy() / truth - 1)
    assert (err < 0.3).all(), (out["pred_latency_ms"].tolist(), truth.tolist())
    small = model.predict(["timm:resnet50"], batch_size=16, precision="fp16")
    assert small["pred_latency_ms"].iloc[0] < out["pred_latency_ms"].iloc[1]


@pytest.mark.slow
def test_shipped_rtx4090_rows_as_training_frame():
    """The shipped file's RTX 4090 rows (autocast fp16) of 12 networks of different families as a zoo
    dataset: every row kept, the layer table traced (a network the tracer refuses would keep NaN features, never
    0). The whole device (1,627 rows) traces for ~9 min on a cold cache: `carb-train data=timm_zoo` does that."""
    from carb.data.importers.timm_zoo import load_zoo_bench

    bench = load_zoo_bench()
    mine = bench[bench["device_name"] == "RTX 4090"]
    names = sorted(mine["model"].unique())[::max(1, mine["model"].nunique() // 12)][:12]
    part = bench[bench["model"].isin(names)]
    df = as_zoo_dataset("RTX 4090", part)
    assert len(df) == int((part["device_name"] == "RTX 4090").sum()) > 0 and (df["precision"] == "fp16").all()
    assert df["flops"].notna().mean() > 0.8 and (df.loc[df["flops"].notna(), "flops"] > 0).all()
    assert (df["latency_ms"] > 0).all() and df["peak_memory_MB"].isna().all()


def test_unknown_device_of_any_dataset_names_its_devices(tmp_path):
    from carb.data.io import load_training_frame
    from tests.synthetic import synthetic_dataset

    df = synthetic_dataset(30, seed=1)
    path = tmp_path / "d.parquet"
    df.to_parquet(path)
    name = str(df["device_name"].iloc[0])
    with pytest.raises(ConfigError) as e:
        load_training_frame(str(path), "No Such GPU")
    assert "data.device" in str(e.value) and name in str(e.value) and "\n" not in str(e.value)
    assert load_training_frame(str(path), name)[1] == name
