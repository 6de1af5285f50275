"""Benchmark: seconds per configuration on this CPU for the `smoke` space and a seeded 20-config
sample of the `cpu` space, and the collector's own overhead, measured in one run.

Overhead = the collection loop's wall time outside each row's measurement protocol (model building,
feature extraction, validating and writing the row, bookkeeping) / loop wall time. A stricter figure
also counts warm-up and the peak-memory forward as overhead (only timed loops, utilization windows and
cool-downs are "measurement"). Last line: ``cpu_s_per_config=<s> overhead_fraction=<x>``.
"""
from __future__ import annotations

import tempfile

from carb.commands.cli import compose
from carb.commands.collect import run_collect


def collect(space: str, extra: list[str], tmp: str) -> dict:
    cfg = compose("collect", [f"space={space}", "device=cpu", "measure=cpu", f"out={tmp}/{space}.parquet",
                              f"tracking.uri=sqlite:///{tmp}/mlflow.db", "progress.enabled=false", *extra])
    return run_collect(cfg)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        smoke = collect("smoke", [], tmp)
        cpu = collect("cpu", ["space.n=20"], tmp)
    for name, r in (("smoke", smoke), ("cpu (20 sampled)", cpu)):
        print(f"{name}: {r['n_measured']} configs, {r['s_per_config']:.2f} s/config, overhead "
              f"{r['overhead_fraction']:.3f} (strict, warm-up counted: {r['strict_overhead_fraction']:.3f}), "
              f"writing {r['write_s']:.2f} s")
        loop = r["loop_s"]
        shares = sorted(r["phases_s"].items(), key=lambda kv: -kv[1])
        print("  share of the loop's wall time: " + ", ".join(f"{k[:-2]} {v / loop:.3f}" for k, v in shares if v > 0))
    print(f"cpu_s_per_config={cpu['s_per_config']:.3f} overhead_fraction={cpu['overhead_fraction']:.3f}")


if __name__ == "__main__":
    main()
