"""Few-shot transfer (carb.model.transfer) on synthetic two-device data with a known transfer, and the
space-filling choice of calibration rows (carb.design.select)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from carb.commands.cli import compose, to_dict
from carb.design.select import space_filling
from carb.errors import ConfigError, DatasetError
from carb.model.intervals import interval, screening_predict
from carb.model.presets import build_cascade
from carb.model.transfer import TransferredCascade, interval_entry
from sizes import NO_EVALUATION
from synthetic import synthetic_dataset

TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=20", "model.specialists.lgbm.n_estimators=20",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=10",
        "model.correctors.model.max_iter=20", "model.n_jobs=1"]
#: Device B = device A with latency x 3.0 * (latency / 10 ms)^-0.15 and memory x 1.25 (a known transfer).
LAT_A, LAT_B, MEM = 3.0, 0.85, 1.25


def device_b(a: pd.DataFrame, seed: int = 1) -> pd.DataFrame:
    """The same configurations measured on a 'device B' whose costs follow the known transfer (x 3 %
    lognormal noise), with its own name and fingerprint."""
    rng = np.random.default_rng(seed)
    b = a.copy()
    noise = np.exp(rng.normal(0, 0.03, len(b)))
    b["latency_ms"] = LAT_A * 10 ** (1 - LAT_B) * b["latency_ms"] ** LAT_B * noise
    b["peak_memory_MB"] = MEM * b["peak_memory_MB"] * np.exp(rng.normal(0, 0.01, len(b)))
    b["energy_J"] = np.nan
    b["device_name"], b["device_id"], b["device_fingerprint"] = "Synthetic GPU B", "bbbbbbbbbb", '{"name": "B"}'
    return b


def rows_a() -> pd.DataFrame:
    """Device A's measured rows (seeded)."""
    a = synthetic_dataset(260, seed=4, device_name="Synthetic GPU A")
    return a[a["status"] == "ok"].reset_index(drop=True)


@pytest.fixture(scope="module")
def source_and_b():
    a = rows_a()
    cfg = compose("train", TINY)
    cascade = build_cascade(to_dict(cfg.model), to_dict(cfg.features))
    ts = ["peak_memory_MB", "energy_J", "latency_ms"]
    cascade.fit(a.iloc[:200], a.iloc[:200][ts], a.iloc[200:], a.iloc[200:][ts])
    return cascade, device_b(a)


def mape(y, p):
    return float(np.median(np.abs(p / y - 1)))


def test_space_filling_picks_spread_rows_and_refuses_bad_k(source_and_b):
    _, b = source_and_b
    picks = space_filling(b, 10)
    assert len(set(picks)) == 10 and picks == space_filling(b, 10)          # distinct, deterministic
    lf = np.log(b["flops"].to_numpy(float))
    spread = np.ptp(lf[picks]) / np.ptp(lf)
    assert spread > 0.6                        # covers most of the FLOPs range (a random 10 need not)
    with pytest.raises(ConfigError, match="k: must be between 1 and the"):
        space_filling(b, len(b) + 1)
    with pytest.raises(ConfigError):
        space_filling(b, 0)


@pytest.mark.parametrize("k", [3, 10, 40])
def test_transfer_recovers_the_known_device_change(source_and_b, k):
    cascade, b = source_and_b
    picks = space_filling(b, k)
    rest = b.drop(index=b.index[picks])
    tr = TransferredCascade(cascade).fit(b.iloc[picks])
    p_src = screening_predict(cascade, rest)
    p_tr = screening_predict(tr, rest)
    y = rest["latency_ms"].to_numpy(float)
    before, after = mape(y, p_src["pred_latency_ms"].to_numpy()), mape(y, p_tr["pred_latency_ms"].to_numpy())
    assert before > 0.5 and after < 0.25, (before, after)                   # x3 device gap mostly removed
    mem = rest["peak_memory_MB"].to_numpy(float)
    assert mape(mem, p_tr["pred_peak_memory_MB"].to_numpy()) < 0.1
    info = tr.transfer_["latency_ms"]
    assert info["k"] == k and info["form"] in ({"scale", "precision"} if k < 5 else {"scale", "affine", "precision", "residual"})
    if info["form"] == "affine":
        assert 0.6 < info["b"] < 1.1                                         # the known slope 0.85, noisy fit
    assert tr.transfer_["energy_J"]["form"] == "source"                      # nothing measured on B: kept
    assert tr.device_name_ == "Synthetic GPU B" and tr.device_id_ == "bbbbbbbbbb"
    assert tr.domain_ == cascade.domain_                                     # the source's domain, unchanged
    # intervals on B's held-out rows cover most of them: on average over three noise draws of B (K
    # leave-one-out log-ratios make a 90 % quantile whose coverage varies by draw: 0.63-0.99 at K = 10)
    inside = []
    for seed in (1, 2, 3):
        bb = device_b(rows_a(), seed)
        rr = bb.drop(index=bb.index[picks])
        iv = interval(TransferredCascade(cascade).fit(bb.iloc[picks]).intervals_,
                      screening_predict(TransferredCascade(cascade).fit(bb.iloc[picks]), rr))
        yy = rr["latency_ms"].to_numpy(float)
        inside.append(((iv["lo_latency_ms"] <= yy) & (yy <= iv["hi_latency_ms"])).mean())
    assert np.mean(inside) > (0.75 if k < 40 else 0.85), inside
    assert tr.intervals_["latency_ms"]["n"] == k


