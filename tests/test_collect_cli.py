"""The collector as a command in subprocesses: resume after SIGKILL (no finished row lost or
duplicated), the one-line command-line error, and the README's joblib multirun (``slow``)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from carb.data.io import load_dataset
from carb.design.space import load_space

TINY = ["device=cpu", "measure=cpu", "measure.n_runs=2", "measure.n_warmup=1", "measure.min_window_s=0",
        "measure.cooldown_s=0", "progress=false"]


@pytest.mark.slow
def test_resume_after_kill(tmp_path):
    out = tmp_path / "resume.parquet"
    space = ["space=smoke", "space.batch_sizes=[1]"]
    want = {c.config_id for c in load_space("smoke", ["batch_sizes=[1]"])}
    # 0.25 s timed loops: slow enough to kill the first run in the middle of the space
    args = [sys.executable, "-m", "carb.collect", *space, f"out={out}", f"tracking.uri=sqlite:///{tmp_path}/m.db",
            f"hydra.run.dir={tmp_path}/hydra", *TINY, "measure.min_window_s=0.25"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.time()
    try:
        while time.time() - t0 < 120 and p.poll() is None:
            try:
                if out.exists() and len(pd.read_parquet(out)) >= 2:
                    break
            except Exception:  # noqa: BLE001 - the file is replaced atomically; be safe anyway
                pass
            time.sleep(0.05)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    assert p.returncode == -signal.SIGKILL, "the first run finished before it could be killed"
    before = pd.read_parquet(out)
    assert 2 <= len(before) < len(want)
    r = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    after = load_dataset(out)
    assert after["config_id"].is_unique and set(after["config_id"]) == want
    kept = after.set_index("config_id").loc[before["config_id"]]
    assert (kept["measured_at"].to_numpy() == before["measured_at"].to_numpy()).all()  # finished rows untouched
    assert (kept["latency_ms"].to_numpy() == before["latency_ms"].to_numpy()).all()


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
