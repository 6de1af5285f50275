"""The model zoo as a design space (carb.design.zoo_space), its dataset schema (carb.data.zoo_schema) and
``carb-collect space=zoo`` end to end on the real CPU backend with tiny networks (tiny inputs, guard off)."""
from __future__ import annotations

import pandas as pd
import pytest

from carb.commands.cli import compose
from carb.data.io import load_dataset, validate_dataset
from carb.data.zoo_schema import ZOO_COLUMNS, is_zoo_frame, validate_zoo_dataset
from carb.design.arch import ArchConfig
from carb.design.zoo_space import ZooConfig, zoo_configs, zoo_product
from carb.errors import ConfigError, DatasetError, ZooError
from carb.measure.collector import make_row

SPACE = {"name": "t", "kind": "zoo", "mode": "grid", "seed": 0, "models": ["tv:resnet18", "timm:vit_tiny_patch16_224"],
         "input_sizes": [64, 128], "batch_sizes": [1, 4], "precisions": ["fp32", "bf16"],
         "input_sizes_of": {"timm:vit_tiny_patch16_224": [224]}}


def test_product_and_per_model_sizes():
    cfgs = zoo_product(SPACE)
    assert len(cfgs) == 2 * 2 * 2 + 1 * 2 * 2
    vit = [c for c in cfgs if c.model_name.startswith("timm:vit")]
    assert {c.input_size for c in vit} == {224} and vit[0].family == "vit"
    ids = [c.config_id for c in cfgs]
    assert len(set(ids)) == len(ids) and all(len(i) == 16 for i in ids)
    assert ZooConfig("tv:resnet18", 64, 1, "fp32").config_id == cfgs[0].config_id  # stable


def test_zoo_id_never_a_resnet_id():
    a = ArchConfig(block="basic", depth=18, width_mult=1.0, input_size=64, batch_size=1, precision="fp32")
    assert ZooConfig("tv:resnet18", 64, 1, "fp32").config_id != a.config_id


@pytest.mark.parametrize("bad,needle", [({"color": 1}, "unknown key"), ({"models": []}, "space.models"),
                                        ({"precisions": ["int8"]}, "space.precisions"),
                                        ({"input_sizes_of": {"tv:resnet18": [0]}}, "input_sizes"),
                                        ({"batch_sizes": [0]}, "space.batch_sizes")])
def test_bad_space_one_line(bad, needle):
    with pytest.raises(ConfigError, match=needle):
        zoo_product({**SPACE, **bad})


def test_cap_sample_and_refused_models():
    per_image = {"tv:resnet18": 1e9, "timm:vit_tiny_patch16_224": 2e9}

    def flops_of(name, size):
        if name == "tv:broken":
            raise ZooError("model 'tv:broken': cannot be traced")
        return per_image[name] * (size / 128) ** 2

    space = {**SPACE, "models": [*SPACE["models"], "tv:broken"], "max_flops": 2.5e9}
    cfgs, refused = zoo_configs(space, flops_of=flops_of)
    assert refused == {"tv:broken": "model 'tv:broken': cannot be traced"}
    assert cfgs and all(flops_of(c.model_name, c.input_size) * c.batch_size <= 2.5e9 for c in cfgs)
    assert not any(c.model_name.startswith("timm:vit") for c in cfgs)   # 224 px: 6.1e9 per image
    sample, _ = zoo_configs({**space, "mode": "random", "n": 3, "seed": 1}, flops_of=flops_of)
    again, _ = zoo_configs({**space, "mode": "random", "n": 3, "seed": 1}, flops_of=flops_of)
    assert len(sample) == 3 and sample == again and set(sample) <= set(cfgs)
    with pytest.raises(ConfigError, match="no configurations"):
        zoo_configs({**space, "max_flops": 1.0}, flops_of=flops_of)


def _row(cfg: ZooConfig, **over):
    ident = {"device_name": "cpu-x", "device_kind": "cpu", "device_id": "abc", "protocol_id": "p"}
    measured = {"latency_ms": 3.0, "peak_memory_MB": 12.0, "status": "ok"}
    row = make_row(cfg, ident, {"flops": 1e9, "params": 11_689_512, "n_conv": 20}, measured, "ok", None)
    row.update(over)
    return row


