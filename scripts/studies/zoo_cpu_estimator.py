"""Study (zc43): CARB's per-operation ``ZooLatencyModel`` (with its CPU terms) against the cascade on the measured
CPU zoos, leave-one-family-out on the cascade's splits.

For each CPU zoo (``carb/data/zoo-cpu.parquet``, Zen 4; ``carb/data/zoo-cpu-xeon.parquet``, Xeon) the rows
:func:`carb.analysis.zoo_cpu_eval.usable` keeps are held out one family at a time
(:func:`carb.analysis.zoo_eval.lofo_splits` over every family, as :func:`carb.analysis.zoo_cpu_eval.cascade_lofo`).
Features: each ``(model_name, input_size)`` is traced once (:func:`carb.model.zoo_predictor.layer_row`, batch 1,
fp32: the columns of timm's trace table) and joined as ``tr_*`` with the published totals taken from the trace
(:func:`carb.model.zoo_predictor.traced_features`: per-batch parts once per batch). Context: ``device_kind=cpu``,
``compile=eager`` (the collector times eager), ``timm_precision`` = the row's precision (a model cast whole, no
autocast). Precision: the CPU zoos mix fp32 and bf16, which the model's features do not see, so each fold fits one
``ZooLatencyModel`` per precision (the other families' rows of that precision) and predicts the held-out family's
rows of that precision; batch 1-16 and the input sizes are one law per image (per-batch terms divided by the batch).
Settings: ``conf/zoo_latency/default.yaml`` with its ``per_device.cpu`` section (the i9 file's CPU terms).

The cascade's and the two baselines' per-family figures are read from ``scripts/data/zoo_bench.json`` (the lead's
``scripts/bench/zoo.py`` run on the same rows; row counts per family are checked against this script's).

    PYTHONPATH=$PWD python -m scripts.studies.zoo_cpu_estimator [--data zoo-cpu zoo-cpu-xeon] [--pooled-precision]
        [--no-nested]

Prints per zoo a per-family table (MAPE, Spearman, within 20 % for zoo / cascade / hj / b1) and one summary line.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
BENCH_JSON = ROOT / "scripts" / "data" / "zoo_bench.json"


def zoo_rows(path: Path, thresholds: dict) -> pd.DataFrame:
    """Usable rows of one CPU zoo with ``ZooLatencyModel``'s columns (one trace per network and input size);
    rows of a network the tracer refuses are dropped (reported on stderr)."""
    from carb.analysis.zoo_cpu_eval import usable
    from carb.errors import ZooError
    from carb.model.zoo_predictor import layer_row, traced_features

    rows = usable(pd.read_parquet(path))
    rows["_pos"] = np.arange(len(rows))
    parts = []
    for (name, size), g in rows.groupby(["model_name", "input_size"], sort=False):
        try:
            layer = layer_row(str(name), int(size), False, thresholds)
        except ZooError as e:
            print(f"  refused {name} @ {size}: {e}", file=sys.stderr)
            continue
        parts.append(traced_features(g, layer))
    out = pd.concat(parts, ignore_index=True).sort_values("_pos").reset_index(drop=True)
    return out.assign(device_kind="cpu", compile="eager", timm_precision=out["precision"].astype(str))


def zoo_lofo(rows: pd.DataFrame, make, per_precision: bool, nested: bool, outside: str) -> np.ndarray:
    """Latency per batch (n,) of every family from fits on every other family's rows
    (:func:`carb.analysis.zoo_eval.grouped_predictions`, one family per group), per precision when
    ``per_precision`` (the rows of one precision are their own LOFO, on the same family splits); with ``nested``
    the bound's margin re-chosen per held-out family on the other families
    (:func:`carb.analysis.zoo_eval.nested_margin`, as the benchmark does for the CPU settings)."""
    from carb.analysis.zoo_eval import grouped_predictions, nested_margin

    pred = np.full(len(rows), np.nan)
    prec = rows["precision"].astype(str).to_numpy()
    for p in (sorted(set(prec)) if per_precision else [None]):
        sel = (prec == p) if p is not None else np.ones(len(rows), bool)
        sub = rows[sel].reset_index(drop=True)
        print(f"  precision {p or 'all'}: {len(sub)} rows", file=sys.stderr, flush=True)
        out = grouped_predictions(sub, [[f] for f in sorted(sub["family"].astype(str).unique())], {"zoo": make})
        if nested:
            out, _ = nested_margin(out, model="zoo", outside=outside)
        pred[out["_pos"].to_numpy(int)] = out["pred_zoo"].to_numpy(float)
    return pred


def bench_table(device_id: str) -> tuple[pd.DataFrame, float]:
    """The cascade / hj / b1 per-family latency table of the CPU zoo ``device_id`` in ``zoo_bench.json`` and the
    cascade's pooled MAPE (%)."""
    data = json.loads(BENCH_JSON.read_text())
    for c in data["cpus"]:
        if str(c["device_id"]) == device_id:
            return (pd.DataFrame(c["latency"]["table"]).set_index("family"),
                    float(c["latency"]["summary"]["carb_pooled_pct"]))
    raise SystemExit(f"zoo_bench.json has no CPU zoo of device_id {device_id}")


