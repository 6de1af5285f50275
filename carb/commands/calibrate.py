"""``carb-calibrate``: transfer a registered model to a new device from K measured rows.

    carb-calibrate data.path=data/my-device.parquet k=10       # K rows of a dataset; the rest test the result
    carb-calibrate measure=cpu k=12                             # measure K space-filling configurations now
    carb-calibrate k=0 spec="H100 SXM" source=models:/<GPU model>@champion   # zero-shot from spec sheets
    carb-calibrate k=0 probe=6a0ea403ee                         # zero-shot to a CPU from two device probes
    carb-calibrate k=0 probe=true                               # probe this CPU first (~1 min), then zero-shot
    carb-calibrate measure=cpu k=10 probe=true                  # probe, measure 10 rows, calibrate from both

The K rows are picked space-filling (:mod:`carb.design.select`) from the dataset or from ``space``; the
transfer (:mod:`carb.model.transfer`) is fitted on them, its intervals re-calibrated on their leave-one-out
residuals, and the result registered as a version of the target device's model
(``carb-<device-slug>-<device_id>``) with the source model and version, K and the configurations used as
tags. Rows beyond the K are held out: the command prints the calibrated model's accuracy on them beside
the uncalibrated source and a FLOPs-only fit on the same K rows.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from carb import tracking
from carb.commands.cli import hydra_command, hydra_run_dir, sweep_suffix, sweep_tags, to_dict
from carb.commands.progress import Progress
from carb.commands.zero_shot import extra_sources, say
from carb.commands.zero_shot import print_unseen   # noqa: F401 - carb-calibrate's warnings for unseen precisions
from carb.data.session_drift import sessions
from carb.design.identity import RESNET, model_input_kind
from carb.errors import ConfigError, DatasetError


def default_source() -> str:
    """``models:/<model of the shipped reference dataset>@champion``."""
    from carb.data.io import reference_dataset
    from carb.data.schema import model_name, ok_rows

    return f"models:/{model_name(ok_rows(reference_dataset()))}@champion"


def load_source(uri: str, given: bool) -> Any:
    """The source cascade at ``uri``; ``source=null`` whose default model (:func:`default_source`) is not in the
    store: one line saying what the default is and how to make it (``carb-train``) or name another."""
    from carb.errors import ModelError

    try:
        return tracking.load_cascade(uri)
    except ModelError as e:
        if given or "not found" not in str(e):
            raise
        name = uri.removeprefix("models:/").split("@")[0]   # carb-promote needs it in a store of several models
        raise ModelError(f"source: not given, and its default {uri} (the champion of the model of the shipped "
                         f"CPU reference dataset) is not in this store; run carb-train, then carb-promote "
                         f"promote.name={name}, or give source=models:/<name>@<alias>") from None


def require_source_for_spec(cfg: Any) -> None:
    """One-line :class:`ConfigError` for ``spec=`` without ``source=``: a spec-sheet transfer starts from a
    GPU model (its GPU needs a spec record too), never the default CPU reference model; the line lists the
    registered models of the store to pick from (read after :func:`carb.tracking.configure`)."""
    if not cfg.get("spec") or cfg.get("source"):
        return
    from carb import tracking

    try:
        names = tracking.registered_models()
    except Exception:  # noqa: BLE001 - the list is a courtesy; the refusal stands without it
        names = []
    listed = ", ".join(names) if names else f"none in {cfg.tracking.uri}: train one first (carb-train)"
    raise ConfigError(f"source: spec={cfg.spec!r} transfers a GPU model by spec sheets; pass "
                      f"source=models:/<name>@champion (registered models: {listed})")


def target_rows(cfg: Any) -> tuple[pd.DataFrame, str]:
    """The target device's measured rows from ``data.path`` (``ok`` rows of one device) and a label."""
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows

    path = str(cfg.data.path)
    rows = ok_rows(load_dataset(path))
    dev = cfg.data.get("device")
    ids = rows["device_id"].astype(str) if "device_id" in rows else pd.Series("", index=rows.index)
    if dev:
        names = sorted(set(rows["device_name"].dropna().astype(str)) | set(ids[ids != ""]))
        rows = rows[(rows["device_name"].astype(str) == str(dev)) | (ids == str(dev))]
        if not len(rows):
            raise ConfigError(f"data.device: {dev!r} has no ok rows in {path}; allowed: {names}")
    if not len(rows):
        raise DatasetError(f"data.path: {path} has no ok rows to calibrate on")
    names = sorted(rows["device_name"].dropna().astype(str).unique())
    if len(names) > 1:
        raise ConfigError(f"data.device: {path} holds {len(names)} devices; calibrate one at a time; allowed: {names}")
    found = sorted(set(rows["device_id"].dropna().astype(str))) if "device_id" in rows else []
    if len(found) > 1:   # one name, several CPUs (two "AMD EPYC" VMs): the K rows would mix two devices' biases
        raise ConfigError(f"data.device: {path} holds rows of {len(found)} devices named {names[0]!r} "
                          f"(device_id {', '.join(found)}); calibrate one at a time; allowed: {found}")
    warn_sessions(rows, path, cfg.data.get("session_gap_h"))
    return rows.reset_index(drop=True), path