def test_a_precision_the_device_runs_differently_gets_its_own_factor(source_and_b):
    """Device C = device B with bf16 5x slower (no native bf16 instructions): one common factor cannot
    fit both precisions; the per-precision form does."""
    cascade, b = source_and_b
    c = b.copy()
    slow = (c["precision"] == "bf16").to_numpy()
    assert slow.any() and (~slow).any()
    c.loc[slow, "latency_ms"] *= 5.0
    picks = space_filling(c, 12)
    tr = TransferredCascade(cascade).fit(c.iloc[picks])
    info = tr.transfer_["latency_ms"]
    assert info["form"] in ("precision", "residual") and set(info["a_precision"]) >= {"bf16"}
    ratio = np.exp(info["a_precision"]["bf16"] - np.mean([v for p, v in info["a_precision"].items() if p != "bf16"]))
    assert 2.5 < ratio < 8.0
    rest = c.drop(index=c.index[picks])
    p = screening_predict(tr, rest)["pred_latency_ms"].to_numpy()
    assert mape(rest["latency_ms"].to_numpy(float), p) < 0.25


def test_transfer_keeps_monotone_batch_and_pickles(source_and_b):
    import pickle

    cascade, b = source_and_b
    tr = TransferredCascade(cascade).fit(b.iloc[space_filling(b, 8)])
    tr2 = pickle.loads(pickle.dumps(tr))
    pd.testing.assert_frame_equal(tr.predict(b.head(20)), tr2.predict(b.head(20)))
    arch = b.iloc[[0]].copy()
    from carb.design.features import at_batch

    rows = pd.concat([at_batch(arch, bs) for bs in (1, 2, 4, 8, 16, 64, 256)], ignore_index=True)
    lat = screening_predict(tr, rows)["pred_latency_ms"].to_numpy()
    assert np.all(np.diff(lat) >= -1e-9 * lat[:-1])


def test_interval_entry_small_k_is_student_t_and_one_row_is_none():
    r = np.array([0.1, -0.05, 0.02, 0.0, -0.1])
    e = interval_entry(r, 0.9)
    assert e["method"].startswith("student-t") and e["lower"] < r.min() and e["upper"] > r.max()
    big = interval_entry(np.linspace(-0.2, 0.2, 40), 0.9)
    assert big["method"].startswith("split-conformal") and -0.2 <= big["lower"] < big["upper"] <= 0.2
    assert interval_entry(np.array([0.1]), 0.9) is None


def test_transfer_without_rows_is_one_error(source_and_b):
    cascade, b = source_and_b
    with pytest.raises(DatasetError, match="calibration rows"):
        TransferredCascade(cascade).fit(b.iloc[:0])


