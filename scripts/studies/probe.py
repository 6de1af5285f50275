"""Measure this CPU's device probe (single convolutions per precision) and add it to the shipped probes.

    python scripts/studies/probe.py [--n 160] [--precisions fp32 bf16 fp16] [--out carb/data/device-probes.csv]

Run it alone on an idle machine (it times kernels). One torch thread and glibc's allocator pinned, as
``measure=cpu`` collects. The layers are those of the networks of ``--layers-from``
(:func:`carb.measure.probe.space_layers`; default the shipped CPU reference), drawn by
:func:`carb.measure.probe.probe_plan`. The rows of this device already in ``--out`` are replaced; a
provenance JSON is written beside it (``<out>`` with ``.provenance.json``).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=160, help="(layer, batch) pairs per precision")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16", "fp16"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-MMAC", type=float, default=40.0, help="largest call, million multiply-adds")
    ap.add_argument("--out", default=str(ROOT / "carb/data/device-probes.csv"))
    ap.add_argument("--layers-from", default="reference",
                    help="dataset whose networks' layers are probed (a path, or 'reference')")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (as the dataset was measured with)")
    args = ap.parse_args()

    import pandas as pd
    import torch

    from carb.measure.cpu import pin_malloc
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint
    from carb.measure.probe import layer_array, probe_plan, run_probe, space_layers

    pinned = pin_malloc(1024)
    from carb.data.io import load_dataset, resolve_path

    fp = read_cpu_fingerprint(args.threads)
    dev = device_id(fp)
    plan = probe_plan(space_layers(load_dataset(resolve_path(args.layers_from), validate=False)), args.n,
                      args.seed, args.max_MMAC)
    t0 = time.monotonic()

    def progress(done: int, total: int) -> None:
        el = time.monotonic() - t0
        if done % 40 == 0 or done == total:
            print(f"  {done}/{total} timings, {el:.0f} s, ETA {el / done * (total - done):.0f} s", flush=True)

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    probe = run_probe(plan, args.precisions, dev, threads=args.threads, progress=progress)
    out = Path(args.out)
    old = pd.read_csv(out) if out.exists() else probe.iloc[:0]
    merged = pd.concat([old[old["device_id"].astype(str) != dev], probe], ignore_index=True)
    merged.to_csv(out, index=False, float_format="%.6g")
    prov_path = out.with_suffix(".provenance.json")
    prov = json.loads(prov_path.read_text()) if prov_path.exists() else {}
    prov[dev] = {"what": "single-convolution timings per precision by carb.measure.probe (real, not synthetic), "
                         "run alone on an idle machine",
                 "command": "python " + " ".join([str(Path(sys.argv[0]).relative_to(ROOT)
                                                      if Path(sys.argv[0]).is_absolute() else sys.argv[0]),
                                                  *sys.argv[1:]]),
                 "fingerprint": fp, "torch_version": torch.__version__, "python": platform.python_version(),
                 "allocator": pinned, "measured_from": started,
                 "measured_to": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "rows": len(probe), "plan": {"n": args.n, "seed": args.seed, "max_MMAC": args.max_MMAC,
                                              "layers_from": args.layers_from},
                 "backends": {p: probe[probe.precision == p]["backend"].value_counts().to_dict()
                              for p in args.precisions}}
    prov_path.write_text(json.dumps(prov, indent=2, sort_keys=True) + "\n")
    a = layer_array(probe)
    g = probe.assign(GMAC=a[:, 0] * a[:, 1] * a[:, 2] * probe["batch_size"].to_numpy() * 1e-9).groupby("precision").agg(calls=("time_ms", "size"), total_s=("time_ms", lambda t: t.sum() / 1e3),
                                  GMAC=("GMAC", "sum"))
    g["GMAC_per_s"] = g["GMAC"] / g["total_s"]
    print(f"device {dev}: {len(probe)} timings in {time.monotonic() - t0:.0f} s -> {out}")
    print(g.to_string())


if __name__ == "__main__":
    main()
