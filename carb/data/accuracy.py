"""ImageNet top-1 of the standard ResNets (``imagenet-top1.csv``, torchvision's published figures;
source and license in ``imagenet-top1.md``), joined onto candidates by architecture.

Only the standard networks have a figure: ``resnet18/34/50/101/152`` and ``wide_resnet50_2/101_2`` at
width 1.0, the ImageNet stem (``early_downsample``), their named layouts, 1000 classes and input 224.
Every other candidate gets ``NaN``: no figure is guessed for another width, depth or input size.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from carb.design.identity import ARCH_COLUMNS, DEPTH, STAGES, knob_type
from carb.errors import ConfigError
from carb.resources import DATA_DIR

#: The columns that identify an architecture in the table and in a featurized grid: a ResNet's identity columns
#: (:data:`carb.design.identity.ARCH_COLUMNS`) but the depth (implied by the block and the stages), and the input size.
MATCH_COLUMNS = (*(c for c in ARCH_COLUMNS if c != DEPTH), "input_size")
#: How each column's value is written into the key (by its :func:`carb.design.identity.knob_type`).
_KEY_TEXT = {"str": lambda s: s.astype(str), "int": lambda s: s.astype(int).astype(str),
             "float": lambda s: s.astype(float).round(6).astype(str), "bool": lambda s: s.astype(bool).astype(str)}


@lru_cache(maxsize=1)
def top1_table() -> pd.DataFrame:
    """The shipped table: one row per (``model``, ``weights``); ``top1``, ``top5`` as fractions (0.7613)."""
    return pd.read_csv(DATA_DIR / "imagenet-top1.csv", dtype={STAGES: str})


def weights_names() -> list[str]:
    """The weights sets of the table (``IMAGENET1K_V1``, ``IMAGENET1K_V2``)."""
    return sorted(top1_table()["weights"].unique())


def _key(frame: pd.DataFrame) -> pd.Series:
    """One text per row of ``frame``: its :data:`MATCH_COLUMNS` joined by ``|``."""
    parts = [_KEY_TEXT[knob_type(c)](frame[c]) for c in MATCH_COLUMNS]
    out = parts[0]
    for p in parts[1:]:
        out = out + "|" + p
    return out


def join_top1(frame: pd.DataFrame, weights: str, field: str = "screen.accuracy") -> pd.DataFrame:
    """``frame`` (n featurized candidates: the :data:`MATCH_COLUMNS`, optional ``num_classes``) with ``top1``,
    ``top5`` (fractions; NaN where the table has no such network) and ``top1_model`` (e.g. ``resnet50``, else
    empty) of ``weights``. A ``top1`` the frame already carries (a grid file's column) is kept where it is set."""
    table = top1_table()
    if weights not in set(table["weights"]):
        raise ConfigError(f"{field}: {weights!r} is not allowed; allowed: {weights_names()} (or null)")
    rows = table[table["weights"] == weights]
    lookup = dict(zip(_key(rows), rows.index))
    idx = _key(frame).map(lookup)
    if "num_classes" in frame:
        idx = idx.where(pd.to_numeric(frame["num_classes"], errors="coerce").fillna(1000).to_numpy() == 1000)
    hit = idx.notna().to_numpy()
    out = frame.copy()
    for col in ("top1", "top5"):
        vals = np.full(len(frame), np.nan)
        vals[hit] = rows.loc[idx[hit].astype(int), col].to_numpy(dtype=float)
        if col in out:   # the grid's own values win where given
            own = pd.to_numeric(out[col], errors="coerce").to_numpy(dtype=float)
            vals = np.where(np.isfinite(own), own, vals)
        out[col] = vals
    names = np.full(len(frame), "", dtype=object)
    names[hit] = rows.loc[idx[hit].astype(int), "model"].to_numpy()
    out["top1_model"] = names
    return out