# ---------------------------------------------------------------------------------------- carb-calibrate
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store with device A's model registered and promoted; device B's rows in a file."""
    from carb.commands.train import run_train
    from carb.data.io import save_dataset
    from carb import tracking

    d = tmp_path_factory.mktemp("calibrate")
    a = synthetic_dataset(200, seed=5, device_name="Synthetic GPU A", energy=False)
    save_dataset(a, d / "a.parquet")
    save_dataset(device_b(a[a["status"] == "ok"].reset_index(drop=True)), d / "b.parquet")
    uri = f"sqlite:///{d}/m.db"
    out = run_train(compose("train", [f"data.path={d}/a.parquet", f"tracking.uri={uri}", f"paths.output_dir={d}/out",
                                      "print_table=false", *NO_EVALUATION, "progress.enabled=false", *TINY]))
    tracking.configure(uri)
    tracking.set_alias(out["registered_name"], "champion", out["version"])
    return {"dir": d, "uri": uri, "source": f"models:/{out['registered_name']}@champion"}


def _calibrate(store, *extra):
    from carb.commands.calibrate import run_calibrate

    return run_calibrate(compose("calibrate", [f"tracking.uri={store['uri']}", f"source={store['source']}",
                                               f"paths.output_dir={store['dir']}/out", "progress.enabled=false",
                                               *extra]))


def test_calibrate_registers_the_target_model_with_provenance(store, capsys):
    import mlflow

    from carb import tracking

    res = _calibrate(store, f"data.path={store['dir']}/b.parquet", "k=10")
    assert res["registered_name"] == "carb-synthetic-gpu-b-bbbbbbbbbb" and res["version"] == "1" and res["alias_set"]
    t = res["table"].set_index(["target", "model"])
    lat = t.loc["latency_ms"]
    assert lat.loc["calibrated", "mape_pct"] < lat.loc["source", "mape_pct"] / 2
    n_b = int((pd.read_parquet(store["dir"] / "b.parquet")["status"] == "ok").sum())
    assert lat.loc["calibrated", "n"] == lat.loc["source", "n"] == n_b - 10         # every row not fitted on
    out = capsys.readouterr().out
    assert "held-out rows of Synthetic GPU B" in out and "latency_ms: " in out
    info = tracking.registered_model_info(res["registered_name"], "1")
    vt = info["version_tags"]
    assert vt["calibrated_from"] == store["source"] and vt["k"] == "10"
    assert len(json.loads(vt["config_ids"])) == 10 and "calibrated on 10 measured rows" in info["version_description"]
    run = mlflow.get_run(res["run_id"])
    assert run.data.tags["source_version"] == "1" and "heldout_latency_ms_calibrated_mape_pct" in run.data.metrics
    # the registered model loads and screens like any cascade
    m = tracking.load_cascade(f"models:/{res['registered_name']}@champion")
    b = pd.read_parquet(store["dir"] / "b.parquet").head(5)
    assert np.allclose(m.predict(b)["pred_latency_ms"], res["model"].predict(b)["pred_latency_ms"])


@pytest.mark.parametrize("args, match", [
    (["k=100000"], "k: must be between 1 and the"),
    (["source=models:/nope@champion"], "cannot load model"),
    (["data.device=Nope"], "data.device: 'Nope' has no ok rows"),
    (["k=-1"], "k:"),
    (["k=0"], "k=0 needs spec="),
])
def test_calibrate_bad_input_is_one_line(store, args, match):
    from carb.errors import CarbError

    with pytest.raises(CarbError, match=match):
        _calibrate(store, f"data.path={store['dir']}/b.parquet", "register=false", *args)


def test_promote_leaves_calibrated_versions_out(store):
    from carb.commands.promote import run_promote
    from carb.errors import ModelError

    # two calibrated versions, whatever ran before in this module: the first takes @champion when the alias is
    # unset (carb-calibrate), so one version alone would leave promote nothing to refuse
    _calibrate(store, f"data.path={store['dir']}/b.parquet", "k=6")
    _calibrate(store, f"data.path={store['dir']}/b.parquet", "k=6")
    cfg = compose("promote", [f"tracking.uri={store['uri']}", "promote.name=carb-synthetic-gpu-b-bbbbbbbbbb"])
    with pytest.raises(ModelError, match="has only calibrated versions.*promote.version="):
        run_promote(cfg)
    # the documented way onto a calibrated version: promote.version (the replaced one becomes @previous)
    over = [f"tracking.uri={store['uri']}", "promote.name=carb-synthetic-gpu-b-bbbbbbbbbb"]
    newest = tracking_versions(store)[-1]
    r = run_promote(compose("promote", [*over, f"promote.version={newest}"]))
    assert r["changed"] and r["champion"] == newest
    assert not run_promote(compose("promote", [*over, f"promote.version={newest}"]))["changed"]
    with pytest.raises(ModelError, match="promote.version: .* has no version 999"):
        run_promote(compose("promote", [*over, "promote.version=999"]))


def tracking_versions(store) -> list[str]:
    from carb import tracking

    tracking.configure(store["uri"])
    return [v["version"] for v in tracking.model_versions("carb-synthetic-gpu-b-bbbbbbbbbb")]


def test_calibrate_a_latency_only_target(store):
    """Issue 33 item 4: a target measuring latency alone (a timm CSV) calibrates latency and keeps the
    source's prediction of the others (form ``source``), instead of failing on a missing target."""
    b = pd.read_parquet(store["dir"] / "b.parquet")
    b["peak_memory_MB"] = np.nan
    b["device_name"], b["device_id"] = "Synthetic GPU C", "cccccccccc"
    b.to_parquet(store["dir"] / "c.parquet", index=False)
    res = _calibrate(store, f"data.path={store['dir']}/c.parquet", "k=8", "register=false")
    forms = {t: i["form"] for t, i in res["transfer"].items()}
    assert forms["peak_memory_MB"] == "source" and forms["latency_ms"] != "source", forms
    assert set(res["table"]["target"]) == {"latency_ms"}
    assert res["model"].predict(b.head(3))["pred_latency_ms"].notna().all()


