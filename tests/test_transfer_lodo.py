"""Issue 44: a third CPU (the Zen 4 VM) shipped with provenance, the device-level interval band measured
leave-one-device-out, a calibration that keeps the zero-shot where its K rows do worse, and the bad inputs
(precisions the K rows or the probe lack, two devices in one file)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
ZEN4 = "34cc4b132c"


def test_the_zen4_cpu_is_shipped_with_its_probe_and_provenance():
    """560 ok rows of one device (34cc4b132c, family 25, no avx512_fp16): the 227 of 2026-12-06 first, then 333
    of 2026-12-07 with a two-pass spread and no configuration measured twice; a provenance naming its commands
    and both collections (their rows add up to the file's), and its probe (fp32, bf16 and, completed later, fp16: what its provenance's backends count) found by the
    probe lookup with its fingerprint."""
    from carb.data.io import load_dataset
    from carb.data.probes import load_probe, probe_fingerprint

    d = load_dataset(str(ROOT / "carb" / "data" / "cpu-amd-zen4.parquet"))
    assert len(d) == 560 and set(d["status"]) == {"ok"} and set(d["device_id"].astype(str)) == {ZEN4}
    assert d["precision"].value_counts().to_dict() == {"fp32": 240, "bf16": 226, "fp16": 94}
    assert not d["config_id"].duplicated().any()
    spread = pd.to_numeric(d["latency_repeat_spread"], errors="coerce")
    assert spread.iloc[:227].isna().all() and spread.iloc[227:].notna().all()
    prov = json.loads((ROOT / "carb" / "data" / "cpu-amd-zen4.provenance.json").read_text())
    assert prov["device_id"] == ZEN4 and prov["fingerprint"]["family"] == "25" and prov["rows"] == 560
    assert [c["rows"] for c in prov["collections"]] == [227, 333]
    for c, part in zip(prov["collections"], (d.iloc[:227], d.iloc[227:])):
        assert c["rows_per_precision"] == part["precision"].value_counts().to_dict() and c["contended_windows"] == 0
    assert any("carb-collect" in c for c in prov["commands"])
    probe = load_probe(ZEN4)
    backends = json.loads((ROOT / "carb" / "data" / "device-probes.provenance.json").read_text())[ZEN4]["backends"]
    assert probe is not None and set(probe["precision"]) == set(backends) == {"fp32", "bf16", "fp16"}
    assert len(probe) == sum(sum(b.values()) for b in backends.values())
    fp = json.loads(probe_fingerprint(ZEN4))
    assert "avx512_fp16" not in fp["isa"] and fp["family"] == "25"



def test_the_xeon_second_session_is_its_own_file_with_a_measured_floor():
    """The Xeon (6a0ea403ee) measured again on 2026-12-07 (host kernel fc-v1300; the shipped 227 rows: 2026-12-05,
    fc-v1252) is a file of its own: 352 ok rows, every one with a two-pass spread, no configuration twice, its
    provenance's rows per precision and hash; the shipped file keeps its 227 rows and points to it. The 26
    configurations measured in both sessions are slower in the second, every one (the level shift that keeps the
    sessions apart). The transfer benchmark's floor for the Xeon is the second session's spreads (one per precision,
    below conf's 0.05) and the same as the shipped table's."""
    import hashlib

    from omegaconf import OmegaConf

    from carb.data.io import load_dataset
    from carb.data.repeatability import shipped_floor_log_sd
    from scripts.bench import transfer_pairs as tp

    xeon, data = "6a0ea403ee", ROOT / "carb" / "data"
    first = load_dataset(str(data / "cpu-intel-xeon.parquet"))
    d = load_dataset(str(data / "cpu-intel-xeon-2026-12-07.parquet"))
    assert len(first) == 227 and len(d) == 352 and set(d["status"]) == {"ok"}
    assert set(d["device_id"].astype(str)) == {xeon} and not d["config_id"].duplicated().any()
    assert pd.to_numeric(d["latency_repeat_spread"], errors="coerce").notna().all()
    assert set(d["driver"].astype(str)) == {"linux-6.18.44-fc-v1300"} != set(first["driver"].astype(str))
    prov = json.loads((data / "cpu-intel-xeon-2026-12-07.provenance.json").read_text())
    assert prov["rows"] == len(d) and prov["rows_per_precision"] == d["precision"].value_counts().to_dict()
    assert prov["sha256"] == hashlib.sha256((data / "cpu-intel-xeon-2026-12-07.parquet").read_bytes()).hexdigest()
    assert prov["contended_windows"] == 0 and prov["device_id"] == xeon
    shipped = json.loads((data / "cpu-intel-xeon.provenance.json").read_text())
    assert shipped["rows"] == 227 and shipped["another_session"]["dataset"].endswith("cpu-intel-xeon-2026-12-07.parquet")
    both = first.merge(d, on="config_id", suffixes=("_a", "_b"))
    assert len(both) == prov["in_both"]["rows"] == 26 and (both["latency_ms_b"] > both["latency_ms_a"]).all()
    got = tp.repeat_floor("latency_ms", tp.measured_repeat_rows(first))
    conf = OmegaConf.load(ROOT / "conf" / "calibrate.yaml").transfer.repeatability_floor
    assert set(got) == {"fp32", "fp16", "bf16", "default"} and got["default"] == conf.latency_ms
    assert all(0 < v < conf.latency_ms for p, v in got.items() if p != "default")
    assert {p: round(v, 6) for p, v in got.items() if p != "default"} == \
        pytest.approx(shipped_floor_log_sd(xeon), abs=1e-6)


def _records(n_pairs: int, bias_sd: float, row_sd: float, seed: int, n_rows: int = 60) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"pair": (f"s{seed}-{i}", f"t{seed}-{i}"),
             "err": rng.normal(rng.normal(0.0, bias_sd), row_sd, n_rows)} for i in range(n_pairs)]


def test_device_band_covers_a_new_device_and_widens_with_few_devices():
    """Devices err as a whole (bias sd 0.15, rows sd 0.03): a band from the rows alone would cover ~25 % of
    a new device; the device-level band covers a new device's rows about 90 % of the time (simulated over
    20 bands x 40 new devices), is wider from 2 pairs (Student-t, df 1) than from 10 (df 9), and names its devices."""
    from carb.model.transfer_prior import device_level_band

    band = device_level_band(_records(10, 0.15, 0.03, seed=1))
    assert band["n_devices"] == 20 and "measured on 20 device(s)" in band["method"]
    rng = np.random.default_rng(7)
    inside = [np.mean(np.abs(rng.normal(rng.normal(0, 0.15), 0.03, 50)) <= b["upper"])
              for b in (device_level_band(_records(10, 0.15, 0.03, seed=s)) for s in range(20)) for _ in range(40)]
    assert 0.85 <= float(np.mean(inside)) <= 0.96, np.mean(inside)
    rows_only = float(np.quantile(np.abs(np.concatenate([r["err"] - np.median(r["err"])
                                                         for r in _records(10, 0.15, 0.03, seed=1)])), 0.9))
    assert band["upper"] > 2.5 * rows_only
    few = device_level_band(_records(2, 0.15, 0.03, seed=1))
    assert few["n_devices"] == 4 and few["half_bias"] / few["bias_rms"] > band["half_bias"] / band["bias_rms"] * 1.3


def test_device_band_never_narrower_than_repeatability_and_scale_free():
    """A measured floor of log sd 0.2 sets the half-width to z(0.95) x 0.2 (a configured one, nothing measured,
    is capped: tests/test_transfer8_intervals.py); with ``scale`` each pair's errors count in units of its own
    scale and the band is returned in the caller's."""
    from carb.model.transfer_prior import device_level_band

    recs = _records(6, 0.01, 0.01, seed=3)
    b = device_level_band(recs, floor_log_sd={"default": 0.2})
    assert b["upper"] == pytest.approx(1.6448536 * 0.2, rel=1e-6) and "repeatability floor" in b["method"]
    small = device_level_band([{**r, "scale": 0.01} for r in recs], scale=0.01)
    big = device_level_band([{**r, "scale": 0.01} for r in recs], scale=0.1)
    assert big["upper"] == pytest.approx(10 * small["upper"], rel=1e-9)
    assert device_level_band([]) is None


