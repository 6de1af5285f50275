"""Appending a later lent-GPU run of the same device to a dataset (carb.data.importers.gpu_run.merge_gpu_run,
``carb-collect import_run=DIR out=<existing file>``), on the real H200 runs kept in scripts/data."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from carb.data.importers.gpu_run import import_gpu_run, merge_gpu_run, repeat_ratios
from carb.errors import ConfigError, DatasetError

ROOT = Path(__file__).resolve().parents[1]
RUN1 = ROOT / "scripts" / "data" / "h200-run-2026-12-04-seed1"
RUN2 = ROOT / "scripts" / "data" / "h200-run-2026-12-04-seed2"


@pytest.fixture(scope="module")
def runs():
    return import_gpu_run(RUN1), import_gpu_run(RUN2)


def test_merge_keeps_the_first_row_of_a_repeated_configuration_and_reports_the_repeat(runs):
    (a, pa), (b, pb) = runs
    rows, prov = merge_gpu_run(a, pa, b, pb)
    shared = set(a["config_id"]) & set(b["config_id"])
    assert shared and rows["config_id"].is_unique
    assert len(rows) == len(a) + len(b) - len(shared)
    first = a.set_index("config_id")["latency_ms"]
    kept = rows.set_index("config_id")["latency_ms"]
    assert all(kept[c] == first[c] for c in shared)
    assert [r["seed"] for r in prov["runs"]] == [1, 2]
    assert prov["runs"][1]["rows_added"] == len(b) - len(shared) and prov["rows"] == len(rows)
    assert prov["counts"]["ok"] == pa["counts"]["ok"] + pb["counts"]["ok"]
    rep = prov["runs"][1]["repeats"]
    assert rep["n"] == len(shared)
    assert rep["peak_memory_MB"]["all"]["median"] == pytest.approx(1.0, abs=1e-3)   # the allocator is exact
    # heavy configurations repeat within a few per cent; launch-bound ones are reported apart
    assert 0 < rep["latency_ms"]["heavy"]["n"] < rep["n"]
    assert rep["latency_ms"]["heavy"]["median"] == pytest.approx(1.0, abs=0.05)
    assert prov["device_id"] == pa["device_id"] and prov["fingerprint"] == pa["fingerprint"]


def test_merge_of_a_third_run_extends_the_run_list(runs):
    (a, pa), (b, pb) = runs
    rows, prov = merge_gpu_run(a, pa, b, pb)
    again, prov3 = merge_gpu_run(rows, prov, b, pb)            # the same run twice adds nothing new
    assert len(again) == len(rows) and len(prov3["runs"]) == 3 and prov3["runs"][2]["rows_added"] == 0
    assert prov3["runs"][2]["repeats"]["latency_ms"]["all"]["median"] == pytest.approx(1.0, abs=1e-3)


def test_merge_refuses_another_device(runs):
    (a, pa), (b, pb) = runs
    with pytest.raises(DatasetError, match="device_id 'other'.*own file"):
        merge_gpu_run(a, pa, b, {**pb, "device_id": "other"})


def test_repeat_ratios_without_shared_configurations(runs):
    (a, _), _ = runs
    half = a.iloc[: len(a) // 2], a.iloc[len(a) // 2:]
    assert repeat_ratios(*half) == {"n": 0, "heavy_latency_ms": 5.0}


def test_import_run_appends_to_an_existing_file_and_refuses_a_foreign_one(tmp_path):
    from carb.commands.cli import compose
    from carb.commands.collect import run_collect
    from carb.data.io import load_dataset

    dest, uri = tmp_path / "h200.parquet", f"tracking.uri=sqlite:///{tmp_path}/m.db"
    run_collect(compose("collect", [f"import_run={RUN1}", f"out={dest}", uri]))
    res = run_collect(compose("collect", [f"import_run={RUN2}", f"out={dest}", uri]))
    prov = json.loads((tmp_path / "h200.provenance.json").read_text())
    assert len(load_dataset(dest)) == prov["rows"] and len(prov["runs"]) == 2
    assert res["n_rows"] == prov["rows"]
    # a file import_run did not write (no provenance beside it) is not merged into
    shutil.copy(dest, tmp_path / "other.parquet")
    with pytest.raises(ConfigError, match="out: .*without other.provenance.json"):
        run_collect(compose("collect", [f"import_run={RUN2}", f"out={tmp_path / 'other.parquet'}", uri]))


@pytest.mark.parametrize("text", ["[1, 2]", '"x"', "3", "{oops"])
def test_a_provenance_that_is_not_a_json_object_is_one_line(tmp_path, text):
    """A run folder (or an existing import's provenance) holding a list, string, number or broken JSON is
    refused with one line naming the file, not an AttributeError."""
    run = tmp_path / "run"
    shutil.copytree(RUN1, run)
    (run / "provenance.json").write_text(text)
    with pytest.raises(DatasetError, match="provenance.json' (holds a JSON|is not JSON)"):
        import_gpu_run(run)
