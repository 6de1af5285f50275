"""Zoo latency on a GPU never measured (carb.model.zoo_transfer, carb.analysis.zoo_transfer_eval) on synthetic
GPUs whose per-network times follow a known spec law (tests/synthetic.py's zoo_devices_frame)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from carb.analysis import zoo_transfer_eval as ev
from carb.model.zoo_latency import HiddenJoulesRegression
from carb.model.zoo_transfer import (ZooDeviceTransfer, calibrate, device_vector, device_weights,
                                     network_features, space_filling)
from tests.synthetic import zoo_devices_frame

#: Four synthetic GPUs whose peak and bandwidth grow unevenly (power is not in the law).
RECORDS = {f"GPU {c}": {"name": f"GPU {c}", "fp16_tensor_TFLOPS": p, "memory_bandwidth_GBps": b,
                        "power_limit_W": w}
           for c, p, b, w in (("A", 70.0, 900.0, 350.0), ("B", 160.0, 1000.0, 450.0), ("C", 210.0, 1800.0, 575.0),
                              ("D", 440.0, 1800.0, 300.0))}
FAMILIES = {f"fam{i}": 8 for i in range(10)}
SETTINGS = {"k": 10, "precision": "fp16", "min_models": 5, "alphas": [1.0, 10.0, 100.0, None],
            "correction": True, "source_power": 0.0, "same_stack": True, "slope_gain": 0.9,
            "combined": True}


def _vectors():
    return {d: device_vector(r) for d, r in RECORDS.items()}


def test_device_weights_recover_a_uniform_law():
    """Every network 2x faster per doubling of peak only: the geometric weights put ~all weight on compute."""
    rng = np.random.default_rng(0)
    v = _vectors()
    base = rng.normal(0, 1, 50)
    table = pd.DataFrame({d: base - v[d][0] for d in RECORDS})
    w = device_weights(table, v)
    assert w["compute"] == pytest.approx(1.0, abs=0.02)
    assert sum(w.values()) == pytest.approx(1.0, abs=1e-3)


def test_correction_moves_memory_bound_networks_better_than_the_device_ratio():
    """Leave GPU D out: the per-network correction (compute-bound follow the peak, memory-bound the bandwidth)
    predicts D's networks closer than the device-level spec ratio alone."""
    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=1)
    table = ev.log_table(rows)
    nets = ev.network_rows(rows)
    feats = network_features(nets.reindex(table.index))
    v = _vectors()
    src = table.drop(columns=["GPU D"])
    errs = {}
    for corr in (True, False):
        m = ZooDeviceTransfer(alphas=(1.0, 10.0, None), correction=corr).fit(src, feats, v)
        pred = m.predict_log(src, feats, "GPU D")
        errs[corr] = float(np.mean(np.abs(pred - table["GPU D"].to_numpy(float))))
    assert errs[True] < 0.5 * errs[False]
    assert errs[True] < 0.08


def test_space_filling_spreads_and_is_deterministic():
    rng = np.random.default_rng(0)
    x = pd.DataFrame(rng.normal(0, 1, (200, 2)), columns=["a", "b"])
    p = space_filling(x, 10)
    assert len(set(p)) == 10 and np.array_equal(p, space_filling(x, 10))
    assert x["a"].idxmax() in p or x["a"].idxmin() in p or x["b"].idxmax() in p or x["b"].idxmin() in p
    assert len(space_filling(x.head(5), 10)) == 5


def test_calibrate_offset_and_slope():
    rng = np.random.default_rng(0)
    p = rng.uniform(-3, 3, 10)
    a, b = calibrate(p, p + 0.3 + rng.normal(0, 0.01, 10))
    assert (a, b) == (pytest.approx(0.3, abs=0.02), 1.0)
    a, b = calibrate(p, 0.5 + 1.5 * p)
    assert b == pytest.approx(1.5, abs=1e-6) and a == pytest.approx(0.5, abs=1e-6)


def test_leave_one_gpu_out_beats_the_baselines():
    """Networks that follow their own mix of peak and bandwidth: CARB beats FLOPs only everywhere; on the GPU
    beyond the sources' compute (D), the per-network correction beats the device-level spec ratio alone (the
    correction off) by half (on the GPUs between the sources it need not: the real files' finding too)."""
    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=2, noise=0.02)
    table, preds = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, SETTINGS)
    t = table.set_index("target")
    assert list(t.index) == sorted(RECORDS) and (t["families"] == 10).all()
    assert (t["carb_k0_mape_pct"] < t["flops_k0_mape_pct"]).all()
    plain = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, SETTINGS | {"correction": False})[0]
    assert t.loc["GPU D", "carb_k0_mape_pct"] < 0.5 * plain.set_index("target").loc["GPU D", "carb_k0_mape_pct"]
    assert (t["carb_k0_rho"] > 0.95).all()
    assert all(p["picked"].sum() == 10 for p in preds.values())
    line = ev.summary_line(table, 10)
    assert line.startswith("zoo_device: gpus=4 ") and "k10_mape_max=" in line and "baseline_mape_max=" in line