def test_lodo_records_leave_out_every_pair_of_either_device():
    from carb.model.transfer_prior import lodo_records

    devs = ["a", "b", "c", "d"]
    recs = [{"pair": (s, t)} for s in devs for t in devs if s != t]
    kept = lodo_records(recs, ("a", "b"))
    assert sorted(r["pair"] for r in kept) == [("c", "d"), ("d", "c")]
    assert lodo_records([r for r in recs if set(r["pair"]) <= {"a", "b", "c"}], ("a", "b")) == []


def test_repeatability_column_or_the_configured_floor():
    from carb.model.transfer_prior import repeatability_log_sd

    rows = pd.DataFrame({"latency_repeat_rel": [0.02, 0.04, 0.10]})
    assert repeatability_log_sd(rows, "latency_ms", 0.5) == pytest.approx(np.log1p(0.04))
    assert repeatability_log_sd(pd.DataFrame({"x": [1]}), "latency_ms", 0.05) == 0.05
    rng = np.random.default_rng(0)   # two windows of log sd 0.04 each: the collector's two-pass range recovers it
    a, b = np.exp(rng.normal(0, 0.04, 4000)), np.exp(rng.normal(0, 0.04, 4000))
    spread = np.abs(a - b) / ((a + b) / 2)
    assert repeatability_log_sd(pd.DataFrame({"latency_repeat_spread": spread}), "latency_ms") == \
        pytest.approx(0.04, rel=0.08)


