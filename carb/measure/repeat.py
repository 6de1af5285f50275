"""The collector's later passes: run-to-run repeatability of each row's latency (``measure.repeat``).

With ``repeat.passes`` = P >= 2, :func:`carb.measure.collector.measure_configs` measures its configurations
once (the first pass: each row written at once, its latency from one timed window), then P - 1 more times,
each pass over the first pass's ok rows in another order (:func:`pass_order`), so that a row's windows are
separated by other configurations' work (model building, cool-down, other networks' windows). Each later
window is a full measurement (cool-down, fresh model, warm-up, timed window, contention guard), of which the
latency is kept. The row is rewritten after each later pass: ``latency_ms`` the mean of its passes'
latencies, ``latency_passes`` their number, ``latency_repeat_spread`` their relative range
(:func:`carb.data.repeatability.relative_spread`), ``peak_memory_repeat_spread`` the relative range of the
passes' peak memory. Every other column stays the first pass's (its window, ``n_runs``, energy, peak memory,
guard shares); ``protocol_s`` adds each later pass's protocol.

A later window the guard found contended, or one that failed, is not used; a row left with one window gets
its reason. A run stopped before its later passes (``max_minutes``, a kill) leaves first-pass rows with
``latency_passes = 1`` and the reason "repeat pass pending": a restart with the same ``out`` measures their
later passes (:func:`pending_repeats`).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from carb.data.repeatability import MEMORY_SPREAD, PASSES, SPREAD, relative_spread
from carb.design.arch import ArchConfig
from carb.measure.base import REPEAT_ORDERS, Reasons, error_line, parse_missing_reason


@dataclass(frozen=True)
class RepeatPlan:
    """``passes``: timed windows per configuration, one per pass over the rows; ``order``: the later passes'
    order (one of :data:`carb.measure.base.REPEAT_ORDERS`)."""

    passes: int = 1
    order: str = "rotated"

    def __post_init__(self) -> None:
        if self.order not in REPEAT_ORDERS:
            raise ValueError(f"order: {self.order!r} is not allowed; allowed: {list(REPEAT_ORDERS)}")

    @classmethod
    def from_settings(cls, settings: Any) -> "RepeatPlan":
        """The plan of a meter's :class:`carb.measure.base.MeasureSettings` (one pass for settings without
        ``repeat_passes``, e.g. a test's fake meter)."""
        return cls(int(getattr(settings, "repeat_passes", 1) or 1), str(getattr(settings, "repeat_order", "rotated")))


def pass_order(n: int, k: int, passes: int, order: str) -> list[int]:
    """Indices ``0..n-1`` of the first pass's rows in the order of pass ``k`` (0-based; pass 0 is ``0..n-1``).

    ``rotated``: the first pass's order started at row ``k x n // passes`` (with two passes every row's two
    windows are at least ``n // 2`` rows apart); ``reversed``: odd passes backwards; ``shuffled``: a
    permutation seeded by ``k``."""
    idx = list(range(n))
    if k == 0 or n <= 1:
        return idx
    if order == "rotated":
        off = (k * n) // passes
        return idx[off:] + idx[:off]
    if order == "reversed":
        return idx[::-1] if k % 2 else idx
    if order == "shuffled":
        return [int(i) for i in np.random.default_rng(k).permutation(n)]
    raise ValueError(f"order: {order!r} is not allowed; allowed: {list(REPEAT_ORDERS)}")


def with_reason(text: Any, column: str, reason: str | None) -> str | None:
    """``missing_reason`` text with ``column``'s reason replaced by ``reason`` (removed when None)."""
    by_col = parse_missing_reason(text if isinstance(text, str) else None)
    by_col.pop(column, None)
    r = Reasons()
    for c, why in by_col.items():
        r.add(why, c)
    if reason:
        r.add(reason, column)
    return r.render() or None


def measured_memory(values: Sequence[Any]) -> list[float]:
    """The positive finite peak-memory values (MB) of ``values`` (a pass without one left out)."""
    out = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x) and x > 0:
            out.append(x)
    return out


def repeat_row(row: Mapping[str, Any], latencies_ms: Sequence[float], reason: str | None,
               memories_MB: Sequence[float] | None = None) -> dict[str, Any]:
    """``row`` with its latency the mean of ``latencies_ms`` (one per pass), ``latency_passes``,
    ``latency_repeat_spread`` (NaN with ``reason`` for fewer than two windows) and ``peak_memory_repeat_spread``
    of ``memories_MB`` (MB, one per pass that gave one; None: the row's own ``peak_memory_MB``, one pass), NaN
    with ``reason``, or why no second peak memory came where two windows did. ``peak_memory_MB`` stays the row's."""
    out = dict(row)
    lats = [float(x) for x in latencies_ms]
    out["latency_ms"] = sum(lats) / len(lats)
    out[PASSES] = float(len(lats))
    out[SPREAD] = relative_spread(lats)
    out["missing_reason"] = with_reason(out.get("missing_reason"), SPREAD,
                                        None if not math.isnan(out[SPREAD]) else reason)
    mems = measured_memory([out.get("peak_memory_MB")] if memories_MB is None else memories_MB)
    out[MEMORY_SPREAD] = relative_spread(mems)
    why = (None if not math.isnan(out[MEMORY_SPREAD]) else "peak_memory_MB not measured" if not mems
           else "later pass(es) gave no peak memory" if len(lats) >= 2 else reason)
    out["missing_reason"] = with_reason(out.get("missing_reason"), MEMORY_SPREAD, why)
    return out


