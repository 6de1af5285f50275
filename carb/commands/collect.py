"""``carb-collect``: measure the configurations of a design space on one device into a dataset.

``run_collect(cfg)`` takes the composed ``conf/collect.yaml`` and

1. expands ``cfg.space`` into configurations, shuffles them with ``cfg.seed`` and keeps the shard
   ``shard.index`` of ``shard.count`` (disjoint slices ``order[index::count]`` of one shuffled order);
2. checks the output before touching anything: writable, and an existing file must be a dataset of
   this schema measured on this device (else a one-line :class:`ConfigError` / :class:`DatasetError`);
3. skips the ``config_id`` values that file already holds (resume; ``retry=errors`` measures its
   ``oom``/``error``/``contended`` rows again and replaces them; a file measured with another protocol
   id, i.e. other ``measure`` settings or another device fingerprint, is refused unless
   ``resume.mix_protocols=true``), and for each remaining config:
   static features (closed form, :func:`carb.design.features.grid_features`), builds the model, measures it
   with the device's meter, and appends the row to the file at once (atomic rewrite: temp file +
   rename), so a killed run loses at most the configuration in flight. Out of memory gives a
   ``status=oom`` row, any other failure a ``status=error`` row with the message; the run goes on;
   with ``measure.repeat.passes`` >= 2 the ok rows are then measured again, one pass over them per extra
   pass, each in another order (:mod:`carb.measure.repeat`): a row's latency is the mean of its passes and
   ``latency_repeat_spread`` their run-to-run spread; rows a stopped run left with one pass get their later
   passes on a restart;
4. shows a tqdm progress bar with ETA and logs one MLflow run: the config, the device facts,
   ok/oom/error/contended counts, the rows whose timed window the contention guard repeated,
   duration, seconds per config, the collector's overhead fraction, and the dataset as a run input
   and an artifact. The repeated and contended counts are printed at the end.

``max_minutes`` stops the run before a configuration that would end after the deadline (GPU script).
Overhead = wall time of the measuring loop outside each row's ``protocol_s`` (cool-down, warm-up,
timed loop, utilization window): model building, features, writing, bookkeeping.

"""
from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from carb import tracking
from carb.commands.cli import finished_work, hydra_command, sweep_suffix, sweep_tags, to_dict
from carb.data.io import DatasetAppender
from carb.data.schema import device_slug
from carb.design.arch import ArchConfig
from carb.design.space import configs_from_cfg
from carb.design.zoo_space import is_zoo_space
from carb.errors import ConfigError
from carb.files import write_atomic
from carb.measure.collector import (
    LoopStats,
    check_shard,
    check_writable,
    checked_identity,
    loop_summary,
    measure_configs,
    read_schema,
    remaining_configs,
    resolve_out,
    shard_configs,
)
from carb.measure.repeat import RepeatPlan, pending_repeats


def _settings(c: Mapping[str, Any]) -> tuple[int, int, float | None, int | None]:
    index, count = check_shard((c.get("shard") or {}).get("index", 0), (c.get("shard") or {}).get("count", 1))
    mm = c.get("max_minutes")
    if mm is not None:
        try:
            mm = float(mm)
        except (TypeError, ValueError):
            raise ConfigError(f"max_minutes: must be null or a positive number, got {mm!r}") from None
        if not mm > 0:
            raise ConfigError(f"max_minutes: must be null or a positive number, got {mm!r}")
    limit = c.get("limit")
    if limit is not None:
        if isinstance(limit, bool) or int(limit) < 1:
            raise ConfigError(f"limit: must be null or an integer >= 1, got {limit!r}")
        limit = int(limit)
    return index, count, mm, limit


#: ``retry`` values: which finished rows a restart measures again.
RETRY = {"none": (), "errors": ("oom", "error", "contended")}


