"""The timm importer on real rows of the shipped timm GPU benchmark table."""
from __future__ import annotations

import hashlib
import re

import numpy as np
import pandas as pd
import pytest

from carb.data.importers.timm import (
    TIMM_DATA,
    import_timm,
    load_timm_table,
    timm_config_id,
    timm_overlaps,
    timm_pair,
)
from carb.data.schema import COLUMNS, validate_dataset
from carb.errors import ConfigError, DatasetError


@pytest.fixture(scope="module")
def raw() -> pd.DataFrame:
    return load_timm_table()


@pytest.fixture(scope="module")
def few(raw) -> pd.DataFrame:
    """A few real rows: resnet50, resnet18 and two non-plain models on the RTX 4090 and RTX 5090."""
    keep = raw["gpu"].isin(["RTX 4090", "RTX 5090"]) & raw["model"].isin(
        ["resnet50", "resnet18", "wide_resnet50_2", "seresnet50"]) & raw["img_size"].isin([224, 288])
    return raw[keep].reset_index(drop=True)


def test_shipped_copy_matches_its_provenance(raw):
    """The shipped table is byte for byte the file its provenance note describes: the sha256 recorded in
    timm-gpu-bench.md, and the row, model and GPU counts the note states."""
    note = TIMM_DATA.parent / "timm-gpu-bench.md"
    lic = TIMM_DATA.parent / "LICENSE-timm-gpu-bench"
    text = " ".join(note.read_text().split())
    assert "Apache License" in lic.read_text() and "Ross Wightman" in lic.read_text()
    assert "Apache-2.0" in text and "pytorch-image-models" in text
    recorded = re.search(r"sha256 `([0-9a-f]{64})`", text)
    assert recorded, "timm-gpu-bench.md must record the sha256 of timm-gpu-bench.csv"
    assert hashlib.sha256(TIMM_DATA.read_bytes()).hexdigest() == recorded.group(1)
    rows, models = re.search(r"([\d,]+) rows, (\d+) ResNet-family models", text).groups()
    assert len(raw) == int(rows.replace(",", "")) and raw["model"].nunique() == int(models)
    gpus = re.search(r"GPUs (.+?)\. Columns", text).group(1).replace(" and ", ", ").split(", ")
    assert sorted(raw["gpu"].unique()) == sorted(gpus)


def test_resnet50_on_two_gpus(few):
    a = import_timm(few, gpu="RTX 4090", precision="amp_fp16", compile="eager")
    b = import_timm(few, gpu="RTX 5090", precision="amp_fp16", compile="eager")
    ra = a[(a["model"] == "resnet50") & (a["input_size"] == 224)].iloc[0]
    rb = b[(b["model"] == "resnet50") & (b["input_size"] == 224)].iloc[0]
    src = few[(few["model"] == "resnet50") & (few["img_size"] == 224) & (few["compile"] == "eager")
              & (few["torch"] == "2.9.1")].set_index("gpu")
    assert ra["latency_ms"] == pytest.approx(src.loc["RTX 4090", "step_time_ms"])
    assert rb["latency_ms"] == pytest.approx(src.loc["RTX 5090", "step_time_ms"])
    assert ra["config_id"] == rb["config_id"]                       # same configuration, same id
    assert ra["device_name"] == "RTX 4090" and ra["device_kind"] == "import"
    assert ra["torch_version"] == "2.9.1"                            # newest torch on the 4090
    assert ra["batch_size"] == src.loc["RTX 4090", "batch_size"]
    assert ra["flops"] == pytest.approx(src.loc["RTX 4090", "gmacs_per_image"] * 1e9 * ra["batch_size"])
    assert ra["params"] == 25_560_000
    assert ra["param_size_MB"] == pytest.approx(25_560_000 * 4 / 2**20)   # autocast keeps fp32 weights
    assert (ra["block"], ra["depth"], ra["stages"], ra["n_conv"]) == ("bottleneck", 50, "3-4-6-3", 53)
    assert ra["precision"] == "fp16" and ra["timm_precision"] == "amp_fp16"
    assert ra["width_mult"] == 1.0 and bool(ra["early_downsample"])
    for col in ("energy_J", "peak_memory_MB", "avg_sm_util", "total_activation_MB"):
        assert np.isnan(ra[col])
    assert "energy_J" in ra["missing_reason"] and "latency only" in ra["missing_reason"]
    assert list(a.columns[:len(COLUMNS)]) == list(COLUMNS)


