"""The zero-shot energy's power model (carb/model/power.py): it recovers a known drive law on synthetic GPUs,
moves energy to a second synthetic GPU exactly when both follow the law, predicts the H200's measured power
leaving configurations out, widens its interval for what nobody measured, and reaches the zero-shot
transfer's energy prediction."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from carb.data.gpu_specs import gpu_spec
from carb.model import power
from carb.model.transfer import TransferredCascade
from carb.resources import DATA_DIR
from tests.synthetic import power_law_rows

GPU_A = {"name": "Synthetic A", "power_limit_W": 400.0, "memory_bandwidth_GBps": 2000.0, "fp32_TFLOPS": 20.0,
         "tf32_tensor_TFLOPS": 150.0, "fp16_tensor_TFLOPS": 300.0, "bf16_tensor_TFLOPS": 300.0}
GPU_B = {"name": "Synthetic B", "power_limit_W": 150.0, "memory_bandwidth_GBps": 600.0, "fp32_TFLOPS": 30.0,
         "tf32_tensor_TFLOPS": 60.0, "fp16_tensor_TFLOPS": 120.0, "bf16_tensor_TFLOPS": 120.0, "static_W": 30.0}
LAW = {"a": 2.5, "b": 1.2, "static_W": 70.0}


@pytest.mark.parametrize("law", [LAW, {"a": 0.5, "b": 0.6, "static_W": 120.0}])
def test_fit_recovers_a_known_power_law(law):
    rows = power_law_rows(GPU_A, law, n=400, seed=1)
    m = power.fit_power(rows, GPU_A)
    assert m.static_W == pytest.approx(law["static_W"], rel=0.02)
    assert (m.a, m.b) == pytest.approx((law["a"], law["b"]), rel=0.02)
    noisy = power.fit_with_errors(power_law_rows(GPU_A, law, n=400, seed=2, noise=0.05), GPU_A, folds=5)
    assert noisy.static_W == pytest.approx(law["static_W"], rel=0.15)
    assert 2.0 < noisy.loo_mape_pct < 8.0                      # the 5 % noise, not the law, is the error
    assert noisy.loo_band[0] < 0 < noisy.loo_band[1]


def test_energy_moves_to_a_second_gpu_exactly_when_both_follow_the_law():
    """GPU B runs every configuration exp(r) times as long as A (per precision) and draws power by the same
    drive law between its own static power and limit: the factor times A's energy is B's energy."""
    rows = power_law_rows(GPU_A, LAW, n=200, seed=3)
    m = power.fit_power(rows, GPU_A)
    r = {"fp32": math.log(3.0), "fp16": math.log(2.5), "bf16": math.log(2.2)}
    t_a = rows["latency_ms"].to_numpy(float)
    t_b = t_a * np.exp(rows["precision"].map(r).to_numpy(float))
    x_b = np.log(power.roofline_ms(rows, GPU_B) / t_b)
    p_b = GPU_B["static_W"] + (GPU_B["power_limit_W"] - GPU_B["static_W"]) / (1 + np.exp(-(LAW["a"] + LAW["b"] * x_b)))
    e_b = p_b * t_b / 1e3
    s_b, sourced = power.static_power(GPU_B, 0.2)
    assert sourced and s_b == 30.0
    f = power.energy_factor(m, rows, t_a, r, GPU_A, GPU_B, s_b)
    np.testing.assert_allclose(rows["energy_J"].to_numpy(float) * f, e_b, rtol=2e-3)
    # scaling A's energy by the time ratio alone (A's power kept) is off by the power ratio
    time_only = rows["energy_J"].to_numpy(float) * t_b / t_a
    assert np.median(np.abs(time_only / e_b - 1)) > 0.5


def test_unsourced_static_power_is_a_stated_fraction_and_widens_the_interval():
    rows = power_law_rows(GPU_A, LAW, n=200, seed=4, noise=0.03)
    no_static = {k: v for k, v in GPU_B.items() if k != "static_W"}
    s, sourced = power.static_power(no_static, 0.2)
    assert not sourced and s == pytest.approx(0.2 * 150.0)
    src_entry = {"lower": -0.1, "upper": 0.12, "coverage": 0.9}
    known = power.zero_shot_energy(rows, GPU_A, GPU_B, src_entry, (-0.08, 0.08), folds=5)
    unknown = power.zero_shot_energy(rows, GPU_A, no_static, src_entry, (-0.08, 0.08), folds=5)
    assert known["static_sourced"] and not unknown["static_sourced"]
    ki, ui = known["interval"], unknown["interval"]
    assert ki["lower"] < -0.1 - 0.08 and ki["upper"] > 0.12 + 0.08          # wider than source + latency band
    assert ui["lower"] < ki["lower"] and ui["upper"] > ki["upper"]        # and wider still without a static figure
    assert "no second GPU's energy has been measured" in ki["method"]
    wide = power.zero_shot_energy(rows, GPU_A, GPU_B, src_entry, (-0.08, 0.08), widen=4.0, folds=5)
    assert wide["interval"]["upper"] > ki["upper"]                       # unmeasured_widen widens


def test_h200_power_leave_configuration_out():
    """On the shipped H200 rows (energy_J / latency_ms is measured power) the law predicts each configuration's
    power from the others far better than the mean power does, and its static power is an active floor."""
    rows = pd.read_parquet(DATA_DIR / "h200-reference.parquet")
    rows = rows[rows["status"] == "ok"]
    rec = gpu_spec("H200")
    m = power.fit_with_errors(rows, rec, folds=10)
    p = power.measured_power_W(power.usable_rows(rows))
    mean_mape = float(np.mean(np.abs(p.mean() / p - 1)) * 100)
    assert m.loo_mape_pct < 12.0 and m.loo_mape_pct < 0.3 * mean_mape
    assert 80.0 < m.static_W < 200.0 and m.b > 0                         # more busy share -> more power
    assert rec["static_W"] == pytest.approx(m.static_W, abs=1.0)        # the spec table's figure is this fit


class _Source:
    """A source model stand-in: fixed predictions (no fitted cascade needed)."""

    targets_ = ("peak_memory_MB", "energy_J", "latency_ms")
    intervals_ = {"energy_J": {"lower": -0.1, "upper": 0.1, "coverage": 0.9, "n": 50, "log_ratios": []}}

    def __init__(self, rows: pd.DataFrame) -> None:
        self.rows = rows

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        return pd.DataFrame({"pred_peak_memory_MB": 100.0, "pred_energy_J": X["energy_J"].to_numpy(float),
                             "pred_latency_ms": X["latency_ms"].to_numpy(float)}, index=X.index)


def test_zero_shot_transfer_predicts_energy_with_the_power_model():
    rows = power_law_rows(GPU_A, LAW, n=120, seed=5)
    energy = power.zero_shot_energy(rows, GPU_A, GPU_B, _Source.intervals_["energy_J"], (-0.08, 0.08), folds=4)
    w = {"compute": 0.3, "bandwidth": 0.35, "power": 0.35}
    tr = TransferredCascade(_Source(rows)).fit_spec(GPU_A, GPU_B, w, energy=energy)
    old = TransferredCascade(_Source(rows)).fit_spec(GPU_A, GPU_B, w)
    new_e, old_e = tr.predict(rows)["pred_energy_J"], old.predict(rows)["pred_energy_J"]
    np.testing.assert_allclose(old_e, rows["energy_J"])                  # without it: the source's joules kept
    t_src = rows["latency_ms"].to_numpy(float)
    f = power.energy_factor(power.PowerModel(**{**energy["power"], "loo_band": (0, 0)}), rows, t_src,
                            tr.spec_log_ratio_, GPU_A, GPU_B, energy["static_W"])
    np.testing.assert_allclose(new_e, rows["energy_J"].to_numpy(float) * f)
    assert not np.allclose(f, 1.0)
    assert tr.transfer_["energy_J"]["form"] == "power" and "note" in tr.transfer_["energy_J"]
    assert tr.intervals_["energy_J"]["upper"] > 0.1 and tr.intervals_["energy_J"]["method"] == power.NOTE
    import json
    json.dumps(tr.transfer_)                                              # logged as transfer.json


def test_calibrate_k0_energy_settings_reach_the_power_model(capsys):
    """``spec_energy`` (carb-calibrate k=0 spec=): the shipped H200 rows of the source's device, the
    ``zero_shot.power`` settings applied; a source of another device keeps its energy and says so."""
    from carb.commands.cli import compose
    from carb.commands.zero_shot import spec_energy

    class Src:
        device_id_ = str(pd.read_parquet(DATA_DIR / "h200-reference.parquet", columns=["device_id"]).iloc[0, 0])
        intervals_ = {"energy_J": {"lower": -0.1, "upper": 0.1, "coverage": 0.9}}

    h200, h100 = gpu_spec("H200"), gpu_spec("H100 SXM")
    e = spec_energy(compose("calibrate", ["zero_shot.power.static_fraction=0.25", "zero_shot.power.folds=3"]),
                    Src(), h200, h100, (-0.078, 0.077))
    assert e["power"]["n"] > 1000 and not e["static_sourced"] and e["static_W"] == pytest.approx(0.25 * 700)
    cfg = compose("calibrate", ["zero_shot.power.static_fraction=0.25", "zero_shot.power.folds=3",
                                "zero_shot.power.unmeasured_widen=3"])
    wider = spec_energy(cfg, Src(), h200, h100, (-0.078, 0.077))
    assert wider["interval"]["upper"] > e["interval"]["upper"]
    Src.device_id_ = "0000000000"
    assert spec_energy(compose("calibrate", []), Src(), h200, h100, (-0.078, 0.077)) is None
    assert "energy keeps the source's prediction" in capsys.readouterr().out
