"""``carb-import importer=gpu_run`` (carb/commands/gpu_import.py, was experiments/gpu/land.py): keeping a
returned GPU run, appending it to a dataset, summarising the 2**31 check; on a real H200 run kept in
scripts/data and a CPU dry run of scripts/studies/large_tensors.py."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from carb.commands.cli import compose
from carb.commands.import_data import run_import
from carb.data.importers.gpu_run import dataset_counts, large_tensor_ratios
from carb.data.io import load_dataset
from carb.errors import DatasetError
from scripts.studies import large_tensors

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "scripts" / "data" / "h200-run-2026-12-04-seed2"


def _land(returned: Path, out: Path, keep: Path, uri: str, seed: int = 2) -> dict:
    """``carb-import importer=gpu_run`` on ``returned``, composed as the command composes it."""
    return run_import(compose("import", ["importer=gpu_run", f"importer.path={returned}", f"importer.seed={seed}",
                                         f"importer.keep={keep}", f"out={out}", f"tracking.uri={uri}"]))


def _cli(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """The console command (``python -m carb.import_data``) with ``overrides``; a temporary store."""
    return subprocess.run([sys.executable, "-m", "carb.import_data", "importer=gpu_run", *overrides,
                           f"tracking.uri=sqlite:///{tmp_path}/m.db"], capture_output=True, text=True, timeout=180)


@pytest.fixture()
def returned(tmp_path):
    """A returned folder: the kept seed-2 run plus a CPU dry run of the 2**31 check."""
    d = tmp_path / "files_at" / "h200"
    shutil.copytree(RUN, d)
    large_tensors.main(["--fake", "--out", str(d), "--repeats", "1", "--precisions", "fp32"])
    return d


def test_land_keeps_the_files_appends_the_rows_and_summarises(returned, tmp_path, capsys):
    out, keep = tmp_path / "h200.parquet", tmp_path / "kept"
    uri = f"sqlite:///{tmp_path}/m.db"
    res = _land(returned, out, keep, uri)
    day = json.loads((RUN / "provenance.json").read_text())["finished_at"][:10]
    kept = keep / f"h200-run-{day}-seed2"
    assert res["kept"] == str(kept)
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in returned.iterdir())
    n_rows, n_arch = dataset_counts(load_dataset(out))
    assert n_rows == 222 and 0 < n_arch < n_rows and (res["n_ok"], res["n_arch"]) == (n_rows, n_arch)
    text = capsys.readouterr().out
    assert f"now holds {n_rows:,} configurations of {n_arch} architectures" in text
    assert "above / below 2**31 time per element: fp32/" in text
    ratios = large_tensor_ratios(kept / "large_tensors.csv")
    assert ratios and all(v > 0 for v in ratios.values()) and ratios == res["large_tensors"]
    # kept once: the same seed and day again is refused with one line, nothing overwritten
    with pytest.raises(DatasetError, match="exists; a run is kept once") as e:
        _land(returned, out, keep, uri)
    assert "\n" not in str(e.value)
    assert dataset_counts(load_dataset(out)) == (n_rows, n_arch)


def test_land_refuses_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    r = _cli(tmp_path, f"importer.path={tmp_path / 'empty'}", "importer.seed=3", f"importer.keep={tmp_path / 'k'}",
             f"out={tmp_path / 'o.parquet'}")
    assert r.returncode == 2, r.stderr[-1500:]
    err = [ln for ln in r.stderr.splitlines() if ln.startswith("carb-import: error:")]
    assert len(err) == 1 and "has no dataset.parquet" in err[0], r.stderr[-1500:]
    assert not (tmp_path / "k").exists() and not (tmp_path / "o.parquet").exists()
    r = _cli(tmp_path, f"importer.path={tmp_path / 'nowhere'}", "importer.seed=3", f"out={tmp_path / 'o.parquet'}")
    assert r.returncode == 2 and "importer.path: " in r.stderr and "is not a folder" in r.stderr, r.stderr[-1500:]


@pytest.mark.parametrize("overrides, expect", [
    (["importer.seed=-1"], "importer.seed: must be an integer >= 0"),
    (["importer.keep=/tmp/k"], "importer.seed: required with importer.keep"),
    (["importer.date=5.12.2026"], "importer.date: must be null or YYYY-MM-DD"),
])
def test_bad_settings_name_the_setting_and_what_it_allows(tmp_path, overrides, expect):
    from carb.commands.gpu_import import check_settings
    from carb.errors import ConfigError

    params = {"path": str(tmp_path), "keep": None, "seed": None, "date": None}
    for o in overrides:
        k, v = o.removeprefix("importer.").split("=", 1)
        params[k] = int(v) if v.lstrip("-").isdigit() else v
    with pytest.raises(ConfigError, match=expect):
        check_settings(params)
