"""Dataset schema, validation errors, IO (file and shard folder) and the stratified split."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from synthetic import synthetic_dataset

from carb.data.io import load_dataset, save_dataset
from carb.data.schema import available_targets, ok_rows, validate_dataset
from carb.data.split import split_dataset
from carb.data.tiers import batch_tier, depth_tier, strata_key, telemetry_medians
from carb.errors import DatasetError


def make_rows(n: int = 120, seed: int = 0, n_oom: int = 0) -> pd.DataFrame:
    """Schema-complete synthetic rows (tests/synthetic.py)."""
    return synthetic_dataset(n, seed=seed, device_name="test-device", n_oom=n_oom)


def test_valid_roundtrip(tmp_path):
    """Parquet and CSV both come back with the schema's column order, dtypes and values."""
    df = make_rows(n_oom=3)
    want = validate_dataset(df)
    back = load_dataset(save_dataset(df, tmp_path / "d.parquet"))
    pd.testing.assert_frame_equal(back, want)
    csv = load_dataset(save_dataset(df, tmp_path / "d.csv"))   # text: types must be restored by the schema
    text = [c for c in want.columns if want[c].dtype == "string"]   # CSV cannot tell "" from missing
    pd.testing.assert_frame_equal(csv.fillna({c: "" for c in text}), want.fillna({c: "" for c in text}),
                                  check_exact=False, rtol=1e-12)
    assert csv["early_downsample"].dtype == bool and csv["depth"].dtype == "int64"
    assert (csv["status"] == "oom").sum() == 3 and csv.loc[csv["status"] == "oom", "latency_ms"].isna().all()


def test_shard_folder(tmp_path):
    df = make_rows(60)
    save_dataset(df.iloc[:30], tmp_path / "shards" / "shard-0-of-2.parquet")
    save_dataset(df.iloc[30:], tmp_path / "shards" / "shard-1-of-2.parquet")
    assert len(load_dataset(tmp_path / "shards")) == 60


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.drop(columns=["latency_ms"]), "missing column"),
    (lambda d: d.assign(depth=d["depth"].astype(str).where(d.index != 3, "deep")), "'depth'"),
    (lambda d: d.assign(energy_J=d["energy_J"].where(d.index != 7, 0.0)), "'energy_J'"),
    (lambda d: d.assign(precision=d["precision"].where(d.index != 2, "int8")), "'precision'"),
    (lambda d: pd.concat([d, d.iloc[[5]]], ignore_index=True), "duplicate config_id"),
])
def test_validation_errors_name_column_and_rows(mutate, needle):
    bad = mutate(make_rows(40))
    with pytest.raises(DatasetError) as e:
        validate_dataset(bad)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_validation_reports_first_offending_row():
    df = make_rows(40)
    df.loc[7, "energy_J"] = -1.0
    with pytest.raises(DatasetError, match=r"rows 7$"):
        validate_dataset(df)


def test_missing_target_is_nan_not_error():
    df = make_rows(40)
    df["energy_J"] = np.nan
    assert validate_dataset(df)["energy_J"].isna().all()


def test_tiers():
    assert list(batch_tier([1, 4, 5, 16, 17, 128, 256])) == ["small", "small", "medium", "medium",
                                                               "large", "large", "xlarge"]
    assert batch_tier(8) == "medium"
    assert list(depth_tier([8, 20, 26, 56, 101])) == ["shallow", "shallow", "mid", "mid", "deep"]


def test_split_is_seeded_stratified_and_disjoint():
    df = make_rows(400)
    s = split_dataset(df, seed=3)
    parts = [set(s.train), set(s.val), set(s.test)]
    assert sum(map(len, parts)) == len(df) and not (parts[0] & parts[1]) and not (parts[1] & parts[2])
    assert abs(len(s.train) / len(df) - 0.70) < 0.05
    assert abs(len(s.test) / len(df) - 0.15) < 0.05
    s2 = split_dataset(df, seed=3)
    assert (s.test == s2.test).all()
    assert not np.array_equal(split_dataset(df, seed=4).test, s.test)
    key = pd.Series(strata_key(df))
    big = key.value_counts()[lambda v: v >= 20].index
    for k in big:  # each large stratum is represented in test in proportion
        frac = np.isin(np.flatnonzero(key == k), s.test).mean()
        assert 0.05 < frac < 0.3


def test_split_too_few_rows():
    with pytest.raises(DatasetError, match="too few rows"):
        split_dataset(make_rows(10))


def test_telemetry_medians_per_tier():
    df = make_rows(200)
    med = telemetry_medians(df)
    small = df[df["batch_size"] <= 4]["avg_sm_util"].median()
    assert med["small"]["avg_sm_util"] == pytest.approx(small)
    assert med["all"]["avg_mem_util"] == pytest.approx(df["avg_mem_util"].median())
    assert set(med) >= {"all", "small", "medium", "large", "xlarge"}


def test_available_targets_follow_the_data_in_cascade_order():
    df = make_rows(40, n_oom=4)
    assert available_targets(df) == ["peak_memory_MB", "energy_J", "latency_ms"]
    no_energy = df.assign(energy_J=np.nan)
    assert available_targets(no_energy) == ["peak_memory_MB", "latency_ms"]
    # a target with values only on non-ok rows is not available; ok_rows drops the oom rows
    only_oom = df.assign(latency_ms=np.where(df["status"] == "ok", np.nan, 1.0))
    assert available_targets(only_oom) == ["peak_memory_MB", "energy_J"]
    assert len(ok_rows(df)) == 40 and (ok_rows(df)["status"] == "ok").all()
