"""Split-conformal intervals (carb.model.intervals) on synthetic rows with known log-normal noise."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.data.split import split_dataset
from carb.errors import ConfigError
from carb.model.intervals import calibrate, conformal_bounds, coverage_report, interval, with_telemetry

SIGMA = 0.2   # log-normal noise of the measurements around the model's prediction


class NoisyTruthModel:
    """Predicts ``flops / 1e9 * sm / 50`` (ms); records the telemetry it was given."""

    targets_ = ["latency_ms"]
    telemetry_medians_ = {"all": {"avg_sm_util": 50.0, "avg_mem_util": 40.0}, "small": {"avg_sm_util": 25.0}}

    def predict(self, X: pd.DataFrame) -> pd.DataFrame:
        self.seen = X
        return pd.DataFrame({"pred_latency_ms": X["flops"] / 1e9 * X["avg_sm_util"] / 50.0}, index=X.index)


def rows(n: int, seed: int) -> pd.DataFrame:
    """n candidate rows with measured telemetry different from the medians, and latency whose
    log-ratio to the screening-mode prediction is N(0, SIGMA)."""
    rng = np.random.default_rng(seed)
    b = rng.choice([1, 2, 8, 16, 64], n)
    df = pd.DataFrame({"batch_size": b, "flops": rng.uniform(1e8, 1e10, n) * b,
                       "total_activation_MB": rng.uniform(1, 100, n),
                       "avg_sm_util": rng.uniform(10, 90, n), "avg_mem_util": rng.uniform(10, 90, n)})
    sm_med = np.where(b <= 4, 25.0, 50.0)
    df["latency_ms"] = df["flops"] / 1e9 * sm_med / 50.0 * np.exp(rng.normal(0, SIGMA, n))
    return df


def test_coverage_is_nominal_on_held_out_rows():
    model = NoisyTruthModel()
    cal = calibrate(model, rows(600, 0), coverage=0.9)
    # calibrated in screening mode: telemetry replaced by the batch-tier medians
    assert set(model.seen["avg_sm_util"]) == {25.0, 50.0}
    assert cal["latency_ms"]["n"] == 600
    assert cal["latency_ms"]["upper"] == pytest.approx(1.645 * SIGMA, rel=0.15)
    rep = coverage_report(cal, model, rows(5000, 1))
    assert abs(rep["latency_ms"]["coverage"] - 0.9) < 0.03
    assert rep["latency_ms"]["mean_rel_width"] == pytest.approx(np.exp(0.329) - np.exp(-0.329), rel=0.15)


def test_intervals_widen_with_coverage():
    model = NoisyTruthModel()
    cal = calibrate(model, rows(400, 2), coverage=0.9)
    pred = model.predict(with_telemetry(rows(50, 3), model.telemetry_medians_))
    widths = []
    for c in (0.5, 0.8, 0.9, 0.95):
        iv = interval(cal, pred, c)
        assert (iv["lo_latency_ms"] <= pred["pred_latency_ms"]).all()
        assert (iv["hi_latency_ms"] >= pred["pred_latency_ms"]).all()
        widths.append(float((iv["hi_latency_ms"] - iv["lo_latency_ms"]).sum()))
    assert widths == sorted(widths) and widths[0] < widths[-1]
    covs = [coverage_report(cal, model, rows(2000, 4), coverage=c)["latency_ms"]["coverage"] for c in (0.5, 0.9)]
    assert covs[0] < covs[1]


def test_conformal_bounds_small_n_and_bad_coverage():
    lo, hi = conformal_bounds([0.1, -0.1, 0.0], 0.9)     # 3 rows cannot give 90 %: unbounded
    assert lo == -np.inf and hi == np.inf
    lo, hi = conformal_bounds(np.linspace(-1, 1, 199), 0.9)
    assert lo == pytest.approx(-1 + 9 * 2 / 198) and hi == pytest.approx(-1 + 189 * 2 / 198)   # 10th, 190th
    with pytest.raises(ConfigError, match="coverage"):
        calibrate(NoisyTruthModel(), rows(20, 0), coverage=1.5)


def test_four_part_split_keeps_a_calibration_part_and_three_parts_are_unchanged():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic import synthetic_dataset

    df = synthetic_dataset(200, seed=1)
    three = split_dataset(df, seed=0)
    four = split_dataset(df, seed=0, fractions=(0.6, 0.15, 0.1, 0.15))
    assert len(three.cal) == 0 and len(three.frames(df)) == 3
    parts = [four.train, four.val, four.cal, four.test]
    assert sum(len(p) for p in parts) == 200 and len(np.unique(np.concatenate(parts))) == 200
    assert 10 <= len(four.cal) <= 30
    train, val, cal, test = four.frames4(df)
    assert len(cal) == len(four.cal) and len(four.frames(df)) == 3


def test_calibration_and_test_rows_are_exchangeable_across_strata_sizes():
    """Conformal coverage needs calibration and test rows drawn alike: a row of a small stratum must be
    as likely to calibrate as to test (cut per stratum, rounding gave small strata no calibration row)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic import synthetic_dataset

    from carb.data.tiers import strata_key

    df = synthetic_dataset(300, seed=2)
    size = pd.Series(strata_key(df)).map(pd.Series(strata_key(df)).value_counts()).to_numpy()
    small = (size >= 4) & (size <= 5)
    assert small.sum() >= 8
    in_cal = np.zeros(len(df))
    held = np.zeros(len(df))
    for seed in range(60):
        sp = split_dataset(df, seed=seed, fractions=(0.6, 0.15, 0.1, 0.15))
        in_cal[sp.cal] += 1
        held[sp.cal] += 1
        held[sp.test] += 1
    share = in_cal[small].sum() / held[small].sum()          # 0.4 expected: cal / (cal + test) = 0.1 / 0.25
    assert 0.28 <= share <= 0.52, share
    assert abs(in_cal[~small].sum() / held[~small].sum() - 0.4) < 0.06


