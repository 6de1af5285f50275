"""Benchmark: accuracy where nothing was measured. Leave-out splits that force extrapolation, CARB
(physics-informed stages, ``model=carb_fast`` sizes) beside the plain cascade (``physics=false``) and
B1 (FLOPs-only linear regression), on

1. the shipped datasets (by default the CPU reference and the H200 reference, the only one with
   measured energy): train on the lower range of batch size, depth, width, input size and test on the
   upper range; train on fp32 and test on the other precisions;
2. real third-party GPU latency (timm's benchmark, plain torchvision-style ResNets mapped to
   ``ArchConfig``; static features from CARB's closed form; one dataset per GPU, eager amp_fp16 nchw,
   newest torch): leave-one-model-out (every ResNet depth in turn), and larger inputs. Leave-GPU-out
   does not apply to a per-device model (a new device is the calibration issue's business).

    python scripts/bench/extrapolation.py [--data reference h200] [--no-timm] [--no-plain]

``--data`` takes one or more dataset names or paths (also comma-separated), each one part.
Prints one table per dataset and, for each split whose latency or energy R^2 is below 0.9, where its error
lies (R^2 per precision, the share of the squared error in the 5 worst rows, R^2 without them, and
those configurations); the last line is machine-readable:
``min_xval_latency_r2=.. min_xval_memory_r2=.. min_xval_energy_r2=.. worse_than_b1=<count> max_r2_below_b1=..
worse_than_b1_per_fold=<count>`` over every split and dataset (CARB only). Leave-one-model-out on timm is
scored as cross-validation is: every model's rows predicted by the fold that never saw that model, pooled
into one split ``model`` (a fold holds 2-4 rows, and an R^2 over 2-4 points is noise); the single folds
are printed too and counted apart in ``worse_than_b1_per_fold``. Their 90 % intervals: each GPU's
leave-one-model-out and larger-input rows with the conformal bounds of the other GPUs' errors on both
(``min_timm_coverage=``).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.analysis.extrapolation import (  # noqa: E402
    cross_dataset_coverage,
    default_splits,
    error_concentration,
    evaluate_splits,
    format_table,
    group_splits,
    pool_group_splits,
    range_splits,
    summary_line,
)


def make(physics: bool):
    """A factory of cascades with the ``carb_fast`` preset (full features) and ``physics``."""
    from carb.commands.cli import compose, to_dict
    from carb.model.presets import build_cascade

    cfg = compose("train", ["model=carb_fast", *([] if physics else ["prior=off"])])
    model, feats, prior = to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior)
    return lambda: build_cascade(model, feats, prior)


def timm_latency(gpu: str) -> pd.DataFrame:
    """Plain ResNets of timm's benchmark on ``gpu`` (eager, amp_fp16, nchw, newest torch) as rows with
    CARB's knobs and closed-form static features, latency per batch from timm, a ``model`` column."""
    from carb.data.importers.timm import import_timm
    from carb.design.arch import ArchConfig
    from carb.design.features import grid_features

    t = import_timm(gpu=gpu, precision="amp_fp16", compile="eager", plain_only=True)
    t = t[t["timm_block"].isin(["basic", "bottleneck"])].reset_index(drop=True)
    cfgs = [ArchConfig(r.block, int(r.depth), 1.0, int(r.input_size), int(r.batch_size), r.precision, True)
            for r in t.itertuples()]
    g = grid_features(cfgs)
    from carb.data.schema import RUNTIME_FEATURES

    out = g.assign(latency_ms=t["latency_ms"].to_numpy(), peak_memory_MB=float("nan"), energy_J=float("nan"),
                   model=t["model"].to_numpy(), device_name=gpu, status="ok",
                   **{c: float("nan") for c in RUNTIME_FEATURES})
    return out


