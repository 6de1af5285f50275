"""End to end: the quickstart main job on a fresh SQLite store, screening bad input, validation,
and two-stage screening with two registered models."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.data.io import reference_dataset, save_dataset

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import synthetic_dataset  # noqa: E402

FAST = ["evaluate.lobo.enabled=false", "evaluate.figures=false"]


@pytest.fixture(scope="module")
def qs(tmp_path_factory):
    from carb.commands.quickstart import run_quickstart

    d = tmp_path_factory.mktemp("qs")
    common = [f"tracking.uri=sqlite:///{d}/mlruns/mlflow.db", f"paths.output_dir={d}/out"]
    first = run_quickstart(common)
    return {"dir": d, "common": common, "first": first}


def test_quickstart_fresh_store_trains_promotes_screens(qs):
    first = qs["first"]
    assert first["steps"] == ["train", "promote", "screen"]
    assert first["n_candidates"] == 3072 and first["n_shortlist"] > 0
    out = Path(first["output_dir"])
    for f in ("scored.parquet", "scored.csv", "shortlist.csv", "pareto.png"):
        assert (out / f).stat().st_size > 0
    scored = pd.read_parquet(out / "scored.parquet")
    assert set(scored["decision"]) <= {"accept", "borderline", "reject"}
    assert "pred_energy_J" not in scored  # the CPU reference has no energy: no energy stage


def test_quickstart_second_run_screens_straight_away(qs):
    from carb.commands.quickstart import run_quickstart

    again = run_quickstart(qs["common"])
    assert again["steps"] == ["screen"]


def _screen_cli(qs, *args):
    cmd = [sys.executable, "-m", "carb.screen", *qs["common"], *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("args, needle", [
    (["screen.target=models:/carb-nope@champion"], "carb-nope"),
    (["screen.budget.energy_J=75"], "does not predict energy_J"),
    (["space.precisions=[fp64]"], "precision"),
])
def test_screen_bad_input_is_one_line(qs, args, needle):
    r = _screen_cli(qs, *args)
    assert r.returncode == 2, r.stdout[-500:] + r.stderr[-1500:]
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("carb-screen: error:")]
    assert len(lines) == 1 and needle in lines[0]
    assert "Traceback" not in r.stderr


def test_grid_file_with_unknown_knob(qs, tmp_path):
    from carb.errors import ConfigError
    from carb.commands.screen import run_screen

    grid = tmp_path / "grid.csv"
    pd.DataFrame({"block": ["basic"], "depth": [20], "colour": ["red"]}).to_csv(grid, index=False)
    with pytest.raises(ConfigError, match="unknown knob column"):
        run_screen(compose("screen", [*qs["common"], "screen=quickstart", f"screen.grid_file={grid}"]))


def test_impossible_budget_shows_closest(qs, capsys):
    from carb.commands.screen import run_screen

    r = run_screen(compose("screen", [*qs["common"], "screen.budget.latency_ms=1e-6"]))
    assert r["n_shortlist"] == 0
    assert "no candidate meets the budget" in capsys.readouterr().out


def test_validation_on_held_out_reference(qs):
    from carb.commands.screen import run_screen

    r = run_screen(compose("screen", [*qs["common"], "screen=quickstart", "screen.validate=reference",
                                      "screen.validate_split=test"]))
    v = r["validation"]
    for t in ("latency_ms", "peak_memory_MB"):
        assert 0.0 <= v[f"validate_{t}_accuracy"] <= 1.0
        assert v[f"validate_{t}_false_accept_rate"] + v[f"validate_{t}_false_reject_rate"] \
            == pytest.approx(1 - v[f"validate_{t}_accuracy"])
    ref_test = v["validate_n_rows"]
    assert 0 < ref_test < len(reference_dataset())


@pytest.mark.slow
def test_two_stage_with_two_registered_models(qs):
    from carb.commands.screen import run_screen
    from carb.commands.train import run_train

    data = qs["dir"] / "gpu.parquet"
    save_dataset(synthetic_dataset(150, seed=5, device_name="Synthetic GPU"), data)
    run_train(compose("train", [*qs["common"], "model=carb_fast", f"data.path={data}", *FAST]))
    r = run_screen(compose("screen", [*qs["common"], "+experiment=two_stage",
                                      "screen.source=models:/carb-synthetic-gpu/1",
                                      "screen.target=models:/carb-amd-epyc@champion",
                                      "screen.objective=latency_ms", "screen.top_k=50"]))
    assert r["mode"] == "two-stage" and r["stage1_kept"] == 50
    assert -1.0 <= r["spearman_source_target"] <= 1.0
    assert r["n_accept"] + r["n_borderline"] <= 50