def family_rows(rows: pd.DataFrame, bench: pd.DataFrame) -> pd.DataFrame:
    """One row per family (worst ZooLatencyModel MAPE first): ``rows`` (with ``pred_zoo``, ``ape``) and
    ``bench_rows``; ZooLatencyModel's MAPE %, Spearman, rows within 20 % (%); the cascade's (``carb``), HJ's and
    B1's MAPE % and Spearman from ``bench`` (:func:`bench_table`)."""
    from carb.analysis.zoo_eval import spearman

    table = []
    for fam, g in rows.groupby("family"):
        b = bench.loc[fam]
        table.append({"family": fam, "rows": len(g), "bench_rows": int(b["rows"]),
                      "zoo_mape": 100 * g["ape"].mean(),
                      "zoo_rho": spearman(g["pred_zoo"].to_numpy(float), g["latency_ms"].to_numpy(float)),
                      "zoo_w20": 100 * (g["ape"] <= 0.2).mean(),
                      **{f"{m}_{k}": float(b[f"{m}_{c}"]) for m in ("carb", "hj", "b1")
                         for k, c in (("mape", "mape_pct"), ("rho", "rho"))}})
    return pd.DataFrame(table).sort_values("zoo_mape", ascending=False)


def main(argv: list[str] | None = None) -> None:
    """Score each CPU zoo; print the table and a summary line."""
    from carb.analysis.zoo_eval import bound_settings
    from carb.data.io import SHIPPED
    from carb.model.zoo_latency import ZooLatencyModel
    from scripts.bench.zoo import cpu_part_settings, zoo_latency_settings

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["zoo-cpu", "zoo-cpu-xeon"])
    ap.add_argument("--pooled-precision", action="store_true", help="one fit over fp32 and bf16 rows")
    ap.add_argument("--no-nested", action="store_true", help="the conf's margin as it is, not re-chosen per family")
    args = ap.parse_args(argv)
    own = zoo_latency_settings([], device_kind="cpu")
    nested, outside = bound_settings(own)
    nested = nested and not args.no_nested
    thresholds = cpu_part_settings([])
    print("ZooLatencyModel: " + ", ".join(f"{k}={v}" for k, v in own.items()), flush=True)
    for name in args.data:
        rows = zoo_rows(Path(SHIPPED[name]), thresholds)
        pred = zoo_lofo(rows, lambda: ZooLatencyModel(**own), not args.pooled_precision, nested, outside)
        y = rows["latency_ms"].to_numpy(float)
        rows = rows.assign(pred_zoo=pred, ape=np.abs(pred / y - 1))
        bench, carb_pooled = bench_table(str(rows["device_id"].iloc[0]))
        t = family_rows(rows, bench)
        print(f"== {name}: {len(rows)} rows, {rows['family'].nunique()} families", flush=True)
        print(t.to_string(index=False, float_format=lambda v: f"{v:.2f}"), flush=True)
        off = t[t["rows"] != t["bench_rows"]]
        if len(off):
            print(f"  row counts differ from zoo_bench.json for {', '.join(off['family'])}", flush=True)
        print(summary_line(name, t, 100 * rows["ape"].mean(), carb_pooled), flush=True)


def summary_line(name: str, t: pd.DataFrame, zoo_pooled: float, carb_pooled: float) -> str:
    """The last line of one zoo: per model families within 20 %, worst family, lowest Spearman; pooled MAPE (%)
    of ZooLatencyModel and the cascade; families where ZooLatencyModel is closer than the cascade."""
    f = len(t)
    parts = []
    for m in ("zoo", "carb", "hj", "b1"):
        worst = t.loc[t[f"{m}_mape"].idxmax()]
        parts.append(f"{m}_within20={int((t[f'{m}_mape'] <= 20).sum())}/{f} {m}_worst={worst[f'{m}_mape']:.1f}"
                     f"({worst['family']}) {m}_rho_min={t[f'{m}_rho'].min():.2f}")
    wins = int((t["zoo_mape"] < t["carb_mape"]).sum())
    return (f"zoo_cpu_estimator: data={name} families={f} " + " ".join(parts)
            + f" zoo_pooled={zoo_pooled:.2f} carb_pooled={carb_pooled:.2f} zoo_family_wins={wins}/{f}")

if __name__ == "__main__":
    main()
