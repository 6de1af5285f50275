"""Issue 44 item 5: run-to-run repeatability in the collector, with a replayed meter (no real timing): later
passes in another order give each row the mean latency, the pass count and the relative spread; one pass,
a contended later window and a stopped run say why the spread is missing; a restart measures the pending
passes; old files stay valid; the floor per precision and the data card's table follow from the spreads."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.commands.collect import _static_table
from carb.data.io import DatasetAppender, load_dataset
from carb.data.repeatability import relative_spread, repeatability_floor, repeatability_table, spread_log_ratio
from carb.data.schema import REPEATABILITY, empty_frame, validate_dataset
from carb.design.space import load_space
from carb.errors import ConfigError
from carb.measure.base import MEASURED_COLUMNS, MeasureSettings, parse_missing_reason
from carb.measure.collector import LoopStats, measure_configs
from carb.measure.repeat import RepeatPlan, pass_order, pending_repeats

IDENTITY = {"device_name": "Replayed CPU", "device_kind": "cpu", "driver": "none", "torch_version": "none",
            "protocol_id": "p0"}


class ReplayMeter:
    """Replays a latency per (configuration, window): ``base[config] x factors[window index]``; records the
    order of the calls; ``contended`` names (config, window) pairs the guard rejects."""

    settings = None

    def __init__(self, factors=(1.0, 1.1, 0.95), contended=(), fail_on_window=None):
        self.calls: list[str] = []
        self.factors, self.contended, self.fail_on_window = factors, set(contended), fail_on_window
        self.last_phases: dict[str, float] = {}

    def base(self, cid: str) -> float:
        return 5.0 + int(cid[:4], 16) % 50

    def measure(self, model, arch):
        cid = arch.config_id
        k = self.calls.count(cid)
        self.calls.append(cid)
        if self.fail_on_window is not None and k == self.fail_on_window:
            raise KeyboardInterrupt   # a kill in the middle of a later pass
        out = {c: float("nan") for c in MEASURED_COLUMNS}
        out.update(latency_ms=self.base(cid) * self.factors[k], peak_memory_MB=50.0, protocol_s=0.01, n_runs=3.0,
                   n_warmup=1.0, window_s=0.5, n_windows=1.0, threads=1.0, missing_reason="energy_J: no RAPL")
        if (cid, k) in self.contended:
            out.update(status="contended", error="contention guard: cpu_share 0.50 < 0.9 in all 3 windows")
        return out

    def release(self) -> None:
        pass


@pytest.fixture(scope="module")
def configs():
    return load_space("smoke")[:8]


def collect(tmp_path: Path, configs, meter, plan, existing=None, pending=()) -> tuple[pd.DataFrame, LoopStats]:
    out = tmp_path / "rows.parquet"
    app = DatasetAppender(out, existing if existing is not None else empty_frame())
    stats = measure_configs(configs, meter, IDENTITY, app.append, lambda a: None, _static_table, LoopStats(),
                            repeat=plan, pending=pending)
    return load_dataset(out), stats


def test_two_passes_give_the_mean_latency_and_the_spread_in_another_order(tmp_path, configs):
    meter = ReplayMeter()
    df, stats = collect(tmp_path, configs, meter, RepeatPlan(2, "rotated"))
    ids = [c.config_id for c in configs]
    first, second = meter.calls[:len(ids)], meter.calls[len(ids):]
    assert first == ids and sorted(second) == sorted(ids) and second != first
    assert second == [ids[i] for i in pass_order(len(ids), 1, 2, "rotated")]
    df = df.set_index("config_id").loc[ids]
    base = np.array([meter.base(c) for c in ids])
    np.testing.assert_allclose(df["latency_ms"], base * 1.05)                      # mean of 1.0x and 1.1x
    np.testing.assert_allclose(df["latency_repeat_spread"], 0.1 / 1.05)            # (max - min) / mean
    assert (df["latency_passes"] == 2).all() and (df["status"] == "ok").all()
    reasons = df["missing_reason"].map(parse_missing_reason)
    assert all("latency_repeat_spread" not in r and r.get("energy_J") == "no RAPL" for r in reasons)
    assert stats.repeat_windows == len(ids) and stats.repeat_failed == 0 and len(stats.spreads) == len(ids)


def test_one_pass_leaves_the_spread_nan_with_its_reason(tmp_path, configs):
    meter = ReplayMeter()
    df, stats = collect(tmp_path, configs, meter, RepeatPlan(1))
    assert len(meter.calls) == len(configs) and stats.repeat_windows == 0
    assert df["latency_repeat_spread"].isna().all() and (df["latency_passes"] == 1).all()
    why = df["missing_reason"].map(parse_missing_reason)
    assert all("passes=1" in r["latency_repeat_spread"] and r["energy_J"] == "no RAPL" for r in why)


def test_a_contended_later_window_is_not_used_and_says_so(tmp_path, configs):
    bad = configs[2].config_id
    meter = ReplayMeter(contended={(bad, 1)})
    df, stats = collect(tmp_path, configs, meter, RepeatPlan(2))
    row = df.set_index("config_id").loc[bad]
    assert row["latency_passes"] == 1 and math.isnan(row["latency_repeat_spread"])
    assert row["latency_ms"] == pytest.approx(meter.base(bad))                     # the first window alone
    assert "contended" in parse_missing_reason(row["missing_reason"])["latency_repeat_spread"]
    others = df[df["config_id"] != bad]
    assert (others["latency_passes"] == 2).all() and stats.repeat_failed == 1


def test_three_passes_and_every_order_are_permutations():
    for order in ("rotated", "reversed", "shuffled"):
        for n in (1, 2, 7, 40):
            for k in range(3):
                assert sorted(pass_order(n, k, 3, order)) == list(range(n))
    n = 40                                     # rotated, two passes: each row's windows >= n/2 positions apart
    second = pass_order(n, 1, 2, "rotated")
    gap = [n + second.index(i) - i for i in range(n)]
    assert min(gap) == n // 2
    assert pass_order(n, 1, 2, "reversed") == list(range(n))[::-1] and pass_order(n, 1, 2, "shuffled") != list(range(n))
    with pytest.raises(ValueError, match="allowed"):
        pass_order(3, 1, 2, "sideways")


def test_a_stopped_run_leaves_pending_rows_that_a_restart_completes(tmp_path, configs):
    meter = ReplayMeter(fail_on_window=1)
    with pytest.raises(KeyboardInterrupt):
        collect(tmp_path, configs, meter, RepeatPlan(2))
    first = load_dataset(tmp_path / "rows.parquet")
    assert len(first) == len(configs) and (first["latency_passes"] == 1).all()
    assert first["missing_reason"].str.contains("repeat pass pending").all()
    pending = pending_repeats(first, configs, "p0", 2)
    assert sorted(a.config_id for a, _ in pending) == sorted(c.config_id for c in configs)
    assert pending_repeats(first, configs, "another-protocol", 2) == [] and pending_repeats(first, configs, "p0", 1) == []
    meter2 = ReplayMeter(factors=(1.2,))          # the restart's window: 1.2x the first pass's
    meter2.calls = []
    df, stats = collect(tmp_path, [], meter2, RepeatPlan(2), existing=first, pending=pending)
    assert len(meter2.calls) == len(configs) and (df["latency_passes"] == 2).all()
    np.testing.assert_allclose(df["latency_repeat_spread"], 0.2 / 1.1)
    assert not df["missing_reason"].str.contains("pending").any()


def test_old_files_without_the_columns_stay_valid_and_have_no_floor(configs):
    from synthetic import grid_dataset

    old = grid_dataset("GPU A").drop(columns=list(REPEATABILITY))
    df = validate_dataset(old)
    assert set(REPEATABILITY) <= set(df.columns) and df["latency_repeat_spread"].isna().all()
    assert repeatability_floor(df) == {}
    t = repeatability_table(df)
    assert (t["n_rows"] == 0).all() and t["status"].str.startswith("not measured").all()


def test_floor_per_precision_from_the_spreads():
    from synthetic import grid_dataset

    df = grid_dataset("GPU A").copy()
    rng = np.random.default_rng(0)
    scale = {"fp32": 0.02, "fp16": 0.2, "bf16": 0.08}
    df["latency_repeat_spread"] = [abs(rng.normal(0, scale[p])) for p in df["precision"]]
    df["latency_passes"] = 2.0
    few = df.index[df["precision"] == df["precision"].iloc[0]][3:]
    df.loc[few, "latency_repeat_spread"] = np.nan                  # 3 rows with a spread: below MIN_ROWS
    floor = repeatability_floor(df, coverage=0.9)
    present = [p for p in scale if p in set(df["precision"])]
    assert set(floor) == set(present) - {df["precision"].iloc[0]}
    for p in floor:
        s = df.loc[df["precision"] == p, "latency_repeat_spread"].dropna()
        assert floor[p] == pytest.approx(np.quantile(spread_log_ratio(s), 0.9) / math.sqrt(2))
    ordered = sorted(floor, key=floor.get)
    assert ordered == sorted(floor, key=lambda p: scale[p])        # the noisier precision has the wider floor
    t = repeatability_table(df).set_index("precision")
    assert t.loc[df["precision"].iloc[0], "status"].startswith("too few rows")
    with pytest.raises(ValueError, match="coverage"):
        repeatability_floor(df, coverage=1.0)


def test_relative_spread_and_its_log_ratio():
    assert relative_spread([10.0, 11.0]) == pytest.approx(1 / 10.5)
    assert relative_spread([10.0, 12.0, 11.0]) == pytest.approx(2 / 11)
    assert math.isnan(relative_spread([10.0])) and math.isnan(relative_spread([10.0, float("nan")]))
    assert spread_log_ratio(np.array([relative_spread([10.0, 11.0])]))[0] == pytest.approx(math.log(1.1))


def test_repeat_settings_schema_and_protocol():
    from carb.commands.checks import check_config
    from carb.commands.cli import compose
    from carb.measure.fingerprint import protocol_id

    cfg = compose("collect", ["measure=cpu", "device=cpu"])
    s = MeasureSettings.from_mapping(dict(cfg.measure))
    assert (s.repeat_passes, s.repeat_order) == (2, "rotated") and RepeatPlan.from_settings(s) == RepeatPlan(2)
    with pytest.raises(ConfigError, match="repeat.order"):
        MeasureSettings.from_mapping({"repeat": {"order": "sideways"}})
    with pytest.raises(ConfigError, match="repeat.passes"):
        MeasureSettings.from_mapping({"repeat": {"passes": 0}})
    with pytest.raises(ConfigError, match=r"repeat\.pases"):
        MeasureSettings.from_mapping({"repeat": {"pases": 2}})
    with pytest.raises(ConfigError, match="measure.repeat.order"):
        check_config("collect", compose("collect", ["measure=cpu", "measure.repeat.order=sideways"]))

    class M:   # one pass: the protocol id of the files written before the repeat settings existed
        settings = MeasureSettings(repeat_passes=1)

        def identity(self):
            return {"device_name": "x", "device_kind": "cpu", "device_id": "d"}

    from carb.measure.collector import checked_identity

    old = {k: v for k, v in MeasureSettings().to_dict().items() if not k.startswith("repeat_")}
    assert checked_identity(M(), empty_frame(), Path("x.parquet"))["protocol_id"] == protocol_id(old, "d")
    M.settings = MeasureSettings(repeat_passes=2)
    assert checked_identity(M(), empty_frame(), Path("x.parquet"))["protocol_id"] != protocol_id(old, "d")


def test_data_card_reports_the_spread_per_precision():
    from synthetic import grid_dataset

    from carb.analysis.characterize.report import characterize_tables, headline_metrics

    df = grid_dataset("GPU A").copy()
    df["latency_repeat_spread"] = np.where(df["precision"] == "fp32", 0.01, 0.1)
    df["latency_passes"] = 2.0
    tables = characterize_tables(df)
    t = tables["repeatability"].set_index("precision")
    assert t.loc["fp32", "spread_median"] == pytest.approx(0.01) and (t["status"] == "ok").all()
    m = headline_metrics(tables)
    assert m["repeatability.fp32.spread_median"] == pytest.approx(0.01)
    other = [p for p in t.index if p != "fp32"]
    assert other and all(m[f"repeatability.{p}.spread_p90"] == pytest.approx(0.1) for p in other)


def test_the_study_scripts_sample_and_estimate_without_measuring():
    """scripts/studies/repeatability.py draws the same number of rows per precision (seeded) and estimates the
    run from the rows' protocol_s; scripts/studies/probe_complete.py times the probe's own pairs."""
    from synthetic import grid_dataset

    from scripts.studies.probe_complete import estimate_s as probe_estimate
    from scripts.studies.probe_complete import pairs_of
    from scripts.studies.repeatability import estimate_s, stratified_sample

    df = grid_dataset("GPU A").copy()
    df["protocol_s"] = 1.0
    a, b = stratified_sample(df, 12, 0), stratified_sample(df, 12, 0)
    assert a["config_id"].tolist() == b["config_id"].tolist()
    counts = a["precision"].value_counts()
    assert counts.nunique() == 1 and counts.sum() >= 12 and a["config_id"].is_unique
    assert estimate_s(a, 2, 0.5, setup_s=0.0) == pytest.approx(2 * len(a) * 1.5)
    probe = pd.DataFrame([{"device_id": "d", "threads": 1, "precision": p, "cin": 4, "cout": 4, "kernel": k,
                           "stride": 1, "H_in": 8, "batch_size": 1, "time_ms": 0.1, "backend": ""}
                          for p in ("fp32", "bf16") for k in (1, 3)])
    plan = pairs_of(probe)
    assert len(plan) == 2
    # 4x4 channels, 8x8 output, kernel 1 and 3: 1,024 and 9,216 MACs at 1 GMAC/s; one warm call, 2 windows of 0.01 s
    assert probe_estimate(plan, 1.0, 2, 0.01, 1) == pytest.approx(2 * (2 * 0.01) + 2 * (1024 + 9216) / 1e9)
