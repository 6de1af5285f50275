"""The results generator of docs/RESULTS.md (scripts/results.py) and the extrapolation benchmark's
argument handling: fast pieces only (no training)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import scripts.results
from scripts.bench import extrapolation

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def results():
    return scripts.results


def test_classify_counts_precision_and_recall(results):
    measured = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
    pred = np.array([1.5, 3.5, 2.5, 5.0, 1.0])   # budget 2.5: rows 0, 2 called within; rows 0, 1 are within
    c = results.classify(measured, pred, 2.5)
    assert c["n"] == 4 and c["n_false_accept"] == 1 and c["n_false_reject"] == 1
    assert c["accuracy"] == pytest.approx(0.5)
    assert c["precision"] == pytest.approx(0.5) and c["recall"] == pytest.approx(0.5)
    none = results.classify(measured, pred + 10, 2.5)   # nothing called within: precision undefined
    assert np.isnan(none["precision"]) and none["recall"] == 0


def test_accuracy_table_puts_b2_beside_b1_where_it_has_metrics(results):
    m = {"test_energy_J_r2": 0.99, "test_energy_J_mae": 1.0, "test_energy_J_mape": 5.0,
         "b1_energy_J_r2": 0.6, "b1_energy_J_mae": 10.0, "b1_energy_J_mape": 200.0,
         "b2_energy_J_r2": 0.95, "b2_energy_J_mae": 4.0, "b2_energy_J_mape": 300.0,
         "test_latency_ms_r2": 0.98, "test_latency_ms_mae": 3.0, "test_latency_ms_mape": 10.0}
    lines = results.accuracy_table(m, ["energy_J", "latency_ms"], b2=True).splitlines()
    assert "B2 R^2" in lines[0] and all(ln.count("|") == lines[0].count("|") for ln in lines)
    assert "| 0.950 | 4 | 300.0 % |" in lines[2]
    assert lines[3].endswith("| - | - | - |")                      # no B2 for latency
    assert "B2" not in results.accuracy_table(m, ["energy_J"]).splitlines()[0]   # the CPU table as before


def test_h200_provenance_line_is_computed_from_the_shipped_files(results):
    import pandas as pd

    (line,) = results.h200_provenance_lines()
    prov = json.loads((ROOT / "carb/data/h200-reference.provenance.json").read_text())
    n = len(pd.read_parquet(ROOT / "carb/data/h200-reference.parquet"))
    assert f" {n} rows " in line and "`c3acf657f4`" in line and "carb.measure.gpu_run" in line
    assert "(../carb/data/h200-reference.md)" in line and "2026-12-04 (12:57 to " in line
    assert f"in {len(prov['runs'])} runs" in line and line.count("seed ") == len(prov["runs"])


def test_benchmark_takes_several_datasets(monkeypatch):
    bench = extrapolation
    seen = []
    monkeypatch.setattr("carb.data.io.load_training_frame", lambda name: (seen.append(name), (None, name))[1])
    monkeypatch.setattr(bench, "default_splits", lambda df: [])
    monkeypatch.setattr(bench, "run", lambda name, df, splits, plain: __import__("pandas").DataFrame(
        {"split": ["s"], "target": ["energy_J"], "r2": [0.9], "b1_r2": [0.5]}))
    bench.main(["--data", "reference,h200", "extra", "--no-timm", "--no-plain"])
    assert seen == ["reference", "h200", "extra"]


def test_xval_figure_draws_the_saved_fits_splits(results, monkeypatch, tmp_path):
    """The README's extrapolation figure comes from the saved fit's split predictions (rows made here);
    a fit without them draws nothing."""
    import pandas as pd

    import carb.commands.train as train

    rng = np.random.default_rng(0)
    y = rng.uniform(1, 100, 40)
    rows = pd.DataFrame({"batch_size": 64, "latency_ms": y, "pred_latency_ms": y * rng.uniform(0.9, 1.1, 40),
                         "b1_pred_latency_ms": y * 0.5 + 3})
    extras = {"extrapolation_predictions": {"batch": rows}, "extrapolation": None}
    monkeypatch.setattr(train, "load_fit", lambda folder: {"extras": extras})
    monkeypatch.setattr(results, "ROOT", tmp_path)
    rel = results.xval_figure("fit", tmp_path / "docs" / "figures" / "x.png")
    assert rel == "docs/figures/x.png" and (tmp_path / rel).read_bytes().startswith(b"\x89PNG")
    extras["extrapolation_predictions"] = None
    assert results.xval_figure("fit", tmp_path / "y.png") is None and not (tmp_path / "y.png").exists()


def test_regime_line_reads_the_per_regime_metrics(results):
    m = {"interval_test_energy_J_device_coverage": 0.9, "interval_test_energy_J_device_width": 0.34,
         "interval_test_energy_J_launch_coverage": 0.91, "interval_test_energy_J_launch_width": 0.7}
    line = results.regime_line(m, ["peak_memory_MB", "energy_J"])
    assert "energy (J/batch): device 0.900 (0.34), launch 0.910 (0.70)" in line
    assert "peak memory" not in line and results.regime_line({}, ["energy_J"]) == ""


def test_input_size_line_is_computed_from_the_shipped_timm_table(results):
    from carb.analysis.input_efficiency import input_excess, summary

    line = results.input_size_line()
    s = summary(input_excess())
    r = s[(s["device_name"] == "RTX PRO 6000 Blackwell Max-Q") & (s["block"] == "bottleneck")
          & (s["compile"] == "eager") & (s["input_size"] == 288)].iloc[0]
    assert f"288 px {r['median']:.3f} (past 2**31)" in line
    assert "160 px" in line and "torch.compile" in line


def test_typed_h200_counts_match_the_shipped_file():
    """The H200 row and architecture counts typed outside the generated blocks (the dataset's config and
    its description, the GPU README) are those of the shipped file."""
    import re

    import pandas as pd

    df = pd.read_parquet(ROOT / "carb" / "data" / "h200-reference.parquet")
    ok = df[df["status"] == "ok"]
    n_rows = f"{len(ok):,}"
    n_arch = len(ok[["block", "depth", "width_mult", "stages", "inner_mult", "early_downsample"]]
                 .astype(str).drop_duplicates())
    places = {"conf/data/h200.yaml": r"h200-reference\.parquet: ([\d,]+) configurations",
              "carb/data/h200-reference.md": r"\*\*([\d,]+) configurations of (\d+) architectures\*\*",
              "scripts/data/README.md": r"now holds ([\d,]+) configurations of (\d+) architectures"}
    for rel, pattern in places.items():
        m = re.search(pattern, (ROOT / rel).read_text().replace("\n", " "))
        assert m, f"{rel}: no count found"
        assert m.group(1) == n_rows, f"{rel}: {m.group(1)} configurations typed, the file holds {n_rows}"
        if m.lastindex > 1:
            assert int(m.group(2)) == n_arch, f"{rel}: {m.group(2)} architectures typed, the file holds {n_arch}"