def test_k_rows_fix_a_device_bias_the_spec_sheet_cannot_see():
    """GPU B runs exp(0.25) = 1.28x slower than its spec sheet says: K=0 is off by about that, the K=10
    calibration (an offset on 10 space-filling networks) removes most of it."""
    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=2, noise=0.02, bias={"GPU B": 0.25})
    t = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, SETTINGS)[0].set_index("target")
    assert t.loc["GPU B", "carb_k0_mape_pct"] > 15
    assert t.loc["GPU B", "carb_k10_mape_pct"] < min(8.0, 0.5 * t.loc["GPU B", "carb_k0_mape_pct"])


def test_combined_split_never_sees_the_family():
    """Leave-one-GPU-and-family-out: the held-out family's times on every GPU are changed; the prediction of
    that family must not move (it comes from the sources' models fitted without it), while the plain
    leave-one-GPU-out one (measured on the sources) does."""
    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=3)
    changed = rows.copy()
    fam = changed["family"] == "fam0"
    changed.loc[fam, "latency_ms"] *= 3.0
    s = SETTINGS | {"k": 0}
    recs = {d: RECORDS[d] for d in ("GPU A", "GPU B", "GPU C")}
    _, p1 = ev.evaluate_combined(rows[rows.device_name.isin(recs)], recs, HiddenJoulesRegression, s)
    _, p2 = ev.evaluate_combined(changed[changed.device_name.isin(recs)], recs, HiddenJoulesRegression, s)
    a = p1["GPU A"][p1["GPU A"]["family"] == "fam0"]["pred_carb_k0"].to_numpy()
    b = p2["GPU A"][p2["GPU A"]["family"] == "fam0"]["pred_carb_k0"].to_numpy()
    np.testing.assert_allclose(a, b, atol=1e-9)
    _, q2 = ev.evaluate(changed[changed.device_name.isin(recs)], recs, HiddenJoulesRegression, s)
    c = q2["GPU A"][q2["GPU A"]["family"] == "fam0"]["pred_carb_k0"].to_numpy()
    assert np.all(c - a > 0.5)


def test_conf_matches_schema_and_bench_refuses_bad_values(capsys):
    from carb.commands.schema.groups import ZooTransfer
    from scripts.bench.zoo import ZOO_TRANSFER_CONF, zoo_transfer_settings

    conf = yaml.safe_load(ZOO_TRANSFER_CONF.read_text())
    ZooTransfer.model_validate(conf)
    assert zoo_transfer_settings(["k=5"])["k"] == 5
    with pytest.raises(SystemExit) as e:
        zoo_transfer_settings(["precision=fp8"])
    assert e.value.code == 2 and "precision" in capsys.readouterr().err


def test_device_band_widens_with_device_biases():
    """Three devices biased +-0.2 with calm rows: the band covers a fourth device's bias of 0.2 (a quantile of the
    pooled rows, 0.2 +- 0.01, would too, but only just: the t(3) term makes it wider than the rows' spread)."""
    rng = np.random.default_rng(0)
    errs = {d: b + rng.normal(0, 0.01, 200) for d, b in (("x", 0.2), ("y", -0.2), ("z", 0.2))}
    h, n = ev.device_band(errs)
    assert n == 3 and h > 2.3 * 0.2
    calm = {d: rng.normal(0, 0.01, 200) for d in "xyz"}
    assert ev.device_band(calm)[0] < 0.05
    assert np.isnan(ev.device_band({})[0])


def test_k0_band_coverage_per_target():
    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=4, noise=0.03, bias={"GPU B": 0.1, "GPU C": -0.1})
    s = SETTINGS | {"correction": False}
    _, preds = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, s)
    band = ev.k0_band_coverage(rows, RECORDS, HiddenJoulesRegression, s, preds)
    assert list(band["target"]) == sorted(RECORDS) and (band["band_devices"] == 3).all()
    assert (band["hi_lo"] > 1).all() and band["coverage"].between(0, 1).all()
    assert band["coverage"].mean() > 0.5


def test_level_band_is_the_weighted_quantile():
    errs = {"x": np.linspace(-1, 1, 201), "y": np.zeros(10)}
    assert ev.level_band(errs, 0.9) == pytest.approx(0.8, abs=0.02)   # y's 10 rows weigh as x's 201
    assert np.isnan(ev.level_band({}))


