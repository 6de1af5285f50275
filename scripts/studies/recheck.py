"""Re-measure a seeded sample of a dataset's configurations on this machine and compare.

    python scripts/studies/recheck.py --data reference --n 40 --seed 0 [--out recheck.parquet]

Picks ``--n`` ok rows (seeded), measures them again with the dataset's own protocol (``measure=cpu``
unless ``--measure`` says otherwise, one thread, the contention guard on) through the collector's loop,
and prints, per precision and overall, the ratio new / shipped of ``latency_ms`` and
``peak_memory_MB``: median, interquartile range, min and max, plus the device ids of both. A ratio
near 1 with a small spread says the dataset describes this machine; the README's reproducibility
figures come from this script. Run it with nothing else running on the machine.

Last line (machine-readable): ``latency_ratio_median=.. latency_ratio_q25=.. latency_ratio_q75=..
memory_ratio_median=.. same_device_id=<bool>``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.commands.cli import compose, to_dict  # noqa: E402
from carb.data.io import load_dataset  # noqa: E402
from carb.data.schema import ok_rows  # noqa: E402
from carb.design.arch import KNOBS, configs_from_records  # noqa: E402
from carb.design.features import STATIC_FEATURES, grid_features  # noqa: E402
from carb.measure import get_meter  # noqa: E402
from carb.measure.collector import LoopStats, measure_configs  # noqa: E402


def sample(df: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` ok rows of ``df`` drawn with ``seed`` (all of them when there are fewer)."""
    ok = ok_rows(df)
    return ok.sample(n=min(n, len(ok)), random_state=seed).reset_index(drop=True)


def remeasure(rows: pd.DataFrame, measure: str) -> pd.DataFrame:
    """Measure the configurations of ``rows`` again with the ``conf/measure/<measure>.yaml`` protocol."""
    settings = to_dict(compose("collect", [f"measure={measure}", "device=cpu"]).measure)
    configs = configs_from_records(rows[[k for k in KNOBS]].to_dict("records"), source="recheck")
    new: list[dict] = []

    def static(cfgs):
        g = grid_features(list(cfgs))
        return {cid: {k: r[k] for k in STATIC_FEATURES} for cid, r in zip(g["config_id"], g.to_dict("records"))}

    from carb.design.resnet import build_model

    with get_meter("cpu", settings=settings) as meter:
        identity = meter.identity()
        measure_configs(configs, meter, identity, new.append, build_model, static, LoopStats())
    return pd.DataFrame(new)


def ratios(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per config: precision and the new / old ratios of latency and peak memory."""
    m = old.merge(new, on="config_id", suffixes=("_old", "_new"))
    return pd.DataFrame({"config_id": m["config_id"], "precision": m["precision_old"],
                         "status_new": m["status_new"],
                         "latency_ratio": m["latency_ms_new"] / m["latency_ms_old"],
                         "memory_ratio": m["peak_memory_MB_new"] / m["peak_memory_MB_old"]})


def describe(r: pd.Series) -> str:
    """``median [q25, q75] (min-max), n`` of a ratio column."""
    r = r.dropna()
    if not len(r):
        return "n=0"
    q = np.percentile(r, [25, 50, 75])
    return f"median {q[1]:.3f} [IQR {q[0]:.3f}-{q[2]:.3f}] (min {r.min():.3f}, max {r.max():.3f}), n={len(r)}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="reference")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--measure", default="cpu")
    ap.add_argument("--out", default=None, help="write the re-measured rows here (.parquet)")
    a = ap.parse_args(argv)
    old = sample(load_dataset(a.data), a.n, a.seed)
    new = remeasure(old, a.measure)
    if a.out:
        new.to_parquet(a.out, index=False)
    r = ratios(old, new)
    old_ids = sorted(old["device_id"].dropna().astype(str).unique()) if "device_id" in old else []
    new_ids = sorted(new["device_id"].dropna().astype(str).unique())
    print(f"recheck of {len(r)} configs of {a.data}: shipped device_id {old_ids or ['none']}, this machine {new_ids}")
    for prec, g in r.groupby("precision"):
        print(f"  {prec}: latency new/shipped {describe(g['latency_ratio'])}; memory {describe(g['memory_ratio'])}")
    print(f"  all: latency new/shipped {describe(r['latency_ratio'])}; memory {describe(r['memory_ratio'])}")
    lr = r["latency_ratio"].dropna()
    q = np.percentile(lr, [25, 50, 75]) if len(lr) else [np.nan] * 3
    print(f"latency_ratio_median={q[1]:.4f} latency_ratio_q25={q[0]:.4f} latency_ratio_q75={q[2]:.4f} "
          f"memory_ratio_median={r['memory_ratio'].median():.4f} same_device_id={old_ids == new_ids}")


if __name__ == "__main__":
    main()
