"""Figures for ``carb-tune``: a sub-study's optimization history and its parameter importances.

Plain inputs (trial numbers and values, an importance mapping), so this module needs neither Optuna nor
pyplot: figures are built with matplotlib's object API on the Agg canvas.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def _figure(size: tuple[float, float]) -> tuple[Figure, object]:
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    return fig, fig.subplots()


#: Units of the targets (a tuned metric is in its target's unit, MAPE in %).
UNITS = {"energy_J": "J", "peak_memory_MB": "MB", "latency_ms": "ms"}


def _metric_label(metric: str, target: str | None) -> str:
    """``"validation mae of latency_ms (ms)"``; MAPE in %; the bare metric without a target."""
    if target is None:
        return f"validation {metric}"
    unit = "%" if metric.lower() == "mape" else UNITS.get(target, "")
    return f"validation {metric} of {target}" + (f" ({unit})" if unit else "")


def history_figure(numbers: Sequence[int], values: Sequence[float], metric: str, title: str,
                   target: str | None = None, pruned: Sequence[int] = ()) -> Figure:
    """Objective value of each completed trial (dots), the best so far (step line) and the pruned
    trials (ticks on the trial axis: they have no final value).

    ``numbers``: completed trial numbers; ``values``: their objective (``metric`` of ``target``, in the
    target's unit), same length; ``pruned``: numbers of the pruned trials."""
    n = np.asarray(numbers, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(n)
    n, v = n[order], v[order]
    fig, ax = _figure((6.5, 4))
    ax.scatter(n, v, s=12, c="#0072B2", label=f"completed trial ({len(n)})")
    if len(v):
        ax.step(n, np.minimum.accumulate(v), where="post", c="#D55E00", lw=1.2, label="best so far")
    if len(pruned):
        ax.plot(np.asarray(pruned, dtype=float), np.zeros(len(pruned)), ls="none", marker="|", ms=12,
                c="0.45", transform=ax.get_xaxis_transform(), label=f"pruned trial ({len(pruned)})")
    ax.set_xlabel("trial number")
    ax.set_ylabel(_metric_label(metric, target))
    ax.set_title(title if target is None or target in title else f"{title}: {_metric_label(metric, target)}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def importance_figure(importances: Mapping[str, float], title: str) -> Figure:
    """Horizontal bars of parameter importances (fANOVA shares summing to 1), largest on top."""
    items = sorted(importances.items(), key=lambda kv: kv[1])
    fig, ax = _figure((6, max(2.5, 0.35 * len(items) + 1.2)))
    ax.barh([k for k, _ in items], [float(v) for _, v in items], color="tab:blue")
    ax.set_xlabel("importance (share of the objective's variance)")
    ax.set_ylabel("parameter")
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
