"""End to end: the quickstart main job on a fresh SQLite store (the default, on the shipped H200 data with
energy, and ``data=reference`` on the CPU reference), screening bad input, validation, and two-stage
screening with two registered models."""
from __future__ import annotations

import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pandas as pd
import os

import pytest
from sizes import NO_EVALUATION, quickstart_without_evaluation
from synthetic import synthetic_dataset

from carb.commands.cli import compose
from carb.data.io import load_dataset, reference_dataset, save_dataset
from carb.data.schema import model_name, ok_rows
from carb.data.split import split_dataset
from carb.design.space import load_space

MODEL = model_name(ok_rows(load_dataset("reference")))   # carb-amd-epyc[-<device_id>]: the shipped data's device
H200 = model_name(ok_rows(load_dataset("h200")))         # carb-nvidia-h200-<device_id>: the main job's default


def screen_budget(*overrides: str) -> dict[str, float]:
    """The budget the screen config composes to (read from conf/, not copied)."""
    b = compose("screen", list(overrides)).screen.budget
    return {k: float(v) for k, v in b.items() if v is not None}


def expected_decisions(scored: pd.DataFrame, budget: dict[str, float]):
    """The screening rule written out: reject when some budgeted target's interval lies above its limit
    (lo > limit); else unverified when the model cannot vouch (outside the training domain, a precision
    never measured, an unbounded interval); else accept when every interval lies within (hi <= limit);
    else borderline. Returns (decisions, feasible)."""
    feasible = np.ones(len(scored), dtype=bool)
    over = np.zeros(len(scored), dtype=bool)
    within = np.ones(len(scored), dtype=bool)
    unbounded = np.zeros(len(scored), dtype=bool)
    for t, limit in budget.items():
        feasible &= scored[f"pred_{t}"].to_numpy() <= limit
        over |= scored[f"lo_{t}"].to_numpy() > limit
        within &= scored[f"hi_{t}"].to_numpy() <= limit
        unbounded |= ~np.isfinite(scored[f"hi_{t}"].to_numpy())
    cannot = scored["never_measured"].to_numpy(bool) | ~scored["in_domain"].to_numpy(bool) | unbounded
    want = np.where(over, "reject", np.where(cannot, "unverified", np.where(within, "accept", "borderline")))
    return want, feasible


@pytest.fixture(scope="module")
def qs(tmp_path_factory):
    from carb.commands.quickstart import run_quickstart

    d = tmp_path_factory.mktemp("qs")
    common = [f"tracking.uri=sqlite:///{d}/mlruns/mlflow.db", f"paths.output_dir={d}/out"]
    with quickstart_without_evaluation():   # the tests use the model, not its evaluation (tests/test_train.py)
        first = run_quickstart([*common, "data=reference"])
    return {"dir": d, "common": common, "first": first, "uri": f"sqlite:///{d}/mlruns/mlflow.db"}


def test_quickstart_fresh_store_trains_promotes_screens(qs):
    from carb import load_model, tracking

    first = qs["first"]
    assert first["steps"] == ["train", "promote", "screen"]
    tracking.configure(qs["uri"])
    assert [v["version"] for v in tracking.model_versions(MODEL)] == ["1"]
    assert tracking.get_alias(MODEL, "champion") == "1"            # promoted by the quickstart
    assert first["target"] == f"models:/{MODEL}@champion" and first["mode"] == "single-stage"
    out = Path(first["output_dir"])
    for f in ("scored.parquet", "scored.csv", "shortlist.csv", "pareto.png"):
        assert (out / f).stat().st_size > 0
    scored = pd.read_parquet(out / "scored.parquet")
    assert len(scored) == first["n_candidates"] == len(load_space("screening")) and scored["config_id"].is_unique
    assert "pred_energy_J" not in scored  # the CPU reference has no energy: no energy stage
    # every decision follows the quickstart budget and the champion's calibrated intervals
    model = load_model(f"models:/{MODEL}@champion", tracking_uri=qs["uri"])
    assert model.intervals_["coverage"] == 0.9 and model.domain_
    budget = screen_budget("screen=quickstart_cpu")
    assert set(budget) == {"peak_memory_MB", "latency_ms"}
    want, feasible = expected_decisions(scored, budget)
    assert (scored["decision"].to_numpy() == want).all()
    assert not ((scored["decision"] == "accept") & scored["never_measured"]).any()
    counts = scored["decision"].value_counts()
    assert [first[f"n_{d}"] for d in ("accept", "borderline", "unverified", "reject")] == \
        [int(counts.get(d, 0)) for d in ("accept", "borderline", "unverified", "reject")]
    assert first["n_accept"] > 0 and first["n_reject"] > 0          # the budget splits the grid
    # the shortlist: feasible candidates only, the Pareto front first, then by predicted latency
    short = pd.read_csv(out / "shortlist.csv")
    assert len(short) == first["n_shortlist"] == min(20, int(feasible.sum()))
    for t, limit in budget.items():
        assert (short[f"pred_{t}"] <= limit).all()
    front = short["pareto"].to_numpy(bool)
    assert front.any() and front[:front.sum()].all()
    assert (np.diff(short.loc[~front, "pred_latency_ms"].to_numpy()) >= 0).all()
    axes = ["pred_peak_memory_MB", "pred_latency_ms"]
    F = scored.loc[feasible, axes].to_numpy()
    for row in short.loc[front, axes].to_numpy():                    # nothing feasible dominates the front
        assert not ((F <= row).all(axis=1) & (F < row).any(axis=1)).any()


