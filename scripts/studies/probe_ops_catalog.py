"""The operation catalog a device probe draws its non-convolution operations from (issue 43 item 3).

    python scripts/studies/probe_ops_catalog.py [--space conf/space/zoo.yaml] [--out carb/data/probe-ops.csv]

Traces every model of the zoo space (``conf/space/zoo.yaml``) at each of its input sizes on the meta device
(:func:`carb.design.trace.trace`, cached; nothing is measured) and keeps the distinct shapes of the
operations a probe times besides the space's regular convolutions (:func:`carb.measure.probe.op_catalog`:
depthwise, grouped and pointwise convolutions, linear layers, batched matrix products, attention,
element-wise, activation and normalisation operations), with how often each occurs. Writes the table
(:data:`carb.data.probes.OP_CATALOG`) and a provenance JSON beside it (commit, models, sizes, refused models,
versions). ``carb-probe`` (``ops``) and ``scripts/studies/probe_ops.py`` draw their plans from it.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from carb.data.probes import OP_CATALOG  # noqa: E402
from carb.files import write_atomic  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--space", default=str(ROOT / "conf" / "space" / "zoo.yaml"))
    ap.add_argument("--out", default=str(OP_CATALOG))
    a = ap.parse_args(argv)
    from carb.design.trace import TRACER_VERSION, trace
    from carb.errors import ZooError
    from carb.measure.probe import op_catalog

    space = yaml.safe_load(Path(a.space).read_text())
    only = space.get("input_sizes_of") or {}
    tables, refused = {}, {}
    for m in space["models"]:
        for size in only.get(m, space["input_sizes"]):
            try:
                tables[f"{m}@{size}"] = trace(m, (1, 3, int(size), int(size)))
            except ZooError as e:
                refused[f"{m}@{size}"] = str(e)
    cat = op_catalog(tables)
    out = Path(a.out)
    write_atomic(out, lambda tmp: cat.to_csv(tmp, index=False))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    import torch

    prov = {"what": "distinct operation shapes (batch 1) of the zoo space's layer tables, by probe kind "
                    "(carb.measure.probe.op_catalog); a shape catalog, no measurement",
            "command": "python scripts/studies/probe_ops_catalog.py", "commit": commit,
            "made_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "space": str(a.space),
            "models": list(space["models"]), "input_sizes": space["input_sizes"], "input_sizes_of": only,
            "refused": refused, "rows": len(cat), "rows_per_kind": cat["kind"].value_counts().to_dict(),
            "tracer_version": TRACER_VERSION, "torch_version": str(torch.__version__),
            "columns": {"count": "rows of all traced tables with this shape",
                        "models": "zoo models (any input size) with this shape"}}
    text = json.dumps(prov, indent=1, sort_keys=True) + "\n"
    write_atomic(out.with_suffix(".provenance.json"), lambda tmp: tmp.write_text(text))
    print(f"{len(cat)} operation shapes of {len(tables)} traced tables ({len(refused)} refused) -> {out}")
    print(cat.groupby("kind")["count"].agg(["size", "sum"]).to_string())


if __name__ == "__main__":
    main()
