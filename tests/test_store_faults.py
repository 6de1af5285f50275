"""Every command checks its stores before any work (issue 33 items 2 and 5): a damaged ``mlflow.db``
(random bytes, or a valid store cut in half), a damaged Optuna storage and a read-only store are one
line on stderr and exit 2, in seconds, with nothing written. The real commands run as subprocesses."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from carb.files import sqlite_problem

BIN = Path(sys.executable).parent
DROP = "-dac_override,-dac_read_search"


def _run(cmd: str, *args: str, cwd: Path, as_reader: bool = False) -> subprocess.CompletedProcess:
    argv = [str(BIN / f"carb-{cmd}"), *args, f"hydra.run.dir={cwd}/run"]
    if as_reader and os.geteuid() == 0:   # root ignores file modes unless it drops these capabilities
        argv = [shutil.which("setpriv") or "setpriv", f"--bounding-set={DROP}", f"--inh-caps={DROP}", "--", *argv]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def _one_error_line(r: subprocess.CompletedProcess, cmd: str) -> str:
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"carb-{cmd}: error: "), r.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def made_store(template_store) -> Path:
    """A real, empty MLflow store made by CARB (once per session: MLflow's migrations take seconds;
    tests/conftest.py's template, which carb.tracking's own set-up made)."""
    return template_store


@pytest.fixture
def store(made_store, tmp_path) -> Path:
    """A copy of :func:`made_store` under ``tmp_path/mlruns``."""
    db = tmp_path / "mlruns" / "mlflow.db"
    db.parent.mkdir()
    shutil.copy(made_store, db)
    return db


def test_sqlite_problem_names_each_fault(tmp_path):
    assert sqlite_problem(tmp_path / "new" / "x.db") is None                        # can be created
    bad = tmp_path / "bad.db"
    bad.write_bytes(os.urandom(4096))
    assert "damaged" in sqlite_problem(bad) and "not a database" in sqlite_problem(bad)
    assert "folder" in sqlite_problem(tmp_path)
    (tmp_path / "empty.db").write_bytes(b"")
    assert sqlite_problem(tmp_path / "empty.db") is None                             # SQLite's own new file


@pytest.mark.parametrize("cmd,args", [
    ("promote", []),
    ("import", ["out={d}/never.parquet"]),
    ("collect", ["space=smoke", "out={d}/never.parquet"]),
    pytest.param("screen", [], marks=pytest.mark.slow),
    pytest.param("characterize", [], marks=pytest.mark.slow),
])
def test_a_damaged_store_is_one_line_before_any_work(tmp_path, cmd, args):
    db = tmp_path / "mlruns" / "mlflow.db"
    db.parent.mkdir()
    db.write_bytes(os.urandom(8192))
    r = _run(cmd, f"tracking.uri=sqlite:///{db}", *[a.format(d=tmp_path) for a in args], cwd=tmp_path)
    line = _one_error_line(r, cmd)
    assert "damaged" in line and str(db) in line and ".damaged" in line     # what is wrong and the way out
    assert not (tmp_path / "never.parquet").exists()                        # nothing written first


def test_a_store_cut_in_half_is_damaged(tmp_path, store):
    db = store
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    line = _one_error_line(_run("promote", f"tracking.uri=sqlite:///{db}", cwd=tmp_path), "promote")
    assert "damaged" in line and "malformed" in line


def test_a_damaged_optuna_storage_is_one_line(tmp_path):
    storage = tmp_path / "optuna.db"
    storage.write_bytes(os.urandom(8192))
    r = _run("tune", f"tracking.uri=sqlite:///{tmp_path}/mlruns/mlflow.db", f"tune.storage=sqlite:///{storage}",
             cwd=tmp_path)
    line = _one_error_line(r, "tune")
    assert "tune.storage" in line and "damaged" in line


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root needs setpriv to feel file modes")
def test_a_read_only_store_refuses_a_writing_command_before_any_work(tmp_path, store):
    db = store
    modes = {p: p.stat().st_mode for p in [db.parent, *db.parent.iterdir()]}
    for p, m in modes.items():
        p.chmod(m & ~0o222)
    try:
        r = _run("promote", f"tracking.uri=sqlite:///{db}", cwd=tmp_path, as_reader=True)
    finally:
        for p, m in modes.items():
            p.chmod(m)
    line = _one_error_line(r, "promote")
    assert "read-only" in line and "carb-promote writes to it" in line


def test_quickstart_checks_the_store_first(tmp_path):
    db = tmp_path / "mlruns" / "mlflow.db"
    db.parent.mkdir()
    db.write_bytes(os.urandom(8192))
    r = subprocess.run([str(BIN / "carb-quickstart"), f"tracking.uri=sqlite:///{db}", f"paths.output_dir={tmp_path}/o"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    line = _one_error_line(r, "quickstart")
    assert "damaged" in line and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_ctrl_c_in_quickstart_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C while carb-quickstart trains: exit 130 and one line (it was a 42-line traceback). The signal
    is sent once the command says it is training (SIGINT reset to its default in the child: a run started
    in the background inherits it ignored)."""
    import signal

    p = subprocess.Popen([str(BIN / "carb-quickstart"), f"tracking.uri=sqlite:///{tmp_path}/mlruns/mlflow.db",
                          f"paths.output_dir={tmp_path}/o"], cwd=tmp_path, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in p.stdout:
            if "training the fast preset" in line:
                break
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 130, err[-2000:]
    lines = [ln for ln in err.splitlines() if ln.startswith("carb-quickstart:") and "interrupted" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]


def _fit_parts():
    import pandas as pd

    frame = pd.DataFrame({"x": [1.0, 2.0]})
    return {"cascade": {"fitted": True}, "full": frame, "test": frame, "metrics": {}, "sizes": [2], "device": "d",
            "data_path": "p", "preset": "fast", "run_name": "r", "reg_name": None, "tags": {}, "split": "s",
            "config": {}, "sweep": {},
            "extras": {"pred": pd.DataFrame({"pred_y": [1.0, 2.0]}), "importances": {}}}


def test_a_full_disk_leaves_no_half_written_fit(tmp_path, monkeypatch):
    """save_fit writes into a temporary folder renamed at the end: a write that fails (ENOSPC, injected:
    a tmpfs of a chosen size needs root and mount) leaves neither a truncated cascade.pkl nor the folder."""
    import errno

    import pandas as pd

    from carb.commands.train import save_fit, save_fit_or_warn

    calls = []

    def full_disk(self, path, *a, **k):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, path, *a, **k)

    real = pd.DataFrame.to_parquet
    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk)
    folder = tmp_path / "run" / "fit"
    with pytest.raises(OSError):
        save_fit(_fit_parts(), folder)
    assert not folder.exists() and list((tmp_path / "run").iterdir()) == []
    calls.clear()
    assert save_fit_or_warn(_fit_parts(), folder) is None          # a warning; the caller logs to the store
    calls.clear()
    monkeypatch.setattr(pd.DataFrame, "to_parquet", real)
    assert save_fit(_fit_parts(), folder) == folder and (folder / "fit.json").exists()
    assert (folder / "cascade.pkl").stat().st_size > 0


def test_a_dead_server_stops_train_before_the_fit(tmp_path):
    """Issue 33 item 7: carb-train with no server at tracking.uri failed only after the whole fit."""
    r = _run("train", "tracking.uri=http://127.0.0.1:9", cwd=tmp_path)
    line = _one_error_line(r, "train")
    assert "no MLflow server answers" in line and not list(tmp_path.rglob("cascade.pkl"))
