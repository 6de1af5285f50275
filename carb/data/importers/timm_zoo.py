"""Importer for timm's published inference benchmark files, every model (the model zoo on 4 GPUs and a CPU).

The source files are timm's ``results/benchmark-infer-*.csv`` (Apache-2.0, Copyright 2019 Ross Wightman;
attribution and license beside the shipped table: ``carb/data/timm-zoo-bench.md`` and
``carb/data/LICENSE-timm-gpu-bench``). Unlike :mod:`carb.data.importers.timm` (the tidied ResNet subset,
mapped to ResNet knobs), this module keeps every model as a *zoo row*: an identity key and the file's own
published features, no knobs.

One row per (file, model, image size). Columns (:data:`ZOO_COLUMNS`):

- identity: ``model`` (timm architecture name, no pretrained tag), ``family`` (:func:`model_family`:
  the leading letters of the name), ``input_size``, ``batch_size``, ``precision`` (CARB name: the file's
  ``amp`` -> fp16, ``amp_bf16`` and ``bf16`` -> bf16, ``fp32`` -> fp32; the file's name in
  ``timm_precision``: amp_fp16 | amp_bf16 | bf16 | fp32), ``device_name`` (from the file name),
  ``device_kind`` (gpu | cpu), ``memory_layout`` (nchw | nhwc), ``compile`` (eager | dynamo),
  ``torch_version``, ``cuda_version`` (NA on the CPU); ``zoo_id`` (:func:`zoo_id`, the same for the
  same configuration on every device);
- target: ``latency_ms`` = ``infer_step_time`` (ms per batch, the README's definition; it equals
  1000 x batch / samples_per_sec within 0.3 % on the GPU files and 2 % on the CPU files), and
  ``samples_per_sec``;
- published features: ``params`` (= ``param_count`` x 1e6; timm rounds to 10k), ``gmacs_per_image``
  (``infer_gmacs``), ``macts_M_per_image`` (``infer_macts``, millions of activations per image; NaN
  where the file has none: one CPU file), each NaN when the file leaves it empty;
- provenance: ``source_file``, ``source_row`` (``file:line``), ``main`` (the main set, :func:`main_set`),
  ``missing_reason`` (why a value is NaN: a model the file lists without a measurement, e.g. one that did
  not fit, keeps its row with NaN latency; a feature the file does not publish).

Bad input is one :class:`~carb.errors.DatasetError` line naming the file and the problem (a 0-byte or
header-only file, a missing column, a file name that is not a timm benchmark name, a non-numeric value).
"""
from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from carb.errors import DatasetError
from carb.resources import DATA_DIR

#: The shipped imported table (every file of the snapshot) and its provenance.
ZOO_BENCH = DATA_DIR / "timm-zoo-bench.parquet"
ZOO_BENCH_PROVENANCE = DATA_DIR / "timm-zoo-bench.provenance.json"
#: Module census per architecture (``scripts/data/timm_zoo.py --census``): counts and parameters by kind.
ZOO_CENSUS = DATA_DIR / "timm-zoo-census.csv"
#: Layer-table features per (architecture, input size) (``scripts/data/zoo_trace_features.py``).
ZOO_TRACE = DATA_DIR / "timm-zoo-trace.parquet"

#: timm's file-name precision -> (timm precision, CARB precision).
FILE_PRECISIONS: dict[str, tuple[str, str]] = {"amp": ("amp_fp16", "fp16"), "amp_bf16": ("amp_bf16", "bf16"),
                                               "bf16": ("bf16", "bf16"), "fp32": ("fp32", "fp32")}
#: timm's file-name device -> (device name as in the ResNet subset / gpu_specs.csv, device kind).
FILE_DEVICES: dict[str, tuple[str, str]] = {
    "rtx3090": ("RTX 3090", "gpu"), "rtx4090": ("RTX 4090", "gpu"), "4090": ("RTX 4090", "gpu"),
    "5090": ("RTX 5090", "gpu"), "pro6000maxq": ("RTX PRO 6000 Blackwell Max-Q", "gpu"),
    "i9_10940x": ("Intel Core i9-10940X", "cpu")}
