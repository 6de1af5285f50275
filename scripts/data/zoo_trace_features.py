"""Trace every architecture of timm's published benchmark at its benchmark input size into the layer-table
cache and write a compact feature table: one row per (architecture, input size).

    python scripts/data/zoo_trace_features.py [--workers 2] [--stop-at HH:MM] [--limit N] [--reparam] [--refresh]
        [--refresh-where COLUMN] [--refresh-module CLASS] [--columns A,B]
        [--hidden-copies-cuda]

Reads ``carb/data/timm-zoo-bench.parquet``; for each distinct ``(model, input_size)`` runs
:func:`carb.design.trace.trace` at batch 1, fp32, 3 channels (the tracer scales to any batch and precision)
and keeps :func:`carb.design.trace.summarize`'s columns and
:func:`carb.design.zoo_features.gemm_regimes`' (explicit matrix products by intensity regime, convolution
weights) and :func:`carb.design.zoo_features.amp_memory_split`'s (the memory-bound bytes mixed precision
moves at fp32: fp32-list normalisations, element-wise operations reading a parameter), and of each of
those columns that grows with the batch the state-derived operations' part as ``state_<column>``
(:func:`carb.design.zoo_features.state_parts`: work done once per batch, e.g. relative-position bias
gathers; :func:`carb.data.importers.timm_zoo.with_trace` counts it once per batch at the row's batch size).
``--reparam``: the same for the reparameterised
inference graph (``trace(..., reparam=True)``: what timm's benchmark times with ``--reparam``), rows with
``reparam`` True and ``folded`` (whether the model had anything to fold; when not, the features equal the
plain trace's). Rows of the plain trace have ``reparam`` False. ``--refresh``: recompute those
columns of every row already there from the cached traces (after summarize() gains a column;
``--refresh-where COLUMN``: only the rows where COLUMN is non-zero, the new column 0 elsewhere; with
``--refresh-module CLASS`` too: of those, only the rows whose network, built on the meta device, holds a module
that is an instance of ``torch.nn.CLASS``, e.g. ``GroupNorm`` for a group-norm column; ``--columns A,B``: write
only those columns, every other one keeps every value it had). A model the tracer refuses at its default settings
is tried once more with ``img_size=<input_size>`` (timm's fixed-position-embedding models); one refused
both ways gets a row with ``refused`` set to the one-line reason and NaN features.

Writes ``carb/data/timm-zoo-trace.parquet`` atomically after every chunk (resumable: rows already there
are skipped, so the same command continues an interrupted run) and
``carb/data/timm-zoo-trace.provenance.json`` (commit, date, tracer version, torch / timm versions, counts;
merged: the keys a run does not set, such as the per-column notes, are kept).
``--stop-at HH:MM`` (UTC) stops starting new chunks at that time; what is done stays written.
Bad input: one line naming the option, exit 2.
"""
from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import subprocess
import sys
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.files import write_atomic  # noqa: E402

BENCH = ROOT / "carb" / "data" / "timm-zoo-bench.parquet"
OUT = ROOT / "carb" / "data" / "timm-zoo-trace.parquet"
PROVENANCE = ROOT / "carb" / "data" / "timm-zoo-trace.provenance.json"
CHUNK = 16


def _graph(done: pd.DataFrame) -> np.ndarray:
    """Per row of ``done``: whether it is a reparameterised trace (rows written before the column: no)."""
    if "reparam" not in done.columns:
        return np.zeros(len(done), bool)
    return done["reparam"].fillna(False).astype(bool).to_numpy()


def todo_pairs(done: pd.DataFrame, reparam: bool = False) -> list[tuple[str, int]]:
    """Distinct ``(model, input_size)`` of the benchmark not yet in ``done`` (for the plain or, with
    ``reparam``, the reparameterised graph), in a fixed shuffled order (so a partial run covers every
    family a little rather than some fully)."""
    bench = pd.read_parquet(BENCH, columns=["model", "input_size"]).dropna().drop_duplicates()
    pairs = sorted((str(m), int(s)) for m, s in bench.itertuples(index=False))
    if len(done):
        done = done[_graph(done) == reparam]
    have = set(zip(done["model"].astype(str), done["input_size"].astype(int))) if len(done) else set()
    rng = np.random.default_rng(43)
    order = rng.permutation(len(pairs))
    return [pairs[i] for i in order if pairs[i] not in have]


