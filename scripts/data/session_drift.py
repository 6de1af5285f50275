"""Build ``carb/data/session-drift.csv``: each measuring window's latency level per CPU device and precision, from
the configurations the project measured in more than one window of the same device
(:func:`carb.data.session_drift.window_levels`; windows split on boots, kernel builds and gaps longer than
``data.session_gap_h`` of ``conf/calibrate.yaml``).

Sources (:data:`SOURCES`, every shipped CPU file of real rows): the EPYC Zen 5 reference (``cpu-reference``, the
100-row calibration run before it and the outside-domain check with its anchors, another kernel build), the EPYC
Zen 4 (its dataset, two kernel builds, and the 42 configurations re-measured in another window), and the Intel
Xeon (2026-12-05, and the four windows of 2026-12-07 on one boot: 16:07, 19:16, 22:12, 23:46 UTC). A model's latency
intervals for a later session widen by the pooled drift (:func:`carb.data.session_drift.shipped_drift`).

    python -m scripts.data.session_drift [--check]

``--check``: exit 1 when the shipped table differs from the one the sources give (the test suite runs it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
#: Every shipped CPU file of real rows measured by CARB's collector (relative to the repository root).
SOURCES = ("carb/data/cpu-reference.parquet", "scripts/data/cpu-calibration-100.parquet",
           "scripts/data/cpu-outside-check.parquet", "scripts/data/cpu-outside-check.anchors.parquet",
           "carb/data/cpu-amd-zen4.parquet", "scripts/data/cpu-amd-zen4-repeat.parquet",
           "carb/data/cpu-intel-xeon.parquet", "carb/data/cpu-intel-xeon-2026-12-07.parquet",
           "scripts/data/cpu-intel-xeon-2026-12-07b.parquet", "scripts/data/cpu-intel-xeon-2026-12-07c.parquet",
           "scripts/data/cpu-intel-xeon-2026-12-07d.parquet")


def gap_h() -> float:
    """``data.session_gap_h`` of ``conf/calibrate.yaml`` (hours): the gap that splits a boot's windows."""
    import yaml

    return float(yaml.safe_load((ROOT / "carb" / "conf" / "calibrate.yaml").read_text())["data"]["session_gap_h"])


def build() -> pd.DataFrame:
    """The window-level table of :data:`SOURCES` (rounded to 6 decimals, the shipped form)."""
    from carb.data.session_drift import window_levels

    rows = pd.concat([pd.read_parquet(ROOT / s) for s in SOURCES], ignore_index=True)
    return window_levels(rows, gap_h()).round({"level_log": 6})


def main() -> int:
    """Write (or ``--check``) the shipped table and its provenance; print the pooled drift per device kind."""
    from carb.data.session_drift import SHIPPED_TABLE, drift, load_levels

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the shipped table differs")
    args = ap.parse_args()
    table = build()
    if args.check:
        same = load_levels().reset_index(drop=True)
        ok = same.shape == table.shape and (same.astype(str).to_numpy() == table.astype(str).to_numpy()).all()
        print(f"session drift table: {'up to date' if ok else 'differs from its sources'} ({SHIPPED_TABLE.name})")
        return 0 if ok else 1
    table.to_csv(SHIPPED_TABLE, index=False)
    term = drift(table[table["device_kind"] == "cpu"])
    prov = {"what": "each measuring window's latency level (log offset, centred per device and precision) of the "
                    "CPU devices measured in more than one window, from the configurations measured in several",
            "command": "python -m scripts.data.session_drift", "sources": list(SOURCES),
            "session_gap_h": gap_h(), "pooled_cpu": term}
    SHIPPED_TABLE.with_suffix(".provenance.json").write_text(json.dumps(prov, indent=2) + "\n")
    for (dev, prec), g in table.groupby(["device_id", "precision"]):
        print(f"{dev} {prec}: " + ", ".join(f"{w[:16]} {v:+.3f} ({n})" for w, v, n in
                                           zip(g["window"], g["level_log"], g["n_configs"])))
    print(f"session_drift: kind=cpu sd_log={term['sd_log']:.3f} df={term['df']} devices={term['devices']} "
          f"windows={term['windows']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