def test_calibrate_refuses_rows_of_the_source_device(store):
    """Rows of the source's own device are no transfer: one line, nothing registered."""
    from carb.errors import ConfigError

    with pytest.raises(ConfigError, match="same device") as e:
        _calibrate(store, f"data.path={store['dir']}/a.parquet", "k=8")
    assert "\n" not in str(e.value)


def test_calibrate_a_file_of_several_devices_asks_for_one(store):
    from carb.errors import ConfigError

    both = pd.concat([pd.read_parquet(store["dir"] / "a.parquet"), pd.read_parquet(store["dir"] / "b.parquet")])
    both.to_parquet(store["dir"] / "ab.parquet", index=False)
    with pytest.raises(ConfigError, match=r"data.device: .* holds 2 devices.*allowed: \['Synthetic GPU A', 'Synthetic GPU B'\]"):
        _calibrate(store, f"data.path={store['dir']}/ab.parquet", "k=8")


CPU_NO_FP16 = json.dumps({"kind": "cpu", "isa": ["avx2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16"]})
CPU_FP16 = json.dumps({"kind": "cpu", "isa": ["avx2", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                                              "avx512_fp16", "amx_bf16"]})


def test_dispatch_stand_ins_follow_the_isa():
    """fp16 runs natively only with AVX-512 FP16 (or AMX-FP16): from an EPYC without it to a Xeon with it,
    the source's bf16 (same element size, native there) stands in for fp16; nothing changes otherwise."""
    from carb.model.transfer import dispatch_stand_ins

    assert dispatch_stand_ins(CPU_NO_FP16, CPU_FP16) == {"fp16": "bf16"}
    assert dispatch_stand_ins(CPU_FP16, CPU_NO_FP16) == {}          # no fallback 2-byte precision on the Xeon
    no_bf16 = json.dumps({"kind": "cpu", "isa": ["avx2", "fma"]})   # bf16 and fp16 both fall back
    assert dispatch_stand_ins(CPU_FP16, no_bf16) == {}
    assert dispatch_stand_ins(CPU_NO_FP16, no_bf16) == {"bf16": "fp16"}
    assert dispatch_stand_ins(CPU_NO_FP16, CPU_NO_FP16) == {}
    assert dispatch_stand_ins(None, CPU_FP16) == {} == dispatch_stand_ins(CPU_FP16, '{"kind": "cuda"}')


