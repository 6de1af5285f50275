"""Runtime telemetry predicted from the architecture for screening (carb/model/telemetry.py): known
physics on synthetic rows (launches per convolution extrapolate in depth, utilisation stays inside its
training range), features a device never reported left alone, the cascade's switch, and the shipped H200
data, where a network's kernel launches decide whether it is launch-bound."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from synthetic import synthetic_dataset

from carb.data.schema import ok_rows
from carb.errors import ConfigError
from carb.model.intervals import screening_features, with_telemetry
from carb.model.telemetry import TelemetryImputer


def test_launches_per_convolution_extrapolate_to_deeper_networks():
    df = synthetic_dataset(500, seed=3)                   # launches = 3 x n_conv + 4 (tests/synthetic.py)
    shallow, deep = df[df["depth"] <= 50], df[df["depth"] > 50]
    assert len(deep) > 20 and deep["n_conv"].max() > 1.5 * shallow["n_conv"].max()
    imp = TelemetryImputer().fit(shallow)
    out = imp.transform(deep.drop(columns=["kernel_launches", "avg_sm_util"]))
    err = np.abs(out["kernel_launches"] / deep["kernel_launches"] - 1)
    assert err.max() < 0.10                                # a tree on the count itself would stop at the last leaf
    lo, hi = shallow["avg_sm_util"].min(), shallow["avg_sm_util"].max()
    assert out["avg_sm_util"].between(lo, hi).all()
    assert imp.columns_ == ("avg_sm_util", "avg_mem_util", "gpu_temp_C", "kernel_launches")


def test_utilisation_follows_the_load_better_than_a_tier_median():
    df = synthetic_dataset(600, seed=4)
    train, test = df.iloc[:450], df.iloc[450:]
    imp = TelemetryImputer().fit(train)
    from carb.data.tiers import telemetry_medians

    med = with_telemetry(test, telemetry_medians(train))["avg_sm_util"]
    got = imp.transform(test)["avg_sm_util"]
    assert np.mean(np.abs(got - test["avg_sm_util"])) < 0.5 * np.mean(np.abs(med - test["avg_sm_util"]))


def test_a_feature_the_device_never_reported_is_not_learned():
    df = synthetic_dataset(200, seed=1, telemetry=False)
    imp = TelemetryImputer().fit(df)
    assert imp.columns_ == () and imp.models_ == {}
    out = imp.transform(df)
    assert out["kernel_launches"].isna().all()             # NaN stays NaN, never a made-up 0


def test_cascade_fits_an_imputer_and_screening_uses_it():
    from carb.model.cascade import CarbCascade

    df = synthetic_dataset(300, seed=2)
    targets = ["peak_memory_MB", "latency_ms"]
    kw = dict(members=("et",), probe_estimators=20, oof_folds=2)
    m = CarbCascade(**kw).fit(df, df[targets])
    assert isinstance(m.telemetry_imputer_, TelemetryImputer)
    grid = df.drop(columns=["avg_sm_util", "avg_mem_util", "gpu_temp_C", "kernel_launches"]).head(40)
    F = screening_features(m, grid)
    assert np.allclose(F["kernel_launches"], df["kernel_launches"].head(40), rtol=0.05)
    assert np.allclose(F["batch_x_sm"], F["batch_size"] * F["avg_sm_util"])   # interactions recomputed
    med = CarbCascade(telemetry="medians", **kw).fit(df, df[targets])
    assert med.telemetry_imputer_ is None
    Fm = screening_features(med, grid)
    assert Fm["kernel_launches"].nunique() <= 4            # one value per batch tier
    with pytest.raises(ConfigError, match=r"model.telemetry: 'tiers' is not allowed; allowed: \['model', 'medians'\]"):
        CarbCascade(telemetry="tiers", **kw).fit(df, df[targets])


def test_on_the_shipped_h200_data_launches_come_from_the_architecture():
    """Real rows: kernel launches per (network, precision) range from 31 to 1,283; predicted for held-out
    configurations they are within a few per cent, where a batch-tier median is off by hundreds."""
    from carb.data.io import load_dataset
    from carb.data.tiers import telemetry_medians

    df = ok_rows(load_dataset("h200"))
    pick = np.random.default_rng(0).random(len(df)) < 0.75
    train, test = df[pick], df[~pick]
    imp = TelemetryImputer().fit(train)
    got = imp.transform(test)
    med = with_telemetry(test, telemetry_medians(train))
    y = test["kernel_launches"].to_numpy(float)
    mae_imp = np.mean(np.abs(got["kernel_launches"].to_numpy() - y))
    mae_med = np.mean(np.abs(med["kernel_launches"].to_numpy() - y))
    assert mae_imp < 0.1 * mae_med and np.median(np.abs(got["kernel_launches"] / y - 1)) < 0.05
    sm = test["avg_sm_util"].to_numpy(float)
    assert np.mean(np.abs(got["avg_sm_util"] - sm)) < 0.6 * np.mean(np.abs(med["avg_sm_util"] - sm))
    assert isinstance(got, pd.DataFrame) and len(got) == len(test)