def test_outside_rows_get_the_union_with_the_outside_calibration():
    from carb.model.intervals import outside_calibration

    rng = np.random.default_rng(0)
    inside = rng.normal(0, 0.02, 200)          # in-domain errors: +-2 %
    far = rng.normal(0.1, 0.2, 200)            # extrapolation errors: biased and wide
    cal = {"coverage": 0.9, "latency_ms": {**outside_calibration({"latency_ms": inside}, 0.9)["latency_ms"]}}
    cal["latency_ms"]["outside"] = outside_calibration({"latency_ms": far}, 0.9)["latency_ms"]
    pred = pd.DataFrame({"pred_latency_ms": np.full(4, 10.0)})
    mask = np.array([False, True, False, True])
    iv = interval(cal, pred, outside=mask)
    width = (iv["hi_latency_ms"] - iv["lo_latency_ms"]).to_numpy()
    assert np.allclose(iv.loc[~mask, "lo_latency_ms"], interval(cal, pred)["lo_latency_ms"][~mask])  # inside: as before
    assert (width[mask] > 5 * width[~mask]).all()
    lo_o, hi_o = conformal_bounds(far, 0.9)
    assert iv.loc[1, "hi_latency_ms"] == pytest.approx(10 * np.exp(max(hi_o, cal["latency_ms"]["upper"])))
    # held-out extrapolation errors from the same law are covered at about the nominal rate
    test = rng.normal(0.1, 0.2, 2000)
    lo, hi = iv.loc[1, ["lo_latency_ms", "hi_latency_ms"]] / 10
    assert 0.86 <= np.mean((np.exp(test) >= lo) & (np.exp(test) <= hi)) <= 0.95


def test_outside_calibration_takes_the_widest_direction_not_the_pool():
    from carb.model.intervals import outside_calibration

    rng = np.random.default_rng(1)
    mild = {"batch": rng.normal(0, 0.05, 300), "input": rng.normal(0, 0.05, 300)}
    severe = rng.normal(0.2, 0.2, 100)            # one direction errs more (and is biased)
    cal = outside_calibration({"energy_J": {**mild, "depth": severe}}, 0.9)["energy_J"]
    lo_s, hi_s = conformal_bounds(severe, 0.9)
    assert cal["upper"] == pytest.approx(hi_s) and set(cal["by_split"]) == {"batch", "input", "depth"}
    pooled = outside_calibration({"energy_J": np.concatenate([*mild.values(), severe])}, 0.9)["energy_J"]
    assert pooled["upper"] < cal["upper"]           # the pool lets mild directions dilute the severe one
    test = rng.normal(0.2, 0.2, 4000)               # new rows extrapolating in the severe direction
    inside = lambda c: np.mean((test >= c["lower"]) & (test <= c["upper"]))  # noqa: E731
    assert inside(cal) >= 0.86 and inside(pooled) < 0.8
    # any coverage can be asked later; a split too small for it is skipped, not made infinite
    iv = interval({"coverage": 0.9, "energy_J": {"lower": -0.01, "upper": 0.01, "coverage": 0.9, "outside": cal}},
                  pd.DataFrame({"pred_energy_J": [1.0]}), coverage=0.5, outside=np.array([True]))
    assert iv.loc[0, "hi_energy_J"] == pytest.approx(np.exp(max(conformal_bounds(v, 0.5)[1] for v in
                                                               [*mild.values(), severe])))
    tiny = outside_calibration({"energy_J": {"batch": mild["batch"], "few": [5.0, -5.0]}}, 0.9)["energy_J"]
    assert np.isfinite(tiny["upper"]) and tiny["upper"] < 1
    # one extrapolation direction only: leave-one-split-out leaves nothing, and nothing is calibrated
    assert outside_calibration({"energy_J": {}}, 0.9) == {}
    assert outside_calibration({"energy_J": {"batch": [np.nan]}}, 0.9) == {}