def test_quickstart_second_run_screens_straight_away(qs):
    from carb import tracking
    from carb.commands.quickstart import run_quickstart

    again = run_quickstart([*qs["common"], "data=reference"])
    assert again["steps"] == ["screen"]
    tracking.configure(qs["uri"])
    assert [v["version"] for v in tracking.model_versions(MODEL)] == ["1"]     # nothing trained again
    assert tracking.get_alias(MODEL, "champion") == "1"
    first = pd.read_parquet(Path(qs["first"]["output_dir"]) / "scored.parquet")
    second = pd.read_parquet(Path(again["output_dir"]) / "scored.parquet")
    pd.testing.assert_frame_equal(first, second)                 # same champion, same grid: same answer


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
    from carb.commands.screen import run_screen
    from carb.errors import ConfigError

    grid = tmp_path / "grid.csv"
    pd.DataFrame({"block": ["basic"], "depth": [20], "colour": ["red"]}).to_csv(grid, index=False)
    with pytest.raises(ConfigError, match="unknown knob column"):
        run_screen(compose("screen", [*qs["common"], "screen=quickstart_cpu", f"screen.grid_file={grid}"]))


def test_impossible_budget_shows_closest(qs, capsys):
    from carb.commands.screen import run_screen

    r = run_screen(compose("screen", [*qs["common"], "screen.budget.latency_ms=1e-6"]))
    assert r["n_shortlist"] == 0
    assert "no candidate meets the budget" in capsys.readouterr().out
    # the run name: <device slug>-screen-v<version>/<budget>/<objective>/<grid>-<candidates>
    import mlflow

    name = mlflow.MlflowClient(qs["uri"]).get_run(r["run_id"]).info.run_name
    assert name.startswith("amd-epyc") and "-screen-v" in name and "/latency_ms<=1e-06/" in name, name


def test_validation_on_held_out_reference(qs):
    from carb import load_model
    from carb.commands.screen import run_screen
    from carb.model.intervals import screening_predict

    r = run_screen(compose("screen", [*qs["common"], "screen=quickstart_cpu", "screen.validate=reference",
                                      "screen.validate_split=test"]))
    v = r["validation"]
    model = load_model(f"models:/{MODEL}@champion", tracking_uri=qs["uri"])
    ref = ok_rows(reference_dataset())
    sp = compose("train").split
    test = split_dataset(ref, seed=int(sp.seed), fractions=tuple(sp.fractions)).frames4(ref)[3]
    assert v["validate_n_rows"] == len(test) and 0 < len(test) < len(ref)   # the held-out rows only
    pred = screening_predict(model.cascade, test)   # the screening path: imputed telemetry, monotone in batch
    for t, limit in screen_budget("screen=quickstart_cpu").items():
        p, m = pred[f"pred_{t}"].to_numpy(), test[t].to_numpy()
        # on its own held-out rows the validation error is the champion's recorded test MAE
        assert v[f"validate_{t}_mae"] == pytest.approx(model.test_mae_[t]) == pytest.approx(np.mean(np.abs(p - m)))
        assert v[f"validate_{t}_accuracy"] == pytest.approx(np.mean((p <= limit) == (m <= limit)))
        assert v[f"validate_{t}_false_accept_rate"] == pytest.approx(np.mean((p <= limit) & (m > limit)))
        assert v[f"validate_{t}_false_reject_rate"] == pytest.approx(np.mean((p > limit) & (m <= limit)))
    assert v["validate_latency_ms_accuracy"] >= 0.8               # the fast preset is useful on CPU
    # the held-out rows are of the model's own session: their intervals carry no session drift
    from carb.analysis.screening import score, scoped_model

    own = score(scoped_model(model.cascade, "this_session")[0], test)
    y = test["latency_ms"].to_numpy()
    inside = (own["lo_latency_ms"].to_numpy() <= y) & (y <= own["hi_latency_ms"].to_numpy())
    assert v["validate_screening_latency_ms_interval_coverage"] == pytest.approx(float(inside.mean()))


