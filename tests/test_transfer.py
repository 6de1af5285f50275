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
                                      "print_table=false", "evaluate.figures=false", "evaluate.lobo.enabled=false",
                                      "evaluate.extrapolation.enabled=false", "progress.enabled=false", *TINY]))
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
    (["k=0"], "k:"),
])
def test_calibrate_bad_input_is_one_line(store, args, match):
    from carb.errors import CarbError

    with pytest.raises(CarbError, match=match):
        _calibrate(store, f"data.path={store['dir']}/b.parquet", "register=false", *args)


def test_promote_leaves_calibrated_versions_out(store):
    from carb.commands.promote import run_promote
    from carb.errors import ModelError

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