def _resume_settings(c: Mapping[str, Any]) -> tuple[tuple[str, ...], bool]:
    """``(statuses to measure again, mix_protocols)`` from ``retry`` and ``resume.mix_protocols``."""
    retry = str(c.get("retry", "none") if c.get("retry") is not None else "none")
    if retry not in RETRY:
        raise ConfigError(f"retry: {retry!r} is not allowed; allowed: {list(RETRY)}")
    mix = (c.get("resume") or {}).get("mix_protocols", False)
    if not isinstance(mix, bool):
        raise ConfigError(f"resume.mix_protocols: must be true or false, got {mix!r}")
    return RETRY[retry], mix


def _static_table(configs: Sequence[ArchConfig]) -> dict[str, dict[str, Any]]:
    from carb.design.features import STATIC_FEATURES, grid_features

    if not configs:
        return {}
    df = grid_features(list(configs))
    return {cid: {k: rec[k] for k in STATIC_FEATURES}
            for cid, rec in zip(df["config_id"], df.to_dict("records"))}


def _get_meter(device: Mapping[str, Any], measure: Mapping[str, Any]):
    from carb.measure import get_meter

    return get_meter(str(device.get("kind", "auto")), index=int(device.get("index", 0) or 0), settings=measure)


def _build_model(cfg: ArchConfig):
    from carb.design.resnet import build_model

    return build_model(cfg)


def _zoo_configs(space: Mapping[str, Any]) -> list:
    """A zoo space's configurations; the models the library cannot build or trace are listed (stderr) with
    their reasons and left out."""
    from carb.design.zoo_space import zoo_configs

    configs, refused = zoo_configs(space)
    for name, reason in refused.items():
        print(f"carb-collect: skipped {name}: {reason}", file=sys.stderr)
    return configs


def _build_zoo(cfg: Any):
    """A zoo configuration's network with random fp32 weights on the CPU (the meter moves and casts it)."""
    from carb.design.zoo import build_model

    return build_model(cfg.model_name, device="cpu")


def _zoo_static(configs: Sequence[Any]) -> Mapping[str, Mapping[str, Any]]:
    from carb.design.zoo_features import zoo_static_table

    return zoo_static_table(configs)


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    tty = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit="cfg", disable=not enabled, file=sys.stderr, dynamic_ncols=True,
                mininterval=0.5 if tty else 30.0, smoothing=0.1)