def warn_sessions(rows: pd.DataFrame, where: str, gap_h: float | None = None) -> list[str]:
    """Say, in one warning line, when ``rows`` of one device come from several measuring sessions
    (:func:`sessions`: another boot or host kernel build, or a gap of more than ``gap_h`` hours in ``measured_at``).
    The Xeon's speed moved 28-56 % between two kernel builds and 11-15 % between two windows of one boot
    three hours apart (carb/data/cpu-intel-xeon.md), so K rows of two sessions calibrate a mix of speeds.
    Returns the session labels (sorted; empty without ``driver`` and ``measured_at``)."""
    if "driver" not in rows.columns and "measured_at" not in rows.columns:
        return []
    counts = sessions(rows, gap_h).value_counts().sort_index()
    if len(counts) > 1:
        builds = rows["driver"].dropna().astype(str).nunique() if "driver" in rows.columns else 1
        boots = rows["session_id"].dropna().astype(str).nunique() if "session_id" in rows.columns else 0
        why = (f"{builds} host kernel builds" if builds > 1 else f"{boots} boots" if boots > 1
               else f"gaps of more than {gap_h:g} h")
        say(f"carb-calibrate: warning: {where} holds rows of {len(counts)} measuring sessions ({why}; "
            + ", ".join(f"{d}: {n} rows" for d, n in counts.items())
            + "); a device's speed can move by tens of percent between sessions (carb/data/cpu-intel-xeon.md): "
            "the K rows mix several speeds; calibrate on one session's rows, probed in the same session")
    return list(counts.index)


def warn_probe_session(rows: pd.DataFrame, where: str, gap_h: float | None = None) -> str | None:
    """Say, in one warning line, when the target device's probe was timed in another measuring session than its
    ``rows``: another boot (the probe's provenance ``session_id`` is none of the rows' ``session_id``), or, on the
    same boot, more than ``gap_h`` hours from the nearest row's ``measured_at`` (the probe's ``measured_from`` to
    ``measured_to``; None: no gap rule). The Xeon moved 11-15 % between two windows of one boot three hours apart
    (carb/data/cpu-intel-xeon.md), so the probe ratio would move the source to another window's speed.
    Returns what places the probe (its boot, or its window's start); None when nothing is recorded or they agree."""
    from carb.data.probes import probe_session, probe_window

    ids = rows["device_id"].dropna().astype(str).unique() if "device_id" in rows.columns else []
    if len(ids) != 1:
        return None
    seen = set(rows["session_id"].dropna().astype(str)) if "session_id" in rows.columns else set()
    probe = probe_session(str(ids[0]))
    if probe is not None and seen and probe not in seen:
        why, label = f"session {probe}, the rows of {where} in {', '.join(sorted(seen))}", probe
    else:
        window = probe_window(str(ids[0]))
        hours = probe_gap_h(rows, window)
        if gap_h is None or hours is None or hours <= gap_h:
            return None
        label = window[0].strftime("%Y-%m-%d %H:%M")
        why = f"window from {label} UTC, {hours:.1f} h from the nearest row of {where} (data.session_gap_h {gap_h:g})"
    say(f"carb-calibrate: warning: the device probe of {ids[0]} was timed in {why}; a device's speed moves between "
        "sessions (carb/data/cpu-intel-xeon.md): run carb-probe again in the rows' session, or measure the rows and "
        "the probe together (carb-quickstart)")
    return label


def probe_gap_h(rows: pd.DataFrame, window: tuple[pd.Timestamp, pd.Timestamp] | None) -> float | None:
    """Hours between a probe's window (start, end; UTC) and the nearest row's ``measured_at`` (0 when a row falls
    inside it); None without a window or without any readable ``measured_at``."""
    if window is None or "measured_at" not in rows.columns:
        return None
    when = pd.to_datetime(rows["measured_at"], utc=True, errors="coerce", format="ISO8601").dropna()
    if when.empty:
        return None
    before = (window[0] - when).dt.total_seconds().clip(lower=0)
    after = (when - window[1]).dt.total_seconds().clip(lower=0)
    return float((before + after).min()) / 3600


def measure_rows(cfg: Any, source: Any = None, target_probe: str | None = None) -> tuple[pd.DataFrame, str]:
    """Measure ``k`` configurations of ``space`` on this machine (through carb-collect's collector, rows
    appended to ``out``) and return their ``ok`` rows. With the ``source`` model the rows cover every
    precision it predicts (:func:`covering_rows`), else they are space-filling per precision."""
    from omegaconf import OmegaConf

    from carb.commands.collect import run_collect
    from carb.data.io import load_dataset
    from carb.data.schema import ok_rows
    from carb.design.features import grid_features
    from carb.analysis.transfer import space_filling_per_precision
    from carb.design.space import configs_from_cfg

    configs = configs_from_cfg(to_dict(cfg.space))
    k = int(cfg.k)
    if k > len(configs):
        raise ConfigError(f"k: must be between 1 and the {len(configs)} configurations of space "
                          f"{cfg.space.name!r}, got {k}")
    if source is not None:
        chosen = covering_rows(cfg, source, configs, target_probe)
        k = len(chosen)
    else:
        chosen = [configs[i] for i in space_filling_per_precision(grid_features(configs), k)]
    collect_cfg = OmegaConf.create({
        "space": to_dict(cfg.space), "device": to_dict(cfg.device), "measure": to_dict(cfg.measure),
        "tracking": to_dict(cfg.tracking), "paths": to_dict(cfg.paths), "out": str(cfg.out), "seed": 0,
        "shard": {"index": 0, "count": 1}, "max_minutes": None, "import_run": None, "retry": "errors",
        "resume": {"mix_protocols": False}, "limit": None, "progress": to_dict(cfg.get("progress") or {}),
        "run_name": f"calibrate-measure-{cfg.space.name}-k{k}"})
    say(f"carb-calibrate: measuring {k} configurations of space {cfg.space.name!r} on this machine -> {cfg.out}")
    run_collect(collect_cfg, configs=chosen)
    ids = {c.config_id for c in chosen}
    every = load_dataset(str(cfg.out))
    mine = every[every["config_id"].astype(str).isin(ids)]
    rows = ok_rows(mine).reset_index(drop=True)
    if len(rows) < min(k, 2):
        counts = ", ".join(f"{n} {s}" for s, n in mine["status"].value_counts().items())
        hint = (" (contended: another process used the CPU while it was measured; run again on an idle machine,"
                " finished rows are kept and contended ones re-measured)" if (mine["status"] == "contended").any() else "")
        raise DatasetError(f"measure: only {len(rows)} of the {k} configurations measured ok on this machine "
                           f"({counts}){hint}; {cfg.out}")
    if len(rows) < k:
        say(f"carb-calibrate: {len(rows)} of the {k} configurations measured ok; calibrating on those")
    return rows, str(cfg.out)