def timm_graph(model: str) -> str:
    """The zoo name that builds timm's ``model``, the network timm's files timed: ``timm:<model>`` where a
    bare name would build torchvision's namesake (:func:`carb.design.zoo.resolve` takes torchvision's
    classifiers first; timm's VGG ends in a 7x7 convolution where torchvision's has a linear layer, same
    parameters and MACs), else ``model``."""
    from carb.design.zoo import resolve

    return f"timm:{model}" if resolve(model)[0] == "tv" else model


@functools.lru_cache(maxsize=1)
def cpu_thresholds() -> dict[str, float]:
    """The thresholds of the CPU columns (:func:`carb.model.zoo_latency_cpu.cpu_parts`): ``conf/zoo_latency/
    default.yaml``'s ``cpu_parts``, read once per process (a bad value: one line, exit 2)."""
    from scripts.bench.zoo import cpu_part_settings

    return cpu_part_settings([])


def trace_one(job: tuple[str, int, bool]) -> dict[str, Any]:
    """One feature row: :func:`carb.model.zoo_predictor.traced_layer`'s columns of ``model`` at ``input_size``
    (batch 1, fp32; the reparameterised graph when ``reparam``; the one implementation, which ``layer_row`` uses
    for a network outside timm's files), with the settings used, ``reparam``, ``folded``, the trace's wall
    seconds and ``refused`` (None or the one-line reason)."""
    from carb.errors import ZooError
    from carb.model.zoo_predictor import traced_layer

    model, size, reparam = job
    t0 = time.perf_counter()
    row: dict[str, Any] = {"model": model, "input_size": size, "settings": "", "refused": None,
                           "reparam": bool(reparam), "folded": False}
    try:
        columns, table, settings = traced_layer(timm_graph(model), size, reparam, cpu_thresholds())
        row.update(columns)
        row["folded"] = bool(table.attrs.get("reparam", False))
        row["settings"] = json.dumps(settings) if settings else ""
    except ZooError as e:
        row["refused"] = str(e)
    row["trace_s"] = round(time.perf_counter() - t0, 3)
    return row


def refresh_one(job: tuple[str, int, str, bool]) -> dict[str, Any]:
    """summarize()'s columns of a row already in the table, recomputed from its cached trace (the same
    settings, plain or folded graph): after summarize() gains a column, no model is traced again."""
    from carb.design.trace import trace
    from carb.model.zoo_predictor import layer_columns

    model, size, settings, folded = job
    table = trace(timm_graph(model), (1, 3, size, size), precision="fp32",
                  settings=json.loads(settings) if settings else None, reparam=folded)
    return layer_columns(table, cpu_thresholds())


def hidden_one(job: tuple[str, int, str]) -> dict[str, float]:
    """:func:`carb.design.zoo_features.hidden_copy_bytes` of one (model, input_size, settings) pair (NaN where the
    forward fails)."""
    from carb.design.zoo_features import hidden_copy_bytes

    model, size, settings = job
    try:
        return hidden_copy_bytes(timm_graph(model), size, json.loads(settings) if settings else None)
    except Exception:  # noqa: BLE001 - one model's failure must not lose the run
        return {"bytes_hidden_copy": np.nan, "n_hidden_copy": np.nan}


