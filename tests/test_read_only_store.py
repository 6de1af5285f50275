"""A read-only store (issue 13 item 8): reading commands work on a store whose folder, mlflow.db and
artifacts nobody may write. Root ignores file modes, so as root the commands run under ``setpriv``
without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH: then the modes bind root as they bind anyone."""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
DROP = "-dac_override,-dac_read_search"


def _as_reader(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run ``argv`` so that file modes bind it (as root: without the capabilities that bypass them)."""
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        assert setpriv, "setpriv (util-linux) is needed to test a read-only store as root"
        argv = [setpriv, f"--bounding-set={DROP}", f"--inh-caps={DROP}", "--", *argv]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=240, env=env)


def _chmod_tree(root: Path, writable: bool) -> None:
    """Remove (or give back) the write bits of ``root`` and everything under it."""
    for p in [root, *root.rglob("*")]:
        mode = p.stat().st_mode
        p.chmod(mode | stat.S_IWUSR if writable else mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ro_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("ro")
    uri = f"sqlite:///{d}/mlruns/mlflow.db"
    r = subprocess.run([str(BIN / "carb-quickstart"), f"tracking.uri={uri}", f"paths.output_dir={d}/out"],
                       cwd=d, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    store = d / "mlruns"
    before = _digest(store)
    _chmod_tree(store, writable=False)
    probe = _as_reader(["touch", str(store / "probe")], d)
    assert probe.returncode != 0, "the store is still writable: the test would prove nothing"
    yield {"dir": d, "uri": uri, "store": store, "before": before}
    _chmod_tree(store, writable=True)


@pytest.mark.slow
def test_screen_works_on_a_read_only_store(ro_store):
    out = ro_store["dir"] / "screen-out"
    r = _as_reader([str(BIN / "carb-screen"), f"tracking.uri={ro_store['uri']}", f"paths.output_dir={out}"],
                   ro_store["dir"])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert "is read-only: this run is not logged" in r.stderr
    assert len(list(out.glob("screen/*/scored.parquet"))) == 1
    assert _digest(ro_store["store"]) == ro_store["before"]  # nothing written, no lock or journal left


@pytest.mark.slow
def test_load_model_works_on_a_read_only_store(ro_store):
    code = ("import carb, carb.tracking as t, sys; "
            f"t.configure({ro_store['uri']!r}); "
            "name = [n for n in t.registered_models() if t.get_alias(n, 'champion')][0]; "
            f"m = carb.load_model(f'models:/{{name}}@champion', tracking_uri={ro_store['uri']!r}); "
            "print('loaded', type(m).__name__)")
    r = _as_reader([sys.executable, "-c", code], ro_store["dir"])
    assert r.returncode == 0 and "loaded" in r.stdout, r.stderr[-2000:]
    assert _digest(ro_store["store"]) == ro_store["before"]


@pytest.mark.slow
def test_writing_commands_refuse_a_read_only_store_in_one_line(ro_store):
    from carb import tracking

    code = ("import carb.tracking as t\n"
            f"with t.start_run('train', 'x', {ro_store['uri']!r}):\n    pass\n")
    r = _as_reader([sys.executable, "-c", code], ro_store["dir"])
    assert r.returncode != 0 and "the store is read-only; carb-train writes to it" in r.stderr
    # this (privileged) test process may write; the reader may not
    assert tracking.store_read_only(ro_store["uri"]) == (os.geteuid() != 0)
