"""CarbCascade on synthetic physics-like rows (tests/synthetic.py): output frame, cascade order and
out-of-fold priors, corrector gating, physical floor, missing-target stage dropping, arch_only with NaN
telemetry, determinism, clone/pickle, bad input. Tiny specialist sizes, one thread."""
from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.base import clone
from synthetic import synthetic_dataset

from carb.data.schema import TARGETS
from carb.errors import DatasetError
from carb.model.cascade import CarbCascade
from carb.model.encoding import add_interactions, encode
from carb.model.ensemble import BlendedRegressor

CONF = Path(__file__).resolve().parent.parent / "conf"
TINY = {"xgb": {"n_estimators": 15, "max_depth": 4},
        "lgbm": {"n_estimators": 15, "num_leaves": 15, "min_child_samples": 3},
        "et": {"n_estimators": 10, "min_samples_leaf": 2}}
CORR = {"model": {"max_iter": 30, "max_depth": 2, "learning_rate": 0.3, "min_samples_leaf": 5},
        "min_rows": 10}
PRED = ["pred_peak_memory_MB", "pred_energy_J", "pred_latency_ms"]


def features(name: str) -> list[str]:
    return list(yaml.safe_load((CONF / "features" / f"{name}.yaml").read_text())["columns"])


def tiny(**kw) -> CarbCascade:
    kw.setdefault("correctors", CORR)
    return CarbCascade(specialists=TINY, probe_estimators=15, oof_folds=2, n_jobs=1, random_state=0, **kw)


@pytest.fixture(scope="module")
def data():
    df = synthetic_dataset(260, seed=11).sample(frac=1.0, random_state=0)  # rows come in grid order
    return df.iloc[:200].reset_index(drop=True), df.iloc[200:].reset_index(drop=True)


@pytest.fixture(scope="module")
def fitted(data):
    tr, va = data
    return tiny().fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])


def test_predict_frame(fitted, data):
    _, va = data
    p = fitted.predict(va)
    assert isinstance(p, pd.DataFrame) and list(p.columns) == PRED
    assert p.index.equals(va.index) and p.notna().all().all() and (p > 0).all().all()
    # learns the known cost model even with 15-tree specialists: far better than a constant
    for t in TARGETS:
        y = va[t].to_numpy()
        assert np.mean(np.abs(p[f"pred_{t}"] - y)) < 0.5 * np.mean(np.abs(y - np.median(y)))
    assert fitted.score(va, va[list(TARGETS)]) > 0.5
    # a shuffled index comes back unchanged
    sh = va.sample(frac=1.0, random_state=0)
    np.testing.assert_allclose(fitted.predict(sh).loc[va.index].to_numpy(), p.to_numpy())


def test_fitted_attributes_for_serving(fitted):
    assert fitted.targets_ == list(TARGETS) and fitted.dropped_targets_ == {}
    assert fitted.feature_set_ == "full" and fitted.device_name_ == "Synthetic GPU"
    assert "avg_sm_util" in fitted.input_columns_ and "batch_x_sm" not in fitted.input_columns_
    assert fitted.telemetry_medians_  # per batch tier, for screening
    assert set(fitted.val_mae_) == set(TARGETS) and all(v > 0 for v in fitted.val_mae_.values())
    for t in TARGETS:
        w = np.array(list(fitted.blend_weights_[t].values()))
        assert np.all(w >= 0) and w.sum() == pytest.approx(1.0)
        assert isinstance(fitted.log_target_[t], bool)
    s = fitted.summary()
    assert s["targets"] == list(TARGETS) and "correctors" in s and "fit_seconds" in s


def test_cascade_order_and_upstream_columns(fitted):
    cols = fitted.stage_columns()
    assert list(cols) == list(TARGETS)
    assert not any(c.startswith("pred_") for c in cols["peak_memory_MB"])
    assert cols["energy_J"][-1:] == ["pred_peak_memory_MB"]
    assert cols["latency_ms"][-2:] == ["pred_peak_memory_MB", "pred_energy_J"]
    assert cols["latency_ms"][:-2] == cols["peak_memory_MB"] == fitted.encoded_names_


