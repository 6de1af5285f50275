"""The two baselines of carb.model.baselines (B1 FlopsLinear, B2 LatencyEnergyProxy): they recover a
known linear law, predict held-out rows, follow the scikit-learn estimator contract, and reject bad
input with a one-line DatasetError that names the column."""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

from carb.data.schema import TARGETS
from carb.errors import CarbError, DatasetError
from carb.model.baselines import FlopsLinear, LatencyEnergyProxy

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402

#: y = slope * flops + intercept per target (FLOPs of the synthetic frames are ~1e6 .. 1e12).
FLOPS_LAW = {"peak_memory_MB": (2.5e-9, 40.0), "energy_J": (7.0e-8, 3.0), "latency_ms": (1.3e-9, 0.25)}
#: energy_J = slope * latency_ms + intercept.
LATENCY_LAW = (0.42, 1.7)


def _flops_frame(n: int = 120, seed: int = 1) -> pd.DataFrame:
    """Synthetic rows whose targets follow FLOPS_LAW exactly."""
    df = synthetic_dataset(n, seed=seed)
    f = df["flops"].to_numpy(float)
    for t, (a, b) in FLOPS_LAW.items():
        df[t] = a * f + b
    return df


def _latency_frame(n: int = 120, seed: int = 2) -> pd.DataFrame:
    df = synthetic_dataset(n, seed=seed)
    a, b = LATENCY_LAW
    df["energy_J"] = a * df["latency_ms"].to_numpy(float) + b
    return df


