"""ImageNet top-1 / top-5 of timm's models (the zoo's accuracy axis), per architecture and image size.

Source: timm's ``results/results-imagenet.csv`` (one row per ``arch.pretrained_tag``, percent) and
``results/model_metadata-in1k.csv`` (pretraining data per architecture), Apache-2.0; the shipped table
``carb/data/timm-top1.csv`` and its card ``carb/data/timm-top1.md`` (built by ``scripts/data/timm_zoo.py``).

**Tag resolution** (:func:`resolve_tags`): the benchmark files name architectures (``resnet50``), the
results name weights (``resnet50.a1_in1k``, ``resnet50.tv_in1k``, ...). Each architecture gets the top-1 of
timm's *default* pretrained tag: the weights ``timm.create_model(arch, pretrained=True)`` loads (the first
tag of the architecture in timm's registry; the table records them from timm 1.0.31). Not the best tag:
the best of up to 15 tags per architecture is a selection on the test set, often weights fine-tuned at a
larger input or on extra data, which the benchmarked configuration need not be. Where the default tag has
no row in the results (an in21k-only default, a tag evaluated only at another size) the best-top-1 tag is
used and ``tag_rule`` says ``best``; the best tag and its top-1 are kept beside (``best_tag``, ``best_top1``)
in every row. A tag evaluated at several image sizes (``resnet50.a1_in1k`` at 224 and 288) keeps one row
per size, and :func:`join_top1` matches the benchmark row's ``input_size`` exactly by default.
``top1`` / ``top5`` are fractions (0.8041 for 80.41 %), as :mod:`carb.data.accuracy`.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.resources import DATA_DIR

TOP1_TABLE = DATA_DIR / "timm-top1.csv"
TOP1_COLUMNS: tuple[str, ...] = ("model", "tag", "tag_rule", "top1", "top5", "eval_img_size", "crop_pct",
                                 "best_tag", "best_top1", "n_tags", "pretrain")


def split_name(name: str) -> tuple[str, str]:
    """``'resnet50.a1_in1k'`` -> ``('resnet50', 'a1_in1k')``; a name without a tag -> ``(name, '')``."""
    arch, _, tag = str(name).strip().partition(".")
    return arch, tag


def resolve_tags(results: pd.DataFrame, default_tags: pd.DataFrame,
                 metadata: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per architecture and evaluated image size of the resolved tag, from ``results`` (timm's
    results-imagenet.csv: ``model`` with tag, ``top1``,
    ``top5`` in percent, ``img_size``, ``crop_pct``) with :data:`TOP1_COLUMNS`.

    ``default_tags``: ``arch``, ``default_tag`` (timm's registry); ``metadata``: ``model``, ``pretrain``
    (model_metadata-in1k.csv, optional). Rule in the module docstring. Raises :class:`DatasetError` when a
    column is missing or a top-1 is outside 0-100 (percent expected)."""
    for need, frame, what in ((("model", "top1", "top5", "img_size"), results, "results"),
                              (("arch", "default_tag"), default_tags, "default tags")):
        missing = [c for c in need if c not in frame.columns]
        if missing:
            raise DatasetError(f"timm accuracy {what}: missing column(s) {missing}")
    r = results.copy()
    r["top1"] = pd.to_numeric(r["top1"], errors="coerce")
    r["top5"] = pd.to_numeric(r["top5"], errors="coerce")
    if not r["top1"].between(0, 100).all():
        raise DatasetError("timm accuracy results: top1 must be a percentage in [0, 100]")
    r[["arch", "tag"]] = pd.DataFrame([split_name(m) for m in r["model"]], index=r.index)
    default = dict(zip(default_tags["arch"].astype(str), default_tags["default_tag"].fillna("").astype(str)))
    pretrain = ({} if metadata is None else
                dict(zip(metadata["model"].astype(str), metadata["pretrain"].astype(str))))
    rows = []
    for arch, g in r.groupby("arch", sort=True):
        best = g.loc[g["top1"].idxmax()]
        hit = g[g["tag"] == default.get(arch, "\0")]
        pick, rule = (hit, "default") if len(hit) else (g[g["tag"] == best["tag"]], "best")
        for _, row in pick.sort_values("img_size").iterrows():
            rows.append({"model": arch, "tag": row["tag"], "tag_rule": rule, "top1": row["top1"] / 100,
                         "top5": row["top5"] / 100, "eval_img_size": int(row["img_size"]),
                         "crop_pct": pd.to_numeric(row.get("crop_pct"), errors="coerce"),
                         "best_tag": best["tag"], "best_top1": best["top1"] / 100, "n_tags": g["tag"].nunique(),
                         "pretrain": pretrain.get(arch, pd.NA)})
    return pd.DataFrame(rows, columns=list(TOP1_COLUMNS))