def test_downstream_stages_train_on_out_of_fold_priors(data, monkeypatch):
    """The energy and latency stages see the out-of-fold memory/energy predictions as training
    features, and those differ from the in-sample predictions of the full stage model."""
    tr, va = data
    seen: list[pd.DataFrame] = []
    orig = BlendedRegressor.fit

    def spy(self, X, y, X_val=None, y_val=None):
        if X_val is not None:  # the stage fits (fold fits get no validation set)
            seen.append(X.copy())
        return orig(self, X, y, X_val=X_val, y_val=y_val)

    monkeypatch.setattr(BlendedRegressor, "fit", spy)
    c = tiny(correctors={**CORR, "low_batch": {"enabled": False}, "high_load": {"enabled": False}})
    c.fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    assert len(seen) == 3
    oof = c.oof_predictions_
    np.testing.assert_array_equal(seen[1]["pred_peak_memory_MB"].to_numpy(), oof["pred_peak_memory_MB"])
    np.testing.assert_array_equal(seen[2]["pred_energy_J"].to_numpy(), oof["pred_energy_J"])
    D = encode(add_interactions(tr), c.feature_names_)
    insample = c.stages_["peak_memory_MB"].base_predict(D, add_interactions(tr))
    y = tr["peak_memory_MB"].to_numpy()
    assert not np.allclose(insample, oof["pred_peak_memory_MB"])
    # in-sample predictions are optimistic; out-of-fold ones are honest (larger error)
    assert np.mean(np.abs(insample - y)) < np.mean(np.abs(oof["pred_peak_memory_MB"] - y))


def _offset_frames(offset_in_val: bool):
    """Memory target = 1000 * width + 200 * depth/50 (+ 400 MB on bs <= 8 rows in training; in
    validation only if ``offset_in_val``). The stage sees only width and depth, so it cannot know the
    batch size: the low-batch regime has a systematic residual that only a corrector can remove."""
    df = synthetic_dataset(360, seed=5).sample(frac=1.0, random_state=1).reset_index(drop=True)
    y = 1000.0 * df["width_mult"] + 200.0 * df["depth"] / 50.0
    low = df["batch_size"] <= 8
    tr, va = df.iloc[:280].copy(), df.iloc[280:].copy()
    tr["peak_memory_MB"] = y.iloc[:280] + 400.0 * low.iloc[:280]
    va["peak_memory_MB"] = y.iloc[280:] + (400.0 * low.iloc[280:] if offset_in_val else 0.0)
    return [d.reset_index(drop=True) for d in (tr, va)]


@pytest.mark.parametrize("offset_in_val,kept", [(True, True), (False, False)])
def test_low_batch_corrector_is_kept_only_when_it_lowers_validation_mae(offset_in_val, kept):
    tr, va = _offset_frames(offset_in_val)
    corr = {**CORR, "high_load": {"enabled": False}}
    c = tiny(features=["width_mult", "depth"], feature_set="custom", log_target=False, correctors=corr)
    c.fit(tr, tr[["peak_memory_MB"]], va, va[["peak_memory_MB"]])
    rep = c.corrector_report_["peak_memory_MB"]["low_batch"]
    assert rep["kept"] is kept
    assert (rep["val_mae_after"] < rep["val_mae_before"]) is kept
    names = [n for n, _ in c.stages_["peak_memory_MB"].correctors]
    assert names == (["low_batch"] if kept else [])
    assert c.corrector_report_["peak_memory_MB"]["high_load"]["kept"] is False
    if kept:  # the kept corrector is applied at serving: low-batch validation error drops a lot
        p = c.predict(va)["pred_peak_memory_MB"].to_numpy()
        low = va["batch_size"].to_numpy() <= 8
        assert np.mean(np.abs(p[low] - va["peak_memory_MB"].to_numpy()[low])) < 0.5 * rep["val_mae_before"]


def test_predictions_are_floored_at_a_positive_value(data, monkeypatch):
    """Costs are positive: even when the specialists return negative values (as a raw-space model
    plus correctors did: pred_energy_J = -14), every stage returns at least its floor (half the
    smallest training target), and the downstream stages receive the floored value."""
    tr, va = data
    monkeypatch.setattr(BlendedRegressor, "predict", lambda self, X: np.full(len(X), -14.0))
    monkeypatch.setattr(BlendedRegressor, "predict_matrix", lambda self, X: np.full(len(X), -14.0))   # serving
    off = {**CORR, "low_batch": {"enabled": False}, "high_load": {"enabled": False}}
    c = tiny(log_target=False, correctors=off, physics=False).fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    for t in TARGETS:
        floor = c.stages_[t].floor
        assert floor == pytest.approx(0.5 * tr[t].min()) and floor > 0
        assert c.oof_predictions_[f"pred_{t}"].min() >= floor
    p = c.predict(va)
    assert (p > 0).all().all()
    for t in TARGETS:
        np.testing.assert_allclose(p[f"pred_{t}"], c.stages_[t].floor)
        assert c.val_mae_[t] == pytest.approx(np.mean(np.abs(va[t] - c.stages_[t].floor)))
    # with correctors (fitted on the huge residuals, so kept) the output still never goes below the floor
    w = tiny(log_target=False, physics=False).fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    pw = w.predict(va)
    for t in TARGETS:
        assert pw[f"pred_{t}"].min() >= w.stages_[t].floor