def test_extrapolation_coverage_uses_the_other_splits_per_direction():
    from carb.analysis.extrapolation import evaluate_splits, range_splits
    from carb.model.cascade import CarbCascade

    from tests.test_physics import FAST, KNOB_FEATURES, physics_rows

    rows = physics_rows(400, seed=1)
    splits = range_splits(rows)
    tab = evaluate_splits(lambda: CarbCascade(features=KNOB_FEATURES, **FAST), rows, splits,
                          targets=["peak_memory_MB", "latency_ms"], interval_coverage=0.9)
    by_split = tab.attrs["outside_log_ratios"]
    n_test = {sp.name: int(sp.test.sum()) for sp in splits}
    assert {s: len(v) for s, v in by_split["latency_ms"].items()} == {s: n_test[s] for s in tab["split"].unique()}
    assert tab["interval_coverage"].between(0, 1).all() and (tab["interval_width"] > 0).all()
    # physics rows extrapolate well, and the outside calibration keeps coverage near or above nominal
    assert tab["interval_coverage"].mean() >= 0.8, tab[["split", "target", "interval_coverage"]]


def test_cross_dataset_coverage_calibrates_each_dataset_on_the_others_only():
    from carb.analysis.extrapolation import cross_dataset_coverage

    rng = np.random.default_rng(3)

    def rows(n, sd):
        pred = rng.uniform(1, 100, n)
        return pd.DataFrame({"latency_ms": pred * np.exp(rng.normal(0, sd, n)), "pred_latency_ms": pred})

    data = {"a": rows(400, 0.1), "b": rows(400, 0.1), "c": rows(400, 0.1), "wild": rows(400, 1.0)}
    tab = cross_dataset_coverage(data, "latency_ms", 0.9).set_index("dataset")
    assert tab.loc["a", "n_cal"] == 1200 and tab.loc["wild", "n"] == 400
    # the wild dataset's own errors do not widen its interval: calibrated on a, b, c it covers few rows
    assert tab.loc["wild", "coverage"] < 0.5 and tab.loc["wild", "width"] < tab.loc["a", "width"]
    # a, b and c are calibrated partly on the wild errors: wider and over-covered, never under
    assert (tab.loc[["a", "b", "c"], "coverage"] >= 0.9).all()
    calm = cross_dataset_coverage({k: data[k] for k in "abc"}, "latency_ms", 0.9)
    assert calm["coverage"].between(0.85, 0.96).all() and (calm["width"] < tab.loc["a", "width"]).all()
    # calibrating on other rows (e.g. every split of the other devices) scores the given rows only
    extra = {k: rows(100, 0.5) for k in "abc"}
    wide = cross_dataset_coverage({k: data[k] for k in "abc"}, "latency_ms", 0.9, cal_rows=extra)
    assert (wide["n"] == 400).all() and (wide["n_cal"] == 200).all() and (wide["width"] > calm["width"]).all()


def test_a_single_extrapolation_split_gets_its_own_calibration_only():
    """Data with one extrapolation direction: no other split calibrates the outside rows, and the
    evaluation still reports the split's coverage (it crashed on the empty per-direction mapping)."""
    from carb.analysis.extrapolation import evaluate_splits, range_splits
    from carb.model.cascade import CarbCascade

    from tests.test_physics import FAST, KNOB_FEATURES, physics_rows

    rows = physics_rows(300, seed=2)
    one = [s for s in range_splits(rows) if s.name == "batch"]
    tab = evaluate_splits(lambda: CarbCascade(features=KNOB_FEATURES, **FAST), rows, one,
                          targets=["latency_ms"], interval_coverage=0.9)
    assert list(tab["split"]) == ["batch"] and 0 < tab.loc[0, "interval_coverage"] <= 1
    assert list(tab.attrs["outside_log_ratios"]["latency_ms"]) == ["batch"]


