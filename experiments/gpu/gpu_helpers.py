"""Helpers of experiments/gpu/run_gpu.sh: the NVML energy-counter update period and the provenance file.

    python experiments/gpu/gpu_helpers.py period <out_dir> [seconds]
    python experiments/gpu/gpu_helpers.py provenance <out_dir> <minutes> <log> [collect overrides...]

``provenance`` also runs on a CPU-only host (GPU facts are then null with the reason), so it is tested
there (tests/test_gpu_script.py).
"""
from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: The collection run_gpu.sh starts (also composed here to record the resolved settings).
COLLECT_OVERRIDES = ["space=paper", "device=cuda", "measure=gpu"]


def period(out: Path, seconds: float = 4.0) -> dict[str, Any]:
    """Poll the NVML total-energy counter under a matmul load; write nvml_energy_update_period.json."""
    from carb.measure.cuda import energy_update_period_under_load

    res = energy_update_period_under_load(0, seconds=seconds)
    res["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    res["method"] = ("nvmlDeviceGetTotalEnergyConsumption polled every 0.5 ms for `seconds` while a 4096x4096 "
                     "fp32 matmul loop runs; periods are the intervals between distinct counter values")
    (out / "nvml_energy_update_period.json").write_text(json.dumps(res, indent=2))
    print(f"NVML energy counter: median update period {res['median_period_ms']:.1f} ms "
          f"(min {res['min_period_ms']:.1f}, max {res['max_period_ms']:.1f}, {res['n_updates']} updates)")
    return res


