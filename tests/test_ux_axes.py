"""The user's axes (issue 31 item 2): pass-through columns, Pareto axes with directions, requirements,
ties within the intervals, and the shipped ImageNet top-1 table."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.axes import Axis, apply_requirements, mark_front, parse_axes, pareto_ties
from carb.analysis.screening import pareto_mask, screen
from carb.commands.screen_table import file_frame, format_table
from carb.data.accuracy import join_top1, top1_table
from carb.design.arch import ArchConfig
from carb.design.features import grid_features
from carb.design.gridfile import read_grid
from carb.errors import ConfigError
from tests.test_screening import AnalyticModel


def test_table_rows_are_the_networks_they_name():
    """CARB's closed-form parameter count of each row's knobs equals torchvision's published count."""
    t = top1_table()
    cfgs = [ArchConfig(block=r.block, depth=int(r.depth), width_mult=r.width_mult, inner_mult=r.inner_mult,
                       input_size=int(r.input_size)) for r in t.itertuples()]
    assert grid_features(cfgs)["params"].tolist() == t["num_params"].tolist()
    assert set(t["weights"]) == {"IMAGENET1K_V1", "IMAGENET1K_V2"}
    assert t.loc[(t.model == "resnet50") & (t.weights == "IMAGENET1K_V1"), "top1"].item() == pytest.approx(0.7613)


def test_join_top1_only_standard_networks():
    cfgs = [ArchConfig(block="bottleneck", depth=50, input_size=224, batch_size=8, precision="bf16"),
            ArchConfig(block="bottleneck", depth=50, input_size=128),                 # other input size
            ArchConfig(block="bottleneck", depth=50, width_mult=0.5, input_size=224),  # other width
            ArchConfig(block="bottleneck", depth=50, early_downsample=False, input_size=224),
            ArchConfig(block="bottleneck", depth=50, inner_mult=2.0, input_size=224),  # wide_resnet50_2
            ArchConfig(block="basic", depth=18, input_size=224)]
    out = join_top1(grid_features(cfgs), "IMAGENET1K_V1")
    assert out["top1"].tolist()[0] == pytest.approx(0.7613)
    assert np.isnan(out["top1"].to_numpy()[1:4]).all()
    assert out["top1"].tolist()[4:] == pytest.approx([0.78468, 0.69758])
    assert out["top1_model"].tolist() == ["resnet50", "", "", "", "wide_resnet50_2", "resnet18"]
    with pytest.raises(ConfigError, match=r"screen.accuracy: 'V3' is not allowed; allowed: \['IMAGENET1K_V1'"):
        join_top1(grid_features(cfgs[:1]), "V3")


def _grid_file(tmp_path):
    rows = []
    for depth, top1 in ((26, np.nan), (50, 0.7613), (101, 0.7737), (152, 0.7831)):
        for bs in (1, 8, 32):
            for w in (0.5, 1.0):
                rows.append({"block": "bottleneck", "depth": depth, "width_mult": w, "input_size": 224,
                             "batch_size": bs, "precision": "fp32", "early_downsample": True,
                             "top1": top1 if w == 1.0 else top1 - 0.05, "my_score": depth * w})
    path = tmp_path / "grid.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path, pd.DataFrame(rows)


def _screened(tmp_path, **kw):
    path, raw = _grid_file(tmp_path)
    configs, extras = read_grid(path)
    assert list(extras.columns) == ["top1", "my_score"]
    F = pd.concat([grid_features(configs), extras], axis=1)
    return raw, screen(F, AnalyticModel(), {"latency_ms": 1e6}, "energy_J_per_image", shortlist_size=50, **kw)


def test_grid_columns_pass_through_to_every_output(tmp_path):
    raw, res = _screened(tmp_path)
    assert np.allclose(res.scored["top1"].to_numpy(), raw["top1"].to_numpy(), equal_nan=True)
    files = file_frame(res.shortlist, ["latency_ms", "energy_J"], ["top1", "my_score"])
    cols = list(files.columns)
    assert cols.index("top1") < cols.index("rank") and "my_score" in cols and "pareto_ties" in cols
    table = format_table(res.shortlist, ["pred_energy_J"], ["pareto", "pareto_ties"], users=["top1"])
    assert "top1" in table.splitlines()[0] and "0.7613" in table
    assert max(map(len, table.splitlines())) <= 120


