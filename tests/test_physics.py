"""Physics-informed stages and extrapolation splits (issue 11): priors recover known coefficients,
stay non-negative and monotone; the cascade never predicts memory below the parameter bytes; on data
with known physics it extrapolates to larger batches where the plain cascade and B1 do not; the
leave-out splits and their metrics."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.extrapolation import (
    default_splits,
    error_concentration,
    evaluate_splits,
    group_splits,
    pool_group_splits,
    precision_split,
    range_splits,
    sanity_report,
    split_metrics,
    summary_line,
)
from carb.analysis.screening import featurize
from carb.design.arch import ArchConfig
from carb.design.space import load_space
from carb.model.cascade import CarbCascade
from carb.model.physics import MemoryPrior, RooflinePrior, input_MB, make_prior

FAST = dict(specialists={"xgb": {"n_estimators": 40, "max_depth": 4}, "lgbm": {"n_estimators": 40, "verbose": -1},
                         "et": {"n_estimators": 30}}, probe_estimators=20, oof_folds=2, n_jobs=1)
KNOB_FEATURES = ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample",
                 "flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB", "n_conv"]


def physics_rows(n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Real static features of random configurations with targets from known physics (x 3 % noise):
    memory = 2 + 1.0 x params + 3.0 x max activation + input; latency = 0.5 ms + flops / rate(precision)
    + 0.01 ms per conv; energy = 40 W x latency."""
    rng = np.random.default_rng(seed)
    cfgs = {}
    while len(cfgs) < n:
        block = str(rng.choice(["basic", "bottleneck"]))
        depth = int(rng.choice([14, 20, 32]) if block == "basic" else rng.choice([26, 50]))
        c = ArchConfig(block, depth, float(rng.choice([0.25, 0.5, 1.0, 1.5, 2.0])),
                       int(rng.choice([32, 64, 96, 128])), int(rng.choice([1, 2, 4, 8, 16, 32, 64])),
                       str(rng.choice(["fp32", "bf16"])), bool(rng.integers(2)))
        cfgs[c.config_id] = c
    df = featurize(list(cfgs.values()))
    noise = lambda: rng.lognormal(0, 0.03, len(df))  # noqa: E731
    rate = np.where(df["precision"] == "fp32", 4e7, 1e8)  # FLOPs per ms
    df["peak_memory_MB"] = (2.0 + df["param_size_MB"] + 3.0 * df["max_activation_MB"] + input_MB(df)) * noise()
    df["latency_ms"] = (0.5 + df["flops"] / rate + 0.01 * df["n_conv"]) * noise()
    df["energy_J"] = 40.0 * df["latency_ms"] / 1e3 * noise()
    df["device_name"] = "physics"
    return df


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return physics_rows()


def test_priors_recover_known_physics(rows):
    mem = MemoryPrior().fit(rows, rows["peak_memory_MB"])
    assert mem.coef_["per_param_MB"] == pytest.approx(1.0, rel=0.1)
    assert mem.coef_["per_max_activation_MB"] == pytest.approx(3.0, rel=0.1)
    assert mem.train_mape_ < 0.05
    lat = RooflinePrior().fit(rows, rows["latency_ms"])
    assert 1 / lat.coef_["per_flop_fp32"] == pytest.approx(4e7, rel=0.1)
    assert 1 / lat.coef_["per_flop_bf16"] == pytest.approx(1e8, rel=0.1)
    assert all(v >= 0 for v in {**mem.coef_, **lat.coef_}.values())
    assert lat.train_mape_ < 0.05
    # monotone: doubling the batch never lowers a prior
    big = rows.assign(batch_size=rows["batch_size"] * 2, flops=rows["flops"] * 2,
                      max_activation_MB=rows["max_activation_MB"] * 2,
                      total_activation_MB=rows["total_activation_MB"] * 2)
    assert (mem.predict(big) >= mem.predict(rows)).all() and (lat.predict(big) >= lat.predict(rows)).all()


def test_unseen_precision_borrows_the_nearest_rate(rows):
    lat = make_prior("latency_ms").fit(rows[rows["precision"] == "fp32"], rows.loc[rows["precision"] == "fp32", "latency_ms"])
    assert lat.precisions_ == ["fp32"] and lat.stand_in("fp16") == "fp32"
    x = rows.head(5).assign(precision="fp16")
    assert np.allclose(lat.predict(x), lat.predict(x.assign(precision="fp32")))


