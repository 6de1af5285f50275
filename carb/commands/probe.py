"""``carb-probe``: measure this CPU's device probe (single convolutions and operations per precision).

    carb-probe                                   # the reference space's layers, every precision, 400 pairs each
    carb-probe space=screening n=200 precisions=[fp32,fp16]

Precisions: ``precisions`` as given, or (null) every precision of the precision table
(:data:`carb.design.arch.PRECISIONS`: fp32, fp16 and bf16), so that the probe covers whatever a source
model predicts (``carb-calibrate probe=true`` asks for the source model's own precisions);
:func:`carb.data.probes.missing_precisions` says which a probe lacks.

The pairs (layer, batch) are drawn from the distinct convolutions of the space's networks
(:func:`carb.measure.probe.probe_plan`), and ``ops.per_kind`` operations of each other kind (depthwise,
grouped and pointwise convolutions, linear, matmul, attention, element-wise, activation, norm) from the
zoo's operation catalog (:func:`carb.measure.probe.op_plan`, :data:`carb.data.probes.OP_CATALOG`); all are
timed at each precision with the ``measure`` preset's torch threads and allocator
(:func:`carb.measure.probe.run_probe`). The table goes to ``<carb home>/probes/<device_id>.csv`` (``out``),
replacing that device's earlier probe, with a
provenance JSON beside it, and logged as an MLflow run (experiment ``carb-probe``: the plan, median GMAC/s
per precision, the table and a figure of the rates); ``carb-train`` then predicts a precision the device's dataset lacks from it
(``prior.device_probe``, :mod:`carb.model.layer_cost`). Run it alone on an idle machine.
"""
from __future__ import annotations

import json
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb import tracking
from carb.commands.cli import (
    finished_work,
    hydra_command,
    kept_if_logging_fails,
    sweep_suffix,
    sweep_tags,
    to_dict,
)
from carb.commands.progress import Progress
from carb.errors import ConfigError


def probe_precisions(given: Any) -> list[str]:
    """The precisions to time: ``given`` (a list) as it is, or every precision of
    :data:`carb.design.arch.PRECISIONS` for None or an empty list; one-line :class:`ConfigError` for one
    outside them."""
    from carb.design.arch import PRECISIONS, TORCH_DTYPES

    precisions = [str(p) for p in given] if given else list(PRECISIONS)
    bad = [p for p in precisions if p not in TORCH_DTYPES]
    if bad:
        raise ConfigError(f"precisions: {bad} not allowed; allowed: {list(TORCH_DTYPES)}")
    return precisions


def space_frame(space: dict[str, Any]) -> tuple[pd.DataFrame, list[str]]:
    """The knob rows of the space's configurations and its precisions (sorted)."""
    from carb.design.arch import KNOBS
    from carb.design.space import configs_from_cfg

    configs = configs_from_cfg(space)
    frame = pd.DataFrame([{k: getattr(c, k) for k in KNOBS} for c in configs])
    return frame, sorted(frame["precision"].astype(str).unique())


