"""Benchmark: latency and memory of a backbone family never measured: the CPU zoo measured here and
timm's published benchmark files.

CPU part (``--part cpu|all``; :mod:`carb.analysis.zoo_cpu_eval`): leave-one-family-out over every family of
each measured CPU zoo (every shipped one: ``zoo-cpu``, the AMD EPYC Zen 4 VM, and ``zoo-cpu-xeon``, the Intel Xeon
VM; or ``--cpu-data``, repeatable), each its own device (its own fits, tables and summary; the first is the
JSON's ``cpu`` and screens, every one is in ``cpus``), latency and peak memory: CARB is the
registered model, the cascade ``carb-train data.path=<data>`` fits (its config composed as the command
composes it, ``--train-override`` adds overrides), fitted once per held-out family, beside B1 and Hidden
Joules' regression on the same splits (memory also beside the liveness estimate ``peak_live_MB +
param_size_MB``, no fitting); 90 % cross-conformal family intervals.
``screen_s``: a zoo screening after load (the shipped zoo list x 8 batch sizes x 3 precisions x 3 input
sizes: featurized from the cached layer tables, latency and memory predicted by the cascade fitted on
every row, Pareto front of latency vs -top1), timed once the tables are cached (the first pass warms the
cache and is not timed).
``trace_cold_s`` is read from ``scripts/data/zoo_trace_bench.json`` (``scripts/bench/trace.py``'s
measurement, with its provenance) or given with ``--trace-cold-s``.

GPU part (``--part gpu|all``):
For each device of the shipped timm zoo table (``carb/data/timm-zoo-bench.parquet``: the main set, eager
nchw autocast-fp16 on RTX 3090 / 4090 / 5090 / PRO 6000 Max-Q, newest torch each; fp32 torch.compile
batch 1 on the Intel i9-10940X), leave-one-family-out (families = leading letters of the model name, those
with >= 5 models; :mod:`carb.analysis.zoo_eval`): CARB's zoo model beside B1 (log-log on GMACs) and Hidden
Joules' regression (log-linear on params, GMACs, activations), on the same splits; 90 % cross-conformal
intervals calibrated on the other held-out families. CARB's prediction is kept within a margin of the span
between its base and Hidden Joules' regression (``conf/zoo_latency/default.yaml``'s ``margin``, ``outside``); with
``nested_margin`` (timm's CPU file) the margin of each held-out family is chosen on the other families
(:func:`carb.analysis.zoo_eval.nested_margin`; ``carb_margin`` in the per-family table).

Device part (``--part device``; :mod:`carb.analysis.zoo_transfer_eval`, settings ``conf/zoo_transfer/default.yaml``,
schema :class:`carb.commands.schema.groups.ZooTransfer`, ``--zoo-transfer KEY=VALUE`` overrides one): a GPU
never measured. Leave-one-GPU-out over timm's GPU files with a spec record: each target's networks from the
other GPUs' times moved by the spec sheet (K=0) and recalibrated on K space-filling networks of the target,
beside the nearest source GPU scaled by the spec ratio and FLOPs only; with ``combined`` also
leave-one-GPU-and-family-out. Its own machine-readable line (not part of ``zoo:``), printed last for this part:
``zoo_device: gpus=N k0_mape_max=X k0_rho_min=X k10_mape_max=X k10_rho_min=X baseline_mape_max=X
flops_mape_max=X k0_within20=W/F [lgfo_k0_mape_max=X lgfo_k10_mape_max=X lgfo_flops_mape_max=X]``.
Its figures go to ``--out``'s ``device`` key (by default ``scripts/data/zoo_device_bench.json``, which
:mod:`scripts.zoo_results` reads for docs/RESULTS.md; ``scripts/data/zoo_bench.json`` is not touched).

Cascade part (``--part cascade --devices '<device>'``, one device): the cascade ``carb-train data=timm_zoo
data.device=<device>`` fits (its config as the command composes it; ``--train-override`` adds overrides;
zoo rows from :func:`carb.data.importers.timm_zoo.as_zoo_dataset`, on the graph each file was timed on) beside
``ZooLatencyModel``, Hidden Joules' regression and B1, leave-one-family-out on the same splits (families:
leading letters, >= 5 models) and the same rows (timm's lines both can use). Its own last line:
``zoo_cascade: device=D families=F cascade_within20=W/F zoo_within20=W/F cascade_pooled=X zoo_pooled=X
cascade_worst=X zoo_worst=X cascade_family_wins=W/F`` (MAPE %; wins: families where the cascade's MAPE is
lower). ``--folds N``: the scored families dealt into N groups, each held out together (fewer fits; the same
splits for every model); figures in ``--out`` (default ``scripts/data/zoo_cascade_bench.json``).

    python scripts/bench/zoo.py [--part all|cpu|gpu|device|cascade] [--devices gpu|all|<device name>] [--no-census]
        [--no-trace] [--gpu-no-trace-too] [--zoo-latency KEY=VALUE ...] [--no-per-device]
        [--reparam published|never|always] [--table]
        [--zoo-transfer KEY=VALUE ...] [--out scripts/data/zoo_bench.json]

CARB's features include the layer table's (``carb/data/timm-zoo-trace.parquet``, joined by
:func:`carb.data.importers.timm_zoo.with_trace`) when it exists; ``--no-trace`` leaves them out;
CARB's settings are ``conf/zoo_latency/default.yaml`` (schema :class:`carb.commands.schema.groups.ZooLatency`),
each overridable with ``--zoo-latency KEY=VALUE``: ``base`` (CARB's base law of a traced row,
:class:`carb.model.zoo_latency.AdditiveBase`: per-kind costs, non-negative; or ``loglinear``: the log-linear
base on published totals), ``trace_base`` (with ``base=loglinear``: memory-bound bytes and operation count in
it too), ``gemm_regimes`` (explicit matrix products, linear and matmul, priced by intensity regime,
:func:`carb.design.zoo_features.gemm_regimes`, not one cost per kind), ``amp_split`` (the memory-bound bytes
mixed precision moves at fp32 priced apart: fp32-list normalisations, element-wise operations reading a
parameter; :func:`carb.design.zoo_features.amp_memory_split`), ``sdpa_math_io`` (attention off the fused kernels
priced by every byte its math path moves, :func:`carb.model.zoo_latency.sdpa_math_bytes`), ``other_bytes`` (the
bytes of operations of no other kind priced too), the correction's features and LightGBM's settings;
its ``per_device`` section sets keys for one device kind (the CPU file's terms, :mod:`carb.model.zoo_latency_cpu`;
``--no-per-device`` leaves it out; a ``--zoo-latency`` key still wins; a dotted key sets a nested one:
``--zoo-latency per_device.cpu.cpu_terms=[extern_calls]``; every key is checked before any data loads);
``--reparam``: which graph of a reparameterisable model (RepVGG, MobileOne, RepViT, FastViT, LeViT, ...)
the features describe: by default the one each file was run on (timm's benchmark ``--reparam``; the
published parameter counts show the 4090 / 5090 / PRO 6000 files folded, the 3090 and i9 files not).

Prints each CPU zoo's per-family tables (every family, headed by its device), each GPU device's (``--table``:
every family; else the 10 worst by CARB's MAPE), a summary line per device, writes the figures to ``--out`` (JSON,
read by ``scripts/results.py``; each GPU device's entry holds its per-family ``table``, worst CARB MAPE first;
``--gpu-no-trace-too`` adds the GPU part without the layer-table features), then
the machine-readable last line:
``zoo: devices=N families=F models=M lofo_within20=W/F lofo_lat_mape_max=X lofo_lat_rho_min=X
lofo_mem_mape_max=X coverage_min=X b1_family_wins=W/F hj_family_wins=W/F trace_cold_s=X screen_s=X``
(F and W summed over devices' held-out families, latency, each CPU zoo a device; the max / min over devices
and families; coverage over latency and memory; models: distinct networks over all parts).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.analysis.zoo_eval import MODELS, evaluate_device  # noqa: E402
from carb.files import write_atomic  # noqa: E402
from carb.data.importers.timm_zoo import load_zoo_bench, with_census, with_trace  # noqa: E402


def device_block(name: str, table: pd.DataFrame, s: dict, every: bool) -> str:
    """The per-family table of one device (all families or the 10 worst) and its summary line."""
    cols = ["family", "models", "rows", "carb_mape_pct", "carb_rho", "b1_mape_pct", "hj_mape_pct",
            "hj_rho", "coverage", "hi_lo"] + (["carb_margin"] if "carb_margin" in table else [])
    t = table.sort_values("carb_mape_pct", ascending=False)[cols]
    t = t if every else t.head(10)
    head = (f"== {name}: {s['families']} families, {s['models']} models; pooled MAPE carb {s['carb_pooled_pct']:.1f} % "
            f"| hj {s['hj_pooled_pct']:.1f} % | b1 {s['b1_pooled_pct']:.1f} %; families within 20 %: carb "
            f"{s['within20']}/{s['families']}, hj {s['hj_within20_fams']}, b1 {s['b1_within20_fams']}; worst "
            f"{s['worst']} {s['mape_max']:.0f} % (hj worst {s['hj_mape_max']:.0f} %, b1 {s['b1_mape_max']:.0f} %); "
            f"rho_min {s['rho_min']:.2f}; beats b1 on {s['b1_wins']}, hj on {s['hj_wins']}; 90 % intervals "
            f"cover {s['coverage']:.3f} (families) / {s['coverage_rows']:.3f} (rows), median hi/lo {s['hi_lo']:.2f}")
    return head + "\n" + t.to_string(index=False, float_format=lambda v: f"{v:.2f}")


CPU_COLS = ["family", "models", "rows", "carb_mape_pct", "carb_rho", "carb_within20_pct", "b1_mape_pct",
            "b1_rho", "hj_mape_pct", "hj_rho", "coverage", "hi_lo"]


def cpu_block(target: str, table: pd.DataFrame, s: dict, device: str = "") -> str:
    """The CPU zoo's per-family table of ``target`` (every family, worst CARB MAPE first) and its summary;
    ``device``: the zoo's device (name and id) in the header."""
    cols = CPU_COLS[:4] + (["physics_mape_pct"] if "physics_mape_pct" in table else []) + CPU_COLS[4:]
    phys = (f" | physics (peak_live + params, no fit) {s['physics_pooled_pct']:.1f} %, worst "
            f"{s['physics_mape_max']:.1f} %" if "physics_pooled_pct" in s else "")
    head = (f"== CPU zoo{' ' + device if device else ''} {target}: {s['families']} families, {s['models']} models; "
            f"pooled MAPE carb "
            f"{s['carb_pooled_pct']:.1f} % | hj {s['hj_pooled_pct']:.1f} % | b1 {s['b1_pooled_pct']:.1f} %{phys}; "
            f"families within 20 %: carb {s['within20']}/{s['families']}, hj {s['hj_within20_fams']}, b1 "
            f"{s['b1_within20_fams']}; worst {s['worst']} {s['mape_max']:.1f} %; rho_min {s['rho_min']:.2f} "
            f"(families with >= 3 rows); beats b1 on {s['b1_wins']}, hj on {s['hj_wins']}; 90 % intervals cover "
            f"{s['coverage']:.3f} (families) / {s['coverage_rows']:.3f} (rows), median hi/lo {s['hi_lo']:.2f}")
    t = table.sort_values("carb_mape_pct", ascending=False)[cols]
    return head + "\n" + t.to_string(index=False, float_format=lambda v: f"{v:.2f}")


