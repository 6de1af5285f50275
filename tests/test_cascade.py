"""The CARB cascade on synthetic physics-like rows (tests/synthetic.py) and on the real reference data."""
from __future__ import annotations

import pickle
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from carb.cascade import FULL_FEATURES, CarbCascade
from carb.dataset import RUNTIME_FEATURES, TARGETS, ok_rows, reference_dataset, split_dataset
from carb.errors import DatasetError

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402

SPEC = {"xgb": {"n_estimators": 30, "max_depth": 4}, "lgbm": {"n_estimators": 30, "num_leaves": 15,
        "min_child_samples": 3, "verbose": -1}, "et": {"n_estimators": 20, "min_samples_leaf": 2}}
ARCH = [f for f in FULL_FEATURES if f not in RUNTIME_FEATURES and f not in
        ("batch_x_sm", "flops_x_sm", "act_x_mem", "util_product")]


def tiny(**kw) -> CarbCascade:
    return CarbCascade(specialists=SPEC, probe_estimators=20, oof_folds=3, n_jobs=1, **kw)


@pytest.fixture(scope="module")
def split():
    df = synthetic_dataset(260, seed=2)
    tr, va, te = split_dataset(df, 0).frames(df)
    return tr, va, te


@pytest.fixture(scope="module")
def fitted(split):
    tr, va, _ = split
    return tiny().fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])


def test_predict_frame_and_order(fitted, split):
    _, _, te = split
    p = fitted.predict(te)
    assert list(p.columns) == ["pred_peak_memory_MB", "pred_energy_J", "pred_latency_ms"]
    assert len(p) == len(te) and (p > 0).all().all()
    cols = fitted.stage_columns()
    assert "pred_peak_memory_MB" in cols["energy_J"] and "pred_energy_J" not in cols["peak_memory_MB"]
    assert {"pred_peak_memory_MB", "pred_energy_J"} <= set(cols["latency_ms"])
    assert fitted.targets_ == list(TARGETS)
    assert set(fitted.telemetry_medians_) >= {"small", "all"} and fitted.device_name_ == "Synthetic GPU"


def test_out_of_fold_priors_differ_from_in_sample(fitted, split):
    tr, _, _ = split
    oof = fitted.oof_predictions_["pred_peak_memory_MB"].to_numpy()
    insample = fitted.predict(tr)["pred_peak_memory_MB"].to_numpy()
    assert len(oof) == len(tr) and not np.allclose(oof, insample)
    err_oof = np.mean(np.abs(oof - tr["peak_memory_MB"]))
    err_in = np.mean(np.abs(insample - tr["peak_memory_MB"]))
    assert err_oof > err_in  # honest priors are worse than memorized ones


def test_learns_the_known_relation(fitted, split):
    _, _, te = split
    r2 = fitted.score(te, te[list(TARGETS)])
    assert r2 > 0.6


def test_corrector_gating_report(fitted):
    for t, rep in fitted.corrector_report_.items():
        for name, entry in rep.items():
            if "val_mae_after" in entry:
                assert entry["kept"] == (entry["val_mae_after"] < entry["val_mae_before"])
            else:
                assert entry["kept"] is False and entry["reason"]
        kept = [n for n, _ in fitted.stages_[t].correctors]
        assert kept == [n for n, e in rep.items() if e["kept"]]


def test_low_batch_corrector_kept_when_offset():
    df = synthetic_dataset(300, seed=4)
    df.loc[df["batch_size"] <= 8, "latency_ms"] *= 3.0  # a systematic low-batch regime effect
    tr, va, _ = split_dataset(df, 0).frames(df)
    arch_feats = [f for f in ARCH if f != "batch_size"]  # hide the regime from the specialists
    m = tiny(features=arch_feats, feature_set="custom").fit(tr, tr[["latency_ms"]], va, va[["latency_ms"]])
    rep = m.corrector_report_["latency_ms"]["low_batch"]
    assert rep["kept"] and rep["val_mae_after"] < rep["val_mae_before"]


def test_missing_target_stage_dropped(split):
    tr, va, te = split
    tr, va = tr.assign(energy_J=np.nan), va.assign(energy_J=np.nan)
    with pytest.warns(UserWarning, match="energy_J"):
        m = tiny().fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    assert m.targets_ == ["peak_memory_MB", "latency_ms"] and "energy_J" in m.dropped_targets_
    assert list(m.predict(te).columns) == ["pred_peak_memory_MB", "pred_latency_ms"]


def test_arch_only_with_nan_telemetry(split):
    tr, va, te = split
    nan = {c: np.nan for c in RUNTIME_FEATURES}
    tr, va, te = tr.assign(**nan), va.assign(**nan), te.assign(**nan)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to drop: arch_only never looks at telemetry
        m = tiny(features=ARCH, feature_set="arch_only").fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    assert m.feature_set_ == "arch_only" and m.predict(te).notna().all().all()


def test_deterministic_clone_pickle(fitted, split):
    tr, va, te = split
    again = clone(fitted).fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    pd.testing.assert_frame_equal(fitted.predict(te), again.predict(te))
    back = pickle.loads(pickle.dumps(fitted))
    pd.testing.assert_frame_equal(fitted.predict(te), back.predict(te))


def test_floor_keeps_predictions_positive(fitted, split):
    _, _, te = split
    far = te.copy()
    far["flops"] = 1.0  # far outside the training range
    far["params"] = 1
    p = fitted.predict(far)
    for t in fitted.targets_:
        assert (p[f"pred_{t}"] >= fitted.stages_[t].floor).all() and fitted.stages_[t].floor > 0


def test_bad_input(split):
    tr, va, te = split
    with pytest.raises(DatasetError, match="no target"):
        tiny().fit(tr, tr[list(TARGETS)] * np.nan, va, va[list(TARGETS)] * np.nan)
    with pytest.raises(DatasetError, match="flops"):
        tiny().fit(tr.drop(columns=["flops"]), tr[list(TARGETS)], va, va[list(TARGETS)])
    with pytest.raises(DatasetError, match=r"needs column\(s\) \['flops'\]"):
        CarbCascade.predict(tiny().fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)]), te.drop(columns=["flops"]))


def test_reference_dataset_fits_without_energy():
    df = ok_rows(reference_dataset())
    assert df["energy_J"].isna().all() and len(df) >= 400
    tr, va, te = split_dataset(df, 0).frames(df)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = tiny().fit(tr, tr[list(TARGETS)], va, va[list(TARGETS)])
    assert m.targets_ == ["peak_memory_MB", "latency_ms"]
    assert m.score(te, te[list(TARGETS)]) > 0.8