def test_extrapolation_to_larger_batches(rows):
    small, large = rows[rows["batch_size"] <= 8], rows[rows["batch_size"] > 8]
    targets = ["peak_memory_MB", "energy_J", "latency_ms"]
    r2 = {}
    for physics in (True, False):
        m = CarbCascade(features=KNOB_FEATURES, physics=physics, **FAST).fit(small, small[targets])
        p = m.predict(large)
        r2[physics] = {t: 1 - ((large[t] - p[f"pred_{t}"]) ** 2).sum() / ((large[t] - large[t].mean()) ** 2).sum()
                       for t in targets}
    for t in targets:
        assert r2[True][t] > 0.9, (t, r2)
        assert r2[True][t] > r2[False][t], (t, r2)


def test_memory_never_below_parameter_bytes(rows):
    m = CarbCascade(features=KNOB_FEATURES, **FAST).fit(rows, rows[["peak_memory_MB", "latency_ms"]])
    grid = featurize(load_space("screening"))
    rep = sanity_report(m, grid)
    assert rep["sanity_n"] == 3072 and rep["sanity_memory_below_params"] == 0.0
    assert 0.0 <= rep["sanity_latency_ms_batch_violations"] <= 1.0
    assert m.priors_["peak_memory_MB"]["kind"] == "MemoryPrior" and m.summary()["priors"]


def test_splits(rows):
    sp = {s.name: s for s in default_splits(rows, train_share=0.7, min_rows=20)}
    assert {"batch", "width", "input", "precision"} <= set(sp)
    b = sp["batch"]
    assert rows.loc[b.train, "batch_size"].max() < rows.loc[b.test, "batch_size"].min()
    assert b.train.sum() <= 0.7 * len(rows) and (b.train ^ b.test).all()
    assert set(rows.loc[sp["precision"].train, "precision"]) == {"fp32"}
    assert precision_split(rows[rows["precision"] == "fp32"]) == []
    assert range_splits(rows.assign(depth=14)).__len__() == 3   # a constant knob gives no split


def test_evaluate_splits_reports_carb_beside_b1(rows):
    splits = [s for s in default_splits(rows) if s.name in ("batch", "precision")]
    table = evaluate_splits(lambda: CarbCascade(features=KNOB_FEATURES, **FAST), rows, splits,
                            targets=["peak_memory_MB", "latency_ms"])
    assert set(table["split"]) == {"batch", "precision"} and len(table) == 4
    m = split_metrics(table)
    assert {"xval_batch_latency_ms_r2", "xval_batch_latency_ms_b1_r2", "xval_precision_peak_memory_MB_mape"} <= set(m)
    assert m["xval_batch_peak_memory_MB_r2"] > m["xval_batch_peak_memory_MB_b1_r2"]
    line = summary_line(table)
    assert line.startswith("min_xval_latency_r2=") and "worse_than_b1=" in line
    fields = dict(f.split("=") for f in line.split())
    gap = (table["b1_r2"] - table["r2"]).max()
    assert int(fields["worse_than_b1"]) == int((table["r2"] < table["b1_r2"]).sum())
    assert float(fields["max_r2_below_b1"]) == pytest.approx(max(gap, 0.0), abs=1e-4)


def test_leave_one_group_out_is_scored_pooled_and_folds_counted_apart(rows):
    grouped = rows.assign(model=[f"m{d}" for d in rows["depth"]])
    splits = group_splits(grouped, "model", "model")
    assert len(splits) == grouped["model"].nunique()
    preds: dict = {}
    table = evaluate_splits(lambda: CarbCascade(features=KNOB_FEATURES, **FAST), grouped, splits,
                            targets=["latency_ms"], predictions=preds)
    assert all(f"b1_pred_latency_ms" in p.columns for p in preds.values())
    pooled = pool_group_splits(table, preds, "model")
    assert pooled["fold"].sum() == len(splits) and len(pooled) == len(splits) + 1
    row = pooled[pooled["split"] == "model"].iloc[0]
    both = pd.concat(preds.values(), ignore_index=True)
    assert row["n_test"] == len(grouped)            # every row predicted once, by the fold without its group
    resid = ((both["latency_ms"] - both["pred_latency_ms"]) ** 2).sum()
    tot = ((both["latency_ms"] - both["latency_ms"].mean()) ** 2).sum()
    assert row["r2"] == pytest.approx(1 - resid / tot)
    # a fold worse than B1 is reported apart, not in the strict count over pooled and range splits
    rigged = pooled.copy()
    first = rigged.index[rigged["fold"].astype(bool)][0]
    rigged.loc[first, "b1_r2"] = rigged.loc[first, "r2"] + 0.01
    fields = dict(f.split("=") for f in summary_line(rigged).split())
    assert fields["worse_than_b1_per_fold"] == "1"
    assert int(fields["worse_than_b1"]) == int((pooled.loc[~pooled["fold"].astype(bool), "r2"]
                                               < pooled.loc[~pooled["fold"].astype(bool), "b1_r2"]).sum())


