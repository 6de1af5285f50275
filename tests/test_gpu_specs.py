"""The GPU spec table (carb/data/gpu_specs.csv) and the device descriptions of imported rows: the table
loads with a source for every row, names match (timm's and torch's spellings), imported GPU rows get
``device_kind = cuda`` and their record's fingerprint (so the CUDA prior's tensor-core and power-cap
terms see them), and a bad spec name or kind is one line with exit code 2."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from carb.data.gpu_specs import (
    PRIOR_FIELDS,
    SPEC_FIELDS,
    find_spec,
    gpu_spec,
    load_gpu_specs,
    peak_TFLOPS,
    spec_fingerprint,
)
from carb.data.importers import import_table
from carb.data.importers.timm import load_timm_table
from carb.errors import ConfigError
from carb.model.physics import power_cap_W, tensor_core_device
from tests.import_cli import import_error_line

DATA = Path(__file__).parent / "data" / "import"
TIMM = {"name": "timm", "path": str(DATA / "timm_small.csv"), "precision": "amp_fp16", "compile": "eager",
        "memory_layout": "nchw", "torch": "latest"}
COMMON = ("V100", "Tesla T4", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A10", "NVIDIA L4",
          "NVIDIA L40S", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "GeForce GTX 1080 Ti",
          "NVIDIA TITAN X (Pascal)", "NVIDIA GeForce RTX 2080 Ti", "Quadro RTX 8000", "NVIDIA GeForce RTX 3090",
          "NVIDIA RTX A6000", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090",
          "NVIDIA RTX PRO 6000 Blackwell Workstation Edition")


def test_table_loads_every_row_has_a_source_url_and_the_prior_fields():
    df = load_gpu_specs()
    assert len(df) >= 20 and df["name"].is_unique
    assert df["source"].str.startswith("https://").all()
    for f in PRIOR_FIELDS:
        assert df[f].notna().all(), f
    for f in SPEC_FIELDS:
        assert (df[f].dropna() > 0).all(), f
    listed = {x for s in df["unverified"] for x in s.split(";") if x}
    assert listed <= set(SPEC_FIELDS)                     # 'unverified' names real fields only


def test_table_figures_are_consistent():
    df = load_gpu_specs().set_index("name")
    cc = df["compute_capability"].astype(float)
    assert df.loc[cc < 7.0, "fp16_tensor_TFLOPS"].isna().all()          # no tensor cores before Volta
    assert df.loc[cc < 8.0, ["tf32_tensor_TFLOPS", "bf16_tensor_TFLOPS"]].isna().all().all()
    assert (df.loc[cc >= 7.0, "fp16_tensor_TFLOPS"] > df.loc[cc >= 7.0, "fp32_TFLOPS"]).all()
    # GeForce: FP32 accumulate at half the FP16-accumulate rate; data-centre parts at the full rate
    for gpu in ("GeForce RTX 3090", "GeForce RTX 4090", "GeForce RTX 5090", "GeForce RTX 2080 Ti"):
        assert df.loc[gpu, "fp16_tensor_fp16acc_TFLOPS"] == pytest.approx(2 * df.loc[gpu, "fp16_tensor_TFLOPS"],
                                                                          rel=1e-3)
    assert df.loc["A100 SXM4 40GB", "fp16_tensor_TFLOPS"] == df.loc["A100 SXM4 40GB", "fp16_tensor_fp16acc_TFLOPS"]


@pytest.mark.parametrize("name", COMMON)
def test_common_gpus_are_found(name):
    assert find_spec(name) is not None


def test_every_gpu_of_the_shipped_data_has_a_record():
    for gpu in load_timm_table()["gpu"].unique():
        assert find_spec(gpu) is not None, gpu
    h200 = pd.read_parquet(Path(__file__).parents[1] / "carb/data/h200-reference.parquet",
                           columns=["device_fingerprint"])
    fp = json.loads(h200["device_fingerprint"].iloc[0])
    rec = gpu_spec(fp["name"])
    assert (rec["compute_capability"], int(rec["sms"]), rec["power_limit_W"]) == \
        (fp["compute_capability"], fp["multiprocessors"], fp["power_limit_W"])   # the measured facts agree


def test_ambiguous_and_unknown_names_do_not_match():
    assert find_spec("A100") is None and find_spec("RTX 9999") is None
    with pytest.raises(ConfigError, match=r"importer.spec: 'RTX 9999' is not in the GPU spec table .*allowed: \["):
        gpu_spec("RTX 9999")


def test_a_record_missing_a_prior_field_is_refused(tmp_path):
    df = load_gpu_specs()
    df.loc[df["name"] == "GeForce RTX 3090", "power_limit_W"] = None
    path = tmp_path / "specs.csv"
    df.to_csv(path, index=False)
    with pytest.raises(ConfigError, match=r"importer.spec: .*'GeForce RTX 3090' lacks \['power_limit_W'\]"):
        gpu_spec("RTX 3090", path=path)


def test_timm_gpus_import_as_cuda_with_their_spec():
    df, _ = import_table(TIMM)
    assert set(df["device_kind"]) == {"cuda"}
    for dev, rows in df.groupby("device_name"):
        fp = json.loads(rows["device_fingerprint"].iloc[0])
        assert fp["spec"] == find_spec(dev) and fp["name"] == dev and rows["device_id"].nunique() == 1
        assert fp["compute_capability"] == gpu_spec(dev)["compute_capability"]
        # the CUDA prior's terms now apply: tensor cores (cc >= 8.0) and the board's power cap
        assert tensor_core_device(rows) and power_cap_W(rows) == gpu_spec(dev)["power_limit_W"]
    assert df["device_id"].nunique() == df["device_name"].nunique()


def test_spec_and_device_kind_settings():
    one = {**TIMM, "gpu": "RTX 4090"}
    df, _ = import_table({**one, "spec": "RTX A6000"})                 # a named record wins over the name
    assert json.loads(df["device_fingerprint"].iloc[0])["spec"] == "RTX A6000"
    df, _ = import_table({**one, "device_kind": "import"})
    assert set(df["device_kind"]) == {"import"} and df["device_fingerprint"].isna().all()
    with pytest.raises(ConfigError, match=r"importer.spec: .*describes one GPU but the source holds devices"):
        import_table({**TIMM, "spec": "RTX 4090"})
    with pytest.raises(ConfigError, match=r"importer.spec: a GPU spec .*needs importer.device_kind=cuda or auto"):
        import_table({**one, "spec": "RTX 4090", "device_kind": "cpu"})
    with pytest.raises(ConfigError, match=r"importer.device_kind: 'gpu' is not allowed; allowed: \['auto'"):
        import_table({**one, "device_kind": "gpu"})


def test_csv_device_kind_auto_and_cuda(tmp_path):
    cols = {"model": "arch", "device_name": "gpu_name", "input_size": "img", "batch_size": "bs",
            "precision": "dtype", "latency_ms": "lat_s"}
    params = {"name": "csv", "path": str(DATA / "mine.csv"), "columns": cols, "units": {"latency_ms": "s"},
              "unmapped": "list"}
    df, _ = import_table(params)                                          # 'Lab GPU': no record
    assert set(df["device_kind"]) == {"import"}
    with pytest.raises(ConfigError, match=r"importer.spec: no GPU spec record matches device 'Lab GPU'"):
        import_table({**params, "device_kind": "cuda"})
    df, _ = import_table({**params, "spec": "NVIDIA L4"})
    assert set(df["device_kind"]) == {"cuda"} and json.loads(df["device_fingerprint"].iloc[0])["spec"] == "L4"


def test_fingerprint_holds_the_peaks():
    fp = spec_fingerprint(gpu_spec("RTX 3090"), device_name="RTX 3090")
    assert fp["kind"] == "cuda" and fp["name"] == "RTX 3090" and fp["multiprocessors"] == 82
    assert peak_TFLOPS(fp, "fp16") == 142.0 and peak_TFLOPS(fp, "fp32") == 35.6


@pytest.mark.parametrize("overrides, expect", [
    (["importer.spec=RTX 9999", "importer.gpu=RTX 4090"], "importer.spec: 'RTX 9999' is not in the GPU spec table"),
    (["importer.device_kind=gpu"], "importer.device_kind"),
])
def test_bad_spec_is_one_line_and_exit_2(tmp_path, overrides, expect):
    assert expect in import_error_line(tmp_path, f"importer.path={DATA / 'timm_small.csv'}", *overrides)
