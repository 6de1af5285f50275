"""One cascade across network kinds (issue 43 item 3): a ResNet row's layer-table features come from its walk
and equal those of the traced torchvision model; each row of a combined dataset (ResNet and zoo rows of one
device) is featurized from its own layer table, validated against its own schema, and one cascade fits
and predicts both kinds."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.design import zoo_features as Z
from carb.design.identity import input_kind, kinds_in, row_kinds
from carb.design.zoo import build_model


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CARB_CACHE", str(tmp_path / "cache"))


RESNET_ROWS = pd.DataFrame({"block": ["basic", "bottleneck", "basic"], "depth": [18, 50, 18],
                            "width_mult": [1.0, 1.0, 1.0], "input_size": [64, 64, 96], "batch_size": [3, 2, 5],
                            "precision": ["bf16", "fp32", "fp32"], "early_downsample": [True, True, True],
                            "stages": [None, None, None], "inner_mult": [1.0, 1.0, 1.0]})
TORCHVISION_OF = ["tv:resnet18", "tv:resnet50", "tv:resnet18"]


def test_resnet_rows_layer_table_features_are_the_traced_torchvision_models():
    cols = Z.layer_columns(RESNET_ROWS)
    for i, name in enumerate(TORCHVISION_OF):
        r = RESNET_ROWS.iloc[i]
        s = Z.module_summary(build_model(name), int(r["input_size"]), str(r["precision"]))   # the meta-device trace
        ref = {**Z.static_of(s, int(r["batch_size"])), **Z.kinds_of(s, int(r["batch_size"])), **Z.weights_of(s)}
        assert set(ref) == set(cols) == {*Z.ZOO_STATIC, *Z.ZOO_KIND_FEATURES, *Z.ZOO_WEIGHT_FEATURES}
        for c, v in ref.items():
            assert cols[c][i] == pytest.approx(v, rel=1e-12, abs=0), (name, c)
        assert cols["peak_live_MB"][i] > 0 and cols["flops_conv_pointwise"][i] > (0 if "50" in name else -1)


def test_resnet_rows_layer_flops_are_the_resnet_static_flops():
    """The layer table's ``flops`` (fvcore's count) and parameters equal the ResNet grid features' (a
    second, independent count: :func:`carb.design.features.grid_features`)."""
    from carb.design.features import grid_features

    cols = Z.layer_columns(RESNET_ROWS)
    grid = grid_features(RESNET_ROWS)
    np.testing.assert_allclose(cols["flops"], grid["flops"].to_numpy(float), rtol=1e-12)
    np.testing.assert_array_equal(cols["params"], grid["params"].to_numpy(float))


def test_each_row_of_a_combined_frame_takes_its_own_kind():
    from tests.synthetic import zoo_schema_frame

    zoo = zoo_schema_frame(models=("tv:squeezenet1_1", "tv:resnet18"), sizes=(64,), batches=(3,),
                           precisions=("bf16",))
    mixed = pd.concat([RESNET_ROWS, zoo], ignore_index=True)
    assert list(row_kinds(mixed)) == ["resnet"] * 3 + ["zoo"] * 2
    assert kinds_in(mixed) == ("resnet", "zoo") and input_kind(mixed) == "mixed"
    assert input_kind(RESNET_ROWS) == "resnet" and input_kind(zoo) == "zoo"
    cols = Z.layer_columns(mixed)
    # ResNet-18 as knobs (row 0: 64 px, batch 3, bf16) and as the zoo name tv:resnet18 (row 4): one network
    for c in (*Z.ZOO_STATIC, *Z.ZOO_KIND_FEATURES):
        assert cols[c][0] == pytest.approx(cols[c][4], rel=1e-12), c
    assert cols["flops"][3] != cols["flops"][4]


SMALL = {"xgb": {"n_estimators": 20, "max_depth": 3}, "lgbm": {"n_estimators": 20, "num_leaves": 7},
         "et": {"n_estimators": 10}}
TARGETS = ["peak_memory_MB", "latency_ms"]


def _combined() -> pd.DataFrame:
    """Synthetic ResNet rows and synthetic zoo rows of one (synthetic) CPU, as one dataset: a folder
    holding both kinds' files reads as this (:func:`carb.data.io.load_dataset`)."""
    from tests.synthetic import synthetic_dataset, zoo_schema_frame

    zoo = zoo_schema_frame(models=("tv:squeezenet1_1", "tv:mobilenet_v3_small", "tv:shufflenet_v2_x0_5",
                                   "tv:mnasnet0_5", "tv:resnet18"), sizes=(32, 64), batches=(1, 4, 16))
    res = synthetic_dataset(120, seed=3, energy=False, telemetry=False)
    res = res[(res["input_size"] <= 96) & (res["batch_size"] <= 16)
              & res["depth"].isin([14, 18, 34, 50, 101, 152])].reset_index(drop=True)   # named layouts
    res["stages"] = pd.NA   # the named layout of each depth (the synthetic rows' stages are a placeholder)
    for c in ("device_name", "device_kind", "device_id"):
        res[c] = zoo[c].iloc[0]
    return pd.concat([res, zoo], ignore_index=True)