def test_error_concentration_finds_the_few_rows_that_sink_r2():
    rng = np.random.default_rng(0)
    y = rng.uniform(10, 100, 200)
    rows = pd.DataFrame({"latency_ms": y, "pred_latency_ms": y * rng.lognormal(0, 0.02, 200),
                         "precision": np.where(np.arange(200) < 100, "fp32", "bf16")})
    rows.loc[:2, "pred_latency_ms"] = rows.loc[:2, "latency_ms"] * 4      # three wild misses, all fp32
    c = error_concentration(rows, "latency_ms", k=3)
    assert c["worst_share"] > 0.95 and c["r2"] < 0.7 and c["r2_without_worst"] > 0.99
    assert set(c["worst"].index) == {0, 1, 2}
    assert c["r2_by"]["bf16"] > 0.99 > c["r2_by"]["fp32"]


def test_evaluate_splits_keeps_each_splits_predictions(rows, tmp_path):
    splits = [s for s in default_splits(rows) if s.name == "batch"]
    preds: dict = {}
    table = evaluate_splits(lambda: CarbCascade(features=KNOB_FEATURES, **FAST), rows, splits,
                            targets=["latency_ms"], predictions=preds)
    pred = preds["batch"]
    table.to_parquet(tmp_path / "t.parquet")            # the table stays serializable (carb-train saves it)
    assert len(pred) == int(splits[0].test.sum()) and "pred_latency_ms" in pred
    assert error_concentration(pred, "latency_ms")["r2"] == pytest.approx(table["r2"].iloc[0])
    from carb.analysis.extrapolation import concentration_metrics

    m = concentration_metrics(table, preds)
    assert 0 < m["xval_batch_latency_ms_worst5_share"] <= 1 and "xval_batch_latency_ms_r2_without_worst5" in m


def _tensor_core_rows(cc: str, kind: str = "cuda") -> pd.DataFrame:
    """physics_rows with fp16 instead of bf16, multiply-adds 2x faster in fp16 (tensor cores at twice the
    TF32 rate), on a device of compute capability ``cc``."""
    import json

    df = physics_rows(240, seed=3)
    df["precision"] = df["precision"].replace({"bf16": "fp16"})
    rng = np.random.default_rng(4)
    rate = np.where(df["precision"] == "fp32", 4e7, 8e7)
    df["latency_ms"] = (0.5 + df["flops"] / rate + 0.01 * df["n_conv"]) * rng.lognormal(0, 0.03, len(df))
    df["device_kind"] = kind
    df["device_fingerprint"] = json.dumps({"kind": kind, "compute_capability": cc})
    return df


@pytest.mark.parametrize("cc, kind, expect", [("9.0", "cuda", True), ("7.5", "cuda", False), ("9.0", "cpu", False)])
def test_unmeasured_16_bit_precision_on_tensor_cores_runs_its_macs_faster(cc, kind, expect):
    df = _tensor_core_rows(cc, kind)
    fp32, fp16 = df[df["precision"] == "fp32"], df[df["precision"] == "fp16"]
    with_tc = make_prior("latency_ms", tensor_core_speedup=2.0).fit(fp32, fp32["latency_ms"])
    without = make_prior("latency_ms").fit(fp32, fp32["latency_ms"])
    assert (with_tc.tensor_speedup_ == 2.0) is expect and with_tc.to_dict()["tensor_core_speedup"] == with_tc.tensor_speedup_
    err = lambda m: float(np.median(np.abs(m.predict(fp16) / fp16["latency_ms"].to_numpy() - 1)))  # noqa: E731
    if expect:
        assert err(with_tc) < 0.1 < err(without)          # fp32's rate alone is ~2x too slow on the MACs
        assert np.allclose(with_tc.predict(fp32), without.predict(fp32))   # measured precisions untouched
    else:
        assert np.allclose(with_tc.predict(fp16), without.predict(fp16))


