"""Study: the same CPU on another day (issue 44, item 5).

The Intel Xeon VM ``6a0ea403ee`` was measured by ``carb-collect`` on 2026-12-05 (``carb/data/cpu-intel-xeon.parquet``,
its device probe the same day) and again on 2026-12-07 (two passes per row; the second session's file). This
scores what a user holding the first day's model gets on the second day: the model as it is (K = 0: the session's
level shift is the whole error), and ``carb-calibrate``'s transfer with K rows of the second day (K = 10 and the
quickstart's K; the benchmark's 5 picks of the K rows), latency and peak memory MAPE in % per precision,
scored on the second day's other rows; with ``--probe`` (a probe measured on the second day) the K = 0 by
device probes (first day's probe -> second day's) beside, and the K rows calibrate that base. The last line is
machine-readable::

    another_day: device=6a0ea403ee rows=N k0_mape_max=X k0_probe_mape_max=X k10_mape_max=X kq_mape_max=X
        k10_range=X-X level_shift=fp32:+X,...

Usage: ``python -m scripts.studies.transfer_another_day [--old PARQUET] [--old-probe CSV] [--new PARQUET]
[--probe CSV]`` (``--old`` default: ``carb/data/cpu-intel-xeon.parquet`` with the shipped probe; ``--new`` default:
``carb/data/cpu-intel-xeon-2026-12-07.parquet``). The third session (same kernel build as the second, three hours
later): ``--new scripts/data/cpu-intel-xeon-2026-12-07b.parquet --probe scripts/data/xeon-probe-2026-12-07b.csv``
and, from the second, ``--old carb/data/cpu-intel-xeon-2026-12-07.parquet --old-probe
scripts/data/xeon-probe-2026-12-07.csv``.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / "carb" / "data" / "cpu-intel-xeon.parquet"
NEW = ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet"
TARGETS = ["latency_ms", "peak_memory_MB"]


def level_shift(old: pd.DataFrame, new: pd.DataFrame) -> dict[str, float]:
    """Per precision, the second session's latency over the first's on the configurations both measured
    (``config_id``): the median ratio minus 1 (a fraction; +0.5 = 50 % slower;
    :func:`scripts.data.append_collection.cross_day`'s ``median_signed``)."""
    from scripts.data.append_collection import cross_day

    t = cross_day(old, new)
    return {str(p): float(v) for p, v in zip(t["precision"], t["median_signed"])}


def probe_transfer(source, new: pd.DataFrame, probe_path: str, old_probe: str | None = None):
    """The first day's model moved to the second day by device probes (``TransferredCascade.fit_probe``): the
    shipped probe of the device (the first day's; ``old_probe``: a ``carb-probe out=...`` table of the first
    session instead) as the source probe, the one at ``probe_path`` (measured on the second day) as the
    target's."""
    from carb.data.probes import load_probe
    from carb.model.transfer import TransferredCascade
    from scripts.bench.transfer_pairs import _identity

    name, dev, fp = _identity(new)
    first = load_probe(dev, paths=[Path(old_probe)]) if old_probe else load_probe(dev)
    second = load_probe(dev, paths=[Path(probe_path)])
    if first is None or second is None:
        print(f"--probe: no probe of device {dev} in {old_probe or 'the shipped table'} or in {probe_path}; "
              "allowed: a carb-probe "
              "table of that device", file=sys.stderr)
        raise SystemExit(2)
    return TransferredCascade(source).fit_probe(first, second, fp, name, dev)


def score(old: pd.DataFrame, new: pd.DataFrame, ks: list[int], picks: int, probe: str | None = None,
          old_probe: str | None = None) -> pd.DataFrame:
    """Records of :func:`scripts.bench.transfer_pairs.score_pair` with the first day's model as the source and
    the second day's rows as the target, for each K in ``ks`` (K = 0 once, K > 0 over ``picks`` picks); with
    ``probe`` (the second day's probe table) the probes' zero-shot is the base (model ``zero_shot`` at K = 0)."""
    from scripts.bench.transfer_pairs import fit_cpu_source, score_pair

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        source = fit_cpu_source(old, TARGETS)
        zero = probe_transfer(source, new, probe, old_probe) if probe else None
        recs = []
        for k in ks:
            for pick in range(1 if k == 0 else picks):
                out, _ = score_pair(source, new, k, TARGETS, cpu=True, zero_shot=zero, pick=pick)
                recs += out
    return pd.DataFrame(recs)


def main() -> None:
    from carb.data.io import load_dataset
    from carb.data.probes import load_probe
    from carb.data.schema import ok_rows
    from scripts.bench.transfer_pairs import quickstart_k

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", default=str(OLD), help="the first session's rows (parquet; default the shipped file)")
    ap.add_argument("--old-probe", default=None, help="the first session's probe (default: the shipped probe)")
    ap.add_argument("--new", default=str(NEW), help="the second session's rows (parquet)")
    ap.add_argument("--picks", type=int, default=5, help="K-row picks averaged (the benchmark's 5)")
    ap.add_argument("--probe", default=None, help="the second day's device probe (carb-probe out=...): K = 0 by probes")
    a = ap.parse_args()
    from carb.errors import CarbError

    try:
        new = ok_rows(load_dataset(a.new)).reset_index(drop=True)
        old = ok_rows(load_dataset(a.old)).reset_index(drop=True)
        for given in (a.probe, a.old_probe):
            if given:
                load_probe(str(new["device_id"].iloc[0]), paths=[Path(given)])
    except (CarbError, OSError) as e:   # a missing or unreadable --new / --probe: one line
        print(f"another_day: {' '.join(str(e).split())}", file=sys.stderr)
        raise SystemExit(2)
    kq = quickstart_k()
    t = score(old, new, [0, kq, 10], a.picks, a.probe, a.old_probe)
    keep = t[(t.k == 0) & t.model.isin(["source", "zero_shot"]) | (t.model == "calibrated")]
    table = keep.groupby(["target", "k", "model", "precision"])[["mape_pct", "spearman"]].mean().round(2)
    print(table.to_string())
    lat = keep[keep.target == "latency_ms"]
    per_pick = lat.groupby(["k", "pick"])["mape_pct"].max().groupby("k")
    worst = lat[lat.model != "zero_shot"].groupby(["k", "precision"])["mape_pct"].mean().groupby("k").max()
    zs = lat[lat.model == "zero_shot"]["mape_pct"].max() if (lat.model == "zero_shot").any() else np.nan
    shift = level_shift(old, new)
    print(f"another_day: device={new['device_id'].astype(str).mode().iloc[0]} rows={len(new)} "
          f"k0_mape_max={worst.get(0, np.nan):.1f} k0_probe_mape_max={zs:.1f} k10_mape_max={worst.get(10, np.nan):.1f} "
          f"kq_mape_max={worst.get(kq, np.nan):.1f} "
          f"k10_range={per_pick.min().get(10, np.nan):.1f}-{per_pick.max().get(10, np.nan):.1f} "
          "level_shift=" + ",".join(f"{p}:{v:+.2f}" for p, v in sorted(shift.items())))


if __name__ == "__main__":
    main()