def test_the_zen4_repeatability_is_shipped_and_matches_its_study():
    """The 42 re-measured Zen 4 configurations (two passes each) carry a spread per row; the floor per precision
    recomputed from them is the one the study printed (its last line, kept in the provenance)."""
    from carb.data.io import load_dataset
    from carb.data.repeatability import repeatability_floor, repeatability_table

    d = load_dataset(str(ROOT / "scripts" / "data" / "cpu-amd-zen4-repeat.parquet"))
    prov = json.loads((ROOT / "scripts" / "data" / "cpu-amd-zen4-repeat.provenance.json").read_text())
    assert set(d["device_id"].astype(str)) == {ZEN4} == {prov["device_id"]} and len(d) == prov["rows"]
    assert (pd.to_numeric(d["latency_passes"]) >= 2).all() and d["latency_repeat_spread"].notna().all()
    printed = dict(kv.split("=") for kv in prov["study_last_line"].split()[1:])
    for p, floor in repeatability_floor(d).items():
        assert floor == pytest.approx(float(printed[f"{p}_floor"]), abs=1e-4)
    for r in repeatability_table(d).itertuples():
        assert r.spread_median == pytest.approx(float(printed[f"{r.precision}_median"]), abs=1e-4)


def test_benchmark_floor_is_the_device_measured_repeatability_per_precision():
    """The transfer benchmark's latency floor for the Zen 4 comes from its measured rows (the repeat study and
    the CPU zoo of its device_id), one per precision (repeatability_floor over z; bf16 wider than fp16), the
    same as the shipped table carb-calibrate looks the device up in; a precision not measured, a device
    without measured rows, and peak memory keep conf/calibrate.yaml's floor. (Before: one number per device,
    the median over precisions.)"""
    from omegaconf import OmegaConf
    from scipy.stats import norm

    from carb.data.io import load_dataset
    from carb.data.repeatability import repeatability_floor, shipped_floor_log_sd
    from scripts.bench import transfer_pairs as tp

    conf = OmegaConf.load(ROOT / "conf" / "calibrate.yaml").transfer.repeatability_floor
    zen4 = load_dataset(str(ROOT / "carb" / "data" / "cpu-amd-zen4.parquet"))
    rows = tp.measured_repeat_rows(zen4)
    assert rows is not None and len(rows) > 0 and rows["latency_repeat_spread"].notna().all()
    got = tp.repeat_floor("latency_ms", rows)
    assert isinstance(got, dict) and set(got) == {"fp32", "fp16", "bf16", "default"}
    for p, h in repeatability_floor(rows).items():
        assert got[p] == pytest.approx(h / norm.ppf(0.95))
    assert got["bf16"] > got["fp32"] > got["fp16"] > 0 and got["default"] == conf.latency_ms
    assert {p: round(v, 6) for p, v in got.items() if p != "default"} == \
        pytest.approx(shipped_floor_log_sd(ZEN4), abs=1e-6)
    assert tp.repeat_floor("peak_memory_MB", rows) == conf.peak_memory_MB
    other = pd.DataFrame({"device_id": ["not-measured"] * 3, "precision": ["fp32"] * 3, "status": ["ok"] * 3})
    assert tp.measured_repeat_rows(other) is None and tp.repeat_floor("latency_ms", None) == conf.latency_ms


