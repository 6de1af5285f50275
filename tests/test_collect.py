"""The collector on the real CPU backend: end to end, resume after a kill, oom/error rows, sharding,
bad input."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from carb.cli import compose
from carb.collect import run_collect, shard_configs
from carb.dataset import load_dataset
from carb.errors import CarbError, ConfigError, DatasetError
from carb.space import load_space

TINY = ["device=cpu", "measure=cpu", "measure.n_runs=2", "measure.n_warmup=1", "measure.min_window_s=0",
        "measure.cooldown_s=0", "progress=false"]


def _cfg(tmp_path, *extra):
    return compose("collect", ["space=smoke", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *TINY, *extra])


def test_smoke_end_to_end(tmp_path):
    out = tmp_path / "smoke.parquet"
    r = run_collect(_cfg(tmp_path, f"out={out}"))
    df = load_dataset(out)
    n = len(load_space("smoke"))
    assert len(df) == n == r["n_ok"] and (df["status"] == "ok").all()
    assert (df["latency_ms"] > 0).all() and df["energy_J"].isna().all() and df["missing_reason"].notna().all()
    import mlflow

    run = mlflow.get_run(r["run_id"])
    assert run.data.metrics["n_ok"] == n and run.data.metrics["n_error"] == 0
    assert 0 <= r["overhead_fraction"] < 1
    again = run_collect(_cfg(tmp_path, f"out={out}"))  # resume: nothing left to do
    assert again["n_measured"] == 0 and len(load_dataset(out)) == n


def test_resume_after_kill(tmp_path):
    out = tmp_path / "resume.parquet"
    args = [sys.executable, "-m", "carb.collect", "space=smoke", f"out={out}",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db", *TINY, "measure.n_runs=20"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.time()
    try:
        while time.time() - t0 < 120:
            if out.exists():
                try:
                    if len(pd.read_parquet(out)) >= 2:
                        break
                except Exception:  # noqa: BLE001 - never partial (atomic rename), but be safe
                    pass
            if p.poll() is not None:
                break
            time.sleep(0.1)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    before = pd.read_parquet(out)
    assert 2 <= len(before) < len(load_space("smoke")) or p.returncode == 0
    subprocess.run(args, check=True, capture_output=True, timeout=300)
    after = load_dataset(out)
    assert len(after) == len(load_space("smoke")) and after["config_id"].is_unique
    kept = after.set_index("config_id").loc[before["config_id"], "measured_at"]
    assert (kept.to_numpy() == before["measured_at"].to_numpy()).all()  # finished rows untouched


def test_oom_and_error_rows(tmp_path, monkeypatch):
    import carb.collect as C

    real = C._build_model
    calls = {"n": 0}

    def flaky(arch):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if calls["n"] == 2:
            raise ValueError("weird layer")
        return real(arch)

    monkeypatch.setattr(C, "_build_model", flaky)
    out = tmp_path / "flaky.parquet"
    r = run_collect(_cfg(tmp_path, f"out={out}"))
    df = load_dataset(out)
    assert r["n_oom"] == 1 and r["n_error"] == 1 and r["n_ok"] == len(df) - 2
    assert df.loc[df["status"] == "error", "error"].str.contains("weird layer").all()
    assert df.loc[df["status"] != "ok", "latency_ms"].isna().all()


def test_shards_are_disjoint_and_load_as_one(tmp_path):
    cfgs = load_space("smoke")
    a, b = shard_configs(cfgs, 0, 0, 2), shard_configs(cfgs, 0, 1, 2)
    assert not {c.config_id for c in a} & {c.config_id for c in b}
    assert len(a) + len(b) == len(cfgs)
    folder = tmp_path / "shards"
    for i in (0, 1):
        run_collect(_cfg(tmp_path, f"out={folder}", f"shard.index={i}", "shard.count=2",
                         "space.batch_sizes=[1]"))
    df = load_dataset(folder)
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["shard-0-of-2.parquet", "shard-1-of-2.parquet"]
    assert len(df) == len(load_space("smoke", ["batch_sizes=[1]"])) and df["config_id"].is_unique


def test_joblib_multirun_from_the_readme(tmp_path):
    folder = tmp_path / "mr"
    cmd = [sys.executable, "-m", "carb.collect", "-m", "shard.index=0,1", "shard.count=2", "hydra/launcher=joblib",
           "space=smoke", "space.batch_sizes=[1]", f"out={folder}", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
           f"paths.output_dir={tmp_path}/outputs", *TINY]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(load_dataset(folder)) == len(load_space("smoke", ["batch_sizes=[1]"]))


@pytest.mark.parametrize("extra, exc, needle", [
    (["shard.index=2", "shard.count=2"], ConfigError, "shard.index"),
    (["space.batch_sizes=[]"], ConfigError, "batch_sizes"),
    (["out=/proc/carb-no/x.parquet"], ConfigError, "not writable"),
    (["out=data.json"], ConfigError, "suffix"),
])
def test_bad_input(tmp_path, extra, exc, needle):
    with pytest.raises(exc, match=needle):
        run_collect(_cfg(tmp_path, f"out={tmp_path}/x.parquet", *extra))


def test_foreign_file_untouched(tmp_path):
    out = tmp_path / "other.parquet"
    run_collect(_cfg(tmp_path, f"out={out}", "space.batch_sizes=[1]", "space.blocks=[basic]"))
    df = pd.read_parquet(out)
    df["device_name"] = "Some Other GPU"
    df["device_kind"] = "cuda"
    df.to_parquet(out, index=False)
    before = out.read_bytes()
    with pytest.raises(DatasetError, match="Some Other GPU"):
        run_collect(_cfg(tmp_path, f"out={out}"))
    assert out.read_bytes() == before
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(DatasetError, match="not a CARB dataset"):
        run_collect(_cfg(tmp_path, f"out={bad}"))
    assert bad.read_text() == "a,b\n1,2\n"


def test_command_line_error_is_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "carb.collect", "space=smoke", "shard.index=5", "shard.count=2",
                        f"out={tmp_path}/x", f"tracking.uri=sqlite:///{tmp_path}/m.db", *TINY],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("carb-collect: error: shard.index")
    assert issubclass(ConfigError, CarbError)