def run_collect(cfg: Any, configs: Sequence[ArchConfig] | None = None) -> dict[str, Any]:
    """Collect the configured space (or the given ``configs``, e.g. the K rows ``carb-calibrate`` picked)
    on the configured device (see the module docstring).

    Returns ``{"out", "run_id", "n_ok", "n_oom", "n_error", "n_existing", "n_todo", "n_measured",
    "stopped", "duration_s", "s_per_config", "overhead_fraction", "strict_overhead_fraction",
    "phases_s" (seconds by phase: build_model_s, static_features_s, write_s and the meter's cooldown_s,
    prepare_s, warmup_s, peak_memory_s, timed_loop_s, kernel_launches_s, utilization_s), "device": facts}``."""
    from carb.commands.checks import check_config

    check_config('collect', cfg)
    t_start = time.perf_counter()
    c = to_dict(cfg)
    if c.get("import_run"):
        return import_run(c)
    index, count, max_minutes, limit = _settings(c)
    retry_statuses, mix_protocols = _resume_settings(c)
    deadline = t_start + 60.0 * max_minutes if max_minutes else None
    space = c.get("space") or {}
    space_name = str(space.get("name", "space"))
    zoo = is_zoo_space(space)
    if configs is not None:
        configs = list(configs)
    elif zoo:
        configs = _zoo_configs(space)
    else:
        configs = configs_from_cfg(space)
    if not configs:  # configs_from_cfg raises first; kept for custom spaces
        raise ConfigError(f"space: {space_name!r} yields no configurations")
    out = resolve_out(c.get("out"), index, count)
    check_writable(out)
    existing = read_schema(out, zoo=zoo)  # schema check before the device is opened
    finished_work(out, "the same carb-collect command: it measures only what is missing")
    shard = shard_configs(configs, int(c.get("seed", 0) or 0), index, count)

    with _get_meter(c.get("device") or {}, c.get("measure") or {}) as meter:
        facts = meter.device_facts()
        identity = checked_identity(meter, existing, out, mix_protocols)
        todo = remaining_configs(shard, existing, out, identity["device_name"], retry_statuses, limit)
        plan = RepeatPlan.from_settings(meter.settings)
        pending = pending_repeats(existing, shard, identity["protocol_id"], plan.passes)
        slug = device_slug(identity["device_name"])
        run_name = c.get("run_name") or sweep_suffix(f"collect/{slug}/{space_name}/shard{index}of{count}")
        stats = LoopStats()
        appender = DatasetAppender(out, existing)
        with _start_run(c, run_name, space_name, identity, index, count) as run_id:
            tracking.log_params({"space": space, "measure": c.get("measure") or {}, "device": c.get("device") or {},
                                 "seed": c.get("seed", 0), "shard": {"index": index, "count": count},
                                 "out": str(out), "max_minutes": max_minutes, "limit": limit,
                                 "n_space": len(configs), "n_shard": len(shard), "n_existing": len(existing),
                                 "n_todo": len(todo), "n_pending_repeats": len(pending)})
            tracking.log_params({"device_facts": {k: v for k, v in facts.items() if not isinstance(v, dict)}})
            tracking.log_dict(facts, "device_facts.json")
            t_loop = time.perf_counter()
            windows = len(todo) + (plan.passes - 1) * (len(todo) + len(pending))
            bar = _progress(windows, f"{space_name} {index + 1}/{count}", bool((c.get("progress") or {}).get("enabled", True)))
            try:
                measure_configs(todo, meter, identity, appender.append, _build_zoo if zoo else _build_model,
                                _zoo_static if zoo else _static_table, stats, deadline=deadline, progress=bar, repeat=plan, pending=pending)
            finally:
                bar.close()
                summary = loop_summary(stats, time.perf_counter() - t_loop, appender.write_s)
                result = {"out": str(out), "run_id": run_id, **summary,
                          "device_id": identity.get("device_id"), "protocol_id": identity["protocol_id"],
                          "session_id": identity.get("session_id"), "n_existing": len(existing),
                          "n_todo": len(todo), "n_rows": len(appender.frame),
                          "duration_s": time.perf_counter() - t_start, "setup_s": t_loop - t_start, "device": facts}
                _report(result, appender, out, f"{space_name}-{slug}")
    from carb.commands.cli import say_run_page

    say_run_page(result["run_id"], (c.get("tracking") or {}).get("uri"))
    return result


def _start_run(c: Mapping[str, Any], run_name: str, space_name: str, identity: Mapping[str, Any], index: int,
               count: int):
    """The collection's MLflow run (a context manager yielding its id), tagged with the space, the device,
    its protocol and session (the boot, ``session_id``), and the shard."""
    tr = c.get("tracking") or {}
    return tracking.start_run("collect", run_name, tracking_uri=tr.get("uri", "sqlite:///mlruns/mlflow.db"),
                              sweep=sweep_tags(),
                              artifact_root=tr.get("artifact_root"),
                              tags={"space": space_name, "device_name": identity["device_name"],
                                    "device_id": identity.get("device_id") or "unknown",
                                    "protocol_id": identity["protocol_id"],
                                    "session_id": identity.get("session_id") or "unknown",
                                    "device_kind": identity["device_kind"], "shard": f"{index}/{count}"})