def concentration_report(table: pd.DataFrame, predictions: dict[str, pd.DataFrame],
                         targets: tuple[str, ...] = ("latency_ms", "energy_J"), k: int = 5) -> str:
    """Per split and target (of ``targets``) with R^2 below 0.9: where the error lies (R^2 per
    precision, the share of the squared error in the k worst rows, R^2 without them, and those rows)."""
    knobs = ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample"]
    lines = []
    for r in table[table["target"].isin(targets) & (table["r2"] < 0.9)].itertuples():
        target = r.target
        c = error_concentration(predictions[r.split], target, k=k)
        by = ", ".join(f"{p} {v:.3f}" for p, v in c["r2_by"].items())
        lines.append(f"  {r.split}: {target} R2 {c['r2']:.3f}; per precision {by}; the {k} worst rows hold "
                     f"{100 * c['worst_share']:.0f} % of the squared error, R2 without them "
                     f"{c['r2_without_worst']:.3f}; worst:")
        w = c["worst"][[col for col in knobs if col in c["worst"].columns] + [target, f"pred_{target}"]]
        lines += ["    " + ln for ln in w.round(2).to_string(index=False).splitlines()]
    return "\n".join(lines)


def run(name: str, df: pd.DataFrame, splits, plain: bool, pool: str | None = None,
        predictions: dict[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Evaluate CARB (and the plain cascade) on ``splits`` of ``df``; print and return CARB's table.
    ``pool``: the prefix of leave-one-group-out splits also scored pooled (:func:`pool_group_splits`).
    ``predictions``: filled with each split's test rows and predictions."""
    print(f"\n== {name}: {len(df)} rows")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        preds: dict[str, pd.DataFrame] = {} if predictions is None else predictions
        carb = evaluate_splits(make(True), df, splits, progress=None, predictions=preds)
        if pool:
            carb = pool_group_splits(carb, preds, pool)
        print(format_table(carb))
        print(concentration_report(carb, preds))
        if plain:
            flat = evaluate_splits(make(False), df, splits, progress=None)
            m = carb.merge(flat[["split", "target", "r2", "mape"]], on=["split", "target"], suffixes=("", "_plain"))
            print("  plain cascade (physics=false) on the same splits: "
                  + ", ".join(f"{r.split}/{r.target} R2 {r.r2_plain:.3f} (CARB {r.r2:.3f})" for r in m.itertuples()))
    return carb.assign(dataset=name)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=["reference", "h200"],
                    help="dataset names or paths, one part each (default: reference h200)")
    ap.add_argument("--no-timm", action="store_true")
    ap.add_argument("--no-plain", action="store_true", help="skip the physics=false comparison")
    a = ap.parse_args(argv)
    from carb.data.io import load_training_frame

    tables = []
    for name in [n for arg in a.data for n in arg.split(",") if n]:
        df, dev = load_training_frame(name)
        tables.append(run(f"{name} ({dev})", df, default_splits(df), not a.no_plain))
    if not a.no_timm:
        lomo: dict[str, pd.DataFrame] = {}
        larger: dict[str, pd.DataFrame] = {}
        for gpu in ("RTX 3090", "RTX 4090", "RTX 5090", "RTX PRO 6000 Blackwell Max-Q"):
            t = timm_latency(gpu)
            splits = group_splits(t, "model", "model", min_rows=2) + range_splits(
                t, {"input_size": "input"}, train_share=0.8, min_rows=4)
            preds: dict[str, pd.DataFrame] = {}
            tables.append(run(f"timm {gpu}", t, splits, not a.no_plain, pool="model", predictions=preds))
            lomo[gpu] = pd.concat([v for k, v in preds.items() if k.startswith("model_")], ignore_index=True)
            larger[gpu] = preds["input"]
        worst = []
        both = {g: pd.concat([lomo[g], larger[g]], ignore_index=True) for g in lomo}
        for what, rows in (("leave-one-model-out", lomo), ("larger inputs", larger)):
            print(f"\n== timm, {what}: 90 % intervals, each GPU calibrated on the other GPUs' log-ratios of both "
                  "splits (22 rows per GPU are too few to calibrate its own)")
            cov = cross_dataset_coverage(rows, "latency_ms", 0.9, cal_rows=both)
            print(cov.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
            worst.append(cov["coverage"].min())
        print(f"min_timm_coverage={min(worst):.3f}")
    allt = pd.concat(tables, ignore_index=True)
    print()
    print(summary_line(allt))


if __name__ == "__main__":
    main()