def _split(df: pd.DataFrame, n_train: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    return df.iloc[:n_train], df.iloc[n_train:]


def _one_line(err: BaseException) -> str:
    msg = str(err)
    assert msg.strip() and "\n" not in msg, repr(msg)
    return msg


# --------------------------------------------------------------------------- B1

def test_flops_linear_recovers_the_law_and_predicts_held_out_rows():
    train, test = _split(_flops_frame(), 90)
    b1 = FlopsLinear()
    assert b1.fit(train, train[list(TARGETS)]) is b1
    assert b1.targets_ == [t for t in TARGETS]          # cascade order, every target measured
    for t, (a, b) in FLOPS_LAW.items():
        m = b1.models_[t]
        assert m.coef_[0] == pytest.approx(a, rel=1e-6)
        assert m.intercept_ == pytest.approx(b, rel=1e-4, abs=1e-6)
    pred = b1.predict(test)
    assert list(pred.columns) == [f"pred_{t}" for t in TARGETS]
    assert pred.index.equals(test.index)
    for t in TARGETS:
        np.testing.assert_allclose(pred[f"pred_{t}"], test[t], rtol=1e-6)


def test_flops_linear_skips_missing_rows_and_unmeasured_targets():
    df = _flops_frame()
    df.loc[df.index[::3], "latency_ms"] = np.nan        # NaN rows skipped per target
    df["energy_J"] = np.nan                              # a device without an energy counter
    df.loc[df.index[0], "peak_memory_MB"] = np.inf       # non-finite is not a measurement either
    b1 = FlopsLinear().fit(df, df[list(TARGETS)])
    assert b1.targets_ == ["peak_memory_MB", "latency_ms"]
    assert list(b1.predict(df).columns) == ["pred_peak_memory_MB", "pred_latency_ms"]
    a, b = FLOPS_LAW["latency_ms"]
    assert b1.models_["latency_ms"].coef_[0] == pytest.approx(a, rel=1e-6)
    assert b1.models_["latency_ms"].intercept_ == pytest.approx(b, rel=1e-4)


def test_flops_linear_accepts_a_series_target_and_another_feature():
    df = _flops_frame()
    p = df["params"].to_numpy(float)
    y = pd.Series(3.0 * p + 11.0, name="energy_J", index=df.index)
    b1 = FlopsLinear(feature="params").fit(df, y)
    assert b1.targets_ == ["energy_J"]
    assert b1.models_["energy_J"].coef_[0] == pytest.approx(3.0, rel=1e-6)
    np.testing.assert_allclose(b1.predict(df)["pred_energy_J"], y, rtol=1e-6)


# --------------------------------------------------------------------------- B2

def test_latency_proxy_recovers_the_law_and_predicts_held_out_rows():
    train, test = _split(_latency_frame(), 90)
    b2 = LatencyEnergyProxy()
    assert b2.fit(train, train[list(TARGETS)]) is b2
    a, b = LATENCY_LAW
    assert b2.model_.coef_[0] == pytest.approx(a, rel=1e-6)
    assert b2.model_.intercept_ == pytest.approx(b, rel=1e-5)
    assert b2.targets_ == ["energy_J"]
    pred = b2.predict(test)
    assert list(pred.columns) == ["pred_energy_J"] and pred.index.equals(test.index)
    np.testing.assert_allclose(pred["pred_energy_J"], test["energy_J"], rtol=1e-6)
    # a Series target gives the same fit
    b2s = LatencyEnergyProxy().fit(train, train["energy_J"])
    assert b2s.model_.coef_[0] == pytest.approx(b2.model_.coef_[0])


def test_latency_proxy_leaves_rows_without_latency_unpredicted():
    df = _latency_frame()
    train, test = _split(df, 90)
    b2 = LatencyEnergyProxy().fit(train, train)
    test = test.copy()
    test.loc[test.index[:4], "latency_ms"] = np.nan
    pred = b2.predict(test)["pred_energy_J"]
    assert pred.iloc[:4].isna().all()
    np.testing.assert_allclose(pred.iloc[4:], test["energy_J"].iloc[4:], rtol=1e-6)


def test_latency_proxy_ignores_unmeasured_energy_rows_in_fit():
    df = _latency_frame()
    df.loc[df.index[::2], "energy_J"] = np.nan
    b2 = LatencyEnergyProxy().fit(df, df)
    assert b2.model_.coef_[0] == pytest.approx(LATENCY_LAW[0], rel=1e-6)


# --------------------------------------------------------------------------- sklearn contract

@pytest.mark.parametrize("cls,param,frame", [(FlopsLinear, "flops", _flops_frame),
                                             (LatencyEnergyProxy, "latency_ms", _latency_frame)])
def test_sklearn_contract(cls, param, frame):
    est = cls()
    assert est.get_params() == {"feature": param}
    # __init__ only stores parameters: nothing fitted yet, predict refuses
    assert not [k for k in vars(est) if k.endswith("_")]
    df = frame()
    with pytest.raises(NotFittedError):
        est.predict(df)
    fitted = est.fit(df, df[list(TARGETS)])
    assert fitted is est
    learned = [k for k in vars(est) if k not in est.get_params()]
    assert learned and all(k.endswith("_") and not k.startswith("_") for k in learned), learned
    # clone: same params, unfitted, independent of the original
    c = clone(est)
    assert c.get_params() == est.get_params()
    assert not [k for k in vars(c) if k.endswith("_")]
    with pytest.raises(NotFittedError):
        c.predict(df)
    c.set_params(feature="something_else")
    assert est.feature == param
    # a fitted baseline pickles (MLflow logs it inside the run) and predicts the same afterwards
    back = pickle.loads(pickle.dumps(est))
    pd.testing.assert_frame_equal(back.predict(df), est.predict(df))


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("est,missing", [(FlopsLinear(), "flops"), (FlopsLinear(feature="macs"), "macs"),
                                         (LatencyEnergyProxy(), "latency_ms")])
def test_fit_without_the_feature_column_names_it(est, missing):
    df = _flops_frame(40)
    y = df[list(TARGETS)]
    X = df.drop(columns=[missing]) if missing in df else df
    with pytest.raises(DatasetError) as ei:
        est.fit(X, y)
    assert isinstance(ei.value, (CarbError, ValueError))
    assert missing in _one_line(ei.value)


def test_fit_without_enough_measured_rows_is_a_one_line_error():
    df = _flops_frame(40)
    y = df[list(TARGETS)].copy()
    y.iloc[1:] = np.nan                                      # one measured row per target: no line
    with pytest.raises(DatasetError) as ei:
        FlopsLinear().fit(df, y)
    _one_line(ei.value)
    df2 = _latency_frame(40)
    df2["energy_J"] = np.nan
    with pytest.raises(DatasetError) as ei:
        LatencyEnergyProxy().fit(df2, df2)
    assert "energy_J" in _one_line(ei.value)


@pytest.mark.parametrize("est,column", [(FlopsLinear(), "flops"), (LatencyEnergyProxy(), "latency_ms")])
def test_predict_without_the_feature_column_names_it(est, column):
    """The same DatasetError at predict time as at fit time (not a bare KeyError with a traceback)."""
    df = _flops_frame(40) if column == "flops" else _latency_frame(40)
    est.fit(df, df[list(TARGETS)])
    with pytest.raises(DatasetError) as ei:
        est.predict(df.drop(columns=[column]))
    assert column in _one_line(ei.value)
