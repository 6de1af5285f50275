"""``carb-calibrate k=0 probe=...``: a zero-shot model of a CPU nobody measured networks on, from the two
CPUs' device probes, registered like any model; ``probe=true`` probes this CPU first (a tiny probe here:
the test's own store, never a real probe); the bad inputs are one line each."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.commands.cli import compose, to_dict
from carb.errors import ConfigError
from synthetic import synthetic_dataset

TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=20", "model.specialists.lgbm.n_estimators=20",
        "model.specialists.et.n_estimators=10", "model.oof_folds=2", "model.probe_estimators=10",
        "model.correctors.model.max_iter=20"]
SRC_ID, XEON = "a0a0a0a0a0", "6a0ea403ee"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Its own CARB_HOME with a probe of the source CPU (the shipped EPYC probe, renamed) and a CPU model
    trained on synthetic rows of that CPU (EPYC's fingerprint: no AVX-512 FP16), promoted."""
    from carb import tracking
    from carb.data.probes import SHIPPED_PROBES, probe_fingerprint
    from carb.model.presets import build_cascade

    d = tmp_path_factory.mktemp("zero-shot-cpu")
    mp = pytest.MonkeyPatch()
    mp.setenv("CARB_HOME", str(d / "home"))
    (d / "home" / "probes").mkdir(parents=True)
    epyc = pd.read_csv(SHIPPED_PROBES)
    epyc[epyc["device_id"] == "b69ebb7443"].assign(device_id=SRC_ID).to_csv(d / "home" / "probes" / f"{SRC_ID}.csv",
                                                                            index=False)
    fp = json.loads(probe_fingerprint("b69ebb7443"))
    (d / "home" / "probes" / f"{SRC_ID}.provenance.json").write_text(json.dumps({"device_id": SRC_ID, "fingerprint": fp}))
    a = synthetic_dataset(220, seed=21, device_name="Synthetic EPYC", energy=False)
    a = a[a["status"] == "ok"].reset_index(drop=True)
    a["device_kind"], a["device_id"], a["device_fingerprint"] = "cpu", SRC_ID, probe_fingerprint("b69ebb7443")
    a["latency_ms"] *= 300.0   # synthetic rows are GPU-fast; a 2-core CPU is not (the loader's plausibility check)
    cfg = compose("train", TINY)
    ts = ["peak_memory_MB", "latency_ms"]
    cascade = build_cascade(to_dict(cfg.model), to_dict(cfg.features)).fit(a.iloc[:180], a.iloc[:180][ts],
                                                                         a.iloc[180:], a.iloc[180:][ts])
    from carb.data.io import save_dataset

    save_dataset(a, d / "a.parquet")
    uri = f"sqlite:///{d}/m.db"
    tracking.configure(uri)
    with tracking.start_run("train", "source", uri):
        info = tracking.log_cascade(cascade, a[list(cascade.input_columns_)].head(3), registered_name="carb-src-cpu")
    yield {"dir": d, "uri": uri, "source": f"models:/carb-src-cpu/{info['version']}", "rows": a}
    mp.undo()


def calibrate(store, *extra):
    from carb.commands.calibrate import run_calibrate

    return run_calibrate(compose("calibrate", [f"tracking.uri={store['uri']}", f"source={store['source']}", "k=0",
                                               f"paths.output_dir={store['dir']}/out", "progress.enabled=false",
                                               *extra]))


