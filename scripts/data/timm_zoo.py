"""Build the shipped timm zoo tables from timm's unchanged published result files.

    python scripts/data/timm_zoo.py [--source ../shared/data/timm-results]

Writes (atomically) ``carb/data/timm-zoo-bench.parquet`` (the main set of every benchmark file:
:func:`carb.data.importers.timm_zoo.main_set`), ``carb/data/timm-zoo-bench.provenance.json`` (each source
file's sha256 and row counts, the snapshot commit, what was chosen) and ``carb/data/timm-top1.csv`` (the
accuracy table, :func:`carb.data.timm_accuracy.resolve_tags`, with timm's default pretrained tags read from
the installed timm's registry); with ``--census`` also ``carb/data/timm-zoo-census.csv`` (module counts and
parameters by kind per architecture, built on the meta device: :func:`census`; minutes on 2 cores).
The cards (``timm-zoo-bench.md``, ``timm-top1.md``) are written by hand.
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

from carb.data.importers.timm_zoo import (ZOO_BENCH, ZOO_BENCH_PROVENANCE, ZOO_CENSUS,  # noqa: E402
                                          benchmark_files, import_benchmark_files)
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


#: Module census columns (:func:`census`): counts of leaf modules by kind and parameters by kind.
CENSUS_KINDS = ("conv", "conv_dw", "conv_grouped", "conv_pw", "linear", "norm", "act", "attn", "pool", "leaf")


def _kind(mod) -> str | None:
    """The census kind of one module (None: not counted), from its class and settings."""
    import torch.nn as nn

    name = type(mod).__name__.lower()
    if isinstance(mod, nn.modules.conv._ConvNd):
        if mod.groups > 1 and mod.groups == mod.in_channels:
            return "conv_dw"
        if mod.groups > 1:
            return "conv_grouped"
        return "conv_pw" if all(k == 1 for k in mod.kernel_size) else "conv"
    if isinstance(mod, nn.Linear):
        return "linear"
    if "norm" in name:
        return "norm"
    if "attention" in name or name.endswith("attn"):
        return "attn"
    if "pool" in name:
        return "pool"
    if isinstance(mod, (nn.ReLU, nn.GELU, nn.SiLU, nn.Hardswish, nn.Hardsigmoid, nn.Sigmoid, nn.ReLU6,
                        nn.LeakyReLU, nn.Tanh, nn.Mish, nn.PReLU, nn.ELU)) or "act" in name:
        return "act"
    return None


def census(models: list[str]) -> pd.DataFrame:
    """Per timm architecture, built on the meta device (no weights, no compute): ``n_<kind>`` module
    counts and ``params_<kind>`` parameter counts for :data:`CENSUS_KINDS` (``leaf``: every module without
    children), ``census_error`` where timm cannot build it. A static structure count, not a trace."""
    import torch
    import timm

    rows = []
    for name in models:
        row: dict = {"model": name, "census_error": ""}
        try:
            with torch.device("meta"):
                m = timm.create_model(name)
        except Exception as e:  # noqa: BLE001 - any build failure is recorded with its reason
            row["census_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            rows.append(row)
            continue
        for k in CENSUS_KINDS:
            row[f"n_{k}"], row[f"params_{k}"] = 0, 0
        for mod in m.modules():
            own = sum(p.numel() for p in mod.parameters(recurse=False))
            if not any(True for _ in mod.children()):
                row["n_leaf"] += 1
                row["params_leaf"] += own
            k = _kind(mod)
            if k is not None:
                row[f"n_{k}"] += 1
                row[f"params_{k}"] += sum(p.numel() for p in mod.parameters())
        rows.append(row)
    return pd.DataFrame(rows)


def sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=str(ROOT.parent / "shared" / "data" / "timm-results"))
    ap.add_argument("--census", action="store_true", help="also rebuild timm-zoo-census.csv (minutes)")
    args = ap.parse_args()
    src = Path(args.source)
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
                     "architectures": int(top1["model"].nunique()), "rows": len(top1),
                     "tag_rule_counts": top1.drop_duplicates("model")["tag_rule"].value_counts().to_dict()},
        "rows": len(main_rows), "models": int(main_rows["model"].nunique()),
        "devices": sorted(main_rows["device_name"].unique()),
    }
    if args.census:
        cen = census(sorted(main_rows["model"].unique()))
        write_atomic(ZOO_CENSUS, lambda t: cen.to_csv(t, index=False))
        prov["census"] = {"built_with": f"timm {timm_version} on the meta device (scripts/data/timm_zoo.py)",
                          "models": len(cen), "failed": int((cen["census_error"] != "").sum())}
    elif ZOO_CENSUS.is_file():
        old = json.loads(ZOO_BENCH_PROVENANCE.read_text()) if ZOO_BENCH_PROVENANCE.is_file() else {}
        if "census" in old:
            prov["census"] = old["census"]
    write_atomic(ZOO_BENCH_PROVENANCE, lambda t: t.write_text(json.dumps(prov, indent=2) + "\n"))
    print(f"{ZOO_BENCH.name}: {len(main_rows)} rows, {prov['models']} models, {len(prov['devices'])} devices; "
          f"{TOP1_TABLE.name}: {prov['accuracy']['architectures']} architectures ({len(top1)} rows) "
          f"{prov['accuracy']['tag_rule_counts']}")


if __name__ == "__main__":
    from carb.errors import CarbError

    try:
        main()
    except CarbError as e:
        print(f"timm_zoo: error: {e}", file=sys.stderr)
        sys.exit(2)