def test_power_cap_comes_from_the_gpu_fingerprint():
    import json

    from carb.model.physics import power_cap_W

    gpu = pd.DataFrame({"device_kind": ["cuda"] * 3, "avg_power_W": [300.0, 650.0, 690.0],
                        "device_fingerprint": [json.dumps({"kind": "cuda", "power_limit_W": 700})] * 3})
    assert power_cap_W(gpu) == 700.0
    assert power_cap_W(gpu.assign(avg_power_W=[300.0, 650.0, 731.0])) == 731.0   # a window overshoots a little
    assert power_cap_W(gpu.assign(device_kind="cpu")) is None
    assert power_cap_W(gpu.assign(device_fingerprint=json.dumps({"kind": "cuda"}))) is None


def test_power_cap_keeps_heavy_gpu_predictions_physical_on_the_h200():
    """Real H200 rows: trained on batch <= 32 (few rows at the 700 W limit), the roofline extrapolates the
    boost-clock rate to batches 64-256, where the board sits at its power limit and clocks down. With
    the cap no prediction implies more than the cap's average power, and latency R^2 on the heavy
    batches rises."""
    from sklearn.metrics import r2_score

    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    df = ok_rows(load_dataset("h200"))
    tr, te = df[df["batch_size"] <= 32], df[df["batch_size"] > 32]
    at_cap = lambda f: int((f["throttle_reasons"] == "sw_power_cap").sum())  # noqa: E731
    assert at_cap(te) > 2 * at_cap(tr)
    ts = ["peak_memory_MB", "energy_J", "latency_ms"]
    kw = dict(FAST, members=("xgb", "et"))
    capped = CarbCascade(**kw).fit(tr, tr[ts])
    free = CarbCascade(power_cap=False, **kw).fit(tr, tr[ts])
    assert capped.power_cap_W_ >= 700.0 and free.power_cap_W_ is None
    p, q = capped.predict(te), free.predict(te)
    implied = p["pred_energy_J"] / (p["pred_latency_ms"] / 1e3)
    assert (implied <= capped.power_cap_W_ + 1e-6).all()
    assert ((q["pred_energy_J"] / (q["pred_latency_ms"] / 1e3)) > capped.power_cap_W_).any()   # what it fixes
    y = te["latency_ms"]
    assert r2_score(y, p["pred_latency_ms"]) > r2_score(y, q["pred_latency_ms"]) + 0.02
    # screening mode: beyond the last trained batch the physics prior carries each target; the cap holds there too
    from carb.model.intervals import screening_predict

    s = screening_predict(capped, te)
    assert ((s["pred_energy_J"] / (s["pred_latency_ms"] / 1e3)) <= capped.power_cap_W_ + 1e-6).all()
    capped.power_cap_W_, cap = None, capped.power_cap_W_      # the same model without its fitted cap
    raw = screening_predict(capped, te)
    assert ((raw["pred_energy_J"] / (raw["pred_latency_ms"] / 1e3)) > cap).any()   # what the floor fixes
    assert r2_score(y, s["pred_latency_ms"]) > r2_score(y, raw["pred_latency_ms"]) + 0.02
    assert np.allclose(s["pred_energy_J"], raw["pred_energy_J"])             # energy is left alone


def test_smooth_max_is_the_sum_at_k_1_and_near_the_max_for_large_k():
    from carb.model.nnls import smooth_max

    A = np.array([[1.0, 2.0, 0.0], [3.0, 0.0, 5.0], [0.5, 1.0, 1.0]])
    c, host = np.array([1.0, 2.0, 0.5]), np.array([True, False, False])
    h, g = A[:, 0] * 1.0, A[:, 1] * 2.0 + A[:, 2] * 0.5
    assert np.allclose(smooth_max(A, c, host, 1.0), h + g)
    s4, s64 = smooth_max(A, c, host, 4.0), smooth_max(A, c, host, 64.0)
    assert (s4 >= np.maximum(h, g) - 1e-12).all() and (s4 <= h + g + 1e-12).all()
    assert np.allclose(s64, np.maximum(h, g), rtol=0.02)
    more = A.copy()
    more[:, 1] *= 2                                # more device work never costs less
    assert (smooth_max(more, c, host, 4.0) >= s4).all()