@pytest.fixture(scope="module")
def combined():
    return _combined()


def test_a_combined_dataset_validates_each_row_against_its_kinds_schema(combined, tmp_path):
    from carb.data.io import load_dataset, validate_dataset
    from carb.errors import DatasetError

    n_res = int(combined["block"].notna().sum())
    out = validate_dataset(combined, "both")
    assert len(out) == len(combined) and list(row_kinds(out)) == list(row_kinds(combined))
    combined.iloc[:n_res].to_parquet(tmp_path / "resnet.parquet")
    combined.iloc[n_res:].to_parquet(tmp_path / "zoo.parquet")
    assert kinds_in(load_dataset(tmp_path)) == ("resnet", "zoo")   # a folder of both kinds' files
    bad = combined.copy()
    bad.loc[0, "precision"] = "int4"
    with pytest.raises(DatasetError, match=r"both \(ResNet rows\): column 'precision' allows"):
        validate_dataset(bad, "both")
    bad = combined.copy()
    bad.loc[[n_res, n_res + 1], "model_name"] = pd.NA
    with pytest.raises(DatasetError, match=rf"rows {n_res}, {n_res + 1} name no network"):
        validate_dataset(bad, "both")


def test_one_cascade_fits_and_predicts_both_kinds(combined):
    from carb.design.identity import architecture_keys
    from carb.model.cascade import CarbCascade
    from carb.model.cascade_data import prepare

    model = CarbCascade(specialists=SMALL, oof_folds=2, probe_estimators=15, n_jobs=1).fit(combined,
                                                                                           combined[TARGETS])
    assert model.input_kind_ == "mixed"
    assert "per_peak_live_MB" in model.priors_["peak_memory_MB"]["coef"]   # every row's liveness peak
    names = set(model.feature_names_)
    assert not names & {"block", "depth", "width_mult", "early_downsample", "inner_mult"}
    assert {"peak_live_MB", "flops_conv_pointwise", "input_size"} <= names
    # the ResNet rows are featurized from their walk, not from their stored (synthetic) static columns
    X = prepare(combined, model.feature_names_, "full", "training")
    res = combined["block"].notna().to_numpy()
    walk = Z.layer_columns(combined[res])
    np.testing.assert_allclose(X.loc[res, "flops"].to_numpy(float), walk["flops"])
    assert not np.allclose(combined.loc[res, "flops"].to_numpy(float), walk["flops"])
    pred = model.predict(combined)
    for t in TARGETS:
        p = pred[f"pred_{t}"].to_numpy(float)
        assert np.isfinite(p).all() and (p > 0).all()
        for kind in ("resnet", "zoo"):   # one model, within a factor of 2 of each kind's own rows
            m = row_kinds(combined) == kind
            ratio = p[m] / combined.loc[m, t].to_numpy(float)
            assert np.median(np.abs(np.log(ratio))) < np.log(2), (t, kind)
    keys = architecture_keys(combined)   # architecture folds: a ResNet per structure, a zoo row per family
    assert sum(k.startswith("family:") for k in keys) == int((~res).sum())
    assert all("|" in k for k, r in zip(keys, res) if r)
    only_resnet = combined[res].drop(columns=["model_name", "family"])
    assert np.isfinite(model.predict(only_resnet)["pred_latency_ms"]).all()   # knobs alone, no zoo columns
    from carb.analysis.predictor import Predictor

    served = Predictor(model, "models:/combined@test")   # takes names or a knob frame
    names = served.predict(["tv:squeezenet1_1", "tv:vgg11"], batch_size=[1, 4], input_size=64)
    assert (names["pred_latency_ms"] > 0).all() and names["pred_latency_ms"].iloc[1] > names["pred_latency_ms"].iloc[0]
    assert names.loc[names["model_name"] == "tv:vgg11", "outside"].str.contains("family vgg never measured").all()
    knobs = served.predict(only_resnet[["block", "depth", "width_mult", "input_size", "batch_size", "precision"]])
    assert len(knobs) == len(only_resnet) and (knobs["pred_latency_ms"] > 0).all()


def test_a_resnet_frame_keeps_its_own_feature_list_and_stored_features():
    from carb.model.cascade_data import with_zoo_kinds
    from carb.model.encoding import FULL_FEATURES, features_for
    from tests.synthetic import synthetic_dataset

    df = synthetic_dataset(20, seed=1)
    assert features_for(df, FULL_FEATURES) == list(FULL_FEATURES)
    assert with_zoo_kinds(df, FULL_FEATURES) is df   # nothing read from the walk for a ResNet model


def test_a_combined_dataset_stratifies_resnet_rows_by_depth_and_zoo_rows_by_family(combined):
    from carb.data.tiers import strata_key

    key = strata_key(combined)
    res = combined["block"].notna().to_numpy()
    assert all(k.split("|")[2] in ("shallow", "mid", "deep") for k in key[res])
    assert [k.split("|")[2] for k in key[~res]] == combined.loc[~res, "family"].astype(str).tolist()
