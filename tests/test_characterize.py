"""Characterization analyses on small synthetic frames with known answers."""
from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from synthetic import frame, grid_dataset

from carb.analysis import characterize as ch
from carb.errors import DatasetError


def _doubling_rows(energy: bool = True) -> list[dict]:
    """Full grid where fp32 doubles energy and latency, and depth 34 triples them vs depth 18."""
    rows = []
    for depth, bs, prec in itertools.product((18, 34), (1, 2, 8), ("fp16", "fp32")):
        base = bs * (3.0 if depth == 34 else 1.0) * (2.0 if prec == "fp32" else 1.0)
        rows.append({"depth": depth, "batch_size": bs, "precision": prec,
                     "energy_J": 10.0 * base if energy else np.nan, "latency_ms": base,
                     "flops": 1e9 * bs * depth, "n_runs": 10})
    return rows


def _row(table: pd.DataFrame, **match) -> pd.Series:
    m = np.ones(len(table), dtype=bool)
    for k, v in match.items():
        m &= (table[k] == v).to_numpy()
    assert m.sum() == 1, (match, m.sum())
    return table[m].iloc[0]


def test_knob_that_doubles_energy_gives_ratio_two():
    ranges = ch.knob_ranges(frame(_doubling_rows()))
    prec = _row(ranges, family="basic", knob="precision", target="energy_J")
    assert prec["status"] == "ok"
    assert prec["ratio"] == pytest.approx(2.0)
    assert prec["argmin"] == "fp16" and prec["argmax"] == "fp32"
    depth = _row(ranges, family="basic", knob="depth", target="latency_ms")
    assert depth["ratio"] == pytest.approx(3.0)
    # range is max - min of the per-value medians: batch sizes 1, 2, 8 -> medians x1, x2, x8
    bs = _row(ranges, family="basic", knob="batch_size", target="energy_J")
    assert bs["ratio"] == pytest.approx(8.0)
    med = ch.knob_medians(frame(_doubling_rows()))
    e1 = _row(med, knob="batch_size", value=1, target="energy_J")["median"]
    assert bs["range"] == pytest.approx(7 * e1)


def test_knob_ranges_missing_target_is_not_measured_not_zero():
    ranges = ch.knob_ranges(frame(_doubling_rows(energy=False)))
    e = ranges[ranges["target"] == "energy_J"]
    assert len(e) > 0 and (e["status"] == ch.NOT_MEASURED).all()
    assert e[["min_median", "max_median", "range", "ratio"]].isna().all().all()
    assert (ranges[ranges["target"] == "peak_memory_MB"]["status"] == ch.NOT_MEASURED).all()
    lat = _row(ranges, family="basic", knob="precision", target="latency_ms")
    assert lat["status"] == "ok" and lat["ratio"] == pytest.approx(2.0)


def test_knob_ranges_single_value_has_no_ratio():
    ranges = ch.knob_ranges(frame(_doubling_rows()))
    w = _row(ranges, family="basic", knob="width_mult", target="energy_J")
    assert w["status"] == "single value" and np.isnan(w["ratio"]) and np.isnan(w["range"])


def test_knob_ranges_are_per_family():
    df = grid_dataset()
    ranges = ch.knob_ranges(df)
    assert set(ranges["family"]) == {"basic", "bottleneck"}
    # depth values differ by family: 18/34 vs 50/101; within-family medians only
    med = ch.knob_medians(df)
    assert set(med[(med["family"] == "basic") & (med["knob"] == "depth")]["value"]) == {18, 34}


def test_feature_correlations_sorted_and_not_measured():
    df = frame(_doubling_rows(energy=False))
    corr = ch.feature_correlations(df)
    assert (corr["abs_r_energy_J"] == ch.NOT_MEASURED).all()
    assert (corr["abs_r_peak_memory_MB"] == ch.NOT_MEASURED).all()
    lat = corr["abs_r_latency_ms"]
    finite = pd.to_numeric(lat, errors="coerce").dropna().to_numpy()
    assert len(finite) >= 3 and np.all(np.diff(finite) <= 1e-12)   # sorted by |r| with latency
    assert corr.set_index("feature").loc["avg_sm_util", "feature_status"] == ch.NOT_MEASURED
    assert "latency_ms" not in set(corr["feature"]) and "energy_J" not in set(corr["feature"])


def test_feature_correlations_known_value():
    rows = [{"batch_size": b, "latency_ms": 3.0 * b + 1, "energy_J": float(10 - b) ** 2, "flops": 1e9 * b}
            for b in range(1, 9)]
    corr = ch.feature_correlations(frame(rows)).set_index("feature")
    assert corr.loc["batch_size", "abs_r_latency_ms"] == pytest.approx(1.0)
    x = np.arange(1, 9, dtype=float)
    expect = abs(np.corrcoef(x, (10 - x) ** 2)[0, 1])
    assert corr.loc["flops", "abs_r_energy_J"] == pytest.approx(expect)
    assert corr.index[0] in ("batch_size", "flops")          # energy first: both have the same |r|
    assert corr.loc["depth", "feature_status"] == "constant"