def test_missing_target_drops_its_stage_with_a_warning():
    df = synthetic_dataset(220, seed=2, energy=False)
    with pytest.warns(UserWarning, match="energy_J.*dropped"):
        c = tiny().fit(df, df[list(TARGETS)])
    assert c.targets_ == ["peak_memory_MB", "latency_ms"]
    assert "energy_J" in c.dropped_targets_ and "all NaN" in c.dropped_targets_["energy_J"]
    assert c.stage_columns()["latency_ms"][-1:] == ["pred_peak_memory_MB"]
    p = c.predict(df)
    assert list(p.columns) == ["pred_peak_memory_MB", "pred_latency_ms"] and p.notna().all().all()


@pytest.mark.slow
def test_arch_only_with_nan_telemetry_is_not_an_error():
    df = synthetic_dataset(200, seed=4, telemetry=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no dropped-feature warning: arch_only names no telemetry
        c = tiny(features=features("arch_only"), feature_set="arch_only").fit(df, df[list(TARGETS)])
    assert c.feature_set_ == "arch_only" and c.dropped_features_ == {}
    assert not any(f in c.input_columns_ for f in ("avg_sm_util", "avg_mem_util", "gpu_temp_C"))
    assert c.corrector_report_["peak_memory_MB"]["high_load"]["kept"] is False
    assert c.predict(df).notna().all().all()
    # the full set on the same data drops the all-NaN telemetry with a warning and still fits
    with pytest.warns(UserWarning, match="dropping feature"):
        f = tiny(features=features("full")).fit(df, df[list(TARGETS)])
    assert "avg_sm_util" in f.dropped_features_ and f.predict(df).notna().all().all()


@pytest.mark.slow
def test_determinism_same_seed_same_predictions(data, fitted):
    tr, va = data
    again = tiny().fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    pd.testing.assert_frame_equal(again.predict(va), fitted.predict(va))


def test_clone_and_pickle_round_trip(fitted, data):
    _, va = data
    c = clone(fitted)
    assert not hasattr(c, "stages_") and c.get_params() == fitted.get_params()
    back = pickle.loads(pickle.dumps(fitted))
    pd.testing.assert_frame_equal(back.predict(va), fitted.predict(va))
    assert back.stages_["latency_ms"].floor == fitted.stages_["latency_ms"].floor


def test_internal_validation_split(data):
    tr, _ = data
    c = tiny(val_fraction=0.2).fit(tr, tr[list(TARGETS)])
    assert len(c.oof_predictions_) == 160  # 80 % of 200 rows fitted, 20 % held out for calibration


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


@pytest.mark.filterwarnings("ignore:CARB cascade")
def test_bad_input_one_line_errors(data):
    tr, va = data
    y = tr[list(TARGETS)].copy()
    y[:] = np.nan
    with pytest.raises(DatasetError) as e:
        tiny().fit(tr, y)
    assert "no target" in _one_line(e)
    bad = tr.drop(columns=["flops"])
    with pytest.raises(DatasetError) as e:
        tiny(features=features("arch_only"), feature_set="arch_only").fit(bad, bad[list(TARGETS)])
    assert "flops" in _one_line(e) and "arch_only" in _one_line(e)
    with pytest.raises(DatasetError) as e:
        tiny().fit(tr.head(6), tr.head(6)[list(TARGETS)])
    assert "too few rows" in _one_line(e)
    with pytest.raises(DatasetError) as e:
        tiny().fit(tr, tr[["peak_memory_MB", "status"]])
    assert "status" in _one_line(e)
    c = tiny().fit(tr, tr[["peak_memory_MB"]], va, va[["peak_memory_MB"]])
    with pytest.raises(DatasetError) as e:
        c.predict(va.drop(columns=["depth"]))
    assert "depth" in _one_line(e)
