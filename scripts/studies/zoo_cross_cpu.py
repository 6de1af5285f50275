"""Cross-CPU on the measured zoos: the cascade ``carb-train data.path=<source zoo>`` fits on one CPU's zoo
predicting another CPU's zoo rows, uncalibrated (K=0: the source's prediction as it is; the device-probe ratio
is not available for a zoo model: ``carb.commands.calibrate.TRANSFERABLE_KINDS``) and calibrated on K of the
target's rows as ``carb-calibrate source=<zoo model> data.path=<target zoo> k=K`` does
(:func:`carb.analysis.transfer.evaluate_transfer`: K rows picked space-filling per precision, the transfer of
``conf/calibrate.yaml``), beside a FLOPs-only fit on the same K rows; latency MAPE (%) per precision on the
held-out rows (every target row but the K).

    python scripts/studies/zoo_cross_cpu.py [--source zoo-cpu] [--target zoo-cpu-xeon] [--k 10]

Prints one table (precision, held-out rows, MAPE of source K=0 / calibrated K / FLOPs on K) and a last line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def fitted_source(name: str):
    """The cascade ``carb-train data.path=<name>`` fits on every usable row of the zoo ``name``."""
    from carb.analysis.zoo_cpu_eval import RegisteredCascade, usable
    from carb.commands.cli import compose, to_dict
    from carb.data.io import load_dataset

    cfg = compose("train", [f"data.path={name}"])
    rows = usable(load_dataset(name))
    return RegisteredCascade(to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior)).fit(rows).cascade_


def per_precision(rest: pd.DataFrame, preds: dict[str, np.ndarray]) -> pd.DataFrame:
    """MAPE (%) of each prediction (n,) of ``preds`` on ``rest``'s ``latency_ms``, per precision and pooled."""
    y = rest["latency_ms"].to_numpy(float)
    out = []
    for p in [*sorted(rest["precision"].astype(str).unique()), "all"]:
        m = np.ones(len(rest), bool) if p == "all" else (rest["precision"].astype(str) == p).to_numpy()
        out.append({"precision": p, "held_out": int(m.sum()),
                    **{f"{k}_mape_pct": float(100 * np.mean(np.abs(v[m] / y[m] - 1))) for k, v in preds.items()}})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="zoo-cpu", help="the source CPU's zoo (shipped name or path)")
    ap.add_argument("--target", default="zoo-cpu-xeon", help="the target CPU's zoo (shipped name or path)")
    ap.add_argument("--k", type=int, default=10, help="target rows the transfer is calibrated on")
    a = ap.parse_args()
    from carb.analysis.transfer import flops_fit, split_k
    from carb.analysis.zoo_cpu_eval import usable
    from carb.commands.calibrate import transfer_settings
    from carb.commands.cli import compose
    from carb.data.io import load_dataset
    from carb.model.intervals import screening_predict
    from carb.model.transfer import TransferredCascade

    source = fitted_source(a.source)
    rows = usable(load_dataset(a.target)).reset_index(drop=True)
    cal, rest = split_k(rows, a.k)
    tr = TransferredCascade(source, **transfer_settings(compose("calibrate", [f"k={a.k}"]))).fit(cal)
    preds = {"k0_source": screening_predict(source, rest)["pred_latency_ms"].to_numpy(float),
             f"k{a.k}_calibrated": screening_predict(tr, rest)["pred_latency_ms"].to_numpy(float),
             f"k{a.k}_flops": flops_fit(cal, "latency_ms")(rest)}
    table = per_precision(rest, preds)
    print(f"{a.source} -> {a.target}: {len(rows)} target rows, K={a.k} "
          f"({cal['precision'].astype(str).value_counts().to_dict()}), latency transfer "
          f"{ {k: v for k, v in tr.transfer_['latency_ms'].items() if k in ('form', 'a', 'b', 'default_base')} }")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    pooled = table.set_index("precision").loc["all"]
    print(f"zoo_cross_cpu: source={a.source} target={a.target} k={a.k} "
          + " ".join(f"{c.removesuffix('_mape_pct')}={pooled[c]:.1f}" for c in table.columns if c.endswith("_pct")))


if __name__ == "__main__":
    main()