def test_results_paragraph_from_saved_figures(tmp_path):
    """scripts/zoo_results.py's "GPU never measured" lines read what --part device saves (its keys), and say how
    to make the figures when the file is missing."""
    import json

    from scripts.zoo_results import zoo_device_lines

    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=5, noise=0.02)
    s = SETTINGS | {"correction": False}
    table, preds = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, s)
    band = ev.k0_band_coverage(rows, RECORDS, HiddenJoulesRegression, s, preds)
    line = ev.summary_line(table, 10, None, band)
    saved = {"command": "python scripts/bench/zoo.py --part device",
             "device": {"settings": s, "logo": table.to_dict(orient="records"),
                        "k0_band": band.to_dict(orient="records"), "line": line}}
    path = tmp_path / "dev.json"
    path.write_text(json.dumps(saved, default=float))
    md = "\n".join(zoo_device_lines(path))
    assert line in md and all(f"| {d} | " in md for d in RECORDS) and "k0_coverage_min=" in line
    assert "--part device" in "\n".join(zoo_device_lines(tmp_path / "none.json"))
    assert "families (>= 5 networks)" in md and "PyTorch version" in md
    saved["device"]["settings"] = s | {"min_models": 6, "same_stack": False}   # the words follow the saved settings
    path.write_text(json.dumps(saved, default=float))
    md = "\n".join(zoo_device_lines(path))
    assert "families (>= 6 networks)" in md and "averaged over every source" in md and "PyTorch version" not in md


def test_same_stack_averages_only_sources_on_the_target_pytorch():
    """Sources timed on another PyTorch version (GPU A, where two families run another graph, 2x slower) are left
    out of the average where a source on the target's version exists; never all of them."""
    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=6, noise=0.01)
    rows.loc[(rows["device_name"] == "GPU A") & rows["family"].isin(["fam0", "fam1"]), "latency_ms"] *= 2.0
    rows["torch_version"] = np.where(rows["device_name"] == "GPU A", "2.4.0", "2.9.1")
    assert ev.stack_sources(rows, "GPU B", ["GPU A", "GPU C", "GPU D"], True) == ["GPU C", "GPU D"]
    assert ev.stack_sources(rows, "GPU A", ["GPU B", "GPU C"], True) == ["GPU B", "GPU C"]
    assert ev.stack_sources(rows, "GPU B", ["GPU A", "GPU C"], False) == ["GPU A", "GPU C"]
    s = SETTINGS | {"correction": False}
    on = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, s | {"same_stack": True})[0].set_index("target")
    off = ev.evaluate(rows, RECORDS, HiddenJoulesRegression, s | {"same_stack": False})[0].set_index("target")
    assert on.loc["GPU B", "carb_k0_mape_pct"] < off.loc["GPU B", "carb_k0_mape_pct"]


def test_bench_device_part_runs(monkeypatch):
    """``scripts/bench/zoo.py --part device`` end to end on the synthetic GPUs (timm's files and the spec records
    replaced; each source's own model Hidden Joules' regression): the per-target table, the K=0 band and the
    ``zoo_device:`` line (it once failed on a name its module no longer imported)."""
    import argparse

    import carb.model.zoo_latency as zl
    import scripts.bench.zoo as bench

    rows = zoo_devices_frame(RECORDS, FAMILIES, seed=7, noise=0.02).assign(device_kind="gpu")
    monkeypatch.setattr(bench, "load_zoo_bench", lambda: rows)
    monkeypatch.setattr(bench, "with_census", lambda zoo: zoo)
    monkeypatch.setattr(bench, "with_trace", lambda zoo, reparam: zoo)
    monkeypatch.setattr(ev, "device_records", lambda names: {n: RECORDS[n] for n in names})
    monkeypatch.setattr(zl, "ZooLatencyModel", lambda **kw: HiddenJoulesRegression())
    args = argparse.Namespace(zoo_transfer=["combined=false", "k=5"], zoo_latency=[], reparam="published")
    out, line = bench.device_part(args)
    assert line.startswith("zoo_device: gpus=4 ") and "k5_mape_max=" in line and "k0_coverage_min=" in line
    assert [r["target"] for r in out["logo"]] == sorted(RECORDS) and len(out["k0_band"]) == 4
    assert "lgfo" not in out


def test_nearest_source_rule_takes_the_nearest_source_that_has_the_network():
    """``source_power`` inf: each network comes from the nearest source that timed it. A network the nearest
    source lacks comes from the next one, however far (it was NaN when that one was > 0.75 farther: weights
    exp(-1e3 d) underflowed)."""
    from carb.model.zoo_transfer import spec_shift

    v = {"T": np.zeros(3), "near": np.array([0.1, 0.0, 0.0]), "far": np.array([2.0, 1.0, 0.0])}
    t = ZooDeviceTransfer(correction=False, source_power=float("inf"))
    t.vectors_ = v
    t.weights_ = {"compute": 1.0, "bandwidth": 0.0, "power": 0.0}
    t.corr_ = type("Zero", (), {"predict": staticmethod(lambda feats, a, b: 0.0)})()
    values = pd.DataFrame({"near": [0.0, np.nan], "far": [1.0, 2.0]})
    out = t.predict_log(values, pd.DataFrame(index=values.index), "T")
    assert out[0] == pytest.approx(0.0 + spec_shift(t.weights_, v["near"], v["T"]))
    assert out[1] == pytest.approx(2.0 + spec_shift(t.weights_, v["far"], v["T"]))