class _SharePrior:
    """A stand-in overlapped latency prior: the device work's share is the rows' ``share`` column."""

    def device_share(self, X: pd.DataFrame) -> np.ndarray:
        return X["share"].to_numpy(float)


class RegimeModel(NoisyTruthModel):
    """NoisyTruthModel with a latency stage whose prior says which rows are launch-bound."""

    def __init__(self) -> None:
        self.stages_ = {"latency_ms": type("Stage", (), {"prior": _SharePrior()})()}


def regime_rows(n: int, seed: int, device_share: float = 0.3) -> pd.DataFrame:
    """Rows whose launch-bound part (share < 0.5) scatters with sigma 0.3 and device-bound part with 0.03."""
    df = rows(n, seed)
    rng = np.random.default_rng(seed + 100)
    df["share"] = np.where(rng.random(n) < device_share, 0.9, 0.2)
    sigma = np.where(df["share"] >= 0.5, 0.03, 0.3)
    sm_med = np.where(df["batch_size"] <= 4, 25.0, 50.0)
    df["latency_ms"] = df["flops"] / 1e9 * sm_med / 50.0 * np.exp(rng.normal(0, sigma))
    return df


def test_gpu_regimes_get_their_own_intervals_with_nominal_coverage_each():
    """Mondrian calibration by regime: launch-bound rows keep wide intervals, device-bound rows get
    narrow ones, and each regime is covered at about the nominal rate on fresh rows; without the
    regimes (or without a labeller) the pooled interval applies to all."""
    from carb.model.intervals import interval_groups

    model = RegimeModel()
    cal = calibrate(model, regime_rows(600, 5), coverage=0.9)
    assert set(cal["latency_ms"]["groups"]) == {"launch", "device"} and "group_rule" in cal["latency_ms"]
    test = regime_rows(3000, 6)
    pred = model.predict(with_telemetry(test, model.telemetry_medians_))
    g = interval_groups(model, test)
    iv = interval(cal, pred, groups=g)
    y, lo, hi = test["latency_ms"].to_numpy(), iv["lo_latency_ms"].to_numpy(), iv["hi_latency_ms"].to_numpy()
    inside, width = (lo <= y) & (y <= hi), (hi - lo) / pred["pred_latency_ms"].to_numpy()
    for k in ("launch", "device"):
        assert 0.86 <= inside[g == k].mean() <= 0.94, (k, inside[g == k].mean())
    assert width[g == "device"].mean() < 0.25 * width[g == "launch"].mean()
    pooled = interval(cal, pred)
    assert np.ptp((pooled["hi_latency_ms"] / pred["pred_latency_ms"]).to_numpy()) < 1e-9   # one ratio for all
    assert inside[g == "device"].mean() < ((pooled["lo_latency_ms"] <= y) & (y <= pooled["hi_latency_ms"]))[g == "device"].mean() + 1e-9
    assert interval_groups(NoisyTruthModel(), test) is None


def test_a_regime_too_small_to_calibrate_falls_back_to_the_pooled_interval():
    """A calibration split with fewer device-bound rows than 90 % needs (19) keeps no regimes."""
    model = RegimeModel()
    few = regime_rows(300, 7, device_share=0.03)
    assert (few["share"] >= 0.5).sum() < 19
    cal = calibrate(model, few, coverage=0.9)
    assert "groups" not in cal["latency_ms"]


