"""Screening at NAS scale (issue 32 item 3): chunked screening gives the one-pass results row for row, the
knob-frame candidates are the ArchConfig path's, and the vectorized pieces (Pareto front, row-wise
interpolation, isotonic rows) equal their brute-force or loop references."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.scale import chunk_plan, interp_rows, pareto_mask
from carb.analysis.screening import featurize, screen, source_objective, objective_values, score
from carb.design.candidates import arch_codes, config_ids, records_frame
from carb.design.features import grid_features
from carb.design.space import configs_from_cfg, space_config, space_frame
from carb.errors import ConfigError
from carb.model.monotone import pav_increasing, pav_rows
from tests.synthetic import synthetic_dataset

TARGETS = ["peak_memory_MB", "energy_J", "latency_ms"]


def _space(n: int = 300, seed: int = 1) -> dict:
    """A random sample of a widened screening space: batch sizes between and beyond the knots."""
    s = space_config("screening")
    s.update(mode="random", n=n, seed=seed, width_mults=[0.5, 0.75, 1.0], batch_sizes=[1, 3, 8, 32, 512],
             inner_mults=[1.0, 2.0])
    return s


@pytest.fixture(scope="module")
def model():
    """A small fitted cascade with calibrated intervals (knots, priors, telemetry imputer, intervals)."""
    from carb.model.cascade import CarbCascade
    from carb.model.intervals import calibrate
    from tests.test_physics import FAST

    rows = synthetic_dataset(150, seed=3)
    m = CarbCascade(**FAST).fit(rows, rows[TARGETS])
    cal = synthetic_dataset(80, seed=4)
    m.intervals_ = calibrate(m, cal, cal[TARGETS])
    return m


def test_chunked_screen_equals_one_pass(model):
    s = _space() | {"mode": "grid", "depths": {"basic": [14], "bottleneck": [26]}, "width_mults": [0.5, 1.0],
                    "input_sizes": [32, 64], "precisions": ["fp32", "fp16"], "early_downsample": [True]}
    grid = featurize(space_frame(s))           # 24 architectures x 5 batch sizes
    one = screen(grid, model, {"energy_J": 1.0, "peak_memory_MB": 5e3}, None, model, top_k=40)
    budget = {"energy_J": float(np.nanmedian(one.scored["pred_energy_J"])), "peak_memory_MB": 5e3}   # re-scored rows
    one = screen(grid, model, budget, None, model, top_k=40)
    calls: list[tuple[str, float]] = []
    many = screen(grid, model, budget, None, model, top_k=40, chunk_rows=60,
                  progress=lambda label, share: calls.append((label, share)))
    assert len(calls) >= 3 and calls[0][0].startswith("chunk 1/")
    assert sum(share for _, share in calls) == pytest.approx(1.0)
    assert list(one.scored.columns) == list(many.scored.columns)
    pd.testing.assert_frame_equal(one.scored, many.scored, check_exact=False, rtol=1e-12, atol=0)
    assert one.counts == many.counts and one.stages == many.stages
    assert one.shortlist["config_id"].tolist() == many.shortlist["config_id"].tolist()
    assert one.profile["config_id"].tolist() == many.profile["config_id"].tolist()
    assert {"lo_energy_J", "p_feasible", "decision"} <= set(one.scored.columns)
    assert one.scored["decision"].nunique() > 1


def test_source_objective_is_the_scored_objective(model):
    grid = featurize(space_frame(_space(150, seed=2)))
    for obj in ("energy_J", "latency_ms_per_image"):
        assert np.array_equal(source_objective(model, grid, obj), objective_values(score(model, grid), obj))


def test_chunks_keep_architectures_whole_and_cover_every_row():
    grid = featurize(space_frame(_space(500)))
    chunks = chunk_plan(grid, 60, knots=5)
    assert len(chunks) > 3
    assert np.array_equal(np.sort(np.concatenate(chunks)), np.arange(len(grid)))
    keys = [k for k in ("block", "depth", "width_mult", "input_size", "precision", "early_downsample", "stages",
                        "inner_mult") if k in grid.columns]
    codes, _ = arch_codes(grid, keys)
    owner = np.empty(len(grid), dtype=int)
    for i, c in enumerate(chunks):
        owner[c] = i
    assert all(len(set(owner[codes == a])) == 1 for a in np.unique(codes))
    assert [len(c) for c in chunk_plan(grid, None)] == [len(grid)]


@pytest.mark.parametrize("space", ["grid", "random"])
def test_space_frame_is_the_archconfig_path(space):
    s = space_config("screening") if space == "grid" else _space(2000, seed=5) | {"max_flops": 5e10}
    configs = configs_from_cfg(s)
    frame = space_frame(s)
    assert len(frame) == len(configs)
    assert config_ids(frame).tolist() == [c.config_id for c in configs]
    pd.testing.assert_frame_equal(grid_features(frame), grid_features(configs))


def test_records_frame_names_the_bad_row():
    df = pd.DataFrame({"block": ["basic", "basic", "basic"], "depth": [14, 20, 21], "batch_size": [1, 8, 8],
                       "precision": ["fp32", "fp16", "fp32"]})
    with pytest.raises(ConfigError, match=r"row 2: depth: 21"):
        records_frame(df)
    with pytest.raises(ConfigError, match=r"row 1: precision"):
        records_frame(df.assign(depth=14, precision=["fp32", "fp8", "fp32"]))


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_pareto_front_equals_brute_force(d):
    rng = np.random.default_rng(d)
    for ties in (True, False):
        v = rng.integers(0, 5, size=(400, d)).astype(float) if ties else rng.random((400, d))
        le = (v[None, :, :] <= v[:, None, :]).all(axis=2)
        lt = (v[None, :, :] < v[:, None, :]).any(axis=2)
        brute = ~(le & lt).any(axis=1)
        assert np.array_equal(pareto_mask(v, block=64), brute)


def test_interp_rows_is_np_interp_per_row():
    rng = np.random.default_rng(0)
    lo = np.minimum.accumulate(rng.choice([0.0, 0.5, 1.0, 1.0, 2.0], size=(300, 5)), axis=1)
    hi = np.maximum.accumulate(rng.choice([2.0, 3.0, 3.0, 4.0, np.inf], size=(300, 5)), axis=1)
    with np.errstate(divide="ignore"):
        xp = np.log(np.concatenate([lo[:, ::-1], hi], axis=1))
    xp[7] = np.nan
    fp = np.linspace(0.05, 0.95, 10)
    for x in np.log([0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0]):
        ref = np.array([np.interp(x, r[np.isfinite(r)], fp[np.isfinite(r)]) if np.isfinite(r).any() else np.nan
                        for r in xp])
        assert np.array_equal(interp_rows(x, xp, fp), ref, equal_nan=True)


def test_pav_rows_is_pav_per_row():
    rng = np.random.default_rng(1)
    y = np.cumsum(rng.normal(0.2, 1.0, size=(500, 9)), axis=1)
    y[::5] = np.sort(y[::5], axis=1)
    y[3, 2] = np.nan
    ref = np.vstack([pav_increasing(r) for r in y])
    got = pav_rows(y)
    assert np.allclose(got, ref, rtol=1e-12, atol=1e-12, equal_nan=True)
    assert np.array_equal(got[::5], y[::5])            # rows already in order are returned as they are