def _divergence_rows(sm: bool = True) -> list[dict]:
    # small batches: high-SM energy 3x low-SM; large batches: 10x. Latency: 1.5x in both tiers.
    rows = []
    for bs, e_ratio in ((2, 3.0), (64, 10.0)):
        for util, mult_e, mult_l in ((20.0, 1.0, 1.0), (80.0, e_ratio, 1.5)):
            for rep in range(2):
                rows.append({"batch_size": bs, "depth": 18 if rep == 0 else 34,
                             "avg_sm_util": util if sm else np.nan,
                             "energy_J": 4.0 * bs * mult_e, "latency_ms": 2.0 * bs * mult_l})
    return rows


def test_divergence_ratios_known_answer():
    cells = ch.divergence(frame(_divergence_rows()))
    assert set(cells["sm_tier"]) == {"low", "high"}
    assert _row(cells, batch_tier="small", sm_tier="low")["energy_vs_baseline"] == pytest.approx(1.0)
    assert _row(cells, batch_tier="large", sm_tier="high")["energy_vs_baseline"] == pytest.approx(32 * 10)
    ratios = ch.divergence_ratios(cells).set_index("batch_tier")
    assert ratios.loc["small", "energy_high_low"] == pytest.approx(3.0)
    assert ratios.loc["large", "energy_high_low"] == pytest.approx(10.0)
    assert ratios.loc["large", "latency_high_low"] == pytest.approx(1.5)
    assert ratios.loc["large", "energy_over_latency"] == pytest.approx(10 / 1.5)
    assert (ratios["status"] == "ok").all()


def test_divergence_without_sm_util_says_not_measured():
    cells = ch.divergence(frame(_divergence_rows(sm=False)))
    assert (cells["sm_tier"] == ch.NOT_MEASURED).all()
    assert cells["status"].str.contains("avg_sm_util").all()
    assert _row(cells, batch_tier="small")["mean_energy_J"] == pytest.approx(np.mean([8, 24]))
    ratios = ch.divergence_ratios(cells)
    assert ratios["status"].str.startswith(ch.NOT_MEASURED).all()
    assert ratios["energy_high_low"].isna().all()


def test_sm_tier_edges():
    assert list(ch.sm_tier(np.array([10.0, 40.0, 64.9, 65.0, np.nan]))) == ["low", "mid", "mid", "high", None]


def test_efficiency_known_answer():
    rows = []
    for prec, depth, bs in itertools.product(("fp32", "fp16"), (18, 34), (2, 32)):
        jpg = (1.5 if prec == "fp32" else 1.0) * (4.0 if bs == 2 else 1.0)   # J per GFLOP per forward
        flops = 2e9 * depth
        rows.append({"precision": prec, "depth": depth, "batch_size": bs, "flops": flops, "n_runs": 10,
                     "energy_J": jpg * flops / 1e9, "latency_ms": 1.0})  # per batch
    eff = ch.efficiency(frame(rows))
    p = eff[eff["view"] == "precision"].set_index("group")
    assert p.loc["fp32", "mean_J_per_GFLOP"] / p.loc["fp16", "mean_J_per_GFLOP"] == pytest.approx(1.5)
    b = eff[(eff["view"] == "batch_tier") & (eff["family"] == "all")].set_index("group")
    assert b.loc["small", "mean_J_per_GFLOP"] == pytest.approx(4 * 1.25)
    assert b.loc["large", "mean_J_per_GFLOP"] == pytest.approx(1.25)
    d = eff[eff["view"] == "depth"]
    assert set(d["group"]) == {18, 34} and (d["family"] == "basic").all()


def test_efficiency_without_energy_is_not_measured():
    eff = ch.efficiency(frame(_doubling_rows(energy=False)))
    assert set(eff["view"]) == {"precision", "batch_tier", "depth"}
    assert eff["status"].str.startswith(ch.NOT_MEASURED).all()
    assert eff["mean_J_per_GFLOP"].isna().all()