def test_calibrate_refuses_two_devices_of_one_name(tmp_path):
    """Rows of two CPUs both named "AMD EPYC" (the Zen 5 reference and the Zen 4) in one file: one line naming
    both device ids and the fix; data.device=<device_id> picks one."""
    from omegaconf import OmegaConf

    from carb.commands.calibrate import target_rows
    from carb.data.io import load_dataset, reference_dataset
    from carb.errors import ConfigError

    zen4 = load_dataset(str(ROOT / "carb" / "data" / "cpu-amd-zen4.parquet")).head(20)
    both = pd.concat([reference_dataset().head(20), zen4], ignore_index=True)
    path = tmp_path / "two.parquet"
    both.to_parquet(path, index=False)
    cfg = OmegaConf.create({"data": {"path": str(path), "device": None}})
    with pytest.raises(ConfigError, match=r"data.device: .* holds rows of 2 devices named 'AMD EPYC' .*"
                                          r"calibrate one at a time; allowed: \['34cc4b132c', 'b69ebb7443'\]"):
        target_rows(cfg)
    cfg.data.device = ZEN4
    rows, _ = target_rows(cfg)
    assert set(rows["device_id"].astype(str)) == {ZEN4} and len(rows) == 20


def test_calibrate_warns_of_rows_from_two_kernel_builds(tmp_path, capsys):
    """The Xeon's two sessions (host kernels fc-v1252 and fc-v1300, 28-56 % apart) in one file: one warning line
    naming both sessions and their row counts; one session's rows say nothing."""
    from omegaconf import OmegaConf

    from carb.commands.calibrate import target_rows
    from carb.data.io import load_dataset

    data = ROOT / "carb" / "data"
    first = load_dataset(str(data / "cpu-intel-xeon.parquet")).head(12)
    second = load_dataset(str(data / "cpu-intel-xeon-2026-12-07.parquet")).head(8)
    path = tmp_path / "two.parquet"
    pd.concat([first, second], ignore_index=True).to_parquet(path, index=False)
    cfg = OmegaConf.create({"data": {"path": str(path), "device": None, "session_gap_h": 1.5}})
    rows, _ = target_rows(cfg)
    out = " ".join(capsys.readouterr().out.split())   # the line wraps at 120 columns
    assert len(rows) == 20 and out.count("warning:") == 1
    assert "2 measuring sessions (2 host kernel builds" in out
    assert "fc-v1252: 12 rows" in out and "fc-v1300: 8 rows" in out
    first.to_parquet(path, index=False)
    target_rows(cfg)
    assert "warning" not in capsys.readouterr().out