def covering_rows(cfg: Any, source: Any, configs: list, target_probe: str | None = None) -> list:
    """The configurations to measure for a K-row calibration that covers what ``source`` predicts (issue 44):
    every precision the source predicts gets at least ``transfer.min_rows_per_precision`` rows
    (:func:`carb.analysis.transfer.covering_picks`; a precision the space lacks, fp16 of ``space=reference``,
    from the space's networks of at most ``transfer.added_precision_max_flops`` FLOPs per batch, as the
    fallback path can be 20-50x slower), space-filling within each precision; with
    ``transfer.pick_where_probes_disagree`` among the rows where the two CPUs' device probes depart most from
    the source's common factor (both probes on disk: this CPU's by ``target_probe`` or its fingerprint; off by
    default: the K rows estimate offsets, which rows from the tails bias). Prints what it chose."""
    import numpy as np

    from carb.analysis.transfer import covering_picks
    from carb.design.features import grid_features
    from carb.model.transfer import source_precisions

    want = source_precisions(source) or sorted({c.precision for c in configs})
    have = {c.precision for c in configs}
    pool = list(configs)
    cap = float(cfg.transfer.get("added_precision_max_flops") or 2.5e8)
    small = None
    for p in [q for q in want if q not in have]:
        if small is None:
            feats = grid_features(configs)
            small = [c for c, f in zip(configs, feats["flops"].to_numpy(float)) if f <= cap]
        pool += list({c.replace(precision=p).config_id: c.replace(precision=p) for c in small}.values())
    frame = grid_features(pool)
    dis = (_probe_disagreement(source, frame, target_probe, cfg.measure.get("threads"))
           if cfg.transfer.get("pick_where_probes_disagree", False) else None)
    n_min = int(cfg.transfer.get("min_rows_per_precision", 3))
    picks = covering_picks(frame, int(cfg.k), want, n_min, dis)
    chosen = [pool[i] for i in picks]
    per = pd.Series([c.precision for c in chosen]).value_counts().to_dict()
    say(f"carb-calibrate: {len(chosen)} configurations to measure, at least {n_min} of each precision the model "
        f"predicts ({', '.join(f'{p} {n}' for p, n in sorted(per.items()))})"
        + (f", raised from k={int(cfg.k)}" if len(chosen) > int(cfg.k) else "")
        + ("; picked where the device probes depart most from the source" if dis is not None and
           np.isfinite(dis).any() else ""))
    return chosen


def _probe_disagreement(source: Any, frame: pd.DataFrame, target_probe: str | None, threads: Any = None) -> Any:
    """Per row of ``frame`` (n,): ``|log r - median log r of its precision|``, ``r`` the two CPUs' probe ratio
    (:meth:`carb.model.transfer.TransferredCascade.probe_ratio`): where the probes say a network moves
    unlike the source's common factor. None without both probes on disk (this CPU's: ``target_probe``, else
    its fingerprint at the measuring ``threads``)."""
    import numpy as np

    from carb.data.probes import load_probe, probe_fingerprint
    from carb.model.transfer import TransferredCascade

    src_id = getattr(source, "device_id_", None)
    if target_probe is None:
        try:
            from carb.measure.fingerprint import device_id, read_cpu_fingerprint
            from carb.measure.probe import torch_threads_and_version

            target_probe = device_id(read_cpu_fingerprint(torch_threads_and_version(threads)[0]))
        except Exception:   # noqa: BLE001 - no fingerprint: no disagreement, plain space-filling picks
            return None
    sp, tp = (load_probe(str(src_id)) if src_id else None), load_probe(str(target_probe))
    if sp is None or tp is None or str(src_id) == str(target_probe):
        return None
    tr = TransferredCascade(source).fit_probe(sp, tp, probe_fingerprint(str(target_probe)), "target", str(target_probe))
    r = np.log(np.maximum(tr.probe_ratio(frame), 1e-12))
    prec = frame["precision"].astype(str).to_numpy()
    out = np.zeros(len(frame))
    for p in np.unique(prec):
        m = prec == p
        out[m] = np.abs(r[m] - np.median(r[m]))
    return out


