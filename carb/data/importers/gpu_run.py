"""Import the files a lent-GPU run brought back (``experiments/gpu/run.py --out DIR``) as a dataset.

``import_gpu_run(dir)`` reads ``dataset.parquet`` (validated against :mod:`carb.data.schema`) and
``provenance.json`` (device facts, fingerprint, ``device_id``, protocol, counts, drift), checks that
they agree (one device id, the provenance's), and returns ``(frame, provenance)``. The rows are the
device's own measurements (``device_kind = cuda``), not a third-party table. ``carb-collect
import_run=DIR out=<file>`` writes them with the provenance beside and logs them to MLflow;
``carb-train data.path=<file>`` then registers ``carb-<gpu-slug>-<device_id>``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from carb.data.io import load_dataset
from carb.errors import DatasetError

#: The files a run writes (run.py: at most 8, flat).
RUN_FILES = ("dataset.parquet", "counter_trace.csv", "period.json", "provenance.json", "run.log")


def import_gpu_run(folder: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``(rows, provenance)`` of a returned run folder; :class:`DatasetError` (one line) when the folder
    lacks the dataset or the provenance, or they disagree on the device."""
    d = Path(folder)
    for name in ("dataset.parquet", "provenance.json"):
        if not (d / name).exists():
            raise DatasetError(f"import_run: {str(d)!r} has no {name} (a folder written by experiments/gpu/run.py "
                               f"holds {', '.join(RUN_FILES)})")
    df = load_dataset(d / "dataset.parquet")
    try:
        prov = json.loads((d / "provenance.json").read_text())
    except ValueError as e:
        raise DatasetError(f"import_run: {str(d / 'provenance.json')!r} is not JSON ({e})") from None
    ids = sorted(df["device_id"].dropna().astype(str).unique())
    if ids != [str(prov.get("device_id"))]:
        raise DatasetError(f"import_run: the rows' device_id {ids} differ from the provenance's "
                           f"{prov.get('device_id')!r}")
    return df, prov