def hidden_copies(done: pd.DataFrame, workers: int) -> pd.DataFrame:
    """``done`` with ``bytes_hidden_copy`` / ``n_hidden_copy`` (:func:`hidden_one`) on every traced row: one forward
    per (model, input_size, settings), the same value on the plain and the folded graph's rows (the copies are made
    by softmax and norms, which folding leaves alone)."""
    ok = done["refused"].isna().to_numpy()
    keys = done.loc[ok, ["model", "input_size", "settings"]].astype({"settings": str}).drop_duplicates()
    jobs = [(str(m), int(s), "" if st in ("None", "nan") else st) for m, s, st in keys.itertuples(index=False)]
    with get_context("spawn").Pool(workers, maxtasksperchild=100) as pool:
        rows = pool.map(hidden_one, jobs, chunksize=8)
    got = pd.DataFrame(rows).assign(model=[j[0] for j in jobs], input_size=[j[1] for j in jobs],
                                    settings=[j[2] for j in jobs])
    key = done[["model", "input_size"]].assign(settings=done["settings"].astype(str).replace({"None": "", "nan": ""}))
    merged = key.merge(got, on=["model", "input_size", "settings"], how="left")
    out = done.copy()
    for c in ("bytes_hidden_copy", "n_hidden_copy"):
        out[c] = np.where(ok, merged[c].to_numpy(float), np.nan)
    return out


def hidden_cuda_one(job: tuple[str, int, str]) -> dict[str, float]:
    """:func:`carb.design.zoo_features.hidden_copy_bytes` with ``cuda_layout`` (cuDNN keeps a channels-last input
    channels-last) of one (model, input_size, settings) pair: ``bytes_hidden_copy`` / ``n_hidden_copy`` /
    ``flops_conv_dw_native`` (batch 1, fp32), NaN where the forward fails."""
    from carb.design.zoo_features import hidden_copy_bytes

    model, size, settings = job
    try:
        return hidden_copy_bytes(timm_graph(model), size, json.loads(settings) if settings else None, cuda_layout=True)
    except Exception:  # noqa: BLE001 - one model's failure must not lose the run
        return {"bytes_hidden_copy": np.nan, "n_hidden_copy": np.nan, "flops_conv_dw_native": np.nan}


#: Columns ``--hidden-copies-cuda`` writes, from :func:`hidden_cuda_one`'s keys.
CUDA_LAYOUT_COLUMNS: dict[str, str] = {"bytes_hidden_copy": "bytes_hidden_copy_cl", "n_hidden_copy": "n_hidden_copy_cl",
                                       "flops_conv_dw_native": "flops_conv_dw_native_cl"}


def hidden_copies_cuda(done: pd.DataFrame, workers: int) -> pd.DataFrame:
    """``done`` with :data:`CUDA_LAYOUT_COLUMNS`: the hidden copies and the depthwise FLOPs off cuDNN as a GPU lays
    the tensors out (:func:`hidden_cuda_one`), one forward per (model, input_size, settings) on the rows with a hidden
    copy by the meta strides (``bytes_hidden_copy`` > 0: a network that permutes nothing never hands a convolution a
    channels-last input, so elsewhere the meta columns stand: ``bytes_hidden_copy``, ``n_hidden_copy``,
    ``flops_conv_dw_native``); where that forward fails, the meta columns too. The forward is of the plain graph:
    on a folded row (``folded``) ``flops_conv_dw_native_cl`` stays the folded table's ``flops_conv_dw_native``."""
    ok = (done["refused"].isna() & (pd.to_numeric(done["bytes_hidden_copy"], errors="coerce").fillna(0) > 0)).to_numpy()
    settings = done["settings"].astype(str).replace({"None": "", "nan": ""})
    keys = sorted({(str(m), int(s), str(st)) for m, s, st in
                   zip(done.loc[ok, "model"], done.loc[ok, "input_size"], settings[ok])})
    with get_context("spawn").Pool(workers, maxtasksperchild=100) as pool:
        got = dict(zip(keys, pool.map(hidden_cuda_one, keys, chunksize=8)))
    folded = done["folded"].fillna(False).astype(bool).to_numpy() if "folded" in done else np.zeros(len(done), bool)
    out = done.copy()
    for src, dst in CUDA_LAYOUT_COLUMNS.items():
        cuda = np.array([got.get((str(m), int(s), str(st)), {}).get(src, np.nan) if k else np.nan
                         for m, s, st, k in zip(done["model"], done["input_size"], settings, ok)], float)
        if src == "flops_conv_dw_native":   # the forward's graph is the plain one: a folded row keeps its own
            cuda = np.where(folded, np.nan, cuda)
        out[dst] = np.where(np.isfinite(cuda), cuda, pd.to_numeric(done[src], errors="coerce").to_numpy(float))
    return out


