"""Benchmark: few-shot calibration to a device the model never saw (``carb-calibrate``'s transfer).

1. Real third-party GPU latency (timm's benchmark, plain ResNets mapped to ``ArchConfig``, eager
   amp_fp16 nchw, newest torch per GPU; see ``scripts/bench/extrapolation.py``): for every
   ordered pair of GPUs (the same ResNets; the RTX PRO 6000 ran them at batch 2048, the others at 1024, so
   pairs with it also move in batch size), a ``carb_fast`` cascade fitted on the source GPU's rows is calibrated with K
   space-filling rows of the target GPU and scored on the target's remaining rows, K in {3, 5, 10, 20}.
   Beside it: (a) the source model uncalibrated, (b) a FLOPs-only line fitted on the same K rows.
2. CPU, same device: the model fitted on the shipped reference file calibrated with K of 100 rows measured
   on this project's reference VM later (``scripts/data/cpu-calibration-100.parquet``: the reference
   space drawn with another seed, 26 of its configurations also in the shipped file), scored on the rest:
   what a user re-measuring on the shipped model's own machine sees (drift between measuring windows).
3. CPU, another device: the model fitted on the previous shipped CPU file (another 2-core "AMD EPYC" VM, measured under
   load, no fingerprint; from git history) calibrated with K rows of 100 drawn from the current reference
   file (this project's fingerprinted VM), scored on the rest of the 100: latency and peak memory.

    python scripts/bench/transfer.py [--ks 3,5,10,20] [--no-cpu]

The last line is machine-readable: ``k10_min_spearman=.. k10_max_mape_pct=.. k10_pairs_beating_flops=a/b``
over the GPU pairs (latency).
"""
from __future__ import annotations

import argparse
import io
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.analysis.transfer import evaluate_transfer  # noqa: E402

GPUS = ("RTX 3090", "RTX 4090", "RTX 5090", "RTX PRO 6000 Blackwell Max-Q")
#: The shipped CPU file before the fingerprinted re-collection (commit de91c7a replaced it).
OLD_CPU = "de91c7a^:carb/data/cpu-reference.parquet"


def fit_source(rows: pd.DataFrame, targets: list[str]):
    """A ``carb_fast`` cascade (physics-informed stages) fitted on all of ``rows``."""
    from scripts.bench.extrapolation import make

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return make(True)().fit(rows, rows[targets])


def gpu_table(ks: list[int]) -> pd.DataFrame:
    """One row per (source, target, k, model) with Spearman, MAPE (%) and R^2 of latency."""
    from scripts.bench.extrapolation import timm_latency

    data = {g: timm_latency(g) for g in GPUS}
    models = {g: fit_source(d, ["latency_ms"]) for g, d in data.items()}
    out = []
    for src in GPUS:
        for dst in GPUS:
            if src == dst:
                continue
            shared = data[dst][data[dst]["model"].isin(set(data[src]["model"]))].reset_index(drop=True)
            for k in ks:
                if k >= len(shared):
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    _, t = evaluate_transfer(models[src], shared, k, targets=["latency_ms"])
                out += [{**r, "source": src, "target": dst} for r in t.to_dict("records")]
    return pd.DataFrame(out)


def cpu_table(ks: list[int], n: int = 100, seed: int = 0) -> pd.DataFrame:
    """The previous CPU file's model calibrated to the current reference VM (see the module docstring)."""
    from carb.data.io import load_dataset, reference_dataset
    from carb.data.schema import ok_rows

    blob = subprocess.run(["git", "show", OLD_CPU], cwd=ROOT, capture_output=True, check=True).stdout
    old = ok_rows(load_dataset_bytes(blob, load_dataset))
    new = ok_rows(reference_dataset())
    new = new[new["precision"].isin(sorted(set(old["precision"])))]
    rows = new.sample(n=min(n, len(new)), random_state=seed).reset_index(drop=True)
    targets = ["peak_memory_MB", "latency_ms"]
    src = fit_source(old, targets)
    return k_table(src, rows, ks, targets)