def _brute_front(values: np.ndarray) -> np.ndarray:
    return np.array([not any((q <= p).all() and (q < p).any() for q in values) for p in values])


def test_pareto_axes_with_directions_and_require_match_brute_force(tmp_path):
    raw, res = _screened(tmp_path, pareto=["energy_J_per_image", "-top1"], require={"top1": 0.76})
    s = res.scored
    assert res.axes == ["energy_J_per_image", "-top1"] and res.require == {"top1": (0.76, True)}
    top1 = s["top1"].to_numpy()
    below = np.isfinite(top1) & (top1 < 0.76)
    assert (s.loc[below, "decision"] == "reject").all()
    assert s.loc[below, "decision_reason"].str.contains("top1 0.7113 < 0.76 required").any()
    assert (s.loc[np.isnan(top1), "decision"] == "unverified").all()
    assert not s.loc[below | np.isnan(top1), "feasible"].any()
    ok = s["feasible"].to_numpy()
    assert ok.sum() == 9   # depth 50, 101, 152 at width 1.0 (top1 >= 0.76) x 3 batch sizes
    vals = np.column_stack([s["pred_energy_J"] / s["batch_size"], -s["top1"]])[ok]
    expect = np.zeros(len(s), dtype=bool)
    expect[np.flatnonzero(ok)[_brute_front(vals)]] = True
    assert (s["pareto"].to_numpy() == expect).all() and expect.any()
    assert res.stages["n_require_below"] == int(below.sum()) and res.stages["n_require_missing"] == 6


def test_require_on_minimized_column_is_a_maximum(tmp_path):
    _, res = _screened(tmp_path, require={"my_score": 60})
    s = res.scored
    assert res.require == {"my_score": (60.0, False)}
    assert (s.loc[s["my_score"] > 60, "decision"] == "reject").all()
    assert s.loc[s["feasible"], "my_score"].max() <= 60


def test_unknown_axis_or_require_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        _screened(tmp_path, pareto=["energy_J", "-acc"])
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("screen.pareto: 'acc' is not a column of the candidates; allowed:")
    assert "'top1'" in msg and "'energy_J_per_image'" in msg
    with pytest.raises(ConfigError, match=r"screen.require.latency_ms: latency_ms is predicted"):
        _screened(tmp_path, require={"latency_ms": 3})
    with pytest.raises(ConfigError, match=r"screen.require.acc: not a column of the candidates"):
        _screened(tmp_path, require={"acc": 3})


def test_ties_within_intervals_are_reported_not_reordered():
    """A is ahead of B on energy by points, B ahead on memory by 0.1 MB inside both intervals: both are on
    the front (point values), each ties the other; C is certainly better on memory and certainly worse
    on energy, so it ties nobody. The order stays by the objective's point value."""
    f = pd.DataFrame({"pred_energy_J": [1.0, 1.2, 5.0], "lo_energy_J": [0.5, 0.6, 4.0], "hi_energy_J": [2.0, 2.4, 6.0],
                      "pred_peak_memory_MB": [10.0, 9.9, 5.0], "lo_peak_memory_MB": [9.0, 9.0, 4.9],
                      "hi_peak_memory_MB": [11.0, 11.0, 5.1], "rank": [1.0, 2.0, 3.0]})
    axes = [Axis("energy_J", "pred_energy_J", predicted=True), Axis("peak_memory_MB", "pred_peak_memory_MB", predicted=True)]
    out = mark_front(f, axes, np.ones(3, dtype=bool), pareto_mask)
    assert out["pareto"].tolist() == [True, True, True]
    assert out["pareto_ties"].tolist() == [1, 1, 0]
    assert out["pareto_tied_with"].tolist() == ["2", "1", ""]
    counts, _ = pareto_ties(f, axes[:1], np.array([True, False, False]), np.ones(3, dtype=bool))
    assert counts.tolist() == [1, 0, 0]   # C's energy interval lies above A's


