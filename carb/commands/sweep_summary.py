"""The table a multirun (``carb-<command> -m ...``) ends with: one row per job with its run id, overrides,
headline metrics and whether it registered a model.

A Hydra callback (``hydra.callbacks.sweep_summary`` in ``conf/hydra/output/carb.yaml``, so every command has
it): :meth:`SweepSummary.on_job_end` writes the job's row as ``job_summary.json`` into the job's own folder,
in whatever process ran the job (the basic launcher's, a joblib worker, a SLURM node);
:meth:`SweepSummary.on_multirun_end` reads every row under the sweep folder and prints the table on stdout.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

#: The file each job's row is written to, in the job's folder.
ROW_FILE = "job_summary.json"
#: Override prefixes the table leaves out (the same for every job: store, folders, Hydra's own).
QUIET_OVERRIDES = ("tracking.", "paths.", "hydra.", "progress.")
#: Top-level return values shown as headline metrics when a command returns no ``metrics`` (screen, tune,
#: collect, import).
HEADLINE_KEYS = ("best_value", "n_accept", "n_borderline", "n_pareto", "n_rows", "n_ok")


def headline(value: Mapping[str, Any] | None) -> dict[str, float]:
    """Headline metrics of a job's return value: ``test_<target>_mape`` (%) from ``metrics`` (carb-train),
    else the numeric :data:`HEADLINE_KEYS` present."""
    if not isinstance(value, Mapping):
        return {}
    metrics = value.get("metrics") if isinstance(value.get("metrics"), Mapping) else {}
    from carb.data.schema import TARGETS

    out = {f"test_{t}_mape": float(metrics[f"test_{t}_mape"]) for t in TARGETS
           if _number(metrics.get(f"test_{t}_mape"))}
    if not out:
        out = {k: float(value[k]) for k in HEADLINE_KEYS if _number(value.get(k))}
    return out


def _number(v: Any) -> bool:
    try:
        float(v)
    except (TypeError, ValueError):
        return False
    return not isinstance(v, bool)


def job_row(number: Any, status: str, overrides: Sequence[str], value: Any) -> dict[str, Any]:
    """One job's row: ``job``, ``status``, ``run_id``, ``registered`` (``<name> v<version>`` or ``no``),
    ``overrides`` (without :data:`QUIET_OVERRIDES`) and ``metrics`` (:func:`headline`)."""
    v = value if isinstance(value, Mapping) else {}
    name, version = v.get("registered_name"), v.get("version")
    registered = f"{name} v{version}" if name and version else ("no" if "registered_name" in v or not v else "-")
    return {"job": str(number), "status": status, "run_id": str(v.get("run_id") or "-"),
            "registered": registered,
            "overrides": " ".join(o for o in overrides if not o.lstrip("+~").startswith(QUIET_OVERRIDES)),
            "metrics": headline(v)}


def common_overrides(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Overrides every job has (said once above the table, not in each row)."""
    sets = [r["overrides"].split() for r in rows]
    return [o for o in sets[0] if all(o in s for s in sets[1:])] if len(rows) > 1 else []


def summary_table(rows: Sequence[Mapping[str, Any]], width: int = 120) -> str:
    """The rows as one text table (metrics as columns, ``test_energy_J_mape`` shown ``energy_J mape%``),
    the overrides that differ between jobs last and left-aligned, each line cut to ``width``."""
    import pandas as pd

    from carb.commands.screen_table import num

    names = list(dict.fromkeys(k for r in rows for k in r.get("metrics", {})))
    short = {k: (k[len("test_"):-len("_mape")] + " mape%") if k.startswith("test_") else k for k in names}
    frame = pd.DataFrame([{"job": r["job"], "status": r["status"], "run id": r["run_id"][:12],
                           "registered": r["registered"],
                           **{short[k]: num(r.get("metrics", {}).get(k, float("nan"))) for k in names}}
                          for r in rows])
    if (frame["registered"] == "-").all():   # a command that never registers (screen, collect, ...)
        frame = frame.drop(columns="registered")
    common = set(common_overrides(rows))
    differ = ["overrides"] + [" ".join(o for o in r["overrides"].split() if o not in common) or "-" for r in rows]
    lines = frame.to_string(index=False).splitlines()
    return "\n".join(f"{line} {o}"[:width] for line, o in zip(lines, differ))


def read_rows(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's row under ``sweep_dir``, ordered by job number."""
    rows = []
    for p in sorted(Path(sweep_dir).rglob(ROW_FILE)):
        try:
            rows.append(json.loads(p.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(rows, key=lambda r: (len(r["job"]), r["job"]))


class SweepSummary(Callback):
    """Hydra callback: each job writes its row; the multirun ends with the table of all of them."""

    def on_job_end(self, config: Any, job_return: Any, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        try:
            hc = HydraConfig.get()
            if hc.mode != RunMode.MULTIRUN:
                return
            status = getattr(getattr(job_return, "status", None), "name", "UNKNOWN")
            value = job_return._return_value if status == "COMPLETED" else None
            row = job_row(hc.job.get("num", "?"), status, list(getattr(job_return, "overrides", []) or []), value)
            folder = Path(str(hc.runtime.output_dir))
            (folder / ROW_FILE).write_text(json.dumps(row))
        except Exception:  # noqa: BLE001 - a summary must never fail a job
            return

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        try:
            sweep_dir = Path(str(config.hydra.sweep.dir))
            rows = read_rows(sweep_dir)
        except Exception:  # noqa: BLE001 - a summary must never fail a sweep
            return
        if not rows:
            return
        registers = any(r["registered"] != "-" for r in rows)
        registered = sum(r["registered"] not in ("-", "no") for r in rows)
        common = common_overrides(rows)
        print(f"\nsweep summary: {len(rows)} jobs" + (f", {registered} registered a model" + (
            "" if registered else " (nothing was registered)") if registers else "") + f"; folder {sweep_dir}"
            + (f"; every job: {' '.join(common)}" if common else ""))
        print(summary_table(rows), flush=True)