_NAME = re.compile(r"^benchmark-infer-(?P<prec>amp_bf16|amp|bf16|fp32)-(?P<layout>nchw|nhwc)-pt(?P<torch>\d+)"
                   r"-(?P<cuda>cu\d+|cpu)-(?P<dev>[a-z0-9_]+?)(?P<dynamo>-dynamo)?\.csv$")
#: Columns every benchmark file must have (read by name; the order differs between files).
REQUIRED = ("model", "infer_img_size", "infer_batch_size", "infer_samples_per_sec", "infer_step_time",
            "param_count")
ZOO_COLUMNS: tuple[str, ...] = (
    "zoo_id", "model", "family", "input_size", "batch_size", "precision", "timm_precision", "device_name",
    "device_kind", "memory_layout", "compile", "torch_version", "cuda_version", "latency_ms",
    "samples_per_sec", "params", "gmacs_per_image", "macts_M_per_image", "source_file", "source_row", "main",
    "missing_reason")


def model_family(name: str) -> str:
    """The family of a timm model name: its leading letters (``resnet50d`` -> ``resnet``,
    ``tf_efficientnet_b0`` -> ``tf``, ``vit_base_patch16_224`` -> ``vit``), as Hidden Joules' split
    (the issue's reference numbers) does; the pretrained tag is dropped first."""
    m = re.match(r"[a-z]+", str(name).split(".")[0].lower())
    return m.group(0) if m else str(name)


def zoo_id(model: str, input_size: int, batch_size: int, timm_precision: str, compile: str,
           memory_layout: str) -> str:
    """Stable id of one benchmark configuration, the same on every device: ``'zoo-'`` + 12 hex digits of
    the SHA-1 of (model, image size, batch size, timm precision, compile mode, memory layout)."""
    key = json.dumps([str(model), int(input_size), int(batch_size), str(timm_precision), str(compile),
                      str(memory_layout)], separators=(",", ":"))
    return "zoo-" + hashlib.sha1(key.encode()).hexdigest()[:12]


def parse_file_name(name: str) -> dict[str, str | None]:
    """The settings a timm benchmark file name encodes: ``timm_precision``, ``precision``,
    ``memory_layout``, ``torch_version`` ('2.9.1' from 'pt291', '1.13' from 'pt113'), ``cuda_version`` ('12.8' from 'cu128';
    None on the CPU), ``device_name``, ``device_kind``, ``compile`` (eager | dynamo).

    Raises :class:`DatasetError` naming the file when the name is not a timm benchmark name."""
    m = _NAME.match(Path(name).name)
    if m is None or m["dev"] not in FILE_DEVICES:
        raise DatasetError(f"timm benchmark file {Path(name).name!r}: not a timm benchmark name; allowed: "
                           f"benchmark-infer-{{{'|'.join(FILE_PRECISIONS)}}}-{{nchw|nhwc}}-pt<ver>-"
                           f"{{cu<ver>|cpu}}-{{{'|'.join(FILE_DEVICES)}}}[-dynamo].csv")
    tp, prec = FILE_PRECISIONS[m["prec"]]
    dev, kind = FILE_DEVICES[m["dev"]]
    t = m["torch"]
    cuda = None if m["cuda"] == "cpu" else f"{m['cuda'][2:-1]}.{m['cuda'][-1]}"
    return {"timm_precision": tp, "precision": prec, "memory_layout": m["layout"],
            "torch_version": f"1.{t[1:]}" if t[0] == "1" else f"{t[0]}.{t[1:-1]}.{t[-1]}",
            "cuda_version": cuda, "device_name": dev, "device_kind": kind,
            "compile": "dynamo" if m["dynamo"] else "eager"}