def registered(path: Path, overrides: list[str]):
    """A factory of :class:`carb.analysis.zoo_cpu_eval.RegisteredCascade` with the model, features and prior
    sections that ``carb-train data.path=<path> <overrides>`` composes."""
    from carb.analysis.zoo_cpu_eval import RegisteredCascade
    from carb.commands.cli import compose, to_dict

    cfg = compose("train", [f"data.path={path}", *overrides])
    model, features, prior = to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior)
    return lambda: RegisteredCascade(model, features, prior)


def screen_seconds(cpu: pd.DataFrame, make) -> tuple[float, int]:
    """(seconds, candidates) of a zoo screening after load: the shipped zoo list (``conf/space/zoo.yaml``)
    x 8 batch sizes x 3 precisions x 3 input sizes featurized from the cached layer tables, latency and
    memory predicted by the registered cascade (``make()`` fitted on ``cpu``, not timed), Pareto front of
    latency vs -top1. A first pass warms the layer-table cache (not timed)."""
    import yaml

    from carb.analysis.zoo_cpu_eval import usable
    from carb.analysis.zoo_screen import zoo_candidates
    from carb.design.arch import PRECISIONS
    from carb.analysis.scale import pareto_mask

    space = yaml.safe_load((ROOT / "conf/space/zoo.yaml").read_text())
    space |= {"mode": "grid", "max_flops": None, "batch_sizes": [1, 2, 4, 8, 16, 32, 64, 128],
              "precisions": list(PRECISIONS)[:3], "input_sizes": [128, 160, 224]}
    model = make().fit(usable(cpu))
    model.predict(zoo_candidates(space)[0])    # warm the layer-table caches
    t0 = time.perf_counter()
    cand, _ = zoo_candidates(space)
    pred = model.predict(cand)
    cand["latency_ms"] = pred["pred_latency_ms"].to_numpy(float)
    cand["peak_memory_MB"] = pred["pred_peak_memory_MB"].to_numpy(float)
    top1 = pd.to_numeric(cand["top1"], errors="coerce").fillna(0.0).to_numpy(float)
    pareto_mask(np.c_[cand["latency_ms"].to_numpy(float), -top1])
    return time.perf_counter() - t0, len(cand)


