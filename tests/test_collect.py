"""The collector on the real CPU backend, in process: a smoke collection end to end, oom/error rows,
sharding, bad input (nothing already measured is touched). The subprocess tests (resume after SIGKILL,
the README's joblib multirun, the one-line command-line error) are in test_collect_cli.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.commands.collect import run_collect
from carb.measure.collector import shard_configs
from carb.data.io import load_dataset
from carb.errors import ConfigError, DatasetError
from carb.design.space import load_space

# The contention guard is off: it judges other processes' load (tests/test_measure_trust.py tests it).
TINY = ["device=cpu", "measure=cpu", "measure.n_runs=2", "measure.n_warmup=1", "measure.min_window_s=0",
        "measure.cooldown_s=0", "measure.guard.enabled=false", "progress.enabled=false"]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """One SQLite MLflow store for the module (schema creation costs ~1 s per fresh store)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


def _cfg(db: str, *extra):
    return compose("collect", ["space=smoke", f"tracking.uri={db}", *TINY, *extra])


@pytest.fixture(scope="module")
def measured(tmp_path_factory, db) -> Path:
    """A real 2-row CPU dataset (smoke, basic blocks, batch 1) to copy into tests."""
    out = tmp_path_factory.mktemp("measured") / "two.parquet"
    r = run_collect(_cfg(db, f"out={out}", "space.batch_sizes=[1]", "space.blocks=[basic]"))
    assert r["n_ok"] == 2
    return out


def test_smoke_end_to_end(tmp_path, db):
    import mlflow

    out = tmp_path / "smoke.parquet"
    r = run_collect(_cfg(db, f"out={out}"))
    df = load_dataset(out)  # validates the schema
    n = len(load_space("smoke"))
    assert len(df) == n == r["n_ok"] and (df["status"] == "ok").all() and df["config_id"].is_unique
    assert (df["latency_ms"] > 0).all() and (df["peak_memory_MB"] > 0).all() and (df["threads"] == 1).all()
    assert (df["n_runs"] == 2).all() and (df["device_kind"] == "cpu").all()
    # measure.repeat (2 passes by default): every row's latency from two windows, their spread kept (issue 44)
    assert (df["latency_passes"] == 2).all() and (df["latency_repeat_spread"] >= 0).all()
    assert r["n_repeat_windows"] == n and r["n_repeat_failed"] == 0
    assert df["energy_J"].isna().all() and df["missing_reason"].str.contains("energy_J").all()
    # bigger batch, more peak memory (same architecture)
    piv = df.pivot_table(index=["block", "depth", "early_downsample"], columns="batch_size",
                         values="peak_memory_MB")
    assert (piv[2] > piv[1]).all()
    run = mlflow.get_run(r["run_id"])
    m = run.data.metrics
    assert (m["n_ok"], m["n_oom"], m["n_error"]) == (n, 0, 0) and m["duration_s"] > 0
    assert run.data.params["seed"] == "0" and run.data.tags["stopped"] == "complete"
    assert len(run.inputs.dataset_inputs) == 1  # the dataset logged as a run input
    from carb.measure.fingerprint import session_id
    if session_id():   # Linux: every row and the run name the boot they were measured in
        assert (df["session_id"] == session_id()).all() and run.data.tags["session_id"] == session_id()
        assert r["session_id"] == session_id()
    assert 0 <= r["overhead_fraction"] < 1 and r["overhead_fraction"] <= r["strict_overhead_fraction"] < 1
    ph = r["phases_s"]
    assert ph["timed_loop_s"] > 0 and ph["build_model_s"] > 0 and ph["write_s"] > 0
    assert sum(ph.values()) <= r["loop_s"] and m["phase_timed_loop_s"] == pytest.approx(ph["timed_loop_s"])
    again = run_collect(_cfg(db, f"out={out}"))  # restart: nothing left to do, nothing duplicated
    assert again["n_measured"] == 0 and again["n_existing"] == n and len(load_dataset(out)) == n


