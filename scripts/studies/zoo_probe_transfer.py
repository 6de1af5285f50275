"""Study: a zoo model on a CPU it never measured, moved by the two CPUs' device probes (issue 43 / 44).

``carb-calibrate k=0 probe=...`` transfers a ResNet model by the ratio of the two devices' probe costs of each
network's layers; for a zoo model it refuses (``carb.commands.calibrate.TRANSFERABLE_KINDS``: the ratio read ResNet
layer tables). A zoo row has a layer table too (:func:`carb.design.trace.trace`), and ``carb-probe`` times every
operation kind a zoo is made of (:mod:`carb.model.op_cost`). This scores, on the two measured CPU zoos, the cascade
``carb-train data.path=<source zoo>`` fits predicting the other CPU's zoo rows:

- ``as_is``: the source's prediction unchanged (K = 0 without probes);
- ``level``: times one factor per precision, the median over the target's rows of the probe ratio below (what a
  per-precision level from the probes gives);
- ``probe``: times each row's own probe ratio ``probe_op_ms(row | target probe) / probe_op_ms(row | source
  probe)`` (:func:`carb.model.op_cost.probe_op_ms`: the layer table priced by an :class:`OpCostModel` fitted on
  each CPU's probe);

latency MAPE (%) and Spearman per precision over every target row, and the per-family worst.
The probes must be of the sessions the zoos were measured in where the project has them (a session's speed is its
own: carb/data/cpu-intel-xeon.md). Accuracy only.

    python -m scripts.studies.zoo_probe_transfer [--source zoo-cpu --source-probe DEVICE_OR_CSV]
        [--target zoo-cpu-xeon --target-probe DEVICE_OR_CSV]

Last line: ``zoo_probe_transfer: source=S target=T rows=N as_is=X level=X probe=X probe_family_max=X (family)``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

#: The default probes: the Zen 4's shipped probe (every kind), the Xeon probe of the session its zoo was measured in.
DEFAULT_PROBES = {"zoo-cpu": "34cc4b132c", "zoo-cpu-xeon": str(ROOT / "scripts" / "data" / "xeon-probe-2026-12-07.csv")}


def op_model(probe: str, device: str):
    """An :class:`carb.model.op_cost.OpCostModel` fitted on every kind of ``probe``: a device id (the shipped
    probe table) or a ``carb-probe out=...`` CSV of ``device``."""
    from carb.data.probes import load_probe
    from carb.model.op_cost import OpCostModel

    table = (load_probe(device, paths=[Path(probe)], kinds=None) if probe.endswith(".csv")
             else load_probe(probe, kinds=None))
    if table is None or table.empty:
        raise SystemExit(f"zoo_probe_transfer: no probe of {device} in {probe}")
    return OpCostModel().fit(table)


def scores(rows: pd.DataFrame, preds: dict[str, np.ndarray]) -> pd.DataFrame:
    """Latency MAPE (%) and Spearman of each prediction (n,) on ``rows`` per precision and pooled ("all")."""
    y = rows["latency_ms"].to_numpy(float)
    out = []
    for p in [*sorted(rows["precision"].astype(str).unique()), "all"]:
        m = np.ones(len(rows), bool) if p == "all" else (rows["precision"].astype(str) == p).to_numpy()
        rec = {"precision": p, "rows": int(m.sum())}
        for k, v in preds.items():
            ok = m & np.isfinite(v)
            rec[f"{k}_mape"] = float(100 * np.mean(np.abs(v[ok] / y[ok] - 1)))
            rec[f"{k}_rho"] = float(spearmanr(v[ok], y[ok]).statistic)
        out.append(rec)
    return pd.DataFrame(out)


def per_family(rows: pd.DataFrame, preds: dict[str, np.ndarray]) -> pd.DataFrame:
    """Latency MAPE (%) per zoo family (the rows' ``family`` column) of each prediction."""
    fam = rows["family"].astype(str)
    y = rows["latency_ms"].to_numpy(float)
    t = pd.DataFrame({"family": fam.to_numpy(), **{k: 100 * np.abs(v / y - 1) for k, v in preds.items()}})
    return t.groupby("family").mean().round(1).sort_values(list(preds)[-1], ascending=False)


def main() -> None:
    from carb.analysis.zoo_cpu_eval import usable
    from carb.data.io import load_dataset
    from carb.model.intervals import screening_predict
    from carb.model.op_cost import probe_op_ms
    from scripts.studies.zoo_cross_cpu import fitted_source

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="zoo-cpu")
    ap.add_argument("--target", default="zoo-cpu-xeon")
    ap.add_argument("--source-probe", default=None, help="device id (shipped probe) or carb-probe CSV")
    ap.add_argument("--target-probe", default=None, help="device id (shipped probe) or carb-probe CSV")
    a = ap.parse_args()
    src_rows = usable(load_dataset(a.source))
    rows = usable(load_dataset(a.target)).reset_index(drop=True)
    src_dev, dev = str(src_rows["device_id"].iloc[0]), str(rows["device_id"].iloc[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps = op_model(a.source_probe or DEFAULT_PROBES.get(a.source, src_dev), src_dev)
        pt = op_model(a.target_probe or DEFAULT_PROBES.get(a.target, dev), dev)
        source = fitted_source(a.source)
        base = screening_predict(source, rows)["pred_latency_ms"].to_numpy(float)
        ratio = probe_op_ms(rows, pt) / probe_op_ms(rows, ps)
    prec = rows["precision"].astype(str)
    level = pd.Series(ratio).groupby(prec.to_numpy()).transform("median").to_numpy()
    preds = {"as_is": base, "level": base * level, "probe": base * ratio}
    table = scores(rows, preds)
    fam = per_family(rows, preds)
    print(f"{a.source} ({src_dev}) -> {a.target} ({dev}): {len(rows)} rows; probe ratio median per precision "
          + ", ".join(f"{p} {v:.3f}" for p, v in pd.Series(ratio).groupby(prec.to_numpy()).median().items()))
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}" if abs(v) <= 1 else f"{v:.1f}"))
    print(fam.head(8).to_string())
    pooled = table.set_index("precision").loc["all"]
    print(f"zoo_probe_transfer: source={a.source} target={a.target} rows={len(rows)} "
          + " ".join(f"{k}={pooled[f'{k}_mape']:.1f}" for k in preds)
          + f" probe_family_max={fam['probe'].max():.1f} ({fam['probe'].idxmax()})")


if __name__ == "__main__":
    main()