def _read_csv(p: Path) -> pd.DataFrame:
    """The raw file; a one-line :class:`DatasetError` when it is missing, empty, header-only or lacks
    a required column."""
    if not p.is_file():
        raise DatasetError(f"timm benchmark file {str(p)!r} does not exist")
    try:
        raw = pd.read_csv(p, thousands=",")
    except pd.errors.EmptyDataError:
        raise DatasetError(f"timm benchmark file {str(p)!r} is empty (0 bytes); give a timm "
                           f"benchmark-infer-*.csv with columns {list(REQUIRED)}") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DatasetError(f"timm benchmark file {str(p)!r} is not a CSV: {str(e).splitlines()[0]}") from None
    missing = [c for c in REQUIRED if c not in raw.columns]
    if missing:
        raise DatasetError(f"timm benchmark file {str(p)!r}: missing column(s) {missing}; a timm benchmark "
                           f"file has {list(REQUIRED)} (+ infer_gmacs, infer_macts)")
    if raw.empty:
        raise DatasetError(f"timm benchmark file {str(p)!r} has a header but no rows")
    return raw


def _numbers(raw: pd.DataFrame, col: str, p: Path, required: bool) -> np.ndarray:
    """``raw[col]`` as floats (NaN where the file has none); a one-line :class:`DatasetError` naming the
    first line whose value is not a number (empty cells are allowed only where ``required`` is False)."""
    if col not in raw:
        return np.full(len(raw), np.nan)
    vals = pd.to_numeric(raw[col], errors="coerce")
    bad = vals.isna() & (raw[col].notna() | required)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise DatasetError(f"timm benchmark file {p.name}:{i + 2}: {col}={raw[col].iloc[i]!r} is not a number")
    return vals.to_numpy(float)


def _reasons(num: dict[str, np.ndarray]) -> list[str | None]:
    """Per row, why a value is NaN (None where nothing is): an unmeasured model (empty latency cells:
    timm lists the model but it did not run, e.g. out of memory) or an unpublished feature."""
    out = []
    for i in range(len(num["infer_img_size"])):
        why = []
        if not np.isfinite(num["infer_step_time"][i]):
            why.append("latency_ms, samples_per_sec, batch_size: not measured (empty cells in the file)")
        for c, name in (("infer_gmacs", "gmacs_per_image"), ("infer_macts", "macts_M_per_image"),
                        ("param_count", "params")):
            if not np.isfinite(num[c][i]):
                why.append(f"{name}: not published in the file")
        out.append("; ".join(why) or None)
    return out


def read_benchmark_file(path: str | Path) -> pd.DataFrame:
    """One timm benchmark file as zoo rows (:data:`ZOO_COLUMNS`, ``main`` False; see the module docstring).

    A value that is not a number, or a latency, batch or image size that is not positive, is refused
    with one line naming the file line; empty cells become NaN with ``missing_reason``."""
    p = Path(path)
    meta = parse_file_name(p.name)
    raw = _read_csv(p)
    n = len(raw)
    num = {c: _numbers(raw, c, p, c == "infer_img_size") for c in
           ("infer_img_size", "infer_batch_size", "infer_samples_per_sec", "infer_step_time", "param_count",
            "infer_gmacs", "infer_macts")}
    for c in ("infer_step_time", "infer_batch_size", "infer_img_size"):
        if (num[c] <= 0).any():
            i = int(np.flatnonzero(num[c] <= 0)[0])
            raise DatasetError(f"timm benchmark file {p.name}:{i + 2}: {c}={num[c][i]} must be > 0")
    model = raw["model"].astype(str).str.strip()
    out = pd.DataFrame({
        "model": model, "family": model.map(model_family),
        "input_size": num["infer_img_size"].astype("int64"),
        "batch_size": pd.array(np.round(num["infer_batch_size"]), dtype="Int64"),
        **{k: [v] * n for k, v in meta.items()},
        "latency_ms": num["infer_step_time"], "samples_per_sec": num["infer_samples_per_sec"],
        "params": np.round(num["param_count"] * 1e6), "gmacs_per_image": num["infer_gmacs"],
        "macts_M_per_image": num["infer_macts"], "source_file": [p.name] * n,
        "source_row": [f"{p.name}:{i + 2}" for i in range(n)], "main": np.zeros(n, dtype=bool),
        "missing_reason": _reasons(num)})
    out["zoo_id"] = [zoo_id(*r) for r in zip(out["model"], out["input_size"], out["batch_size"].fillna(0),
                                             out["timm_precision"], out["compile"], out["memory_layout"])]
    return _typed(out[list(ZOO_COLUMNS)])


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    """String columns as pandas strings (NA where missing), numbers as floats / ints, ``main`` bool."""
    out = df.copy()
    for c in ("zoo_id", "model", "family", "precision", "timm_precision", "device_name", "device_kind",
              "memory_layout", "compile", "torch_version", "cuda_version", "source_file", "source_row",
              "missing_reason"):
        out[c] = out[c].astype("string")
    out["main"] = out["main"].astype(bool)
    return out.reset_index(drop=True)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else 0 for x in str(v).split("."))