def test_outside_rows_take_their_own_precisions_bounds():
    """Mondrian by precision outside the domain: a precision that errs more when extrapolating (fp16 on a
    CPU's fallback path) gets wider bounds than the pool, one that errs less narrower, each covered at
    about the nominal rate; a precision with too few rows, or rows without a precision, keep the pool."""
    from carb.commands.train import interval_summary
    from carb.model.intervals import outside_calibration

    rng = np.random.default_rng(2)
    split_rows = {}
    split_prec = {}
    for split in ("batch", "depth"):
        r = np.concatenate([rng.normal(0, 0.05, 300), rng.normal(0.2, 0.25, 100), rng.normal(0, 0.05, 5)])
        split_rows[split] = r
        split_prec[split] = ["bf16"] * 300 + ["fp16"] * 100 + ["fp32"] * 5
    cal = outside_calibration({"latency_ms": split_rows}, 0.9, {"latency_ms": split_prec})["latency_ms"]
    assert set(cal["by_precision"]) == {"bf16", "fp16"}          # fp32: 5 rows per split, too few for 90 %
    full = {"coverage": 0.9, "latency_ms": {"lower": -0.01, "upper": 0.01, "coverage": 0.9, "outside": cal}}
    pred = pd.DataFrame({"pred_latency_ms": np.ones(5)})
    prec = np.array(["bf16", "fp16", "fp32", "fp16", "bf16"])
    out = np.array([True, True, True, False, False])
    iv = interval(full, pred, outside=out, precision=prec)
    pooled = interval(full, pred, outside=out)
    hi, hi_pool = iv["hi_latency_ms"].to_numpy(), pooled["hi_latency_ms"].to_numpy()
    assert hi[1] > hi_pool[1] and hi[0] < hi_pool[0] and hi[2] == pytest.approx(hi_pool[2])
    assert hi[3] == pytest.approx(np.exp(0.01)) and hi[4] == pytest.approx(np.exp(0.01))   # inside: unchanged
    for p, law in (("bf16", (0, 0.05)), ("fp16", (0.2, 0.25))):
        test = np.exp(rng.normal(*law, 4000))
        row = int(np.flatnonzero(prec == p)[0])
        lo, h = iv.loc[row, "lo_latency_ms"], iv.loc[row, "hi_latency_ms"]
        assert 0.85 <= np.mean((test >= lo) & (test <= h)) <= 0.96, p
    logged = interval_summary(full["latency_ms"])["outside"]["by_precision"]
    assert set(logged) == {"bf16", "fp16"} and logged["fp16"]["n"] == 200
    assert logged["fp16"]["upper"] > logged["bf16"]["upper"]


