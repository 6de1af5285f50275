"""Build ``carb/data/repeatability.csv``: the run-to-run repeatability of every device the project shipped rows
with a measured spread for (``latency_repeat_spread``, two passes in rotated order), per precision.

Sources (:data:`SOURCES`): the 42 Zen 4 configurations re-measured in two passes
(``scripts/data/cpu-amd-zen4-repeat.parquet``), the CPU zoo (``carb/data/zoo-cpu.parquet``) and the Zen 4
dataset's rows collected with two passes (``carb/data/cpu-amd-zen4.parquet``, the seed-2027 rows of 2026-12-07),
all on device 34cc4b132c; and the Intel Xeon's (6a0ea403ee) session of 2026-12-07 (seed 2027, two passes per row,
``carb/data/cpu-intel-xeon-2026-12-07.parquet``, a file of its own: 28-56 % slower than the first session's rows;
the transfer benchmark's floor for the Xeon reads the same rows). ``carb-calibrate`` looks the target's ``device_id`` up in the table when its
K rows carry no spread of their own (:func:`carb.data.repeatability.shipped_floor_log_sd`); the transfer benchmark
floors each device's intervals with it.

It also builds ``carb/data/memory-repeatability.csv``: the run-to-run spread of peak memory per device, from
configurations measured again in another run (:data:`MEMORY_SOURCES`: the 42 re-measured Zen 4 configurations
against the Zen 4 dataset; the Xeon's 26 configurations measured in both sessions (2026-12-05 and -07); the
H200 runs of seeds 1 and 2 against the H200 reference, rows measured at another time; and every source's own rows'
two-pass ``peak_memory_repeat_spread``), :func:`carb.data.repeatability.memory_repeatability`; the cascade's
memory intervals are floored by it (:func:`carb.model.intervals.memory_floor`).

    python scripts/data/repeatability.py [--check]

``--check``: exit 1 when a shipped table differs from the one the sources give (the test suite runs it).
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
SOURCES = (ROOT / "scripts" / "data" / "cpu-amd-zen4-repeat.parquet", ROOT / "carb" / "data" / "zoo-cpu.parquet",
           ROOT / "carb" / "data" / "cpu-amd-zen4.parquet", ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet")


#: Pairs of shipped files whose common configurations were measured twice on one device: (first run, again).
MEMORY_SOURCES = (
    (ROOT / "carb" / "data" / "cpu-amd-zen4.parquet", ROOT / "scripts" / "data" / "cpu-amd-zen4-repeat.parquet"),
    (ROOT / "carb" / "data" / "cpu-intel-xeon.parquet", ROOT / "carb" / "data" / "cpu-intel-xeon-2026-12-07.parquet"),
    (ROOT / "carb" / "data" / "h200-reference.parquet",
     ROOT / "scripts" / "data" / "h200-run-2026-12-04-seed1" / "dataset.parquet"),
    (ROOT / "carb" / "data" / "h200-reference.parquet",
     ROOT / "scripts" / "data" / "h200-run-2026-12-04-seed2" / "dataset.parquet"),
)


def build() -> pd.DataFrame:
    """The table from :data:`SOURCES` (those present)."""
    from carb.data.repeatability import device_repeatability

    return device_repeatability([pd.read_parquet(f) for f in SOURCES if f.exists()])


def build_memory() -> pd.DataFrame:
    """The peak-memory table from :data:`MEMORY_SOURCES` (pairs whose files are both present)."""
    from carb.data.repeatability import memory_pairs, memory_repeatability

    present = [(a, b) for a, b in MEMORY_SOURCES if a.exists() and b.exists()]
    pairs = pd.concat([memory_pairs(pd.read_parquet(a), pd.read_parquet(b)) for a, b in present], ignore_index=True)
    passes = pairs["pair"] == "passes"   # a file in two source pairs: its rows' pass pairs counted once
    pairs = pd.concat([pairs[~passes], pairs[passes].drop_duplicates(["device_id", "config_id", "measured_at"])],
                      ignore_index=True)
    return memory_repeatability(pairs)


def main() -> int:
    from carb.data.repeatability import MEMORY_TABLE, SHIPPED_TABLE
    from carb.files import write_atomic

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped table; exit 1 when it differs")
    a = ap.parse_args()
    table = build()
    text = table.to_csv(index=False)
    memory = build_memory()
    mem_text = memory.to_csv(index=False)
    if a.check:
        same = (SHIPPED_TABLE.exists() and SHIPPED_TABLE.read_text() == text and MEMORY_TABLE.exists()
                and MEMORY_TABLE.read_text() == mem_text)
        print(f"repeatability: {'up to date' if same else 'differs: run python scripts/data/repeatability.py'}")
        return 0 if same else 1
    write_atomic(SHIPPED_TABLE, lambda tmp: tmp.write_text(text))
    write_atomic(MEMORY_TABLE, lambda tmp: tmp.write_text(mem_text))
    mem_prov = {"builder": "scripts/data/repeatability.py",
                "sources": [[str(f.relative_to(ROOT)) for f in pair] for pair in MEMORY_SOURCES
                            if all(f.exists() for f in pair)],
                "what": "per device_id: pairs of peak_memory_MB measurements of one configuration in two runs (same "
                        "config_id, another measured_at) or in one run's passes (peak_memory_repeat_spread; "
                        "carb.data.repeatability.memory_pairs), the share that differ, "
                        "the 90th percentile and maximum of |log(again / first)|, and the 90 % floor (that quantile "
                        "over sqrt 2, carb.data.repeatability.memory_floor)",
                "devices": sorted(set(memory["device_id"]))}
    mem_body = json.dumps(mem_prov, indent=1) + "\n"
    write_atomic(MEMORY_TABLE.with_suffix(".provenance.json"), lambda tmp: tmp.write_text(mem_body))
    prov = {"builder": "scripts/data/repeatability.py",
            "sources": [str(f.relative_to(ROOT)) for f in SOURCES if f.exists()],
            "what": "per device_id and precision: rows with a measured two-pass latency_repeat_spread, its median, the "
                    "90 % floor (quantile of |log(a / b)| over sqrt 2, carb.data.repeatability.repeatability_floor) "
                    "and the same as one window's log sd (over z_0.95)",
            "devices": sorted(set(table["device_id"]))}
    body = json.dumps(prov, indent=1) + "\n"
    write_atomic(SHIPPED_TABLE.with_suffix(".provenance.json"), lambda tmp: tmp.write_text(body))
    print(f"wrote {SHIPPED_TABLE} ({len(table)} rows), {MEMORY_TABLE} ({len(memory)} rows) and their provenance")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
