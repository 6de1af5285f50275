"""Figure and table: predicting a precision no network was measured at, with and without the device probe.

    python scripts/bench/precision_probe.py [--out docs/figures]

On the shipped CPU reference (:mod:`carb.data` ``cpu-reference.parquet``) the latency prior
(:class:`carb.model.physics.LayerRooflinePrior`, the ``carb_fast`` prior settings) is fitted on the fp32 rows
alone and predicts the bf16 and fp16 rows twice: borrowing fp32's coefficients (``device_probe=False``) and
from the shipped device probe (``device_probe=True``). No timing is done here (the probe was measured by
``scripts/studies/probe.py``), so it can run beside other work. Writes ``precision_probe.png`` and
``precision_probe.csv`` (one row per reference row and variant) under ``--out`` and prints R^2 and MAPE
per precision; the last line is machine-readable (``probe_r2=.. stand_in_r2=..``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

COLOURS = {"bf16": "#0072B2", "fp16": "#D55E00"}


def predictions() -> pd.DataFrame:
    """One row per non-fp32 reference row and variant: knobs, measured and predicted latency (ms per batch)."""
    from carb.commands.cli import compose, to_dict
    from carb.data.io import reference_dataset
    from carb.data.schema import ok_rows
    from carb.model.physics import make_prior

    settings = {k: v for k, v in to_dict(compose("train", ["model=carb_fast"]).prior).items() if k != "enabled"}
    ref = ok_rows(reference_dataset())
    train, test = ref[ref["precision"] == "fp32"], ref[ref["precision"] != "fp32"]
    out = []
    for variant, probe in (("stand-in (fp32 coefficients)", False), ("device probe", True)):
        prior = make_prior("latency_ms", **{**settings, "device_probe": probe}).fit(train, train["latency_ms"])
        out.append(test[["block", "depth", "width_mult", "input_size", "batch_size", "precision", "latency_ms"]]
                   .assign(variant=variant, pred_latency_ms=prior.predict(test)))
    return pd.concat(out, ignore_index=True)


def scores(pred: pd.DataFrame) -> pd.DataFrame:
    """R^2 and MAPE per variant and precision (and all of them)."""
    from sklearn.metrics import r2_score

    rows = []
    groups = [*pred.groupby(["variant", "precision"]), *(((v, "all"), g) for v, g in pred.groupby("variant"))]
    for (v, p), g in groups:
        y, f = g["latency_ms"].to_numpy(), g["pred_latency_ms"].to_numpy()
        rows.append({"variant": v, "precision": p, "rows": len(g), "r2": r2_score(y, f),
                     "mape_pct": 100 * float(np.mean(np.abs(f / y - 1)))})
    return pd.DataFrame(rows)


def draw(pred: pd.DataFrame, table: pd.DataFrame, path: Path) -> None:
    """Measured vs predicted latency, one panel per variant, log axes, Okabe-Ito colours, 1200 px wide."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.4), dpi=120)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharex=True, sharey=True)
    lo, hi = pred[["latency_ms", "pred_latency_ms"]].min().min() * 0.7, pred[["latency_ms", "pred_latency_ms"]].max().max() * 1.4
    for ax, (variant, g) in zip(axes, pred.groupby("variant", sort=False)):
        for p, gp in g.groupby("precision"):
            s = table[(table["variant"] == variant) & (table["precision"] == p)].iloc[0]
            ax.scatter(gp["latency_ms"], gp["pred_latency_ms"], s=9, alpha=0.6, color=COLOURS.get(p, "#444444"),
                       label=f"{p}: R^2 {s['r2']:.2f}, MAPE {s['mape_pct']:.0f} %")
        ax.plot([lo, hi], [lo, hi], color="#999999", lw=1)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("measured latency (ms per batch)")
        ax.set_title(f"{variant}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    axes[0].set_ylabel("predicted by the prior (ms per batch)")
    fig.suptitle("CPU reference: latency prior fitted on fp32 rows only, predicting bf16 and fp16", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "figures"))
    a = ap.parse_args(argv)
    out = Path(a.out)
    pred = predictions()
    table = scores(pred)
    out.mkdir(parents=True, exist_ok=True)
    pred.to_csv(out / "precision_probe.csv", index=False, float_format="%.6g")
    draw(pred, table, out / "precision_probe.png")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    allr = table[table["precision"] == "all"].set_index("variant")["r2"]
    print(f"wrote {out / 'precision_probe.png'} and {out / 'precision_probe.csv'}")
    print(f"probe_r2={allr['device probe']:.4f} stand_in_r2={allr['stand-in (fp32 coefficients)']:.4f}")


if __name__ == "__main__":
    main()
