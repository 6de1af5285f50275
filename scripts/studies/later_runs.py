"""Prospective check on the H200: the model of the first GPU run, scored on what the later runs added.

The shipped H200 file holds three runs of the GPU collector (``python -m carb.measure.gpu_run``), one in the
morning, two in the afternoon of 2026-12-04, each drawing architectures in its own shuffled order. A model trained on the
first run alone (``carb-train`` defaults, temporary store) never saw the configurations the later runs
added (new architectures, and a host whose launch speed differed): they are predicted as ``carb-screen``
predicts, with intervals and domain flags, and scored beside B1 (FLOPs-only, fitted on the first run)
per target, inside and outside the model's domain
(:func:`scripts.studies.outside_check.check_report`).

    python scripts/studies/later_runs.py

No timing is done (safe beside other work; about a minute).
"""
from __future__ import annotations

import json
import sys
import tempfile
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

DATA = ROOT / "carb" / "data" / "h200-reference.parquet"
TARGETS = ("latency_ms", "energy_J", "peak_memory_MB")


def split_runs(rows: pd.DataFrame, provenance: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(first, later)``: rows measured up to the first run's ``finished_at`` and after it."""
    end = pd.Timestamp(provenance["runs"][0]["finished_at"])
    when = pd.to_datetime(rows["measured_at"], utc=True)
    return rows[when <= end].reset_index(drop=True), rows[when > end].reset_index(drop=True)


def later_runs_report(path: Path = DATA) -> dict:
    """Train on the first run of ``path``, score the later runs' rows; returns ``{"n_first", "n_later",
    "overall", "by_reason", "overall_without_arch"}`` (frames of :func:`outside_check.check_report`; the
    last with the model's new-architecture calibration taken out)."""
    from scripts.studies.outside_check import check_report

    from carb.commands.cli import compose
    from carb.commands.train import load_fit, run_train
    from carb.data.io import load_dataset

    rows = load_dataset(path)
    prov = json.loads(path.with_name(path.stem + ".provenance.json").read_text())
    first, later = split_runs(rows[rows["status"] == "ok"], prov)
    with tempfile.TemporaryDirectory() as tmp:
        first_path = Path(tmp) / "first.parquet"
        first.to_parquet(first_path)
        cfg = compose("train", [f"tracking.uri=sqlite:///{tmp}/mlflow.db", "evaluate.figures=false",
                                "print_table=false", "evaluate.extrapolation.progress=false",
                                f"data.path={first_path}", f"paths.output_dir={tmp}/outputs"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = load_fit(Path(run_train(cfg)["fit_folder"]))["cascade"]
        overall, by = check_report(model, later, first, targets=TARGETS)
        model.intervals_ = {t: ({k: v for k, v in e.items() if k != "new_arch"} if isinstance(e, dict) else e)
                            for t, e in model.intervals_.items()}
        without, _ = check_report(model, later, first, targets=TARGETS)
    return {"n_first": len(first), "n_later": len(later), "overall": overall, "by_reason": by,
            "overall_without_arch": without}


def main() -> None:
    r = later_runs_report()
    print(f"trained on the first run ({r['n_first']} rows), scored on the {r['n_later']} the later runs added")
    print(r["overall"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(r["by_reason"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print("without the new-architecture calibration:")
    print(r["overall_without_arch"].to_string(index=False, float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
