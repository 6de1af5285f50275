"""The collector's later passes record the repeat pass's peak memory too: ``peak_memory_repeat_spread``, the
relative range of the passes' peak memory (``peak_memory_MB`` stays the first pass's), NaN with a reason where
one pass gave one; :func:`carb.data.repeatability.memory_pairs` reads it as within-run pairs. Replayed
windows made by test code (:class:`ReplayMeter` of tests/test_repeatability.py), no real measuring."""
from __future__ import annotations

import math

import numpy as np
import pytest

from carb.data.repeatability import MEMORY_SPREAD, memory_floor, memory_pairs, spread_log_ratio
from carb.data.schema import REPEATABILITY, validate_dataset
from carb.design.space import load_space
from carb.measure.base import parse_missing_reason
from carb.measure.repeat import RepeatPlan
from test_repeatability import ReplayMeter, collect


class MemoryReplay(ReplayMeter):
    """:class:`ReplayMeter` whose peak memory is ``50 MB x memory[window index]`` (NaN: the window gave none)."""

    def __init__(self, memory=(1.0, 1.02, 0.99), **kw):
        super().__init__(**kw)
        self.memory = memory

    def measure(self, model, arch):
        k = self.calls.count(arch.config_id)
        out = super().measure(model, arch)
        out["peak_memory_MB"] = 50.0 * self.memory[k]
        return out


@pytest.fixture(scope="module")
def configs():
    return load_space("smoke")[:8]


def test_two_passes_keep_the_first_memory_and_its_spread(tmp_path, configs):
    df, _ = collect(tmp_path, configs, MemoryReplay(), RepeatPlan(2))
    assert MEMORY_SPREAD in REPEATABILITY and (df["status"] == "ok").all()
    np.testing.assert_allclose(df["peak_memory_MB"], 50.0)                          # the first pass's
    np.testing.assert_allclose(df[MEMORY_SPREAD], 0.02 / 1.01)                      # (max - min) / mean
    assert all(MEMORY_SPREAD not in parse_missing_reason(r) for r in df["missing_reason"])
    three, _ = collect(tmp_path / "3", configs, MemoryReplay(), RepeatPlan(3))
    np.testing.assert_allclose(three[MEMORY_SPREAD], 0.03 / (3.01 / 3))


@pytest.mark.parametrize("case", ["one pass", "contended", "no memory again", "no memory at all"])
def test_a_row_without_two_peak_memories_has_nan_and_its_reason(tmp_path, configs, case):
    bad = configs[2].config_id
    meter = {"one pass": MemoryReplay(), "contended": MemoryReplay(contended={(bad, 1)}),
             "no memory again": MemoryReplay(memory=(1.0, math.nan)),
             "no memory at all": MemoryReplay(memory=(math.nan, math.nan))}[case]
    df, _ = collect(tmp_path, configs, meter, RepeatPlan(1 if case == "one pass" else 2))
    rows = df if case != "contended" else df[df["config_id"] == bad]
    assert rows[MEMORY_SPREAD].isna().all()
    want = {"one pass": "passes=1", "contended": "not used", "no memory again": "gave no peak memory",
            "no memory at all": "peak_memory_MB not measured"}[case]
    assert all(want in parse_missing_reason(r)[MEMORY_SPREAD] for r in rows["missing_reason"])
    if case == "contended":   # the other rows' two windows give their spread
        assert df.loc[df["config_id"] != bad, MEMORY_SPREAD].notna().all()


def test_memory_pairs_read_the_pass_spread(tmp_path, configs):
    df, _ = collect(tmp_path, configs, MemoryReplay(memory=(1.0, 1.05)), RepeatPlan(2))
    df = df.assign(device_id="dev")
    pairs = memory_pairs(df)
    assert len(pairs) == len(configs) and set(pairs["pair"]) == {"passes"}
    np.testing.assert_allclose(pairs["log_ratio"], np.log(1.05))                    # |log(a / b)| of the two passes
    assert memory_pairs(df, df)["pair"].tolist() == ["passes"] * len(configs)     # one measurement, counted once
    again = df.assign(measured_at="later", peak_memory_MB=df["peak_memory_MB"] * 1.1, **{MEMORY_SPREAD: np.nan})
    both = memory_pairs(df, again)
    assert sorted(both["pair"].value_counts().items()) == [("passes", len(configs)), ("runs", len(configs))]
    np.testing.assert_allclose(both.loc[both["pair"] == "runs", "log_ratio"], np.log(1.1))
    assert memory_floor(pairs)["dev"] == pytest.approx(np.log(1.05) / math.sqrt(2))
    assert float(spread_log_ratio(np.array([0.05 / 1.025]))[0]) == pytest.approx(np.log(1.05))


def test_files_without_the_column_read_as_not_measured():
    from synthetic import grid_dataset

    old = validate_dataset(grid_dataset("GPU A").drop(columns=[MEMORY_SPREAD], errors="ignore"))
    assert old[MEMORY_SPREAD].isna().all() and memory_pairs(old).empty
    runs = memory_pairs(old, old.assign(measured_at="x"))
    assert len(runs) == int((old["status"] == "ok").sum()) and set(runs["pair"]) == {"runs"}
