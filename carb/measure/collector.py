"""The collection loop's building blocks: shards of a design space, the output file checks (writable, this
schema, this device), resume (the ``config_id`` values a file already holds), and one dataset row from
a configuration, its static features and what the meter measured (or an oom/error status).

The loop itself, :func:`measure_configs`, measures configurations one by one into an appender and keeps
timing statistics, then measures them again in the later passes of ``measure.repeat`` (run-to-run
repeatability, :mod:`carb.measure.repeat`); the ``carb-collect`` command (:mod:`carb.commands.collect`)
sets it up and logs it to MLflow.
"""
from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb.data.io import load_dataset
from carb.data.schema import SCHEMA, empty_frame
from carb.design.arch import ArchConfig
from carb.errors import ConfigError, DatasetError
from carb.measure.base import error_line  # noqa: F401 - one line per failure, also gpu_run's

SUFFIXES = (".parquet", ".csv")


def shard_configs(configs: Sequence[ArchConfig], seed: int, index: int = 0, count: int = 1) -> list[ArchConfig]:
    """Shuffle ``configs`` with ``seed`` (duplicates by config_id dropped) and return shard ``index``
    of ``count``: ``order[index::count]``. The shards of one seed are disjoint and cover all."""
    check_shard(index, count)
    seen: dict[str, ArchConfig] = {}
    for c in configs:
        seen.setdefault(c.config_id, c)
    unique = list(seen.values())
    order = np.random.default_rng(int(seed)).permutation(len(unique))
    return [unique[i] for i in order[index::count]]


def check_shard(index: Any, count: Any) -> tuple[int, int]:
    """Validate ``shard.index`` / ``shard.count``; return them as ints."""
    try:
        i, n = int(index), int(count)
    except (TypeError, ValueError):
        raise ConfigError(f"shard: index and count must be integers, got index={index!r} count={count!r}") from None
    if n < 1:
        raise ConfigError(f"shard.count: must be >= 1, got {n}")
    if not 0 <= i < n:
        raise ConfigError(f"shard.index: must satisfy 0 <= index < count={n}, got {i}")
    return i, n


def resolve_out(out: Any, index: int, count: int) -> Path:
    """The file this shard writes: ``out`` itself for a single shard with a .parquet/.csv suffix,
    else ``out/shard-<index>-of-<count>.parquet``."""
    if out is None or str(out).strip() == "":
        raise ConfigError("out: give an output file (.parquet or .csv) or folder")
    p = Path(str(out)).expanduser()
    suffix = p.suffix.lower()
    if suffix in SUFFIXES:
        if count > 1:
            raise ConfigError(f"out: with shard.count={count} give a folder (each shard writes "
                              f"shard-<index>-of-<count>.parquet in it), got a file {str(p)!r}")
        return p
    if suffix and not p.is_dir():
        raise ConfigError(f"out: {str(p)!r} has suffix {suffix!r}; allowed: {list(SUFFIXES)} or a folder")
    return p / f"shard-{index}-of-{count}.parquet"


def check_writable(path: Path) -> None:
    """Raise :class:`ConfigError` unless ``path`` can be created/replaced (probes with a temp file;
    creates missing parent folders)."""
    parent = path.parent
    if path.exists() and path.is_dir():
        raise ConfigError(f"out: {str(path)!r} is a folder, expected a dataset file")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / f".carb-write-probe-{uuid.uuid4().hex}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"out: {str(path)!r} is not writable ({e.strerror or e})") from None


def read_schema(path: Path, zoo: bool = False) -> pd.DataFrame:
    """The dataset in ``path`` (empty frame if absent); :class:`DatasetError` when it exists but is not
    a dataset of this schema (``zoo``: the zoo's, :mod:`carb.data.zoo_schema`)."""
    from carb.data.zoo_schema import ZOO_SCHEMA, empty_zoo_frame, is_zoo_frame

    schema = ZOO_SCHEMA if zoo else SCHEMA
    if not path.exists():
        return empty_zoo_frame() if zoo else empty_frame()
    try:
        df = load_dataset(path)
    except DatasetError as e:
        raise DatasetError(f"out: {str(path)!r} exists but is not a CARB dataset of this schema ({e}); "
                           f"choose another out") from None
    if is_zoo_frame(df) != zoo:
        kind = "a zoo" if is_zoo_frame(df) else "a ResNet"
        raise DatasetError(f"out: {str(path)!r} holds {kind} dataset; this space needs the other schema, "
                           f"choose another out")
    extra = [c for c in df.columns if c not in schema]
    if extra:
        raise DatasetError(f"out: {str(path)!r} has columns outside the schema {extra[:5]}; it belongs to "
                           f"another schema, choose another out")
    return df


