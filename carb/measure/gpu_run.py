"""The GPU collector for a lent machine: measure as many configurations of the `paper` space (or, with
``--space zoo``, of the model zoo) as fit, with energy, within a hard deadline, and bring back at most 8 flat
files.

    python -m carb.measure.gpu_run --minutes 7 --out DIR
    python -m carb.measure.gpu_run --minutes 6.5 --space zoo --out DIR          # zoo networks (carb.measure.gpu_zoo)
    python -m carb.measure.gpu_run --minutes 0.5 --out /tmp/dry --fake-device     # dry run on a CPU

Self-contained: it imports only the standard library, torch, pynvml (package nvidia-ml-py), numpy,
pandas, pyarrow, pyyaml and CARB modules that need nothing else (no Hydra, no MLflow, no fvcore, no
boosting libraries; ``tests/test_gpu_run.py`` runs it with those blocked), so a bare machine with those
packages and a copy of the repository (or of the package) runs it. It never changes clocks or power
limits. Files written into ``--out`` (flat):

    dataset.parquet     the rows (CARB schema; rewritten atomically every few rows)
    counter_trace.csv   the energy counter as polled while its update period was measured (t_s, mJ)
    period.json         the counter's measured update period
    provenance.json     device facts, fingerprint and device_id, settings, counts, timings, drift
    run.log             what happened, with timestamps

Protocol (:mod:`carb.measure.sweep`, settings in ``conf/gpu_run.yaml``, read with pyyaml): the update
period first; then architectures in a seeded shuffled order, each built once and swept over its precisions, input
sizes and batch sizes; a window of ``max(k x period, m x latency)`` per configuration with energy from
the counter's update edges; telemetry from the same window; no sleeps. It stops starting
configurations ``margin_s`` before the deadline and skips any configuration predicted not to fit; a
sticky CUDA error ends the run with what it has. ``--fake-device`` runs the same code on the CPU with
a fake counter (:mod:`carb.measure.fake_gpu`; dry runs, tests). Back home: ``carb-import importer=gpu_run
importer.path=DIR out=<dataset>`` (keeps the files with ``importer.keep``, appends a later run of the same
device) or ``carb-collect import_run=DIR out=<dataset>``; then ``carb-train data.path=<dataset>``.

``--space zoo`` (:mod:`carb.measure.gpu_zoo`): the zoo space's model names with the knobs of the settings'
``zoo`` block, each name checked against this machine's torchvision and timm first (a name they lack is
refused with its reason, in ``provenance.json``'s ``refused`` and ``run.log``, never a crash); rows in the zoo
schema (:mod:`carb.data.zoo_schema`), static features from the layer table; the same protocol, files and
import. It also needs timm and torchvision there.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import platform
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from carb.resources import CONF_DIR

FILES = ("dataset.parquet", "counter_trace.csv", "period.json", "provenance.json", "run.log")


class Log:
    """Timestamped lines to run.log and stdout."""

    def __init__(self, path: Path, t0: float) -> None:
        self.path, self.t0 = path, t0
        self.fh = open(path, "a", buffering=1)

    def __call__(self, msg: str) -> None:
        line = f"[{datetime.now(timezone.utc).strftime('%H:%M:%S')} +{time.perf_counter() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self.fh.write(line + "\n")


def open_device(fake: bool):
    """``(ops, gpu, facts)``: the real CUDA ops and NVML device, or the CPU fakes."""
    if fake:
        from carb.measure.fake_gpu import CpuOps, FakeGpu

        ops, gpu = CpuOps(), FakeGpu()
        facts = {**ops.facts(), "driver": gpu.driver_version(), "power_limit_W": gpu.power_limit_W(), "clocks": {}}
        return ops, gpu, facts
    from carb.measure.cuda import TorchCudaOps
    from carb.measure.nvml import NvmlDevice

    ops = TorchCudaOps(0)
    gpu = NvmlDevice(0, uuid=ops.uuid())
    gpu.check_energy_support()
    facts = {**ops.facts(), "driver": gpu.driver_version(), "power_limit_W": gpu.power_limit_W(),
             "clocks": {"at_start": gpu.clocks_MHz(), "application": gpu.application_clocks_MHz(),
                        "locked_sm_MHz": None, "locked_mem_MHz": None}}
    return ops, gpu, facts


def probe_period(ops, gpu, sampler, seconds: float, fake: bool) -> float:
    """Keep the device busy for ``seconds`` while the sampler polls; return the median update period (s)."""
    import torch

    t_end = time.perf_counter() + seconds
    if fake:
        while time.perf_counter() < t_end:
            time.sleep(0.01)
    else:
        a = torch.randn(4096, 4096, device=ops.device)
        while time.perf_counter() < t_end:
            a = (a @ a).clamp_(-1, 1)
            ops.sync()
    return sampler.update_period_s()


def static_of(configs):
    """Closed-form static features per config_id (no fvcore on the device)."""
    from carb.design.features import STATIC_FEATURES, grid_features

    g = grid_features(list(configs))
    return {cid: {k: r[k] for k in STATIC_FEATURES} for cid, r in zip(g["config_id"], g.to_dict("records"))}


def _config_and_model(r: dict, zoo: bool) -> tuple[Any, Any]:
    """The configuration of a measured row and its network on the CPU in fp32 (ResNet or zoo)."""
    if zoo:
        from carb.measure.gpu_zoo import build, config_of

        c = config_of(r)
        return c, build(c)
    from carb.design.arch import KNOB_DEFAULTS, KNOBS, configs_from_records
    from carb.design.resnet import build_model

    # the record's knobs but those with a default (the inner width: 1.0), as the re-measure always read them
    (c,) = configs_from_records([{k: r[k] for k in KNOBS if k not in KNOB_DEFAULTS}])
    return c, build_model(c)


def remeasure_drift(rows: list[dict], n: int, until: float, ops, gpu, sampler, s, period: float, log,
                    zoo: bool = False) -> dict:
    """Measure the first ``n`` ok configurations again if time allows (until ``until``): the ratio new /
    first of latency and energy per batch tells whether the device drifted (heat, clocks) over the run."""
    import torch

    from carb.design.arch import TORCH_DTYPES
    from carb.measure.sweep import measure_config

    done = [r for r in rows if r["status"] == "ok"][:n]
    lat, en = [], []
    for r in done:
        if time.perf_counter() + 3 * s.warmup_s + 10 * r["latency_ms"] / 1e3 + 1.0 > until:
            break
        c, model = _config_and_model(r, zoo)
        model = model.to(device=ops.device, dtype=getattr(torch, TORCH_DTYPES[c.precision])).eval()
        x = torch.randn(c.batch_size, 3, c.input_size, c.input_size, dtype=next(model.parameters()).dtype,
                        device=ops.device)
        m = measure_config(model, x, ops, gpu, sampler, s, period)
        lat.append(m["latency_ms"] / r["latency_ms"])
        if math.isfinite(m["energy_J"]) and math.isfinite(r["energy_J"]):
            en.append(m["energy_J"] / r["energy_J"])
        del model
        ops.empty_cache()

    def med(v):
        return sorted(v)[len(v) // 2] if v else float("nan")

    out = {"n": len(lat), "latency_ratio_median": med(lat), "energy_ratio_median": med(en),
           "latency_ratios": lat, "energy_ratios": en}
    log(f"drift check: {len(lat)} configs re-measured, latency ratio median {out['latency_ratio_median']:.3f}, "
        f"energy ratio median {out['energy_ratio_median']:.3f}")
    return out


def write_dataset(rows: list[dict], out: Path) -> None:
    """Validate (against the ResNet or the zoo schema, by the rows' columns) and write the rows atomically."""
    from carb.data.io import validate_dataset, write_frame

    if rows:
        write_frame(validate_dataset(pd.DataFrame(rows), source="gpu run"), out / "dataset.parquet")


@dataclass
class Run:
    """One run's state: where it writes, its settings and device, and what it measured so far."""

    out: Path
    log: Log
    cfg: dict[str, Any]
    settings: Any                     # carb.measure.sweep.SweepSettings
    fake: bool
    ops: Any = None
    gpu: Any = None
    facts: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, str] = field(default_factory=dict)
    sampler: Any = None               # carb.measure.counter.CounterSampler
    period_s: float = math.nan        # the energy counter's update period
    rows: list[dict] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "oom": 0, "error": 0, "skipped": 0})
    stopped: str = "complete"
    kernels: dict[tuple, float] = field(default_factory=dict)
    zoo: bool = False                 # named networks (carb.measure.gpu_zoo), not ResNet knobs
    refused: dict[str, str] = field(default_factory=dict)   # zoo names this machine cannot build: reason


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description="CARB's GPU collector for a lent machine (see the module docstring)")
    ap.add_argument("--minutes", type=float, default=7.0, help="total budget, start-up included")
    ap.add_argument("--out", required=True, help="folder for the (at most 8, flat) result files")
    ap.add_argument("--config", default=str(CONF_DIR / "gpu_run.yaml"),
                    help="settings (pyyaml; default conf/gpu_run.yaml)")
    ap.add_argument("--fake-device", action="store_true", help="CPU + fake energy counter (dry runs, tests)")
    ap.add_argument("--space", default=None,
                    help="the space to measure: a conf/space name (default: the settings file's `space`); "
                         "'zoo' measures the named networks of the settings' `zoo` block")
    ap.add_argument("--seed", type=int, default=None,
                    help="shuffle seed of the architecture order (default: the settings file's); another seed "
                         "measures other architectures first (seed 0 was measured on 2026-12-04)")
    return ap.parse_args(argv)