def run_calibrate(cfg: Any) -> dict[str, Any]:
    """Calibrate, evaluate on held-out rows, log and register. Returns ``{"transfer", "table",
    "registered_name", "version", "run_id", "source", "k", "config_ids"}``."""
    from carb.analysis.transfer import evaluate_transfer
    from carb.commands.checks import check_config
    from carb.data.schema import model_name

    check_config("calibrate", cfg)
    from carb.commands.zero_shot import refuse_spec_and_probe

    refuse_spec_and_probe(cfg)   # before loading anything
    uri, art = cfg.tracking.uri, cfg.tracking.get("artifact_root")
    tracking.configure(uri, art)
    require_source_for_spec(cfg)
    source_uri = str(cfg.source or default_source())
    prog = Progress.from_cfg("carb-calibrate", 4.0, cfg, throttle=False)
    prog.begin(f"loading {source_uri}")
    source = load_source(source_uri, given=bool(cfg.source))
    refuse_untransferable_kind(cfg, source, source_uri)   # before probing, measuring or logging anything
    src_info = tracking.resolve_version(source_uri)
    target_probe = target_probe_id(cfg, source, source_uri, prog)
    if int(cfg.k) == 0:
        from carb.commands.zero_shot import run_zero_shot

        return run_zero_shot(cfg, source, {"uri": source_uri, **src_info}, prog, target_probe)
    if not cfg.data.get("path"):   # measuring now: refuse before a minute of measuring, not after
        refuse_unlike_devices(cfg, source, source_uri, None)
    prog.begin("reading the target rows" if cfg.data.get("path") else "measuring the target rows")
    rows, where = target_rows(cfg) if cfg.data.get("path") else measure_rows(cfg, source, target_probe)
    refuse_unlike_devices(cfg, source, source_uri, rows)
    refuse_unlike_kinds(source, source_uri, rows, where)
    if target_probe and str(target_probe) not in set(rows["device_id"].dropna().astype(str)):
        raise ConfigError(f"probe: {target_probe} is not the device of the rows of {where} "
                          f"({sorted(set(rows['device_id'].dropna().astype(str)))}); a probe describes the target CPU")
    k = int(cfg.k) if cfg.data.get("path") else len(rows)   # measured now: every ok row (k or more: covering_rows)
    if k > len(rows):
        raise ConfigError(f"k: must be between 1 and the {len(rows)} ok rows of {where}, got {k}")
    name = model_name(rows)
    refuse_same_device(source, rows, source_uri, where, same_name=name == src_info.get("name"))
    kw = transfer_settings(cfg)
    prog.begin(f"fitting the transfer on {k} of {len(rows)} rows")
    layers = model_input_kind(source) in TRANSFERABLE_KINDS   # probe and spec ratios read ResNet layer tables
    probes = device_probes(source, rows) if layers and cfg.transfer.get("probe", True) else None
    if probes is not None:
        warn_probe_session(rows, where, cfg.data.get("session_gap_h"))
    spec = spec_records(cfg, source, rows) if layers and probes is None and cfg.transfer.get("spec", True) else None
    if not layers:
        say("carb-calibrate: a zoo source: the K rows calibrate the source's prediction (device probes and spec "
            "records describe ResNet networks)")
    extra = extra_sources(cfg, source, probes[1], probes[2], *device_identity_of(rows)) if probes is not None else []
    tr, table = evaluate_transfer(source, rows, k, kw, targets=list(getattr(source, "targets_", [])), probes=probes,
                                  spec=spec, extra=extra)
    tr.origin_ = {"how": "calibrated", "source": source_uri, "k": k,
                  "method": ", ".join(f"{t} {i['form']}" for t, i in tr.transfer_.items())}
    _print_transfer(tr, table, len(rows) - k)
    if getattr(tr, "intervals_", None):   # screening later: the device's speed moves between sessions
        from carb.analysis.training import add_session_drift

        add_session_drift(tr, rows, to_dict(cfg.get("session_drift") or {}),
                          lambda line: say(f"carb-calibrate: {line}"))
    prog.begin("logging to MLflow" + (" and registering" if cfg.register else ""))
    reg_name = name if cfg.register else None
    run_id, info = _log_run(cfg, tr, table, rows, k, where, {"uri": source_uri, **src_info}, name, bool(reg_name), kw)
    version = info.get("version")
    alias_set, said = (place_alias(reg_name, str(cfg.alias), str(version)) if reg_name and version and cfg.get("alias")
                       else (False, ""))
    prog.finish("calibrated" + (f", registered {reg_name} version {version}" if version else ""))
    if version:
        say(f"carb-calibrate: registered {reg_name} version {version}{said}; MLflow run {run_id}")
    from carb.commands.cli import say_run_page

    say_run_page(run_id, cfg.tracking.uri)
    out_dir = hydra_run_dir()
    if out_dir is not None and len(table):
        table.to_csv(out_dir / "heldout.csv", index=False)
    return {"transfer": tr.transfer_, "table": table, "registered_name": reg_name, "version": version,
            "run_id": run_id, "source": source_uri, "k": k, "config_ids": list(tr.calibration_rows_),
            "model": tr, "alias_set": alias_set}


def place_alias(name: str, alias: str, version: str) -> tuple[bool, str]:
    """Point ``name@alias`` at the new calibrated ``version`` (calibrated on measured rows) when the alias is
    unset or on a zero-shot version (:func:`is_zero_shot`: no measured rows); a version that had measured rows
    keeps it (carb-promote moves it: the user's say-so). Returns ``(moved, the phrase the command prints)``."""
    current = tracking.get_alias(name, alias)
    if current is not None and not is_zero_shot(name, current):
        return False, (f" (alias {alias} left on version {current}, calibrated on measured rows; "
                       f"carb-promote promote.name={name} promote.version={version} moves it)")
    tracking.set_alias(name, alias, version)
    return True, f" as @{alias}" + (f" (moved from the zero-shot version {current}: no measured rows)"
                                    if current is not None else "")


