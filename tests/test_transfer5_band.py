"""Issue 44, intervals on a device nobody measured: the device-level band is class-aware (a CPU transfer's band
never rests on GPU pairs' errors; without a pair of its class it says so and falls back to its own K rows), its
few-device widening is the Student-t of a band centred on no bias (df = D), a precision's own widening is
shrunk by the prior's pseudo-rows, and the repeatability floor is per precision, looked up by ``device_id`` in
the shipped table where the K rows carry no spread."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_transfer_lodo import cpu_model  # noqa: F401  (the module's fixture: a tiny cascade and CPU rows)

ROOT = Path(__file__).resolve().parents[1]
ZEN4 = "34cc4b132c"


def _recs(kind: str, n_pairs: int, bias_sd: float, row_sd: float, seed: int, n_rows: int = 40) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"pair": (f"{kind}{seed}s{i}", f"{kind}{seed}t{i}"), "kind": kind,
             "err": rng.normal(rng.normal(0.0, bias_sd), row_sd, n_rows)} for i in range(n_pairs)]


def test_a_band_rests_only_on_pairs_of_its_own_class():
    """GPU pairs err by ~3 %, CPU pairs by ~30 %: a GPU band from both (the old pooled band) is several times
    wider than from the GPU pairs alone; a CPU band with no CPU pair is None (the caller's fallback), never
    the GPU pairs' band; the method names the class and how many of its devices."""
    from carb.model.transfer_prior import device_level_band

    gpu, cpu = _recs("gpu", 3, 0.02, 0.02, seed=1), _recs("cpu", 3, 0.25, 0.15, seed=2)
    only = device_level_band(gpu + cpu, kind="gpu")
    pooled = device_level_band(gpu + cpu)
    assert only["n_devices"] == 6 and "measured on 6 gpu device(s)" in only["method"] and only["kind"] == "gpu"
    assert pooled["upper"] > 3 * only["upper"]
    assert only["upper"] == pytest.approx(device_level_band(gpu)["upper"])
    assert device_level_band(gpu, kind="cpu") is None


def test_few_device_widening_is_centred_student_t():
    """The bias term is t(df = D) x rms about 0 (exact), and a new device's bias falls inside it 90 % of the time
    with only D = 3 devices (simulated, rows negligible); the old t(D - 1) x sqrt(1 + 1/D) held 98 %."""
    from scipy.stats import t as student_t

    from carb.model.transfer_prior import device_level_band

    rng = np.random.default_rng(0)
    inside, old_inside = [], []
    for _ in range(1500):
        b = rng.normal(0.0, 0.1, 3)
        recs = [{"pair": (f"s{i}", f"t{i}"), "err": b[i] + np.array([-1e-9, 0.0, 1e-9])} for i in range(3)]
        band = device_level_band(recs)
        rms = float(np.sqrt(np.mean(b ** 2)))
        assert band["half_bias"] == pytest.approx(student_t.ppf(0.95, 3) * rms, rel=1e-9)
        new = rng.normal(0.0, 0.1)
        inside.append(abs(new) <= band["upper"])
        old_inside.append(abs(new) <= student_t.ppf(0.95, 2) * rms * np.sqrt(1 + 1 / 3))
    assert 0.87 <= np.mean(inside) <= 0.93, np.mean(inside)
    assert np.mean(old_inside) > 0.95


def test_precision_widening_is_shrunk_by_the_prior_pseudo_rows():
    """Three fp32 K rows with one outlier err 8.3 x the common scale: the old rule widened fp32's band x8.3
    (EPYC Zen 5 at K = 10: median hi/lo 8.97); shrunk by 10 pseudo-rows it is 8.3^(3/13) = x1.63; a precision
    at or below the scale is not widened."""
    from carb.model.transfer_prior import loo_stat, precision_widening

    loo = np.array([0.04, -0.05, 0.06, 0.05, -0.04, 0.04, 0.05, 0.9, -0.3, 0.05])
    prec = np.array(["bf16"] * 4 + ["fp16"] * 3 + ["fp32"] * 3)
    scale = 0.05
    f = precision_widening(loo, prec, scale, prior_rows=10.0)
    ratio = loo_stat(np.abs(loo[7:])) / scale
    assert set(f) == {"fp32"} and f["fp32"] == pytest.approx(ratio ** (3 / 13))
    assert ratio > 5 and f["fp32"] < 1.7
    assert precision_widening(loo, prec, scale, prior_rows=0.0)["fp32"] == pytest.approx(ratio)


def _bare_transfer(loo: list[float], prec: list[str], kind: str = "cpu"):
    """A TransferredCascade with only what set_device_band reads (K rows' leave-one-out residuals)."""
    from carb.model.transfer import TransferredCascade

    tr = TransferredCascade(object())
    tr.transfer_ = {"latency_ms": {"form": "affine", "k": len(loo), "loo": loo, "loo_precision": prec}}
    tr.device_kind_, tr.unseen_precisions_, tr.intervals_ = kind, {}, {"coverage": 0.9}
    return tr


def test_a_cpu_transfer_without_cpu_pairs_uses_its_own_k_rows_not_gpu_errors():
    """Only GPU pairs left after leave-one-device-out (three CPUs): the CPU transfer's K = 10 band is its own K
    rows' leave-one-out interval (Student-t), names 0 cpu devices and that nothing was borrowed; the old band
    rested on the 4 GPU devices. At K = 0 (no K rows) there is no band at all (None)."""
    from carb.model.transfer import interval_entry

    rng = np.random.default_rng(4)
    loo = list(rng.normal(0, 0.12, 10))
    prec = ["fp32", "bf16", "fp16", "fp32", "bf16", "fp16", "fp32", "bf16", "fp16", "fp32"]
    gpu = [{**r, "scale": 0.03} for r in _recs("gpu", 2, 0.02, 0.02, seed=5)]
    tr = _bare_transfer(loo, prec)
    entry = tr.set_device_band("latency_ms", gpu, 0.0, scaled=True)
    own = interval_entry(np.asarray(loo), 0.9)
    assert entry["n_devices"] == 0 and "measured on 0 other cpu devices" in entry["method"]
    assert "no other class's errors borrowed" in entry["method"]
    assert (entry["lower"], entry["upper"]) == pytest.approx((own["lower"], own["upper"]))
    gpu_tr = _bare_transfer(loo, prec, kind="gpu")
    assert gpu_tr.set_device_band("latency_ms", gpu, 0.0, scaled=True)["n_devices"] == 4
    zs = _bare_transfer([], [])
    assert zs.set_device_band("latency_ms", [{k: v for k, v in r.items() if k != "scale"} for r in gpu], 0.0,
                              scaled=False) is None


def test_the_floor_is_per_precision():
    """A floor of log sd 0.05 for fp32 and 0.2 for bf16: a tight band sits at z x 0.05 for fp32 and fp16 (the
    default) and at z x 0.2 for bf16 rows (interval per row's precision); the old floor was one number."""
    from carb.model.intervals import interval
    from carb.model.transfer_prior import device_level_band

    z = 1.6448536
    band = device_level_band(_recs("cpu", 4, 0.001, 0.001, seed=6), floor_log_sd={"fp32": 0.05, "bf16": 0.2,
                                                                                  "default": 0.05}, kind="cpu")
    assert band["upper"] == pytest.approx(z * 0.05, rel=1e-6)
    assert max(band["precision_log_ratios"]["bf16"]) == pytest.approx(z * 0.2, rel=1e-5)
    pred = pd.DataFrame({"pred_latency_ms": [10.0, 10.0, 10.0]})
    iv = interval({"latency_ms": band}, pred, precision=np.array(["fp32", "bf16", "fp16"]))
    w = np.log(iv["hi_latency_ms"] / pred["pred_latency_ms"]).to_numpy()
    assert w == pytest.approx([z * 0.05, z * 0.2, z * 0.05], rel=1e-5)


def test_calibration_rows_without_spread_take_the_shipped_floor_of_their_device():
    """K rows of the Zen 4 (34cc4b132c) without latency_repeat_spread: the floor is the shipped table's, per
    precision, default the configured 0.05 (before: the configured 0.05 for every precision); an unknown
    device keeps the configured floor; rows that carry a spread use their own. The shipped table is what
    scripts/data/repeatability.py builds from the shipped repeat rows."""
    from carb.data.repeatability import SHIPPED_TABLE, shipped_floor_log_sd
    from carb.model.transfer_prior import device_floor
    from scripts.data.repeatability import build

    assert build().to_csv(index=False) == SHIPPED_TABLE.read_text()
    shipped = shipped_floor_log_sd(ZEN4)
    assert set(shipped) == {"fp32", "fp16", "bf16"} and shipped["bf16"] > shipped["fp32"] > shipped["fp16"] > 0
    xeon = shipped_floor_log_sd("6a0ea403ee")   # its second collection's two passes: below the configured 0.05
    assert set(xeon) == {"fp32", "fp16", "bf16"} and all(0.02 < v < 0.05 for v in xeon.values())
    rows = pd.DataFrame({"precision": ["fp32", "bf16"], "latency_ms": [1.0, 2.0], "device_id": [ZEN4] * 2})
    assert device_floor(rows, "latency_ms", 0.05, ZEN4) == {**shipped, "default": 0.05}
    assert device_floor(rows, "latency_ms", 0.05, "0000000000") == 0.05
    assert device_floor(rows, "peak_memory_MB", 0.01, ZEN4) == 0.01
    rng = np.random.default_rng(0)
    a, b = np.exp(rng.normal(0, 0.04, 200)), np.exp(rng.normal(0, 0.04, 200))
    own = pd.DataFrame({"precision": ["fp32"] * 200, "latency_repeat_spread": np.abs(a - b) / ((a + b) / 2)})
    got = device_floor(own, "latency_ms", 0.05, ZEN4)
    assert set(got) == {"fp32", "default"} and got["default"] == pytest.approx(0.04, rel=0.15)


def test_transfer_fit_looks_up_the_shipped_floor(cpu_model):
    """TransferredCascade.fit (what carb-calibrate runs) floors latency with the shipped per-precision floor of
    the K rows' device_id when they carry no spread (before: the configured 0.05 for every precision), and
    keeps the configured floor for a device the table lacks."""
    from carb.data.repeatability import shipped_floor_log_sd
    from carb.model.transfer import TransferredCascade

    cascade, _, rows, _ = cpu_model
    rows = rows.assign(latency_ms=cascade.predict(rows)["pred_latency_ms"].to_numpy() * 2)
    zen4 = rows.assign(device_id=ZEN4).head(10)
    tr = TransferredCascade(cascade, repeat_floor={"latency_ms": 0.05}).fit(zen4)
    assert tr.repeat_floor["latency_ms"] == {**shipped_floor_log_sd(ZEN4), "default": 0.05}
    other = TransferredCascade(cascade, repeat_floor={"latency_ms": 0.05}).fit(rows.head(10))
    assert other.repeat_floor["latency_ms"] == 0.05


def test_log_sd_and_half_width_convert_through_one_function(monkeypatch):
    """The log sd <-> coverage half-width conversion is written once (``coverage_z``): the repeatability floor's
    log sd, the transfer floor's half-width and the zero-shot band's normal shape all go through it (patched
    to 2.0, all three follow), and at 0.9 it is the normal 1.6449; a coverage outside (0, 1) is refused."""
    from carb.data import repeatability
    from carb.model import transfer_band, transfer_prior

    assert repeatability.coverage_z(0.9) == pytest.approx(1.6448536, rel=1e-6)
    with pytest.raises(ValueError, match="coverage"):
        repeatability.coverage_z(1.0)
    assert transfer_prior.floor_half(0.1, 0.9)[0] == pytest.approx(0.1 * 1.6448536, rel=1e-6)
    monkeypatch.setattr(repeatability, "coverage_z", lambda coverage: 2.0)
    pooled, by_prec = transfer_prior.floor_half({"fp32": 0.1, "bf16": 0.3}, 0.9)
    assert pooled == pytest.approx(0.2) and by_prec == {"bf16": pytest.approx(0.6)}
    q = transfer_band.band_quantiles((-0.2, 0.2), np.array([0.5, 0.95]))
    from scipy.stats import norm

    assert q == pytest.approx([0.0, 0.2 * norm.ppf(0.95) / 2.0])
    rows = pd.DataFrame({"precision": ["fp32"] * 8, "status": "ok", "latency_repeat_spread": [0.02] * 8,
                         "latency_passes": 2})
    h = repeatability.repeatability_floor(rows)["fp32"]
    assert repeatability.floor_log_sd(rows)["fp32"] == pytest.approx(h / 2.0)
