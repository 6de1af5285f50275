"""Synthetic datasets for the characterization tests (generated here, never presented as measurements)."""
from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pandas as pd

from carb.data.schema import COLUMNS, conform, validate_dataset


def frame(rows: list[dict], device: str = "Synthetic GPU A") -> pd.DataFrame:
    """Schema frame from partial rows (missing columns NaN/NA; status ok; config_id from the knobs)."""
    df = pd.DataFrame(rows)
    if "config_id" not in df.columns:   # same rows -> same ids on every device
        df["config_id"] = [hashlib.sha1(f"{i}:{sorted(r.items())}".encode()).hexdigest()[:16]
                           for i, r in enumerate(rows)]
    df["device_name"] = device
    df["device_kind"] = "cuda"
    df["status"] = "ok"
    defaults = {"block": "basic", "depth": 18, "width_mult": 1.0, "input_size": 32, "batch_size": 1,
                "precision": "fp32", "early_downsample": True, "stages": "2-2-2-2", "params": 1000,
                "n_conv": 20}
    for c, v in defaults.items():
        if c not in df.columns:
            df[c] = v
    return validate_dataset(conform(df, fill_missing=COLUMNS), source="synthetic")


def grid_dataset(device: str = "Synthetic GPU A", scale: float = 1.0, energy: bool = True,
                 sm_util: bool = True, seed: int = 0) -> pd.DataFrame:
    """A full factorial grid (2 families x 2 depths x 5 batch sizes x 2 precisions x 2 widths = 80
    rows) whose targets are smooth functions of the knobs times ``scale`` (+/- 2 % seeded noise)."""
    rng = np.random.default_rng(seed)
    rows = []
    for (block, depths), bs, prec, w in itertools.product(
            (("basic", (18, 34)), ("bottleneck", (50, 101))), (1, 4, 16, 64, 256), ("fp32", "fp16"),
            (1.0, 2.0)):
        for depth in depths:
            flops = depth * 2e7 * bs * w ** 2 * (3 if block == "bottleneck" else 1)
            noise = rng.uniform(0.98, 1.02, size=3)
            sm = min(95.0, 10.0 + 6.0 * np.log2(bs) + 35.0 * (w - 1) + 0.2 * depth)
            rows.append({
                "config_id": hashlib.sha1(f"{block}{depth}{bs}{prec}{w}".encode()).hexdigest()[:16],
                "block": block, "depth": depth, "width_mult": w, "input_size": 32, "batch_size": bs,
                "precision": prec, "stages": "2-2-2-2", "params": int(depth * 1e5 * w ** 2),
                "n_conv": depth + 2, "flops": flops,
                "max_activation_MB": bs * w * 0.5 * (2 if prec == "fp32" else 1),
                "latency_ms": scale * (0.5 + flops / 1e9) * noise[0],
                "energy_J": scale * (5 + 40 * flops / 1e9 * (1.3 if prec == "fp32" else 1.0)) * noise[1]
                if energy else np.nan,
                "peak_memory_MB": (20 + bs * w * 0.5 * (2 if prec == "fp32" else 1)) * noise[2],
                "avg_sm_util": sm if sm_util else np.nan,
                "n_runs": 10,
            })
    return frame(rows, device=device)