def load_settings(path: str) -> tuple[dict[str, Any], Any]:
    """The settings file (pyyaml) and its protocol as :class:`carb.measure.sweep.SweepSettings`; a missing,
    unreadable or wrong file is one ``ValueError`` line naming the file or the setting."""
    from carb.measure.sweep import SweepSettings

    try:
        cfg = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"--config {path}: cannot read the settings ({type(exc).__name__})") from exc
    if not isinstance(cfg, dict):
        raise ValueError(f"--config {path}: must be a mapping of settings (see conf/gpu_run.yaml)")
    try:
        return cfg, SweepSettings.from_mapping(cfg.get("protocol") or {})
    except TypeError as exc:
        raise ValueError(f"protocol: {exc}") from exc


def start(a: argparse.Namespace, t_start: float, cfg: dict[str, Any], settings: Any) -> Run:
    """Open the output folder, the log, the settings and the device; start the energy-counter sampler and
    measure its update period (writes ``counter_trace.csv`` and ``period.json``)."""
    import torch

    from carb.measure.counter import CounterSampler
    from carb.measure.fingerprint import canonical_json, device_id, gpu_fingerprint, protocol_id, session_id
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / "run.log", t_start)
    r = Run(out=out, log=log, cfg=cfg, settings=settings, fake=a.fake_device, zoo=is_zoo(cfg))
    r.ops, r.gpu, r.facts = open_device(a.fake_device)
    fp = r.fingerprint = gpu_fingerprint(r.facts)
    did = device_id(fp)
    r.identity = {"device_name": str(r.facts.get("device_name")), "device_kind": "cpu" if a.fake_device else "cuda",
                  "driver": str(r.facts.get("driver")), "torch_version": torch.__version__, "device_id": did,
                  "device_fingerprint": canonical_json(fp), "protocol_id": protocol_id(vars(r.settings), did)}
    boot = session_id()
    if boot:   # the boot these rows share (carb.data.schema: session_id)
        r.identity["session_id"] = boot
    log(f"device {r.identity['device_name']} ({did}), budget {a.minutes} min, out {out}")
    side = {"sm": lambda: r.gpu.utilization_pct()[0], "mem": lambda: r.gpu.utilization_pct()[1],
            "temp": r.gpu.temperature_C}
    r.sampler = CounterSampler(r.gpu.read_energy_mJ, poll_s=r.settings.poll_s, side=side, keep_trace=True).start()
    r.period_s = record_period(r)
    return r