def check_device(df: pd.DataFrame, path: Path, identity: Mapping[str, str]) -> None:
    """:class:`DatasetError` when ``df`` holds rows of a device other than ``identity``'s: another
    name or kind, or (where both carry one) another ``device_id`` (same name, different hardware)."""
    if not len(df):
        return
    other = df[(df["device_name"] != identity["device_name"]) | (df["device_kind"] != identity["device_kind"])]
    if len(other):
        r = other.iloc[0]
        raise DatasetError(f"out: {str(path)!r} holds rows of device {r['device_name']!r} ({r['device_kind']}); "
                           f"this run measures {identity['device_name']!r} ({identity['device_kind']}); "
                           f"choose another out")
    mine = identity.get("device_id")
    if mine and "device_id" in df.columns:
        ids = df["device_id"].dropna().astype(str)
        foreign = sorted(set(ids) - {mine})
        if foreign:
            raise DatasetError(f"out: {str(path)!r} holds rows of device_id {foreign[0]} (same name "
                               f"{identity['device_name']!r}, different fingerprint); this machine is "
                               f"device_id {mine}; choose another out")


def check_protocol(df: pd.DataFrame, path: Path, protocol: str, mix: bool = False) -> None:
    """:class:`DatasetError` when ``df`` holds rows measured with another ``protocol_id`` (other
    measurement settings or another device) and ``mix`` (``resume.mix_protocols``) is not set."""
    if not len(df) or mix or "protocol_id" not in df.columns:
        return
    other = sorted(set(df["protocol_id"].dropna().astype(str)) - {protocol})
    if other:
        raise DatasetError(f"out: {str(path)!r} was measured with protocol {other[0]} (other measure settings "
                           f"or device); this run is protocol {protocol}: use the same measure settings, "
                           f"another out, or resume.mix_protocols=true")


def sibling_shards(out: Path) -> pd.DataFrame:
    """Rows of the other shard files beside ``out`` (``shard-*-of-*.parquet`` in its folder; empty frame
    when ``out`` is not a shard file or has no siblings). A restart with another ``shard.count`` skips
    what any earlier shard measured."""
    if not out.name.startswith("shard-") or not out.parent.is_dir():
        return empty_frame()
    frames = []
    for f in sorted(out.parent.glob("shard-*-of-*.parquet")):
        if f.resolve() != out.resolve():
            try:
                frames.append(load_dataset(f))
            except DatasetError:
                continue
    return pd.concat(frames, ignore_index=True) if frames else empty_frame()


def row_schema(cfg: Any) -> Mapping[str, str]:
    """The dataset schema a configuration's row follows: the zoo's for a named network
    (:class:`carb.design.zoo_space.ZooConfig`), else the ResNet one."""
    if hasattr(cfg, "model_name"):
        from carb.data.zoo_schema import ZOO_SCHEMA

        return ZOO_SCHEMA
    return SCHEMA


def make_row(cfg: ArchConfig, identity: Mapping[str, str], static: Mapping[str, Any],
             measured: Mapping[str, Any] | None, status: str, error: str | None) -> dict[str, Any]:
    """One dataset row (all columns of its schema, :func:`row_schema`)."""
    schema = row_schema(cfg)
    row: dict[str, Any] = {c: (pd.NA if schema[c] == "string" else np.nan) for c in schema}
    row.update(identity)
    row.update(cfg.to_dict())
    row.update({k: static[k] for k in static if k in schema})
    row["config_id"] = cfg.config_id
    row["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    row["status"] = status
    row["error"] = error if error else pd.NA
    if measured is not None:
        row.update({k: measured[k] for k in measured if k in schema})
        row["error"] = row["error"] if isinstance(row["error"], str) and row["error"] else pd.NA
    else:
        row["missing_reason"] = f"not measured: status={status}"
    if row.get("missing_reason") is None:
        row["missing_reason"] = pd.NA
    return row


@dataclass
class LoopStats:
    """What the collection loop did so far (filled in place, so it survives an interrupt).

    ``counts``: rows by status; ``stopped``: ``"deadline"`` when the time budget ended the loop;
    ``repeated``: rows whose first timed window the contention guard rejected (measured again);
    ``protocol_s``: sum of the rows' measurement protocol (s); ``strict_s``: cool-down + timed loop +
    utilization window (s); ``phases_s``: seconds by phase (model building, static features and the
    meter's phases); ``row_s``: wall seconds per measured window (first pass and later passes);
    ``repeat_windows``: windows of the later passes (:mod:`carb.measure.repeat`), ``repeat_failed``: those
    not used (contended, failed); ``spreads``: the finished rows' ``latency_repeat_spread``."""

    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "oom": 0, "error": 0, "contended": 0})
    repeated: int = 0
    stopped: str | None = None
    protocol_s: float = 0.0
    strict_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=lambda: {"build_model_s": 0.0, "static_features_s": 0.0})
    row_s: list[float] = field(default_factory=list)
    repeat_windows: int = 0
    repeat_failed: int = 0
    spreads: list[float] = field(default_factory=list)

    @property
    def n_measured(self) -> int:
        """Rows written by the loop (any status)."""
        return sum(self.counts.values())


