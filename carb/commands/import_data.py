"""``carb-import``: bring an outside table of measurements into a CARB dataset.

``run_import(cfg)`` takes the composed ``conf/import.yaml`` (the importer in ``cfg.importer``, one of
``conf/importer/*.yaml``) and

1. calls :func:`carb.data.importers.import_table` (read the source, map model names and columns to
   configurations, aggregate repeated runs, static features, validate);
2. writes the dataset to ``out`` (.parquet or .csv), the rows that did not map with the reason to
   ``<out stem>.unmapped.csv`` and the provenance to ``<out stem>.provenance.json`` (importer settings,
   input files with sha256, row counts, devices, memory kinds, git commit, time);
3. prints the counts and the unmapped rows grouped by model and reason (``show_unmapped`` groups);
4. logs one MLflow run in ``carb-import``: settings, counts, the provenance, the dataset as a run input
   (context ``import``) and the files as artifacts.

``importer=gpu_run`` (a lent GPU's returned folder, not a table) goes to
:func:`carb.commands.gpu_import.run_gpu_import` instead.

Bad input (an importer that does not exist, a column map naming an absent column, a model name that does
not map under ``importer.unmapped=fail``) is one line and exit code 2.
"""
from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from carb import tracking
from carb.commands.cli import hydra_command, sweep_suffix, sweep_tags, to_dict
from carb.commands.gpu_import import run_gpu_import
from carb.data.importers import IMPORTERS, import_table, input_files, unmapped_frame
from carb.data.io import save_dataset, write_frame
from carb.errors import ConfigError
from carb.files import write_atomic

#: Importers of a returned run folder (rows kept as the device measured them, not a table to aggregate),
#: by ``importer.name``: each takes the composed config and returns its result dict.
RUN_IMPORTERS = {"gpu_run": run_gpu_import}


