"""Units and physical plausibility of imported and loaded data (carb/data/units.py, carb/data/plausibility.py):
declared units convert, a column in the wrong unit (seconds read as ms, memory in bytes or GiB) is caught
by the implied compute rate or the weights' bytes, a cell like ``10.5ms`` is named by row and column, and
``inf`` is never kept, in the importers and in ``load_dataset`` alike."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.data.importers import import_table
from carb.data.io import load_dataset, write_frame
from carb.data.plausibility import problems
from carb.errors import CarbError, ConfigError, DatasetError
from tests.import_cli import import_error_line
from tests.synthetic import synthetic_dataset

DATA = Path(__file__).parent / "data" / "import"
COLS = {"model": "arch", "device_name": "gpu_name", "input_size": "img", "batch_size": "bs", "precision": "dtype",
        "latency_ms": "lat_s", "peak_memory_MB": "mem_decimal_mb"}
CSV = {"name": "csv", "path": str(DATA / "mine.csv"), "columns": COLS, "constants": {"memory_kind": "device_used"},
       "unmapped": "list"}
TIMM = {"name": "timm", "path": str(DATA / "timm_small.csv"), "precision": "amp_fp16", "compile": "eager",
        "memory_layout": "nchw", "torch": "latest"}


def _csv(tmp_path, **changes) -> dict:
    """The mine.csv import with columns of the file replaced (``column=function of the old column``)."""
    raw = pd.read_csv(DATA / "mine.csv", dtype=str)
    for col, f in changes.items():
        raw[col] = f(raw[col])
    path = tmp_path / "mine.csv"
    raw.to_csv(path, index=False)
    return {**CSV, "path": str(path)}


def test_declared_units_convert_like_the_scale_factors():
    by_scale, _ = import_table({**CSV, "scale": {"latency_ms": 1000, "peak_memory_MB": 1e6 / 2**20}})
    by_unit, _ = import_table({**CSV, "units": {"latency_ms": "s", "peak_memory_MB": "MB"}})
    for c in ("latency_ms", "peak_memory_MB"):
        assert np.allclose(by_scale[c], by_unit[c])
    assert by_unit["latency_ms"].iloc[0] > 1                            # ms per batch, not seconds


def test_declared_gib_and_us(tmp_path):
    params = _csv(tmp_path, lat_s=lambda s: (s.astype(float) * 1e6).astype(str),         # now microseconds
                  mem_decimal_mb=lambda s: (s.astype(float) * 1e6 / 2**30).astype(str))  # now GiB
    ref, _ = import_table({**CSV, "units": {"latency_ms": "s", "peak_memory_MB": "MB"}})
    df, _ = import_table({**params, "units": {"latency_ms": "us", "peak_memory_MB": "GiB"}})
    assert np.allclose(ref["latency_ms"], df["latency_ms"]) and np.allclose(ref["peak_memory_MB"], df["peak_memory_MB"])


def test_seconds_read_as_ms_are_caught():
    with pytest.raises(DatasetError, match=r"importer.units.latency_ms: mine.csv:2;\S*: latency_ms=0.021 implies "
                                           r".* TFLOP/s \(fp16\), above 1.5 x any device's fp16 peak.*in seconds"):
        import_table({**CSV, "units": {"peak_memory_MB": "MB"}})


def test_seconds_read_as_ms_are_caught_against_the_gpu_spec(tmp_path):
    raw = pd.read_csv(DATA / "timm_small.csv")
    raw["step_time_ms"] = raw["step_time_ms"] / 1e3 * 20                   # s, 20x slower: below any device's peak
    path = tmp_path / "timm.csv"
    raw.to_csv(path, index=False)
    with pytest.raises(DatasetError, match=r"timm import: column 'latency_ms': timm.csv:\S+: .* above 1.5 x the fp16 "
                                           r"peak of GeForce RTX \d+ \(GPU spec table\)"):
        import_table({**TIMM, "path": str(path)})


@pytest.mark.parametrize("unit, factor, expect", [
    ("bytes", 1e6, r"exceeds 4 TiB .*in bytes"),
    ("GiB", 1e6 / 2**30, r"below 0.5 x the model's own weights .*in GiB or GB"),
])
def test_memory_in_bytes_or_gib_read_as_mib_is_caught(tmp_path, unit, factor, expect):
    params = _csv(tmp_path, mem_decimal_mb=lambda s: (s.astype(float) * factor).astype(str))
    with pytest.raises(DatasetError, match=r"importer.units.peak_memory_MB: mine.csv:2;\S*: peak_memory_MB=.*"
                                           + expect):
        import_table({**params, "units": {"latency_ms": "s"}})


def test_memory_above_the_gpu_is_caught(tmp_path):
    params = _csv(tmp_path, mem_decimal_mb=lambda s: (s.astype(float) * 100).astype(str))   # ~200 GB on an L4
    with pytest.raises(DatasetError, match=r"exceeds L4's memory"):
        import_table({**params, "units": {"latency_ms": "s", "peak_memory_MB": "MB"}, "spec": "L4"})


@pytest.mark.parametrize("cell, what", [("10.5ms", "is not a number"), ("inf", "is not finite"),
                                        ("-inf", "is not finite")])
def test_bad_cells_are_named_by_row_and_column(tmp_path, cell, what):
    params = _csv(tmp_path, lat_s=lambda s: s.where(s.index != 1, cell))
    with pytest.raises(ConfigError, match=rf"importer.columns.latency_ms: mine.csv:3: column 'lat_s' holds "
                                          rf"'{cell}', which {what}"):
        import_table({**params, "units": {"latency_ms": "s", "peak_memory_MB": "MB"}})


def test_unit_errors_are_one_line():
    with pytest.raises(ConfigError, match=r"importer.units.latency_ms: 'min' is not a unit of latency_ms; allowed: "
                                          r"\['s', 'ms', 'us'\]"):
        import_table({**CSV, "units": {"latency_ms": "min"}})
    with pytest.raises(ConfigError, match=r"importer.units.latency_ms: give a unit or a scale"):
        import_table({**CSV, "units": {"latency_ms": "s"}, "scale": {"latency_ms": 1000}})


def _optimum(tmp_path, **blocks) -> Path:
    """A copy of the run1 result with the forward report's blocks changed (``block=(unit, factor)``)."""
    data = json.loads((DATA / "optimum" / "run1" / "benchmark.json").read_text())
    fwd = data["report"]["forward"]
    for block, (unit, factor) in blocks.items():
        fwd[block]["unit"] = unit
        for k, v in list(fwd[block].items()):
            if isinstance(v, float):
                fwd[block][k] = v * factor
        if block == "latency":
            fwd[block]["values"] = [v * factor for v in fwd[block]["values"]]
    out = tmp_path / "run1"
    out.mkdir(exist_ok=True)
    (out / "benchmark.json").write_text(json.dumps(data))
    return out


