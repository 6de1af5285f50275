"""The prepared GPU run, checked on a CPU host: the shell script parses, and the provenance writer
records settings, row counts and the energy update period (GPU facts null with the reason here)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments" / "gpu"))


def test_run_gpu_sh_parses():
    r = subprocess.run(["bash", "-n", str(ROOT / "experiments/gpu/run_gpu.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = (ROOT / "experiments/gpu/run_gpu.sh").read_text()
    assert "set -euo pipefail" in text and "max_minutes=" in text and "-m gpu" in text


def test_provenance_on_a_cpu_host(tmp_path):
    import gpu_helpers

    shutil.copy(ROOT / "carb/data/cpu-reference.parquet", tmp_path / "dataset.parquet")  # a real dataset
    (tmp_path / "nvml_energy_update_period.json").write_text(json.dumps({"median_period_ms": 20.0}))
    (tmp_path / "run_gpu.log").write_text("[run_gpu] done\n")
    gpu_helpers.provenance(tmp_path, 7.0, tmp_path / "run_gpu.log")
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov["dataset"]["rows"]["total"] == prov["dataset"]["rows"]["ok"] == 600
    assert prov["settings"]["measure"]["clocks"]["lock"] is True and prov["settings"]["space"]["name"] == "paper"
    assert prov["energy_update_period"]["median_period_ms"] == 20.0 and prov["budget_minutes"] == 7.0
    assert prov["torch_version"] and "cuda_version" in prov
    assert prov["gpu"] is None or prov["gpu"]["name"]
    assert prov["gpu"] is not None or "NVML" in prov["reason"]
    assert prov["log_tail"].endswith("done\n")
