"""Issue 44 (k44c): how a precision's K rows are weighted in its latency offset (``transfer.offset_weighting``:
``equal``, the default; ``inverse_variance``: 1 / (the row's run-to-run variance + the between-row variance);
``huber``), the rows' run-to-run variance from their two-pass spread or the device's floor, bad values refused, and
the study's rule choice never reading the target."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


def test_equal_weights_are_the_plain_means():
    """``equal`` reproduces the per-precision means (shrink 0) and the common mean, as before the key."""
    from carb.model.transfer import _precision_offsets

    d = np.array([0.1, 0.3, -0.2, 0.0, 0.5, 0.2])
    prec = np.array(["fp32", "fp32", "bf16", "bf16", "fp16", "fp16"])
    a, per = _precision_offsets(d, prec, 0.0, "equal")
    assert a == pytest.approx(d.mean())
    assert per == pytest.approx({"fp32": 0.2, "bf16": -0.1, "fp16": 0.35})


def test_inverse_variance_discounts_a_row_that_repeats_badly():
    """Three bf16 rows at 0, 0 and 0.6 in log; the third row's passes differed by 60 % (noise variance 0.09 against
    0 for the others) and the rows' between-row variance is small beside it: its weight falls, so the bf16 offset
    sits nearer the two steady rows (0.2 as a mean, < 0.1 weighted). A row whose noise is unknown weighs as the mean
    would."""
    from carb.model.transfer import _precision_offsets, offset_weights

    d = np.array([0.0, 0.0, 0.6, 0.1, 0.1, 0.1])
    prec = np.array(["bf16"] * 3 + ["fp32"] * 3)
    nv = np.array([0.0, 0.0, 0.09, 0.0, 0.0, 0.0])
    w = offset_weights(d, prec, "inverse_variance", nv)
    assert w[2] < 0.5 * w[0]
    assert _precision_offsets(d, prec, 0.0, "equal")[1]["bf16"] == pytest.approx(0.2)
    assert _precision_offsets(d, prec, 0.0, "inverse_variance", nv)[1]["bf16"] < 0.1
    same = offset_weights(d, prec, "inverse_variance", np.zeros(6))
    assert same == pytest.approx(np.full(6, same[0]))


def test_huber_discounts_an_outlier_row():
    """Four fp32 rows near 0 and one at 1.0 in log (a shape outlier), beside a calm bf16: Huber's weights cut the
    outlier's pull on the fp32 offset (mean 0.2; Huber well below)."""
    from carb.model.transfer import _precision_offsets

    d = np.array([0.0, 0.02, -0.02, 0.0, 1.0, 0.05, 0.0, -0.05])
    prec = np.array(["fp32"] * 5 + ["bf16"] * 3)
    assert _precision_offsets(d, prec, 0.0, "equal")[1]["fp32"] == pytest.approx(0.2)
    assert _precision_offsets(d, prec, 0.0, "huber")[1]["fp32"] < 0.12


def test_row_noise_var_from_two_passes_else_the_floor():
    """A row with a two-pass spread s gets log((2 + s) / (2 - s))^2 / 4 (the variance of a mean of two windows); a
    row without one the device floor of its precision squared (one window)."""
    from carb.model.transfer import row_noise_var

    X = pd.DataFrame({"precision": ["bf16", "bf16", "fp32"], "latency_repeat_spread": [0.2, np.nan, np.nan]})
    nv = row_noise_var(X, {"bf16": 0.1, "default": 0.05})
    assert nv[0] == pytest.approx(np.log(2.2 / 1.8) ** 2 / 4)
    assert nv[1] == pytest.approx(0.01) and nv[2] == pytest.approx(0.0025)


def test_bad_weighting_is_refused_and_the_default_is_equal():
    """An unknown rule: one line naming the key and the allowed values (DatasetError; the schema refuses it in the
    conf); conf/calibrate.yaml, the schema and the class default agree on ``equal``."""
    from carb.commands.calibrate import transfer_settings
    from carb.commands.cli import compose
    from carb.commands.schema.commands import Transfer
    from carb.errors import DatasetError
    from carb.model.transfer import TransferredCascade, offset_weights

    with pytest.raises(DatasetError, match="offset_weighting.*allowed: equal, inverse_variance, huber"):
        TransferredCascade(None, offset_weighting="median")
    with pytest.raises(DatasetError, match="offset_weighting"):
        offset_weights(np.zeros(3), np.array(["a"] * 3), "trimmed")
    assert transfer_settings(compose("calibrate", []))["offset_weighting"] == "equal"
    assert Transfer.model_fields["offset_weighting"].default == "equal"
    assert TransferredCascade(None).offset_weighting == "equal"
    assert transfer_settings(compose("calibrate", ["transfer.offset_weighting=huber"]))["offset_weighting"] == "huber"