def record_period(r: Run) -> float:
    """Measure the counter's update period under load, write the trace and ``period.json``; returns the
    period in seconds (0.1 when it could not be measured)."""
    s = r.settings
    period = probe_period(r.ops, r.gpu, r.sampler, float(r.cfg.get("period_probe_s", 1.5)), r.fake)
    r.sampler.keep_trace = False          # the poller thread keeps running: stop the trace, then copy it
    trace = list(r.sampler.trace)         # (pandas read the live list while it grew: a length mismatch)
    pd.DataFrame(trace, columns=["t_s", "energy_mJ"]).to_csv(r.out / "counter_trace.csv", index=False)
    (r.out / "period.json").write_text(json.dumps({"update_period_s": period, "n_edges": len(r.sampler.edges),
                                                   "poll_s": s.poll_s, "probe_s": r.cfg.get("period_probe_s")},
                                                  indent=1))
    r.log(f"energy counter update period {1e3 * period:.1f} ms ({len(r.sampler.edges)} edges)")
    return period if math.isfinite(period) else 0.1


def is_zoo(cfg: dict[str, Any]) -> bool:
    """Whether the settings' ``space`` is the zoo (``--space zoo``): named networks, :mod:`carb.measure.gpu_zoo`."""
    return str(cfg.get("space", "paper")) == "zoo"