def main_set(table: pd.DataFrame) -> np.ndarray:
    """The main set's mask (n,): per device, the newest torch of the eager nchw autocast-fp16 files on a
    GPU (timm's reference setting; the dynamo and nhwc files are kept beside it), and on the CPU (only
    torch.compile files exist there) the newest torch of its fp32 nchw dynamo files."""
    gpu = (table["device_kind"] == "gpu") & (table["compile"] == "eager") & (table["timm_precision"] == "amp_fp16")
    cpu = (table["device_kind"] == "cpu") & (table["timm_precision"] == "fp32")
    cand = ((gpu | cpu) & (table["memory_layout"] == "nchw")).to_numpy()
    keep = np.zeros(len(table), dtype=bool)
    for _, idx in table[cand].groupby("device_name").groups.items():
        versions = table.loc[idx, "torch_version"]
        newest = max(versions.unique(), key=_version_key)
        keep[np.asarray(idx)[(versions == newest).to_numpy()]] = True
    return keep


def import_benchmark_files(paths: Iterable[str | Path]) -> pd.DataFrame:
    """All ``paths`` (timm benchmark files) as one zoo table with ``main`` set (:func:`main_set`).
    Raises :class:`DatasetError` when ``paths`` is empty or a file is bad (one line, naming it)."""
    files = sorted(Path(p) for p in paths)
    if not files:
        raise DatasetError("timm zoo import: no benchmark-infer-*.csv files given")
    table = _typed(pd.concat([read_benchmark_file(p) for p in files], ignore_index=True))
    table["main"] = main_set(table)
    return table


def benchmark_files(folder: str | Path) -> list[Path]:
    """The ``benchmark-infer-*.csv`` files of ``folder`` (sorted); :class:`DatasetError` when none."""
    d = Path(folder)
    files = sorted(d.glob("benchmark-infer-*.csv")) if d.is_dir() else []
    if not files:
        raise DatasetError(f"timm zoo import: {str(d)!r} holds no benchmark-infer-*.csv files")
    return files


def load_zoo_bench(path: str | Path | None = None, main_only: bool = True) -> pd.DataFrame:
    """The shipped imported table (:data:`ZOO_BENCH`, or ``path``), by default only the main set."""
    p = Path(path) if path else ZOO_BENCH
    if not p.is_file():
        raise DatasetError(f"timm zoo table {str(p)!r} does not exist (scripts/data/timm_zoo.py builds it)")
    table = pd.read_parquet(p)
    missing = [c for c in ZOO_COLUMNS if c not in table.columns]
    if missing:
        raise DatasetError(f"timm zoo table {str(p)!r}: missing column(s) {missing}")
    return table[table["main"]].reset_index(drop=True) if main_only else table


def with_census(frame: pd.DataFrame, path: str | Path | None = None) -> pd.DataFrame:
    """``frame`` with the module census of its ``model`` (:data:`ZOO_CENSUS`, or ``path``) joined on:
    ``n_<kind>`` / ``params_<kind>`` columns, NaN for a model without a census (not built by timm).
    ``frame`` unchanged when the census file does not exist."""
    p = Path(path) if path else ZOO_CENSUS
    if not p.is_file():
        return frame
    cen = pd.read_csv(p, keep_default_na=False, na_values={c: [""] for c in ("n_leaf",)})
    cen = cen[cen["census_error"].astype(str) == ""].drop(columns="census_error")
    return frame.merge(cen, on="model", how="left")