def cpu_part(path: Path, make) -> tuple[dict, pd.DataFrame]:
    """LOFO of the CPU zoo at ``path`` (latency and memory), CARB = ``make()`` (the registered cascade): prints
    the tables; returns the JSON part and the frame."""
    from carb.analysis.zoo_cpu_eval import evaluate_zoo

    cpu = pd.read_parquet(path)
    device = cpu_device(cpu)
    out = {"data": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path), "device": device,
           "device_id": str(cpu["device_id"].iloc[0]),
           "carb": "registered cascade (carb-train data.path=<data>), refitted per held-out family"}
    from carb.commands.cli import compose, to_dict

    floor = to_dict(compose("train", []).evaluate.memory_floor)   # memory intervals' floor, as carb-train's
    res = evaluate_zoo(cpu, make, progress=lambda f: print(f"  holding out {f}", file=sys.stderr, flush=True),
                       memory_floor=floor)
    for key, target in (("latency", "latency_ms"), ("memory", "peak_memory_MB")):
        table, s, _ = res[target]
        print(cpu_block(target, table, s, device), flush=True)
        out[key] = {"summary": s, "table": table.round(4).to_dict(orient="records")}
    return out, cpu


def cpu_device(cpu: pd.DataFrame) -> str:
    """A CPU zoo's device label: ``<device_name> <device_id>`` of its first row (a zoo is one device)."""
    return f"{cpu['device_name'].iloc[0]} {cpu['device_id'].iloc[0]}"


def cpu_zoo_paths(given: list[str] | None) -> list[Path]:
    """The CPU zoos to score: ``given`` (``--cpu-data``, paths or shipped names) or every shipped CPU zoo
    (:data:`carb.data.io.SHIPPED`'s ``zoo-cpu*`` names: the Zen 4 first). A missing file: one line, exit 2."""
    from carb.data.io import SHIPPED, resolve_path

    paths = [resolve_path(p) for p in given] if given else [SHIPPED[n] for n in SHIPPED if n.startswith("zoo-cpu")]
    for path in paths:
        if not Path(path).is_file():
            print(f"--cpu-data: {path} is not a file; allowed: a measured zoo parquet or a shipped name "
                  f"({', '.join(n for n in SHIPPED if n.startswith('zoo-cpu'))})", file=sys.stderr)
            raise SystemExit(2)
    return [Path(p) for p in paths]


