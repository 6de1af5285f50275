"""Issue 44, point accuracy: on a zero-shot base a few K rows fit offsets only (a common factor and one per
precision, shrunk toward it by empirical Bayes), never a slope, another base or a per-precision switch back to the
zero-shot chosen on 3-4 rows."""
from __future__ import annotations

import numpy as np
import pytest

from test_transfer_lodo import cpu_model  # noqa: F401 - the module's fixture, shared


def test_empirical_bayes_shares_the_common_offset_when_precisions_differ_within_the_noise():
    """Two precisions whose means differ by less than their rows' scatter: no own offsets (inf pseudo-rows);
    two that differ by 1.0 in log with rows scattered by 0.01: each keeps (almost) its own mean."""
    from carb.model.transfer import _precision_offsets, empirical_bayes_shrink

    rng = np.random.default_rng(0)
    prec = np.array(["fp32"] * 4 + ["bf16"] * 3 + ["fp16"] * 3)
    noisy = rng.normal(0.0, 0.2, len(prec)) + np.where(prec == "fp16", 0.02, 0.0)
    lam = empirical_bayes_shrink(noisy, prec)
    a, per = _precision_offsets(noisy, prec, "auto")
    if np.isinf(lam):
        assert all(v == pytest.approx(a) for v in per.values())
    else:   # a finite pull still moves every precision toward the common offset
        for p, v in per.items():
            assert abs(v - a) < abs(noisy[prec == p].mean() - a) + 1e-12
    apart = rng.normal(0.0, 0.01, len(prec)) + np.where(prec == "fp16", 1.0, 0.0)
    assert empirical_bayes_shrink(apart, prec) < 0.01
    a, per = _precision_offsets(apart, prec, "auto")
    assert per["fp16"] == pytest.approx(apart[prec == "fp16"].mean(), abs=0.01)
    assert per["fp32"] == pytest.approx(apart[prec == "fp32"].mean(), abs=0.01)
    assert np.isinf(empirical_bayes_shrink(apart[prec == "fp32"], prec[prec == "fp32"]))   # one precision


def test_k_rows_on_a_probe_base_fit_offsets_only(cpu_model):  # noqa: F811
    """On the probes' base, 12 K rows whose truth bends away from the zero-shot (x p^0.15, a slope 12 rows
    cannot tell from noise on a real CPU) and one precision within 1 % of it: the transfer is offsets on the
    probes' prediction (its ratio to the zero-shot constant within each precision: no slope, no other base,
    no precision switched back to the zero-shot), fp16 gets its own factor (1.6x the others), and both
    per-precision leave-one-out errors are still reported. The old settings (slope and bases by
    leave-one-out, a precision keeping the zero-shot on its 4 rows) bend or switch here."""
    from carb.model.transfer import TransferredCascade

    cascade, probe, rows, fp = cpu_model
    tgt = probe.assign(time_ms=probe["time_ms"] * 0.25, device_id="cccccccccc")
    zs = TransferredCascade(cascade).fit_probe(probe, tgt, fp, "C", "cccccccccc")
    base = zs.predict(rows)["pred_latency_ms"].to_numpy()
    prec = rows["precision"].to_numpy()
    y = base * np.where(prec == "fp32", 1.0, 1.35 * base ** 0.15) * np.where(prec == "fp16", 1.6, 1.0) \
        * np.exp(np.random.default_rng(0).normal(0, 0.005, len(rows)))
    rows = rows.assign(latency_ms=y)
    cal = rows.groupby("precision").head(4)
    rest = rows.drop(index=cal.index)
    tr = TransferredCascade(cascade).fit_probe(probe, tgt, fp, "C", "cccccccccc").fit(cal)
    info = tr.transfer_["latency_ms"]
    assert info["form"] == "precision" and info["b"] == 1.0 and info["default_base"] == "probe"
    assert not info["bases"] and "zero_shot_precisions" not in info
    assert set(info["precision_loo"]) == {"fp32", "bf16", "fp16"}   # both errors still reported
    assert np.exp(info["a_precision"]["fp16"] - info["a_precision"]["bf16"]) == pytest.approx(1.6, rel=0.1)
    ratio = tr.predict(rest)["pred_latency_ms"].to_numpy() / zs.predict(rest)["pred_latency_ms"].to_numpy()
    for q in ("fp32", "bf16", "fp16"):
        m = (rest["precision"] == q).to_numpy()
        assert np.ptp(np.log(ratio[m])) < 1e-9, q
    was = TransferredCascade(cascade, precision_shrink=1.0, base_offsets_only=False, keep_zero_shot=True)
    was = was.fit_probe(probe, tgt, fp, "C", "cccccccccc").fit(cal)
    old = was.transfer_["latency_ms"]
    assert old["form"] != "precision" or old["b"] != 1.0 or old.get("bases") or old.get("zero_shot_precisions")


def test_calibrate_settings_pass_the_offset_rules_through():
    """conf/calibrate.yaml's transfer.precision_shrink (auto), base_offsets_only and keep_zero_shot reach the
    transfer; a shrink that is neither a number nor auto is one line naming the field."""
    from carb.commands.calibrate import transfer_settings
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.errors import ConfigError

    kw = transfer_settings(compose("calibrate", []))
    assert kw["precision_shrink"] == "auto" and kw["base_offsets_only"] is True and kw["keep_zero_shot"] is False
    kw = transfer_settings(compose("calibrate", ["transfer.precision_shrink=2", "transfer.keep_zero_shot=true"]))
    assert kw["precision_shrink"] == 2.0 and kw["keep_zero_shot"] is True
    with pytest.raises(ConfigError, match="precision_shrink"):
        check_config("calibrate", compose("calibrate", ["transfer.precision_shrink=often"]))


def test_measuring_now_picks_space_filling_rows_unless_told_otherwise(cpu_model, monkeypatch):  # noqa: F811
    """The K rows measured now are space-filling within each precision (they estimate offsets; rows from the
    tails of the probes' disagreement bias them): the disagreement is not even computed by default, and with
    transfer.pick_where_probes_disagree=true it is."""
    from carb.commands import calibrate
    from carb.commands.cli import compose, to_dict
    from carb.design.space import configs_from_cfg

    asked = []
    monkeypatch.setattr(calibrate, "_probe_disagreement", lambda *a, **k: asked.append(1))
    for flag, want in (("false", []), ("true", [1])):
        asked.clear()
        cfg = compose("calibrate", ["k=6", "measure=cpu", "space.n=200", f"transfer.pick_where_probes_disagree={flag}"])
        chosen = calibrate.covering_rows(cfg, cpu_model[0], configs_from_cfg(to_dict(cfg.space)))
        assert len(chosen) == 9 and asked == want