def plan(r: Run, seed: int | None, zoo_plan: tuple[list[list[Any]], dict[str, str]] | None = None
         ) -> tuple[list[list[Any]], dict[str, dict], Any]:
    """``(groups, static, latency model)``: the space's configurations shuffled with the seed and grouped
    by architecture, their closed-form static features, and the deadline's latency model. The zoo's
    (``zoo_plan``, made by :func:`carb.measure.gpu_zoo.zoo_plan` when not given): the refused names in
    ``r.refused``, static features filled per group as it starts (:func:`sweep`)."""
    from carb.measure.sweep import LatencyModel, group_by_architecture

    if seed is not None:
        r.cfg["seed"] = int(seed)
    prior = r.cfg.get("latency_prior") or {}
    lat_model = LatencyModel(prior_rate=float(prior.get("rate_flops_per_ms", 2e10)),
                             prior_a_ms=float(prior.get("a_ms", 1.0)), safety=float(prior.get("safety", 1.5)))
    if r.zoo:
        from carb.measure.gpu_zoo import zoo_plan as make_zoo_plan

        groups, refused = zoo_plan or make_zoo_plan(r.cfg, int(r.cfg.get("seed", 0)))
        r.refused = dict(refused)
        for m, why in r.refused.items():
            r.log(f"refused {m}: {why}")
        r.log(f"zoo plan: {sum(map(len, groups))} configurations of {len(groups)} networks, "
              f"{len(r.refused)} names refused")
        return groups, {}, lat_model
    from carb.design.space import configs_from_cfg, space_config
    from carb.measure.collector import shard_configs

    space = space_config(str(r.cfg.get("space", "paper")))
    configs = shard_configs(configs_from_cfg(space), int(r.cfg.get("seed", 0)))
    return group_by_architecture(configs), static_of(configs), lat_model


def _flops(r: Run, c: Any, static: dict[str, Any]) -> float:
    """FLOPs the deadline's latency model takes for ``c`` (a zoo network the tracer refused: a stand-in)."""
    if r.zoo:
        from carb.measure.gpu_zoo import deadline_flops

        return deadline_flops(static, c.batch_size)
    return float(static["flops"])


def sweep(r: Run, groups: list[list[Any]], static: dict[str, dict], lat_model: Any, stop_at: float) -> None:
    """Measure architecture after architecture until the deadline (``stop_at``, perf_counter seconds) or a
    sticky CUDA error; configurations predicted not to fit are skipped."""
    from carb.measure.sweep import expected_seconds

    build_s = float(r.cfg.get("build_s", 0.5))
    for gi, group in enumerate(groups):
        if time.perf_counter() > stop_at:
            r.stopped = "deadline"
            break
        if r.zoo:   # the layer table's features, traced as the group starts (cached on disk)
            from carb.measure.gpu_zoo import static_for

            static.update(static_for(group, r.log))
        todo = [c for c in group if time.perf_counter() + build_s + expected_seconds(
            lat_model.predict_ms(c.precision, _flops(r, c, static[c.config_id])), r.period_s, r.settings) < stop_at]
        r.counts["skipped"] += len(group) - len(todo)
        if not todo:
            continue
        sweep_architecture(r, todo, static, lat_model, stop_at)
        if r.stopped == "cuda-error":
            break
        if gi % 10 == 0:
            r.log(f"{gi + 1}/{len(groups)} architectures, {r.counts['ok']} ok, {r.counts['oom']} oom, "
                  f"{r.counts['error']} error, {r.counts['skipped']} skipped")