def _published_graph(frame: pd.DataFrame, plain: pd.DataFrame, fused: pd.DataFrame) -> pd.Series:
    """Per ``source_file`` of ``frame``: whether the file was run on the reparameterised graph (timm's
    ``benchmark.py --reparam``), read from its numbers: over the rows whose model folds and whose plain
    and folded parameter counts differ at the file's rounding (10k), the file is reparameterised when its
    published ``params`` match the folded count more often than the plain one. A file without such a row:
    False."""
    keys = ["model", "input_size"]
    both = plain[keys + ["params"]].merge(fused[keys + ["params", "folded"]], on=keys, suffixes=("_plain", "_fused"))
    both = both[both["folded"].astype(bool)]
    both = both[(both["params_plain"] / 1e4).round() != (both["params_fused"] / 1e4).round()]
    m = frame[["source_file", *keys, "params"]].merge(both, on=keys)
    pub = (pd.to_numeric(m["params"], errors="coerce") / 1e4).round()
    vote = ((pub == (m["params_fused"] / 1e4).round()).astype(int)
            - (pub == (m["params_plain"] / 1e4).round()).astype(int))
    per_file = vote.groupby(m["source_file"]).sum() > 0
    return frame["source_file"].map(per_file).fillna(False).astype(bool)


REPARAM_CHOICES = ("published", "never", "always")


def _check_reparam(reparam: str, where: str) -> None:
    """One :class:`DatasetError` line when ``reparam`` is not one of :data:`REPARAM_CHOICES`."""
    if reparam not in REPARAM_CHOICES:
        raise DatasetError(f"{where}: reparam={reparam!r} is not allowed; allowed: {', '.join(REPARAM_CHOICES)}")


