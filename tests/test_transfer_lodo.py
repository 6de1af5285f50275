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
    """227 ok rows of one device (34cc4b132c, family 25, no avx512_fp16), a provenance naming its commands,
    and its probe (fp32 and bf16, no fp16) found by the probe lookup with its fingerprint."""
    from carb.data.io import load_dataset
    from carb.data.probes import load_probe, probe_fingerprint

    d = load_dataset(str(ROOT / "scripts" / "data" / "cpu-amd-zen4.parquet"))
    assert len(d) == 227 and set(d["status"]) == {"ok"} and set(d["device_id"].astype(str)) == {ZEN4}
    assert d["precision"].value_counts().to_dict() == {"bf16": 97, "fp32": 92, "fp16": 38}
    prov = json.loads((ROOT / "scripts" / "data" / "cpu-amd-zen4.provenance.json").read_text())
    assert prov["device_id"] == ZEN4 and prov["fingerprint"]["family"] == "25" and prov["rows"] == 227
    assert any("carb-collect" in c for c in prov["commands"])
    probe = load_probe(ZEN4)
    assert probe is not None and sorted(set(probe["precision"])) == ["bf16", "fp32"] and len(probe) == 240
    fp = json.loads(probe_fingerprint(ZEN4))
    assert "avx512_fp16" not in fp["isa"] and fp["family"] == "25"


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
    """A floor of log sd 0.2 sets the half-width to z(0.95) x 0.2; with ``scale`` each pair's errors count
    in units of its own scale and the band is returned in the caller's."""
    from carb.model.transfer_prior import device_level_band

    recs = _records(6, 0.01, 0.01, seed=3)
    b = device_level_band(recs, floor_log_sd=0.2)
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


def test_calibrate_refuses_two_devices_of_one_name(tmp_path):
    """Rows of two CPUs both named "AMD EPYC" (the Zen 5 reference and the Zen 4) in one file: one line naming
    both device ids and the fix; data.device=<device_id> picks one."""
    from omegaconf import OmegaConf

    from carb.commands.calibrate import target_rows
    from carb.data.io import load_dataset, reference_dataset
    from carb.errors import ConfigError

    zen4 = load_dataset(str(ROOT / "scripts" / "data" / "cpu-amd-zen4.parquet")).head(20)
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