def is_zero_shot(name: str, version: str) -> bool:
    """Whether ``name`` version ``version`` is a zero-shot model (``carb-calibrate k=0``: its version tag
    ``k`` is ``0``, or it has a ``zero_shot`` tag); False when unknown (a trained or calibrated model)."""
    try:
        tags = tracking.registered_model_info(name, version).get("version_tags", {})
    except Exception:   # noqa: BLE001 - an unreadable version counts as measured: never moved silently
        return False
    return str(tags.get("k", "")).strip() == "0" or bool(tags.get("zero_shot"))


def target_probe_id(cfg: Any, source: Any, source_uri: str, prog: Any) -> str | None:
    """The target CPU's device id whose probe the transfer uses: ``probe=<device_id>`` as given,
    ``probe=true``: this CPU's, probed now with the ``probe_run`` preset (:func:`probe_this_machine`); None
    for ``probe=false``. One-line :class:`ConfigError` for a probe where no CPU is the target."""
    from carb.commands.zero_shot import probe_given, refuse_gpu_source, refuse_spec_and_probe

    if not probe_given(cfg):
        return None
    refuse_spec_and_probe(cfg)
    refuse_gpu_source(source, source_uri)
    probe = cfg.get("probe")
    if probe is True or str(probe).lower() == "true":
        if str(cfg.device.get("kind", "auto")) == "cuda":
            raise ConfigError("probe: true probes this machine's CPU (carb-probe), but device.kind=cuda targets a "
                              "GPU; allowed: probe=false with device.kind=cuda, or device.kind=cpu|auto")
        prog.begin("probing this CPU (a short device probe first)")
        return probe_this_machine(cfg, source)
    return str(probe)


def probe_this_machine(cfg: Any, source: Any = None) -> str:
    """A short ``carb-probe`` of this CPU (``probe_run``: pairs, repeats, window; the ``space``'s layers and
    ``measure``'s threads), written to the store's probes like ``carb-probe``'s; returns its device id. Its
    precisions: ``probe_run.precisions``, or (null) every precision the ``source`` model predicts
    (:func:`carb.model.domain.predicted_precisions`: fp16 too where the source has it), else carb-probe's
    default (every precision)."""
    from omegaconf import OmegaConf

    from carb.commands.probe import run_probe_command
    from carb.model.domain import predicted_precisions

    pr = to_dict(cfg.probe_run)
    if not pr.get("precisions"):
        pr["precisions"] = predicted_precisions(getattr(source, "domain_", None)) or None
    pcfg = OmegaConf.create({
        "space": to_dict(cfg.space), "measure": to_dict(cfg.measure), "tracking": to_dict(cfg.tracking),
        "paths": to_dict(cfg.paths), "progress": to_dict(cfg.get("progress") or {}), **pr, "out": None,
        "run_name": f"calibrate-probe-{cfg.space.name}"})
    say(f"carb-calibrate: probing this CPU first ({pr['n']} convolutions per precision, about a minute; "
        "run it on an idle machine)")
    return str(run_probe_command(pcfg)["device_id"])


#: The input kinds (:func:`carb.design.identity.input_kind`) every transfer can carry to another device: the
#: probe ratio, the spec-sheet zero-shot and ``measure=`` read a network's layer table from its ResNet knobs
#: (:mod:`carb.design.shapes`) or measure the ResNet grid; a zoo network (a ``model_name``) has no knobs. A
#: source of another kind transfers only from K measured rows of its own kinds (``data.path``, k > 0).
TRANSFERABLE_KINDS = (RESNET.name,)


def refuse_untransferable_kind(cfg: Any, source: Any, source_uri: str) -> None:
    """One-line :class:`ConfigError` when ``source`` was trained on networks (its input kind not in
    :data:`TRANSFERABLE_KINDS`: a zoo model, or a combined ResNet + zoo one) and the command asks for a
    transfer that reads ResNet layers: ``k=0`` (device probes, spec sheets), ``probe=``, ``spec=`` or
    measuring now (``measure=`` measures the ResNet grid). Names the source, why and what works (K measured
    rows of the target's zoo, ``data.path=... k=10``); decided from the model alone, before a probe, a
    measurement or a run."""
    kind = model_input_kind(source)
    if kind in TRANSFERABLE_KINDS:
        return
    from carb.commands.zero_shot import probe_given

    asked = ("k=0" if int(cfg.k) == 0 else "probe=" if probe_given(cfg) else "spec=" if cfg.get("spec")
             else "measure= (it measures the ResNet grid)" if not cfg.data.get("path") else None)
    if asked is None:
        return
    what = "a zoo model (named networks)" if kind == "zoo" else "a combined ResNet + zoo model"
    raise ConfigError(f"source: {source_uri} is {what}; {asked} transfers ResNet models only (device probes, "
                      "spec sheets and measure= read a network's layers from its ResNet knobs); for a zoo model "
                      f"measure the target's zoo (carb-collect space=zoo out=<file> there) and run carb-calibrate "
                      f"source={source_uri} data.path=<file> k=10, or carb-train data.path=<file>")


