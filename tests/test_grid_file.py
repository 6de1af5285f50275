"""Grid files for carb-screen (issue 13 item 6): every fault is one ConfigError line (exit 2)."""
from __future__ import annotations

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.commands.screen import load_grid
from carb.errors import ConfigError

FULL = {"block": "basic", "depth": 18, "width_mult": 1.0, "input_size": 64, "batch_size": 2,
        "precision": "fp32", "early_downsample": True}


def _grid(tmp_path, overrides=()):
    return load_grid(compose("screen", [f"screen.grid_file={tmp_path / 'grid.csv'}", *overrides]))


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_full_grid_reads(tmp_path):
    pd.DataFrame([FULL, {**FULL, "batch_size": 4}]).to_csv(tmp_path / "grid.csv", index=False)
    assert _grid(tmp_path)["batch_size"].tolist() == [2, 4]


def test_missing_knobs_refused_unless_defaults_given(tmp_path):
    pd.DataFrame([{"block": "basic", "depth": 18}]).to_csv(tmp_path / "grid.csv", index=False)
    with pytest.raises(ConfigError) as e:
        _grid(tmp_path)
    msg = _one_line(e)
    assert "missing knob column(s) ['width_mult', 'input_size', 'batch_size', 'precision', " \
           "'early_downsample']" in msg and "screen.grid_defaults" in msg
    g = _grid(tmp_path, ["screen.grid_defaults={width_mult: 1.0, input_size: 64, batch_size: 2, "
                         "precision: fp16, early_downsample: false}"])
    assert g["precision"].tolist() == ["fp16"] and g["input_size"].tolist() == [64]
    with pytest.raises(ConfigError, match="grid_defaults: unknown knob"):
        _grid(tmp_path, ["screen.grid_defaults={colour: red}"])


@pytest.mark.parametrize("col,value", [("latency_ms", float("inf")), ("width_mult", float("nan")),
                                       ("batch_size", -4), ("width_mult", float("-inf"))])
def test_non_finite_or_negative_numbers_named(tmp_path, col, value):
    pd.DataFrame([{**FULL, col: 1}, {**FULL, col: value}]).to_csv(tmp_path / "grid.csv", index=False)
    with pytest.raises(ConfigError) as e:
        _grid(tmp_path)
    assert f"column {col!r} row 2" in _one_line(e)


def test_empty_and_header_only_csv(tmp_path):
    (tmp_path / "grid.csv").write_bytes(b"")
    with pytest.raises(ConfigError) as e:
        _grid(tmp_path)
    assert "grid.csv is empty" in _one_line(e)
    (tmp_path / "grid.csv").write_text(",".join(FULL) + "\n")
    with pytest.raises(ConfigError) as e:
        _grid(tmp_path)
    assert "has no rows" in _one_line(e)


def test_corrupt_parquet(tmp_path):
    p = tmp_path / "grid.parquet"
    pd.DataFrame([FULL]).to_parquet(p)
    p.write_bytes(p.read_bytes()[:40] + b"garbage")
    with pytest.raises(ConfigError) as e:
        load_grid(compose("screen", [f"screen.grid_file={p}"]))
    assert "grid.parquet cannot be read as parquet" in _one_line(e)