@pytest.mark.slow
def test_two_stage_with_two_registered_models(qs):
    from scipy.stats import spearmanr

    from carb import load_model
    from carb.commands.screen import run_screen
    from carb.commands.train import run_train

    data = qs["dir"] / "gpu.parquet"
    save_dataset(synthetic_dataset(150, seed=5, device_name="Synthetic GPU"), data)
    run_train(compose("train", [*qs["common"], "model=carb_fast", f"data.path={data}", *NO_EVALUATION]))
    r = run_screen(compose("screen", [*qs["common"], "+experiment=two_stage",
                                      "screen.source=models:/carb-synthetic-gpu/1",
                                      f"screen.target=models:/{MODEL}@champion",
                                      "screen.objective=latency_ms", "screen.top_k=50"]))
    assert r["mode"] == "two-stage" and r["stage1_kept"] == 50
    assert any("energy_J dropped" in n for n in r["notes"])       # the CPU target predicts no energy
    scored = pd.read_parquet(Path(r["output_dir"]) / "scored.parquet")
    src, kept = scored["source_pred_latency_ms"].to_numpy(), scored["stage1_kept"].to_numpy(bool)
    assert kept.sum() == 50 and src[kept].max() <= src[~kept].min()   # the source's 50 fastest
    assert (scored.loc[~kept, "decision"] == "reject").all()          # only stage-1 survivors can pass
    target = load_model(f"models:/{MODEL}@champion", tracking_uri=qs["uri"])
    budget = {t: v for t, v in screen_budget("+experiment=two_stage").items() if t in target.targets_}
    assert budget                                                     # a budget the target model predicts
    want, _ = expected_decisions(scored[kept], budget)
    assert (scored.loc[kept, "decision"].to_numpy() == want).all()   # survivors judged by the target model
    passed = scored["decision"] != "reject"
    assert r["n_accept"] + r["n_borderline"] + r["n_unverified"] == passed.sum() > 0
    assert scored.loc[~kept, "pred_latency_ms"].isna().all()       # screen.rescore=top_k: the target scores the K
    assert r["stage2_rescored"] == 50 and r["spearman_source_target"] == pytest.approx(
        spearmanr(src[kept], scored.loc[kept, "pred_latency_ms"]).statistic)


@pytest.mark.slow
def test_screen_command_leaves_one_folder_per_run(qs):
    """``python -m carb.screen`` writes its tables and figure into Hydra's run folder, beside the run
    record: one new folder under outputs/screen/ holding both."""
    root = Path(qs["dir"]) / "out" / "screen"
    before = set(root.iterdir()) if root.exists() else set()
    r = _screen_cli(qs, "screen=quickstart_cpu")
    assert r.returncode == 0, r.stderr[-1500:]
    new = sorted(set(root.iterdir()) - before)
    assert len(new) == 1, new
    names = {p.name for p in new[0].iterdir()}
    assert {".hydra", "screen.log", "scored.parquet", "shortlist.csv", "pareto.png"} <= names


@pytest.mark.parametrize("typo, needle", [("screen.budget.latency_ms=abc", "screen.budget.latency_ms"),
                                          ("foo=1", "foo: unknown key; allowed: [")])
def test_quickstart_typo_is_one_line_before_any_training(tmp_path, typo, needle):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "carb.quickstart", typo], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "CARB_HOME": str(tmp_path / "home")})
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("carb-quickstart: error:")]
    assert r.returncode == 2 and len(errors) == 1 and needle in errors[0], r.stderr[-1500:]
    assert "Traceback" not in r.stderr and not (tmp_path / "home" / "mlruns").exists()   # nothing trained


@pytest.mark.slow
def test_quickstart_calibrate_measures_here_registers_and_screens_with_it(qs, capsys):
    """carb-quickstart calibrate=true: K configurations (at least 3 of each precision) measured on this CPU,
    the reference champion calibrated to them and registered as this machine's model, the screen run with that
    version.
    (Tiny measuring settings and no contention guard: a test run shares the machine.)"""
    from carb import tracking
    from carb.commands.quickstart import run_quickstart

    d = qs["dir"]
    cal = ["calibrate=true", "calibrate.k=4", "calibrate.space=smoke", "calibrate.space.blocks=[basic]",
           f"calibrate.out={d}/calibrate.parquet", "calibrate.measure.n_runs=2", "calibrate.measure.n_warmup=1",
           "calibrate.measure.min_window_s=0", "calibrate.measure.cooldown_s=0", "calibrate.measure.guard.enabled=false"]
    out = run_quickstart([*qs["common"], *cal])
    assert out["steps"] == ["calibrate", "screen"]
    rows = load_dataset(str(d / "calibrate.parquet"))
    # issue 44: the K rows cover every precision the reference model predicts, at least 3 each (k=4 -> 9;
    # bf16 and fp16 on the smoke space's fp32 networks)
    assert len(rows) == 9 and (rows["status"] == "ok").all()
    assert rows["precision"].value_counts().to_dict() == {"fp32": 3, "bf16": 3, "fp16": 3}
    name = model_name(ok_rows(rows))
    tracking.configure(qs["uri"])
    versions = tracking.model_versions(name)
    assert out["target"] == f"models:/{name}/{versions[-1]['version']}"
    info = tracking.registered_model_info(name, versions[-1]["version"])
    assert info["version_tags"]["calibrated_from"] == f"models:/{MODEL}@champion" and info["version_tags"]["k"] == "9"
    said = " ".join(capsys.readouterr().out.split())
    assert "carb-calibrate: latency_ms:" in said
    assert "later session of this CPU" in said   # the calibrated model carries the session drift for a later screen
    assert "own measuring session" in said   # the quickstart screens right after measuring: the rows' own session