def test_a_precision_whose_dispatch_changes_is_predicted_from_its_stand_in():
    """Source CPU without AVX-512 FP16: fp16 takes a fallback path, 30x and growing with sqrt(batch)
    (per-image GEMMs). Target with it: fp16 costs what bf16 costs, everything x 1.5. No factor per
    precision fixes a batch-dependent ratio; asking the source for bf16 does."""
    a = rows_a()
    assert {"bf16", "fp16"} <= set(a["precision"])
    batch = a["batch_size"].to_numpy(float)
    assert np.ptp(batch) > 0
    src = a.copy()
    slow = (src["precision"] == "fp16").to_numpy()
    src.loc[slow, "latency_ms"] *= 30.0 * np.sqrt(batch[slow] / 8.0)
    src["device_fingerprint"], src["device_id"] = CPU_NO_FP16, "aaaaaaaaaa"
    dst = a.copy()
    dst["latency_ms"] *= 1.5
    dst["device_fingerprint"], dst["device_id"], dst["device_name"] = CPU_FP16, "cccccccccc", "Synthetic CPU C"
    cfg = compose("train", TINY)
    ts = ["peak_memory_MB", "latency_ms"]
    cascade = build_cascade(to_dict(cfg.model), to_dict(cfg.features)).fit(src.iloc[:200], src.iloc[:200][ts],
                                                                          src.iloc[200:], src.iloc[200:][ts])
    picks = space_filling(dst, 10)
    rest = dst.drop(index=dst.index[picks])
    fp16 = (rest["precision"] == "fp16").to_numpy()
    y = rest["latency_ms"].to_numpy(float)
    err = {}
    for disp in (True, False):
        tr = TransferredCascade(cascade, dispatch=disp).fit(dst.iloc[picks])
        p = screening_predict(tr, rest)["pred_latency_ms"].to_numpy()
        err[disp] = mape(y[fp16], p[fp16])
    assert tr.stand_ins_ == {} and TransferredCascade(cascade).fit(dst.iloc[picks]).stand_ins_ == {"fp16": "bf16"}
    assert err[True] < 0.25 and err[False] > 2 * err[True], err


@pytest.fixture(scope="module")
def cpu_source():
    """A tiny cascade on synthetic rows of a CPU without AVX-512 FP16."""
    a = rows_a()
    a["device_fingerprint"], a["device_id"] = CPU_NO_FP16, "aaaaaaaaaa"
    cfg = compose("train", TINY)
    ts = ["peak_memory_MB", "latency_ms"]
    return a, build_cascade(to_dict(cfg.model), to_dict(cfg.features)).fit(a.iloc[:200], a.iloc[:200][ts],
                                                                         a.iloc[200:], a.iloc[200:][ts])


def test_zero_shot_from_two_device_probes(cpu_source):
    """K = 0: the target CPU's probe times every layer at half the source's, fp16 natively at bf16's cost:
    latency is the source's (of the stand-in precision) x 0.5, memory the source's; no interval without
    other pairs' errors, a finite one with them."""
    from carb.resources import DATA_DIR

    a, cascade = cpu_source
    src_probe = pd.read_csv(DATA_DIR / "device-probes.csv").groupby("precision").head(120)   # a real probe (EPYC)
    tgt_probe = src_probe.copy()
    tgt_probe["time_ms"] *= 0.5
    bf16 = tgt_probe[tgt_probe["precision"] == "bf16"]
    tgt_probe = pd.concat([tgt_probe[tgt_probe["precision"] != "fp16"], bf16.assign(precision="fp16")])
    tgt_probe["device_id"] = "cccccccccc"
    from carb.data.io import reference_dataset

    ref_rows = reference_dataset()
    rows = ref_rows.groupby("precision").head(8).reset_index(drop=True)   # knob-consistent networks
    assert set(rows["precision"]) == {"fp32", "bf16", "fp16"}
    zs = TransferredCascade(cascade).fit_probe(src_probe, tgt_probe, CPU_FP16, "Synthetic CPU C", "cccccccccc")
    assert zs.stand_ins_ == {"fp16": "bf16"} and zs.transfer_["latency_ms"]["form"] == "probe"
    ratio = zs.probe_ratio(rows)
    assert np.allclose(ratio, 0.5, rtol=1e-6), ratio[:5]
    p = zs.predict(rows)
    as_src = rows.assign(precision=rows["precision"].replace({"fp16": "bf16"}))
    ref = cascade.predict(as_src)
    assert np.allclose(p["pred_latency_ms"], 0.5 * ref["pred_latency_ms"])
    assert np.allclose(p["pred_peak_memory_MB"], ref["pred_peak_memory_MB"])
    assert "latency_ms" not in zs.intervals_                              # nothing calibrates it yet
    errs = np.log(np.random.default_rng(0).lognormal(0.0, 0.2, 30))
    zs2 = TransferredCascade(cascade).fit_probe(src_probe, tgt_probe, CPU_FP16, "C", "c", log_errors=errs)
    iv = interval(zs2.intervals_, screening_predict(zs2, rows))
    assert np.isfinite(iv["hi_latency_ms"]).all() and (iv["lo_latency_ms"] > 0).all()


