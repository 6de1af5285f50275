"""Study: a CPU model's latency intervals on later measuring sessions of its device.

The Intel Xeon VM ``6a0ea403ee`` was measured in four windows (carb/data/cpu-intel-xeon.md): 2026-12-05 (another
host kernel build), and 2026-12-07 16:07, 19:16, 22:12 and 23:46 UTC on one boot. A model trained on the 16:07 window
(``carb-train`` defaults, temporary store) is scored on the other windows as screening predicts
(:func:`carb.analysis.screening.score`): 90 % latency coverage and median hi/lo per window and precision, with the
session drift (``later_session``, the shipped pooled drift), without it (``this_session``), and with the drift
measured on the other CPUs alone (``later_session_lodo``: the Xeon's windows left out of the pooled drift, the
fair score of a device the drift never saw). The last line is machine-readable::

    later_session: device=6a0ea403ee windows=N this_min=X later_min=X lodo_min=X width_this=X width_later=X

    python -m scripts.studies.later_session

No timing is done (safe beside other work; about two minutes).
"""
from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet"
LATER = {"2026-12-07 19:16": ROOT / "scripts" / "data" / "cpu-intel-xeon-2026-12-07b.parquet",
         "2026-12-07 22:12": ROOT / "scripts" / "data" / "cpu-intel-xeon-2026-12-07c.parquet",
         "2026-12-07 23:46": ROOT / "scripts" / "data" / "cpu-intel-xeon-2026-12-07d.parquet",
         "2026-12-05 (other build)": ROOT / "carb" / "data" / "cpu-intel-xeon.parquet"}


def train(path: Path, tmp: str):
    """The cascade ``carb-train data.path=<path>`` fits (defaults; a temporary store, no figures)."""
    from carb.commands.cli import compose
    from carb.commands.train import load_fit, run_train

    cfg = compose("train", [f"tracking.uri=sqlite:///{tmp}/mlflow.db", "evaluate.figures=false", "print_table=false",
                            "evaluate.extrapolation.progress=false", f"data.path={path}", f"paths.output_dir={tmp}/out"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_fit(Path(run_train(cfg)["fit_folder"]))["cascade"]


def coverage_table(model, rows: pd.DataFrame, window: str, scope: str) -> pd.DataFrame:
    """Per precision of ``rows``: n, 90 % latency coverage and median hi/lo of ``model``'s screening intervals."""
    from carb.analysis.screening import score
    from carb.design.features import grid_features

    knobs = [c for c in ("block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample",
                         "stages", "inner_mult") if c in rows.columns]
    out = score(model, grid_features(rows[knobs].reset_index(drop=True)))
    y = rows["latency_ms"].to_numpy(float)
    lo, hi = out["lo_latency_ms"].to_numpy(float), out["hi_latency_ms"].to_numpy(float)
    inside = (y >= lo) & (y <= hi)
    prec = rows["precision"].astype(str).to_numpy()
    return pd.DataFrame([{"window": window, "scope": scope, "precision": p, "n": int((prec == p).sum()),
                          "coverage": float(inside[prec == p].mean()),
                          "hi_lo": float(np.median(hi[prec == p] / lo[prec == p]))} for p in sorted(set(prec))])


def scoped(model, term: dict | None):
    """A shallow copy of ``model`` whose latency/energy entries carry the session drift ``term`` (None: none)."""
    import copy

    from carb.model.intervals import with_session, without_session

    m = copy.copy(model)
    m.intervals_ = with_session(without_session(model.intervals_), term)
    return m


def later_session_report() -> tuple[pd.DataFrame, dict, str]:
    """``(table, terms, last line)``: per later window, scope and precision, n, coverage and median hi/lo of the
    16:07 window's model; the drift terms used (``later_session``, ``later_session_lodo``); the last line."""
    from carb.data.io import load_dataset
    from carb.data.session_drift import drift, load_levels, shipped_drift

    levels = load_levels()
    lodo = drift(levels[(levels["device_kind"] == "cpu") & (levels["device_id"] != "6a0ea403ee")])
    terms = {"this_session": None, "later_session": shipped_drift("cpu"), "later_session_lodo": lodo}
    with tempfile.TemporaryDirectory() as tmp:
        model = train(TRAIN, tmp)
        frames = []
        for window, path in LATER.items():
            rows = load_dataset(str(path))
            rows = rows[rows["status"] == "ok"].reset_index(drop=True)
            frames += [coverage_table(scoped(model, t), rows, window, s) for s, t in terms.items()]
    t = pd.concat(frames, ignore_index=True)
    same = t[~t["window"].str.contains("other build")]
    low = same.groupby("scope")["coverage"].min()
    width = same.groupby("scope")["hi_lo"].median()
    last = (f"later_session: device=6a0ea403ee windows={same['window'].nunique()} this_min={low['this_session']:.2f} "
            f"later_min={low['later_session']:.2f} lodo_min={low['later_session_lodo']:.2f} "
            f"width_this={width['this_session']:.2f} width_later={width['later_session']:.2f}")
    return t, terms, last


def main(argv: list[str] | None = None) -> None:
    import argparse

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)   # no options: --help only
    t, terms, last = later_session_report()
    print(f"model: carb-train on {TRAIN.name}; drift later_session {terms['later_session']}; "
          f"lodo {terms['later_session_lodo']}")
    print(t.pivot_table(index=["window", "precision"], columns="scope", values=["coverage", "hi_lo"]).round(2)
          .to_string())
    print(last)


if __name__ == "__main__":
    sys.exit(main())