def test_quickstart_calibrate_value_is_checked():
    from carb.commands.quickstart import run_quickstart
    from carb.errors import ConfigError

    with pytest.raises(ConfigError, match=r"calibrate: 'maybe' is not allowed; allowed: \[true, false\]"):
        run_quickstart(["calibrate=maybe"])
    with pytest.raises(ConfigError, match="k"):
        run_quickstart(["calibrate=true", "calibrate.k=0"])
    with pytest.raises(ConfigError, match=r"data: 'cpu' is not allowed; allowed: \['h200', 'reference'\]"):
        run_quickstart(["data=cpu"])
    with pytest.raises(ConfigError, match=r"data: calibrate=true .*allowed with calibrate=true: \['reference'\]"):
        run_quickstart(["calibrate=true", "data=h200"])


@pytest.mark.parametrize("evaluation", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_main_job_default_screens_with_the_h200_model_and_an_energy_budget(tmp_path, evaluation):
    """``carb-quickstart`` with no argument: the shipped H200 measurements train, promote and screen,
    with an energy stage, the three-target budget of ``screen=quickstart`` splitting the grid, and every
    decision following the budget and the intervals. The fast suite trains without the evaluation refits;
    the slow one runs the main job exactly as a user does."""
    from carb import tracking
    from carb.commands.quickstart import run_quickstart

    common = [f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", f"paths.output_dir={tmp_path}/out"]
    with nullcontext() if evaluation else quickstart_without_evaluation():
        first = run_quickstart(common)
    assert first["steps"] == ["train", "promote", "screen"] and first["target"] == f"models:/{H200}@champion"
    tracking.configure(f"sqlite:///{tmp_path}/mlflow.db")
    assert tracking.get_alias(H200, "champion") == "1" and not tracking.model_versions(MODEL)
    scored = pd.read_parquet(Path(first["output_dir"]) / "scored.parquet")
    assert len(scored) == len(load_space("screening"))
    assert (scored["pred_energy_J"] > 0).all() and {"lo_energy_J", "hi_energy_J"} <= set(scored)
    budget = screen_budget("screen=quickstart")
    assert set(budget) == {"energy_J", "peak_memory_MB", "latency_ms"}
    want, feasible = expected_decisions(scored, budget)
    assert (scored["decision"].to_numpy() == want).all()
    assert first["n_accept"] > 0 and first["n_reject"] > 0            # the budget splits the grid
    short = pd.read_csv(Path(first["output_dir"]) / "shortlist.csv")
    assert len(short) == min(20, int(feasible.sum())) and (short["pred_energy_J"] <= budget["energy_J"]).all()
    front = short["pareto"].to_numpy(bool)
    per_image = short.loc[~front, "pred_energy_J_per_image"].to_numpy()
    assert (np.diff(per_image) >= 0).all()                           # energy per image is the objective
    assert np.allclose(per_image, short.loc[~front, "pred_energy_J"] / short.loc[~front, "batch_size"])


@pytest.mark.parametrize("on_disk, given, want", [(False, [], True), (True, [], False),
                                                  (False, ["probe=false"], False)])
def test_quickstart_calibrate_probes_a_cpu_without_a_probe_first(monkeypatch, on_disk, given, want):
    """Issue 29: carb-quickstart calibrate=true runs a short device probe first (carb-calibrate probe=true)
    on a CPU that has none on disk; a CPU with a probe uses it, and calibrate.probe=... is the user's."""
    import carb.data.probes as probes
    from carb.commands.cli import compose
    from carb.commands.quickstart import probe_first

    seen = []
    monkeypatch.setattr(probes, "load_probe", lambda dev: seen.append(dev) or ("probe" if on_disk else None))
    cfg = compose("calibrate", ["measure=cpu", "device=cpu", *given])
    probe_first(cfg, given)
    assert (str(cfg.get("probe")).lower() == "true") is want
    assert len(seen) == (0 if given else 1) and all(len(d) == 10 for d in seen)   # this CPU's device id