def measure_configs(todo: Sequence[ArchConfig], meter: Any, identity: Mapping[str, str],
                    append: Callable[[Mapping[str, Any]], None], build_model: Callable[[ArchConfig], Any],
                    static_features: Callable[[Sequence[ArchConfig]], Mapping[str, Mapping[str, Any]]],
                    stats: LoopStats, deadline: float | None = None, progress: Any = None,
                    repeat: Any = None, pending: Sequence[tuple[ArchConfig, Mapping[str, Any]]] = ()) -> LoopStats:
    """Measure ``todo`` one configuration at a time and ``append`` each row at once, then measure the ok
    ones again in the later passes of ``repeat`` (:class:`carb.measure.repeat.RepeatPlan`; None: the meter's
    ``measure.repeat`` settings), each pass in another order, rewriting each row with the mean latency and
    the run-to-run spread (:func:`carb.measure.repeat.later_passes`). ``pending``: ``(config, row)`` of rows
    an earlier run measured once and whose later passes are still to come
    (:func:`carb.measure.repeat.pending_repeats`); they join the later passes.

    A configuration whose build or measurement fails becomes an ``oom`` or ``error`` row with the
    message (the meter releases its memory) and the loop goes on. With ``deadline``
    (``time.perf_counter()`` seconds), the loop stops before a configuration expected to end after it
    (expected length: the mean window time so far, with the later passes of every row measured so far
    reserved). ``progress``: a tqdm-like bar (``update``, ``set_postfix``) or None. Returns ``stats``,
    updated in place."""
    from carb.measure import is_oom
    from carb.measure.repeat import Kept, RepeatPlan, later_passes, pending_reason, repeat_row, single_reason

    plan = repeat if repeat is not None else RepeatPlan.from_settings(getattr(meter, "settings", None))
    kept = [Kept(a, dict(r), [float(r["latency_ms"])], []) for a, r in pending] if plan.passes > 1 else []

    t0 = time.perf_counter()
    static = static_features(todo)
    stats.phases_s["static_features_s"] = stats.phases_s.get("static_features_s", 0.0) + time.perf_counter() - t0
    for arch in todo:
        now = time.perf_counter()
        if deadline is not None:
            expected = (sum(stats.row_s) / len(stats.row_s)) if stats.row_s else 0.0
            if now + expected * (1 + (plan.passes - 1) * (len(kept) + 1)) > deadline:
                stats.stopped = "deadline"
                break
        status, err, measured = "ok", None, None
        model = None
        try:
            t_build = time.perf_counter()
            model = build_model(arch)
            stats.phases_s["build_model_s"] += time.perf_counter() - t_build
            measured = meter.measure(model, arch)
        except Exception as e:  # noqa: BLE001 - one config's failure is a row, not a crash
            status = "oom" if is_oom(e) else "error"
            err = error_line(e)
        model = None
        if status != "ok":
            meter.release()
        else:
            stats.protocol_s += float(measured["protocol_s"])
            ph = meter.last_phases
            stats.strict_s += sum(ph.get(k, 0.0) for k in ("cooldown_s", "timed_loop_s", "utilization_s"))
            for k, v in ph.items():
                if k != "protocol_s":
                    stats.phases_s[k] = stats.phases_s.get(k, 0.0) + float(v)
        if measured is not None:
            status = str(measured.get("status") or status)
            if float(measured.get("n_windows") or 1) > 1:
                stats.repeated += 1
        row = make_row(arch, identity, static[arch.config_id], measured, status, err)
        if status == "ok":
            row = repeat_row(row, [float(row["latency_ms"])], single_reason(plan.passes) or pending_reason(plan.passes))
            if plan.passes > 1:
                kept.append(Kept(arch, row, [float(row["latency_ms"])], []))
        try:
            append(row)
        except OSError as e:  # full disk, lost mount: the file keeps every row written before
            raise DatasetError(f"out: writing the row of {arch.config_id} failed ({e.strerror or e}); the "
                               f"{stats.n_measured} row(s) measured before it are intact; free space and run "
                               f"again to resume") from None
        stats.counts[status] = stats.counts.get(status, 0) + 1
        stats.row_s.append(time.perf_counter() - now)
        if progress is not None:
            progress.update(1)
            progress.set_postfix(ok=stats.counts["ok"], oom=stats.counts["oom"], err=stats.counts["error"],
                                 contended=stats.counts.get("contended", 0), repeated=stats.repeated,
                                 refresh=False)
    if kept:   # the first pass reserved their time when a deadline is set
        try:
            later_passes(kept, meter, append, build_model, plan, stats, deadline=deadline, progress=progress)
        except OSError as e:
            raise DatasetError(f"out: rewriting a row in a later pass failed ({e.strerror or e}); the rows written "
                               f"before are intact; free space and run again to resume") from None
    return stats