def test_fit_overlap_recovers_overlapped_costs_that_the_sum_cannot():
    """Test-made rows: a launch cost per layer and a device cost per FLOP that overlap (k = 4). The
    overlapped fit recovers both; the additive fit inflates the launch cost and deflates the FLOP cost."""
    from carb.model.nnls import fit_overlap, nnls_relative, smooth_max

    rng = np.random.default_rng(0)
    layers, flops = rng.integers(10, 200, 400).astype(float), 10 ** rng.uniform(6, 11, 400)
    A = np.column_stack([np.ones(400), layers, flops])
    host, c = np.array([True, True, False]), np.array([0.05, 0.02, 1e-9])
    y = smooth_max(A, c, host, 4.0) * np.exp(rng.normal(0, 0.02, 400))
    fit = fit_overlap(A, y, host, 4.0)
    assert np.allclose(fit[1:], c[1:], rtol=0.1)
    add = nnls_relative(A, y)
    assert add[2] < 0.9 * c[2]
    assert np.median(np.abs(np.log(smooth_max(A, fit, host, 4.0) / y))) < 0.03


def test_overlapped_latency_prior_extrapolates_batch_on_the_h200():
    """Real H200 rows, trained on batch <= 32 and scored on 64-256: the prior alone (no trees). Summed,
    launch-bound small batches inflate the launch terms and latency grows too slowly with batch size;
    as a smooth maximum of launches and device work it follows. Energy keeps the sum; CPU data too."""
    from sklearn.metrics import r2_score

    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    df = ok_rows(load_dataset("h200"))
    tr, te = df[df["batch_size"] <= 32], df[df["batch_size"] > 32]
    summed = make_prior("latency_ms", tensor_core_speedup=2.0).fit(tr, tr["latency_ms"])
    over = make_prior("latency_ms", tensor_core_speedup=2.0, overlap_k=4.0).fit(tr, tr["latency_ms"])
    assert over.overlap_k_ == 4.0 and summed.overlap_k_ is None
    assert over.form_ == "aggregate" and "not identified" in over.form_reason_ and over.to_dict()["overlap_k"] == 4.0
    y = te["latency_ms"]
    r_sum, r_over = r2_score(y, summed.predict(te)), r2_score(y, over.predict(te))
    assert r_over > 0.9 and r_over > r_sum + 0.15
    bias = lambda p: float(np.median(np.log(p.predict(te) / y)))   # noqa: E731
    assert abs(bias(over)) < abs(bias(summed))
    # non-decreasing in batch size, every architecture of the test rows
    keys = ["block", "depth", "width_mult", "early_downsample", "input_size", "precision"]
    grid = te[keys].drop_duplicates().merge(pd.DataFrame({"batch_size": [1, 8, 32, 64, 128, 256, 512]}), how="cross")
    from carb.design.features import grid_features

    g = grid_features(grid)
    g = g.assign(device_kind="cuda", device_fingerprint=te["device_fingerprint"].iloc[0])
    p = pd.Series(over.predict(g), index=g.index)
    assert (g.assign(p=p).sort_values("batch_size").groupby(keys)["p"].apply(lambda s: s.is_monotonic_increasing)).all()
    assert make_prior("energy_J", overlap_k=4.0).overlap_k is None     # energy adds up
    cpu = tr.assign(device_kind="cpu")
    assert make_prior("latency_ms", overlap_k=4.0).fit(cpu, cpu["latency_ms"]).overlap_k_ is None


def test_memory_prior_learns_a_workspace_term_only_where_it_pays(rows):
    """Test-made rows whose peak memory holds a convolution workspace of 0.5 x the largest im2col input:
    the memory prior keeps the term (grouped CV) and recovers it; without the knob columns it falls
    back to the four static terms and says why."""
    from carb.design.shapes import max_im2col_MB

    work = rows.assign(peak_memory_MB=rows["peak_memory_MB"] + 0.5 * max_im2col_MB(rows))
    m = MemoryPrior().fit(work, work["peak_memory_MB"])
    assert m.im2col_ and m.to_dict()["im2col"] and m.coef_["per_max_im2col_MB"] == pytest.approx(0.5, rel=0.15)
    assert m.cv_error_["im2col"] < m.cv_error_["without"]
    bare = work.drop(columns=["depth"])
    b = MemoryPrior().fit(bare, bare["peak_memory_MB"])
    assert not b.im2col_ and "depth" in b.form_reason_ and "per_max_im2col_MB" not in b.coef_
    assert b.predict(bare).shape == (len(bare),)