def run_probe_command(cfg: Any) -> dict[str, Any]:
    """Plan, time and write the probe; returns ``{"out", "device_id", "rows", "precisions"}``."""
    from carb.data.probes import conv_rows, for_csv, user_probe_path, with_op_columns
    from carb.measure.cpu import pin_malloc
    from carb.measure.fingerprint import device_id, read_cpu_fingerprint, session_id
    from carb.measure.probe import probe_plan, run_probe, space_layers, torch_threads_and_version
    from carb.files import write_atomic

    frame, _ = space_frame(to_dict(cfg.space))
    precisions = probe_precisions(cfg.get("precisions"))
    threads, torch_version = torch_threads_and_version(cfg.measure.get("threads"))
    mmap = cfg.measure.get("malloc_mmap_threshold_MB")
    allocator = pin_malloc(int(mmap)) if mmap else None
    fp = read_cpu_fingerprint(threads)
    dev = device_id(fp)
    plan = probe_plan(space_layers(frame), int(cfg.n), int(cfg.seed), float(cfg.max_MMAC))
    ops = probe_ops(cfg)
    oplan = ops_plan(ops, int(cfg.seed))
    out = Path(cfg.out) if cfg.get("out") else user_probe_path(dev)
    refuse_unwritable(out, dev)   # before measuring: a minute of timings that cannot be kept is lost work
    total = (len(plan) + len(oplan)) * len(precisions)
    prog = Progress.from_cfg("carb-probe", float(total), cfg)
    print(f"carb-probe: device {dev} ({fp.get('model_name')}), {threads} thread(s): {len(plan)} layers + "
          f"{len(oplan)} other operations x {len(precisions)} precisions ({', '.join(precisions)}) of space "
          f"{cfg.space.name!r} -> {out}", flush=True)
    plan = pd.concat([plan.assign(kind="conv_regular", op="convolution", groups=1), oplan], ignore_index=True) \
        if len(oplan) else plan
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    probe = run_probe(plan, precisions, dev, threads=threads, repeats=int(cfg.repeats),
                      min_window_s=float(cfg.min_window_s),
                      progress=lambda done, _total: prog.advance(f"{done}/{total} timings"))
    probe = with_op_columns(probe)
    refuse_empty(probe, dev, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    old = pd.read_csv(out) if out.exists() else probe.iloc[:0]
    merged = for_csv(pd.concat([old[old["device_id"].astype(str) != dev], probe], ignore_index=True))
    write_atomic(out, lambda tmp: merged.to_csv(tmp, index=False, float_format="%.6g"))
    prov = {"what": "single-convolution and operation timings per precision by carb-probe (carb.measure.probe)",
            "device_id": dev, "fingerprint": fp, "session_id": session_id(), "torch_version": torch_version,
            "python": platform.python_version(), "allocator": allocator, "threads": threads,
            "measured_from": started, "measured_to": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "rows": len(probe), "space": str(cfg.space.name),
            "plan": {"n": int(cfg.n), "seed": int(cfg.seed), "max_MMAC": float(cfg.max_MMAC), "ops": ops},
            "rows_per_kind": probe["kind"].value_counts().to_dict(),
            "backends": {p: conv_rows(probe)[conv_rows(probe)["precision"] == p]["backend"].value_counts().to_dict()
                         for p in precisions}}
    text = json.dumps(prov, indent=2, sort_keys=True) + "\n"
    write_atomic(out.with_suffix(".provenance.json"), lambda tmp: tmp.write_text(text))
    finished_work(out)
    with kept_if_logging_fails(f"the {len(probe)} timings of device {dev} are saved in {out} (carb-train uses "
                               f"them as they are)", (cfg.get("tracking") or {}).get("uri")):
        run_id = log_probe(cfg, probe, prov, out)
    prog.finish(f"{len(probe)} timings written")
    print(f"carb-probe: {len(probe)} timings of device {dev} -> {out} (MLflow run {run_id})")
    from carb.commands.cli import say_run_page

    say_run_page(run_id, (cfg.get("tracking") or {}).get("uri"))
    return {"out": str(out), "device_id": dev, "rows": len(probe), "precisions": precisions, "run_id": run_id}


def probe_ops(cfg: Any) -> dict[str, Any]:
    """The ``ops`` plan settings of a probe config (:class:`carb.commands.schema.commands.ProbeOps`; its
    defaults where the config has none, as ``carb-calibrate``'s ``probe_run`` of older configs)."""
    from carb.commands.schema.commands import ProbeOps

    ops = cfg.get("ops")
    return ProbeOps(**(to_dict(ops) if ops else {})).model_dump()


def ops_plan(ops: dict[str, Any], seed: int) -> pd.DataFrame:
    """:func:`carb.measure.probe.op_plan` of the shipped operation catalog (:data:`carb.data.probes.OP_CATALOG`)
    with the ``ops`` settings; empty for ``per_kind`` 0."""
    from carb.data.probes import load_op_catalog
    from carb.measure.probe import op_plan

    if int(ops["per_kind"]) <= 0:
        return op_plan(None, 0)
    return op_plan(load_op_catalog(), int(ops["per_kind"]), seed, float(ops["max_MMAC"]), float(ops["max_MB"]))


def refuse_unwritable(out: Path, dev: str) -> None:
    """One-line :class:`ConfigError` (exit 2) when the probe table ``out`` (and its provenance beside it)
    cannot be written, said before any timing is taken (:func:`carb.files.unwritable` on its folder)."""
    from carb.files import unwritable

    why = unwritable(out.parent)
    if why is None and out.exists() and not out.is_file():
        why = f"{out} is a folder"
    if why:
        raise ConfigError(f"out: the probe of device {dev} would go to {out}, but {why}; nothing was measured "
                          f"(make that folder writable, set CARB_HOME=<a writable folder>, or give "
                          f"carb-probe out=<a writable .csv>)")


def refuse_empty(probe: pd.DataFrame, dev: str, out: Path) -> None:
    """:class:`MeasurementError` (one line) instead of replacing the device's probe in ``out`` with an empty
    table or one holding a timing that is not a finite positive number of ms."""
    from carb.errors import MeasurementError

    t = pd.to_numeric(probe["time_ms"], errors="coerce") if "time_ms" in probe else pd.Series([], dtype=float)
    if not len(probe) or not (np.isfinite(t) & (t > 0)).all():
        bad = len(probe) - int((np.isfinite(t) & (t > 0)).sum())
        raise MeasurementError(f"carb-probe measured {len(probe)} timings, {bad} of them not a finite positive time; "
                               f"{out} keeps device {dev}'s earlier probe (run again on an idle machine)")


def log_probe(cfg: Any, probe: pd.DataFrame, prov: dict[str, Any], out: Path) -> str:
    """One MLflow run in experiment ``carb-probe``: the plan as params, the median GMAC/s per precision as
    metrics (``probe_<precision>_gmac_per_s``), the provenance, the table and the figure
    (:func:`carb.plots.probe.probe_figure`). Returns the run id."""
    from carb.data.probes import conv_rows
    from carb.design.shapes import layer_array
    from carb.plots.probe import probe_figure

    every, probe = probe, conv_rows(probe)   # the rates are of the regular convolutions
    a = layer_array(probe)
    gmac = a[:, 0] * a[:, 1] * a[:, 2] * probe["batch_size"].to_numpy(float) / 1e6 / probe["time_ms"].to_numpy(float)
    dev = prov["device_id"]
    tr = cfg.get("tracking") or {}
    with tracking.start_run("probe", cfg.get("run_name") or sweep_suffix(f"probe/{cfg.space.name}/{dev}"),
                            tracking_uri=tr.get("uri"), artifact_root=tr.get("artifact_root"),
                            tags={"device_id": dev, "device": str(prov["fingerprint"].get("model_name"))},
                            sweep=sweep_tags()) as run_id:
        tracking.log_params({"space": str(cfg.space.name), "plan": prov["plan"], "threads": prov["threads"],
                             "precisions": ",".join(sorted(probe["precision"].unique())), "out": str(out)})
        tracking.log_metrics({f"probe_{p}_gmac_per_s": float(np.median(gmac[(probe["precision"] == p).to_numpy()]))
                              for p in probe["precision"].unique()} | {"probe_rows": len(every)})
        tracking.log_dict(prov, "provenance.json")
        tracking.log_artifact(out, "probe")
        tracking.log_figure(probe_figure(probe, f"device probe of {dev}: {len(probe)} convolution timings"),
                            "figures/probe_rates.png")
    return run_id


main = hydra_command("probe")(run_probe_command)

if __name__ == "__main__":
    main()