def test_cross_device_linear_relation():
    x = np.array([1.0, 2.0, 3.5, 7.0, 11.0, 20.0])
    rows = [{"batch_size": i + 1, "latency_ms": v, "energy_J": 3 * v, "config_id": f"c{i}"} for i, v in enumerate(x)]
    a = frame(rows, device="GPU A")
    b = frame([{**r, "latency_ms": 2 * r["latency_ms"] + 1, "energy_J": 0.5 * r["energy_J"]}
               for r in rows][::-1] + [{"batch_size": 99, "latency_ms": 5.0, "config_id": "only-b"}],
              device="GPU B")
    fits = ch.cross_device(a, b).set_index("target")
    lat = fits.loc["latency_ms"]
    assert lat["status"] == "ok" and lat["n"] == len(x)
    assert lat["slope"] == pytest.approx(2.0)
    assert lat["intercept"] == pytest.approx(1.0)
    assert lat["r2"] == pytest.approx(1.0)
    assert lat["spearman"] == pytest.approx(1.0)
    assert fits.loc["energy_J", "slope"] == pytest.approx(0.5)
    assert fits.loc["energy_J", "intercept"] == pytest.approx(0.0, abs=1e-9)
    assert fits.loc["peak_memory_MB", "status"] == "not measured on A and B"
    assert np.isnan(fits.loc["peak_memory_MB", "slope"])
    assert lat["device_a"] == "GPU A" and lat["device_b"] == "GPU B"


def test_cross_device_target_missing_on_one_side_and_few_pairs():
    rows = [{"batch_size": i, "latency_ms": float(i), "energy_J": float(i), "config_id": f"c{i}"} for i in (1, 2)]
    a = frame(rows, device="A")
    b = frame([{**r, "energy_J": np.nan} for r in rows], device="B")
    fits = ch.cross_device(a, b).set_index("target")
    assert fits.loc["energy_J", "status"] == "not measured on B"
    assert fits.loc["latency_ms", "status"].startswith("too few pairs")


def test_cross_device_duplicate_key_is_an_error():
    a = frame([{"latency_ms": 1.0, "config_id": "x"}], device="A")
    dup = pd.concat([a, a.assign(device_name="A2")], ignore_index=True)
    with pytest.raises(DatasetError, match="config_id"):
        ch.cross_device(dup, a)


def test_tables_and_figures_on_grid():
    from carb.plots.characterize import characterize_figures

    a, b = grid_dataset("GPU A"), grid_dataset("GPU B", scale=2.0, seed=1)
    tables = ch.characterize_tables(a, b)
    xd = tables["cross_device"].set_index("target")
    assert xd.loc["latency_ms", "slope"] == pytest.approx(2.0, rel=0.05)
    assert xd.loc["latency_ms", "spearman"] > 0.99 and xd.loc["latency_ms", "n"] == len(a)
    figs, skipped = characterize_figures(tables, "GPU A", "GPU B")
    assert set(figs) == {"knobs_peak_memory_MB", "knobs_energy_J", "knobs_latency_ms", "divergence",
                         "efficiency", "cross_device"}
    assert skipped == {}
    ax = figs["cross_device"].axes[2]            # panels in cascade order: memory, energy, latency
    assert ax.get_xscale() == "log" and "GPU A" in ax.get_xlabel() and "ms" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "y = x" in labels and any(t.startswith("fit: y = ") for t in labels)
    knob_ax = figs["knobs_energy_J"].axes
    assert any(a.get_xlabel().startswith("batch size") and a.get_xscale() == "log" for a in knob_ax)


def test_markdown_renders_missing_as_dash():
    md = ch.to_markdown(pd.DataFrame({"a": [1.23456, np.nan], "b": ["x|y", None]}))
    assert md.splitlines()[0] == "| a | b |"
    assert "| 1.235 | x\\|y |" in md and "| — | — |" in md


def test_figures_on_the_shipped_reference_have_no_empty_panel():
    """The shipped CPU reference (no energy counter, no SM telemetry): every drawn panel has data, the
    captions name what is not measured and explain the basic depth 18 apart from the CIFAR depths."""
    from carb.data.io import load_dataset
    from carb.plots.characterize import characterize_figures

    a = load_dataset("reference")
    figs, skipped = characterize_figures(ch.characterize_tables(a), "AMD EPYC")
    assert {"knobs_energy_J", "efficiency"} <= set(skipped)
    assert set(figs) == {"knobs_latency_ms", "knobs_peak_memory_MB", "divergence"}
    for name, fig in figs.items():
        visible = [ax for ax in fig.axes if ax.get_visible()]
        assert visible and all(ax.lines or ax.collections or ax.patches for ax in visible), name
        labels = [ax.get_xlabel() + ax.get_ylabel() + ax.get_title() for ax in visible] + [fig.get_suptitle()]
        assert not any("MiB" in t for t in labels), name
    caption = figs["divergence"].get_supxlabel()
    assert "not measured" in caption.lower() and "energy_J" in caption and "SM" in caption, caption
    knobs = figs["knobs_latency_ms"]
    assert "Depth 18" in knobs.get_supxlabel() and "stage layout" in knobs.get_supxlabel()
    depth_ax = next(ax for ax in knobs.axes if ax.get_xlabel().startswith("depth"))
    basic = next(ln for ln in depth_ax.lines if ln.get_label() == "basic family")
    assert 18.0 not in set(basic.get_xdata())
