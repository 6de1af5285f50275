"""carb-import: round trips of the three importers on the small fixture files in tests/data/import/
(timm table rows, a user's CSV, optimum-benchmark results), the model-name mapping, aggregation of
repeated runs, provenance and MLflow logging, and bad input as one line with exit code 2."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.commands.import_data import run_import
from carb.data.importers import PLAIN_RESNETS, import_table, model_config, model_knobs
from carb.data.io import load_dataset
from carb.design.arch import ArchConfig
from carb.errors import ConfigError
from tests.import_cli import import_error_line

DATA = Path(__file__).parent / "data" / "import"
CSV_MAP = ["importer.columns.model=arch", "importer.columns.device_name=gpu_name", "importer.columns.input_size=img",
           "importer.columns.batch_size=bs", "importer.columns.precision=dtype", "importer.columns.latency_ms=lat_s",
           "importer.columns.peak_memory_MB=mem_decimal_mb", "importer.constants.memory_kind=device_used",
           "importer.scale.latency_ms=1000", "importer.scale.peak_memory_MB=0.95367431640625"]


def _run(tmp_path, *overrides):
    cfg = compose("import", [f"tracking.uri=sqlite:///{tmp_path}/mlruns/mlflow.db", f"out={tmp_path}/out.parquet",
                             *overrides])
    return run_import(cfg)


@pytest.mark.parametrize("name, want", [
    ("resnet50", ("bottleneck", 50, 1.0)), ("timm/resnet50.a1_in1k", ("bottleneck", 50, 1.0)),
    ("torchvision/resnet18", ("basic", 18, 1.0)), ("tv_resnet101", ("bottleneck", 101, 1.0)),
    ("Wide_ResNet101_2", ("bottleneck", 101, 2.0)), ("resnet26", ("bottleneck", 26, 1.0)),
    ("timm/resnet200.tv_in1k", ("bottleneck", 200, 1.0)),
])
def test_model_names_map(name, want):
    knobs, reason = model_knobs(name)
    assert reason == "" and (knobs["block"], knobs["depth"], knobs["inner_mult"]) == want


@pytest.mark.parametrize("name", ["resnet50d", "seresnet50", "resnext50_32x4d", "vit_b_16", "resnet50_gn", ""])
def test_variants_do_not_map(name):
    knobs, reason = model_knobs(name)
    assert knobs is None and reason
    if name:
        with pytest.raises(ConfigError, match=r"not a plain torchvision/timm ResNet; allowed: \[.*'wide_resnet50_2'"):
            model_config(name)


def test_every_mapped_name_is_a_valid_torchvision_config():
    assert set(PLAIN_RESNETS) >= {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2",
                                  "wide_resnet101_2", "resnet26", "resnet200"}
    for name in PLAIN_RESNETS:
        assert isinstance(model_config(name), ArchConfig)


def test_timm_round_trip(tmp_path):
    res = _run(tmp_path, f"importer.path={DATA / 'timm_small.csv'}")
    df = load_dataset(res["out"])
    src = pd.read_csv(DATA / "timm_small.csv")
    assert len(df) == 8 and res["n_rows"] == 8                     # 4 plain models x 2 GPUs
    assert set(df["device_kind"]) == {"cuda"} and set(df["source"]) == {"timm:timm_small.csv"}   # spec table
    # the hand-made repeat: median, spread (max - min) and count of the RTX 4090 resnet18 rows
    r18 = df[(df["device_name"] == "RTX 4090") & (df["model"] == "resnet18")].iloc[0]
    times = src[(src["gpu"] == "RTX 4090") & (src["model"] == "resnet18")]["step_time_ms"]
    assert r18["n_repeats"] == 2 and r18["latency_ms"] == pytest.approx(times.median())
    assert r18["latency_spread_ms"] == pytest.approx(times.max() - times.min())
    # wide ResNets: exact torchvision parameter counts from the inner width knob, timm's count agrees
    wide = df.set_index(["device_name", "model"]).loc[("RTX 5090", "wide_resnet101_2")]
    assert (wide["inner_mult"], wide["params"]) == (2.0, 126_886_696)
    assert (df["params"] - df["param_count_M"] * 1e6).abs().max() <= 5_000       # timm rounds to 10k
    assert df["config_id"].tolist() == [
        ArchConfig(r.block, r.depth, input_size=r.input_size, batch_size=r.batch_size, precision=r.precision,
                   inner_mult=r.inner_mult).config_id for r in df.itertuples()]
    assert df["energy_J"].isna().all() and df["memory_kind"].isna().all()
    assert "energy_J: not in the timm source" in df["missing_reason"].iloc[0]
    # seresnet50 is listed with the reason, in the result and the .unmapped.csv
    un = pd.read_csv(res["unmapped_path"])
    assert len(un) == 2 and set(un["model"]) == {"seresnet50"}
    assert un["reason"].str.contains("not a plain torchvision/timm ResNet").all()
    prov = json.loads(Path(res["provenance_path"]).read_text())
    assert prov["inputs"][0]["sha256"] == hashlib.sha256((DATA / "timm_small.csv").read_bytes()).hexdigest()
    assert (prov["n_source_rows"], prov["n_unmapped"], prov["n_aggregated_keys"]) == (11, 2, 1)


def test_import_is_logged_as_a_dataset_input(tmp_path):
    import mlflow

    res = _run(tmp_path, f"importer.path={DATA / 'timm_small.csv'}", "importer.gpu=RTX 5090")
    run = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db").get_run(res["run_id"])
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1 and inputs[0].dataset.name == "import-timm"
    assert inputs[0].tags[0].value == "import" and run.data.metrics["n_rows"] == 4
    assert run.data.tags["importer"] == "timm"


def test_generic_csv_round_trip(tmp_path):
    res = _run(tmp_path, "importer=csv", f"importer.path={DATA / 'mine.csv'}", *CSV_MAP, "importer.unmapped=list")
    df = load_dataset(res["out"]).set_index("model")
    r50 = df.loc["resnet50"]
    assert r50["n_repeats"] == 3 and r50["latency_ms"] == pytest.approx(21.0)       # median of 21, 23, 20 ms
    assert r50["latency_spread_ms"] == pytest.approx(3.0)
    assert r50["peak_memory_MB"] == pytest.approx(2100.5e6 / 2**20)                  # decimal MB -> MiB
    assert r50["peak_memory_spread_MB"] == pytest.approx(30e6 / 2**20)
    assert r50["precision"] == "fp16" and r50["memory_kind"] == "device_used"
    assert df.loc["wide_resnet50_2", "params"] == 68_883_240
    assert df.loc["torchvision/resnet18", "input_size"] == 160
    reasons = {u["model"]: u["reason"] for u in res["unmapped"]}
    assert set(reasons) == {"vit_b_16", "resnet34"}
    assert "non-positive target latency_ms=0" in reasons["resnet34"]


def test_optimum_round_trip(tmp_path):
    res = _run(tmp_path, "importer=optimum", f"importer.path={DATA / 'optimum'}", "importer.input_size=224")
    df = load_dataset(res["out"]).set_index("model")
    r50 = df.loc["timm/resnet50.a1_in1k"]
    runs = [json.loads((DATA / "optimum" / r / "benchmark.json").read_text())["report"]["forward"] for r in ("run1", "run2")]
    assert r50["n_repeats"] == 2 and r50["device_name"] == "NVIDIA A100-SXM4-80GB"
    assert r50["latency_ms"] == pytest.approx(1e3 * (runs[0]["latency"]["mean"] + runs[1]["latency"]["mean"]) / 2)
    assert r50["energy_J"] == pytest.approx(3.6e6 * (runs[0]["energy"]["gpu"] + runs[1]["energy"]["gpu"]) / 2)
    assert r50["peak_memory_MB"] == pytest.approx(2012.4e6 / 2**20)                   # max_allocated, MB -> MiB
    assert r50["memory_kind"] == "allocator_peak" and r50["precision"] == "fp16" and r50["batch_size"] == 16
    wide = df.loc["wide_resnet50_2"]                                                   # NVML used memory only
    assert wide["memory_kind"] == "device_used" and wide["peak_memory_MB"] == pytest.approx(4200e6 / 2**20)
    assert (wide["inner_mult"], wide["precision"]) == (2.0, "fp32")
    r18 = df.loc["timm/resnet18.a1_in1k"]                  # split files, autocast, no height: importer.input_size
    assert (r18["input_size"], r18["precision"], r18["autocast"]) == (224, "fp16", True)
    assert pd.isna(r18["energy_J"]) and "energy_J: not in the optimum source" in r18["missing_reason"]
    prov = json.loads(Path(res["provenance_path"]).read_text())
    assert "optimum-benchmark 0.6.0" in prov["format"] and prov["optimum_benchmark_versions"] == ["0.6.0"]
    assert len(prov["inputs"]) == 4


def test_optimum_without_input_size_fails_on_the_row(tmp_path):
    with pytest.raises(ConfigError, match="run3/benchmark_report.json: input_size: not given"):
        import_table({"name": "optimum", "path": str(DATA / "optimum"), "unmapped": "fail"})
    df, unmapped = import_table({"name": "optimum", "path": str(DATA / "optimum"), "unmapped": "list"})
    assert len(df) == 2 and [u["reason"] for u in unmapped] == ["input_size: not given"]


def test_rows_of_two_protocols_are_not_repeats(tmp_path):
    with pytest.raises(ConfigError, match=r"importer.torch: .*differ in torch_version \['2.4.0', '2.9.1'\]"):
        import_table({"name": "timm", "gpu": "RTX 4090", "precision": "amp_fp16", "compile": "eager",
                      "memory_layout": "nchw", "torch": "all"})


@pytest.mark.parametrize("overrides, expect", [
    (["importer=nope"], "importer=nope: no such option; allowed: csv, gpu_run, optimum, timm"),
    (["importer=csv", "importer.columns.speed=lat"], "importer.columns.speed"),
    (["importer=csv", f"importer.path={DATA / 'mine.csv'}", *CSV_MAP, "importer.columns.latency_ms=latency"],
     "importer.columns.latency_ms: column 'latency' is not in mine.csv; allowed: ['arch', 'gpu_name'"),
    (["importer=csv", f"importer.path={DATA / 'mine.csv'}", *CSV_MAP],
     "importer.columns.model=arch: mine.csv:7: model 'vit_b_16' is not a plain torchvision/timm ResNet; allowed: ["),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, overrides, expect):
    assert expect in import_error_line(tmp_path, *overrides)


def test_training_refuses_mixed_memory_kinds(tmp_path):
    from carb.data.io import load_training_frame
    from carb.errors import DatasetError

    res = _run(tmp_path, "importer=optimum", f"importer.path={DATA / 'optimum'}", "importer.input_size=224")
    with pytest.raises(DatasetError, match=r"mixes memory_kind \['allocator_peak', 'device_used'\]"):
        load_training_frame(res["out"])
    one = _run(tmp_path, "importer=optimum", f"importer.path={DATA / 'optimum'}", "importer.input_size=224",
               "importer.memory=device_used", f"out={tmp_path}/used.parquet")
    ok, device = load_training_frame(one["out"])
    assert set(ok["memory_kind"].dropna()) == {"device_used"} and device == "NVIDIA A100-SXM4-80GB"