def test_calibrate_warns_of_two_boots_on_one_kernel_build(tmp_path, capsys):
    """The Xeon's second and third sessions share the kernel build fc-v1300 but ran 11-15 % apart three hours
    apart: with ``data.session_gap_h`` the gap in measured_at names two sessions; without it (None) the build
    alone says one."""
    from omegaconf import OmegaConf

    from carb.commands.calibrate import target_rows
    from carb.data.session_drift import sessions
    from carb.data.io import load_dataset

    second = load_dataset(str(ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet")).head(8)
    third = load_dataset(str(ROOT / "scripts" / "data" / "cpu-intel-xeon-2026-12-07b.parquet")).head(5)
    both = pd.concat([third, second], ignore_index=True)
    assert both["driver"].nunique() == 1
    labels = sessions(both, 1.5)
    assert labels.nunique() == 2 and (labels.iloc[:5] == labels.iloc[0]).all()
    assert labels.iloc[0].startswith("2026-12-07 19:") and labels.iloc[5].startswith("2026-12-07 16:")
    assert sessions(both, None).nunique() == 1 and sessions(both, 10.0).nunique() == 1
    path = tmp_path / "boots.parquet"
    both.to_parquet(path, index=False)
    target_rows(OmegaConf.create({"data": {"path": str(path), "device": None, "session_gap_h": 1.5}}))
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("warning:") == 1 and "2 measuring sessions (gaps of more than 1.5 h" in out
    assert "fc-v1300: 5 rows" in out and "fc-v1300: 8 rows" in out
    # rows that record their boot (session_id): two boots are two sessions without any gap rule
    both["session_id"] = ["b1"] * 5 + ["b2"] * 8
    assert sessions(both, None).nunique() == 2 and sessions(both.assign(session_id="b1"), None).nunique() == 1
    assert sessions(both, None).iloc[0].endswith("boot b1")


def test_calibrate_warns_when_the_probe_is_of_another_session(tmp_path, monkeypatch, capsys):
    """A probe whose provenance names one session (boot) and rows of another: one warning line naming both and the
    fix; rows of the probe's session, rows or probes that record no session: nothing said."""
    import json

    from carb.commands.calibrate import warn_probe_session
    from carb.data.probes import probe_session, user_probe_path

    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    dev = "6a0ea403ee"
    rows = pd.DataFrame({"device_id": [dev] * 3, "session_id": ["aaaa", "aaaa", "bbbb"]})
    assert probe_session(dev) is None or user_probe_path(dev).parent == tmp_path / "probes"
    prov = user_probe_path(dev).with_suffix(".provenance.json")
    prov.parent.mkdir(parents=True)
    prov.write_text(json.dumps({"device_id": dev, "session_id": "cccc", "fingerprint": {"kind": "cpu"}}))
    assert probe_session(dev) == "cccc"
    assert warn_probe_session(rows, "rows.parquet") == "cccc"
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("warning:") == 1 and "session cccc" in out and "aaaa, bbbb" in out and "carb-probe" in out
    assert warn_probe_session(rows.assign(session_id="cccc"), "x") is None
    assert warn_probe_session(rows.drop(columns="session_id"), "x") is None
    prov.write_text(json.dumps({"device_id": dev, "fingerprint": {"kind": "cpu"}}))   # written before the field
    assert warn_probe_session(rows, "x") is None and "warning" not in capsys.readouterr().out


def test_calibrate_warns_when_the_probe_is_hours_from_its_rows_on_one_boot(tmp_path, monkeypatch, capsys):
    """One boot can hold two speeds hours apart: a probe of the rows' boot timed more than ``gap_h`` hours from
    the nearest row warns (naming the window and the hours); within ``gap_h`` or without a gap rule it does not."""
    import json

    from carb.commands.calibrate import probe_gap_h, warn_probe_session
    from carb.data.probes import probe_window, user_probe_path

    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    dev = "6a0ea403ee"
    rows = pd.DataFrame({"device_id": [dev] * 3, "session_id": ["aaaa"] * 3,
                         "measured_at": ["2026-12-07T16:07:00+00:00", "2026-12-07T16:20:00+00:00",
                                         "2026-12-07T16:30:00+00:00"]})
    prov = user_probe_path(dev).with_suffix(".provenance.json")
    prov.parent.mkdir(parents=True)

    def probe_at(start: str, end: str) -> None:
        prov.write_text(json.dumps({"device_id": dev, "session_id": "aaaa", "fingerprint": {"kind": "cpu"},
                                    "measured_from": start, "measured_to": end}))

    probe_at("2026-12-07T19:21:00+00:00", "2026-12-07T19:23:00+00:00")
    assert probe_window(dev)[0].hour == 19 and probe_gap_h(rows, probe_window(dev)) == pytest.approx(2 + 51 / 60)
    assert warn_probe_session(rows, "rows.parquet", 1.5) == "2026-12-07 19:21"
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("warning:") == 1 and "2.9 h" in out and "session_gap_h 1.5" in out and "carb-probe" in out
    assert warn_probe_session(rows, "x", 3.0) is None and warn_probe_session(rows, "x", None) is None
    probe_at("2026-12-07T16:10:00+00:00", "2026-12-07T16:12:00+00:00")   # between two rows: 3 min from the nearest
    assert probe_gap_h(rows, probe_window(dev)) == pytest.approx(3 / 60) and warn_probe_session(rows, "x", 1.5) is None
    probe_at("2026-12-07T16:00:00+00:00", "2026-12-07T16:40:00+00:00")   # a row falls inside the probe's window
    assert probe_gap_h(rows, probe_window(dev)) == 0
    assert "warning" not in capsys.readouterr().out
    assert probe_gap_h(rows.drop(columns="measured_at"), probe_window(dev)) is None


@pytest.fixture(scope="module")
def cpu_model():
    """A tiny cascade on synthetic rows of a CPU without AVX-512 FP16, the shipped reference probe as the
    source's, and knob-consistent rows of the reference file of all three precisions."""
    from test_transfer import CPU_NO_FP16, TINY, rows_a

    from carb.commands.cli import compose, to_dict
    from carb.data.io import reference_dataset
    from carb.model.presets import build_cascade
    from carb.resources import DATA_DIR

    a = rows_a()
    a["device_fingerprint"], a["device_id"] = CPU_NO_FP16, "aaaaaaaaaa"
    cfg = compose("train", TINY)
    ts = ["peak_memory_MB", "latency_ms"]
    cascade = build_cascade(to_dict(cfg.model), to_dict(cfg.features)).fit(a.iloc[:200], a.iloc[:200][ts],
                                                                         a.iloc[200:], a.iloc[200:][ts])
    probe = pd.read_csv(DATA_DIR / "device-probes.csv")
    probe = probe[probe["device_id"] == "b69ebb7443"].groupby("precision").head(120)
    rows = reference_dataset().groupby("precision").head(12).reset_index(drop=True)
    rows["device_fingerprint"], rows["device_id"], rows["device_name"] = CPU_NO_FP16, "cccccccccc", "C"
    return cascade, probe, rows, CPU_NO_FP16


def test_a_precision_keeps_the_zero_shot_where_its_k_rows_do_worse(cpu_model):
    """Target = the probes' zero-shot exactly for fp32 and bf16 (x 0.25), but fp16 runs 2x slower than the
    zero-shot says: fp32 and bf16 keep the zero-shot (its error on their K rows, 0, is below any LOO error)
    and are predicted exactly; fp16 is calibrated (its zero-shot errs by log 2). The per-precision errors are
    recorded for carb-calibrate to print."""
    from carb.model.transfer import TransferredCascade

    cascade, probe, rows, fp = cpu_model
    tgt = probe.assign(time_ms=probe["time_ms"] * 0.25, device_id="cccccccccc")
    zs = TransferredCascade(cascade).fit_probe(probe, tgt, fp, "C", "cccccccccc")
    base = zs.predict(rows)["pred_latency_ms"].to_numpy()
    rows = rows.assign(latency_ms=base * np.where(rows["precision"] == "fp16", 2.0, 1.0)
                       * np.exp(np.random.default_rng(0).normal(0, 0.01, len(rows))))
    cal = rows.groupby("precision").head(6)
    tr = TransferredCascade(cascade).fit_probe(probe, tgt, fp, "C", "cccccccccc").fit(cal)
    info = tr.transfer_["latency_ms"]
    per = info["precision_loo"]
    assert set(per) == {"fp32", "bf16", "fp16"} and per["fp16"]["kept"] == "calibrated"
    assert per["fp16"]["zero_shot"] > 0.5 and per["fp16"]["calibrated"] < 0.2
    rest = rows.drop(index=cal.index)
    p = tr.predict(rest)["pred_latency_ms"].to_numpy()
    for q in info.get("zero_shot_precisions", []):
        m = (rest["precision"] == q).to_numpy()
        assert np.allclose(p[m], zs.predict(rest[m])["pred_latency_ms"].to_numpy())
    m16 = (rest["precision"] == "fp16").to_numpy()
    assert np.mean(np.abs(p[m16] / rest["latency_ms"].to_numpy()[m16] - 1)) < 0.15


def test_k_rows_of_one_precision_and_a_probe_without_fp16_warn_and_widen(cpu_model, capsys):
    """K rows all fp32 while the model predicts three precisions: one warning naming the fix, bf16 and fp16
    intervals wider than fp32's. A target probe without fp16 at K = 0: one warning, fp16's latency interval
    wider."""
    from carb.commands.calibrate import print_unseen
    from carb.model.intervals import interval, screening_predict
    from carb.model.transfer import TransferredCascade, source_precisions

    cascade, probe, rows, fp = cpu_model
    assert source_precisions(cascade) == ["bf16", "fp16", "fp32"]
    rows = rows.assign(latency_ms=cascade.predict(rows)["pred_latency_ms"].to_numpy() * 3
                       * np.exp(np.random.default_rng(1).normal(0, 0.05, len(rows))))
    tr = TransferredCascade(cascade).fit(rows[rows["precision"] == "fp32"].head(8))
    assert tr.unseen_precisions_["rows"] == ["bf16", "fp16"]
    prec = rows["precision"].astype(str).to_numpy()
    iv = interval(tr.intervals_, screening_predict(tr, rows), precision=prec)
    w = (iv["hi_latency_ms"] / iv["lo_latency_ms"]).to_numpy()
    assert w[prec == "bf16"].min() > 1.3 * w[prec == "fp32"].max()
    print_unseen(tr)
    out = capsys.readouterr().out
    assert "warning: none of the 8 calibration rows is bf16, fp16" in out and "fix:" in out
    tgt = probe[probe["precision"] != "fp16"].assign(device_id="cccccccccc")
    zs = TransferredCascade(cascade).fit_probe(probe, tgt, fp, "C", "cccccccccc").calibrate_zero_shot(band=(-0.2, 0.2))
    assert zs.unseen_precisions_["probe"] == ["fp16"]
    iv = interval(zs.intervals_, screening_predict(zs, rows), precision=prec)
    w = (iv["hi_latency_ms"] / iv["lo_latency_ms"]).to_numpy()
    assert w[prec == "fp16"].min() > 1.3 * w[prec == "fp32"].max()
    print_unseen(zs)
    assert "device probe of cccccccccc has no fp16 rows" in capsys.readouterr().out


def test_covering_picks_give_every_precision_its_rows_where_the_probes_disagree():
    """k = 6 over three precisions with at least 3 each: 9 rows, 3 of each (fp16 has only 5 rows: all
    candidates); with a disagreement score the picks come from the rows that score highest."""
    from carb.analysis.transfer import covering_picks
    from carb.data.io import reference_dataset

    f = pd.concat([reference_dataset().query("precision == @p").head(n) for p, n in
                   (("fp32", 40), ("bf16", 40), ("fp16", 5))], ignore_index=True)
    picks = covering_picks(f, 6, ["fp32", "bf16", "fp16"], 3)
    assert sorted(f["precision"].iloc[picks].value_counts().to_dict().items()) == [("bf16", 3), ("fp16", 3), ("fp32", 3)]
    assert len(covering_picks(f, 15, ["fp32", "bf16", "fp16"], 3)) == 15
    dis = np.zeros(len(f))
    dis[:6] = 1.0   # the first six fp32 rows: where the probes depart from the common factor
    picks = covering_picks(f, 6, ["fp32", "bf16", "fp16"], 3, dis, pool=2)
    fp32 = [i for i in picks if f["precision"].iloc[i] == "fp32"]
    assert len(fp32) == 3 and all(i < 6 for i in fp32)


def test_measuring_now_covers_the_precisions_the_model_predicts(cpu_model, capsys):
    """space=reference has fp32 and bf16 only, the model predicts fp16 too: k=6 measures 3 of each of the
    three, fp16 on small networks (at most transfer.added_precision_max_flops per batch)."""
    from carb.commands.calibrate import covering_rows
    from carb.commands.cli import compose
    from carb.design.features import grid_features
    from carb.design.space import configs_from_cfg
    from carb.commands.cli import to_dict

    cascade = cpu_model[0]
    cfg = compose("calibrate", ["k=6", "measure=cpu", "space.n=200"])
    chosen = covering_rows(cfg, cascade, configs_from_cfg(to_dict(cfg.space)))
    per = pd.Series([c.precision for c in chosen]).value_counts().to_dict()
    assert per == {"fp32": 3, "bf16": 3, "fp16": 3}
    fp16 = grid_features([c for c in chosen if c.precision == "fp16"])
    assert (fp16["flops"] <= float(cfg.transfer.added_precision_max_flops)).all()
    assert "9 configurations to measure, at least 3 of each precision" in capsys.readouterr().out


def test_calibrate_intervals_from_the_per_pair_table_leave_this_device_out(cpu_model, monkeypatch):
    """The shipped-table path of carb-calibrate (transfer.pair_prior): the per-pair summary of two pairs, one
    of them into this very device (cccccccccc) with errors far larger: the band comes from the other pair
    only, names its devices, and is never narrower than the repeatability floor (configured and kept as such:
    ``transfer.unmeasured_floor: configured``; the default caps a configured floor nothing measured at what the
    pairs' own row residuals allow, and says so)."""
    from carb.model import transfer_prior
    from carb.model.transfer import TransferredCascade
    from carb.model.transfer_prior import pair_records, pair_summary

    cascade, probe, rows, fp = cpu_model
    rng = np.random.default_rng(3)
    rows = rows.assign(latency_ms=cascade.predict(rows)["pred_latency_ms"].to_numpy() * 2
                       * np.exp(rng.normal(0, 0.05, len(rows))))
    recs = [{"kind": "cpu", "target": "latency_ms", "k": 10, "source": "X", "target_device": "Y",
             "err": rng.normal(0.05, 0.05, 80), "precision": np.full(80, "fp32"), "loo": rng.normal(0, 0.05, 10)},
            {"kind": "cpu", "target": "latency_ms", "k": 10, "source": "X", "target_device": "C",
             "target_id": "cccccccccc", "err": rng.normal(2.0, 0.5, 80), "precision": np.full(80, "fp32"),
             "loo": rng.normal(0, 0.05, 10)}]
    table = pair_summary(recs)
    assert len(table) == 2 and table["bias"].iloc[1] > 1.5
    assert [r["pair"] for r in pair_records(table, "latency_ms", 12, ["cccccccccc"])] == [("X", "Y")]
    tr = TransferredCascade(cascade, pair_prior=table, repeat_floor={"latency_ms": 0.0}).fit(rows.head(10))
    entry = tr.intervals_["latency_ms"]
    assert "measured on 2 cpu device(s)" in entry["method"] and entry["upper"] < 1.0
    capped = TransferredCascade(cascade, pair_prior=table, repeat_floor={"latency_ms": 0.5}).fit(rows.head(10))
    assert capped.intervals_["latency_ms"]["upper"] < 1.6448 * 0.5 and "floor capped" in \
        capped.intervals_["latency_ms"]["method"]
    monkeypatch.setattr(transfer_prior, "UNMEASURED_FLOOR", "configured")
    tr2 = TransferredCascade(cascade, pair_prior=table, repeat_floor={"latency_ms": 0.5}).fit(rows.head(10))
    assert tr2.intervals_["latency_ms"]["upper"] >= 1.6448 * 0.5 - 1e-9
