"""Benchmark: latency of a backbone family never measured, on timm's published benchmark files.

For each device of the shipped timm zoo table (``carb/data/timm-zoo-bench.parquet``: the main set, eager
nchw autocast-fp16 on RTX 3090 / 4090 / 5090 / PRO 6000 Max-Q, newest torch each; fp32 torch.compile
batch 1 on the Intel i9-10940X), leave-one-family-out (families = leading letters of the model name, those
with >= 5 models; :mod:`carb.analysis.zoo_eval`): CARB's zoo model beside B1 (log-log on GMACs) and Hidden
Joules' regression (log-linear on params, GMACs, activations), on the same splits; 90 % cross-conformal
intervals calibrated on the other held-out families.

    python scripts/bench/zoo.py [--devices gpu|all|<device name>] [--no-census] [--no-trace] [--trace-base] [--table]

CARB's features include the layer table's (``carb/data/timm-zoo-trace.parquet``, joined by
:func:`carb.data.importers.timm_zoo.with_trace`) when it exists; ``--no-trace`` leaves them out;
``--trace-base``: the log-linear base of a traced row also takes its memory-bound bytes and operation count.

Prints each device's per-family table (``--table``: every family; else the 10 worst by CARB's MAPE), a
summary line per device, then the machine-readable last line:
``zoo: devices=N families=F models=M lofo_within20=W/F lofo_lat_mape_max=X lofo_lat_rho_min=X coverage_min=X
b1_family_wins=W/F hj_family_wins=W/F`` (F and W summed over devices' held-out families; the max / min over
devices and families).
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.analysis.zoo_eval import MODELS, evaluate_device  # noqa: E402
from carb.data.importers.timm_zoo import load_zoo_bench, with_census, with_trace  # noqa: E402
from carb.model.zoo_latency import ZooLatencyModel  # noqa: E402


def device_block(name: str, table: pd.DataFrame, s: dict, every: bool) -> str:
    """The per-family table of one device (all families or the 10 worst) and its summary line."""
    cols = ["family", "models", "rows", "carb_mape_pct", "carb_rho", "b1_mape_pct", "hj_mape_pct",
            "hj_rho", "coverage", "hi_lo"]
    t = table.sort_values("carb_mape_pct", ascending=False)[cols]
    t = t if every else t.head(10)
    head = (f"== {name}: {s['families']} families, {s['models']} models; pooled MAPE carb {s['carb_pooled_pct']:.1f} % "
            f"| hj {s['hj_pooled_pct']:.1f} % | b1 {s['b1_pooled_pct']:.1f} %; families within 20 %: carb "
            f"{s['within20']}/{s['families']}, hj {s['hj_within20_fams']}, b1 {s['b1_within20_fams']}; worst "
            f"{s['worst']} {s['mape_max']:.0f} % (hj worst {s['hj_mape_max']:.0f} %, b1 {s['b1_mape_max']:.0f} %); "
            f"rho_min {s['rho_min']:.2f}; beats b1 on {s['b1_wins']}, hj on {s['hj_wins']}; 90 % intervals "
            f"cover {s['coverage']:.3f} (families) / {s['coverage_rows']:.3f} (rows), median hi/lo {s['hi_lo']:.2f}")
    return head + "\n" + t.to_string(index=False, float_format=lambda v: f"{v:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", default="all", help="gpu, all, or one device name (e.g. 'RTX 4090')")
    ap.add_argument("--no-census", action="store_true", help="leave the module census out of CARB's features")
    ap.add_argument("--no-trace", action="store_true", help="leave the layer-table features out of CARB's")
    ap.add_argument("--trace-base", action="store_true", help="memory-bound bytes and n_ops in CARB's base too")
    ap.add_argument("--table", action="store_true", help="print every family, not the 10 worst")
    args = ap.parse_args()
    t0 = time.perf_counter()
    zoo = load_zoo_bench()
    if not args.no_census:
        zoo = with_census(zoo)
    if not args.no_trace:
        zoo = with_trace(zoo)
    names = sorted(zoo["device_name"].astype(str).unique())
    if args.devices == "gpu":
        zoo = zoo[zoo["device_kind"] == "gpu"]
    elif args.devices != "all":
        if args.devices not in names:
            print(f"--devices: {args.devices!r} is not allowed; allowed: gpu, all, {', '.join(names)}", file=sys.stderr)
            raise SystemExit(2)
        zoo = zoo[zoo["device_name"] == args.devices]
    if "tr_flops" in zoo.columns:
        print(f"trace features: {int(zoo['tr_flops'].notna().sum())}/{len(zoo)} rows", flush=True)
    sums = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for dev, rows in zoo.groupby("device_name", sort=True):
            models = {**MODELS, "carb": lambda: ZooLatencyModel(trace_base=True)} if args.trace_base else MODELS
            table, s = evaluate_device(rows, models=models)
            print(device_block(str(dev), table, s, args.table), flush=True)
            sums.append(s)
    f = sum(s["families"] for s in sums)
    print(f"({time.perf_counter() - t0:.0f} s)")
    print(f"zoo: devices={len(sums)} families={f} models={max(s['models'] for s in sums)} "
          f"lofo_within20={sum(s['within20'] for s in sums)}/{f} "
          f"lofo_lat_mape_max={max(s['mape_max'] for s in sums):.1f} "
          f"lofo_lat_rho_min={min(s['rho_min'] for s in sums):.2f} "
          f"coverage_min={min(s['coverage'] for s in sums):.3f} "
          f"b1_family_wins={sum(s['b1_wins'] for s in sums)}/{f} hj_family_wins={sum(s['hj_wins'] for s in sums)}/{f}")


if __name__ == "__main__":
    main()