def test_fit_offsets_uses_the_configured_weighting():
    """On a zero-shot base, ``_fit_offsets`` weights the K rows by the configured rule and records it; with
    ``inverse_variance`` the noisy row's pull falls."""
    from carb.model.transfer import TransferredCascade

    prec = np.array(["bf16"] * 3 + ["fp32"] * 3)
    x = np.zeros(6)
    yl = np.array([0.0, 0.0, 0.6, 0.1, 0.1, 0.1])
    Z = np.zeros((6, 1))
    eq, _ = TransferredCascade(None, precision_shrink=0.0)._fit_offsets(x, yl, Z, prec, "probe")
    tr = TransferredCascade(None, precision_shrink=0.0, offset_weighting="inverse_variance")
    tr.offset_noise_var_ = np.array([0.0, 0.0, 0.09, 0.0, 0.0, 0.0])
    iv, _ = tr._fit_offsets(x, yl, Z, prec, "probe")
    assert eq["offset_weighting"] == "equal" and iv["offset_weighting"] == "inverse_variance"
    assert iv["a_precision"]["bf16"] < eq["a_precision"]["bf16"] - 0.1


def test_study_rule_choice_never_reads_the_target():
    """The study's folds (transfer_shrink.leave_one_target_out on the rule column): C's own rows favour huber, the
    other two targets favour equal, so C is scored at equal."""
    from scripts.studies.transfer_shrink import leave_one_target_out

    rows = [("A", "equal", 10.0), ("A", "huber", 12.0), ("B", "equal", 10.0), ("B", "huber", 13.0),
            ("C", "equal", 20.0), ("C", "huber", 9.0)]
    cells = pd.DataFrame([{"target_device": t, "k": 10, "shrink": r, "precision": "bf16", "mape_pct": v}
                          for t, r, v in rows])
    folds = leave_one_target_out(cells).set_index("target_device")
    assert folds.loc["C", "shrink"] == "equal" and folds.loc["C", "k10_max_mape"] == 20.0


def _noisy_pairs(noise: float | None, n: int = 400, seed: int = 0) -> list[dict]:
    """Four GPU-like pairs of 4 devices (none the new one): bias 0, row residual sd 0.05 plus run-to-run noise of
    log sd ``noise`` on every target device (None: the records carry no ``noise``)."""
    rng = np.random.default_rng(seed)
    pairs = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    sd = np.hypot(0.05, noise or 0.0)
    return [{"pair": p, "err": rng.normal(0.0, sd, n), "kind": "gpu", **({"noise": noise} if noise else {})}
            for p in pairs]


def test_device_level_band_swaps_each_pairs_noise_for_this_devices():
    """``level_noise: swap`` in the device-level band (carb-calibrate's, from transfer-pairs.csv): pairs measured on
    noisy devices (log sd 0.15) give a quiet new device (0.01) a band near the noiseless one's, where ``keep`` carries
    the others' noise; records without ``noise`` (an older table) are left as they are under either rule."""
    from carb.model import transfer_prior as tp

    swap, keep = tp.configure(level_noise="swap"), tp.configure(level_noise="keep")
    quiet = tp.device_level_band(_noisy_pairs(None), floor_log_sd=0.01, kind="gpu", rules=keep)["upper"]
    noisy_keep = tp.device_level_band(_noisy_pairs(0.15), floor_log_sd=0.01, kind="gpu", rules=keep)["upper"]
    noisy_swap = tp.device_level_band(_noisy_pairs(0.15), floor_log_sd=0.01, kind="gpu", rules=swap)
    assert noisy_keep > 2.0 * quiet
    assert noisy_swap["upper"] < 1.3 * quiet and "level_noise: swap" in noisy_swap["method"]
    plain = tp.device_level_band(_noisy_pairs(None), floor_log_sd=0.01, kind="gpu", rules=swap)
    assert plain["upper"] == pytest.approx(quiet) and "swap" not in plain["method"]


def test_pair_table_carries_each_pairs_noise():
    """``pair_summary`` writes ``noise_log_sd`` (the pair's target device's noise for that precision) and
    ``pair_records`` hands it back as the record's ``noise``; a table without the column gives records without it."""
    from carb.model import transfer_prior as tp

    rng = np.random.default_rng(1)
    rec = {"kind": "cpu", "target": "latency_ms", "k": 10, "source": "A", "target_device": "B",
           "err": rng.normal(0, 0.1, 60), "precision": np.repeat(["fp32", "bf16"], 30), "loo": rng.normal(0, 0.1, 10),
           "noise": {"bf16": 0.12, "default": 0.05}}
    table = tp.pair_summary([rec])
    assert dict(zip(table["precision"], table["noise_log_sd"])) == {"bf16": 0.12, "fp32": 0.05}
    got = tp.pair_records(table, "latency_ms", 10)
    assert sorted(r["noise"] for r in got) == [0.05, 0.12]
    assert all("noise" not in r for r in tp.pair_records(table.drop(columns="noise_log_sd"), "latency_ms", 10))


@pytest.mark.parametrize("argv, flag", [(["--parts-in", "x.pkl", "--rules", "equal,median"], "--rules"),
                                        (["--parts-in", "x.pkl", "--ks", "10,a"], "--ks"),
                                        (["--parts-in", "/nonexistent/parts.pkl"], "--parts-in")])
def test_study_bad_input_is_one_line_and_exit_2(argv, flag, capsys):
    """scripts.studies.transfer_robust: a bad value is one line naming the flag and what is allowed, exit 2,
    before anything is read."""
    from scripts.studies.transfer_robust import main

    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(flag) and "allowed" in err[0]
