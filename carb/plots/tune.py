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


def history_figure(numbers: Sequence[int], values: Sequence[float], metric: str, title: str) -> Figure:
    """Objective value of each completed trial (dots) and the best so far (step line).

    ``numbers``: trial numbers; ``values``: the objective (``metric``, in the target's unit), same length."""
    n = np.asarray(numbers, dtype=float)
    v = np.asarray(values, dtype=float)
    order = np.argsort(n)
    n, v = n[order], v[order]
    fig, ax = _figure((6, 4))
    ax.scatter(n, v, s=12, c="tab:blue", label="trial")
    if len(v):
        ax.step(n, np.minimum.accumulate(v), where="post", c="tab:red", lw=1.2, label="best so far")
    ax.set_xlabel("trial number")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(title)
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