def gpu_facts() -> dict[str, Any]:
    """GPU name, driver, clocks (current / max / application), power limit from NVML; torch and CUDA
    versions. Missing pieces are None with ``reason``."""
    facts: dict[str, Any] = {"torch_version": None, "cuda_version": None, "cudnn_version": None,
                             "cuda_available": False, "gpu": None, "reason": None}
    try:
        import torch

        facts.update(torch_version=torch.__version__, cuda_version=torch.version.cuda,
                     cuda_available=bool(torch.cuda.is_available()))
        if facts["cuda_available"]:
            facts["cudnn_version"] = torch.backends.cudnn.version()
    except Exception as e:  # noqa: BLE001
        facts["reason"] = f"torch not importable: {e}"
    try:
        import pynvml as n

        n.nvmlInit()
        try:
            h = n.nvmlDeviceGetHandleByIndex(0)
            txt = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731

            def clk(fn, which):
                try:
                    return int(fn(h, which))
                except Exception:  # noqa: BLE001
                    return None

            facts["gpu"] = {
                "name": txt(n.nvmlDeviceGetName(h)), "driver": txt(n.nvmlSystemGetDriverVersion()),
                "memory_total_MB": int(n.nvmlDeviceGetMemoryInfo(h).total) / 2**20,
                "clocks_MHz": {
                    "sm_now": clk(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
                    "mem_now": clk(n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
                    "sm_max": clk(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_SM),
                    "mem_max": clk(n.nvmlDeviceGetMaxClockInfo, n.NVML_CLOCK_MEM),
                    "sm_application": clk(n.nvmlDeviceGetApplicationsClock, n.NVML_CLOCK_SM),
                    "mem_application": clk(n.nvmlDeviceGetApplicationsClock, n.NVML_CLOCK_MEM)},
            }
            try:
                facts["gpu"]["power_limit_W"] = n.nvmlDeviceGetPowerManagementLimit(h) / 1000.0
            except Exception:  # noqa: BLE001
                facts["gpu"]["power_limit_W"] = None
        finally:
            n.nvmlShutdown()
    except Exception as e:  # noqa: BLE001 - no GPU / no NVML: recorded, not fatal
        facts["reason"] = f"NVML not available: {' '.join(str(e).split()) or type(e).__name__}"
    return facts


def collect_settings(overrides: list[str]) -> dict[str, Any]:
    """The resolved measure settings, seed and space of the collection (composed like the command)."""
    from carb.commands.cli import compose, to_dict

    c = to_dict(compose("collect", [*COLLECT_OVERRIDES, *overrides]))
    return {"overrides": [*COLLECT_OVERRIDES, *overrides], "measure": c["measure"], "seed": c["seed"],
            "space": c["space"], "device": c["device"]}


def _uniq(df, col: str) -> list:
    if col not in df.columns:
        return []
    vals = df[col].dropna().unique().tolist()
    return sorted((v for v in vals if not (isinstance(v, float) and math.isnan(v))), key=str)


def dataset_summary(ds: Path) -> dict[str, Any]:
    """Row counts by status, devices, versions, clocks and time span of the collected dataset."""
    if not ds.exists():
        return {"rows": {"total": 0}, "reason": f"{ds.name} was not written"}
    import pandas as pd

    df = pd.read_parquet(ds)
    ok = df[df["status"] == "ok"] if "status" in df else df
    s: dict[str, Any] = {
        "rows": {"total": int(len(df)), **{str(k): int(v) for k, v in df["status"].value_counts().items()}},
        "devices": _uniq(df, "device_name"), "drivers": _uniq(df, "driver"),
        "torch_version": _uniq(df, "torch_version"),
        "locked_sm_clock_MHz": _uniq(ok, "locked_sm_clock_MHz"),
        "locked_mem_clock_MHz": _uniq(ok, "locked_mem_clock_MHz"),
        "measured_from": str(df["measured_at"].min()) if len(df) else None,
        "measured_to": str(df["measured_at"].max()) if len(df) else None,
        "energy_J_present": int(ok["energy_J"].notna().sum()) if "energy_J" in ok else 0,
    }
    if len(ok) and "n_runs" in ok:
        s["n_runs"] = {"min": float(ok["n_runs"].min()), "median": float(ok["n_runs"].median()),
                       "max": float(ok["n_runs"].max())}
        s["timed_window_s"] = {"min": float(ok["duration_s"].min()), "median": float(ok["duration_s"].median())}
    reasons = ok["missing_reason"].dropna() if "missing_reason" in ok else []
    clock_notes = sorted({p for r in reasons for p in str(r).split("; ") if "clock" in p})
    s["clock_notes"] = clock_notes[:3]
    return s


def provenance(out: Path, minutes: float, log: Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Write <out>/provenance.json: what was measured, where, with which settings, and how many rows."""
    period_f = out / "nvml_energy_update_period.json"
    try:
        settings = collect_settings(list(overrides or []))
    except Exception as e:  # noqa: BLE001 - provenance must be written anyway
        settings = {"reason": f"could not compose the collect config: {e}"}
    prov = {
        "what": "real measurements of the `paper` space by carb-collect on an NVIDIA GPU (not synthetic)",
        "script": "experiments/gpu/run_gpu.sh", "budget_minutes": minutes,
        "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"platform": platform.platform(), "python": platform.python_version(),
                 "nvidia_smi": _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.sm,"
                                     "clocks.mem,clocks.max.sm,clocks.max.mem,power.limit",
                                     "--format=csv,noheader"])},
        "git_commit": _run(["git", "rev-parse", "HEAD"]),
        **gpu_facts(),
        "settings": settings,
        "dataset": dataset_summary(out / "dataset.parquet"),
        "energy_update_period": json.loads(period_f.read_text()) if period_f.exists() else None,
        "log_tail": log.read_text()[-3000:] if log.exists() else None,
    }
    (out / "provenance.json").write_text(json.dumps(prov, indent=2, default=str))
    print(f"provenance: {prov['dataset']['rows']}")
    return prov


def _run(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or None
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    what, out = sys.argv[1], Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    if what == "period":
        period(out, float(sys.argv[3]) if len(sys.argv) > 3 else 4.0)
    elif what == "provenance":
        provenance(out, float(sys.argv[3]), Path(sys.argv[4]), sys.argv[5:])
    else:
        sys.exit(f"usage: {sys.argv[0]} period|provenance <out_dir> ...")