def _report(result: Mapping[str, Any], appender: DatasetAppender, out: Path, dataset_name: str) -> None:
    """Print the loop's counts (stderr) and log them, the timings, the stop reason and the dataset."""
    n_meas, stopped = result["n_measured"], result["stopped"]
    print(f"carb-collect: {n_meas} rows measured ({result['n_ok']} ok, {result['n_oom']} oom, "
          f"{result['n_error']} error, {result['n_contended']} contended); contention guard "
          f"repeated the timed window of {result['n_repeated']} row(s)", file=sys.stderr)
    if result["n_repeat_windows"]:
        print(f"carb-collect: later passes measured {result['n_repeat_windows']} window(s) "
              f"({result['n_repeat_failed']} not used); median run-to-run latency spread {100 * result['latency_repeat_spread_median']:.1f} %",
              file=sys.stderr)
    tracking.log_metrics({k: result[k] for k in (
        "n_ok", "n_oom", "n_error", "n_contended", "n_repeated", "repeated_fraction", "n_repeat_windows",
        "n_repeat_failed", "latency_repeat_spread_median", "n_existing", "n_measured", "n_rows", "duration_s", "loop_s",
        "setup_s", "s_per_config", "overhead_fraction", "strict_overhead_fraction", "write_s")})
    tracking.log_metrics({f"phase_{k}": v for k, v in result["phases_s"].items()})
    tracking.set_tags({"stopped": stopped or ("interrupted" if n_meas < result["n_todo"] else "complete")})
    if len(appender.frame) and out.exists():
        tracking.log_dataset(appender.frame, name=dataset_name, source=str(out), context="collection")
        tracking.log_artifact(out, "dataset")


def import_run(c: Mapping[str, Any]) -> dict[str, Any]:
    """``import_run=<dir>``: write the rows a lent-GPU run brought back (``python -m carb.measure.gpu_run``) to
    ``out`` (provenance beside it as ``<out stem>.provenance.json``) and log them to MLflow. When ``out``
    already holds a run of the same device, the new run is appended
    (:func:`carb.data.importers.gpu_run.merge_gpu_run`: repeats keep the first row and are summarised in
    the provenance); another device is refused."""
    import json
    from pathlib import Path

    from carb.data.importers.gpu_run import import_gpu_run, merge_gpu_run, read_provenance
    from carb.data.io import load_dataset, save_dataset

    df, prov = import_gpu_run(c["import_run"])
    out = Path(str(c.get("out")))
    if out.suffix.lower() not in (".parquet", ".csv"):
        raise ConfigError(f"out: with import_run give a .parquet or .csv file, got {str(out)!r}")
    check_writable(out)
    prov_path = out.with_name(out.stem + ".provenance.json")
    n_run = len(df)
    if out.exists():
        if not prov_path.exists():
            raise ConfigError(f"out: {str(out)!r} exists without {prov_path.name} (not a dataset import_run wrote); "
                              f"give a new file")
        df, prov = merge_gpu_run(load_dataset(out), read_provenance(prov_path), df, prov)
        print(f"carb-collect: appended {prov['runs'][-1]['rows_added']} new configurations of {n_run} "
              f"({prov['runs'][-1]['repeats']['n']} measured before keep their first row) to {out}")
    save_dataset(df, out)
    text = json.dumps(prov, indent=1, default=str)
    write_atomic(prov_path, lambda tmp: tmp.write_text(text))   # a full disk never leaves half a provenance
    tr = c.get("tracking") or {}
    name = device_slug(str(df["device_name"].iloc[0]))
    with tracking.start_run("collect", c.get("run_name") or sweep_suffix(f"collect/import-run/{name}/{prov.get('device_id')}"),
                            tracking_uri=tr.get("uri"), artifact_root=tr.get("artifact_root"),
                            tags={"device_name": str(df["device_name"].iloc[0]), "device_id": str(prov.get("device_id")),
                                  "source": "carb.measure.gpu_run", "import_run": str(c["import_run"])},
                            sweep=sweep_tags()) as run_id:
        tracking.log_metrics({"n_rows": len(df), "n_ok": int((df["status"] == "ok").sum())})
        tracking.log_dict(prov, "provenance.json")
        tracking.log_dataset(df, name=f"{name}-gpu-run", source=str(out), context="collection")
    print(f"carb-collect: imported {n_run} rows of {df['device_name'].iloc[0]} ({prov.get('device_id')}) into {out} "
          f"({len(df)} rows in all)")
    from carb.commands.cli import say_run_page

    say_run_page(run_id, tr.get("uri"))
    return {"out": str(out), "run_id": run_id, "n_rows": len(df), "n_ok": int((df["status"] == "ok").sum()),
            "device_id": prov.get("device_id")}


main = hydra_command("collect")(run_collect)


if __name__ == "__main__":
    main()
