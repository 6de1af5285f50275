"""A real full disk (issue 33): a small tmpfs mounted for the test, where the platform lets the test mount
one (root with CAP_SYS_ADMIN, as on the CI VM); elsewhere these tests skip and the injected-ENOSPC tests in
tests/test_store_faults.py and tests/test_collect_concurrency.py still run."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs at ``tmp_path/disk``, unmounted afterwards; skip where mounting is not allowed."""
    disk = tmp_path / "disk"
    disk.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); injected faults cover it")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.random(n), "y": rng.random(n)})


def test_an_atomic_write_on_a_full_disk_keeps_the_old_file_and_leaves_no_temp(tiny_disk):
    from carb.files import write_atomic

    path = tiny_disk / "d.csv"
    small = _frame(10)
    write_atomic(path, lambda tmp: small.to_csv(tmp, index=False))
    with pytest.raises(OSError) as e:
        write_atomic(path, lambda tmp: _frame(20_000).to_csv(tmp, index=False))   # ~800 KB > 64 KiB
    assert e.value.errno == 28
    assert np.allclose(pd.read_csv(path).to_numpy(), small.to_numpy())        # the old file, whole
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["d.csv"]


def test_a_fit_saved_on_a_full_disk_leaves_nothing_half_written(tiny_disk):
    from carb.commands.train import save_fit

    frame = _frame(20_000)
    parts = {"cascade": {"fitted": True}, "full": frame, "test": frame.head(5), "metrics": {}, "sizes": [1],
             "device": "d", "data_path": "p", "preset": "fast", "run_name": "r", "reg_name": None, "tags": {},
             "split": "s", "config": {}, "sweep": {},
             "extras": {"pred": pd.DataFrame({"pred_y": np.arange(5.0)}), "importances": {}}}
    with pytest.raises(OSError):
        save_fit(parts, tiny_disk / "fit")
    assert list(tiny_disk.iterdir()) == []


def test_carb_import_onto_a_full_disk_is_one_line(tiny_disk, tmp_path):
    """The real command: timm's shipped benchmark imported onto a 64 KiB disk (the dataset fits, the
    unmapped rows' CSV does not): exit 2, one line naming the disk fault, no traceback, no temp file."""
    env = {**os.environ, "HYDRA_FULL_ERROR": "0", "CARB_HOME": str(tmp_path / "home")}
    r = subprocess.run([str(BIN / "carb-import"), f"out={tiny_disk}/timm.parquet",
                        f"tracking.uri=sqlite:///{tmp_path}/m.db", f"hydra.run.dir={tmp_path}/run"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("carb-import: error: ")]
    assert len(errors) == 1 and "the disk refused a write" in errors[0] and "No space left" in errors[0], r.stderr[-800:]
    assert not [p for p in tiny_disk.iterdir() if p.name.startswith(".")]       # no temp file left behind
