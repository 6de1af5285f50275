"""Helpers of experiments/gpu/run_gpu.sh: the NVML energy-counter update period and the provenance file.

    python experiments/gpu/gpu_helpers.py period <out_dir>
    python experiments/gpu/gpu_helpers.py provenance <out_dir> <minutes> <collect_log>
"""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path


def period(out: Path) -> None:
    from carb.measure.cuda import energy_update_period_under_load

    res = energy_update_period_under_load(0, seconds=4.0)
    res["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    (out / "nvml_energy_update_period.json").write_text(json.dumps(res, indent=2))
    print(f"NVML energy counter: median update period {res['median_period_ms']:.1f} ms "
          f"(min {res['min_period_ms']:.1f}, max {res['max_period_ms']:.1f}, {res['n_updates']} updates)")


def provenance(out: Path, minutes: float, log: Path) -> None:
    import pandas as pd

    ds = out / "dataset.parquet"
    df = pd.read_parquet(ds) if ds.exists() else pd.DataFrame()
    period_f = out / "nvml_energy_update_period.json"
    prov = {
        "what": "real measurements of the `paper` space by carb-collect on an NVIDIA GPU (not synthetic)",
        "script": "experiments/gpu/run_gpu.sh", "budget_minutes": minutes,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "python": platform.python_version(),
                 "nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                     "clocks.max.mem,power.limit", "--format=csv,noheader"])},
        "git_commit": _run(["git", "rev-parse", "HEAD"]),
        "rows": {"total": int(len(df)), **({k: int(v) for k, v in df["status"].value_counts().items()}
                                           if len(df) else {})},
        "devices": sorted(df["device_name"].dropna().unique().tolist()) if len(df) else [],
        "torch_version": sorted(df["torch_version"].dropna().unique().tolist()) if len(df) else [],
        "measure_settings": "conf/measure/gpu.yaml (see the MLflow run params in mlruns/ for the resolved values)",
        "energy_update_period": json.loads(period_f.read_text()) if period_f.exists() else None,
        "collect_log_tail": log.read_text()[-3000:] if log.exists() else None,
    }
    (out / "provenance.json").write_text(json.dumps(prov, indent=2, default=str))
    print(f"provenance: {prov['rows']}")


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    what, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    if what == "period":
        period(out)
    else:
        provenance(out, float(sys.argv[3]), Path(sys.argv[4]))
