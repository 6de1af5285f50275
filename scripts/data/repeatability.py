"""Build ``carb/data/repeatability.csv``: the run-to-run repeatability of every device the project shipped rows
with a measured spread for (``latency_repeat_spread``, two passes in rotated order), per precision.

Sources (:data:`SOURCES`): the 42 Zen 4 configurations re-measured in two passes
(``scripts/data/cpu-amd-zen4-repeat.parquet``) and the CPU zoo (``carb/data/zoo-cpu.parquet``), both on
device 34cc4b132c. ``carb-calibrate`` looks the target's ``device_id`` up in the table when its K rows carry
no spread of their own (:func:`carb.data.repeatability.shipped_floor_log_sd`); the transfer benchmark floors each
device's intervals with it.

    python scripts/data/repeatability.py [--check]

``--check``: exit 1 when the shipped table differs from the one the sources give (the test suite runs it).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
#: The shipped rows with a measured spread.
SOURCES = (ROOT / "scripts" / "data" / "cpu-amd-zen4-repeat.parquet", ROOT / "carb" / "data" / "zoo-cpu.parquet")


def build() -> pd.DataFrame:
    """The table from :data:`SOURCES` (those present)."""
    from carb.data.repeatability import device_repeatability

    return device_repeatability([pd.read_parquet(f) for f in SOURCES if f.exists()])


def main() -> int:
    from carb.data.repeatability import SHIPPED_TABLE
    from carb.files import write_atomic

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped table; exit 1 when it differs")
    a = ap.parse_args()
    table = build()
    text = table.to_csv(index=False)
    if a.check:
        same = SHIPPED_TABLE.exists() and SHIPPED_TABLE.read_text() == text
        print(f"repeatability: {'up to date' if same else 'differs: run python scripts/data/repeatability.py'}")
        return 0 if same else 1
    write_atomic(SHIPPED_TABLE, lambda tmp: tmp.write_text(text))
    prov = {"builder": "scripts/data/repeatability.py",
            "sources": [str(f.relative_to(ROOT)) for f in SOURCES if f.exists()],
            "what": "per device_id and precision: rows with a measured two-pass latency_repeat_spread, its median, the "
                    "90 % floor (quantile of |log(a / b)| over sqrt 2, carb.data.repeatability.repeatability_floor) "
                    "and the same as one window's log sd (over z_0.95)",
            "devices": sorted(set(table["device_id"]))}
    body = json.dumps(prov, indent=1) + "\n"
    write_atomic(SHIPPED_TABLE.with_suffix(".provenance.json"), lambda tmp: tmp.write_text(body))
    print(f"wrote {SHIPPED_TABLE} ({len(table)} rows) and its provenance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
