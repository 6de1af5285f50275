"""Nothing lost (issue 13, items 1-2): two collectors writing one file keep every finished row, a
sharded collection restarted with another shard.count skips what any shard measured, and a folder
whose shards overlap is readable (newest row kept, files named)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.commands.collect import run_collect
from carb.data.io import DatasetAppender, load_dataset, write_frame

ROOT = Path(__file__).resolve().parent.parent
# The contention guard is off: it judges other processes' load (tests/test_measure_trust.py tests it).
TINY = ["device=cpu", "measure=cpu", "measure.n_runs=2", "measure.n_warmup=1", "measure.min_window_s=0",
        "measure.cooldown_s=0", "measure.guard.enabled=false", "progress.enabled=false", "space=smoke", "space.blocks=[basic]"]


def test_appender_merges_what_another_writer_wrote(tmp_path):
    ref = load_dataset("reference").head(4)
    out = tmp_path / "d.parquet"
    a, b = DatasetAppender(out, ref.head(0)), DatasetAppender(out, ref.head(0))
    a.append(ref.iloc[0].to_dict())
    b.append(ref.iloc[1].to_dict())        # b never saw a's row: it must not drop it
    a.append(ref.iloc[2].to_dict())
    got = load_dataset(out)
    assert sorted(got["config_id"]) == sorted(ref["config_id"].iloc[:3])


@pytest.mark.slow
def test_two_collectors_on_one_file_keep_all_rows(tmp_path):
    out = tmp_path / "both.parquet"
    cmd = [sys.executable, "-m", "carb.collect", f"out={out}", *TINY, f"tracking.uri=sqlite:///{tmp_path}/m.db",
           "resume.mix_protocols=true"]
    procs = [subprocess.Popen([*cmd, f"space.batch_sizes=[{bs}]", f"hydra.run.dir={tmp_path}/run{bs}"], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for bs in (1, 2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    df = load_dataset(out)
    assert sorted(df["batch_size"].value_counts().to_dict().items()) == [(1, 2), (2, 2)]


def test_restart_with_another_shard_count_skips_measured_configs(tmp_path):
    db = f"sqlite:///{tmp_path}/m.db"
    folder = tmp_path / "shards"
    first = run_collect(compose("collect", [f"out={folder}", "shard.count=2", "shard.index=0", f"tracking.uri={db}", *TINY]))
    assert first["n_ok"] == 2
    again = [run_collect(compose("collect", [f"out={folder}", "shard.count=3", f"shard.index={i}",
                                             f"tracking.uri={db}", *TINY]))["n_measured"] for i in range(3)]
    assert sum(again) == 4 - 2                      # only what shard 0 of 2 did not measure
    df = load_dataset(folder)
    assert len(df) == 4 and df["config_id"].is_unique


def test_folder_with_overlapping_shards_keeps_the_newest(tmp_path):
    ref = load_dataset("reference").head(3)
    old = ref.copy()
    old["measured_at"] = "2026-01-01T00:00:00+00:00"
    new = ref.head(1).copy()
    new["measured_at"] = "2026-06-01T00:00:00+00:00"
    new["latency_ms"] = 123.0
    write_frame(old, tmp_path / "shard-0-of-1.parquet")
    write_frame(new, tmp_path / "shard-0-of-2.parquet")
    with pytest.warns(UserWarning, match=r"1 configuration\(s\) measured in more than one file \(shard-0-of-1.parquet, "
                                         r"shard-0-of-2.parquet\)"):
        df = load_dataset(tmp_path)
    assert len(df) == 3 and df["config_id"].is_unique
    assert df.set_index("config_id").loc[new["config_id"].iloc[0], "latency_ms"] == 123.0
    assert isinstance(df, pd.DataFrame)


def test_full_disk_is_one_line_and_keeps_the_rows(tmp_path, monkeypatch):
    import errno

    import carb.data.io as io
    from carb.errors import DatasetError

    out = tmp_path / "full.parquet"
    real = io.write_frame
    calls = {"n": 0}

    def fill_up(df, path):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(df, path)

    monkeypatch.setattr(io, "write_frame", fill_up)
    with pytest.raises(DatasetError) as e:
        run_collect(compose("collect", [f"out={out}", f"tracking.uri=sqlite:///{tmp_path}/m.db", *TINY]))
    assert "No space left on device" in str(e.value) and "1 row(s) measured before it are intact" in str(e.value)
    assert len(load_dataset(out)) == 1