def sweep_architecture(r: Run, todo: list[Any], static: dict[str, dict], lat_model: Any, stop_at: float) -> None:
    """One architecture, built once, over its precisions, input sizes and batch sizes (``todo``, sorted)."""
    import torch

    from carb.design.arch import TORCH_DTYPES
    from carb.measure.sweep import expected_seconds

    base = build_network(r, todo[0])
    if base is None:
        return
    for prec in sorted({c.precision for c in todo}):
        model = copy.deepcopy(base).to(device=r.ops.device, dtype=getattr(torch, TORCH_DTYPES[prec])).eval()
        for c in [c for c in todo if c.precision == prec]:
            if time.perf_counter() + expected_seconds(lat_model.predict_ms(prec, _flops(r, c, static[c.config_id])),
                                                      r.period_s, r.settings) > stop_at:
                r.counts["skipped"] += 1
                continue
            if not measure_one(r, model, c, static[c.config_id], lat_model):
                return
        del model
        r.ops.empty_cache()


def build_network(r: Run, c: Any) -> Any:
    """The network of configuration ``c`` on the CPU in fp32: the ResNet of its knobs, or the zoo network
    (:func:`carb.measure.gpu_zoo.build`). A zoo network this machine's library cannot build is refused
    (``r.refused``, one log line, its configurations counted ``skipped``) and None is returned."""
    if not r.zoo:
        from carb.design.resnet import build_model

        return build_model(c)
    from carb.errors import ZooError
    from carb.measure.gpu_zoo import build

    try:
        return build(c)
    except ZooError as e:
        r.refused[c.model_name] = str(e)
        r.log(f"refused {c.model_name}: {e}")
        return None


def measure_one(r: Run, model: Any, c: Any, static: dict[str, Any], lat_model: Any) -> bool:
    """Measure configuration ``c`` on the prepared ``model`` and append its row (ok, oom or error); False
    after a sticky CUDA error (``r.stopped = "cuda-error"``, no row)."""
    import torch

    from carb.measure.base import is_oom
    from carb.measure.collector import error_line, make_row
    from carb.measure.sweep import is_sticky, measure_config, render_reasons

    status, err, measured = "ok", None, None
    try:
        x = torch.randn(c.batch_size, 3, c.input_size, c.input_size, dtype=next(model.parameters()).dtype,
                        device=r.ops.device)
        measured = measure_config(model, x, r.ops, r.gpu, r.sampler, r.settings, r.period_s)
        measured["kernel_launches"] = kernel_count(r, model, x, c)
        if math.isnan(measured["kernel_launches"]):
            measured["_reasons"]["kernel_launches"] = ("not counted on a fake device" if r.fake
                                                       else "torch.profiler gave no count")
    except Exception as e:  # noqa: BLE001 - a config's failure is a row, unless the context is gone
        if is_sticky(e):
            r.log(f"sticky CUDA error, ending the run: {error_line(e)}")
            r.stopped = "cuda-error"
            return False
        status, err = ("oom" if is_oom(e) else "error"), error_line(e)
        r.ops.empty_cache()
    reasons = (measured or {}).pop("_reasons", {}) if measured else {}
    row = make_row(c, r.identity, static, measured, status, err)
    row["missing_reason"] = render_reasons(reasons) if measured else row["missing_reason"]
    r.rows.append(row)
    r.counts[status] += 1
    if status == "ok" and math.isfinite(float(static["flops"])):
        lat_model.add(c.precision, static["flops"], measured["latency_ms"])
    if len(r.rows) % int(r.cfg.get("write_every", 5)) == 0:
        write_dataset(r.rows, r.out)
    r.sampler.drop_before(time.perf_counter() - 5.0)
    return True


