"""Progress lines with an ETA (carb.commands.progress): the helper on a virtual clock, its config switch,
the tune trial callback, and the lines that carb-train and carb-tune print on stderr."""
from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
from synthetic import synthetic_dataset

from carb.commands.cli import compose
from carb.commands.progress import Progress, format_duration
from carb.data.io import save_dataset
from carb.errors import ConfigError

ETA_LINE = re.compile(r"^carb-\w+: \[\s*\d+%\] .+; (<1 s|\d+ s|\d+ min \d\d s) elapsed(, ETA .+)?$")


class Clock:
    """A virtual clock for :class:`Progress`."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_format_duration():
    assert [format_duration(s) for s in (0.2, 42, 185, 3720)] == ["<1 s", "42 s", "3 min 05 s", "1 h 02 min"]
    assert format_duration(float("nan")) == "?"


def test_weighted_eta_on_a_virtual_clock():
    clock, out = Clock(), io.StringIO()
    p = Progress("carb-train", total=10, stream=out, clock=clock)
    p.begin("fit stage 1/2: peak_memory_MB", 1)
    clock.t = 4.0
    p.begin("fit stage 2/2: latency_ms", 1)     # 1 of 10 done in 4 s: 36 s left
    clock.t = 8.0
    p.begin("refit", 8)                         # 2 of 10 done in 8 s: 32 s left
    clock.t = 40.0
    p.finish("fitted")
    lines = out.getvalue().splitlines()
    assert lines[0] == "carb-train: [  0%] fit stage 1/2: peak_memory_MB; <1 s elapsed"
    assert lines[1] == "carb-train: [ 10%] fit stage 2/2: latency_ms; 4 s elapsed, ETA 36 s"
    assert lines[2] == "carb-train: [ 20%] refit; 8 s elapsed, ETA 32 s"
    assert lines[3] == "carb-train: fitted in 40 s"
    assert all(ETA_LINE.match(ln) for ln in lines[:3])


def test_throttle_and_disabled():
    clock, out = Clock(), io.StringIO()
    p = Progress("carb-tune", total=100, min_interval_s=2.0, stream=out, clock=clock)
    for i in range(10):                          # ten trials in 1 s: the first one prints
        clock.t = 0.1 * i
        p.advance(f"trial {i}")
    clock.t = 3.0
    p.advance("trial 10")                        # 2 s later: prints again
    assert [ln.split("] ")[1].split(";")[0] for ln in out.getvalue().splitlines()] == ["trial 0", "trial 10"]
    assert "ETA" in out.getvalue().splitlines()[-1]
    quiet = io.StringIO()
    q = Progress("carb-tune", total=2, enabled=False, stream=quiet, clock=clock)
    q.advance("trial 0")
    q.finish()
    assert quiet.getvalue() == "" and len(q.lines) == 2   # kept, not printed


def test_config_switch_and_check():
    cfg = compose("train", ["progress.enabled=false", "progress.min_interval_s=5"])
    p = Progress.from_cfg("carb-train", 3, cfg)
    assert not p.enabled and p.min_interval_s == 5.0
    assert Progress.from_cfg("carb-train", 3, cfg, throttle=False).min_interval_s == 0.0
    for command in ("train", "tune", "screen", "characterize"):
        assert compose(command)["progress"]["enabled"] is True
    from carb.commands.checks import check_config

    with pytest.raises(ConfigError, match="progress.enabled"):
        check_config("train", compose("train", ["progress.enabled=yes"]))


def test_trial_callback_says_best_so_far_with_unit():
    from carb.commands.tune import BLEND_TRIAL_WEIGHT, TrialProgress, tune_plan

    clock, out = Clock(), io.StringIO()
    p = Progress("carb-tune", total=tune_plan(1, 1, 2, 2), stream=out, clock=clock)
    assert p.total == 2 + 2 * BLEND_TRIAL_WEIGHT
    cb = TrialProgress(p, "mae")
    study = SimpleNamespace(study_name="s.latency_ms.xgb", best_value=0.25)
    clock.t = 5.0
    cb(study, SimpleNamespace(number=0, value=0.25, state=SimpleNamespace(name="COMPLETE")))
    clock.t = 9.0
    cb(study, SimpleNamespace(number=1, value=None, state=SimpleNamespace(name="PRUNED")))
    lines = out.getvalue().splitlines()
    assert "s.latency_ms.xgb trial 0 complete 0.25 ms; best mae 0.25 ms" in lines[0]
    assert "trial 1 pruned; best mae 0.25 ms" in lines[1] and "ETA" in lines[0]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("progress")
    save_dataset(synthetic_dataset(160, seed=3, device_name="Synthetic GPU"), d / "syn.parquet")
    return d


TINY = ["model=carb_fast", "model.specialists.xgb.n_estimators=10", "model.specialists.lgbm.n_estimators=10",
        "model.specialists.et.n_estimators=5", "model.oof_folds=2", "model.probe_estimators=10",
        "model.correctors.model.max_iter=20", "model.n_jobs=1"]


@pytest.mark.slow
def test_train_prints_stage_and_refit_lines_with_eta(data, capsys):
    from carb.commands.train import run_train

    run_train(compose("train", [f"data.path={data}/syn.parquet", f"tracking.uri=sqlite:///{data}/m.db",
                                f"paths.output_dir={data}/out", "print_table=false", "evaluate.figures=false",
                                "register=false", *TINY]))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("carb-train: [")]
    assert any("fit stage 1/3: peak_memory_MB" in ln for ln in err)
    assert any("leave-one-batch-tier-out" in ln for ln in err)
    assert any("extrapolation split 1/" in ln for ln in err)
    assert all(ETA_LINE.match(ln) for ln in err) and sum("ETA" in ln for ln in err) >= len(err) - 1


@pytest.mark.slow
def test_tune_prints_trials_with_best_value(data, capsys):
    from carb.commands.tune import run_tune

    run_tune(compose("tune", [f"data.path={data}/syn.parquet", f"tracking.uri=sqlite:///{data}/m.db",
                              f"tune.storage=sqlite:///{data}/optuna.db", f"paths.output_dir={data}/out",
                              "tune.study=p", "tune.n_trials=2", "tune.blend_trials=2", "tune.members=[xgb]",
                              "tune.targets=[latency_ms]", "tune.log_trials=false", "progress.min_interval_s=0",
                              *TINY[1:]]))
    err = capsys.readouterr().err.splitlines()
    trials = [ln for ln in err if "p.latency_ms.xgb trial" in ln]
    assert len(trials) == 2 and all("best mae" in ln and " ms" in ln for ln in trials)
    assert any(ln.startswith("carb-tune: 4 trials in") for ln in err)


def test_screen_eta_counts_the_steps_that_grow_with_the_grid():
    """A million candidates (carb-screen's plan, on a virtual clock): the first featurized chunk arrives 6 s
    in, after building the grid and starting the workers; its ETA must be about the real minute left, not the
    23 minutes that weighting only the scoring by the grid gave."""
    from carb.commands.screen import GRID_STEP_SHARES, SCORE_ROWS_PER_UNIT, plan_grid_steps

    now = [0.0]
    prog = Progress("carb-screen", 4.0, enabled=False, clock=lambda: now[0])
    prog.begin("loading")
    now[0] = 0.5
    prog.begin("building the grid")
    now[0] = 2.0
    n = 1_000_000
    units = plan_grid_steps(prog, n)
    assert units == n / SCORE_ROWS_PER_UNIT
    assert prog.total == pytest.approx(4.0 + units * (1 + sum(GRID_STEP_SHARES.values())))
    now[0] = 6.0
    prog.begin("featurizing: chunk 1/11 done", units * 0.13 / 11)
    assert 30.0 < prog.eta_s() < 120.0


def test_eta_does_not_climb_while_a_long_unit_runs():
    """Heartbeats inside one long unit: the ETA counts down, then holds at the units after it; it never
    grows with the clock (elapsed / done x remaining climbed 15 -> 35 min on a job of 2 min)."""
    clock, out = Clock(), io.StringIO()
    p = Progress("carb-train", total=10, stream=out, clock=clock, heartbeat_s=5.0)
    p.begin("stage 1", 1)
    clock.t = 10.0
    p.begin("refit", 5)                          # 1 of 10 done in 10 s: 90 s left at that rate
    assert p.eta_s() == pytest.approx(90.0)
    etas = []
    for t in (20.0, 40.0, 80.0, 200.0, 600.0):   # the refit runs long
        clock.t = t
        assert p.beat()
        etas.append(p.eta_s())
    assert etas == sorted(etas, reverse=True) and etas[0] == pytest.approx(80.0)
    assert etas[-1] == pytest.approx(40.0)      # never below the 4 units after the refit, at 10 s each
    assert all("(still running)" in ln and "ETA" in ln for ln in out.getvalue().splitlines()[2:])