def test_oom_and_error_rows(tmp_path, db, monkeypatch):
    """A model whose building runs out of memory and a meter that fails give oom / error rows with the
    message; the other configurations are measured."""
    import mlflow

    import carb.commands.collect as C
    from carb.measure.cpu import CpuMeter

    cfgs = shard_configs(load_space("smoke", ["batch_sizes=[1]"]), 0)
    oom_id, err_id = cfgs[0].config_id, cfgs[1].config_id
    real_build, real_measure = C._build_model, CpuMeter.measure

    def build(arch):
        if arch.config_id == oom_id:
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 9 GB")
        return real_build(arch)

    def measure(self, model, arch):
        if arch.config_id == err_id:
            raise ValueError("weird layer")
        return real_measure(self, model, arch)

    monkeypatch.setattr(C, "_build_model", build)
    monkeypatch.setattr(CpuMeter, "measure", measure)
    out = tmp_path / "flaky.parquet"
    r = run_collect(_cfg(db, f"out={out}", "space.batch_sizes=[1]"))
    df = load_dataset(out).set_index("config_id")
    assert (r["n_oom"], r["n_error"], r["n_ok"]) == (1, 1, len(cfgs) - 2) and len(df) == len(cfgs)
    assert df.loc[oom_id, "status"] == "oom" and "can't allocate memory" in df.loc[oom_id, "error"]
    assert df.loc[err_id, "status"] == "error" and df.loc[err_id, "error"] == "ValueError: weird layer"
    bad = df.loc[[oom_id, err_id]]
    assert bad["latency_ms"].isna().all() and bad["energy_J"].isna().all()
    assert bad["missing_reason"].str.startswith("not measured").all()
    m = mlflow.get_run(r["run_id"]).data.metrics
    assert (m["n_ok"], m["n_oom"], m["n_error"]) == (len(cfgs) - 2, 1, 1)


def test_shards_are_disjoint_and_load_as_one(tmp_path, db):
    cfgs = load_space("smoke")
    a, b = shard_configs(cfgs, 0, 0, 2), shard_configs(cfgs, 0, 1, 2)
    assert not {c.config_id for c in a} & {c.config_id for c in b}
    assert {c.config_id for c in a} | {c.config_id for c in b} == {c.config_id for c in cfgs}
    assert [c.config_id for c in shard_configs(cfgs, 1, 0, 2)] != [c.config_id for c in a]  # seed matters
    folder = tmp_path / "shards"
    for i in (0, 1):
        run_collect(_cfg(db, f"out={folder}", f"shard.index={i}", "shard.count=2", "space.batch_sizes=[1]"))
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["shard-0-of-2.parquet", "shard-1-of-2.parquet"]
    parts = [set(pd.read_parquet(folder / f"shard-{i}-of-2.parquet")["config_id"]) for i in (0, 1)]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    df = load_dataset(folder)
    want = {c.config_id for c in load_space("smoke", ["batch_sizes=[1]"])}
    assert set(df["config_id"]) == want and len(df) == len(want)


@pytest.mark.parametrize("extra, exc, needle", [
    (["shard.index=2", "shard.count=2"], ConfigError, "shard.index: must satisfy 0 <= index < count=2"),
    (["shard.index=0", "shard.count=0"], ConfigError, "shard.count"),
    (["space.batch_sizes=[]"], ConfigError, "batch_sizes"),
    (["+space.max_flops=1"], ConfigError, "no configurations"),
    (["max_minutes=-1"], ConfigError, "max_minutes"),
])
def test_bad_input_leaves_existing_file_untouched(tmp_path, db, measured, extra, exc, needle):
    out = tmp_path / "kept.parquet"
    shutil.copy(measured, out)
    before = out.read_bytes()
    with pytest.raises(exc, match=needle) as ei:
        run_collect(_cfg(db, f"out={out}", *extra))
    assert "\n" not in str(ei.value)
    assert out.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["kept.parquet"]


@pytest.mark.parametrize("out, needle", [
    ("/proc/carb-no/x.parquet", "not writable"),
    ("{tmp}/data.json", "suffix"),
    ("{tmp}/file.parquet/x.parquet", "not writable"),  # parent is a file
])
def test_bad_out(tmp_path, db, out, needle):
    (tmp_path / "file.parquet").write_bytes(b"keep")
    with pytest.raises(ConfigError, match=needle) as ei:
        run_collect(_cfg(db, "out=" + out.format(tmp=tmp_path)))
    assert "\n" not in str(ei.value) and (tmp_path / "file.parquet").read_bytes() == b"keep"


def test_file_of_another_device_or_schema_untouched(tmp_path, db, measured):
    out = tmp_path / "other.parquet"
    df = pd.read_parquet(measured)
    df["device_name"] = "Some Other GPU"
    df["device_kind"] = "cuda"
    df.to_parquet(out, index=False)
    before = out.read_bytes()
    with pytest.raises(DatasetError, match="holds rows of device 'Some Other GPU'"):
        run_collect(_cfg(db, f"out={out}"))
    assert out.read_bytes() == before
    for name, text in (("bad.csv", "a,b\n1,2\n"), ("junk.parquet", "not parquet")):
        bad = tmp_path / name
        bad.write_text(text)
        with pytest.raises(DatasetError, match="not a CARB dataset") as ei:
            run_collect(_cfg(db, f"out={bad}"))
        assert "\n" not in str(ei.value) and bad.read_text() == text
    extra = tmp_path / "extra.parquet"
    pd.read_parquet(measured).assign(my_column=1.0).to_parquet(extra, index=False)
    before = extra.read_bytes()
    with pytest.raises(DatasetError, match="another schema"):
        run_collect(_cfg(db, f"out={extra}"))
    assert extra.read_bytes() == before
