"""CARB's accuracy-energy score ``hj_score`` (issue 43 item 6; :mod:`carb.analysis.hj_score`): its formula on
rows made here, its place in screening (a column, a Pareto axis, a requirement, an objective) and the
one-line refusals where energy is not predicted or top-1 is missing."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.hj_score import hj_scores
from carb.analysis.screening import screen
from carb.design.features import grid_features
from carb.design.gridfile import read_grid
from carb.errors import ConfigError
from tests.test_screening import AnalyticModel
from tests.test_zoo_model import cascade, registered, zoo  # noqa: F401 - the registered zoo model (slow test)


def test_score_is_the_documented_weighted_sum():
    top1 = np.array([0.70, 0.80, 0.60, np.nan, 0.75])
    e = np.array([0.01, 1.0, 0.1, 0.05, np.nan])        # J per image
    s = hj_scores(top1, e, 0.5)
    # rows 0-2 are the set: acc (0.5, 1, 0); log10 E (-2, 0, -1) -> eff (1, 0, 0.5)
    assert s[:3] == pytest.approx([0.75, 0.5, 0.25])
    assert np.isnan(s[3:]).all()                         # no top-1, no energy: no score
    assert hj_scores(top1, e, 1.0)[:3] == pytest.approx([0.5, 1.0, 0.0])   # accuracy only
    assert hj_scores(top1, e, 0.0)[:3] == pytest.approx([1.0, 0.0, 0.5])   # energy only
    # energy on a log scale: ten times the energy costs the same wherever it happens
    s2 = hj_scores(np.array([0.7, 0.7, 0.7]), np.array([1.0, 10.0, 100.0]), 0.0)
    assert s2 == pytest.approx([1.0, 0.5, 0.0])
    # no spread (one candidate): each term is 1
    assert hj_scores(np.array([0.7]), np.array([0.3]), 0.4) == pytest.approx([1.0])


@pytest.mark.parametrize("w", [-0.1, 1.5, "x", None])
def test_weight_outside_0_1_refused(w):
    with pytest.raises(ConfigError, match=r"^screen.hj.accuracy_weight: must be a number in \[0, 1\]"):
        hj_scores(np.array([0.7]), np.array([1.0]), w)


def _grid(tmp_path, with_top1=True):
    rows = []
    for depth, top1 in ((18, 0.6976), (34, 0.7331), (50, 0.7613), (101, 0.7737), (152, np.nan)):
        for bs in (1, 8, 32):
            row = {"block": "bottleneck" if depth >= 50 else "basic", "depth": depth, "width_mult": 1.0,
                   "input_size": 224, "batch_size": bs, "precision": "fp32", "early_downsample": True}
            if with_top1:
                row["top1"] = top1
            rows.append(row)
    path = tmp_path / "grid.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    configs, extras = read_grid(path)
    return pd.concat([grid_features(configs), extras], axis=1)


def test_screen_adds_the_score_over_the_whole_set(tmp_path):
    F = _grid(tmp_path)
    res = screen(F, AnalyticModel(), {"latency_ms": 1e6}, shortlist_size=50, hj_weight=0.3)
    s = res.scored
    e = s["pred_energy_J"].to_numpy() / s["batch_size"].to_numpy()
    want = hj_scores(s["top1"].to_numpy(float), e, 0.3)
    assert np.allclose(s["hj_score"].to_numpy(), want, equal_nan=True)
    assert s.loc[s["top1"].isna(), "hj_score"].isna().all()
    known = s["hj_score"].dropna()
    assert known.min() >= 0 and known.max() <= 1 and known.max() > known.min()
    # a budget that rejects some candidates does not move anyone's score (normalised over the set)
    tight = screen(F, AnalyticModel(), {"latency_ms": float(np.median(s["pred_latency_ms"]))}, hj_weight=0.3)
    assert (tight.scored["decision"] == "reject").any()
    assert np.allclose(tight.scored["hj_score"].to_numpy(), s["hj_score"].to_numpy(), equal_nan=True)


def test_objective_ranks_the_largest_score_first(tmp_path):
    F = _grid(tmp_path)
    res = screen(F, AnalyticModel(), {"latency_ms": 1e6}, "hj_score", shortlist_size=50)
    s = res.scored
    feas = s[s["feasible"] & s["hj_score"].notna()]
    best = feas.sort_values("hj_score", ascending=False)
    assert best["rank"].iloc[0] == 1 and (np.diff(best["rank"].to_numpy()) > 0).all()
    assert res.axes == ["-hj_score", "peak_memory_MB"]          # energy is inside the score
    sl = res.shortlist
    front, rest = sl[sl["pareto"]], sl[~sl["pareto"]]
    assert (np.diff(front["hj_score"].to_numpy()) <= 0).all()   # the front, best score first
    assert (np.diff(rest["hj_score"].dropna().to_numpy()) <= 0).all()


def test_pareto_axis_and_requirement(tmp_path):
    F = _grid(tmp_path)
    res = screen(F, AnalyticModel(), {"latency_ms": 1e6}, "energy_J_per_image",
                 pareto=["energy_J_per_image", "-hj_score"], require={"hj_score": 0.5})
    s = res.scored
    assert res.axes == ["energy_J_per_image", "-hj_score"]
    assert (s.loc[s["feasible"], "hj_score"] >= 0.5).all()
    low = s["hj_score"] < 0.5
    assert low.any() and (s.loc[low, "decision"] == "reject").all()
    front = s[s["pareto"]]
    assert len(front) and front["hj_score"].notna().all()
    with pytest.raises(ConfigError, match=r"^screen.pareto: 'hj_score' would minimize hj_score.*allowed: '-hj_score'"):
        screen(F, AnalyticModel(), {"latency_ms": 1e6}, pareto=["energy_J", "hj_score"])


def test_refused_where_energy_is_not_predicted(tmp_path):
    F = _grid(tmp_path)
    cpu = AnalyticModel(targets=("peak_memory_MB", "latency_ms"))   # a CPU model: no energy stage
    for kw, field in (({"objective": "hj_score"}, "screen.objective"),
                      ({"pareto": ["latency_ms", "-hj_score"]}, "screen.pareto"),
                      ({"require": {"hj_score": 0.5}}, "screen.require.hj_score")):
        with pytest.raises(ConfigError) as e:
            screen(F, cpu, {"latency_ms": 1e6}, **kw)
        msg = str(e.value)
        assert msg.startswith(f"{field}: hj_score needs predicted energy (energy_J)") and "\n" not in msg
    with pytest.raises(ConfigError, match=r"allowed: \['peak_memory_MB', 'latency_ms', 'latency_ms_per_image'\]"):
        screen(F, cpu, {"latency_ms": 1e6}, "hj_score")
    res = screen(F, cpu, {"latency_ms": 1e6})           # not asked for: no column, no refusal
    assert "hj_score" not in res.scored


def test_refused_without_top1_and_as_a_two_stage_objective(tmp_path):
    F = _grid(tmp_path, with_top1=False)
    with pytest.raises(ConfigError, match=r"^screen.objective: hj_score needs a top1 column: space=zoo"):
        screen(F, AnalyticModel(), {"latency_ms": 1e6}, "hj_score")
    assert "hj_score" not in screen(F, AnalyticModel(), {"latency_ms": 1e6}).scored
    with pytest.raises(ConfigError, match=r"^screen.objective: hj_score is relative to the screened set"):
        screen(_grid(tmp_path), AnalyticModel(), {"latency_ms": 1e6}, "hj_score", source_model=AnalyticModel(2.0))


def test_config_key_and_schema():
    from carb.commands.checks import check_config
    from carb.commands.cli import compose

    cfg = compose("screen", ["screen.objective=hj_score", "screen.hj.accuracy_weight=0.7"])
    check_config("screen", cfg)
    assert cfg.screen.hj.accuracy_weight == 0.7 and "hj_score" in cfg.screen.maximize
    with pytest.raises(ConfigError, match="screen.hj.accuracy_weight"):
        check_config("screen", compose("screen", ["screen.hj.accuracy_weight=2"]))


@pytest.mark.slow   # fits the small zoo cascade of tests/test_zoo_model.py (a minute on 2 busy cores)
def test_carb_screen_space_zoo_refuses_hj_score_for_a_model_without_energy(registered, tmp_path):
    """carb-screen space=zoo against a zoo model that predicts latency and memory only (as the CPU zoo's):
    screen.objective=hj_score stops with one line naming the setting, before anything is written."""
    from carb.commands.cli import compose
    from carb.commands.screen import run_screen

    over = [f"tracking.uri={registered['uri']}", f"screen.target={registered['model']}",
            f"paths.output_dir={tmp_path}", "space=zoo", "space.mode=grid", "space.max_flops=null",
            "space.models=[tv:resnet18,tv:mobilenet_v2]", "space.input_sizes=[64]", "space.batch_sizes=[1]",
            "space.precisions=[fp32]", "screen.objective=hj_score", "progress.enabled=false"]
    with pytest.raises(ConfigError) as e:
        run_screen(compose("screen", over))
    msg = str(e.value)
    assert msg.startswith("screen.objective: hj_score needs predicted energy (energy_J)") and "\n" not in msg
    assert "allowed: ['peak_memory_MB', 'latency_ms', 'latency_ms_per_image']" in msg
    assert not list(tmp_path.rglob("scored.parquet"))
