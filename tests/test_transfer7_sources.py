"""Issue 44, point accuracy: where a K-row transfer's latency error lives (scripts.bench.transfer_pairs
error_sources): a per-precision offset, a trend in one row feature, or the target device's own run-to-run noise.
Synthetic devices whose zero-shot error has a known offset, a known slope and known noise."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from synthetic import synthetic_dataset


def _pending(rows: pd.DataFrame, offset: dict[str, float], slope: float, noise: float, seed: int = 0,
             k: int = 10) -> tuple[list[dict], np.ndarray]:
    """The benchmark's records of one CPU pair A -> B whose zero-shot log error on ``rows`` is ``offset`` per
    precision + ``slope`` x centred log FLOPs per image + N(0, ``noise``), and whose calibrated transfer at
    ``k`` removed the offsets exactly (its held-out error: the trend and the noise). Returns (records, the
    held-out positions)."""
    from carb.analysis.transfer import split_k

    rng = np.random.default_rng(seed)
    prec = rows["precision"].astype(str).to_numpy()
    x = np.log(rows["flops"].to_numpy(float) / rows["batch_size"].to_numpy(float))
    trend = slope * (x - x.mean())
    e0 = np.array([offset[p] for p in prec]) + trend + rng.normal(0.0, noise, len(rows))
    rest = split_k(rows, k)[1].index.to_numpy()
    ek = e0[rest] - np.array([offset[p] for p in prec[rest]])
    base = {"target": "latency_ms", "kind": "cpu", "pair": ("A", "B")}
    return [{**base, "k": 0, "name": "zero_shot", "err": e0, "precision": prec},
            {**base, "k": k, "name": "calibrated", "err": ek, "precision": prec[rest]}], rest


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """A synthetic device's rows, two precisions."""
    d = synthetic_dataset(n=240, seed=3, energy=False, telemetry=False)
    return d[d["precision"].astype(str).isin(["fp32", "bf16"])].reset_index(drop=True)


def test_error_sources_separates_offset_slope_and_noise(rows):
    """A 25 % / -15 % offset, a slope of 0.04 per log FLOPs per image and 3 % noise: the zero-shot errs most,
    the exact offset removes the offset only, the exact slope on log FLOPs per image (named) leaves about the
    noise's MAPE, and the noise explains a share of the calibrated error that matches its variance."""
    from scripts.bench.transfer_pairs import error_sources, noise_mape

    pend, _ = _pending(rows, {"fp32": 0.25, "bf16": -0.15}, 0.04, 0.03)
    d = error_sources(pend, {"B": rows}, 10, noise={"B": {"fp32": 0.03, "bf16": 0.03}}).set_index("precision")
    assert set(d.index) == {"fp32", "bf16"}
    for p in d.index:
        r = d.loc[p]
        assert r["k0"] > r["offset_oracle"] + 5.0          # the offset was most of the zero-shot's error
        assert r["trend_feature"] == "log_flops_per_image"
        assert r["trend_oracle"] < 0.6 * r["offset_oracle"]  # the known slope was the rest but the noise
        assert r["trend_oracle"] == pytest.approx(noise_mape(0.03), rel=0.3)
        assert r["k"] == pytest.approx(r["offset_oracle"], rel=0.05)   # the transfer fixed the offset exactly
        assert 0.0 < r["noise_share"] < 0.5                 # the slope's variance dominates the noise's


def test_error_sources_pure_noise_leaves_nothing_to_win(rows):
    """Only noise (8 %): no feature's slope wins much, and the noise explains almost all of the calibrated error;
    a device without a measured spread has NaN noise, never 0."""
    from scripts.bench.transfer_pairs import error_sources, error_sources_line

    pend, _ = _pending(rows, {"fp32": 0.0, "bf16": 0.0}, 0.0, 0.08, seed=1)
    d = error_sources(pend, {"B": rows}, 10, noise={"B": {"fp32": 0.08, "bf16": 0.08}})
    assert (d["trend_oracle"] > 0.93 * d["offset_oracle"]).all()
    assert (d["noise_share"] > 0.8).all()
    assert d["own_cv"].isna().all()
    assert error_sources(pend, {"B": rows}, 10)["noise"].isna().all()
    assert (d["n_seen"] == 0).all() and d["offset_oracle_seen"].isna().all()   # no source rows given
    half = rows.iloc[::2]   # the source measured every other configuration
    e = error_sources(pend, {"A": half, "B": rows}, 10).set_index("precision")
    assert (e["n_seen"] > 10).all() and (e["offset_oracle_unseen"] > 0).all() and (e["n_seen"] < e["n"]).all()
    line = error_sources_line(d.assign(own_cv=1.0))
    assert line.startswith("error_sources: cells=2 k_max=") and "cells_within_1.2x_floor=2" in line


def test_noise_mape_matches_sampling():
    """The closed-form noise MAPE against a large sample, and 0 without noise."""
    from scripts.bench.transfer_pairs import noise_mape

    z = np.random.default_rng(0).normal(0.0, 0.1, 400_000)
    assert noise_mape(0.1) == pytest.approx(100 * np.mean(np.abs(np.exp(-z) - 1)), rel=0.01)
    assert noise_mape(0.0) == 0.0


def test_offsets_study_finds_a_known_slope_and_no_slope_where_there_is_none(rows):
    """scripts.studies.transfer_offsets on a synthetic pair: with a strong slope on log FLOPs per image the
    K-row slope beats offsets alone on the random draws; on pure noise it does not."""
    from scripts.studies.transfer_offsets import study

    rng = np.random.default_rng(0)
    x = np.log(rows["flops"].to_numpy(float) / rows["batch_size"].to_numpy(float))
    for slope, better in ((0.15, True), (0.0, False)):
        e = 0.1 + slope * (x - x.mean()) + rng.normal(0.0, 0.03, len(rows))
        t = study({("A", "B"): (rows, e)}, k=10, draws=20, lams=(0.0,))
        mean = t.groupby("variant")["draws"].mean()
        assert bool(mean["slope:log_flops_per_image:0"] < 0.7 * mean["current"]) is better
        assert set(t["precision"]) == {"fp32", "bf16"} and "medoids" in set(t["variant"])
