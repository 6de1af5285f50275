"""Hydra job names and run folders are per command (conf/hydra/output/carb.yaml):
``<paths.output_dir>/<command>/<YYYY-mm-dd_HH-MM-SS>/`` for a run, ``.../<time>-multirun/<job>/`` for a
multirun, job name = the command (so the log is ``<command>.log``); never ``cli``, never
``outputs/<date>/<time>/``."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from carb.commands.cli import CONF_DIR, compose, hydra_run_dir

COMMANDS = ["collect", "import", "calibrate", "train", "tune", "promote", "characterize", "screen", "probe"]
STAMP = r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d"
ENV = {**os.environ, "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


def test_every_primary_config_is_a_command():
    primaries = sorted(p.stem for p in Path(CONF_DIR).glob("*.yaml"))
    # gpu_run.yaml: the settings of python -m carb.measure.gpu_run (read with pyyaml; no Hydra on a lent GPU)
    assert primaries == sorted([*COMMANDS, "gpu_run"])


@pytest.mark.parametrize("command", COMMANDS)
def test_job_name_and_folders_per_command(command, tmp_path):
    cfg = compose(command, [f"paths.output_dir={tmp_path}/out"], return_hydra_config=True)
    h = cfg.hydra
    assert h.job.name == command
    run_dir, sweep_dir = h.run.dir, h.sweep.dir
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/out/{command}/{STAMP}", run_dir), run_dir
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/out/{command}/{STAMP}-multirun", sweep_dir), sweep_dir
    subdir = OmegaConf.to_container(h.sweep, resolve=False)["subdir"]
    # one folder per job of a multirun; tune's name the worker (-m tune.worker=0,1)
    assert subdir == ("worker${tune.worker}" if command == "tune" else "${hydra.job.num}")
    log = OmegaConf.to_container(h.job_logging, resolve=False)["handlers"]["file"]["filename"]
    assert log == "${hydra.runtime.output_dir}/${hydra.job.name}.log"  # <run folder>/<command>.log


def test_default_folders_are_relative_outputs():
    h = compose("train", return_hydra_config=True).hydra
    assert re.fullmatch(rf"outputs/train/{STAMP}", h.run.dir)


def test_no_run_folder_when_composed():
    compose("screen")
    assert hydra_run_dir() is None


def _leaves(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_real_command_run_folder_and_log(tmp_path):
    """`python -m carb.promote` from a fresh directory: one folder outputs/promote/<time>/ with the
    run record and promote.log (it stops with the one-line error: the store has no model)."""
    r = subprocess.run([sys.executable, "-m", "carb.promote", f"tracking.uri=sqlite:///{tmp_path}/m.db"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300, env=ENV)
    assert r.returncode == 2 and "carb-promote: error:" in r.stderr, r.stderr[-1500:]
    runs = list((tmp_path / "outputs").iterdir())
    assert [p.name for p in runs] == ["promote"]
    (run,) = list(runs[0].iterdir())
    assert re.fullmatch(STAMP, run.name)
    assert {".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "promote.log"} <= set(_leaves(run))
    hydra_cfg = yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert hydra_cfg["job"]["name"] == "promote"
    assert hydra_cfg["runtime"]["output_dir"] == str(run)


SCRIPT = textwrap.dedent("""
    from carb.commands.cli import hydra_command, hydra_run_dir

    def show(cfg):
        print("RUN_DIR", hydra_run_dir())

    hydra_command("promote")(show)()
""")


def test_run_and_multirun_folders_seen_by_the_command(tmp_path):
    """What a command sees as its folder (cli.hydra_run_dir) in a run and in each job of a multirun."""
    def run(*args):
        r = subprocess.run([sys.executable, "-c", SCRIPT, *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120, env=ENV)
        assert r.returncode == 0, r.stderr[-1500:]
        return [Path(ln.split(" ", 1)[1]) for ln in r.stdout.splitlines() if ln.startswith("RUN_DIR ")]

    (one,) = run()
    assert one.parent == tmp_path / "outputs" / "promote" and re.fullmatch(STAMP, one.name)
    assert (one / "promote.log").exists()
    jobs = run("-m", "promote.alias=a,b")
    assert [j.name for j in jobs] == ["0", "1"] and jobs[0].parent == jobs[1].parent
    assert jobs[0].parent.parent == tmp_path / "outputs" / "promote"
    assert re.fullmatch(rf"{STAMP}-multirun", jobs[0].parent.name)
    assert (jobs[0].parent / "multirun.yaml").exists() and (jobs[1] / "promote.log").exists()
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["promote"]


def test_screen_run_folder_follows_screen_output_dir(tmp_path):
    """carb-screen writes its files under screen.output_dir: its run records go there too."""
    h = compose("screen", [f"screen.output_dir={tmp_path}/s"], return_hydra_config=True).hydra
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/s/{STAMP}", h.run.dir)
    assert re.fullmatch(rf"{re.escape(str(tmp_path))}/s/{STAMP}-multirun", h.sweep.dir)
