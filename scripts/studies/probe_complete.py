"""Complete a device probe with the precisions it lacks, on the same (layer, batch) pairs (issue 44 item 4).

    python scripts/studies/probe_complete.py --probe PROBE.csv --out MERGED.csv [--precisions fp16] [--dry-run]

A probe measured before ``carb-probe`` timed every precision (e.g. the Zen 4 VM's
``device-probe-34cc4b132c.csv``: fp32 and bf16) lacks fp16. This times the missing precisions
(:func:`carb.data.probes.missing_precisions` against every precision, or ``--precisions``) on exactly the
probe's own (layer, batch) pairs, with ``carb-calibrate``'s ``probe_run`` repeats and window (what
``carb-quickstart calibrate=true`` probes with; ``--repeats`` / ``--min-window-s`` override) and
``carb-probe``'s threads and allocator (``measure=cpu``), and writes the old rows plus the new ones to
``--out`` with a provenance JSON beside it (the old provenance plus a ``completed`` entry). It refuses to
time on another machine than the probe's device (``device_id`` at the probe's threads).

``--dry-run`` times nothing: it prints the plan and an estimate of the run's length, each pair's time
per call from ``--rate-gmac`` (GMAC/s; default: the median rate of ``--rows``' fp16 rows, the device's
networks at that precision, when given) times ``1 + repeats`` windows of at least ``min_window_s``.
Run it with nothing else running on the machine.
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.data.probes import PROBE_COLUMNS, conv_rows, missing_precisions  # noqa: E402
from carb.design.arch import PRECISIONS  # noqa: E402

PAIR = ["cin", "cout", "kernel", "stride", "H_in", "batch_size"]


def pairs_of(probe: pd.DataFrame) -> pd.DataFrame:
    """The probe's distinct (layer, batch) pairs, in its first precision's order."""
    return probe[PAIR].drop_duplicates().reset_index(drop=True)


def pair_macs(plan: pd.DataFrame) -> np.ndarray:
    """Multiply-adds per call of each pair (padding ``kernel // 2``)."""
    from carb.design.shapes import out_size

    ho = np.array([out_size(int(h), int(k), int(s)) for h, k, s in plan[["H_in", "kernel", "stride"]].to_numpy()])
    return (plan["batch_size"] * ho * ho * plan["cout"] * plan["cin"] * plan["kernel"] ** 2).to_numpy(float)


def estimate_s(plan: pd.DataFrame, rate_gmac: float, repeats: int, min_window_s: float, n_prec: int) -> float:
    """Seconds to time ``plan`` at ``n_prec`` precisions running at ``rate_gmac`` GMAC/s: per pair one warm
    call and ``repeats`` windows of at least ``min_window_s`` (each at least one call)."""
    t = pair_macs(plan) / (rate_gmac * 1e9)
    return float(n_prec * np.sum(t + repeats * np.maximum(min_window_s, t) + t))


def network_rate_gmac(rows_path: str, precision: str) -> float:
    """Median GMAC/s (``flops`` counts multiply-adds) of the ok rows of ``precision`` in a dataset."""
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    df = ok_rows(load_dataset(rows_path))
    g = df[df["precision"].astype(str) == precision]
    if not len(g):
        raise SystemExit(f"--rows {rows_path} has no ok {precision} rows for a rate; give --rate-gmac")
    return float(np.median(g["flops"] / (g["latency_ms"] / 1e3)) / 1e9)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", required=True, help="the device's probe table (.csv)")
    ap.add_argument("--out", default=None, help="the completed table (.csv; provenance beside it)")
    ap.add_argument("--precisions", nargs="*", default=None, help="default: those the probe lacks of every precision")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--min-window-s", type=float, default=None)
    ap.add_argument("--rows", default=None, help="a dataset of the device, for the dry run's rate")
    ap.add_argument("--rate-gmac", type=float, default=None)
    ap.add_argument("--dry-run", action="store_true")
    a = ap.parse_args(argv)

    from carb.commands.cli import compose, to_dict

    probe = pd.read_csv(a.probe)
    devices = sorted(probe["device_id"].astype(str).unique())
    if len(devices) != 1:
        raise SystemExit(f"--probe {a.probe}: one device's probe expected, found {devices}")
    dev, threads = devices[0], int(probe["threads"].iloc[0])
    todo = list(a.precisions) if a.precisions else missing_precisions(probe, PRECISIONS)
    run = to_dict(compose("calibrate").probe_run)
    repeats = int(a.repeats if a.repeats is not None else run["repeats"])
    window = float(a.min_window_s if a.min_window_s is not None else run["min_window_s"])
    plan = pairs_of(conv_rows(probe))   # the regular convolutions (scripts/studies/probe_ops.py times the other kinds)
    print(f"probe of {dev} ({threads} thread(s)): {len(plan)} pairs, precisions {sorted(probe['precision'].unique())}; "
          f"to time: {todo or 'nothing'} (repeats {repeats}, min_window_s {window})")
    if not todo:
        return
    if a.dry_run:
        rate = a.rate_gmac or (network_rate_gmac(a.rows, todo[0]) if a.rows else None)
        if rate:
            est = estimate_s(plan, rate, repeats, window, len(todo))
            print(f"at {rate:.2f} GMAC/s: estimated {est:.0f} s ({est / 60:.1f} min) plus ~15 s start-up")
        return
    if not a.out:
        raise SystemExit("--out: give the completed table's path (.csv)")
    from carb.measure.cpu import pin_malloc
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint
    from carb.measure.probe import run_probe

    here = device_id(read_cpu_fingerprint(threads))
    if here != dev:
        raise SystemExit(f"this machine is device {here} at {threads} thread(s), the probe's is {dev}: run it there")
    mmap = to_dict(compose("probe").measure).get("malloc_mmap_threshold_MB")
    allocator = pin_malloc(int(mmap)) if mmap else None
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    new = run_probe(plan, todo, dev, threads=threads, repeats=repeats, min_window_s=window,
                    progress=lambda d, n: print(f"\r{d}/{n}", end="", file=sys.stderr))
    print(file=sys.stderr)
    t = pd.to_numeric(new["time_ms"], errors="coerce")
    if not len(new) or not (np.isfinite(t) & (t > 0)).all():
        raise SystemExit("a timing is not a finite positive number: nothing written (run again on an idle machine)")
    merged = pd.concat([probe[~probe["precision"].isin(todo)], new], ignore_index=True)[list(PROBE_COLUMNS)]
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    merged.to_csv(out, index=False, float_format="%.6g")
    prov_in = Path(a.probe).with_suffix(".provenance.json")
    prov = json.loads(prov_in.read_text()) if prov_in.exists() else {}
    prov.setdefault("completed", []).append({
        "precisions": todo, "pairs": len(plan), "repeats": repeats, "min_window_s": window, "allocator": allocator,
        "measured_from": started, "measured_to": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "by": "scripts/studies/probe_complete.py (carb.measure.probe.run_probe on the probe's own pairs)",
        "backends": {p: new[new["precision"] == p]["backend"].value_counts().to_dict() for p in todo}})
    prov["rows"] = len(merged)
    prov.setdefault("backends", {}).update(prov["completed"][-1]["backends"])
    out.with_suffix(".provenance.json").write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n")
    med = {p: float(new.loc[new["precision"] == p, "time_ms"].median()) for p in todo}
    print(f"wrote {out} ({len(merged)} rows; new: {len(new)}, median ms per call {med}) and its provenance")


if __name__ == "__main__":
    main()