def _checked_conf(path: Path, overrides: list[str], schema, flag: str, dotted: bool) -> dict:
    """The YAML at ``path`` with ``overrides`` (``KEY=VALUE``, the value read as YAML; ``dotted``: a dotted key
    sets a nested value) applied and checked against the pydantic ``schema``. A bad item, key or value: one
    line on stderr naming ``flag`` and what is allowed, exit 2."""
    import yaml
    from pydantic import ValidationError

    from carb.commands.schema.errors import error_line

    conf = yaml.safe_load(path.read_text())
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"{flag}: {item!r} is not KEY=VALUE; allowed keys: {', '.join(schema.model_fields)}",
                  file=sys.stderr)
            raise SystemExit(2)
        if dotted:
            _set_dotted(conf, key.strip(), yaml.safe_load(value))
        else:
            conf[key.strip()] = yaml.safe_load(value)
    try:
        schema.model_validate(conf)
    except ValidationError as e:
        print(f"{flag}: {error_line(schema, conf, e.errors()[0])}", file=sys.stderr)
        raise SystemExit(2) from None
    return conf


ZOO_LATENCY_CONF = ROOT / "conf" / "zoo_latency" / "default.yaml"


def zoo_latency_settings(overrides: list[str], path: Path = ZOO_LATENCY_CONF, device_kind: str | None = None) -> dict:
    """:class:`carb.model.zoo_latency.ZooLatencyModel`'s keyword settings: ``conf/zoo_latency/default.yaml``
    with ``overrides`` (``KEY=VALUE``, the value read as YAML) applied, checked against the group's schema
    (:class:`carb.commands.schema.groups.ZooLatency`). A bad key or value: one line naming it, exit 2.
    With ``device_kind`` (``cpu``, ``gpu``): the conf's ``per_device`` section of that kind on top (its keys
    set, ``cpu_terms`` among them; an ``overrides`` key still wins); the section itself is never a setting."""
    from carb.commands.schema.groups import ZooLatency

    conf = _checked_conf(path, overrides, ZooLatency, "--zoo-latency", dotted=True)
    conf.pop("cpu_parts", None)   # the layer-table columns' thresholds (cpu_part_settings), not a model setting
    per_device = conf.pop("per_device", None) or {}
    keys = {item.partition("=")[0].strip() for item in overrides}
    given = {k for k in keys if "." not in k and f"per_device.{device_kind}.{k}" not in keys}
    own = (per_device.get(device_kind) or {}) if device_kind else {}
    return conf | {k: v for k, v in own.items() if v is not None and k not in given}


def cpu_part_settings(overrides: list[str], path: Path = ZOO_LATENCY_CONF) -> dict[str, float]:
    """The thresholds of :func:`carb.model.zoo_latency_cpu.cpu_parts` (``conf/zoo_latency/default.yaml``'s
    ``cpu_parts``: ``low_reuse``, ``mid_reuse``, ``cache_MB``, ``spill_MB``, ``l2_MB``, ``wide_features``) with
    ``overrides`` (``cpu_parts.KEY=VALUE``) applied, the whole file checked against
    :class:`carb.commands.schema.groups.ZooLatency`. A bad key or value: one line naming it, exit 2."""
    from carb.commands.schema.groups import ZooLatency

    conf = _checked_conf(path, overrides, ZooLatency, "--zoo-latency", dotted=True)
    return {k: float(v) for k, v in conf["cpu_parts"].items()}


def _set_dotted(conf: dict, key: str, value: object) -> None:
    """Set ``conf``'s value at a dotted ``key`` (``per_device.cpu.cpu_terms``: the nested key; a missing or
    empty section made). A part that is a value, not a section: one line naming it, exit 2 (the schema checks
    the keys themselves)."""
    *parents, last = key.split(".")
    node = conf
    for i, part in enumerate(parents):
        if node.get(part) is None:
            node[part] = {}
        if not isinstance(node[part], dict):
            print(f"--zoo-latency: {'.'.join(parents[:i + 1])}: a value, not a section; allowed: "
                  f"{'.'.join(parents[:i + 1])}=VALUE", file=sys.stderr)
            raise SystemExit(2)
        node = node[part]
    node[last] = value


