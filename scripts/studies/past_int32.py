"""Are the shipped GPU rows whose largest activation passes 2**31 elements predicted worse than other
heavy rows? Out-of-fold latency of the H200 reference (``carb_fast`` CARB, 5 folds grouped by
architecture, screening-mode predictions), log(measured / predicted) of the rows slower than
``--min-ms``, by precision and by side of the 32-bit index limit
(:func:`carb.design.shapes.largest_output_elements` >= 2**31 - 1).

    python scripts/studies/past_int32.py [--data h200] [--min-ms 200]

No timing is done (safe beside other work; about a minute). Prints the summary per side x precision and
the rows past the line. Positive = under-predicted (the row ran slower than predicted).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KNOBS = ["block", "depth", "width_mult", "input_size", "batch_size", "precision"]


def out_of_fold(df: pd.DataFrame, folds: int = 5) -> np.ndarray:
    """Screening-mode latency (ms) of every row of ``df`` from a model that never saw its architecture (n,)."""
    from scripts.bench.extrapolation import make
    from sklearn.model_selection import GroupKFold

    from carb.model.intervals import screening_predict

    arch = df[["block", "depth", "width_mult", "input_size", "early_downsample"]].astype(str).agg("|".join, axis=1)
    pred = np.full(len(df), np.nan)
    for tr, te in GroupKFold(folds).split(df, groups=arch):
        a, b = df.iloc[tr].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = make(True)().fit(a, a[["latency_ms"]])
        pred[te] = screening_predict(m, b)["pred_latency_ms"].to_numpy(float)
    return pred


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="h200")
    ap.add_argument("--min-ms", type=float, default=200.0, help="rows at least this slow count as heavy")
    a = ap.parse_args(argv)
    from carb.analysis.input_efficiency import INT32_LIMIT
    from carb.data.io import load_training_frame
    from carb.design.shapes import largest_output_elements

    df, dev = load_training_frame(a.data)
    df = df[df["latency_ms"].notna()].reset_index(drop=True)
    df["past_int32"] = largest_output_elements(df).to_numpy(float) >= INT32_LIMIT
    df["log_ratio"] = np.log(df["latency_ms"].to_numpy(float) / out_of_fold(df))
    heavy = df[df["latency_ms"] >= a.min_ms]
    print(f"{a.data} ({dev}): {len(df)} rows, {int(df['past_int32'].sum())} past 2**31 - 1 elements; "
          f"{len(heavy)} rows >= {a.min_ms:g} ms")
    print(heavy.groupby(["past_int32", "precision"])["log_ratio"].describe()[["count", "mean", "min", "max"]]
          .round(3).to_string())
    print(heavy[heavy["past_int32"]][KNOBS + ["latency_ms", "log_ratio"]].round(3).to_string(index=False))


if __name__ == "__main__":
    main()
