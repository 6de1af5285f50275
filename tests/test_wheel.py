"""A regular (non-editable) install works: build the wheel, install it into a fresh venv, run commands
from a directory outside the repository, and check that the configs come from the installed copy.

The fresh venv gets the project venv's third-party packages through a plain path line in a .pth file
(no download). Path lines are not scanned for further .pth files, so the project's editable-install
hook (``__editable__.carb-*.pth``) is not activated there: ``carb`` can only come from the wheel. To
prove the configs travel with the package, the wheel is built from a copy of the sources whose
``conf/train.yaml`` carries a marker the repository does not have, and that copy is deleted before
anything runs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import uuid
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ["pyproject.toml", "README.md", "carb", "conf"]


def _run(args, cwd, env, timeout=300):
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(p, src / name)
    marker = f"wheel-{uuid.uuid4().hex}"
    with open(src / "conf" / "train.yaml", "a") as f:
        f.write(f"\nwheel_marker: {marker}\n")

    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", ".", "-w", dist],
         cwd=src, env=env)
    (wheel,) = dist.glob("carb-*.whl")
    shutil.rmtree(src)  # nothing may read the build copy from here on

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp, env=env)
    py = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index", wheel],
         cwd=tmp, env=env)
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=tmp, env=env)
                .strip())
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}  # the project venv's packages
    (site / "zz_project_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    work = tmp / "elsewhere"
    work.mkdir()
    return {"wheel": wheel, "venv": venv, "py": py, "site": site, "work": work, "env": env, "marker": marker}


def test_wheel_ships_the_config_tree_and_data_but_no_scripts(installed):
    names = zipfile.ZipFile(installed["wheel"]).namelist()
    conf = {n for n in names if n.startswith("carb/conf/")}
    want = {f"carb/conf/{p.relative_to(ROOT / 'conf')}" for p in (ROOT / "conf").rglob("*.yaml")}
    assert want and want <= conf
    for n in ("carb/conf/train.yaml", "carb/conf/hydra/output/carb.yaml", "carb/conf/model/carb.yaml",
              "carb/conf/experiment/ablation.yaml", "carb/data/cpu-reference.parquet",
              "carb/data/timm-gpu-bench.csv", "carb/commands/screen.py",
              "carb/conf/gpu_run.yaml", "carb/measure/gpu_run.py", "carb/measure/fake_gpu.py"):
        assert n in names, n
    assert all(n.endswith(".yaml") for n in conf), sorted(n for n in conf if not n.endswith(".yaml"))
    assert not any("/benchmarks/" in n or "/gpu/" in n or n.endswith(".sh") for n in names)


def test_carb_and_its_configs_come_from_the_installed_copy(installed):
    out = _run([installed["py"], "-c", "import carb, carb.resources as r; "
                "print(carb.__file__); print(r.CONF_DIR); print(r.CONF_DIR.is_symlink())"],
               cwd=installed["work"], env=installed["env"])
    mod, conf, link = out.split()
    assert Path(mod).is_relative_to(installed["site"]) and Path(conf).is_relative_to(installed["site"])
    assert link == "False" and (Path(conf) / "train.yaml").is_file()
    assert installed["marker"] in (Path(conf) / "train.yaml").read_text()
    assert installed["marker"] not in (ROOT / "conf" / "train.yaml").read_text()


def test_screen_help_from_another_directory(installed):
    out = _run([installed["venv"] / "bin" / "carb-screen", "--help"], cwd=installed["work"], env=installed["env"])
    assert "== Configuration groups ==" in out
    assert "space: cpu, nas, paper, reference, reference_fp16, screening, smoke" in out and "screen: default, quickstart, quickstart_cpu" in out
    assert "experiment: two_stage" in out and "\ndata: " not in out   # only the groups carb-screen takes
    assert not (installed["work"] / "outputs").exists()


def test_train_cfg_job_from_another_directory(installed):
    out = _run([installed["venv"] / "bin" / "carb-train", "--cfg", "job"], cwd=installed["work"],
               env=installed["env"])
    assert f"wheel_marker: {installed['marker']}" in out  # composed from the wheel's conf, not the repo's
    for key in ("data:", "features:", "model:", "split:", "tracking:", "evaluate:"):
        assert f"\n{key}" in f"\n{out}", key
    out = _run([installed["venv"] / "bin" / "carb-train", "--cfg", "hydra"], cwd=installed["work"],
               env=installed["env"])
    assert "name: train" in out


def test_gpu_collector_dry_run_from_the_installed_copy(installed):
    """``python -m carb.measure.gpu_run`` finds its settings (conf/gpu_run.yaml) inside the installed package."""
    import json

    out = installed["work"] / "gpu-dry"
    _run([installed["py"], "-m", "carb.measure.gpu_run", "--minutes", "0.05", "--out", out, "--fake-device"],
         cwd=installed["work"], env=installed["env"])
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["config"]["space"] == "paper" and prov["fake_device"] is True
