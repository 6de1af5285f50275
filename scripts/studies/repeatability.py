"""Run-to-run repeatability of a device: re-measure a seeded sample of a dataset's configurations with the
collector's repeat protocol (``measure.repeat``) and report the spread per precision (issue 44 item 5).

    python scripts/studies/repeatability.py --data PATH --n 40 --seed 0 --out rows.parquet [--dry-run]

Picks about ``--n`` ok rows of ``--data``, the same number of each precision (seeded), shuffles them (so
the precisions mix in time) and measures them on this machine through the collector's loop
(:func:`carb.measure.collector.measure_configs`) with the ``--measure`` preset (``cpu``: one thread, the
contention guard on) and ``--passes`` passes in ``--order``. The rows go to ``--out`` (a dataset of this
schema: ``latency_repeat_spread`` per row). Printed per precision: the in-run spread (median, 90th
percentile, max; :func:`carb.data.repeatability.repeatability_table`), the interval floor
(:func:`carb.data.repeatability.repeatability_floor`), and the change against the dataset's own rows
(measured in another session: median and 90th percentile of ``|new / old - 1|``). It refuses to measure
when this machine is not the dataset's device (``device_id``) unless ``--any-device``.

``--dry-run`` measures nothing: it prints the sample and an estimate of the run's length from the sampled
rows' own ``protocol_s`` (x passes, plus ``--overhead-s`` per window for building the model and writing).
Run it with nothing else running on the machine.

Last line (machine-readable): ``repeatability: device=<id> n=<rows> passes=<P> <precision>_median=..
<precision>_p90=.. <precision>_floor=.. <precision>_session_median=.. ...`` (fractions; floor a log ratio).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.data.io import load_dataset  # noqa: E402
from carb.data.repeatability import repeatability_floor, repeatability_table  # noqa: E402
from carb.data.schema import ok_rows  # noqa: E402
from carb.design.arch import KNOBS, PRECISIONS, configs_from_records  # noqa: E402


def stratified_sample(df: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """About ``n`` ok rows of ``df``: ``ceil(n / precisions)`` of each precision (all of a precision with
    fewer), drawn with ``seed``, then shuffled with it (the first pass's order)."""
    ok = ok_rows(df)
    precs = [p for p in PRECISIONS if p in set(ok["precision"].astype(str))]
    each = int(np.ceil(n / max(len(precs), 1)))
    parts = [g.sample(n=min(each, len(g)), random_state=seed) for _, g in ok.groupby(ok["precision"].astype(str))]
    return pd.concat(parts).sample(frac=1.0, random_state=seed).reset_index(drop=True)


def estimate_s(rows: pd.DataFrame, passes: int, overhead_s: float, setup_s: float = 20.0) -> float:
    """Seconds the run should take: the rows' ``protocol_s`` and ``overhead_s`` per window, ``passes`` times,
    plus ``setup_s`` (imports, static features, the meter)."""
    return float(setup_s + passes * (rows["protocol_s"].sum() + overhead_s * len(rows)))


def measure(rows: pd.DataFrame, measure_preset: str, passes: int, order: str, out: Path) -> pd.DataFrame:
    """Measure the configurations of ``rows`` with the collector's loop into ``out``; the new rows."""
    from carb.commands.cli import compose, to_dict
    from carb.commands.collect import _static_table
    from carb.data.io import DatasetAppender
    from carb.data.schema import empty_frame
    from carb.design.resnet import build_model
    from carb.measure import get_meter
    from carb.measure.collector import LoopStats, checked_identity, measure_configs
    from carb.measure.repeat import RepeatPlan

    settings = to_dict(compose("collect", [f"measure={measure_preset}", "device=cpu",
                                           f"measure.repeat.passes={passes}", f"measure.repeat.order={order}"]).measure)
    configs = configs_from_records(rows[list(KNOBS)].to_dict("records"), source="repeatability")
    if out.exists():
        raise SystemExit(f"--out {out} exists; give a new file")
    with get_meter("cpu", settings=settings) as meter:
        identity = checked_identity(meter, empty_frame(), out)
        app = DatasetAppender(out, empty_frame())
        stats = measure_configs(configs, meter, identity, app.append, build_model, _static_table, LoopStats(),
                                repeat=RepeatPlan(passes, order))
    print(f"measured {stats.n_measured} configurations ({stats.counts}), {stats.repeat_windows} later windows "
          f"({stats.repeat_failed} not used), contention guard repeated {stats.repeated}")
    return load_dataset(out)


def session_change(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per precision, ``|new / old - 1|`` of ``latency_ms`` against the dataset's rows: median, p90, n."""
    m = old[["config_id", "precision", "latency_ms"]].merge(new[new["status"] == "ok"][["config_id", "latency_ms"]],
                                                            on="config_id", suffixes=("_old", "_new"))
    m["change"] = (m["latency_ms_new"] / m["latency_ms_old"] - 1.0).abs()
    return m.groupby(m["precision"].astype(str))["change"].agg(session_median="median",
                                                               session_p90=lambda s: s.quantile(0.9), n="size")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--order", default="rotated", choices=["rotated", "reversed", "shuffled"])
    ap.add_argument("--measure", default="cpu")
    ap.add_argument("--out", default=None, help="the re-measured rows (.parquet, a new file)")
    ap.add_argument("--overhead-s", type=float, default=0.3, help="seconds per window outside protocol_s (estimate)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--any-device", action="store_true", help="measure even when this is not the dataset's device")
    a = ap.parse_args(argv)
    old = load_dataset(a.data)
    rows = stratified_sample(old, a.n, a.seed)
    counts = rows["precision"].value_counts().to_dict()
    est = estimate_s(rows, a.passes, a.overhead_s)
    ids = sorted(old["device_id"].dropna().astype(str).unique())
    print(f"sample of {len(rows)} rows of {a.data} (device {ids}): {counts}; {a.passes} passes ({a.order}); "
          f"estimated {est:.0f} s ({est / 60:.1f} min)")
    if a.dry_run:
        return
    if not a.out:
        raise SystemExit("--out: give a new .parquet file for the re-measured rows")
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint

    here = device_id(read_cpu_fingerprint(1))
    if ids and here not in ids and not a.any_device:
        raise SystemExit(f"this machine is device {here}, the dataset's is {ids}: the spread would not be that "
                         f"device's (--any-device to measure anyway)")
    t0 = time.perf_counter()
    new = measure(rows, a.measure, a.passes, a.order, Path(a.out))
    print(f"took {time.perf_counter() - t0:.0f} s (estimated {est:.0f} s)")
    table = repeatability_table(new).set_index("precision")
    floor = repeatability_floor(new)
    sess = session_change(rows, new)
    print(table.join(sess, how="left").to_string(float_format=lambda v: f"{v:.4f}"))
    parts = [f"device={here}", f"n={int(table['n_rows'].sum())}", f"passes={a.passes}"]
    for p in table.index:
        parts += [f"{p}_median={table.loc[p, 'spread_median']:.4f}", f"{p}_p90={table.loc[p, 'spread_p90']:.4f}",
                  f"{p}_floor={floor.get(p, float('nan')):.4f}",
                  f"{p}_session_median={sess['session_median'].get(p, float('nan')):.4f}"]
    print("repeatability: " + " ".join(parts))


if __name__ == "__main__":
    main()