def refuse_unlike_kinds(source: Any, source_uri: str, rows: pd.DataFrame, where: str) -> None:
    """One-line :class:`ConfigError` when the target rows hold networks of a kind the source model does not
    predict (ResNet rows for a zoo model, zoo rows for a ResNet model): its predictions of them are the
    ones the K rows would calibrate."""
    from carb.design.identity import kinds_in, kinds_of_input

    src, have = kinds_of_input(model_input_kind(source)), kinds_in(rows)
    extra = [k for k in have if k not in src]
    if extra:
        raise ConfigError(f"data.path: {where} holds {', '.join(extra)} rows but the source model {source_uri} "
                          f"predicts {' and '.join(src)} networks only; allowed: rows of "
                          f"{' or '.join(src)} networks measured on the target")


def refuse_same_device(source: Any, rows: pd.DataFrame, source_uri: str, where: str, same_name: bool) -> None:
    """One-line :class:`ConfigError` when the target rows are of the source model's own device (its
    ``device_id_``, or ``same_name``: the rows' device model is the source's registered model): that is no
    transfer (its "held-out" rows could be the source's training rows, and it would register a version of
    the source model itself); refitting on a device's own data is carb-train's job."""
    src_id = getattr(source, "device_id_", None)
    ids = set(rows["device_id"].dropna().astype(str)) if "device_id" in rows else set()
    if same_name or (src_id and ids == {str(src_id)}):
        dev = f"device_id {src_id}" if src_id else f"device {rows['device_name'].iloc[0]}"
        raise ConfigError(f"data.path: the rows of {where} are of {dev}, the same device as the source "
                          f"model {source_uri}: carb-calibrate transfers a model to another device; to refit on "
                          f"this device's rows use carb-train data.path={where}")


def source_kind(source: Any) -> str | None:
    """``gpu`` / ``cpu`` for a model of a CUDA GPU / a CPU (its device fingerprint's ``kind``), else None."""
    try:
        fp = json.loads(getattr(source, "device_fingerprint_", None) or "null")
    except (TypeError, ValueError):
        return None
    return {"cuda": "gpu", "cpu": "cpu"}.get(str(fp.get("kind"))) if isinstance(fp, dict) else None


def _rows_spec(rows: pd.DataFrame | None) -> dict[str, Any] | None:
    """The spec record the target rows' GPU fingerprint matches (None: no rows, not a GPU, not in the table)."""
    from carb.data.gpu_specs import record_for_fingerprint

    fps = rows["device_fingerprint"].dropna().astype(str) if rows is not None and "device_fingerprint" in rows else []
    try:
        fp = json.loads(fps.iloc[0]) if len(fps) else None
    except (TypeError, ValueError):
        return None
    return record_for_fingerprint(fp) if isinstance(fp, dict) and fp.get("kind") == "cuda" else None


def refuse_unlike_devices(cfg: Any, source: Any, source_uri: str, rows: pd.DataFrame | None) -> None:
    """One-line :class:`ConfigError` for a K-row calibration that cannot work, naming the command that does:
    a GPU model calibrated with CPU rows (``rows`` of a CPU, or ``rows=None``: measuring this machine with
    ``device.kind`` other than cuda); a CPU model calibrated to a GPU without a spec record (from its rows or
    ``spec=``); ``spec=`` naming another GPU than the rows', or given for a CPU target. ``spec=`` with k > 0 is
    otherwise used: it is the target GPU's record (:func:`spec_records`)."""
    from carb.data.gpu_specs import gpu_spec
    from carb.model.transfer_prior import device_kind

    src = source_kind(source)
    target = device_kind(rows) if rows is not None else ("gpu" if str(cfg.device.get("kind")) == "cuda" else "cpu")
    what = f"the rows of {cfg.data.path}" if rows is not None else "the rows measured now"
    cpu_target = f"the rows of {cfg.data.path} are a CPU's" if rows is not None else "measure=cpu measures this CPU"
    name = getattr(source, "device_name_", "?")
    if src == "gpu" and target == "cpu":
        raise ConfigError(f"source: {source_uri} is a GPU model ({name}) and {cpu_target}: a GPU's costs do not carry "
                          "over to a CPU; for this CPU run carb-quickstart calibrate=true (the CPU reference model "
                          "calibrated here), for another GPU carb-calibrate source=<GPU model> k=0 spec=<GPU>")
    given = gpu_spec(str(cfg.spec), field="spec") if cfg.get("spec") else None
    if given is not None and target == "cpu":
        raise ConfigError(f"spec: {cfg.spec!r} is a GPU's spec record but {cpu_target}; allowed: spec=null "
                          "for a CPU target")
    have = _rows_spec(rows)
    if given is not None and have is not None and have.get("name") != given["name"]:
        raise ConfigError(f"spec: {cfg.spec!r} is {given['name']} but {what} are of {have['name']} (their "
                          f"fingerprint); allowed: spec={have['name']!r} or spec=null")
    if src == "cpu" and target == "gpu" and given is None and have is None:
        raise ConfigError(f"spec: {what} are of a GPU without a spec record and the source {source_uri} is a CPU "
                          f"model ({name}); allowed: spec=<the GPU's name in carb/data/gpu_specs.csv>, or a GPU "
                          "source model (source=models:/<GPU model>@champion)")