def gpu_part(args: argparse.Namespace, trace: bool) -> list[dict]:
    """LOFO on timm's files per device (with or without the layer-table features): prints the tables;
    returns each device's summary with its ``device``."""
    zoo = load_zoo_bench()
    if not args.no_census:
        zoo = with_census(zoo)
    if trace:
        zoo = with_trace(zoo, reparam=args.reparam)
    names = sorted(zoo["device_name"].astype(str).unique())
    if args.devices == "gpu":
        zoo = zoo[zoo["device_kind"] == "gpu"]
    elif args.devices != "all":
        if args.devices not in names:
            print(f"--devices: {args.devices!r} is not allowed; allowed: gpu, all, {', '.join(names)}", file=sys.stderr)
            raise SystemExit(2)
        zoo = zoo[zoo["device_name"] == args.devices]
    print(f"timm's files: CARB {'with' if trace else 'without'} the layer-table features", flush=True)
    if "tr_flops" in zoo.columns:
        print(f"trace features: {int(zoo['tr_flops'].notna().sum())}/{len(zoo)} rows", flush=True)
    if "tr_reparam" in zoo.columns:
        for dev, g in zoo.groupby("device_name", sort=True):
            print(f"  {dev}: reparameterised graph ({args.reparam}) on {int(g['tr_reparam'].sum())} rows "
                  f"({g.loc[g['tr_reparam'], 'model'].nunique()} models)", flush=True)
    settings = zoo_latency_settings(args.zoo_latency)
    print("CARB's zoo latency model: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    sums = []
    for dev, rows in zoo.groupby("device_name", sort=True):
        kind = None if args.no_per_device else str(rows["device_kind"].iloc[0])
        own = zoo_latency_settings(args.zoo_latency, device_kind=kind)   # per_device: the CPU file's terms
        if own != settings:
            diff = ", ".join(f"{k}={v}" for k, v in own.items() if settings.get(k) != v)
            print(f"  {dev} ({kind}): {diff}", flush=True)
        table, s = evaluate_device(rows, models=MODELS, settings=own)
        print(device_block(str(dev), table, s, args.table), flush=True)
        sums.append(device_entry(str(dev), rows, table, s, trace))
    return sums


def device_entry(device: str, rows: pd.DataFrame, table: pd.DataFrame, s: dict, trace: bool) -> dict:
    """One GPU-part device's JSON entry: its summary (:func:`carb.analysis.zoo_eval.device_summary`), whether
    trace features were used, ``reparam_rows`` (rows on the reparameterised graph, when joined) and the
    per-family ``table`` (:func:`carb.analysis.zoo_eval.family_table`, worst CARB MAPE first, 4 decimals)."""
    graph = {"reparam_rows": int(rows["tr_reparam"].sum())} if "tr_reparam" in rows.columns else {}
    worst_first = table.sort_values("carb_mape_pct", ascending=False).round(4)
    return {"device": device, "trace": trace, **s, **graph, "table": worst_first.to_dict(orient="records")}


def trace_cold(value: float | None) -> float:
    """``--trace-cold-s`` or the recorded measurement (``scripts/data/zoo_trace_bench.json``), seconds."""
    if value is not None:
        return value
    return float(json.loads((ROOT / "scripts/data/zoo_trace_bench.json").read_text())["trace_cold_s"])


def last_line(cpus: list[dict], gpu: list[dict], n_models: int, trace_s: float, screen_s: float) -> str:
    """The machine-readable last line over the CPU zoos (each a device: latency; memory's worst MAPE over
    them) and the GPU devices."""
    lat = [c["latency"]["summary"] for c in cpus] + gpu
    f = sum(s["families"] for s in lat)
    cov = [s["coverage"] for s in lat] + [c["memory"]["summary"]["coverage"] for c in cpus]
    mem = f"{max(c['memory']['summary']['mape_max'] for c in cpus):.1f}" if cpus else "nan"
    return (f"zoo: devices={len(lat)} families={f} models={n_models} "
            f"lofo_within20={sum(s['within20'] for s in lat)}/{f} "
            f"lofo_lat_mape_max={max(s['mape_max'] for s in lat):.1f} "
            f"lofo_lat_rho_min={min(s['rho_min'] for s in lat):.2f} lofo_mem_mape_max={mem} "
            f"coverage_min={min(cov):.3f} "
            f"b1_family_wins={sum(s['b1_wins'] for s in lat)}/{f} hj_family_wins={sum(s['hj_wins'] for s in lat)}/{f} "
            f"trace_cold_s={trace_s:.1f} screen_s={screen_s:.2f}")


def kept_gpu(path: Path, out: dict, models: set[str]) -> tuple[dict, list[dict], set[str]]:
    """For ``--part cpu``: ``out`` with the GPU keys (``gpu``, ``gpu_no_trace``, and ``gpu_command``: the command
    that made them) of the figures already saved at ``path`` (a file without them, or none: nothing kept), the saved GPU summaries and ``models`` with
    timm's networks when a GPU part was kept."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return out, [], models
    kept = {k: old[k] for k in ("gpu", "gpu_no_trace") if k in old}
    gpu = list(kept.get("gpu") or [])
    if kept and old.get("command"):   # the run that made the GPU part
        kept["gpu_command"] = old.get("gpu_command", old["command"])
    if gpu:
        models = models | set(load_zoo_bench()["model"].astype(str))
    return {**out, **kept}, gpu, models


ZOO_TRANSFER_CONF = ROOT / "conf" / "zoo_transfer" / "default.yaml"


def zoo_transfer_settings(overrides: list[str], path: Path = ZOO_TRANSFER_CONF) -> dict:
    """``conf/zoo_transfer/default.yaml`` with ``overrides`` (``KEY=VALUE``, YAML values), checked against
    :class:`carb.commands.schema.groups.ZooTransfer`; a bad key or value: one line naming it, exit 2."""
    from carb.commands.schema.groups import ZooTransfer

    return _checked_conf(path, overrides, ZooTransfer, "--zoo-transfer", dotted=False)


DEVICE_COLS = ["target", "networks", "families", "carb_k0_mape_pct", "carb_k0_rho", "carb_k0_within20",
               "carb_k0_mape_max", "carb_k0_worst", "carb_k{k}_mape_pct", "carb_k{k}_within20", "carb_k{k}_mape_max",
               "nearest_k0_mape_pct", "nearest_k0_within20", "nearest_k0_mape_max", "nearest_k{k}_mape_pct",
               "flops_k0_mape_pct", "flops_k{k}_mape_pct", "carb_k0_rho_fam_min", "alpha"]


def device_part(args: argparse.Namespace) -> tuple[dict, str]:
    """Leave-one-GPU-out zoo latency (and, with ``combined``, leave-one-GPU-and-family-out): prints the per-target
    tables; returns the JSON part and the ``zoo_device:`` line."""
    from carb.analysis import zoo_transfer_eval as ev
    from carb.model.zoo_latency import ZooLatencyModel

    settings = zoo_transfer_settings(args.zoo_transfer)
    print("zoo transfer: " + ", ".join(f"{k}={v}" for k, v in settings.items()), flush=True)
    zoo = load_zoo_bench()
    zoo = with_trace(with_census(zoo), reparam=args.reparam)
    records = ev.device_records(sorted(zoo.loc[zoo["device_kind"] == "gpu", "device_name"].astype(str).unique()))
    rows = ev.gpu_rows(zoo, records)
    own = zoo_latency_settings(args.zoo_latency, device_kind="gpu")
    make = lambda: ZooLatencyModel(**own)   # noqa: E731  each source's own zoo model
    k = int(settings["k"])
    table, preds = ev.evaluate(rows, records, make, settings)
    cols = [c.format(k=k) for c in DEVICE_COLS if c.format(k=k) in table.columns]
    print(f"== leave-one-GPU-out, {len(records)} GPUs (K=0 and K={k}; MAPE %, families within 20 %, worst family)")
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
    out: dict = {"settings": {k_: (None if v is None else v) for k_, v in settings.items()},
                 "logo": table.round(4).to_dict(orient="records")}
    band = ev.k0_band_coverage(rows, records, make, settings, preds)
    print("== K=0 90 % band of a new GPU (each target's band from the other GPUs' K=0 errors, predicted without "
          "the target)")
    print(band.to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
    out["k0_band"] = band.round(4).to_dict(orient="records")
    combined = None
    if settings["combined"]:
        combined, _ = ev.evaluate_combined(rows, records, make, settings,
                                           progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
        ccols = [c for c in combined.columns if not c.endswith("_rho_fam_min")]
        print(f"== leave-one-GPU-and-family-out (new GPU, new family; K=0 and K={k})")
        print(combined[ccols].to_string(index=False, float_format=lambda v: f"{v:.3f}"), flush=True)
        out["lgfo"] = combined.round(4).to_dict(orient="records")
    line = ev.summary_line(table, k, combined, band)
    out["line"] = line
    return out, line


# --- part cascade: the cascade carb-train fits on timm's files beside ZooLatencyModel (zcasc) ---------------

CASCADE_MODELS = ("cascade", "zoo", "hj", "b1")


class TimmCascade:
    """The cascade ``carb-train data=timm_zoo data.device=<device>`` fits (its model, features and prior
    sections as the command composes them: :func:`registered`), as a LOFO model of timm's benchmark rows:
    ``fit(rows)`` / ``predict(rows)`` take the benchmark rows (``source_row``) and read the converted zoo
    rows of the same lines (``zoo``: :func:`carb.data.importers.timm_zoo.as_zoo_dataset`'s frame with its
    ``source_row``), so both models fit and score the same rows. ``predict`` returns latency_ms per batch (n,)."""

    def __init__(self, make, zoo: pd.DataFrame):
        self.make, self.zoo = make, zoo.set_index("source_row", drop=False)

    def _rows(self, rows: pd.DataFrame) -> pd.DataFrame:
        return self.zoo.loc[rows["source_row"].astype(str).to_numpy()].reset_index(drop=True)

    fits = 0

    def fit(self, rows: pd.DataFrame) -> TimmCascade:
        TimmCascade.fits += 1
        print(f"  cascade fit {TimmCascade.fits} ({len(rows)} training rows)", file=sys.stderr, flush=True)
        train = self._rows(rows)
        self.model_ = self.make().fit(train.drop(columns="source_row"))
        return self

    def predict(self, rows: pd.DataFrame) -> np.ndarray:
        return self.model_.predict(self._rows(rows).drop(columns="source_row"))["pred_latency_ms"].to_numpy(float)


def cascade_rows(device: str, reparam: str, no_census: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, zoo)`` of one device: timm's benchmark rows with ``ZooLatencyModel``'s features (census and
    layer table joined, ``reparam`` graph) that both models can use (every :data:`carb.analysis.zoo_eval.NEEDED`
    value and the cascade's traced features), and the cascade's zoo rows of the same lines (``source_row``)."""
    from carb.analysis.zoo_eval import usable_rows
    from carb.data.importers.timm_zoo import as_zoo_dataset

    bench = load_zoo_bench()
    mine = bench[bench["device_name"] == device].reset_index(drop=True)
    zoo = as_zoo_dataset(device, mine, reparam=reparam)   # the same graph choice as ZooLatencyModel's rows
    zoo["source_row"] = zoo["source"].astype(str).str.removeprefix("timm:")
    zoo = zoo[zoo["flops"].notna().to_numpy()]   # a network the tracer refuses has no cascade features
    rows = mine if no_census else with_census(mine)
    rows = usable_rows(with_trace(rows, reparam=reparam))
    rows = rows[rows["source_row"].astype(str).isin(set(zoo["source_row"]))].reset_index(drop=True)
    return rows, zoo


def cascade_part(args: argparse.Namespace) -> tuple[dict, str]:
    """Leave-one-family-out of the cascade ``carb-train data=timm_zoo data.device=<device>`` fits beside
    ``ZooLatencyModel`` (``conf/zoo_latency``), Hidden Joules' regression and B1 on the same splits and rows
    (families: leading letters, >= 5 models, :func:`carb.analysis.zoo_eval.scored_families`; every other
    family's rows train), one device (``--devices``): prints the per-family table; returns the JSON part and
    the ``zoo_cascade:`` line."""
    from carb.analysis.zoo_eval import (bound_settings, family_table, grouped_predictions, lofo_predictions,
                                        nested_margin, scored_families)
    from carb.data.importers.timm_zoo import bench_devices
    from carb.model.zoo_latency import FlopsLogLog, HiddenJoulesRegression, ZooLatencyModel

    devices = bench_devices(load_zoo_bench())
    if args.devices not in devices:
        print(f"--devices: {args.devices!r} is not allowed with --part cascade; allowed: one device of "
              f"{', '.join(devices)}", file=sys.stderr)
        raise SystemExit(2)
    device = args.devices
    rows, zoo = cascade_rows(device, args.reparam, args.no_census)
    kind = str(rows["device_kind"].iloc[0])
    own = zoo_latency_settings(args.zoo_latency, device_kind=None if args.no_per_device else kind)
    make = registered_timm(device, args.train_override)
    fams = scored_families(rows)
    print(f"== {device}: {len(rows)} rows, {rows['model'].nunique()} models, {len(fams)} held-out families; "
          f"folded graph on {int(zoo['reparam'].sum())} cascade rows / {int(rows['tr_reparam'].sum())} zoo-model rows",
          flush=True)
    models = {"cascade": lambda: TimmCascade(make, zoo), "zoo": lambda: ZooLatencyModel(**own),
              "hj": HiddenJoulesRegression, "b1": FlopsLogLog}
    groups = family_groups(fams, args.folds)
    if len(groups) == len(fams):
        pred = lofo_predictions(rows, fams, models)
    else:
        print(f"   {len(groups)} folds of held-out families (--folds {args.folds}; each fold's families left out "
              "together, the same splits for every model)", flush=True)
        pred = grouped_predictions(rows, groups, models, progress=True)
    nested, outside = bound_settings(own)
    if nested:
        pred, _ = nested_margin(pred, model="zoo", outside=outside)
    table = family_table(pred, CASCADE_MODELS).sort_values("cascade_mape_pct", ascending=False)
    cols = ["family", "models", "rows"] + [f"{m}_{k}" for m in CASCADE_MODELS for k in ("mape_pct", "rho")]
    print(table[cols].to_string(index=False, float_format=lambda v: f"{v:.2f}"), flush=True)
    y = pred["latency_ms"].to_numpy(float)
    summ = {"device": device, "families": len(table), "rows": len(pred), "models": int(pred["model"].nunique()),
            "folds": len(groups), "train_overrides": list(args.train_override)}
    for m in CASCADE_MODELS:
        summ |= {f"{m}_within20": int((table[f"{m}_mape_pct"] <= 20).sum()),
                 f"{m}_pooled_pct": float(100 * np.mean(np.abs(pred[f"pred_{m}"].to_numpy(float) / y - 1))),
                 f"{m}_worst_pct": float(table[f"{m}_mape_pct"].max()),
                 f"{m}_worst": str(table.loc[table[f"{m}_mape_pct"].idxmax(), "family"]),
                 f"{m}_rho_min": float(table[f"{m}_rho"].min())}
    summ["cascade_wins"] = int((table["cascade_mape_pct"] < table["zoo_mape_pct"]).sum())
    f = summ["families"]
    line = (f"zoo_cascade: device={device.replace(' ', '_')} families={f} "
            f"cascade_within20={summ['cascade_within20']}/{f} zoo_within20={summ['zoo_within20']}/{f} "
            f"cascade_pooled={summ['cascade_pooled_pct']:.2f} zoo_pooled={summ['zoo_pooled_pct']:.2f} "
            f"cascade_worst={summ['cascade_worst_pct']:.1f} zoo_worst={summ['zoo_worst_pct']:.1f} "
            f"cascade_family_wins={summ['cascade_wins']}/{f}" + (f" folds={len(groups)}" if len(groups) != f else ""))
    return {"summary": summ, "table": table.round(4).to_dict(orient="records")}, line


def family_groups(families: list[str], folds: int) -> list[list[str]]:
    """``families`` (largest first) dealt round-robin into ``folds`` groups held out together; ``folds`` 0 or
    at least the number of families: one family per group (leave-one-family-out)."""
    if folds <= 0 or folds >= len(families):
        return [[f] for f in families]
    return [families[i::folds] for i in range(folds)]


def registered_timm(device: str, overrides: list[str]):
    """A factory of the cascade ``carb-train data=timm_zoo data.device=<device> <overrides>`` fits."""
    from carb.analysis.zoo_cpu_eval import RegisteredCascade
    from carb.commands.cli import compose, to_dict

    cfg = compose("train", ["data=timm_zoo", f"data.device={device}", *overrides])
    model, features, prior = to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior)
    return lambda: RegisteredCascade(model, features, prior)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="all", choices=["all", "cpu", "gpu", "device", "cascade"],
                    help="CPU zoo, timm's files, or both; device: a GPU never measured (leave-one-GPU-out); "
                         "cascade: carb-train's cascade on one device of timm's files beside ZooLatencyModel")
    ap.add_argument("--cpu-data", action="append", default=None,
                    help="a measured zoo parquet or shipped name, each its own device (repeatable; default: every "
                         "shipped CPU zoo, zoo-cpu and zoo-cpu-xeon)")
    ap.add_argument("--devices", default="all", help="gpu, all, or one device name (e.g. 'RTX 4090')")
    ap.add_argument("--no-census", action="store_true", help="leave the module census out of CARB's features")
    ap.add_argument("--no-trace", action="store_true", help="leave the layer-table features out of CARB's")
    ap.add_argument("--gpu-no-trace-too", action="store_true", help="also the GPU part without trace features")
    ap.add_argument("--zoo-latency", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of CARB's zoo latency model over conf/zoo_latency/default.yaml (repeatable; "
                         "e.g. gemm_regimes=false, amp_split=false, sdpa_math_io=false, base=loglinear; "
                         "a dotted key sets a nested one: per_device.cpu.cpu_terms=[extern_calls])")
    ap.add_argument("--zoo-transfer", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the device part over conf/zoo_transfer/default.yaml (repeatable; e.g. k=5, "
                         "correction=false, combined=false)")
    ap.add_argument("--no-per-device", action="store_true",
                    help="leave conf/zoo_latency/default.yaml's per_device section out (one setting for every device)")
    ap.add_argument("--reparam", default="published", choices=["published", "never", "always"],
                    help="which traced graph of a reparameterisable model: the one each timm file was run on "
                         "(its published parameter counts say), the plain training graph, or the folded one")
    ap.add_argument("--folds", type=int, default=0, help="--part cascade: hold the scored families out in this "
                                                           "many groups (0: one family at a time)")
    ap.add_argument("--table", action="store_true", help="print every family, not the 10 worst")
    ap.add_argument("--no-screen", action="store_true", help="skip the screening timing (screen_s=nan)")
    ap.add_argument("--trace-cold-s", type=float, default=None, help="trace_cold_s (default: the recorded file)")
    ap.add_argument("--train-override", action="append", default=[], metavar="KEY=VALUE",
                    help="a carb-train override for the CPU zoo's registered cascade (repeatable)")
    ap.add_argument("--out", default=None, help="JSON of the figures (default scripts/data/zoo_bench.json; "
                                                "--part device: scripts/data/zoo_device_bench.json)")
    args = ap.parse_args()
    for kind in (None, "cpu", "gpu"):   # a bad setting, whatever --part: one line, exit 2, before any part
        zoo_latency_settings(args.zoo_latency, device_kind=kind)   # with each kind's per_device section
    zoo_transfer_settings(args.zoo_transfer)
    args.out = args.out or str(ROOT / "scripts/data" / {"device": "zoo_device_bench.json",
                                                         "cascade": "zoo_cascade_bench.json"}.get(args.part,
                                                                                                  "zoo_bench.json"))
    t0 = time.perf_counter()
    own = {"cascade": cascade_part, "device": device_part}   # parts with their own figures and line
    if args.part in own:   # the zoo: line is not touched
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            part, line = own[args.part](args)
        res = {"command": " ".join(["python scripts/bench/zoo.py", *sys.argv[1:]]), args.part: part,
               "wall_s": round(time.perf_counter() - t0, 1)}
        write_atomic(Path(args.out), lambda p: p.write_text(json.dumps(res, indent=1, default=float) + "\n"))
        print(f"({time.perf_counter() - t0:.0f} s; figures in {args.out})")
        print(line)
        return
    out: dict = {"command": " ".join(["python scripts/bench/zoo.py", *sys.argv[1:]])}
    cpus, cpu_frame, make, gpu, models = [], None, None, [], set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if args.part in ("all", "cpu"):
            for path in cpu_zoo_paths(args.cpu_data):   # each CPU zoo its own device: its own fits and tables
                own = registered(path, args.train_override)
                cpu, frame = cpu_part(path, own)
                cpus.append(cpu)
                models |= set(frame["model_name"].astype(str))
                if cpu_frame is None:   # the first (Zen 4) is the JSON's ``cpu`` and the screening's data
                    cpu_frame, make = frame, own
            out["cpu"], out["cpus"] = cpus[0], cpus
        if args.part in ("all", "gpu"):
            gpu = gpu_part(args, trace=not args.no_trace)
            out["gpu"] = gpu
            models |= set(load_zoo_bench()["model"].astype(str)) if gpu else set()
            if args.gpu_no_trace_too and not args.no_trace:
                out["gpu_no_trace"] = gpu_part(args, trace=False)
        screen_s, n_cand = (float("nan"), 0) if args.no_screen or cpu_frame is None else screen_seconds(cpu_frame, make)
        if args.part == "cpu":   # keep the GPU part a previous run saved: the last line is over both
            out, gpu, models = kept_gpu(Path(args.out), out, models)
    print(f"screening: {n_cand} candidates in {screen_s:.2f} s after load")
    trace_s = trace_cold(args.trace_cold_s)
    line = last_line(cpus, gpu, len(models), trace_s, screen_s)
    out |= {"screen_s": screen_s, "screen_candidates": n_cand, "trace_cold_s": trace_s, "last_line": line,
            "wall_s": round(time.perf_counter() - t0, 1)}
    write_atomic(Path(args.out), lambda p: p.write_text(json.dumps(out, indent=1, default=float) + "\n"))
    print(f"({time.perf_counter() - t0:.0f} s; figures in {args.out})")
    print(line)


if __name__ == "__main__":
    main()