def holds_module(job: tuple[str, int, str, str]) -> bool:
    """Whether the network of one (model, input_size, settings) row, built on the meta device, holds a module that
    is an instance of ``torch.nn.<cls>`` (False where it cannot be built)."""
    import torch

    from carb.design.zoo import build_model

    model, size, settings, cls = job
    try:
        net = build_model(timm_graph(model), **(json.loads(settings) if settings else {}))
    except Exception:  # noqa: BLE001 - a model that cannot be built here is not refreshed
        return False
    return any(isinstance(m, getattr(torch.nn, cls)) for m in net.modules())


def module_rows(done: pd.DataFrame, ok: np.ndarray, cls: str, workers: int) -> np.ndarray:
    """``ok`` narrowed to the rows whose network holds a ``torch.nn.<cls>`` (:func:`holds_module`, once per
    distinct (model, input_size, settings))."""
    settings = done["settings"].astype(str).replace({"None": "", "nan": ""})
    keys = sorted({(str(m), int(s), str(st)) for m, s, st in
                   zip(done.loc[ok, "model"], done.loc[ok, "input_size"], settings[ok])})
    with get_context("spawn").Pool(workers, maxtasksperchild=100) as pool:
        held = dict(zip(keys, pool.map(holds_module, [k + (cls,) for k in keys], chunksize=8)))
    return ok & np.array([held.get((str(m), int(s), str(st)), False) for m, s, st in
                          zip(done["model"], done["input_size"], settings)], bool)


def refresh(done: pd.DataFrame, workers: int, where: str | None = None, module: str | None = None,
            columns: list[str] | None = None) -> pd.DataFrame:
    """Every traced row of ``done`` with summarize()'s columns recomputed (:func:`refresh_one`). With
    ``where`` (a column of ``done``), only the rows where it is non-zero: a column new to the table is 0 on
    the others (for a column that is 0 wherever ``where`` is, e.g. ``bytes_sdpa_math_io`` where
    ``flops_sdpa_math`` is 0: no row on the math path), which spares tracing every network again. With ``module``
    (a class of ``torch.nn``), of those only the rows whose network holds one (:func:`module_rows`): a column that is
    0 wherever the network has no such module (``bytes_group_norm`` without a ``GroupNorm``); then only the columns
    new to the table are written (the others keep their values, on those rows too). With ``columns``, only those
    columns are written (new or not; every other column keeps every value it had)."""
    ok = done["refused"].isna().to_numpy()
    if where is not None:
        ok = ok & (pd.to_numeric(done[where], errors="coerce").fillna(0).to_numpy(float) != 0)
    if module is not None:
        ok = module_rows(done, ok, module, workers)
    folded = done["folded"].fillna(False).astype(bool) if "folded" in done else pd.Series(False, index=done.index)
    jobs = [(str(m), int(s), str(st or ""), bool(f)) for m, s, st, f in
            zip(done.loc[ok, "model"], done.loc[ok, "input_size"], done.loc[ok, "settings"], folded[ok])]
    with get_context("spawn").Pool(workers, maxtasksperchild=200) as pool:
        rows = pool.map(refresh_one, jobs, chunksize=16)
    new = pd.DataFrame(rows, index=done.index[ok])
    out = done.copy()
    for c in new.columns:
        if columns is not None and c not in columns:
            continue   # only the named columns are written
        if module is not None and c in done.columns:
            continue   # only the new columns are written: the others keep every value they had
        if c not in out.columns:
            out[c] = np.where(done["refused"].isna(), 0.0, np.nan) if where is not None else np.nan
        out.loc[ok, c] = new[c]
    return out


def _nn_class(name: str) -> bool:
    """Whether ``name`` is a module class of ``torch.nn``."""
    import torch

    return isinstance(getattr(torch.nn, name, None), type) and issubclass(getattr(torch.nn, name), torch.nn.Module)