def device_probes(source: Any, rows: pd.DataFrame) -> tuple | None:
    """``(source probe, target probe, target fingerprint)`` when both CPUs have a device probe on disk
    (shipped or ``carb-probe``'s), else None; one line says which is used."""
    from carb.data.probes import load_probe
    from carb.model.cascade_data import device_identity

    name, dev_id, fp = device_identity(rows)
    src_id = getattr(source, "device_id_", None)
    try:
        kind = json.loads(fp).get("kind") if fp else None
    except (TypeError, ValueError, AttributeError):
        kind = None
    if not (src_id and dev_id and kind == "cpu"):
        return None
    src, dst = load_probe(str(src_id)), load_probe(str(dev_id))
    if src is None or dst is None:
        missing = [d for d, p in ((src_id, src), (dev_id, dst)) if p is None]
        say(f"carb-calibrate: no device probe of {', '.join(map(str, missing))}: calibrating the source's "
            f"prediction (carb-probe on that CPU lets the transfer start from both CPUs' convolution times)")
        return None
    say(f"carb-calibrate: device probes of {src_id} and {dev_id}: the K rows calibrate the probes' prediction "
        "(convolution times of each network on both CPUs)")
    return src, dst, fp


def device_identity_of(rows: pd.DataFrame) -> tuple[str, str]:
    """``(device name, device id)`` of the target ``rows`` (:func:`carb.model.cascade_data.device_identity`)."""
    from carb.model.cascade_data import device_identity

    name, dev_id, _ = device_identity(rows)
    return str(name or "unknown"), str(dev_id)


def spec_records(cfg: Any, source: Any, rows: pd.DataFrame) -> tuple | None:
    """``(source spec record, target spec record, weights)`` when the source model and the target rows are
    GPUs of the spec table (:func:`carb.data.gpu_specs.record_for_fingerprint`): the K rows may then start
    from the spec records' zero-shot (kept only where leave-one-out says it pays); else None. A record
    lacking a figure the ratio needs is noted and skipped (the K rows calibrate the source's prediction)."""
    from carb.data.gpu_specs import record_for_fingerprint
    from carb.model.cascade_data import device_identity
    from carb.model.spec_transfer import log_ratio

    def record(fp_json: str | None) -> dict[str, Any] | None:
        try:
            fp = json.loads(fp_json or "null")
        except (TypeError, ValueError):
            return None
        return record_for_fingerprint(fp) if isinstance(fp, dict) and fp.get("kind") == "cuda" else None

    src, dst = record(getattr(source, "device_fingerprint_", None)), record(device_identity(rows)[2])
    if cfg.get("spec") and src is not None:   # spec= with k > 0: the target GPU's record (checked against the rows')
        from carb.data.gpu_specs import gpu_spec

        dst = gpu_spec(str(cfg.spec), field="spec")
    if src is None or dst is None or src.get("name") == dst.get("name"):
        return None
    weights = {k: float(v) for k, v in cfg.zero_shot.weights.items()}
    try:
        for p in ("fp32", "fp16", "bf16"):
            log_ratio(src, dst, p, weights)
    except ConfigError as e:
        say(f"carb-calibrate: {e}: the K rows calibrate the source's prediction")
        return None
    say(f"carb-calibrate: spec records of {src['name']} and {dst['name']}: the K rows may start from the "
        "spec-sheet zero-shot (kept where leave-one-out says it pays)")
    return src, dst, weights


def _shrink_or_none(v: Any) -> float | str | None:
    """A configured shrink (``auto``, pseudo-rows) or None (unset)."""
    return None if v is None else "auto" if str(v) == "auto" else float(v)


def transfer_settings(cfg: Any) -> dict[str, Any]:
    """Keyword arguments of :class:`carb.model.transfer.TransferredCascade` from ``transfer`` and ``coverage``."""
    t = cfg.transfer
    prior = t.get("error_prior", "auto")
    if prior not in (None, "auto"):
        from pathlib import Path

        if not Path(str(prior)).is_file():
            raise ConfigError(f"transfer.error_prior: {prior!r} is not a file; allowed: auto, null or the path of a "
                              "table written by python -m scripts.bench.transfer_pairs --errors-out")
    from carb.model import transfer_prior   # interval rules of the device-level band (issue 44)

    rules = transfer_prior.configure(t.get("device_widen"), t.get("unmeasured_floor"), t.get("level_by_precision"),
                                     t.get("zero_shot_target_out"), t.get("target_out_fallback"),
                                     t.get("level_noise"))   # passed to
    # the transfer: nothing module-wide
    return {"interval_rules": rules,"affine_min_k": int(t.affine_min_k), "residual_min_k": int(t.residual_min_k),
            "ridge_alpha": float(t.ridge_alpha), "slope_bounds": (float(t.slope_min), float(t.slope_max)),
            "precision_shrink": ("auto" if str(t.precision_shrink) == "auto" else float(t.precision_shrink)),
            "precision_shrink_single": _shrink_or_none(t.get("precision_shrink_single")),
            "offset_weighting": str(t.get("offset_weighting", "equal")),
            "base_offsets_only": bool(t.get("base_offsets_only", True)),
            "keep_zero_shot": bool(t.get("keep_zero_shot", False)), "dispatch": bool(t.get("dispatch", True)),
            "source_weighting": str(t.get("source_weighting", "inverse_loo")),
            "coverage": float(cfg.coverage), "error_prior": t.get("error_prior", "auto"),
            "prior_rows": float(t.get("prior_rows", 10.0)),
            "prior_targets": tuple(t.get("prior_targets") or ("latency_ms", "energy_J")),
            "unseen_widen": max(abs(float(v)) for v in cfg.zero_shot.probe_log_error_band),   # conf/calibrate.yaml
            "pair_prior": t.get("pair_prior", "auto"),
            "repeat_floor": {str(k): float(v) for k, v in (t.get("repeatability_floor") or {}).items()}}


