"""Importer for timm's GPU inference benchmark of the ResNet family (real third-party latency data).

The table (``carb/data/timm-gpu-bench.csv``, an unmodified copy of the project's
``data/timm-gpu-bench/resnet_family.csv``; Apache-2.0, attribution in ``carb/data/timm-gpu-bench.md``,
license text in ``carb/data/LICENSE-timm-gpu-bench``) holds one row per GPU x precision x memory layout
x torch version x compile mode x model x image size, each at one large batch size. It has latency only.

Mapping onto :mod:`carb.data.schema` columns:

- ``device_name`` = ``gpu``; ``device_kind`` = ``'import'``; ``torch_version`` = ``torch``; ``status`` = ok;
  ``n_warmup`` = 10 (the benchmark's warm-up count).
- ``latency_ms`` = ``step_time_ms`` (milliseconds per batch, as the schema's ``latency_ms``).
- ``batch_size``; ``input_size`` = ``img_size``; ``precision``: amp_fp16 -> fp16, amp_bf16 -> bf16,
  bf16 -> bf16 (amp_* is autocast with fp32 weights; the raw name is kept in ``timm_precision``).
- ``block`` / ``depth`` from ``plain_resnet_block`` / ``plain_resnet_depth``; ``bottleneck_w2`` (wide
  ResNets) maps to ``bottleneck`` with ``inner_mult`` = 2 (timm doubles only the inner 3x3 width; the raw
  tag stays in ``timm_block``). Plain ResNets also get ``stages``, ``n_conv`` (depth - 1 + downsample
  convs: 3 for basic, 4 for bottleneck) and ``width_mult`` = 1. ``early_downsample`` is True for every row (all are ImageNet-stem models).
- ``params`` = round(``param_count_M`` * 1e6) (timm rounds to 10k parameters);
  ``param_size_MB`` = params x bytes per stored weight (4 under autocast, 2 for bf16) / 2**20.
- ``flops`` = ``gmacs_per_image`` * 1e9 * ``batch_size``: fvcore counts one flop per multiply-add, which is
  exactly timm's GMACs, so this is the schema's fvcore-convention count for one forward of the batch;
  ``flops_per_param_log`` = log10(flops / params).
- Everything else (energy_J, peak_memory_MB, runtime telemetry, activation sizes: timm's
  ``activations_M_per_image`` counts conv outputs only, unlike the schema's leaf-module bytes) is NaN/NA,
  with the reason in ``missing_reason``. timm's own columns are kept at the end (``model``,
  ``timm_precision``, ``compile``, ``memory_layout``, ``cuda_version``, ``timm_block``,
  ``samples_per_sec``, ``latency_per_image_ms``, ``gmacs_per_image``, ``param_count_M``,
  ``activations_M_per_image``, ``source_file``, ``file_commit``).

Choice of rows and key: by default ALL 117 models are kept (``plain_only=False``), because the
cross-device analysis needs no architecture knobs; non-plain models have ``block``/``depth`` NA, so such
a frame does not pass :func:`carb.data.schema.validate_dataset`. With ``plain_only=True`` only the 9 plain
torchvision-style ResNets remain and the frame is schema-validated. ``config_id`` is
:func:`timm_config_id`: a hash of model, image size, batch size, timm precision, compile mode and
memory layout (not of the GPU or the torch version), so the same benchmark configuration has the same
id on every GPU, and the join of two GPUs only pairs identical batch sizes. One device may hold the
same configuration under several torch versions; ``torch='latest'`` (default) keeps the newest per GPU,
so ids are unique per device.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from carb.data.schema import COLUMNS, conform, validate_dataset
from carb.data.units import read_numbers
from carb.design.arch import BYTES_PER_ELEMENT
from carb.design.identity import RESNET_MARKER, resnet_knobs
from carb.errors import ConfigError, DatasetError
from carb.resources import DATA_DIR

#: The shipped copy of the table.
TIMM_DATA = DATA_DIR / "timm-gpu-bench.csv"

#: timm precision name -> schema precision.
PRECISIONS: dict[str, str] = {"amp_fp16": "fp16", "amp_bf16": "bf16", "bf16": "bf16"}
#: Bytes per stored weight under each timm precision (autocast keeps fp32 weights).
#: Precision of the stored weights per timm precision (autocast keeps fp32 weights).
_WEIGHT_PRECISION: dict[str, str] = {"amp_fp16": "fp32", "amp_bf16": "fp32", "bf16": "bf16"}
#: Accepted spellings of the compile mode -> the table's value.
COMPILE_MODES: dict[str, str] = {"eager": "eager", "inductor": "torch.compile(inductor)",
                                 "compile": "torch.compile(inductor)",
                                 "torch.compile": "torch.compile(inductor)",
                                 "torch.compile(inductor)": "torch.compile(inductor)"}
LAYOUTS: tuple[str, ...] = ("nchw", "nhwc")
#: Blocks per stage of the plain ResNets in the table (timm / torchvision definitions).
_STAGES: dict[tuple[str, int], str] = {
    ("basic", 18): "2-2-2-2", ("basic", 34): "3-4-6-3",
    ("bottleneck", 26): "2-2-2-2", ("bottleneck", 50): "3-4-6-3", ("bottleneck", 101): "3-4-23-3",
    ("bottleneck", 152): "3-8-36-3", ("bottleneck", 200): "3-24-36-3",
}
_DOWNSAMPLE_CONVS = {"basic": 3, "bottleneck": 4}
_REQUIRED = ("gpu", "precision", "memory_layout", "torch", "cuda", "compile", "model", "img_size",
             "batch_size", "step_time_ms", "param_count_M", "gmacs_per_image", "plain_resnet_block",
             "plain_resnet_depth")
_MISSING_ALL = ("energy_J, peak_memory_MB: not in the timm benchmark (latency only); avg_sm_util, "
                "avg_mem_util, gpu_temp_C, kernel_launches: not reported by timm; total_activation_MB, "
                "max_activation_MB, compute_intensity: timm counts conv-output activations only "
                "(activations_M_per_image kept)")
_MISSING_NONPLAIN = "block, depth, stages, n_conv, width_mult: not a plain ResNet (see model)"


def load_timm_table(path: str | Path | None = None) -> pd.DataFrame:
    """Read the raw timm table (default: the shipped copy :data:`TIMM_DATA`).

    Raises :class:`DatasetError` when the file is missing or lacks a required column."""
    p = Path(path) if path else TIMM_DATA
    if not p.exists():
        raise DatasetError(f"timm table {str(p)!r} does not exist (timm.path: give the resnet_family.csv "
                           f"file, or null for the shipped copy)")
    try:
        raw = pd.read_csv(p, dtype={"torch": str, "cuda": str, "plain_resnet_block": str})
    except pd.errors.EmptyDataError:
        raise DatasetError(f"importer.path: timm table {str(p)!r} is empty (no header, no rows); give timm's "
                           f"resnet_family.csv, or null for the shipped copy") from None
    except (pd.errors.ParserError, UnicodeDecodeError, OSError) as e:
        msg = " ".join(str(e).split()) or type(e).__name__
        raise DatasetError(f"importer.path: timm table {str(p)!r} cannot be read as CSV ({msg})") from None
    missing = [c for c in _REQUIRED if c not in raw.columns]
    if missing:
        raise DatasetError(f"timm table {str(p)!r}: missing column(s) {missing}")
    return raw


def timm_config_id(model: str, img_size: int, batch_size: int, precision: str, compile: str,
                   memory_layout: str) -> str:
    """Stable id of one benchmark configuration, identical on every GPU: ``'timm-'`` + 12 hex digits
    of the SHA-1 of (model, image size, batch size, timm precision, compile mode, memory layout)."""
    key = json.dumps([str(model), int(img_size), int(batch_size), str(precision), str(compile),
                      str(memory_layout)], separators=(",", ":"))
    return "timm-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in str(v).split("."))


def timm_combinations(raw: pd.DataFrame | None = None) -> pd.DataFrame:
    """Row counts per gpu x precision x memory_layout x compile x torch in the raw table."""
    raw = load_timm_table() if raw is None else raw
    keys = ["gpu", "precision", "memory_layout", "compile", "torch"]
    return raw.groupby(keys).size().rename("rows").reset_index()


def _norm_compile(compile: str | None, prefix: str = "timm") -> str | None:
    if compile is None:
        return None
    c = COMPILE_MODES.get(str(compile).strip().lower())
    if c is None:
        raise ConfigError(f"{prefix}.compile={compile!r} is not a compile mode; allowed: eager, inductor")
    return c


def _select(raw: pd.DataFrame, gpu: str | None, precision: str | None, compile: str | None,
            memory_layout: str | None, torch: str | None, field: str, prefix: str = "timm") -> pd.DataFrame:
    """Filter the raw table, raising one-line :class:`ConfigError` naming the allowed values
    (``<prefix>.precision`` etc.; ``field`` for the GPU)."""
    sel = raw
    if gpu is not None:
        gpus = sorted(raw["gpu"].unique())
        if gpu not in gpus:
            raise ConfigError(f"{field}={gpu!r} is not in the timm table; allowed: {gpus}")
        sel = sel[sel["gpu"] == gpu]
    if precision is not None:
        if precision not in PRECISIONS:
            raise ConfigError(f"{prefix}.precision={precision!r} is not a timm precision; allowed: "
                              f"{list(PRECISIONS)}")
        sel = sel[sel["precision"] == precision]
    comp = _norm_compile(compile, prefix)
    if comp is not None:
        sel = sel[sel["compile"] == comp]
    if memory_layout is not None:
        if memory_layout not in LAYOUTS:
            raise ConfigError(f"{prefix}.memory_layout={memory_layout!r}; allowed: {list(LAYOUTS)}")
        sel = sel[sel["memory_layout"] == memory_layout]
    if torch not in (None, "all", "latest"):
        sel = sel[sel["torch"] == str(torch)]
    if sel.empty:
        have = timm_combinations(raw[raw["gpu"] == gpu] if gpu is not None else raw)
        combos = sorted({f"{r.precision}/{r.memory_layout}/{r.compile}/torch {r.torch}"
                         for r in have.itertuples()})
        raise ConfigError(f"{field}={gpu!r}: no rows for precision={precision}, compile={compile}, "
                          f"memory_layout={memory_layout}, torch={torch}; available: {combos}")
    if torch == "latest":
        groups = ["gpu", "precision", "memory_layout", "compile"]
        newest = sel.groupby(groups)["torch"].transform(lambda s: max(s.unique(), key=_version_key))
        sel = sel[sel["torch"] == newest]
    return sel


def _map_rows(sel: pd.DataFrame) -> pd.DataFrame:
    """Map selected raw rows onto schema columns (plus timm's own columns at the end)."""
    n = len(sel)
    idx = pd.RangeIndex(n)
    s = sel.reset_index(drop=True)
    tag = s["plain_resnet_block"].astype("string")
    plain = tag.notna().to_numpy()
    wide = (tag == "bottleneck_w2").fillna(False).to_numpy()
    block = tag.replace({"bottleneck_w2": "bottleneck"})
    depth = pd.array(np.where(plain, s["plain_resnet_depth"].fillna(0).round(), np.nan), dtype="Int64")
    depth = pd.Series(depth, index=idx).where(plain, pd.NA)
    stages = pd.Series([_STAGES.get((b, int(d))) if ok else None
                        for b, d, ok in zip(block.fillna(""), depth.fillna(0), plain)],
                       index=idx, dtype="string")
    n_conv = pd.Series([int(d) - 1 + _DOWNSAMPLE_CONVS[b] if ok else pd.NA
                        for b, d, ok in zip(block.fillna("basic"), depth.fillna(0), plain)],
                       index=idx, dtype="Int64")
    params = np.round(s["param_count_M"].to_numpy(float) * 1e6).astype("int64")
    flops = s["gmacs_per_image"].to_numpy(float) * 1e9 * s["batch_size"].to_numpy(float)
    weight_bytes = s["precision"].map(_WEIGHT_PRECISION).map(BYTES_PER_ELEMENT).to_numpy(float)
    reasons = [_MISSING_ALL + ("" if ok else "; " + _MISSING_NONPLAIN) for ok in plain]
    out = pd.DataFrame({
        "config_id": [timm_config_id(*r) for r in zip(s["model"], s["img_size"], s["batch_size"],
                                                      s["precision"], s["compile"], s["memory_layout"])],
        "device_name": s["gpu"].astype("string"),
        "device_kind": pd.Series(["import"] * n, index=idx, dtype="string"),
        "torch_version": s["torch"].astype("string"),
        "status": pd.Series(["ok"] * n, index=idx, dtype="string"),
        "missing_reason": pd.Series(reasons, index=idx, dtype="string"),
        **resnet_knobs(block=block, depth=depth, width_mult=np.where(plain, 1.0, np.nan),
                       inner_mult=np.where(wide, 2.0, 1.0), early_downsample=np.ones(n, dtype=bool), stages=stages),
        "input_size": s["img_size"].astype("int64"),
        "batch_size": s["batch_size"].astype("int64"),
        "precision": s["precision"].map(PRECISIONS).astype("string"),
        "flops": flops,
        "params": params,
        "param_size_MB": params * weight_bytes / 2**20,
        "flops_per_param_log": np.log10(flops / params),
        "n_conv": n_conv,
        "latency_ms": s["step_time_ms"].astype(float),
        "n_warmup": np.full(n, 10.0),
    }, index=idx)
    out = conform(out, fill_missing=COLUMNS)
    extras = pd.DataFrame({
        "model": s["model"].astype("string"),
        "timm_precision": s["precision"].astype("string"),
        "compile": s["compile"].astype("string"),
        "memory_layout": s["memory_layout"].astype("string"),
        "cuda_version": s["cuda"].astype("string"),
        "timm_block": tag,
        **{c: s[c].astype(float) for c in ("samples_per_sec", "latency_per_image_ms", "gmacs_per_image",
                                           "param_count_M", "activations_M_per_image") if c in s},
        **{c: s[c].astype("string") for c in ("source_file", "file_commit") if c in s},
    }, index=idx)
    return pd.concat([out, extras], axis=1)


def import_timm(raw: pd.DataFrame | str | Path | None = None, gpu: str | None = None,
                precision: str | None = None, compile: str | None = None,
                memory_layout: str | None = "nchw", torch: str | None = "latest",
                plain_only: bool = False, field: str = "timm.gpu") -> pd.DataFrame:
    """Import (a selection of) the timm table as a schema-conformed frame, one row per configuration.

    ``raw``: the raw frame, a path to it, or None for the shipped copy. ``gpu``, ``precision`` (timm
    names: amp_fp16 | amp_bf16 | bf16), ``compile`` (eager | inductor), ``memory_layout`` (nchw | nhwc):
    filters, None = all. ``torch``: 'latest' (newest torch per GPU and setting), 'all', or a version.
    ``plain_only``: keep only plain ResNets and validate against the schema (see the module docstring).
    Raises :class:`ConfigError` (naming ``field`` for the GPU) when the selection is empty.
    """
    table = raw if isinstance(raw, pd.DataFrame) else load_timm_table(raw)
    sel = _select(table, gpu, precision, compile, memory_layout, torch, field)
    out = _map_rows(sel)
    if plain_only:
        out = out[out[RESNET_MARKER].notna()].reset_index(drop=True)
        if out.empty:
            raise ConfigError(f"{field}={gpu!r}: the selection holds no plain ResNet rows "
                              f"(timm.plain_only=true)")
        out = validate_dataset(out, source="timm import")
    return out


def timm_pair(gpu_a: str, gpu_b: str, precision: str = "amp_fp16", compile: str = "eager",
              memory_layout: str = "nchw", torch: str = "latest", plain_only: bool = False,
              path: str | Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two imported frames, one per GPU, with the same precision, compile mode and memory layout
    (join them on ``config_id``). Raises :class:`ConfigError` naming ``timm.gpu_a`` / ``timm.gpu_b``."""
    if gpu_a == gpu_b:
        raise ConfigError(f"timm.gpu_b={gpu_b!r} equals timm.gpu_a; give two different GPUs")
    raw = load_timm_table(path)
    a = import_timm(raw, gpu_a, precision, compile, memory_layout, torch, plain_only, field="timm.gpu_a")
    b = import_timm(raw, gpu_b, precision, compile, memory_layout, torch, plain_only, field="timm.gpu_b")
    return a, b


def timm_overlaps(gpu_a: str, gpu_b: str, path: str | Path | None = None) -> pd.DataFrame:
    """For each precision x compile x layout both GPUs have (newest torch per GPU): rows on each GPU
    and the number of shared ``config_id`` values, most shared first."""
    raw = load_timm_table(path)
    rows = []
    for (prec, comp, lay), _ in raw.groupby(["precision", "compile", "memory_layout"]):
        try:
            a = import_timm(raw, gpu_a, prec, comp, lay, field="timm.gpu_a")
            b = import_timm(raw, gpu_b, prec, comp, lay, field="timm.gpu_b")
        except ConfigError:
            continue
        rows.append({"precision": prec, "compile": comp, "memory_layout": lay,
                     "torch_a": ",".join(sorted(a["torch_version"].unique())),
                     "torch_b": ",".join(sorted(b["torch_version"].unique())),
                     "n_a": len(a), "n_b": len(b),
                     "n_common": len(set(a["config_id"]) & set(b["config_id"]))})
    cols = ["precision", "compile", "memory_layout", "torch_a", "torch_b", "n_a", "n_b", "n_common"]
    return pd.DataFrame(rows, columns=cols).sort_values("n_common", ascending=False, ignore_index=True)


#: Columns of the timm rows that name the measuring protocol: rows of one configuration on one GPU must
#: agree on them to count as repeats (carb.data.importers.common.aggregate).
TIMM_SETTINGS: tuple[str, ...] = ("timm_precision", "compile", "memory_layout", "torch_version")


def timm_source_rows(path: str | Path | None = None, gpu: str | None = None, precision: str | None = None,
                     compile: str | None = "eager", memory_layout: str | None = "nchw",
                     torch: str | None = "latest") -> pd.DataFrame:
    """Source rows (:mod:`carb.data.importers.common`) of a selection of the timm table for ``carb-import
    importer=timm``: every model, mappable or not (the mapping lists the others with the reason).

    ``latency_ms`` = ``step_time_ms`` (per batch); ``precision`` from timm's (amp_fp16 -> fp16, amp_bf16
    and bf16 -> bf16; the raw name stays in ``timm_precision``); no energy or memory (``memory_kind`` NA);
    ``n_warmup`` = 10. Filters as :func:`import_timm`, errors naming ``importer.<filter>``. Under amp_* the
    weights stay fp32 while the static features count them at the compute precision (CARB's own fp16/bf16
    rows cast the weights); ``timm_precision`` keeps the difference visible."""
    p = Path(path) if path else TIMM_DATA
    raw = load_timm_table(p)
    sel = _select(raw, gpu, precision, compile, memory_layout, torch, "importer.gpu", prefix="importer")
    s = sel.reset_index()
    n = len(s)
    where = [f"{p.name}:{int(i) + 2}" for i in s["index"]]
    num = {c: read_numbers(s[c], f, c, where, where="importer.path") for c, f in
           (("img_size", "input_size"), ("batch_size", "batch_size"), ("step_time_ms", "latency_ms"))}
    rows = pd.DataFrame({
        "source_row": where,
        "model": s["model"].astype("string"),
        "input_size": num["img_size"],
        "batch_size": num["batch_size"],
        "precision": s["precision"].map(PRECISIONS).astype("string"),
        "device_name": s["gpu"].astype("string"),
        "torch_version": s["torch"].astype("string"),
        "latency_ms": num["step_time_ms"],
        "n_warmup": np.full(n, 10.0),
        "memory_kind": pd.Series(pd.NA, index=s.index, dtype="string"),
        "source": pd.Series([f"timm:{p.name}"] * n, index=s.index, dtype="string"),
        "timm_precision": s["precision"].astype("string"),
        "compile": s["compile"].astype("string"),
        "memory_layout": s["memory_layout"].astype("string"),
        "cuda_version": s["cuda"].astype("string"),
        **{c: pd.to_numeric(s[c], errors="coerce") for c in ("samples_per_sec", "gmacs_per_image", "param_count_M")
           if c in s},
        **{c: s[c].astype("string") for c in ("source_file", "file_commit") if c in s},
    })
    return rows