def test_k0_from_two_device_probes_registers_a_cpu_model(store, capsys):
    """EPYC-like source -> the shipped Xeon probe: fp16 from the source's bf16 (the Xeon runs fp16 natively),
    latency = source x the probes' ratio, memory the source's, a finite latency interval from the band,
    registered as the Xeon's model with k=0, zero_shot=probe and the Xeon's fingerprint."""
    from carb import tracking
    from carb.model.intervals import interval, screening_predict

    res = calibrate(store, f"probe={XEON}", "transfer.extra_sources=[]")   # the source alone (test_transfer_auto_sources)
    tr = res["model"]
    assert res["k"] == 0 and res["registered_name"] == f"carb-intel-r-xeon-r-processor-{XEON}" and res["version"]
    assert tr.stand_ins_ == {"fp16": "bf16"} and tr.transfer_["latency_ms"]["form"] == "probe"
    from carb.data.io import reference_dataset

    rows = reference_dataset().groupby("precision").head(4).reset_index(drop=True)   # knob-consistent networks
    p = tr.predict(rows)
    ref = tr.source_.predict(rows.assign(precision=rows["precision"].replace({"fp16": "bf16"})))
    assert np.allclose(p["pred_latency_ms"], ref["pred_latency_ms"] * tr.probe_ratio(rows, ref["pred_latency_ms"].to_numpy()))
    assert np.allclose(p["pred_peak_memory_MB"], ref["pred_peak_memory_MB"])
    iv = interval(tr.intervals_, screening_predict(tr, rows))
    assert np.isfinite(iv["hi_latency_ms"]).all() and (iv["lo_latency_ms"] > 0).all()
    out = capsys.readouterr().out
    assert "fp16 runs on another kernel path" in out and "from 0 rows (device probes)" in out
    from omegaconf import OmegaConf   # issue 44: the k=0 band says how many devices it was measured on

    conf = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "calibrate.yaml")
    n_cpus = conf.zero_shot.probe_band_devices
    assert f"(measured on {n_cpus} CPUs)" in " ".join(out.split()) and n_cpus == 3
    tracking.configure(store["uri"])
    vt = tracking.registered_model_info(res["registered_name"], str(res["version"]))["version_tags"]
    assert vt["k"] == "0" and vt["zero_shot"] == "probe" and json.loads(vt["device_fingerprint"])["isa"]


@pytest.mark.parametrize("args, match", [
    (["probe=nope"], r"probe: no device probe of 'nope'; allowed: \["),
    ([f"probe={SRC_ID}"], "is the source model's own CPU"),
    ([f"probe={XEON}", "spec=H100 SXM"], "spec= names a GPU; give one"),
    (["probe=true", "device=cuda"], "probe: true probes this machine's CPU"),
    (["k=-1", f"probe={XEON}"], "k"),
    ([f"probe={XEON}", "k=5", "data.path=<rows>"], f"probe: {XEON} is not the device of the rows"),
])
def test_bad_probe_input_is_one_line(store, args, match):
    from carb.errors import CarbError

    args = [a.replace("<rows>", str(store["dir"] / "a.parquet")) for a in args]

    with pytest.raises(CarbError, match=match) as e:
        calibrate(store, "register=false", *args)
    assert "\n" not in str(e.value)


def test_a_probe_of_a_gpu_model_is_refused():
    from carb.commands.zero_shot import refuse_gpu_source

    class Gpu:
        device_fingerprint_ = json.dumps({"kind": "cuda", "name": "NVIDIA H100"})
        device_name_ = "NVIDIA H100"

    with pytest.raises(ConfigError, match="device probes time CPU convolutions.*use spec=<GPU>"):
        refuse_gpu_source(Gpu(), "models:/carb-h100@champion")
    refuse_gpu_source(type("Cpu", (), {"device_fingerprint_": '{"kind": "cpu"}'})(), "x")   # a CPU passes


@pytest.mark.slow
def test_probe_true_probes_this_cpu_first_then_zero_shot(store):
    """probe=true with a tiny probe preset (20 small fp32 convolutions): this CPU's probe lands in the store's
    probes with its fingerprint, and the zero-shot model targets this CPU. Slow: it times convolutions on
    this machine and logs the probe run (10-12 s under load)."""
    from carb.data.probes import load_probe, probe_fingerprint
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint
    from carb.measure.probe import torch_threads_and_version

    res = calibrate(store, "probe=true", "register=false", "probe_run.n=20", "probe_run.precisions=[fp32]",
                    "probe_run.repeats=1", "probe_run.min_window_s=0.001", "probe_run.max_MMAC=0.5")
    here = res["model"].device_id_
    probe = load_probe(here)
    assert len(probe) == 20
    # this CPU's fingerprint at the threads the probe ran with (the test process's torch thread count
    # depends on the tests before it, so it is read from the probe, not from torch)
    threads, _ = torch_threads_and_version(int(probe["threads"].iloc[0]))
    assert here == device_id(read_cpu_fingerprint(threads))
    assert json.loads(probe_fingerprint(here))["kind"] == "cpu"
    assert res["model"].transfer_["latency_ms"]["form"] == "probe"
