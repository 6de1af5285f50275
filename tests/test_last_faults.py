"""The last faults of issue 42 (item 4), each one line or the right result instead of a traceback: the timm
importer on a 0-byte CSV, the optimum importer with a list for ``config``, a screen that ``screen.outside``
leaves without candidates, ``Predictor.predict`` on an empty frame, a text ``top1`` column in a grid file,
a read-only probe folder (checked before measuring) and screen files written atomically."""
from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from synthetic import synthetic_dataset

from carb.errors import CarbError, ConfigError

DATA = Path(__file__).parent / "data" / "import"
KNOB_COLUMNS = ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample"]


@pytest.fixture(scope="module")
def cascade():
    """A small fitted cascade (tests/test_physics.py's FAST settings) with a training domain."""
    from carb.data.schema import TARGETS
    from carb.model.cascade import CarbCascade
    from tests.test_physics import FAST

    rows = synthetic_dataset(150, seed=3)
    return CarbCascade(**FAST).fit(rows, rows[list(TARGETS)])


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text
    return text


def test_timm_importer_on_an_empty_csv_is_one_line(tmp_path):
    from carb.data.importers import import_table

    empty = tmp_path / "resnet_family.csv"
    empty.write_bytes(b"")
    with pytest.raises(CarbError) as e:   # before: pandas EmptyDataError
        import_table({"name": "timm", "path": str(empty)})
    assert "importer.path" in _one_line(e.value) and "is empty" in str(e.value)