def pending_reason(passes: int) -> str:
    """The reason of a first-pass row whose later passes are still to come."""
    return (f"repeat pass pending (measure.repeat.passes={passes}; a restart with the same out measures it)")


def single_reason(passes: int) -> str | None:
    """The reason of a row measured in one pass by design (None when later passes are planned)."""
    return "one timed window (measure.repeat.passes=1)" if passes <= 1 else None


def pending_repeats(existing: pd.DataFrame, configs: Sequence[ArchConfig], protocol: str,
                    passes: int) -> list[tuple[ArchConfig, dict[str, Any]]]:
    """The rows of ``existing`` (a file being resumed) whose later passes are still to measure: status ok,
    measured with ``protocol``, one pass so far, a configuration of ``configs``; as ``(config, row)`` in the
    file's order. Empty for ``passes`` < 2 or a file written before the repeat columns."""
    if passes < 2 or not len(existing) or PASSES not in existing.columns or "protocol_id" not in existing.columns:
        return []
    by_id = {c.config_id: c for c in configs}
    mask = ((existing["status"].astype(str) == "ok") & (existing["protocol_id"].astype(str) == str(protocol))
            & (pd.to_numeric(existing[PASSES], errors="coerce") == 1)
            & existing["config_id"].astype(str).isin(list(by_id)))
    return [(by_id[str(r["config_id"])], r) for r in existing[mask].to_dict("records")]


@dataclass
class Kept:
    """A first-pass ok row awaiting its later passes: the configuration, the row as written, the latency of
    each window kept (ms), why a later window was not used, and the peak memory of each kept window that gave
    one (MB; default: the row's own, the first pass's)."""

    arch: ArchConfig
    row: dict[str, Any]
    latencies_ms: list[float]
    failures: list[str]
    memories_MB: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.memories_MB:
            self.memories_MB = measured_memory([self.row.get("peak_memory_MB")])


def later_passes(kept: list[Kept], meter: Any, append: Callable[[Mapping[str, Any]], None],
                 build_model: Callable[[ArchConfig], Any], plan: RepeatPlan, stats: Any,
                 deadline: float | None = None, progress: Any = None) -> None:
    """Passes 2..P over ``kept`` (:func:`pass_order`): measure each configuration again and rewrite its row
    (:func:`repeat_row`). ``stats`` (:class:`carb.measure.collector.LoopStats`) counts the later windows
    (``repeat_windows``), those not used (``repeat_failed``) and the final spreads; with ``deadline``
    (``time.perf_counter()`` seconds) the passes stop before a window expected to end after it (rows keep the
    pending reason: a restart measures them)."""
    from carb.measure import is_oom

    n = len(kept)
    for k in range(1, plan.passes):
        for i in pass_order(n, k, plan.passes, plan.order):
            item = kept[i]
            now = time.perf_counter()
            if deadline is not None:
                expected = (sum(stats.row_s) / len(stats.row_s)) if stats.row_s else 0.0
                if now + expected > deadline:
                    stats.stopped = "deadline"
                    return
            why = None
            try:
                model = build_model(item.arch)
                measured = meter.measure(model, item.arch)
                model = None
                if str(measured.get("status") or "ok") != "ok":
                    why = f"pass {k + 1} {measured.get('status')}: {measured.get('error') or ''}".strip(": ")
                elif not (float(measured["latency_ms"]) > 0):
                    why = f"pass {k + 1} gave no latency"
            except Exception as e:  # noqa: BLE001 - a failed repeat is a reason, not a crash
                why = f"pass {k + 1} {'oom' if is_oom(e) else 'error'}: {error_line(e)}"
                meter.release()
            stats.repeat_windows += 1
            if why is None:
                item.latencies_ms.append(float(measured["latency_ms"]))
                item.memories_MB += measured_memory([measured.get("peak_memory_MB")])
                item.row["protocol_s"] = float(item.row.get("protocol_s") or 0.0) + float(measured["protocol_s"])
                stats.protocol_s += float(measured["protocol_s"])
            else:
                stats.repeat_failed += 1
                item.failures.append(" ".join(why.replace("; ", ", ").split()))
            last = k == plan.passes - 1
            reason = (pending_reason(plan.passes) if not last
                      else f"later pass(es) not used: {'; '.join(item.failures)}"[:300])
            item.row = repeat_row(item.row, item.latencies_ms, reason, item.memories_MB)
            append(item.row)
            stats.row_s.append(time.perf_counter() - now)
            if last and not math.isnan(item.row[SPREAD]):
                stats.spreads.append(float(item.row[SPREAD]))
            if progress is not None:
                progress.update(1)