def test_optimum_units_convert_and_unknown_units_fail(tmp_path):
    ref, _ = import_table({"name": "optimum", "path": str(DATA / "optimum" / "run1")})
    df, _ = import_table({"name": "optimum", "path": str(_optimum(tmp_path, latency=("ms", 1e3),
                                                                   memory=("GB", 1e-3), energy=("J", 3.6e6)))})
    for c in ("latency_ms", "peak_memory_MB", "energy_J"):
        assert df[c].iloc[0] == pytest.approx(ref[c].iloc[0]) and np.isfinite(df[c].iloc[0])
    with pytest.raises(ConfigError, match=r"benchmark.json: report.forward.memory.unit: 'TB' is not a unit of "
                                          r"peak_memory_MB"):
        import_table({"name": "optimum", "path": str(_optimum(tmp_path, memory=("TB", 1.0)))})


def _saved(tmp_path, df: pd.DataFrame, suffix: str = ".parquet") -> Path:
    path = tmp_path / f"d{suffix}"
    write_frame(df, path)
    return path


def test_load_dataset_runs_the_same_checks(tmp_path):
    good = synthetic_dataset(n=60, seed=1)
    assert not problems(good) and len(load_dataset(_saved(tmp_path, good))) == 60
    sec = good.assign(latency_ms=good["latency_ms"] / 1e3)
    with pytest.raises(DatasetError, match=r"d.parquet: column 'latency_ms': row \d+: .*is the column in seconds\? "
                                           r"\(\d+ more implausible cell"):
        load_dataset(_saved(tmp_path, sec))
    gib = good.assign(peak_memory_MB=good["peak_memory_MB"] / 1024)
    with pytest.raises(DatasetError, match=r"column 'peak_memory_MB': row \d+: .*in GiB or GB"):
        load_dataset(_saved(tmp_path, gib))
    inf = good.copy()
    inf.loc[3, "latency_ms"] = np.inf
    with pytest.raises(DatasetError, match=r"target 'latency_ms' must be a finite number .*rows 3$"):
        load_dataset(_saved(tmp_path, inf, ".csv"))


def test_the_shipped_datasets_are_plausible():
    for name in ("reference", "h200"):
        assert len(load_dataset(name)) > 100                          # no false alarm on real data


def test_cli_names_the_cell_and_exits_2(tmp_path):
    params = _csv(tmp_path, lat_s=lambda s: s.where(s.index != 1, "10.5ms"))
    line = import_error_line(tmp_path, "importer=csv", f"importer.path={params['path']}",
                             *[f"importer.columns.{k}={v}" for k, v in COLS.items()],
                             "importer.constants.memory_kind=device_used", "importer.units.latency_ms=s")
    assert "mine.csv:3: column 'lat_s' holds '10.5ms', which is not a number" in line


def test_errors_are_carb_errors():                                   # exit code 2 at every command's entry point
    assert issubclass(DatasetError, CarbError) and issubclass(ConfigError, CarbError)


def test_malformed_timm_and_optimum_values_are_one_line(tmp_path):
    raw = pd.read_csv(DATA / "timm_small.csv", dtype=str)
    raw.loc[2, "step_time_ms"] = "fast"
    path = tmp_path / "timm.csv"
    raw.to_csv(path, index=False)
    with pytest.raises(ConfigError, match=r"importer.path: timm.csv:4: column 'step_time_ms' holds 'fast', which is "
                                          r"not a number"):
        import_table({**TIMM, "path": str(path)})
    data = json.loads((DATA / "optimum" / "run1" / "benchmark.json").read_text())
    data["report"]["forward"]["latency"]["mean"] = "abc"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "benchmark.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"benchmark.json: report.forward.latency.mean: 'abc' is not a finite number"):
        import_table({"name": "optimum", "path": str(tmp_path / "run")})


def test_activation_bandwidth_against_the_gpu_spec():
    h200 = load_dataset("h200")
    slow_seconds = h200.assign(latency_ms=h200["latency_ms"] / 1e3 * 30)    # s, 30x slower: compute check alone passes
    found = problems(slow_seconds)
    assert any("memory bandwidth, 4800 GB/s: is the column in seconds?" in p["message"] for p in found)
    assert all(p["column"] == "latency_ms" for p in found)