def test_zero_shot_from_spec_records_scales_latency_by_the_weighted_spec_ratios(source_and_b):
    """K = 0 on a GPU from two spec records: latency x (peak ratio)^w_c (bandwidth ratio)^w_b (power
    ratio)^w_p per precision (fp16 at the FP32-accumulate tensor rate); memory kept; weights fitted back
    from pairs made with known weights; a record without a needed figure is one error naming it."""
    from carb.model.spec_transfer import AXES, fit_weights, log_ratio, spec_axes

    cascade, b = source_and_b
    src = {"name": "S", "fp32_TFLOPS": 20.0, "tf32_tensor_TFLOPS": 80.0, "fp16_tensor_TFLOPS": 160.0,
           "bf16_tensor_TFLOPS": 160.0, "memory_bandwidth_GBps": 1000.0, "power_limit_W": 300.0}
    dst = {"name": "D", "fp32_TFLOPS": 40.0, "tf32_tensor_TFLOPS": 160.0, "fp16_tensor_TFLOPS": 640.0,
           "bf16_tensor_TFLOPS": 640.0, "memory_bandwidth_GBps": 2000.0, "power_limit_W": 600.0}
    w = {"compute": 0.3, "bandwidth": 0.4, "power": 0.3}
    assert np.isclose(log_ratio(src, dst, "fp16", w), 0.3 * np.log(0.25) + 0.4 * np.log(0.5) + 0.3 * np.log(0.5))
    zs = TransferredCascade(cascade).fit_spec(src, dst, w)
    rows = b.iloc[:30]
    p, ref = zs.predict(rows), cascade.predict(rows)
    expect = np.exp([log_ratio(src, dst, str(q), w) for q in rows["precision"]])
    assert np.allclose(p["pred_latency_ms"], ref["pred_latency_ms"] * expect)
    assert np.allclose(p["pred_peak_memory_MB"], ref["pred_peak_memory_MB"])
    assert "latency_ms" not in zs.intervals_
    rng = np.random.default_rng(0)
    specs = [{k: v * rng.uniform(0.3, 3.0) if k != "name" else k for k, v in src.items()} for _ in range(6)]
    axes = np.array([spec_axes(a, c, "fp16") for a in specs for c in specs if a is not c])
    truth = np.array([0.2, 0.5, 0.3])
    assert np.allclose(list(fit_weights(axes, axes @ truth).values()), truth)
    assert list(fit_weights(axes, axes @ truth)) == list(AXES)
    with pytest.raises(ConfigError, match="no bandwidth"):
        log_ratio(src, {k: v for k, v in dst.items() if k != "memory_bandwidth_GBps"}, "fp16", w)


def test_calibrate_k0_needs_a_spec_and_a_gpu_source(store):
    """k=0 without spec=, or from a source whose device has no spec record: one line each."""
    with pytest.raises(ConfigError, match="k=0 needs spec="):
        _calibrate(store, "k=0")
    with pytest.raises(ConfigError, match="has no GPU spec record"):
        _calibrate(store, "k=0", "spec=H100 SXM")
    with pytest.raises(ConfigError, match="spec"):
        _calibrate(store, "k=0", "spec=Imaginary GPU 9000")