def _graphs(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(plain, fused)``: the trace table's (``path``) rows of the plain graph and those of the folded graph
    of models that fold (``folded`` True), one per (model, input_size); refused rows left out."""
    tr = pd.read_parquet(path)
    if "refused" in tr.columns:
        tr = tr[tr["refused"].isna()]
    graph = tr["reparam"].fillna(False).astype(bool) if "reparam" in tr.columns else pd.Series(False, index=tr.index)
    folded = tr["folded"].fillna(False).astype(bool) if "folded" in tr.columns else graph
    keys = ["model", "input_size"]
    drop = [c for c in ("refused", "settings", "trace_s", "reparam", "folded") if c in tr.columns]
    plain = tr[~graph].drop(columns=drop).drop_duplicates(keys, keep="last")
    fused = tr[graph & folded].assign(folded=True).drop(columns=[c for c in drop if c != "folded"])
    return plain, fused.drop_duplicates(keys, keep="last")


def _reparam_rows(frame: pd.DataFrame, plain: pd.DataFrame, fused: pd.DataFrame, reparam: str,
                  where: str) -> np.ndarray:
    """Per row of ``frame`` ((n,) bool): whether the folded graph describes it, i.e. the graph choice
    ``reparam`` (:func:`with_trace`'s) says folded for its file and its (model, input_size) folds."""
    _check_reparam(reparam, where)
    keys = ["model", "input_size"]
    if reparam == "never" or fused.empty:
        use = pd.Series(False, index=frame.index)
    elif reparam == "always" or "source_file" not in frame.columns:
        use = pd.Series(reparam == "always", index=frame.index)
    else:
        use = _published_graph(frame, plain, fused)
    k = frame[keys].copy()   # sizes as floats on both sides: an int/str mix joins, a missing size joins nothing
    k["input_size"] = pd.to_numeric(k["input_size"], errors="coerce").astype(float)
    f = fused[keys].assign(_f=True)
    f["input_size"] = pd.to_numeric(f["input_size"], errors="coerce").astype(float)
    has_fused = k.merge(f, on=keys, how="left")["_f"].fillna(False).to_numpy(bool)
    return use.to_numpy(bool) & has_fused


def published_reparam(frame: pd.DataFrame, path: str | Path | None = None, reparam: str = "published") -> np.ndarray:
    """Per row of ``frame`` (timm benchmark rows: ``model``, ``input_size``, ``source_file``, ``params``),
    (n,) bool: whether the network timm timed is the reparameterised (folded) graph, the decision
    :func:`with_trace` joins features by (``tr_reparam``; ``reparam`` as there: ``published`` reads each
    file's published parameter counts). All False when the trace table (:data:`ZOO_TRACE`, or ``path``)
    does not exist."""
    p = Path(path) if path else ZOO_TRACE
    if not p.is_file():
        _check_reparam(reparam, "published_reparam")
        return np.zeros(len(frame), dtype=bool)
    plain, fused = _graphs(p)
    return _reparam_rows(frame, plain, fused, reparam, "published_reparam")


def with_trace(frame: pd.DataFrame, path: str | Path | None = None, reparam: str = "published") -> pd.DataFrame:
    """``frame`` with the layer-table features of its ``(model, input_size)`` (:data:`ZOO_TRACE`, or
    ``path``) joined on as ``tr_<column>`` (:func:`carb.design.trace.summarize`'s columns, per image at
    fp32); NaN for a pair without a trace (refused by the tracer or not traced yet). ``frame`` unchanged
    when the table does not exist. Where the table has a column's state-derived part ``state_<column>``
    (tracer 4: :func:`carb.design.zoo_features.state_parts`) and ``frame`` a ``batch_size``, that part counts
    once per batch: ``tr_<column>`` is per image at the row's batch size (:func:`_state_once_per_batch`);
    the ``state_*`` columns are not joined.

    Which graph: the table holds the plain trace (``reparam`` False) and, for models that fold, the
    reparameterised one (``reparam`` True, ``folded`` True; ``scripts/data/zoo_trace_features.py
    --reparam``). ``reparam="published"``: per ``source_file``, the graph the file's published parameter
    counts show it was run on (:func:`_published_graph`: timm's 4090/5090/PRO 6000 files (torch 2.9.1)
    are reparameterised, the 3090 and i9 files (torch 2.4) are not); ``"never"``: the plain graph;
    ``"always"``: the folded graph wherever there is one. ``tr_reparam`` says, per row, whether the folded
    graph's features were joined."""
    p = Path(path) if path else ZOO_TRACE
    if not p.is_file():
        _check_reparam(reparam, "with_trace")
        return frame
    plain, fused = _graphs(p)
    keys = ["model", "input_size"]
    out = frame.copy()
    out["tr_reparam"] = _reparam_rows(out, plain, fused, reparam, "with_trace")
    cols = [c for c in plain.columns if c not in keys]
    ren = {c: f"tr_{c}" for c in cols}
    if "input_size" in frame:
        for t in (plain, fused):
            t["input_size"] = t["input_size"].astype(frame["input_size"].dtype)
    a = out[keys].merge(plain[keys + cols], on=keys, how="left")
    b = out[keys].merge(fused[keys + cols], on=keys, how="left")
    pick = out["tr_reparam"].to_numpy(bool)
    for c in cols:
        out[ren[c]] = np.where(pick, b[c].to_numpy(), a[c].to_numpy())
    return _state_once_per_batch(out, [c for c in cols if not c.startswith("state_")])


def _state_once_per_batch(out: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """``out`` with each ``tr_<c>`` that has a ``tr_state_<c>`` (the state-derived operations' part of a
    batch-1 count) at the row's batch ``b``: ``tr_<c> - tr_state_<c> + tr_state_<c> / b`` per image; the
    ``tr_state_*`` columns dropped. Unchanged counts where ``out`` has no ``batch_size`` (NaN parts: 0)."""
    state = [c for c in cols if f"tr_state_{c}" in out.columns]
    if state and "batch_size" in out.columns:
        b = pd.to_numeric(out["batch_size"], errors="coerce").to_numpy(float)
        for c in state:
            part = np.nan_to_num(pd.to_numeric(out[f"tr_state_{c}"], errors="coerce").to_numpy(float))
            out[f"tr_{c}"] = pd.to_numeric(out[f"tr_{c}"], errors="coerce").to_numpy(float) - part * (1 - 1 / b)
    return out.drop(columns=[c for c in out.columns if c.startswith("tr_state_")])


#: The note every converted row carries: what timm's files do not publish.
_NOT_PUBLISHED = "energy_J, peak_memory_MB: not in timm's published benchmark (latency only)"


def bench_devices(bench: pd.DataFrame) -> list[str]:
    """The device names of a benchmark table (:func:`load_zoo_bench`), sorted."""
    return sorted(bench["device_name"].dropna().astype(str).unique())


def as_zoo_dataset(device: str, bench: pd.DataFrame | None = None,
                   trace_path: str | Path | None = None, reparam: str = "published") -> pd.DataFrame:
    """One device's rows of timm's benchmark (``bench``: :func:`load_zoo_bench`'s columns; default the
    shipped main set) as a zoo dataset (:data:`carb.data.zoo_schema.ZOO_SCHEMA`), so the CARB cascade trains
    on it like a collected file: ``model_name`` = ``timm:<model>`` (the network timm timed), ``family``,
    ``input_size`` [px], ``batch_size``, ``precision`` (CARB name), ``family`` (CARB's,
    :func:`carb.design.zoo.family_of`, as a predicted name gets it), ``latency_ms`` [ms per batch], the static
    features from each network's layer table (:func:`carb.design.zoo_inputs.zoo_features_frame`: NaN where
    the tracer refuses it), ``energy_J`` / ``peak_memory_MB`` NaN with the reason. ``device_kind`` is
    ``import`` (a third-party measurement), ``device_id`` ``timm-<slug>``, ``source`` the file and line.
    Rows without a latency are left out. An unknown ``device`` is one :class:`DatasetError` naming the
    devices. ``reparam`` (bool, :data:`carb.design.zoo_features.REPARAM`): the row's features are those of
    the folded inference graph, where timm timed it (:func:`published_reparam`: the file's published
    parameter counts are the folded graph's, and the network folds), as ``ZooLatencyModel``'s features
    (:func:`with_trace`) are; a model fitted on such rows predicts names on that graph too.
    ``trace_path``: the trace table the graph is decided from (default :data:`ZOO_TRACE`); ``reparam``: the
    choice as :func:`with_trace`'s (``never`` / ``always`` force one graph, for comparisons)."""
    from carb.data.zoo_schema import ZOO_SCHEMA, validate_zoo_dataset
    from carb.design.zoo_features import REPARAM
    from carb.design.zoo_inputs import zoo_features_frame

    bench = load_zoo_bench() if bench is None else bench
    devices = bench_devices(bench)
    if device not in devices:
        raise DatasetError(f"data.device: {device!r} is not in timm's benchmark; allowed: {', '.join(devices)}")
    rows = bench[(bench["device_name"] == device) & bench["latency_ms"].notna()].reset_index(drop=True)
    knobs = pd.DataFrame({"model_name": "timm:" + rows["model"].astype(str),
                          "input_size": rows["input_size"].astype(int), "batch_size": rows["batch_size"].astype(int),
                          "precision": rows["precision"].astype(str),
                          REPARAM: published_reparam(rows, trace_path, reparam)})
    F = zoo_features_frame(knobs)
    out = F[[c for c in F.columns if c in ZOO_SCHEMA or c == REPARAM]].copy()
    slug = re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")
    out = out.assign(config_id=rows["zoo_id"].astype(str).to_numpy(), device_name=device, device_kind="import", device_id=f"timm-{slug}",
                     torch_version=rows["torch_version"].astype(str).to_numpy(), status="ok",
                     missing_reason=_NOT_PUBLISHED, source=("timm:" + rows["source_row"].astype(str)).to_numpy(),
                     latency_ms=rows["latency_ms"].astype(float).to_numpy(), energy_J=np.nan, peak_memory_MB=np.nan)
    for c, dtype in ZOO_SCHEMA.items():
        if c not in out.columns:
            out[c] = pd.Series([pd.NA] * len(out), dtype=dtype) if dtype == "string" else np.nan
    return validate_zoo_dataset(out, source=f"timm-zoo ({device})")
