"""carb-characterize end to end: composed config -> tables, figures and one MLflow run."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from synthetic import grid_dataset

from carb.commands.characterize import load_inputs, run_characterize
from carb.commands.cli import compose
from carb.data.io import reference_dataset, save_dataset
from carb.errors import ConfigError

TABLES = ("knob_medians", "knob_ranges", "feature_correlations", "divergence", "divergence_ratios",
          "efficiency")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("characterize")


def _overrides(store: Path, *extra: str) -> list[str]:
    return [f"tracking.uri=sqlite:///{store}/mlflow.db", f"paths.output_dir={store}/out", *extra]


def _cfg(store: Path, *overrides: str):
    return compose("characterize", _overrides(store, *overrides))


def _logged(store: Path, run_id: str) -> tuple[set[str], dict[str, float], str]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{store}/mlflow.db")
    run = client.get_run(run_id)
    paths: set[str] = set()
    stack = [None]
    while stack:
        for f in client.list_artifacts(run_id, stack.pop()):
            (stack.append(f.path) if f.is_dir else paths.add(f.path))
    return paths, run.data.metrics, client.get_experiment(run.info.experiment_id).name


def _check_written(res: dict, tables: tuple[str, ...], figures: set[str]) -> None:
    out = Path(res["output_dir"])
    for name in tables:
        assert (out / "tables" / f"{name}.csv").stat().st_size > 0
        assert (out / "tables" / f"{name}.md").read_text().startswith("| ")
    assert {p.stem for p in (out / "figures").glob("*.png")} == figures == set(res["figures"])
    assert (out / "summary.md").exists()


def test_timm_pair(store):
    cfg = compose("characterize", _overrides(store, "source=timm", "timm.gpu_a=RTX 4090",
                                             "timm.gpu_b=RTX 5090", "timm.precision=amp_fp16",
                                             "timm.compile=eager", "run_name=timm-4090-5090"))
    res = run_characterize(cfg)
    _check_written(res, TABLES + ("cross_device", "cross_device_pairs"),
                   {"knobs_latency_ms", "divergence", "cross_device"})
    assert set(res["skipped_figures"]) == {"knobs_energy_J", "knobs_peak_memory_MB", "efficiency"}
    fits = {r["target"]: r for r in res["cross_device"]}
    lat = fits["latency_ms"]
    assert lat["status"] == "ok" and lat["n"] == 197
    assert 0.5 < lat["slope"] < 1.0 and lat["spearman"] > 0.95 and lat["r2"] > 0.9   # 5090 is faster
    assert fits["energy_J"]["status"] == "not measured on A and B"
    paths, metrics, exp = _logged(store, res["run_id"])
    assert exp == "carb-characterize"
    assert {"tables/cross_device.csv", "tables/cross_device.md", "figures/cross_device.png",
            "summary.md"} <= paths
    assert metrics["cross_device.latency_ms.slope"] == pytest.approx(lat["slope"])
    assert "cross_device.energy_J.slope" not in metrics                  # not measured: not logged
    assert "not measured" in (Path(res["output_dir"]) / "tables" / "cross_device.csv").read_text()


def test_two_synthetic_devices(store, tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    save_dataset(grid_dataset("GPU A"), a)
    save_dataset(grid_dataset("GPU B", scale=2.0, seed=1), b)
    res = run_characterize(_cfg(store, f"data.path={a}", f"compare={b}"))
    _check_written(res, TABLES + ("cross_device",),
                   {"knobs_peak_memory_MB", "knobs_energy_J", "knobs_latency_ms", "divergence", "efficiency",
                    "cross_device"})
    assert res["label"] == "gpu-a-vs-gpu-b" and Path(res["output_dir"]).name.startswith("gpu-a-vs-gpu-b-")
    from mlflow import MlflowClient   # the run's name says what it compares, not when it ran

    assert MlflowClient(f"sqlite:///{store}/mlflow.db").get_run(res["run_id"]).info.run_name == "characterize/gpu-a-vs-gpu-b"
    fits = {r["target"]: r for r in res["cross_device"]}
    assert all(fits[t]["status"] == "ok" for t in fits)
    assert fits["energy_J"]["slope"] == pytest.approx(2.0, rel=0.05)
    paths, metrics, _ = _logged(store, res["run_id"])
    assert {f"figures/{n}.png" for n in res["figures"]} <= paths
    assert {f"tables/{n}.csv" for n in TABLES} <= paths
    assert metrics["knob_ratio.basic.batch_size.energy_J"] > 10


def test_cpu_reference_dataset(store):
    """The default input is the shipped CPU reference dataset (no energy counter on that host)."""
    res = run_characterize(_cfg(store))           # default: data=reference
    assert "cross_device" not in res["tables"]
    assert "efficiency" in res["skipped_figures"] and "knobs_energy_J" in res["skipped_figures"]
    assert "knobs_latency_ms" in res["figures"]
    summary = (Path(res["output_dir"]) / "summary.md").read_text()
    assert "not measured: " in summary and "energy_J" in summary
    ref = reference_dataset()
    ref = ref[ref["status"] == "ok"]
    assert res["label"] == "amd-epyc" and set(ref["device_name"]) == {"AMD EPYC"}
    # the written medians are those of the shipped rows (latency per batch size, basic blocks)
    med = pd.read_csv(Path(res["output_dir"]) / "tables" / "knob_medians.csv")
    lat = med[(med["family"] == "basic") & (med["knob"] == "batch_size") & (med["target"] == "latency_ms")]
    want = ref[ref["block"] == "basic"].groupby("batch_size")["latency_ms"].median()
    got = lat.assign(value=lat["value"].astype(int)).set_index("value")["median"].sort_index()
    assert len(want) >= 2 and list(got.index) == list(want.index)
    assert got.to_numpy() == pytest.approx(want.to_numpy())
    assert (med.loc[med["target"] == "energy_J", "status"] == "not measured").all()
    paths, _, exp = _logged(store, res["run_id"])
    assert exp == "carb-characterize" and "tables/knob_ranges.csv" in paths


def test_config_errors(store, tmp_path):
    with pytest.raises(ConfigError, match="source"):
        run_characterize(compose("characterize", _overrides(store, "source=bogus")))
    with pytest.raises(ConfigError, match="timm.gpu_a"):
        run_characterize(compose("characterize", _overrides(store, "source=timm", "timm.gpu_a=RTX 9999")))
    both = tmp_path / "both.parquet"
    save_dataset(pd.concat([grid_dataset("GPU A"), grid_dataset("GPU B")], ignore_index=True), both)
    with pytest.raises(ConfigError, match="data.device"):
        run_characterize(_cfg(store, f"data.path={both}"))
    a, b, label, prov = load_inputs(_cfg(store, f"data.path={both}", "data.device=GPU A", f"compare={both}",
                                         "compare_device=GPU B"))
    assert set(a["device_name"]) == {"GPU A"} and set(b["device_name"]) == {"GPU B"}
    assert label == "gpu-a-vs-gpu-b" and prov["compare_device"] == "GPU B"


def test_command_line_error_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "carb.characterize", "source=timm", "timm.gpu_a=RTX 9999",
                           f"hydra.run.dir={tmp_path}/hydra"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert err[-1].startswith("carb-characterize: error: timm.gpu_a='RTX 9999'") and "allowed" in err[-1]


@pytest.mark.slow
def test_command_leaves_one_folder_per_run(tmp_path):
    """``python -m carb.characterize`` writes tables, figures and summary into Hydra's run folder."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "carb.characterize", "source=timm",
                           f"paths.output_dir={out}", f"tracking.uri=sqlite:///{tmp_path}/m.db"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-1500:]
    runs = list((out / "characterize").iterdir())
    assert len(runs) == 1, runs
    names = {p.name for p in runs[0].iterdir()}
    assert {".hydra", "characterize.log", "tables", "figures", "summary.md"} <= names
    assert any((runs[0] / "tables").glob("cross_device.csv"))


def test_a_store_fault_while_logging_names_the_written_tables(store, monkeypatch):
    """Issue 33 item 2: the tables and figures are written first; a store fault while logging is one line
    naming their folder (not a traceback that leaves the user looking for them)."""
    from carb.errors import TrackingError

    def broken(*a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("carb.tracking.log_metrics", broken)
    with pytest.raises(TrackingError) as e:
        run_characterize(_cfg(store, "run_name=broken-store"))
    msg = str(e.value)
    assert "Read-only file system" in msg and "\n" not in msg
    folder = Path(msg.split("saved in ")[1].split()[0])
    assert (folder / "summary.md").exists() and list((folder / "tables").glob("*.csv"))