def checked_identity(meter: Any, existing: pd.DataFrame, out: Path, mix_protocols: bool = False) -> dict[str, str]:
    """The meter's device identity with its ``protocol_id`` (measurement settings + device), checked
    against the rows ``out`` already holds: the same device (:func:`check_device`) and the same protocol
    (:func:`check_protocol`, unless ``mix_protocols``)."""
    from carb.measure.fingerprint import protocol_id

    identity = meter.identity()
    check_device(existing, out, identity)
    settings = meter.settings.to_dict()
    if int(settings.get("repeat_passes", 1)) == 1:   # one pass: the protocol of the files written before repeats
        settings = {k: v for k, v in settings.items() if not k.startswith("repeat_")}
    identity["protocol_id"] = protocol_id(settings, identity.get("device_id") or identity["device_name"])
    check_protocol(existing, out, identity["protocol_id"], mix_protocols)
    return identity


def remaining_configs(shard: Sequence[ArchConfig], existing: pd.DataFrame, out: Path, device_name: str,
                      retry_statuses: Sequence[str] = (), limit: int | None = None) -> list[ArchConfig]:
    """The shard's configurations still to measure (resume): those that neither ``out`` nor a sibling
    shard file of the same device holds with a status outside ``retry_statuses``; the first ``limit``."""
    done = set(existing.loc[~existing["status"].isin(retry_statuses), "config_id"].astype(str))
    siblings = sibling_shards(out)
    if len(siblings):
        mine = siblings[siblings["device_name"] == device_name]
        done |= set(mine.loc[~mine["status"].isin(retry_statuses), "config_id"].astype(str))
    todo = [x for x in shard if x.config_id not in done]
    return todo[:limit] if limit is not None else todo


def loop_summary(stats: LoopStats, loop_s: float, write_s: float) -> dict[str, Any]:
    """What a collection loop of ``loop_s`` seconds did: rows by status, repeated timed windows, seconds
    per configuration, overhead fractions (the loop's time outside the rows' protocol, and outside its
    strict part) and seconds by phase (``write_s``: the appender's writing)."""
    n_meas, counts = stats.n_measured, stats.counts
    timed = loop_s > 0 and n_meas
    return {
        "n_ok": counts["ok"], "n_oom": counts["oom"], "n_error": counts["error"],
        "n_contended": counts.get("contended", 0), "n_repeated": stats.repeated,
        "n_repeat_windows": stats.repeat_windows, "n_repeat_failed": stats.repeat_failed,
        "latency_repeat_spread_median": float(np.median(stats.spreads)) if stats.spreads else math.nan,
        "repeated_fraction": stats.repeated / n_meas if n_meas else math.nan,
        "n_measured": n_meas, "stopped": stats.stopped, "loop_s": loop_s,
        "s_per_config": loop_s / n_meas if n_meas else math.nan,
        "overhead_fraction": (1.0 - stats.protocol_s / loop_s) if timed else math.nan,
        "strict_overhead_fraction": (1.0 - stats.strict_s / loop_s) if timed else math.nan,
        "write_s": write_s, "phases_s": {**stats.phases_s, "write_s": write_s},
    }