def test_new_architectures_get_intervals_calibrated_on_held_out_architectures():
    """Rows of architectures the model never saw err more than the calibration rows (the same networks at
    other batches): a per-architecture factor (20 %) the trees learn for seen networks only. The grouped
    calibration covers the unseen ones near nominal where the random-split calibration does not; rows of a
    seen architecture keep their interval."""
    from carb.model.cascade import CarbCascade
    from carb.model.domain import architecture_keys
    from carb.model.intervals import architecture_calibration, calibrate, new_architecture_mask, screening_predict

    from tests.test_physics import FAST, KNOB_FEATURES, physics_rows

    rng = np.random.default_rng(5)
    rows = physics_rows(700, seed=3)
    keys = np.asarray(architecture_keys(rows))
    uniq = sorted(set(keys))
    factor = dict(zip(uniq, rng.lognormal(0, 0.2, len(uniq))))
    rows["latency_ms"] = rows["latency_ms"] * np.array([factor[k] for k in keys])
    new = np.isin(keys, rng.choice(uniq, len(uniq) // 4, replace=False))
    seen = rows[~new].reset_index(drop=True)
    pick = rng.random(len(seen)) < 0.2
    train, cal_rows, unseen = seen[~pick].reset_index(drop=True), seen[pick].reset_index(drop=True), rows[new].reset_index(drop=True)
    make = lambda: CarbCascade(features=KNOB_FEATURES, **FAST)  # noqa: E731
    model = make().fit(train, train[["latency_ms"]])
    cal = calibrate(model, cal_rows, cal_rows[["latency_ms"]], 0.9)
    arch = architecture_calibration(make, train, train[["latency_ms"]], 0.9, folds=4)
    assert arch["latency_ms"]["folds"] == 4 and arch["latency_ms"]["architectures"] == len(set(architecture_keys(train)))
    with_arch = {**cal, "latency_ms": {**cal["latency_ms"], "new_arch": arch["latency_ms"]}}
    mask = new_architecture_mask(model, unseen)
    assert mask.all() and not new_architecture_mask(model, cal_rows).any()
    pred = screening_predict(model, unseen)
    y = unseen["latency_ms"].to_numpy()

    def coverage(c: dict) -> float:
        iv = interval(c, pred, new_arch=mask)
        return float(np.mean((iv["lo_latency_ms"] <= y) & (y <= iv["hi_latency_ms"])))

    assert coverage(cal) < 0.8 <= coverage(with_arch), (coverage(cal), coverage(with_arch))
    seen_pred = screening_predict(model, cal_rows)
    same = interval(with_arch, seen_pred, new_arch=new_architecture_mask(model, cal_rows))
    assert np.allclose(same["hi_latency_ms"], interval(cal, seen_pred)["hi_latency_ms"])


class FittableNoisyTruth(NoisyTruthModel):
    """:class:`NoisyTruthModel` with the fit a refit calls; ``fail_below`` rows raise as a small fit does."""

    fail_below = 0

    def fit(self, X, y):
        from carb.errors import DatasetError

        if len(X) < self.fail_below:
            raise DatasetError(f"too few rows to fit the cascade: {len(X)} rows, need at least {self.fail_below}")
        return self


def test_cross_conformal_bounds_small_data_that_split_conformal_cannot():
    """30 rows: a 10 % calibration share (3 rows) gives [0, inf], flagged with the reason; out-of-fold
    log-ratios of all 30 rows give finite bounds near the noise's, covering fresh rows near nominal."""
    from carb.model.intervals import cross_calibrate

    model, data = FittableNoisyTruth(), rows(30, 5)
    split = calibrate(model, data.iloc[:3], coverage=0.9)
    pred = model.predict(with_telemetry(rows(4, 6), model.telemetry_medians_))
    iv = interval(split, pred)
    assert (iv["hi_latency_ms"] == np.inf).all() and iv["interval_unbounded_latency_ms"].all()
    assert iv["interval_reason_latency_ms"].iloc[0] == "calibrated on 3 log-ratios; a 90 % interval needs at least 19"
    cross = cross_calibrate(FittableNoisyTruth, data, data[["latency_ms"]], 0.9, folds=5)
    assert cross["latency_ms"]["n"] == 30 and cross["folds"] == 5 and "cross-conformal" in cross["method"]
    lo, hi = cross["latency_ms"]["lower"], cross["latency_ms"]["upper"]
    assert -3 * SIGMA < lo < 0 < hi < 3 * SIGMA
    iv = interval(cross, pred)
    assert not iv["interval_unbounded_latency_ms"].any() and (iv["interval_reason_latency_ms"] == "").all()
    covs = [coverage_report(cross_calibrate(FittableNoisyTruth, rows(30, s), None, 0.9), model, rows(2000, 50 + s))
            ["latency_ms"]["coverage"] for s in range(8)]
    assert 0.8 <= float(np.mean(covs)) <= 0.97, covs


def test_folds_that_cannot_be_refitted_are_skipped_with_one_line_each():
    from carb.model.intervals import architecture_calibration, cross_calibrate

    class Strict(FittableNoisyTruth):
        fail_below = 25

    lines: list[str] = []
    data = rows(30, 7)
    cross = cross_calibrate(Strict, data, data[["latency_ms"]], 0.9, folds=3, note=lines.append)
    assert len(lines) == 3 and all("skipped: too few rows to fit the cascade: 20 rows" in s for s in lines)
    assert "latency_ms" not in cross
    lines.clear()
    cross_calibrate(FittableNoisyTruth, data.iloc[:12], data[["latency_ms"]].iloc[:12], 0.9, folds=4, note=lines.append)
    assert lines == [f"cross-conformal intervals: fold {i}/4 skipped: 9 training rows, need at least 10"
                     for i in range(1, 5)]
    lines.clear()
    assert architecture_calibration(FittableNoisyTruth, data.assign(block="basic", depth=18, width_mult=1.0),
                                    data[["latency_ms"]], note=lines.append) == {}
    assert lines == ["new-architecture intervals skipped: 1 architecture(s), need at least 3"]


def test_an_outside_row_without_a_finite_extrapolation_bound_is_flagged():
    cal = {"coverage": 0.9, "latency_ms": {"lower": -0.1, "upper": 0.1, "n": 50, "coverage": 0.9,
                                           "log_ratios": list(np.linspace(-0.1, 0.1, 50)),
                                           "outside": {"n": 5, "coverage": 0.9, "lower": -np.inf, "upper": np.inf,
                                                       "log_ratios": [0.0, 0.1, 0.2, 0.3, 0.4]}}}
    pred = pd.DataFrame({"pred_latency_ms": [1.0, 2.0]})
    iv = interval(cal, pred, outside=np.array([False, True]))
    assert list(iv["interval_unbounded_latency_ms"]) == [False, True]
    assert iv["interval_reason_latency_ms"][1].startswith("outside the training domain")
    assert np.isfinite(iv["hi_latency_ms"][0]) and iv["hi_latency_ms"][1] == np.inf