def _write(frame: pd.DataFrame) -> None:
    """Write the feature table atomically."""
    write_atomic(OUT, lambda tmp: frame.to_parquet(tmp, index=False))


def _provenance(frame: pd.DataFrame, path: Path | None = None) -> None:
    """Write the provenance JSON (``path``, by default :data:`PROVENANCE`): commit, date, tracer / torch / timm
    versions, counts. Merged into the file there: the keys this run does not set (the per-column notes,
    ``cpu_columns*``, ``bmm_tiles``, ``refresh``, ...) are kept; a missing or unreadable file starts empty."""
    import torch

    from carb.design.trace import TRACER_VERSION
    from carb.design.zoo import import_timm

    timm = import_timm()   # torchvision's operators defined first on the CPU torch wheel

    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    info = {"source": "carb/data/timm-zoo-bench.parquet", "script": "scripts/data/zoo_trace_features.py",
            "commit": commit, "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "tracer_version": TRACER_VERSION, "torch": torch.__version__, "timm": timm.__version__,
            "batch": 1, "channels": 3, "precision": "fp32",
            "rows": int(len(frame)), "traced": int(frame["refused"].isna().sum()),
            "refused": int(frame["refused"].notna().sum()),
            "reparam_rows": int(_graph(frame).sum()),
            "reparam_folded": int(frame.get("folded", pd.Series(False, index=frame.index)).fillna(False).sum()),
            "pending": len(todo_pairs(frame)), "pending_reparam": len(todo_pairs(frame, reparam=True))}
    path = PROVENANCE if path is None else path
    merged = _read_json(path) | info
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(merged, indent=2) + "\n"))


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object at ``path``; ``{}`` when there is none or it is not a readable JSON object."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return old if isinstance(old, dict) else {}