def k_table(src, rows: pd.DataFrame, ks: list[int], targets: list[str]) -> pd.DataFrame:
    """The source model ``src`` calibrated with K of ``rows`` and scored on the rest, one record per K and
    target (:func:`carb.analysis.transfer.evaluate_transfer`)."""
    out = []
    for k in ks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, t = evaluate_transfer(src, rows, k, targets=targets)
        out += t.to_dict("records")
    return pd.DataFrame(out)


#: 100 configurations measured on the reference VM after the reference file (carb-collect, see the note).
HERE_100 = ROOT / "scripts" / "data" / "cpu-calibration-100.parquet"


def cpu_here_table(ks: list[int]) -> pd.DataFrame:
    """The shipped reference file's model calibrated with K of the 100 later rows (module docstring, 2)."""
    from carb.data.io import load_dataset, reference_dataset
    from carb.data.schema import ok_rows

    rows = ok_rows(load_dataset(str(HERE_100))).reset_index(drop=True)
    targets = ["peak_memory_MB", "latency_ms"]
    src = fit_source(ok_rows(reference_dataset()), targets)
    return k_table(src, rows, ks, targets)


def load_dataset_bytes(blob: bytes, loader) -> pd.DataFrame:
    """A dataset from parquet bytes through the project's loader (old files converted as it does)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "old.parquet"
        p.write_bytes(blob)
        return loader(str(p))


def pair_summary(t: pd.DataFrame) -> pd.DataFrame:
    """Per K: pairs, min/median Spearman and max/median MAPE of each model, pairs where calibrated beats
    the FLOPs-only fit on MAPE and on Spearman."""
    rows = []
    for k, g in t.groupby("k"):
        w = g.pivot_table(index=["source", "target"], columns="model", values=["spearman", "mape_pct"])
        beat = ((w[("mape_pct", "calibrated")] < w[("mape_pct", "flops_k")])
                & (w[("spearman", "calibrated")] >= w[("spearman", "flops_k")]))
        row = {"k": k, "pairs": len(w), "held_out_rows": int(g[g.model == "calibrated"]["n"].median())}
        for m in ("calibrated", "source", "flops_k"):
            row[f"{m}_spearman_min"] = w[("spearman", m)].min()
            row[f"{m}_mape_median"] = w[("mape_pct", m)].median()
            row[f"{m}_mape_max"] = w[("mape_pct", m)].max()
        row["beats_flops_k"] = f"{int(beat.sum())}/{len(w)}"
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(df: pd.DataFrame, digits: int = 3) -> str:
    """A Markdown table of ``df`` (numbers rounded)."""
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df.itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.{digits}g}" if isinstance(v, float) else str(v) for v in r) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="3,5,10,20")
    ap.add_argument("--no-cpu", action="store_true")
    ap.add_argument("--csv", default=None, help="write the per-pair table here")
    a = ap.parse_args()
    ks = [int(k) for k in a.ks.split(",")]
    t = gpu_table(ks)
    if a.csv:
        t.to_csv(a.csv, index=False)
    s = pair_summary(t)
    print("== timm GPUs, latency, every ordered pair (source model -> K rows of the target GPU)")
    print(markdown(s))
    if not a.no_cpu:
        h = cpu_here_table(ks)
        print("\n== CPU, same VM: the shipped model -> K of 100 rows measured later on the reference VM")
        print(markdown(h[["target", "model", "k", "n", "spearman", "mape_pct", "r2"]]))
        c = cpu_table(ks)
        print("\n== CPU: previous shipped file's model -> K of 100 rows on this project's reference VM")
        print(markdown(c[["target", "model", "k", "n", "spearman", "mape_pct", "r2"]]))
    k10 = t[(t.k == 10)]
    w = k10.pivot_table(index=["source", "target"], columns="model", values=["spearman", "mape_pct"])
    beat = ((w[("mape_pct", "calibrated")] < w[("mape_pct", "flops_k")])
            & (w[("spearman", "calibrated")] >= w[("spearman", "flops_k")]))
    buf = io.StringIO()
    buf.write(f"k10_min_spearman={w[('spearman', 'calibrated')].min():.4f} "
              f"k10_max_mape_pct={w[('mape_pct', 'calibrated')].max():.2f} "
              f"k10_pairs_beating_flops={int(beat.sum())}/{len(w)}")
    print(buf.getvalue())


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