def _out_path(out: Any) -> Path:
    """``out`` as a .parquet/.csv path whose folder can be made; one-line :class:`ConfigError` otherwise."""
    if out is None or not str(out).strip():
        raise ConfigError("out: give the dataset file to write (.parquet or .csv)")
    p = Path(str(out))
    if p.suffix.lower() not in (".parquet", ".csv"):
        raise ConfigError(f"out: {str(p)!r} must end in .parquet or .csv")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"out: cannot create the folder of {str(p)!r} ({e.strerror})") from None
    return p


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def provenance(params: Mapping[str, Any], df: pd.DataFrame, unmapped: Sequence[Mapping[str, Any]],
               out: Path) -> dict[str, Any]:
    """The provenance record of one import (JSON-ready)."""
    from carb.data.importers.optimum import FORMAT_VERSION

    files = input_files(params)
    rec: dict[str, Any] = {
        "command": "carb-import", "importer": dict(params),
        "inputs": [{"path": str(f), "sha256": _sha256(f), "bytes": f.stat().st_size} for f in files if f.is_file()],
        "out": str(out), "n_rows": len(df), "n_source_rows": int(df["n_repeats"].sum()) + len(unmapped),
        "n_mapped_source_rows": int(df["n_repeats"].sum()), "n_unmapped": len(unmapped),
        "n_aggregated_keys": int((df["n_repeats"] > 1).sum()),
        "devices": sorted(df["device_name"].astype(str).unique()),
        "memory_kind": {str(k): int(v) for k, v in df["memory_kind"].value_counts().items()},
        "targets": {t: int(df[t].notna().sum()) for t in ("latency_ms", "energy_J", "peak_memory_MB")},
        "aggregation": "median per (device_name, config_id); spread = max - min; n_repeats = count",
        "git_commit": tracking.git_commit(), "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if params.get("name") == "optimum":
        rec["format"] = FORMAT_VERSION
        if "optimum_benchmark_version" in df.columns:
            rec["optimum_benchmark_versions"] = sorted(df["optimum_benchmark_version"].dropna().astype(str).unique())
    return rec


def unmapped_summary(unmapped: Sequence[Mapping[str, Any]], limit: int) -> list[str]:
    """Lines ``<n> row(s) [<model>]: <reason>`` grouped by model and reason, most rows first, at most
    ``limit`` lines plus one saying how many groups were left out."""
    if not unmapped:
        return []
    u = unmapped_frame(unmapped).fillna({"model": ""})
    groups = u.groupby(["model", "reason"], sort=False).size().sort_values(ascending=False, kind="stable")
    lines = [f"{n} row(s) {m + ': ' if m else ''}{r}" for (m, r), n in groups.items()]
    if len(lines) > limit:
        lines = lines[:limit] + [f"... {len(lines) - limit} more group(s) in the .unmapped.csv"]
    return lines


def run_import(cfg: Any) -> dict[str, Any]:
    """Import ``cfg.importer``'s table into ``cfg.out`` (see the module docstring).

    Returns ``{"out", "unmapped_path", "provenance_path", "run_id", "n_rows", "n_unmapped", "unmapped",
    "provenance"}``."""
    c = to_dict(cfg)
    params = c.get("importer") or {}
    if params.get("name") in RUN_IMPORTERS:   # a lent GPU's returned folder, not a table
        return RUN_IMPORTERS[params["name"]](cfg)
    if params.get("name") not in IMPORTERS:
        raise ConfigError(f"importer: {params.get('name')!r} is not an importer; allowed: "
                          f"{list(IMPORTERS) + list(RUN_IMPORTERS)}")
    out = _out_path(c.get("out"))
    df, unmapped = import_table(params)
    save_dataset(df, out)
    un_path = out.with_name(out.stem + ".unmapped.csv")
    write_frame(unmapped_frame(unmapped), un_path)
    prov = provenance(params, df, unmapped, out)
    prov_path = out.with_name(out.stem + ".provenance.json")
    text = json.dumps(prov, indent=1, default=str)
    write_atomic(prov_path, lambda tmp: tmp.write_text(text))   # a full disk never leaves half a provenance
    name = str(params["name"])
    print(f"carb-import: {len(df)} rows ({prov['n_mapped_source_rows']} source rows, {prov['n_aggregated_keys']} "
          f"keys with repeated runs) on {len(prov['devices'])} device(s) from {name} into {out}; "
          f"{len(unmapped)} source row(s) unmapped, listed in {un_path}")
    for line in unmapped_summary(unmapped, int(c.get("show_unmapped", 20) or 0)):
        print(f"carb-import: unmapped: {line}", file=sys.stderr)
    tr = c.get("tracking") or {}
    with tracking.start_run("import", c.get("run_name") or sweep_suffix(f"import/{name}/{len(df)}-rows"), tracking_uri=tr.get("uri"),
                            artifact_root=tr.get("artifact_root"), sweep=sweep_tags(),
                            tags={"importer": name, "devices": ", ".join(prov["devices"])[:250]}) as run_id:
        tracking.log_params({"importer": params, "out": str(out)})
        tracking.log_metrics({"n_rows": len(df), "n_source_rows": prov["n_source_rows"],
                              "n_unmapped": len(unmapped), "n_aggregated_keys": prov["n_aggregated_keys"],
                              "n_devices": len(prov["devices"])})
        tracking.log_dict(prov, "provenance.json")
        tracking.log_dataset(df, name=f"import-{name}", source=str(out), context="import")
        tracking.log_artifact(out, "dataset")
        tracking.log_artifact(un_path, "dataset")
    from carb.commands.cli import say_run_page

    print(f"carb-import: MLflow run {run_id}")
    say_run_page(run_id, tr.get("uri"))
    return {"out": str(out), "unmapped_path": str(un_path), "provenance_path": str(prov_path), "run_id": run_id,
            "n_rows": len(df), "n_unmapped": len(unmapped), "unmapped": unmapped, "provenance": prov}


main = hydra_command("import")(run_import)


if __name__ == "__main__":
    main()
