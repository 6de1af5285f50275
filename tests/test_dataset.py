"""Dataset schema, validation errors, IO (file and shard folder) and the stratified split."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.data.io import load_dataset, save_dataset
from carb.data.schema import COLUMNS, TARGETS, validate_dataset
from carb.data.split import split_dataset
from carb.data.tiers import batch_tier, depth_tier, strata_key, telemetry_medians
from carb.errors import DatasetError
from carb.design.features import grid_features
from carb.design.space import load_space


def make_rows(n: int = 120, seed: int = 0, device: str = "test-device") -> pd.DataFrame:
    """Schema-complete synthetic rows (test-only)."""
    rng = np.random.default_rng(seed)
    cfgs = load_space("paper", [f"n={n}", f"seed={seed}"])
    df = grid_features(cfgs)
    df["device_name"] = device
    df["device_kind"] = "cpu"
    df["driver"] = "n/a"
    df["torch_version"] = "2.13.0"
    df["measured_at"] = "2026-12-02T00:00:00Z"
    df["status"] = "ok"
    df["error"] = ""
    df["missing_reason"] = ""
    df["avg_sm_util"] = rng.uniform(5, 95, n)
    df["avg_mem_util"] = rng.uniform(5, 95, n)
    df["gpu_temp_C"] = 50.0
    df["kernel_launches"] = 100.0
    df["peak_memory_MB"] = df["max_activation_MB"] * 3 + df["param_size_MB"]
    df["latency_ms"] = df["flops"] / 1e9 + 1
    df["energy_J"] = df["latency_ms"] * 0.2
    for c in ("n_runs", "n_warmup", "latency_std_ms", "avg_power_W", "locked_sm_clock_MHz",
              "locked_mem_clock_MHz", "duration_s", "threads", "protocol_s"):
        df[c] = 1.0
    return df


def test_valid_roundtrip(tmp_path):
    df = make_rows()
    p = save_dataset(df, tmp_path / "d.parquet")
    back = load_dataset(p)
    assert list(back.columns[:len(COLUMNS)]) == list(COLUMNS)
    assert len(back) == len(df)
    save_dataset(df, tmp_path / "d.csv")
    assert len(load_dataset(tmp_path / "d.csv")) == len(df)


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
    assert set(med) >= {"all", "small", "medium", "large", "xlarge"}
    assert set(TARGETS) == {"peak_memory_MB", "energy_J", "latency_ms"}
