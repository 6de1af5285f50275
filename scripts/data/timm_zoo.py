"""Build the shipped timm zoo tables from timm's unchanged published result files.

    python scripts/data/timm_zoo.py [--source ../shared/data/timm-results]

Writes (atomically) ``carb/data/timm-zoo-bench.parquet`` (the main set of every benchmark file:
:func:`carb.data.importers.timm_zoo.main_set`), ``carb/data/timm-zoo-bench.provenance.json`` (each source
file's sha256 and row counts, the snapshot commit, what was chosen) and ``carb/data/timm-top1.csv`` (the
accuracy table, :func:`carb.data.timm_accuracy.resolve_tags`, with timm's default pretrained tags read from
the installed timm's registry). The cards (``timm-zoo-bench.md``, ``timm-top1.md``) are written by hand.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.data.importers.timm_zoo import (ZOO_BENCH, ZOO_BENCH_PROVENANCE, benchmark_files,  # noqa: E402
                                          import_benchmark_files)
from carb.data.timm_accuracy import TOP1_TABLE, resolve_tags  # noqa: E402
from carb.files import write_atomic  # noqa: E402

#: The snapshot of timm's results/ folder (../shared/data/timm-results/README.md).
SNAPSHOT = "aa4b5850c1543fa488abf260f18390eda46cf85d"


def default_tags() -> tuple[pd.DataFrame, str]:
    """timm's default pretrained tag per architecture (the first tag in its registry) and timm's version.
    torchvision's two operators are defined first (the CPU torch wheel lacks them)."""
    import torch

    for op in ("nms", "qnms"):
        try:
            torch.library.define(f"torchvision::{op}",
                                 "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:
            pass
    import timm
    from timm.models import _registry

    rows = [(a, c.tags[0] if c.tags else "") for a, c in _registry._model_default_cfgs.items()]
    return pd.DataFrame(rows, columns=["arch", "default_tag"]), timm.__version__


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=str(ROOT.parent / "shared" / "data" / "timm-results"))
    src = Path(ap.parse_args().source)
    files = benchmark_files(src)
    table = import_benchmark_files(files)
    main_rows = table[table["main"]].reset_index(drop=True)
    write_atomic(ZOO_BENCH, lambda t: main_rows.to_parquet(t, index=False, compression="zstd"))
    tags, timm_version = default_tags()
    top1 = resolve_tags(pd.read_csv(src / "results-imagenet.csv", thousands=","), tags,
                        pd.read_csv(src / "model_metadata-in1k.csv"))
    write_atomic(TOP1_TABLE, lambda t: top1.to_csv(t, index=False, float_format="%.5g"))
    prov = {
        "source": "timm (pytorch-image-models) results/ folder, Apache-2.0, Copyright 2019 Ross Wightman",
        "snapshot_commit": SNAPSHOT,
        "license_file": "carb/data/LICENSE-timm-gpu-bench (identical to the snapshot's LICENSE)",
        "builder": "scripts/data/timm_zoo.py",
        "main_set": "per device the newest torch of the eager nchw amp (autocast fp16) files on GPUs; "
                    "on the CPU (only torch.compile files) the newest fp32 nchw dynamo file",
        "latency_ms": "infer_step_time (ms per batch)",
        "files": {p.name: {"sha256": sha256(p), "rows": int((table["source_file"] == p.name).sum()),
                           "main_rows": int((main_rows["source_file"] == p.name).sum())} for p in files},
        "accuracy": {"results-imagenet.csv": sha256(src / "results-imagenet.csv"),
                     "model_metadata-in1k.csv": sha256(src / "model_metadata-in1k.csv"),
                     "default_tags_from": f"timm {timm_version} registry (first tag per architecture)",
                     "architectures": len(top1),
                     "tag_rule_counts": top1["tag_rule"].value_counts().to_dict()},
        "rows": len(main_rows), "models": int(main_rows["model"].nunique()),
        "devices": sorted(main_rows["device_name"].unique()),
    }
    write_atomic(ZOO_BENCH_PROVENANCE, lambda t: t.write_text(json.dumps(prov, indent=2) + "\n"))
    print(f"{ZOO_BENCH.name}: {len(main_rows)} rows, {prov['models']} models, {len(prov['devices'])} devices; "
          f"{TOP1_TABLE.name}: {len(top1)} architectures {prov['accuracy']['tag_rule_counts']}")


if __name__ == "__main__":
    main()
