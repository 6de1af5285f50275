"""Add the other kinds of operation to a device's shipped probe (issue 43 item 3), keeping its convolutions.

    python scripts/studies/probe_ops.py --device 34cc4b132c [--probe carb/data/device-probes.csv]
        [--out carb/data/device-probes.csv] [--per-kind 12] [--precisions fp32 bf16 fp16] [--dry-run]

The shipped probes (``carb/data/device-probes.csv``) time regular convolutions only. This times
``--per-kind`` operations of each other kind (:data:`carb.data.probes.PROBE_KINDS`: depthwise, grouped and
pointwise convolutions, linear, matmul, attention, element-wise, activation, norm), drawn from the zoo's
operation catalog (:func:`carb.measure.probe.op_plan`, ``carb/data/probe-ops.csv``; ``ops.max_MMAC`` and
``ops.max_MB`` of ``conf/probe.yaml``), at every precision the device's probe has (or ``--precisions``),
with ``carb-probe``'s repeats, window, threads and allocator (``conf/probe.yaml``, ``measure=cpu``), and
writes the table back with that device's earlier operation rows replaced (its convolutions and every other
device's rows unchanged), and the device's provenance record gains an ``ops`` entry. It refuses to time on
another machine than the device's (``device_id`` at the probe's threads). Run it with nothing else running.

``--dry-run`` times nothing: it prints the plan and an upper estimate of the run's length. ``--report`` times
nothing either: it fits :class:`carb.model.op_cost.OpCostModel` on the device's probe (every kind) and prints
its cross-validated error per kind and precision, and, on a zoo dataset of the device (``--rows``, default the
shipped ``zoo-cpu``), the Spearman correlation and median ratio of ``probe_op_ms`` to the measured latency per
precision beside FLOPs' correlation.
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

from carb.data.probes import SHIPPED_PROBES, for_csv, load_op_catalog, op_work, with_op_columns  # noqa: E402

#: GMAC/s assumed for the estimate (fp16 on a CPU without AVX-512 FP16 runs PyTorch's fallback: ~1 GMAC/s).
SLOW_GMAC = 0.5


def estimate_s(plan: pd.DataFrame, repeats: int, min_window_s: float, n_prec: int) -> float:
    """Upper estimate (s) of timing ``plan`` at ``n_prec`` precisions: per row a warm call and ``repeats``
    windows of at least ``min_window_s``, each call at :data:`SLOW_GMAC` (compute) or 1 GB/s (memory)."""
    w = op_work(plan.assign(precision="fp32"))
    t = np.maximum(w["macs"] / (SLOW_GMAC * 1e9), (w["act_bytes"] + w["out_bytes"]) / 1e9).to_numpy(float)
    return float(n_prec * np.sum(2 * t + repeats * np.maximum(min_window_s, t)))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="the device id whose probe gains the operations")
    ap.add_argument("--probe", default=str(SHIPPED_PROBES), help="the probe table (.csv, any devices)")
    ap.add_argument("--out", default=None, help="default: --probe (rewritten atomically)")
    ap.add_argument("--per-kind", type=int, default=12)
    ap.add_argument("--precisions", nargs="*", default=None, help="default: the device's probed precisions")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--rows", default="zoo-cpu", help="--report: a zoo dataset of the device (name or path)")
    a = ap.parse_args(argv)
    if a.report:
        return report(a.device, a.probe, a.rows)

    from carb.commands.cli import compose, to_dict
    from carb.measure.probe import op_plan

    cfg = compose("probe")
    ops = to_dict(cfg.ops)
    table = with_op_columns(pd.read_csv(a.probe))
    mine = table[table["device_id"].astype(str) == a.device]
    if mine.empty:
        raise SystemExit(f"--device {a.device}: no rows in {a.probe}")
    threads = int(mine["threads"].iloc[0])
    precisions = list(a.precisions) if a.precisions else sorted(mine["precision"].astype(str).unique())
    plan = op_plan(load_op_catalog(), a.per_kind, a.seed, float(ops["max_MMAC"]), float(ops["max_MB"]))
    repeats, window = int(cfg.repeats), float(cfg.min_window_s)
    est = estimate_s(plan, repeats, window, len(precisions))
    print(f"device {a.device} ({threads} thread(s)): {len(plan)} operations ({plan['kind'].value_counts().to_dict()}) "
          f"x {precisions}, repeats {repeats}, min_window_s {window}: at most ~{est:.0f} s plus ~15 s start-up")
    if a.dry_run:
        return
    from carb.files import write_atomic
    from carb.measure.cpu import pin_malloc
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint
    from carb.measure.probe import run_probe

    here = device_id(read_cpu_fingerprint(threads))
    if here != a.device:
        raise SystemExit(f"this machine is device {here} at {threads} thread(s), not {a.device}: run it there")
    mmap = to_dict(cfg.measure).get("malloc_mmap_threshold_MB")
    allocator = pin_malloc(int(mmap)) if mmap else None
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    new = run_probe(plan, precisions, a.device, threads=threads, repeats=repeats, min_window_s=window,
                    progress=lambda d, n: print(f"\r{d}/{n}", end="", file=sys.stderr))
    print(file=sys.stderr)
    t = pd.to_numeric(new["time_ms"], errors="coerce")
    if not len(new) or not (np.isfinite(t) & (t > 0)).all():
        raise SystemExit("a timing is not a finite positive number: nothing written (run again on an idle machine)")
    keep = (table["device_id"].astype(str) != a.device) | (table["kind"] == "conv_regular")
    merged = for_csv(pd.concat([table[keep], new], ignore_index=True))
    out = Path(a.out or a.probe)
    write_atomic(out, lambda tmp: merged.to_csv(tmp, index=False, float_format="%.6g"))
    prov_path = out.with_suffix(".provenance.json")
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    rec = prov.setdefault(a.device, {}) if (a.device in prov or not prov.get("device_id")) else prov
    rec["ops"] = {"by": "scripts/studies/probe_ops.py (carb.measure.probe.op_plan + run_probe)", "per_kind": a.per_kind,
                  "seed": a.seed, "max_MMAC": float(ops["max_MMAC"]), "max_MB": float(ops["max_MB"]),
                  "precisions": precisions, "rows": len(new), "repeats": repeats, "min_window_s": window,
                  "allocator": allocator, "catalog": "carb/data/probe-ops.csv",
                  "measured_from": started, "measured_to": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    text = json.dumps(prov, indent=1, sort_keys=False) + "\n"
    write_atomic(prov_path, lambda tmp: tmp.write_text(text))
    med = new.groupby(["kind", "precision"])["time_ms"].median().unstack().round(4)
    print(f"wrote {out} ({len(merged)} rows; {len(new)} new operation rows) and its provenance\nmedian ms per call:\n{med}")


def report(device: str, probe: str, rows: str) -> None:
    """Print the op cost model's per-kind error on ``device``'s probe in ``probe`` and how its ``probe_op_ms``
    ranks the measured zoo rows ``rows`` of that device (Spearman, median predicted / measured) per precision."""
    from scipy.stats import spearmanr

    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows
    from carb.model.op_cost import OpCostModel, probe_op_ms

    t = with_op_columns(pd.read_csv(probe))
    m = OpCostModel().fit(t[t["device_id"].astype(str) == device])
    card = pd.DataFrame(m.to_dict()["kinds"]).T
    print(f"OpCostModel of {device}: rows and 5-fold relative error per call\n{card[['rows', 'cv_mape']].to_string()}")
    df = ok_rows(load_dataset(rows))
    df = df[df["device_id"].astype(str) == device]
    f, y = probe_op_ms(df, m), df["latency_ms"].to_numpy(float)
    for p in sorted(df["precision"].astype(str).unique()):
        s = (df["precision"].astype(str) == p).to_numpy() & np.isfinite(f)
        if s.sum() < 3:
            print(f"{p}: {int(s.sum())} rows with probe_op_ms")
            continue
        print(f"{p}: {int(s.sum())} rows, probe_op_ms Spearman {spearmanr(f[s], y[s]).correlation:.3f} (FLOPs "
              f"{spearmanr(df['flops'].to_numpy(float)[s], y[s]).correlation:.3f}), median predicted/measured "
              f"{np.median(f[s] / y[s]):.2f}")


if __name__ == "__main__":
    main()
