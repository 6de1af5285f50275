"""Append a second collection of one CPU device to its shipped dataset, originals first and unchanged.

The new rows (one or more files of ``carb-collect``) must all be of the dataset's own device (``device_id``) and
``status=ok`` rows of no contended window. A new row whose configuration (``config_id``) is already in the dataset is
not appended: the original row stays, and the new measurement goes to ``--again`` (a file of configurations measured
again on another day, the cross-day repeatability; :func:`cross_day`). Both files are written by
:func:`carb.data.io.save_dataset` (schema-validated).

    python scripts/data/append_collection.py --dataset carb/data/cpu-intel-xeon.parquet \\
        --new /tmp/xeonb/xeonb-ref.parquet /tmp/xeonb/xeonb-fp16.parquet \\
        --again scripts/data/cpu-intel-xeon-repeat.parquet

With ``--separate OUT`` the new rows (all of them) become a dataset of their own instead, the shipped one unchanged:
for a session whose level differs from the dataset's (the Xeon: host kernel fc-v1252 -> fc-v1300, 28-56 % slower),
where one file would hold two speeds of one device.

Prints the rows per precision kept and dropped and, per precision, the median ``|new / original - 1|`` of the
latency of the configurations measured on both days (and the signed median), and whether peak memory repeated.
Bad input (another device, a contended or failed row, a configuration twice among the new rows): one line, exit 2.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def check_new(old: pd.DataFrame, new: pd.DataFrame) -> str | None:
    """Why ``new`` cannot be appended to ``old`` (one line naming the field), or None."""
    from carb.measure.base import MeasureSettings

    devs = set(old["device_id"].astype(str))
    got = set(new["device_id"].astype(str))
    if len(devs) != 1 or got != devs:
        return f"device_id: the new rows' {sorted(got)} must equal the dataset's {sorted(devs)}"
    if set(new["status"].astype(str)) != {"ok"}:
        return f"status: the new rows must all be ok, got {sorted(set(new['status'].astype(str)))}"
    lo = MeasureSettings.__dataclass_fields__["guard_min_cpu_share"].default
    hi = MeasureSettings.__dataclass_fields__["guard_max_steal_share"].default
    if not {"cpu_share", "steal_share"} <= set(new.columns):
        return "cpu_share, steal_share: the new rows carry no contention measurement (collected without the guard)"
    share = pd.to_numeric(new["cpu_share"], errors="coerce")
    steal = pd.to_numeric(new["steal_share"], errors="coerce").fillna(0.0)
    if share.isna().any() or (share < lo).any() or (steal > hi).any():
        return (f"cpu_share / steal_share: every new row must come from an uncontended window (cpu_share >= {lo}, "
                f"steal_share <= {hi}, the collector's guard defaults)")
    if new["config_id"].duplicated().any():
        return "config_id: a configuration appears twice among the new rows"
    return None


def split_new(old: pd.DataFrame, new: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(appended, again)``: the rows of ``new`` whose ``config_id`` is not in ``old``, and those that are
    (in ``new``'s order)."""
    seen = new["config_id"].astype(str).isin(set(old["config_id"].astype(str)))
    return new[~seen].reset_index(drop=True), new[seen].reset_index(drop=True)


def cross_day(old: pd.DataFrame, again: pd.DataFrame) -> pd.DataFrame:
    """One row per precision of ``again``: ``n`` configurations, ``median_abs`` (median of
    ``|latency again / latency original - 1|``, a fraction), ``median_signed`` (median of ``again / original - 1``;
    > 0: slower on the second day), ``p90_abs`` and ``memory_same`` (share of pairs with equal peak memory)."""
    m = old[["config_id", "latency_ms", "peak_memory_MB"]].merge(
        again[["config_id", "precision", "latency_ms", "peak_memory_MB"]], on="config_id", suffixes=("", "_again"))
    r = m["latency_ms_again"].to_numpy(float) / m["latency_ms"].to_numpy(float) - 1.0
    m = m.assign(rel=r, same=np.isclose(m["peak_memory_MB"], m["peak_memory_MB_again"], rtol=0, atol=1e-9))
    rows = [{"precision": p, "n": len(g), "median_abs": float(np.median(np.abs(g["rel"]))),
             "median_signed": float(np.median(g["rel"])), "p90_abs": float(np.quantile(np.abs(g["rel"]), 0.9)),
             "memory_same": float(g["same"].mean())} for p, g in m.groupby("precision", sort=False)]
    return pd.DataFrame(rows, columns=["precision", "n", "median_abs", "median_signed", "p90_abs", "memory_same"])


def main(argv: list[str] | None = None) -> int:
    from carb.data.io import load_dataset, save_dataset

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, help="the shipped dataset (parquet), rewritten in place")
    ap.add_argument("--new", nargs="+", required=True, help="the second collection's files (carb-collect out=)")
    ap.add_argument("--again", help="where to write the new rows of configurations already in the dataset")
    ap.add_argument("--separate", help="write every new row here as a dataset of its own (another session of the "
                    "device: a level shift against the dataset) and leave the dataset unchanged")
    a = ap.parse_args(argv)
    from carb.errors import CarbError

    try:
        old = load_dataset(a.dataset)
        new = pd.concat([load_dataset(f) for f in a.new], ignore_index=True)
    except CarbError as e:   # a missing or unreadable file: one line naming it
        print(f"append_collection: {e}", file=sys.stderr)
        return 2
    why = check_new(old, new)
    if why:
        print(f"append_collection: {why}", file=sys.stderr)
        return 2
    appended, again = split_new(old, new)
    counts = lambda f: f["precision"].value_counts().to_dict()  # noqa: E731
    if a.separate:
        save_dataset(new, a.separate)
        print(f"{a.separate}: {len(new)} rows {counts(new)} (another session of {a.dataset}, unchanged); "
              f"{len(again)} configurations measured in both {counts(again)}")
        print_cross_day(old, again)
        return 0
    both = pd.concat([old, appended], ignore_index=True)
    save_dataset(both, a.dataset)
    if a.again and len(again):
        save_dataset(again, a.again)
    print(f"{a.dataset}: {len(old)} + {len(appended)} = {len(both)} rows {counts(both)}; new {counts(appended)}; "
          f"dropped (already measured) {len(again)} {counts(again)}")
    print_cross_day(old, again)
    return 0


def print_cross_day(old: pd.DataFrame, again: pd.DataFrame) -> None:
    """Print :func:`cross_day` of the configurations in both, one line per precision."""
    for r in cross_day(old, again).itertuples():
        print(f"  again {r.precision}: n={r.n} median |rel diff| {100 * r.median_abs:.1f} % (signed "
              f"{100 * r.median_signed:+.1f} %, p90 {100 * r.p90_abs:.1f} %), memory equal {100 * r.memory_same:.0f} %")


if __name__ == "__main__":
    raise SystemExit(main())