def test_zoo_rows_validate_and_dispatch():
    cfgs = zoo_product(SPACE)[:3]
    df = pd.DataFrame([_row(c) for c in cfgs])
    assert is_zoo_frame(df) and "block" not in df.columns and set(ZOO_COLUMNS) <= set(df.columns)
    out = validate_dataset(df)
    assert list(out.columns[:len(ZOO_COLUMNS)]) == list(ZOO_COLUMNS)
    assert out["family"].tolist() == ["resnet"] * 3 and out["params"].iloc[0] == 11_689_512
    with pytest.raises(DatasetError, match="'precision' allows"):
        validate_zoo_dataset(pd.DataFrame([_row(cfgs[0], precision="int8")]))
    with pytest.raises(DatasetError, match="model_name"):
        validate_zoo_dataset(pd.DataFrame([_row(cfgs[0], model_name="  ")]))
    with pytest.raises(DatasetError, match="never 0"):
        validate_zoo_dataset(pd.DataFrame([_row(cfgs[0], latency_ms=0.0)]))


TINY = ["device=cpu", "measure=cpu", "measure.n_runs=2", "measure.n_warmup=1", "measure.min_window_s=0",
        "measure.cooldown_s=0", "measure.guard.enabled=false", "progress.enabled=false"]


def test_collect_zoo_end_to_end(tmp_path):
    """Two tiny real networks measured on this CPU into a zoo dataset; a restart measures nothing more;
    the ResNet schema's file is refused as ``out`` of a zoo space."""
    from carb.commands.collect import run_collect

    db = f"sqlite:///{tmp_path}/mlflow.db"
    out = tmp_path / "zoo.parquet"
    over = [f"tracking.uri={db}", *TINY, f"out={out}", "space.mode=grid", "space.max_flops=null",
            "space.models=[tv:squeezenet1_1,tv:mobilenet_v3_small]", "space.input_sizes=[32]",
            "space.batch_sizes=[1]", "space.precisions=[fp32]"]
    r = run_collect(compose("collect", ["space=zoo", *over]))
    df = load_dataset(out)
    assert r["n_ok"] == 2 and is_zoo_frame(df) and (df["status"] == "ok").all()
    assert set(df["family"]) == {"squeezenet", "mobilenet"}
    assert (df["latency_ms"] > 0).all() and (df["peak_memory_MB"] > 0).all()
    # the tracer's parameter count is the library's; the liveness peak is below the measured peak
    assert df.set_index("model_name").loc["tv:squeezenet1_1", "params"] == 1_235_496
    assert (df["peak_live_MB"] < df["peak_memory_MB"]).all()
    again = run_collect(compose("collect", ["space=zoo", *over]))
    assert again["n_measured"] == 0 and len(load_dataset(out)) == 2
    resnet = tmp_path / "resnet.parquet"
    run_collect(compose("collect", ["space=smoke", f"tracking.uri={db}", *TINY, f"out={resnet}",
                                    "space.batch_sizes=[1]", "space.blocks=[basic]", "limit=1"]))
    with pytest.raises(DatasetError, match="ResNet dataset"):
        run_collect(compose("collect", ["space=zoo", *[o for o in over if not o.startswith("out=")],
                                        f"out={resnet}"]))


def test_trace_a_name_in_a_fresh_interpreter(tmp_path):
    """The first trace of a process goes through carb.design.zoo's torchvision fix (the tracer's cache key
    must not import timm, which imports torchvision, before it)."""
    import os
    import subprocess
    import sys

    code = ("from carb.design.zoo_features import zoo_summary; "
            "print(int(zoo_summary('tv:squeezenet1_1', 32)['params']))")
    env = {**os.environ, "CARB_CACHE": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-500:]
    assert r.stdout.strip().splitlines()[-1] == "1235496"


def test_a_zoo_model_and_a_resnet_model_of_one_device_are_two_registered_models():
    """A zoo model takes networks, a ResNet model knobs: the same device's two kinds get two names."""
    from carb.data.schema import model_name

    ident = {"device_name": ["AMD EPYC"], "device_id": ["34cc4b132c"], "device_fingerprint": ["{}"]}
    resnet = pd.DataFrame({**ident, "block": ["basic"]})
    zoo = pd.DataFrame({**ident, "model_name": ["tv:resnet18"]})
    assert model_name(resnet) == "carb-amd-epyc-34cc4b132c"
    assert model_name(zoo) == "carb-amd-epyc-34cc4b132c-zoo"
