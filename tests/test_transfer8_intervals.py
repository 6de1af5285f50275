"""Issue 44, intervals that hold on the next device: synthetic devices (made here) with a known device-level spread.

* A configured repeatability floor that nothing measured (the GPUs) is capped at the run-to-run spread the other
  devices' held-out rows allow: calm devices under a 0.05 floor got bands that covered ~1.00 of a new device.
* The few-device widening: ``student-t`` (df = devices, centred on no bias) covers a new device's bias ~0.90 with
  two devices; the textbook ``predictive`` form (t(D - 1) x sd x sqrt(1 + 1/D), centred on the mean) over-covers;
  ``pooled`` pools the bias spread with the other class only where an F test allows.
* Per precision, the level band of the pairs without the target (three CPUs): a precision that errs more on
  every device gets its own wider band (``widest``), where the pooled band under-covered it.
* K = 0 with three CPUs: the band of the pairs without the target device (the form carb-calibrate k=0 ships),
  naming the devices it was measured on, where the other class's band covered a fraction.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import t as student_t


def _pairs(n_dev: int, bias_sd: float, row_sd: float, seed: int, n_rows: int = 60, kind: str = "gpu",
           precision: dict[str, float] | None = None) -> list[dict]:
    """Records of every ordered pair among ``n_dev`` synthetic devices: each pair's held-out log errors
    N(b, row_sd) with its bias b ~ N(0, bias_sd); ``precision``: {name: row sd multiplier}, rows split evenly."""
    rng = np.random.default_rng(seed)
    devs = [f"{kind}{seed}-{i}" for i in range(n_dev)]
    out = []
    for a in devs:
        for b in devs:
            if a == b:
                continue
            bias = rng.normal(0.0, bias_sd)
            if precision:
                prec = np.repeat(list(precision), n_rows // len(precision))
                err = bias + rng.normal(0.0, row_sd, len(prec)) * np.array([precision[p] for p in prec])
                out.append({"pair": (a, b), "kind": kind, "err": err, "precision": prec})
            else:
                out.append({"pair": (a, b), "kind": kind, "err": rng.normal(bias, row_sd, n_rows)})
    return out


def _new_device_coverage(entry: dict, bias_sd: float, row_sd: float, rng: np.random.Generator, n: int = 40) -> float:
    """Share of a new device's rows (bias ~ N(0, bias_sd), rows N(bias, row_sd)) inside ``entry``'s band."""
    e = rng.normal(rng.normal(0.0, bias_sd), row_sd, n)
    return float(np.mean((e >= entry["lower"]) & (e <= entry["upper"])))


def test_a_configured_floor_nothing_measured_is_capped_by_the_other_devices_spread(monkeypatch):
    """Calm GPUs (device bias sd 0.01, rows 0.02 in log units) under the configured floor of log sd 0.05: the old
    rule set every band at z x 0.05 = 0.082 and covered > 0.98 of a new device; the cap (their held-out rows'
    90 % |residual| over z, about 0.02) covers 0.85-0.95 and says so. A measured floor (per precision) is never
    capped."""
    from carb.model import transfer_prior
    from carb.model.transfer_prior import device_level_band

    rng = np.random.default_rng(11)
    cov = {}
    for rule in ("configured", "class-bound"):
        monkeypatch.setattr(transfer_prior, "UNMEASURED_FLOOR", rule)
        bands = [device_level_band(_pairs(4, 0.01, 0.02, seed=s), floor_log_sd=0.05, kind="gpu") for s in range(30)]
        cov[rule] = np.mean([_new_device_coverage(b, 0.01, 0.02, rng) for b in bands for _ in range(20)])
        if rule == "configured":
            assert all(b["upper"] == pytest.approx(1.6448536 * 0.05, rel=1e-6) for b in bands)
        else:
            assert all("floor capped" in b["method"] and b["upper"] < 1.6448536 * 0.05 for b in bands)
    assert cov["configured"] > 0.98, cov
    assert 0.85 <= cov["class-bound"] <= 0.95, cov
    measured = device_level_band(_pairs(4, 0.01, 0.02, seed=1), floor_log_sd={"fp32": 0.05, "default": 0.05},
                                 kind="gpu")
    assert measured["upper"] == pytest.approx(1.6448536 * 0.05, rel=1e-6) and "capped" not in measured["method"]


def test_two_devices_student_t_holds_and_is_narrower_than_the_textbook_predictive_form(monkeypatch):
    """Two devices (two ordered pairs), biases N(0, 0.1) that dominate the rows: ``student-t`` (df = 2, about 0:
    a calibrated transfer has no bias in expectation) and the textbook ``predictive`` (t(1) x sd x sqrt(1.5)
    about the draws' mean: exact for an unknown mean) both put a new device's bias inside 0.86-0.94 of the time,
    but ``predictive`` is more than 1.5x wider in the median; ``pairs`` counts the same two draws here."""
    from carb.model import transfer_prior
    from carb.model.transfer_prior import device_level_band

    rng = np.random.default_rng(5)
    draws = [(_pairs(2, 0.1, 1e-4, seed=s), rng.normal(0.0, 0.1)) for s in range(700)]
    inside, width = {}, {}
    for rule in ("student-t", "predictive", "pairs"):
        monkeypatch.setattr(transfer_prior, "DEVICE_WIDEN", rule)
        hits, w = [], []
        for recs, new in draws:
            band = device_level_band(recs)
            hits.append(band["lower"] <= new <= band["upper"])
            w.append(band["upper"] - band["lower"])
        inside[rule], width[rule] = float(np.mean(hits)), float(np.median(w))
    assert 0.86 <= inside["student-t"] <= 0.94 and 0.86 <= inside["predictive"] <= 0.94, inside
    assert width["predictive"] > 1.5 * width["student-t"], width
    assert inside["pairs"] == inside["student-t"]
    monkeypatch.setattr(transfer_prior, "DEVICE_WIDEN", "student-t")
    recs, _ = draws[0]
    b = np.array([np.median(r["err"]) for r in recs])
    assert device_level_band(recs)["half_bias"] == pytest.approx(student_t.ppf(0.95, 2) * np.sqrt(np.mean(b ** 2)),
                                                                 rel=1e-9)


def test_pooled_bias_spread_only_where_the_classes_agree(monkeypatch):
    """``pooled``: a GPU band pools its bias spread with CPU pairs of the same spread (more draws: narrower t,
    method says pooled), but keeps its own where the CPU biases are 50x larger (F test)."""
    from carb.model import transfer_prior
    from carb.model.transfer_prior import device_level_band

    monkeypatch.setattr(transfer_prior, "DEVICE_WIDEN", "pooled")
    gpu = _pairs(2, 0.05, 0.01, seed=3)
    alike = device_level_band(gpu + _pairs(5, 0.05, 0.01, seed=4, kind="cpu"), kind="gpu")
    apart = device_level_band(gpu + _pairs(5, 2.5, 0.01, seed=4, kind="cpu"), kind="gpu")
    assert "pooled over both classes" in alike["method"] and "df 7" in alike["method"]
    assert "its class alone" in apart["method"]
    monkeypatch.setattr(transfer_prior, "DEVICE_WIDEN", "student-t")
    assert apart["upper"] == pytest.approx(device_level_band(gpu, kind="gpu")["upper"])


def test_a_precision_that_errs_more_on_every_device_gets_its_own_level(monkeypatch):
    """Three CPUs, fp16 rows err 3x the others on every device: the pooled level band of the pairs without the
    target covers < 0.8 of a new device's fp16 rows; ``widest`` gives fp16 its own level (0.85-0.95) and never
    narrows the others."""
    from carb.model import transfer_prior
    from carb.model.transfer_prior import held_out_level_band

    mult = {"fp32": 1.0, "bf16": 1.0, "fp16": 3.0}
    recs = [{**r, "own_half": h} for r, h in zip(_pairs(2, 0.0, 0.05, seed=8, n_rows=300, kind="cpu",
                                                         precision=mult), (0.05, 0.5))]
    new = np.random.default_rng(9).normal(0.0, 0.05 * 3.0, 4000)
    half = {}
    for rule in ("pooled", "widest"):
        monkeypatch.setattr(transfer_prior, "LEVEL_BY_PRECISION", rule)
        band = held_out_level_band(recs, 0.9, "cpu")
        half[rule] = max((band.get("precision_log_ratios") or {}).get("fp16", [band["upper"]]))
        assert max((band.get("precision_log_ratios") or {}).get("fp32", [band["upper"]])) >= band["upper"]
    assert np.mean(np.abs(new) <= half["pooled"]) < 0.8
    assert 0.85 <= np.mean(np.abs(new) <= half["widest"]) <= 0.95


def test_k0_band_of_the_pairs_without_the_target_names_its_devices(monkeypatch):
    """Three CPUs whose zero-shot errs by each device's offset plus its rows (log units). Where the rows dominate
    (offsets sd 0.05, rows 0.12: the benchmark's CPUs, whose pairs' median errors are 0.01-0.19 beside a 90 %
    |residual| of 0.13-0.30), the band of the pairs without the target (A <-> B for A -> C; 5-95 % of their log
    errors, the form carb-calibrate k=0 ships) covers C's rows 0.85-0.95 on average, where a GPU-sized band
    (+- 0.08) covered < 0.6; it names the 2 devices it was measured on. Where the offsets dominate (sd 0.15, rows
    0.1) two devices are too few: it covers < 0.85 (why the band says how many). ``none``: no band."""
    from carb.model import transfer_prior
    from carb.model.transfer_prior import target_out_records, zero_shot_target_out_band

    monkeypatch.setattr(transfer_prior, "ZERO_SHOT_TARGET_OUT", "quantiles")   # this form (the default: device)

    def coverage(offset_sd: float, row_sd: float, seed: int) -> tuple[float, float, dict]:
        rng = np.random.default_rng(seed)
        cov, gpu = [], []
        for _ in range(300):
            u = dict(zip("ABC", rng.normal(0.0, offset_sd, 3)))
            recs = [{"pair": (a, b), "kind": "cpu", "err": u[b] - u[a] + rng.normal(0.0, row_sd, 80)}
                    for a in "ABC" for b in "ABC" if a != b]
            band = zero_shot_target_out_band(target_out_records(recs, ("A", "C")), 0.9, "cpu")
            e = recs[1]["err"]   # A -> C
            cov.append(np.mean((e >= band["lower"]) & (e <= band["upper"])))
            gpu.append(np.mean(np.abs(e) <= 0.08))
        return float(np.mean(cov)), float(np.mean(gpu)), band

    cov, gpu, band = coverage(0.05, 0.12, seed=21)
    assert band["n_devices"] == 2 and "measured on 2 cpu devices" in band["method"]
    assert 0.85 <= cov <= 0.95 and gpu < 0.6, (cov, gpu)
    assert coverage(0.15, 0.1, seed=22)[0] < 0.85
    monkeypatch.setattr(transfer_prior, "ZERO_SHOT_TARGET_OUT", "none")
    assert zero_shot_target_out_band([{"pair": ("A", "B"), "kind": "cpu", "err": np.zeros(9)}], 0.9, "cpu") is None


def test_interval_rules_come_from_the_config_and_a_bad_value_is_one_line(monkeypatch):
    """conf/calibrate.yaml's transfer.device_widen / unmeasured_floor / level_by_precision are the module's
    defaults and pass the schema; configure() returns them (nothing module-wide changes) and names the key and
    allowed values for a bad one."""
    from pathlib import Path

    from omegaconf import OmegaConf

    from carb.model import transfer_prior

    t = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "calibrate.yaml").transfer
    assert (t.device_widen, t.unmeasured_floor, t.level_by_precision) == (
        transfer_prior.DEVICE_WIDEN, transfer_prior.UNMEASURED_FLOOR, transfer_prior.LEVEL_BY_PRECISION)
    rules = transfer_prior.configure("pooled", "configured", "own")
    assert (rules.device_widen, rules.unmeasured_floor, rules.level_by_precision) == ("pooled", "configured", "own")
    assert (transfer_prior.DEVICE_WIDEN, transfer_prior.UNMEASURED_FLOOR, transfer_prior.LEVEL_BY_PRECISION) == (
        t.device_widen, t.unmeasured_floor, t.level_by_precision)
    with pytest.raises(ValueError, match=r"^transfer.device_widen: 'wide'; allowed: student-t, predictive, pairs, "
                                         r"pooled$"):
        transfer_prior.configure(device_widen="wide")
    from carb.commands.schema.commands import Transfer

    assert Transfer.model_fields["device_widen"].default == t.device_widen