def kernel_count(r: Run, model: Any, x: Any, c: Any) -> float:
    """Kernel launches of one forward, counted once per (architecture, precision) on a real device; NaN on
    the fake device or when counting is off."""
    key = (c.model_name, c.precision) if r.zoo else (c.block, c.depth, c.width_mult, c.inner_mult,
                                                     c.early_downsample, c.precision)
    if r.settings.kernels and not r.fake and key not in r.kernels:
        r.kernels[key] = float(r.ops.count_kernels(lambda m=model, xx=x: m(xx)))
    return r.kernels.get(key, float("nan"))


def libraries(r: Run) -> dict[str, str | None]:
    """The model libraries' versions the zoo plan was checked against (:func:`carb.measure.gpu_zoo.
    library_versions`); ``{}`` for the ResNet space (built by CARB itself)."""
    if not r.zoo:
        return {}
    from carb.measure.gpu_zoo import library_versions

    return library_versions()


def finish(r: Run, a: argparse.Namespace, t_start: float, stop_at: float) -> None:
    """Write the rows, re-measure the first ones for drift if time is left, stop the sampler and write
    ``provenance.json``."""
    import torch

    from carb.data.schema import device_slug

    write_dataset(r.rows, r.out)
    if r.stopped == "complete" and r.counts["skipped"]:
        r.stopped = (f"every remaining configuration was predicted not to finish before the deadline "
                     f"({r.counts['skipped']} skipped)")
    until = stop_at + float(r.cfg.get("margin_s", 20)) / 2
    drift = remeasure_drift(r.rows, int(r.cfg.get("drift_configs", 10)), until, r.ops, r.gpu, r.sampler,
                            r.settings, r.period_s, r.log, zoo=r.zoo)
    r.sampler.stop()
    seconds = time.perf_counter() - t_start
    prov = {"what": "carb python -m carb.measure.gpu_run on a lent GPU", "device": r.facts,
            "fingerprint": r.fingerprint,
            "device_id": r.identity["device_id"], "protocol": vars(r.settings), "config": r.cfg,
            "update_period_s": r.period_s, "counts": r.counts, "stopped": r.stopped, "rows": len(r.rows),
            "seconds": seconds, "minutes_budget": a.minutes,
            "configs_per_minute": r.counts["ok"] / max((time.perf_counter() - t_start) / 60.0, 1e-9),
            "drift": drift, "python": platform.python_version(), "torch": torch.__version__,
            "slug": device_slug(r.identity["device_name"]), "fake_device": r.fake,
            "space": str(r.cfg.get("space", "paper")), "refused": r.refused, "libraries": libraries(r),
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    (r.out / "provenance.json").write_text(json.dumps(prov, indent=1, default=str))
    r.log(f"done: {r.counts['ok']} ok rows in {prov['seconds']:.0f} s ({prov['configs_per_minute']:.0f}/min), "
          f"stopped: {r.stopped}")


def main(argv: list[str] | None = None) -> int:
    """Run the collector: settings (and, for the zoo, its plan checked against this machine's libraries),
    start, plan, sweep until ``margin_s`` before the deadline, finish. Returns 0, or 2 (one line on stderr)
    for a bad settings file or a zoo plan with nothing to measure, before anything is written."""
    a = parse_args(argv)
    t_start = time.perf_counter()   # the zoo plan's library imports count against the budget
    try:
        cfg, settings = load_settings(a.config)
        if a.space is not None:
            cfg["space"] = str(a.space)
        if a.seed is not None:
            cfg["seed"] = int(a.seed)
        zoo_plan = None
        if is_zoo(cfg):
            from carb.measure.gpu_zoo import zoo_plan as make_zoo_plan

            zoo_plan = make_zoo_plan(cfg, int(cfg.get("seed", 0)))
        else:   # the space plan() expands, checked before anything is written
            from carb.design.space import space_config

            space_config(str(cfg.get("space", "paper")))
    except ValueError as exc:   # bad input: one line, exit 2, nothing started
        print(f"carb.measure.gpu_run: error: {exc}", file=sys.stderr)
        return 2
    deadline = t_start + 60.0 * a.minutes
    r = start(a, t_start, cfg, settings)
    groups, static, lat_model = plan(r, None, zoo_plan)
    stop_at = deadline - float(r.cfg.get("margin_s", 20))
    sweep(r, groups, static, lat_model, stop_at)
    finish(r, a, t_start, stop_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