def _print_transfer(tr: Any, table: pd.DataFrame, n_heldout: int) -> None:
    """The transfer chosen per target, then the held-out accuracy table (when rows were held out)."""
    from carb.model.transfer import describe_form

    for p, q in (getattr(tr, "stand_ins_", None) or {}).items():
        say(f"carb-calibrate: {p} runs on another kernel path on {tr.device_name_} than on the source's CPU "
            f"(instruction set): the source's {q} cost stands in for it")
    print_unseen(tr)
    for target, info in tr.transfer_.items():
        say(f"carb-calibrate: {target}: {info['form']} ({describe_form(info)}) from {info['k']} rows")
        for p, r in (info.get("precision_loo") or {}).items():
            say(f"carb-calibrate: {target} {p}: leave-one-out error on its {r['n']} rows: zero-shot "
                f"{100 * math.expm1(r['zero_shot']):.1f} %, calibrated {100 * math.expm1(r['calibrated']):.1f} % "
                f"(mean |log error| as %) -> keeps the {r['kept'].replace('_', '-')}")
        entry = (tr.intervals_ or {}).get(target)
        if info["form"] != "source" and isinstance(entry, dict) and "lower" in entry:
            say(f"carb-calibrate: {target}: {100 * float(entry['coverage']):g} % interval x [{math.exp(entry['lower']):.2f}, "
                f"{math.exp(entry['upper']):.2f}] of the prediction ({entry.get('method', '')})")
    if len(table):
        say(f"carb-calibrate: held-out rows of {tr.device_name_} ({n_heldout} rows not used for fitting):")
        print(table.pivot_table(index=["target", "model"], values=["spearman", "mape_pct", "r2"]).round(3).to_string())
    else:
        say("carb-calibrate: no held-out rows (all measured rows were used for fitting)")


def _log_run(cfg: Any, tr: Any, table: pd.DataFrame, rows: pd.DataFrame, k: int, where: str,
             source: dict[str, Any], name: str, register: bool, kw: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Log the calibration run (params, held-out metrics, calibration rows, transfer and intervals) and the
    transferred model of device model ``name``, registered under it with ``register``; ``source``: the source
    model's ``uri`` and its :func:`carb.tracking.resolve_version`. Returns the run id and
    :func:`carb.tracking.log_cascade`'s answer."""
    from carb.model.transfer import describe_origin

    device, source_uri = tr.device_name_, source["uri"]
    metrics = {f"heldout_{r.target}_{r.model}_{m}": getattr(r, m) for r in table.itertuples()
               for m in ("spearman", "mape_pct", "r2")}
    tags = {"device": device, "device_id": tr.device_id_ or "unknown", "source_model": source_uri,
            "source_version": source.get("version", ""), "k": k,
            "forms": ",".join(f"{t}={i['form']}" for t, i in tr.transfer_.items())}
    run_name = cfg.get("run_name") or sweep_suffix(f"calibrate/{name}/k{k}")
    with tracking.start_run("calibrate", run_name, cfg.tracking.uri, tags=tags,
                            artifact_root=cfg.tracking.get("artifact_root"), sweep=sweep_tags()) as run_id:
        tracking.log_params({"source": source_uri, "data": where, "k": k, "rows": len(rows), "transfer": kw,
                             "coverage": float(cfg.coverage)})
        tracking.log_metrics(metrics)
        cal_rows = rows[rows["config_id"].astype(str).isin(tr.calibration_rows_)]
        tracking.log_dataset(cal_rows, name=f"{name}.calibration", source=where, context="calibration")
        tracking.log_dict({"transfer": tr.transfer_, "config_ids": tr.calibration_rows_}, "transfer.json")
        tracking.log_dict({k2: ({kk: vv for kk, vv in v.items() if kk != "log_ratios"} if isinstance(v, dict) else v)
                           for k2, v in tr.intervals_.items()}, "intervals.json")
        if len(table):
            tracking.log_text(table.to_csv(index=False), "heldout.csv")
        meta = {"device": device, "device_id": tr.device_id_ or "unknown",
                "device_fingerprint": tr.device_fingerprint_ or "unknown", "calibrated_from": source_uri,
                "source_version": source.get("version", ""), "k": str(k),
                "config_ids": json.dumps(tr.calibration_rows_)[:4000], "targets": ",".join(tr.targets_)}
        held = "; ".join(f"{r.target} {r.model}: Spearman {r.spearman:.3f}, MAPE {r.mape_pct:.1f} %"
                         for r in table.itertuples() if r.model == "calibrated")
        descr = (f"{device} (device_id {tr.device_id_}): {source_uri} (version {source.get('version', '?')}) "
                 f"calibrated on {k} measured rows of {where} ({tags['forms']})."
                 + (f" Held-out {len(rows) - k} rows: {held}." if held else " No held-out rows."))
        from carb.commands.train import served_model

        served, example, inputs = served_model(   # knobs in through MLflow's client, where they predict
            tr, cal_rows, cal_rows[list(tr.input_columns_)].head(5).reset_index(drop=True))
        info = tracking.log_cascade(served, example, inputs=inputs,
                                    registered_name=name if register else None, metadata=meta, description=descr,
                                    model_description=f"CARB cost model of {device} (device_id {tr.device_id_}): "
                                                      f"peak memory, energy and latency per batch, "
                                                      f"{describe_origin(tr)}.")
    return run_id, info


main = hydra_command("calibrate")(run_calibrate)

if __name__ == "__main__":
    main()