@lru_cache(maxsize=1)
def top1_table() -> pd.DataFrame:
    """The shipped table (:data:`TOP1_TABLE`), one row per architecture and evaluated image size."""
    return pd.read_csv(TOP1_TABLE, dtype={"tag": str, "best_tag": str, "pretrain": str},
                       keep_default_na=False, na_values={"top1": [""], "top5": [""], "crop_pct": [""],
                                                        "pretrain": [""]})


def join_top1(frame: pd.DataFrame, table: pd.DataFrame | None = None, same_size: bool = True) -> pd.DataFrame:
    """``frame`` (``model``: timm architecture names, a tag after a dot dropped; ``input_size``) with
    ``top1``, ``top5`` (fractions), ``top1_tag`` and ``top1_eval_img_size`` of the resolved tag
    (:func:`resolve_tags`). ``same_size`` (default): only the top-1 evaluated at the row's ``input_size``
    (NaN where timm published none at that size: a network run at another resolution is not that
    accuracy); ``same_size=False``: the evaluation at the nearest size (ties: the smaller)."""
    if "model" not in frame.columns or "input_size" not in frame.columns:
        raise DatasetError("join_top1 needs 'model' (timm architecture names) and 'input_size' columns")
    t = top1_table() if table is None else table
    arch = frame["model"].astype(str).map(lambda m: split_name(m)[0]).to_numpy()
    size = pd.to_numeric(frame["input_size"], errors="coerce").to_numpy(float)
    picked = np.full(len(frame), -1)
    pairs = pd.DataFrame({"a": arch, "s": size})
    wanted = t[t["model"].isin(set(arch))]   # group only the architectures asked for, each (arch, size) once
    by_arch = {a: (g.index.to_numpy(), g["eval_img_size"].to_numpy(float)) for a, g in wanted.groupby("model")}
    for (a, s), rows in pairs.groupby(["a", "s"], sort=False, dropna=False).indices.items():
        if a not in by_arch:
            continue
        index, sizes = by_arch[a]
        d = np.abs(sizes - s)
        j = int(np.lexsort((sizes, d))[0])
        if d[j] == 0 or not same_size:
            picked[rows] = index[j]
    hit = picked >= 0
    out = frame.copy()
    for col, dst in (("top1", "top1"), ("top5", "top5"), ("eval_img_size", "top1_eval_img_size")):
        vals = np.full(len(frame), np.nan)
        vals[hit] = t.loc[picked[hit], col].to_numpy(float)
        out[dst] = vals
    tags = np.full(len(frame), None, dtype=object)
    tags[hit] = t.loc[picked[hit], "tag"].to_numpy()
    out["top1_tag"] = pd.array(tags, dtype="string")
    return out


def coverage(frame: pd.DataFrame) -> float:
    """Share of ``frame``'s distinct models that have a top-1 after :func:`join_top1` (0-1)."""
    models = frame.drop_duplicates("model")
    return float(np.isfinite(models["top1"].to_numpy(float)).mean()) if len(models) else float("nan")
