"""Zero-shot energy per image of ResNet-50 at a saturated batch on every GPU of the spec table, beside the public
MLPerf Inference power figures (a floor) and the H200's measured figure scaled by throughput (issue 45, item 2).

    python -m scripts.studies.energy_floor          # print the table (Markdown)

The H200 row: the shipped H200 data's ResNet-50 (bottleneck, depth 50, width 1, 224 px, stages 3-4-6-3) at its
largest measured batch, in the precision with the lowest measured energy per image (eager PyTorch). Each other
GPU gets the zero-shot energy of ``carb-calibrate k=0 spec=<GPU>`` applied to that measured row
(:mod:`carb.model.power`: time x the spec-record latency ratio with the shipped ``zero_shot.weights``, power
from the drive law fitted on all H200 rows between the target's static power and power limit).

Two checks per GPU:

* **floor**: MLPerf Inference ResNet-50 power results (``scripts/data/mlperf-resnet50-power.csv``, whole-system
  wall power, INT8 TensorRT: far more efficient per image than eager PyTorch on the GPU alone) are a floor; a
  prediction below it is wrong. Accelerators without a public figure found say so (no figure invented).
* **throughput scaling**: energy per image = power / throughput with the GPU near its power limit (the Hidden
  Joules finding), i.e. the H200's measured J/image x the latency ratio x the power-limit ratio. The
  prediction stays within :data:`FACTOR` of it (it differs where the drive law puts the target below its
  limit, as a slower GPU's launch overhead weighs less).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
MLPERF = ROOT / "scripts" / "data" / "mlperf-resnet50-power.csv"
#: The prediction stays within this factor of the H200's measured figure scaled by throughput.
FACTOR = 2.0
RESNET50 = {"block": "bottleneck", "depth": 50, "width_mult": 1.0, "input_size": 224, "stages": "3-4-6-3"}


def h200_row() -> pd.DataFrame:
    """The H200's measured ResNet-50 row at its largest batch, in the precision of lowest J/image (one row)."""
    from carb.resources import DATA_DIR

    d = pd.read_parquet(DATA_DIR / "h200-reference.parquet")
    d = d[d["status"] == "ok"]
    for k, v in RESNET50.items():
        d = d[d[k] == v]
    if "inner_mult" in d:
        d = d[d["inner_mult"] == 1.0]
    top = d[d["batch_size"] == d.groupby("precision")["batch_size"].transform("max")]
    return top.loc[[(top["energy_J"] / top["batch_size"]).idxmin()]]


def weights() -> dict[str, float]:
    """The shipped zero-shot latency weights (``conf/calibrate.yaml``, ``zero_shot.weights``)."""
    import yaml

    conf = yaml.safe_load((ROOT / "conf" / "calibrate.yaml").read_text())
    return {k: float(v) for k, v in conf["zero_shot"]["weights"].items()}


def mlperf_floors() -> pd.DataFrame:
    """The MLPerf figures (one row per accelerator; ``J_per_image`` NaN where none was found)."""
    return pd.read_csv(MLPERF)


def floor_table() -> pd.DataFrame:
    """Per spec-table GPU: ``pred_J_per_image`` (zero-shot), ``scaled_J_per_image`` (throughput scaling),
    ``ratio`` (pred / scaled), ``floor_J_per_image`` and ``floor_source`` (MLPerf: round, system, result URL;
    NaN / a note where none),
    ``above_floor`` (None without a floor), and the H200 row's batch and precision."""
    from carb.data.gpu_specs import gpu_spec, load_gpu_specs
    from carb.model.power import energy_factor, fit_power, static_power
    from carb.model.spec_transfer import log_ratio
    from carb.resources import DATA_DIR

    src = gpu_spec("H200")
    rows = pd.read_parquet(DATA_DIR / "h200-reference.parquet")
    model = fit_power(rows[rows["status"] == "ok"], src)
    frac = model.static_W / model.limit_W
    row = h200_row()
    prec, batch = str(row["precision"].iloc[0]), int(row["batch_size"].iloc[0])
    e_img = float(row["energy_J"].iloc[0]) / batch
    w = weights()
    floors = mlperf_floors().set_index("accelerator")
    out = []
    for name in load_gpu_specs()["name"]:
        dst = gpu_spec(name)
        r = {prec: 0.0} if name == src["name"] else {prec: log_ratio(src, dst, prec, w)}
        s_dst, sourced = static_power(dst, frac)
        f = float(energy_factor(model, row, row["latency_ms"].to_numpy(float), r, src, dst, s_dst)[0])
        scaled = e_img * math.exp(r[prec]) * float(dst["power_limit_W"]) / float(src["power_limit_W"])
        fl = floors.loc[name] if name in floors.index else None
        floor = float(fl["J_per_image"]) if fl is not None and pd.notna(fl["J_per_image"]) else float("nan")
        note = (f'{fl["mlperf_round"]}, {fl["system"]}: {fl["source"]}' if fl is not None and pd.notna(fl["source"])
                else str(fl["note"]) if fl is not None else "no MLPerf power figure looked up")
        out.append({"gpu": name, "precision": prec, "batch_size": batch, "pred_J_per_image": e_img * f,
                    "scaled_J_per_image": scaled, "ratio": e_img * f / scaled, "static_W": s_dst,
                    "static_sourced": sourced, "floor_J_per_image": floor, "floor_source": note,
                    "above_floor": None if math.isnan(floor) else bool(e_img * f > floor)})
    return pd.DataFrame(out)


def floor_lines() -> list[str]:
    """The docs/RESULTS.md subsection (Markdown lines)."""
    t = floor_table()
    h = t.iloc[0]
    lines = ["### Zero-shot energy per image against public figures", "",
             f"Energy per image of ResNet-50 (batch {int(h['batch_size'])}, {h['precision']}, eager PyTorch) "
             "predicted zero-shot for each GPU of the spec table from the H200's measured row "
             "(`carb.model.power`: spec-record time ratio x predicted average power), beside the H200's figure "
             f"scaled by throughput at the power limit (the prediction stays within x{FACTOR:g} of it) and the "
             "best public MLPerf Inference ResNet-50 power figure (whole system, INT8 TensorRT: a floor). "
             "No second GPU's energy has been measured by CARB; static power is the source's fitted share of "
             "the power limit where the spec table has no sourced figure. `python -m scripts.studies.energy_floor`.",
             "", "| GPU | predicted J/image | throughput-scaled J/image | ratio | MLPerf floor J/image | source |",
             "|---|---:|---:|---:|---:|---|"]
    for r in t.itertuples():
        floor = "-" if math.isnan(r.floor_J_per_image) else f"{r.floor_J_per_image:.4f}"
        lines.append(f"| {r.gpu} | {r.pred_J_per_image:.4f} | {r.scaled_J_per_image:.4f} | {r.ratio:.2f} | "
                     f"{floor} | {r.floor_source} |")
    return lines + [""]


def main() -> None:
    print("\n".join(floor_lines()))


if __name__ == "__main__":
    main()