def test_calibrate_k0_registers_a_zero_shot_model_from_spec_sheets(store):
    """A source trained on rows of an H200 (spec fingerprint) -> an H100 nobody measured: registered with
    k=0, latency scaled by the configured spec ratio, a finite interval from the error band."""
    from carb.commands.train import run_train
    from carb.data.gpu_specs import fingerprint_id, fingerprint_json, gpu_spec, spec_fingerprint
    from carb.data.io import save_dataset
    from carb.model.spec_transfer import log_ratio
    from carb import tracking

    d = store["dir"]
    fp = spec_fingerprint(gpu_spec("H200"))
    a = synthetic_dataset(200, seed=6, device_name=fp["name"], energy=False)
    a["device_fingerprint"], a["device_id"], a["device_kind"] = fingerprint_json(fp), fingerprint_id(fp), "cuda"
    a["latency_ms"] *= 20.0   # synthetic rows are faster than a real H200's bandwidth allows (plausibility check)
    save_dataset(a, d / "h200.parquet")
    out = run_train(compose("train", [f"data.path={d}/h200.parquet", f"tracking.uri={store['uri']}",
                                      f"paths.output_dir={d}/out", "print_table=false", *NO_EVALUATION,
                                      "progress.enabled=false", *TINY]))
    src = f"models:/{out['registered_name']}/{out['version']}"
    res = run_calibrate_k0(store, src, "spec=H100 SXM")
    assert res["k"] == 0 and res["registered_name"].startswith("carb-") and res["version"]
    zs = res["model"]
    rows = a[a["status"] == "ok"].head(20)
    ratio = zs.predict(rows)["pred_latency_ms"] / zs.source_.predict(rows)["pred_latency_ms"]
    cfg = compose("calibrate", [])
    w = {k: float(v) for k, v in cfg.zero_shot.weights.items()}
    expect = [np.exp(log_ratio(gpu_spec("H200"), gpu_spec("H100 SXM"), str(p), w)) for p in rows["precision"]]
    assert np.allclose(ratio, expect)
    iv = interval(zs.intervals_, screening_predict(zs, rows))
    assert np.isfinite(iv["hi_latency_ms"]).all()
    tracking.configure(store["uri"])
    v = [x for x in tracking.model_versions(res["registered_name"]) if str(x["version"]) == str(res["version"])]
    assert v, res
    # issue 42: one name per spec GPU, and the model says where it comes from (registry, predict's frame)
    from carb.analysis.predictor import Predictor
    from carb.data.schema import spec_model_name

    assert res["registered_name"] == spec_model_name(fingerprint_json(spec_fingerprint(gpu_spec("H100 SXM"))))
    origin = f"zero-shot from {src} by spec records"
    assert origin in tracking.registered_model_info(res["registered_name"])["description"]
    assert "band measured on 4 devices" in tracking.registered_model_info(res["registered_name"])["description"]
    frame = Predictor(zs, src).predict([{"block": "basic", "depth": 18, "precision": "fp16"}])
    assert frame.attrs["origin"].startswith(origin)
    # served as carb.load_model serves it: MLflow's pyfunc takes a knob frame without the knobs that have defaults
    import mlflow

    uri = f"models:/{res['registered_name']}/{res['version']}"
    pyfunc = mlflow.pyfunc.load_model(uri)
    assert pyfunc.metadata.get_input_schema().required_input_names() == ["block", "depth"]
    bare = pd.DataFrame({"block": ["basic", "bottleneck"], "depth": [18, 50], "precision": ["fp16", "fp32"]})
    np.testing.assert_allclose(pyfunc.predict(bare)["pred_latency_ms"].to_numpy(float),
                               Predictor(zs, src).predict(bare)["pred_latency_ms"].to_numpy(float))


def run_calibrate_k0(store, source, *extra):
    from carb.commands.calibrate import run_calibrate

    return run_calibrate(compose("calibrate", [f"tracking.uri={store['uri']}", f"source={source}", "k=0",
                                               f"paths.output_dir={store['dir']}/out", "progress.enabled=false",
                                               *extra]))


def test_k_rows_calibrate_the_probes_prediction_when_both_cpus_have_a_probe(cpu_source):
    """fit_probe then fit: the K rows calibrate the probes' zero-shot prediction; a target whose costs are
    exactly the probes' ratio x the source needs no correction beyond it (latency within 10 %)."""
    from carb.resources import DATA_DIR

    a, cascade = cpu_source
    src_probe = pd.read_csv(DATA_DIR / "device-probes.csv")
    src_probe = src_probe[src_probe["device_id"] == "b69ebb7443"].groupby("precision").head(120)
    tgt_probe = src_probe.assign(time_ms=src_probe["time_ms"] * 0.25, device_id="cccccccccc")
    from carb.data.io import reference_dataset

    rows = reference_dataset().groupby("precision").head(12).reset_index(drop=True)
    rows["device_fingerprint"], rows["device_id"], rows["device_name"] = CPU_NO_FP16, "cccccccccc", "C"
    base = cascade.predict(rows)["pred_latency_ms"].to_numpy()
    rows["latency_ms"] = 0.25 * base
    tr = TransferredCascade(cascade).fit_probe(src_probe, tgt_probe, CPU_NO_FP16).fit(rows.iloc[:10])
    assert tr.probe_models_ and np.allclose(tr.probe_ratio(rows), 0.25, rtol=1e-6)
    p = tr.predict(rows.iloc[10:])["pred_latency_ms"].to_numpy()
    assert mape(rows["latency_ms"].to_numpy()[10:], p) < 0.1