def test_memory_prior_extrapolates_batch_on_the_h200():
    """Real H200 rows, fitted on batch <= 32 and scored on 64-256, the prior alone: small networks at
    large batch peak at a convolution's workspace, which the im2col term carries and the four static
    terms do not (90th percentile |log error| 0.41 without it)."""
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    df = ok_rows(load_dataset("h200"))
    tr, te = df[df["batch_size"] <= 32], df[df["batch_size"] > 32]
    full = MemoryPrior().fit(tr, tr["peak_memory_MB"])
    assert full.im2col_ and full.coef_["per_max_im2col_MB"] > 0
    static = MemoryPrior()
    static.im2col_ = False
    static._solve(tr, tr["peak_memory_MB"].to_numpy(float))
    err = lambda p: float(np.quantile(np.abs(np.log(p.predict(te) / te["peak_memory_MB"])), 0.9))  # noqa: E731
    assert err(full) < err(static) - 0.1


def test_energy_prior_adds_static_power_times_time_on_gpu_rows_only(rows):
    """With ``static_power`` and the rows' latency, a CUDA energy prior is its work terms plus P_static x
    the time a latency prior fitted on the same rows gives (coefficient in W, reported); CPU rows, or no
    latency, keep the sum of work terms."""
    from carb.model.physics import LayerRooflinePrior

    gpu = rows.assign(device_kind="cuda")
    p = make_prior("energy_J", static_power=True).fit(gpu, gpu["energy_J"], latency=gpu["latency_ms"])
    assert isinstance(p, LayerRooflinePrior) and p.time_prior_ is not None and p.static_power
    assert p.to_dict()["static_W"] == p.static_W_ == p.coef_["static_W"] and p.static_W_ >= 0
    work = p._predict_work(gpu)
    np.testing.assert_allclose(p.predict(gpu), work + p.static_W_ * p.time_prior_.predict(gpu) / 1e3)
    assert p.train_mape_ < 0.1
    fp16 = gpu[gpu["precision"] == "bf16"].assign(precision="fp16")     # never measured: still a positive cost
    assert np.all(p.predict(fp16) > 0)
    assert make_prior("energy_J", static_power=True).fit(gpu, gpu["energy_J"]).to_dict()["static_W"] is None
    cpu = rows.assign(device_kind="cpu")
    assert make_prior("energy_J", static_power=True).fit(cpu, cpu["energy_J"], latency=cpu["latency_ms"]).time_prior_ is None
    assert make_prior("latency_ms", static_power=True).static_power is False     # latency has no such term


def test_static_power_is_physical_and_extrapolates_batch_on_the_h200():
    """Real H200 rows, fitted on batch <= 32, the energy prior alone on batch 64-256: with P_static x time
    its static power is an H200's (tens to a couple of hundred W) and its R^2 is higher than the sum of
    work terms alone."""
    from sklearn.metrics import r2_score

    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    df = ok_rows(load_dataset("h200"))
    tr, te = df[df["batch_size"] <= 32], df[df["batch_size"] > 32]
    kw = dict(tensor_core_speedup=2.0, overlap_k=4.0)
    work = make_prior("energy_J", **kw).fit(tr, tr["energy_J"])
    static = make_prior("energy_J", static_power=True, **kw).fit(tr, tr["energy_J"], latency=tr["latency_ms"])
    assert static.time_prior_.overlap_k_ == 4.0          # the time prior is the overlapped latency prior
    assert 50 < static.static_W_ < 200
    y = te["energy_J"]
    assert r2_score(y, static.predict(te)) > r2_score(y, work.predict(te)) + 0.01


def test_device_share_tells_launch_bound_from_device_bound_on_the_h200():
    """The overlapped latency prior's device share (what GPU intervals are calibrated per regime on):
    in [0, 1], below 0.5 for a batch-1 ResNet-8 (launch-bound) and above 0.9 for the heaviest measured
    configuration; None for a prior whose parts add up."""
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    df = ok_rows(load_dataset("h200"))
    p = make_prior("latency_ms", tensor_core_speedup=2.0, overlap_k=4.0).fit(df, df["latency_ms"])
    share = p.device_share(df)
    assert share.shape == (len(df),) and (share >= 0).all() and (share <= 1).all()
    small = (df["depth"] <= 8) & (df["batch_size"] == 1)
    assert small.any() and (share[small.to_numpy()] < 0.5).all()
    assert share[int(np.argmax(df["latency_ms"].to_numpy()))] > 0.9
    assert make_prior("latency_ms").fit(df, df["latency_ms"]).device_share(df) is None