def test_optimum_importer_with_a_list_for_config_is_one_line(tmp_path):
    from carb.data.importers import import_table

    run = tmp_path / "runs" / "run1"
    shutil.copytree(DATA / "optimum" / "run1", run)
    data = json.loads((run / "benchmark.json").read_text())
    data["config"] = [data["config"]]
    (run / "benchmark.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:   # before: AttributeError: 'list' object has no attribute 'get'
        import_table({"name": "optimum", "path": str(tmp_path / "runs"), "input_size": 224})
    assert "benchmark.json: config is a JSON array, not an object" in _one_line(e.value)
    data["config"] = json.loads((DATA / "optimum" / "run1" / "benchmark.json").read_text())["config"]
    data["config"]["backend"] = "pytorch"
    (run / "benchmark.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="config.backend is a JSON string, not an object"):
        import_table({"name": "optimum", "path": str(tmp_path / "runs"), "input_size": 224})


def _outside_grid():
    from carb.design.features import grid_features
    from carb.design.space import load_space

    g = grid_features(load_space("screening"))
    return g[g["batch_size"] == g["batch_size"].max()].assign(batch_size=4096).reset_index(drop=True)


def test_outside_drop_leaving_no_candidate_is_an_empty_shortlist_and_a_line(cascade, capsys):
    from carb.analysis.screening import screen
    from carb.commands.screen import _print_shortlist

    grid = _outside_grid()
    res = screen(grid, cascade, {"energy_J": 10.0}, outside="drop")   # before: LightGBM ValueError
    assert res.scored.empty and res.shortlist.empty and res.profile.empty
    assert res.counts["n_outside"] == len(grid) and res.counts["n_candidates"] == 0
    (note,) = [n for n in res.notes if "screen.outside=drop" in n]
    assert f"all {len(grid)} are outside" in note and "screen.outside=flag" in note
    assert {"pred_energy_J", "decision", "pareto"} <= set(res.scored.columns)
    _print_shortlist(res, ["energy_J"], [])
    assert capsys.readouterr().out.strip() == "shortlist: empty (no candidate left to screen; see the note above)"
    two = screen(grid, cascade, {"energy_J": 10.0}, outside="drop", source_model=cascade)
    assert two.scored.empty and two.stages["stage1_kept"] == 0


def test_predict_on_an_empty_frame_gives_zero_rows(cascade):
    from carb.analysis.predictor import Predictor

    p = Predictor(cascade, "models:/test@champion")
    one = p.predict(pd.DataFrame([{"block": "basic", "depth": 18}]), budget={"energy_J": 5.0})
    empty = p.predict(pd.DataFrame(columns=[*KNOB_COLUMNS, "top1"]), budget={"energy_J": 5.0})  # before: IndexError
    assert len(empty) == 0 and list(empty.columns) == [*one.columns, "top1"]
    assert len(p.predict([])) == 0


def test_a_text_top1_column_in_a_grid_file_is_refused_as_non_numeric(tmp_path):
    from carb.design.gridfile import read_grid_frame

    path = tmp_path / "grid.csv"
    pd.DataFrame({"block": ["basic", "basic", "basic"], "depth": [18, 34, 18], "batch_size": [8, 8, 8],
                  "precision": "fp32", "top1": ["0.70", "high", "76 %"]}).to_csv(path, index=False)
    with pytest.raises(ConfigError) as e:   # before: "unknown knob column(s) ['top1']"
        read_grid_frame(path, {"width_mult": 1.0, "input_size": 224, "early_downsample": True})
    line = _one_line(e.value)
    assert "column 'top1' row 2: 'high' is not a number (2 row(s) of text)" in line and "accuracy" in line
    assert "unknown knob" not in line
    # a column of text that is no number at all is still an unknown knob column
    pd.DataFrame({"block": ["basic"], "depth": [18], "batch_size": [8], "precision": "fp32",
                  "name": ["mine"]}).to_csv(path, index=False)
    with pytest.raises(ConfigError, match=r"unknown knob column\(s\) \['name'\]"):
        read_grid_frame(path, {"width_mult": 1.0, "input_size": 224, "early_downsample": True})


def test_an_unwritable_probe_folder_is_refused_before_measuring(monkeypatch, tmp_path):
    import carb.measure.probe as measure_probe
    from carb.commands.cli import compose
    from carb.commands.probe import run_probe_command

    monkeypatch.setenv("CARB_HOME", str(tmp_path))
    (tmp_path / "probes").write_text("not a folder")          # <CARB_HOME>/probes cannot hold the table

    def measured(*a, **k):
        raise AssertionError("measured before checking where the probe goes")

    monkeypatch.setattr(measure_probe, "run_probe", measured)
    cfg = compose("probe", ["n=4", "precisions=[fp32]", "repeats=1", "min_window_s=0.001", "max_MMAC=2",
                            "progress.enabled=false"])
    with pytest.raises(ConfigError) as e:
        run_probe_command(cfg)
    line = _one_line(e.value)
    assert line.startswith("out: the probe of device ") and "nothing was measured" in line
    assert "is a file, not a folder" in line


def test_screen_files_are_written_atomically(monkeypatch, tmp_path):
    """A full disk while writing scored.parquet (injected ENOSPC after half the bytes) leaves the earlier
    file whole and no temp file; the other outputs go through the same write."""
    from carb.commands import screen as screen_cmd

    out = tmp_path / "run"
    out.mkdir()
    (out / "scored.parquet").write_bytes(b"the earlier, whole file")
    monkeypatch.setattr(screen_cmd, "hydra_run_dir", lambda: out)
    frame = pd.DataFrame({"block": ["basic"], "depth": [18], "decision": ["accept"], "pred_energy_J": [1.0]})
    result = SimpleNamespace(scored=frame, shortlist=frame, profile=frame.head(0))

    def full_disk(self, path, *a, **k):
        Path(path).write_bytes(b"PAR1 half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full_disk)
    cfg = SimpleNamespace(screen={"scored_csv_max_rows": 10})
    prog = SimpleNamespace(begin=lambda *a, **k: None)
    with pytest.raises(OSError):
        screen_cmd._write_files(SimpleNamespace(screen=_Get(cfg.screen)), result, prog, [])
    assert (out / "scored.parquet").read_bytes() == b"the earlier, whole file"
    assert sorted(p.name for p in out.iterdir()) == ["scored.parquet"]


class _Get(dict):
    """A dict with attribute access (a config section as the command reads it)."""

    def __getattr__(self, name):
        return self[name]