def _args(argv: list[str] | None) -> argparse.Namespace:
    """Parse options; bad values are one line naming the option, exit 2."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stop-at", default=None, help="UTC HH:MM: start no new chunk after it")
    p.add_argument("--limit", type=int, default=None, help="trace at most N pending pairs")
    p.add_argument("--reparam", action="store_true", help="trace the reparameterised graphs (rows reparam=True)")
    p.add_argument("--refresh", action="store_true",
                   help="recompute summarize()'s columns of every row from the cached traces (no new rows)")
    p.add_argument("--hidden-copies", action="store_true",
                   help="add bytes_hidden_copy / n_hidden_copy (carb.design.zoo_features.hidden_copy_bytes) to every row")
    p.add_argument("--hidden-copies-cuda", action="store_true",
                   help="add bytes_hidden_copy_cl / n_hidden_copy_cl / flops_conv_dw_native_cl (hidden_copy_bytes "
                        "with cuda_layout: cuDNN keeps channels-last) to every row")
    p.add_argument("--refresh-where", default=None, metavar="COLUMN",
                   help="with --refresh: only the rows where COLUMN is non-zero (a new column is 0 on the others)")
    p.add_argument("--refresh-module", default=None, metavar="CLASS",
                   help="with --refresh-where: only the rows whose network holds a torch.nn.CLASS module")
    p.add_argument("--columns", default=None, metavar="A,B",
                   help="with --refresh: write only these columns of summarize()'s (the others keep their values)")
    a = p.parse_args(argv)
    if a.workers < 1:
        print(f"--workers: {a.workers} is not allowed; allowed: an integer >= 1", file=sys.stderr)
        raise SystemExit(2)
    if a.stop_at is not None:
        try:
            h, m = (int(x) for x in a.stop_at.split(":"))
            a.stop = dt.datetime.now(dt.timezone.utc).replace(hour=h, minute=m, second=0, microsecond=0)
        except ValueError:
            print(f"--stop-at: {a.stop_at!r} is not allowed; allowed: a UTC time HH:MM", file=sys.stderr)
            raise SystemExit(2) from None
    else:
        a.stop = None
    return a



def _saved(done: pd.DataFrame) -> pd.DataFrame:
    """``done`` written (the table and its provenance) and returned: the end of every whole-table pass."""
    _write(done)
    _provenance(done)
    return done

def main(argv: list[str] | None = None) -> int:
    """Trace what is pending, chunk by chunk, writing the table after each chunk."""
    a = _args(argv)
    cpu_thresholds()   # conf/zoo_latency's cpu_parts checked before any model is traced
    done = pd.read_parquet(OUT) if OUT.exists() else pd.DataFrame()
    if len(done) and "reparam" not in done.columns:
        done["reparam"], done["folded"] = False, False
    if a.refresh_where is not None and a.refresh_where not in done.columns:
        print(f"--refresh-where: {a.refresh_where!r} is not allowed; allowed: a column of {OUT.name}", file=sys.stderr)
        raise SystemExit(2)
    if a.refresh_module is not None and (a.refresh_where is None or not _nn_class(a.refresh_module)):
        print(f"--refresh-module: {a.refresh_module!r} is not allowed; allowed: a class of torch.nn (e.g. GroupNorm), "
              "with --refresh-where", file=sys.stderr)
        raise SystemExit(2)
    if a.columns is not None:
        a.columns = [c for c in a.columns.split(",") if c]
        if not a.refresh or not a.columns:
            print(f"--columns: {','.join(a.columns)!r} is not allowed; allowed: column names, comma-separated, "
                  "with --refresh", file=sys.stderr)
            raise SystemExit(2)
    if a.hidden_copies_cuda:
        if "flops_conv_dw_native" not in done.columns:
            print("--hidden-copies-cuda: needs the column flops_conv_dw_native; allowed after --refresh --refresh-where "
                  "flops_conv_depthwise --columns flops_conv_dw_native", file=sys.stderr)
            raise SystemExit(2)
        done = _saved(hidden_copies_cuda(done, a.workers))
        print(f"zoo-trace: CUDA-layout hidden copies on {int((done['bytes_hidden_copy'] > 0).sum())} rows", flush=True)
        return 0
    if a.hidden_copies:
        done = _saved(hidden_copies(done, a.workers))
        print(f"zoo-trace: hidden copies on {int(done['bytes_hidden_copy'].notna().sum())} rows", flush=True)
        return 0
    if a.refresh:
        only = {"module": a.refresh_module} if a.refresh_module is not None else {}
        only |= {"columns": a.columns} if a.columns is not None else {}
        done = _saved(refresh(done, a.workers, a.refresh_where, **only))
        ok = done["refused"].isna()
        if a.refresh_where is not None:
            ok &= pd.to_numeric(done[a.refresh_where], errors="coerce").fillna(0) != 0
        print(f"zoo-trace: refreshed {int(ok.sum())} rows"
              + (f" (those holding a {a.refresh_module}: see the new columns)" if a.refresh_module else ""), flush=True)
        return 0
    pending = [(m, s, a.reparam) for m, s in todo_pairs(done, a.reparam)]
    if a.limit is not None:
        pending = pending[:a.limit]
    print(f"zoo-trace: {len(done)} done, {len(pending)} pending", flush=True)
    ctx = get_context("spawn")
    with ctx.Pool(a.workers, maxtasksperchild=50) as pool:
        for i in range(0, len(pending), CHUNK):
            if a.stop is not None and dt.datetime.now(dt.timezone.utc) >= a.stop:
                print(f"zoo-trace: stop time {a.stop_at} reached", flush=True)
                break
            rows = pool.map(trace_one, pending[i:i + CHUNK], chunksize=1)
            done = pd.concat([done, pd.DataFrame(rows)], ignore_index=True) if len(done) else pd.DataFrame(rows)
            _write(done)
            print(f"zoo-trace: {len(done)} rows ({int(done['refused'].notna().sum())} refused) "
                  f"{dt.datetime.now(dt.timezone.utc):%H:%M:%S}", flush=True)
    if len(done):
        _provenance(done)
    print(f"zoo-trace: done rows={len(done)} pending={len(todo_pairs(done, a.reparam)) if len(done) else 'all'}",
          flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