def test_maximized_axis_and_nan_left_off_the_front():
    f = pd.DataFrame({"pred_energy_J": [1.0, 2.0, 3.0, 0.5], "top1": [0.70, 0.80, 0.75, np.nan], "rank": [2, 3, 4, 1]})
    axes = parse_axes(["energy_J", "-top1"], f.assign(batch_size=1), ["energy_J"])
    out = mark_front(f, axes, np.ones(4, dtype=bool), pareto_mask)
    assert out["pareto"].tolist() == [True, True, False, False]   # 3 is dominated by 2; 4 has no top1
    assert out["pareto_missing"].tolist() == [False, False, False, True]
    req, counts = apply_requirements(f.assign(feasible=True, decision="accept", decision_reason=""),
                                     {"top1": 0.75}, {"top1": True})
    assert req["decision"].tolist() == ["reject", "accept", "accept", "unverified"]
    assert req["meets_require"].tolist()[:3] == [False, True, True] and pd.isna(req["meets_require"].iloc[3])
    assert counts == {"n_require_below": 1, "n_require_missing": 1}


def test_predictor_passes_columns_through_and_joins_accuracy():
    from carb.analysis.predictor import Predictor

    knobs = pd.DataFrame({"block": ["bottleneck", "bottleneck"], "depth": [50, 50], "width_mult": [1.0, 0.5],
                          "input_size": [224, 224], "batch_size": [8, 8], "precision": ["bf16", "bf16"],
                          "cost_usd": [3.0, 1.5]})
    out = Predictor(AnalyticModel()).predict(knobs, accuracy="IMAGENET1K_V2")
    assert out["cost_usd"].tolist() == [3.0, 1.5]
    assert out["top1"].tolist()[0] == pytest.approx(0.80858) and np.isnan(out["top1"].iloc[1])
    assert out["top1_model"].tolist() == ["resnet50", ""]


def test_command_grid_keeps_columns_and_joins_accuracy(tmp_path):
    from carb.commands.cli import compose
    from carb.commands.screen import load_grid, user_columns

    path, raw = _grid_file(tmp_path)
    cfg = compose("screen", [f"screen.grid_file={path}", "screen.accuracy=IMAGENET1K_V1"])
    F = load_grid(cfg)
    assert user_columns(F) == ["top1", "my_score", "top5"] and len(F) == len(raw)
    own = raw["top1"].to_numpy()
    assert np.allclose(F["top1"].to_numpy()[np.isfinite(own)], own[np.isfinite(own)])   # the grid's own win
    assert F.loc[raw["depth"].eq(26).to_numpy() & raw["width_mult"].eq(1.0).to_numpy(), "top1"].isna().all()


def test_zoo_grid_user_columns_leave_out_layer_table_terms():
    """The per-kind prior's weight term (``weights_linear_MB``) is a layer-table column, not the user's axis:
    the shortlist must not show it (stop 49's README zoo table did)."""
    from carb.analysis.zoo_screen import zoo_candidates
    from carb.commands.screen import user_columns
    from carb.design.zoo_features import ZOO_WEIGHT_FEATURES

    cand, _ = zoo_candidates({"models": ["timm:lcnet_050"], "mode": "grid", "max_flops": None,
                              "batch_sizes": [1], "precisions": ["fp32"], "input_sizes": [224]})
    assert set(ZOO_WEIGHT_FEATURES) <= set(cand.columns)
    shown = user_columns(cand)
    assert not set(ZOO_WEIGHT_FEATURES) & set(shown) and "top1" in shown


def test_front_note_fits_the_table_width(capsys):
    """The zoo screen's '(front on point predictions ...; 7 feasible without a value left off it)' line was 131
    columns; it is wrapped at the table width like every other report line."""
    from types import SimpleNamespace

    from carb.commands.screen import _print_axes

    scored = pd.DataFrame({"pareto_missing": [True] * 7 + [False] * 3})
    _print_axes(SimpleNamespace(scored=scored, require={}, stages={}), [])
    out = capsys.readouterr().out
    assert "7 feasible without a value left off it" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 120, out
