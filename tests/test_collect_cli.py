"""The collector as a command in subprocesses: resume after a SIGKILL in the middle of a measurement or
of a file write (the finished row is kept, valid and not measured again; only the rest is measured), the
one-line command-line error, and the README's joblib multirun (``slow``)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from carb.data.io import load_dataset
from carb.design.space import load_space

# The contention guard is off: it judges other processes' load (tests/test_measure_trust.py tests it).
TINY = ["device=cpu", "measure=cpu", "measure.n_runs=2", "measure.n_warmup=1", "measure.min_window_s=0",
        "measure.cooldown_s=0", "measure.guard.enabled=false", "progress.enabled=false"]


# carb-collect that hangs at a chosen point of its SECOND configuration, after touching a marker file:
# ``measure`` inside the measurement, ``write`` halfway through writing the dataset file (half of the
# new file's bytes are on disk). The test kills it only once the marker exists, so the SIGKILL always
# lands at that point, whatever the machine's speed (no race with the collector finishing).
HANG = """
import io, os, time
from pathlib import Path

import pandas as pd
from carb.measure.cpu import CpuMeter

where, marker = os.environ["CARB_TEST_HANG"], Path(os.environ["CARB_TEST_HANG_MARKER"])
calls = {"measure": 0, "write": 0}


def hang():
    marker.write_text("hanging")
    time.sleep(600)


real_measure, real_to_parquet = CpuMeter.measure, pd.DataFrame.to_parquet


def measure(self, model, arch):
    calls["measure"] += 1
    if where == "measure" and calls["measure"] == 2:
        hang()
    return real_measure(self, model, arch)


def to_parquet(self, path, *args, **kwargs):
    calls["write"] += 1
    if where == "write" and calls["write"] == 2:
        buf = io.BytesIO()
        real_to_parquet(self, buf, *args, **kwargs)
        with open(path, "wb") as fh:
            fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        hang()
    return real_to_parquet(self, path, *args, **kwargs)


CpuMeter.measure, pd.DataFrame.to_parquet = measure, to_parquet
from carb.commands.collect import main

main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["measure", "write"])
def test_resume_after_kill(tmp_path, where):
    import mlflow

    out = tmp_path / "resume.parquet"
    want = {c.config_id for c in load_space("smoke", ["batch_sizes=[1]"])}
    assert len(want) >= 3
    over = ["space=smoke", "space.batch_sizes=[1]", f"out={out}", f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"hydra.run.dir={tmp_path}/hydra", *TINY]
    (tmp_path / "hang_collect.py").write_text(HANG)
    marker = tmp_path / "hanging"
    env = {**os.environ, "CARB_TEST_HANG": where, "CARB_TEST_HANG_MARKER": str(marker)}
    p = subprocess.Popen([sys.executable, str(tmp_path / "hang_collect.py"), *over], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.time()
    try:
        while time.time() - t0 < 180 and p.poll() is None and not marker.exists():
            time.sleep(0.05)
        assert marker.exists(), "the collector never reached the hang: " + (
            p.stderr.read().decode()[-2000:] if p.poll() is not None else "timed out")
        os.killpg(p.pid, signal.SIGKILL)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        p.stderr.close()
    assert p.returncode == -signal.SIGKILL
    before = load_dataset(out)       # still a valid dataset holding the finished row (never a half file)
    assert len(before) == 1 and before["status"].tolist() == ["ok"] and set(before["config_id"]) <= want
    r = subprocess.run([sys.executable, "-m", "carb.collect", *over], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    after = load_dataset(out)
    assert after["config_id"].is_unique and set(after["config_id"]) == want
    kept = after.set_index("config_id").loc[before["config_id"]]
    assert (kept["measured_at"].to_numpy() == before["measured_at"].to_numpy()).all()  # finished rows kept
    # the killed run's row had its first pass only (measure.repeat.passes=2): the resume measured its second
    # pass, so its latency is the mean of the kept window and the new one: half the spread from the kept one
    assert (before["latency_passes"] == 1).all() and (kept["latency_passes"] == 2).all()
    np.testing.assert_allclose(np.abs(kept["latency_ms"].to_numpy() - before["latency_ms"].to_numpy()),
                               kept["latency_ms"].to_numpy() * kept["latency_repeat_spread"].to_numpy() / 2, rtol=1e-9)
    # the resume measured only the rest: one finished run (the killed one never logged its metrics)
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/m.db")
    runs = mlflow.search_runs(search_all_experiments=True, filter_string="attributes.status = 'FINISHED'")
    assert len(runs) == 1
    m = runs.iloc[0]
    assert (m["metrics.n_existing"], m["metrics.n_measured"]) == (1, len(want) - 1)
    assert m["metrics.n_rows"] == len(want) and m["tags.stopped"] == "complete"


def test_command_line_error_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "carb.collect", "space=smoke", "shard.index=5", "shard.count=2",
                        f"out={tmp_path}/x", f"tracking.uri=sqlite:///{tmp_path}/m.db",
                        f"hydra.run.dir={tmp_path}/hydra", *TINY], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        "carb-collect: error: shard.index: must satisfy 0 <= index < count=2, got 5"]
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_joblib_multirun_from_the_readme(tmp_path):
    """`carb-collect -m shard.index=0,1 shard.count=2 hydra/launcher=joblib ...` (~15 s on 2 cores)."""
    folder = tmp_path / "mr"
    cmd = [sys.executable, "-m", "carb.collect", "-m", "shard.index=0,1", "shard.count=2", "hydra/launcher=joblib",
           "space=smoke", "space.batch_sizes=[1]", f"out={folder}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
           f"hydra.sweep.dir={tmp_path}/multirun", *TINY]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["shard-0-of-2.parquet", "shard-1-of-2.parquet"]
    df = load_dataset(folder)
    assert set(df["config_id"]) == {c.config_id for c in load_space("smoke", ["batch_sizes=[1]"])}
    assert df["config_id"].is_unique


@pytest.mark.slow
def test_sigterm_ends_the_run_killed_with_the_rows_so_far(tmp_path):
    """SIGTERM in the middle of a measurement: exit 143, the finished row kept, the MLflow run ended as
    KILLED (not left RUNNING) with the counts so far logged."""
    import mlflow

    out = tmp_path / "term.parquet"
    over = ["space=smoke", "space.batch_sizes=[1]", f"out={out}", f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"hydra.run.dir={tmp_path}/hydra", *TINY]
    (tmp_path / "hang_collect.py").write_text(HANG)
    marker = tmp_path / "hanging"
    env = {**os.environ, "CARB_TEST_HANG": "measure", "CARB_TEST_HANG_MARKER": str(marker)}
    p = subprocess.Popen([sys.executable, str(tmp_path / "hang_collect.py"), *over], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while time.time() - t0 < 180 and p.poll() is None and not marker.exists():
        time.sleep(0.05)
    assert marker.exists()
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err[-2000:]
    assert f"terminated (SIGTERM); finished work is in {out} (resume: the same carb-collect command" in err
    assert len(load_dataset(out)) == 1
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/m.db")
    exp = mlflow.get_experiment_by_name("carb-collect")
    (run,) = mlflow.search_runs([exp.experiment_id], output_format="list")
    assert run.info.status == "KILLED" and run.data.metrics["n_ok"] == 1
