"""Zoo networks in the lent-GPU collector (issue 43 item 2; :mod:`carb.measure.gpu_zoo`) without a GPU: the plan
(names from the zoo space, the settings' knobs, names this machine's libraries lack refused with a reason),
a network whose constructor fails refused mid-run, and ``python -m carb.measure.gpu_run --space zoo`` end to
end on the fake device (:mod:`carb.measure.fake_gpu`) with Hydra, MLflow and the rest blocked, its rows in
the zoo schema and imported by ``carb-import importer=gpu_run``."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

from carb.measure import gpu_run
from carb.measure.gpu_zoo import plan_space, zoo_plan
from carb.resources import CONF_DIR
from tests.test_gpu_run import BLOCKER, FAKE_RUN, ROOT

#: The blocker of tests/test_gpu_run.py less matplotlib, scipy and scikit-learn: the GPU machine's image has
#: those three (/work/.library/device/KINDS.md), and importing torchvision there makes torch._dynamo ask
#: importlib.util.find_spec for them (a blocker that raises there breaks torchvision's import itself). The
#: packages the image lacks stay blocked.
ZOO_BLOCKER = BLOCKER.replace('"matplotlib", "scipy",\n           "sklearn")', ")")
assert ZOO_BLOCKER != BLOCKER

SHIPPED = yaml.safe_load((CONF_DIR / "gpu_run.yaml").read_text())
ZOO_NAMES = yaml.safe_load((CONF_DIR / "space" / "zoo.yaml").read_text())["models"]


def test_shipped_plan_takes_the_zoo_spaces_names_and_the_settings_knobs():
    space = plan_space(SHIPPED)
    assert space["models"] == ZOO_NAMES and space["max_flops"] is None and space["mode"] == "random"
    z = SHIPPED["zoo"]
    assert space["batch_sizes"] == z["batch_sizes"] and sorted(space["precisions"]) == ["bf16", "fp16", "fp32"]
    groups, refused = zoo_plan(SHIPPED, 0)
    configs = [c for g in groups for c in g]
    assert refused == {} and len(configs) == z["n"]              # every shipped name is known here
    assert {g[0].model_name for g in groups} <= set(ZOO_NAMES) and len(groups) >= 45   # most networks drawn
    assert all(len({c.model_name for c in g}) == 1 for g in groups)                    # one network per group
    for g in groups:                                              # inside a group: precision, size, batch
        keys = [(c.precision, c.input_size, c.batch_size) for c in g]
        assert keys == sorted(keys)
    vit = [c for c in configs if c.model_name == "timm:vit_tiny_patch16_224"]
    assert all(c.input_size == 224 for c in vit)                 # input_sizes_of kept
    other = zoo_plan(SHIPPED, 1)[0]                               # another seed: another network order, same rows
    assert [g[0].model_name for g in other] != [g[0].model_name for g in groups]
    assert sorted(c.config_id for g in other for c in g) == sorted(c.config_id for c in configs)


def test_names_the_library_lacks_are_refused_with_a_reason_not_a_crash():
    cfg = {"zoo": {"models": ["tv:resnet18", "timm:no_such_net_zz", "tv:fasterrcnn_resnet50_fpn"],
                   "input_sizes": [64], "batch_sizes": [1, 2], "precisions": ["fp32"]}}
    groups, refused = zoo_plan(cfg, 0)
    assert [g[0].model_name for g in groups] == ["tv:resnet18"] and len(groups[0]) == 2
    assert set(refused) == {"timm:no_such_net_zz", "tv:fasterrcnn_resnet50_fpn"}
    assert "unknown model" in refused["timm:no_such_net_zz"]
    assert "detection model, not an image-classification backbone" in refused["tv:fasterrcnn_resnet50_fpn"]


@pytest.mark.parametrize("zoo, needle", [
    ({"bogus": 1}, "zoo: unknown setting(s) ['bogus']"),
    ({"space": "paper"}, "zoo.space: 'paper' is not a zoo space"),
    ({"models": ["timm:no_such_net_zz"]}, "zoo: no model of the plan is known here"),
    ({"precisions": ["fp8"]}, "space.precisions: allowed"),
])
def test_a_bad_zoo_plan_is_one_line_and_exit_2_before_anything_starts(tmp_path, capsys, zoo, needle):
    conf = tmp_path / "bad.yaml"
    conf.write_text(yaml.safe_dump({**SHIPPED, "zoo": {**SHIPPED["zoo"], **zoo}}))
    out = tmp_path / "out"
    assert gpu_run.main(["--out", str(out), "--config", str(conf), "--fake-device", "--space", "zoo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("carb.measure.gpu_run: error:") and needle in err[0], err
    assert not out.exists()


def test_a_network_whose_constructor_fails_is_refused_and_skipped(tmp_path, monkeypatch):
    from carb.errors import ZooError
    from carb.measure import gpu_zoo
    from carb.measure.gpu_run import Log, Run, build_network

    def fail(c):
        raise ZooError(f"model {c.model_name!r}: the constructor refuses its defaults: boom")

    monkeypatch.setattr(gpu_zoo, "build", fail)
    groups, _ = zoo_plan({"zoo": {"models": ["tv:resnet18"], "input_sizes": [64], "batch_sizes": [1],
                                  "precisions": ["fp32"]}}, 0)
    r = Run(out=tmp_path, log=Log(tmp_path / "run.log", 0.0), cfg={"space": "zoo"}, settings=None, fake=True, zoo=True)
    assert build_network(r, groups[0][0]) is None
    assert r.refused == {"tv:resnet18": "model 'tv:resnet18': the constructor refuses its defaults: boom"}
    assert "refused tv:resnet18" in (tmp_path / "run.log").read_text()


@pytest.mark.slow
def test_zoo_run_end_to_end_on_a_fake_device_with_only_the_allowed_imports(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("space: paper\n" + FAKE_RUN + textwrap.dedent("""
        zoo: {space: zoo, models: [tv:squeezenet1_1, timm:lcnet_050, timm:no_such_net_zz], input_sizes: [64],
              batch_sizes: [1, 2], precisions: [fp32, bf16]}
    """))
    # the prepared one-call script itself, its python wrapped in the blocker (PY), on the fake device
    blocker = tmp_path / "blocked_python.py"
    blocker.write_text(ZOO_BLOCKER)
    py = tmp_path / "py"
    py.write_text(f'#!/bin/sh\nshift\nexec "{sys.executable}" "{blocker}" "$@"\n')   # drops "-m"
    py.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OUT": str(tmp_path / "OUT"), "PY": str(py)}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "studies" / "gpu_zoo.sh"), "1.5", "0", "--fake-device",
                        "--config", str(cfg)], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = tmp_path / "OUT" / "zoo"           # $OUT/zoo/<files>: one folder down
    assert (out / "nvidia-smi.txt").exists()
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and all((out / f).is_file() for f in files)
    from carb.data.importers.gpu_run import dataset_counts, import_gpu_run
    from carb.data.zoo_schema import ZOO_COLUMNS, is_zoo_frame

    df, prov = import_gpu_run(out)
    assert is_zoo_frame(df) and list(df.columns[: len(ZOO_COLUMNS)]) == list(ZOO_COLUMNS)
    assert prov["space"] == "zoo" and list(prov["refused"]) == ["timm:no_such_net_zz"]
    assert "unknown model" in prov["refused"]["timm:no_such_net_zz"]
    from carb.design.zoo import import_timm   # the one place torchvision imports on the CPU wheel

    assert prov["libraries"]["timm"] == import_timm().__version__ and prov["libraries"]["torchvision"]
    assert "refused timm:no_such_net_zz" in (out / "run.log").read_text()
    ok = df[df["status"] == "ok"]
    assert set(ok["model_name"]) <= {"tv:squeezenet1_1", "timm:lcnet_050"} and len(ok) >= 2   # 8 on a quiet CPU
    assert set(ok["family"]) <= {"squeezenet", "lcnet"}
    assert (ok["latency_ms"] > 0).all() and (ok["peak_memory_MB"] > 0).all()
    assert (ok["flops"] > 0).all() and (ok["params"] > 0).all()   # the layer table's features
    measured = ok[ok["energy_J"].notna()]
    assert len(measured) >= 1 and (measured["energy_J"] > 0).all()
    assert ok.loc[ok["energy_J"].isna(), "missing_reason"].str.contains("energy").all()
    assert dataset_counts(df)[1] == ok["model_name"].nunique()
    # back home: carb-import importer=gpu_run writes the zoo dataset with its provenance
    from carb.commands.cli import compose
    from carb.commands.gpu_import import run_gpu_import
    from carb.data.io import load_dataset

    dest = tmp_path / "zoo-gpu.parquet"
    res = run_gpu_import(compose("import", ["importer=gpu_run", f"importer.path={out}", f"out={dest}",
                                            f"tracking.uri=sqlite:///{tmp_path}/m.db"]))
    back = load_dataset(dest)
    assert is_zoo_frame(back) and len(back) == len(df) and res["n_arch"] == ok["model_name"].nunique()
    assert json.loads((tmp_path / "zoo-gpu.provenance.json").read_text())["refused"] == prov["refused"]


def test_a_kept_zoo_run_never_takes_the_resnet_runs_folder():
    from carb.data.importers.gpu_run import kept_name

    prov = {"slug": "nvidia-h100-80gb-hbm3"}
    assert kept_name(prov, "2026-12-07", 0) == "h100-80gb-hbm3-run-2026-12-07-seed0"
    assert kept_name({**prov, "space": "zoo"}, "2026-12-07", 0) == "h100-80gb-hbm3-zoo-run-2026-12-07-seed0"


def test_a_layer_table_the_tracer_cannot_give_is_nan_and_logged_not_a_crash(monkeypatch):
    import math

    from carb.design import zoo_features
    from carb.measure.gpu_zoo import deadline_flops, static_for

    groups, _ = zoo_plan({"zoo": {"models": ["tv:resnet18"], "input_sizes": [64], "batch_sizes": [1, 4],
                                  "precisions": ["fp32"]}}, 0)
    ok = static_for(groups[0])
    assert all(v["flops"] > 0 for v in ok.values())

    def broken(*a, **k):   # e.g. an API the tracer uses that another torch lacks
        raise AttributeError("module 'torch' has no attribute 'something_new'")

    monkeypatch.setattr(zoo_features, "zoo_static", broken)
    lines: list[str] = []
    bad = static_for(groups[0], lines.append)
    assert all(math.isnan(v["flops"]) for v in bad.values()) and len(lines) == 1   # one line per (net, size, prec)
    assert "no layer table for tv:resnet18 at 64 px fp32: AttributeError" in lines[0]
    c = groups[0][1]
    assert deadline_flops(bad[c.config_id], c.batch_size) == 2.0e10 * c.batch_size   # the deadline still plans
