"""Compare two measurements of the same configurations (two reference files, e.g. before and after a
protocol change): latency and peak-memory ratios (new / old) on the configurations both hold, split by
whether a configuration has convolution outputs of 32 MiB or more (what glibc's default allocator
page-faults on every forward; see carb/measure/cpu.py pin_malloc).

    python scripts/studies/compare.py OLD.parquet NEW.parquet
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.data.io import load_dataset  # noqa: E402
from carb.design.shapes import large_output_MB  # noqa: E402


def compare(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration in both (status ok): knobs, both latencies, ratios, ``large_MB``."""
    keep = ["config_id", "latency_ms", "peak_memory_MB"]
    o, n = old[old["status"] == "ok"], new[new["status"] == "ok"]
    m = n.merge(o[keep], on="config_id", suffixes=("", "_old"))
    m["latency_ratio"] = m["latency_ms"] / m["latency_ms_old"]
    m["memory_ratio"] = m["peak_memory_MB"] / m["peak_memory_MB_old"]
    m["large_MB"] = large_output_MB(m, 32, 16).to_numpy()
    return m


def summary(m: pd.DataFrame) -> str:
    def q(x: pd.Series) -> str:
        return (f"median {x.median():.3f} [IQR {x.quantile(.25):.3f}-{x.quantile(.75):.3f}] "
                f"(min {x.min():.3f}, max {x.max():.3f}), n={len(x)}")

    big = m["large_MB"] > 0
    lines = [f"configurations in both: {len(m)}",
             f"latency new/old, all: {q(m['latency_ratio'])}",
             f"latency new/old, with conv outputs >= 32 MiB: {q(m.loc[big, 'latency_ratio'])}" if big.any() else
             "no configuration with conv outputs >= 32 MiB",
             f"latency new/old, the others: {q(m.loc[~big, 'latency_ratio'])}",
             f"peak memory new/old: {q(m['memory_ratio'])}"]
    for p, g in m.groupby("precision"):
        lines.append(f"  {p}: latency new/old {q(g['latency_ratio'])}")
    return "\n".join(lines)


def main() -> None:
    old, new = (load_dataset(Path(a)) for a in sys.argv[1:3])
    m = compare(old, new)
    print(summary(m))
    cols = ["block", "depth", "width_mult", "input_size", "batch_size", "precision", "early_downsample",
            "latency_ms_old", "latency_ms", "latency_ratio", "large_MB"]
    print("largest changes:")
    print(m.reindex(np.argsort(-np.abs(np.log(m["latency_ratio"].to_numpy()))))[cols].head(12).round(2).to_string(index=False))


if __name__ == "__main__":
    main()