def test_non_plain_and_wide_models(few):
    a = import_timm(few, gpu="RTX 4090", precision="amp_fp16", compile="eager").set_index(
        ["model", "input_size"])
    se = a.loc[("seresnet50", 224)]
    assert pd.isna(se["block"]) and pd.isna(se["depth"]) and pd.isna(se["n_conv"])
    assert "not a plain ResNet" in se["missing_reason"]
    w2 = a.loc[("wide_resnet50_2", 224)]
    assert w2["block"] == "bottleneck" and w2["timm_block"] == "bottleneck_w2"
    # the inner width knob expresses it exactly: width 1, inner width x2 (torchvision width_per_group=128)
    assert (w2["width_mult"], w2["inner_mult"]) == (1.0, 2.0) and "not a plain" not in w2["missing_reason"]


def test_plain_only_is_schema_valid(few):
    p = import_timm(few, gpu="RTX 5090", precision="amp_fp16", compile="inductor", plain_only=True)
    assert set(p["model"]) == {"resnet50", "resnet18", "wide_resnet50_2"}
    validate_dataset(p)   # raises on any schema violation
    assert (p["latency_ms"] > 0).all() and p["config_id"].is_unique


def test_config_id_depends_on_settings_not_gpu():
    base = timm_config_id("resnet50", 224, 1024, "amp_fp16", "eager", "nchw")
    assert base.startswith("timm-") and len(base) == 17
    assert base == timm_config_id("resnet50", 224, 1024, "amp_fp16", "eager", "nchw")
    others = {timm_config_id("resnet50", 224, 512, "amp_fp16", "eager", "nchw"),
              timm_config_id("resnet50", 224, 1024, "amp_fp16", "torch.compile(inductor)", "nchw"),
              timm_config_id("resnet50", 224, 1024, "amp_fp16", "eager", "nhwc"),
              timm_config_id("resnet50", 256, 1024, "amp_fp16", "eager", "nchw"),
              timm_config_id("resnet50", 224, 1024, "amp_bf16", "eager", "nchw")}
    assert base not in others and len(others) == 5


def test_torch_version_selection(raw):
    sub = raw[(raw["gpu"] == "RTX 4090") & raw["model"].isin(["resnet50"])]
    latest = import_timm(sub, gpu="RTX 4090", precision="amp_fp16", compile="eager")
    assert set(latest["torch_version"]) == {"2.9.1"} and latest["config_id"].is_unique
    old = import_timm(sub, gpu="RTX 4090", precision="amp_fp16", compile="eager", torch="2.4.0")
    assert set(old["torch_version"]) == {"2.4.0"}
    both = import_timm(sub, gpu="RTX 4090", precision="amp_fp16", compile="eager", torch="all")
    assert len(both) == len(latest) + len(old)


def test_pair_overlap_for_4090_vs_5090():
    a, b = timm_pair("RTX 4090", "RTX 5090", precision="amp_fp16", compile="eager")
    assert len(a) == len(b) == 205
    assert len(set(a["config_id"]) & set(b["config_id"])) == 197   # 8 models ran at other batch sizes
    ov = timm_overlaps("RTX 4090", "RTX 5090")
    assert ov.iloc[0][["precision", "compile", "n_common"]].tolist() == ["amp_fp16", "eager", 197]


@pytest.mark.parametrize("kwargs, match", [
    ({"gpu": "RTX 9999"}, "timm.gpu"),
    ({"gpu": "RTX 4090", "precision": "fp8"}, "timm.precision"),
    ({"gpu": "RTX 4090", "compile": "jit"}, "timm.compile"),
    ({"gpu": "RTX 5090", "memory_layout": "nhwc"}, "available"),
])
def test_bad_selection_is_one_line_config_error(few, kwargs, match):
    with pytest.raises(ConfigError, match=match) as e:
        import_timm(few, **kwargs)
    assert "\n" not in str(e.value)


def test_same_gpu_twice_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="timm.gpu_b"):
        timm_pair("RTX 4090", "RTX 4090")
    with pytest.raises(DatasetError, match="does not exist"):
        load_timm_table(tmp_path / "nope.csv")
