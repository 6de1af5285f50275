"""experiments/gpu/land.py: keeping a returned GPU run, appending it to a dataset, summarising the
2**31 check; on a real H200 run kept in scripts/data and a CPU dry run of large_tensors.py."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scripts.studies import large_tensors

ROOT = Path(__file__).resolve().parents[1]


def load(rel: str, name: str):
    """Temporary (until land.py moves into carb): the script ``ROOT/rel`` as module ``name``."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod

RUN = ROOT / "scripts" / "data" / "h200-run-2026-12-04-seed2"


@pytest.fixture(scope="module")
def land():
    return load("experiments/gpu/land.py", "gpu_land")


@pytest.fixture()
def returned(tmp_path):
    """A returned folder: the kept seed-2 run plus a CPU dry run of the 2**31 check."""
    d = tmp_path / "files_at" / "h200"
    shutil.copytree(RUN, d)
    large_tensors.main(["--fake", "--out", str(d), "--repeats", "1", "--precisions", "fp32"])
    return d


def test_land_keeps_the_files_appends_the_rows_and_summarises(land, returned, tmp_path, capsys):
    out, keep = tmp_path / "h200.parquet", tmp_path / "kept"
    uri = f"sqlite:///{tmp_path}/m.db"
    rc = land.main([str(returned), "--seed", "2", "--out", str(out), "--keep", str(keep), "--tracking-uri", uri])
    assert rc == 0
    day = json.loads((RUN / "provenance.json").read_text())["finished_at"][:10]
    kept = keep / f"h200-run-{day}-seed2"
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in returned.iterdir())
    n_rows, n_arch = land.counts(out)
    assert n_rows == 222 and 0 < n_arch < n_rows
    text = capsys.readouterr().out
    assert f"now holds {n_rows:,} configurations of {n_arch} architectures" in text
    assert "above / below 2**31 time per element: fp32/" in text
    ratios = land.large_tensor_ratios(kept / "large_tensors.csv")
    assert ratios and all(v > 0 for v in ratios.values())
    # landed once: the same seed and day again is refused with one line, nothing overwritten
    assert land.main([str(returned), "--seed", "2", "--out", str(out), "--keep", str(keep), "--tracking-uri", uri]) == 2
    assert "exists; a run is landed once" in capsys.readouterr().err
    assert land.counts(out) == (n_rows, n_arch)


def test_land_refuses_a_folder_that_is_not_a_run(land, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert land.main([str(tmp_path / "empty"), "--seed", "3", "--keep", str(tmp_path / "k"),
                      "--out", str(tmp_path / "o.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has no dataset.parquet" in err
    assert not (tmp_path / "k").exists()
    assert land.main([str(tmp_path / "nowhere"), "--seed", "3"]) == 2
    assert "is not a folder" in capsys.readouterr().err
