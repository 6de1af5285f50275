"""Figures for screening: the Pareto plot (all candidates, feasible ones, the front, budget lines,
out-of-domain candidates).

Built with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch)."""
from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from carb.model.encoding import pred_name

LABELS = {"energy_J": "predicted energy (J per batch)", "peak_memory_MB": "predicted peak memory (MB)",
          "latency_ms": "predicted latency (ms per batch)"}


def pareto_figure(result: Any):
    """Scatter of the whole grid on the two Pareto axes (log scales), feasible candidates, the front
    (joined as a step line) and the budget lines; borderline candidates ringed, candidates outside the
    model's training domain crossed, unverified ones (precision never measured) boxed."""
    df = result.scored
    axes = result.axes if len(result.axes) == 2 else (result.axes + result.axes)[:2]
    x, y = pred_name(axes[0]), pred_name(axes[1])
    fig = Figure(figsize=(7, 5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.scatter(df[x], df[y], s=6, c="0.75", label=f"all candidates ({len(df)})", rasterized=True)
    feas = df[df["feasible"]]
    ax.scatter(feas[x], feas[y], s=10, c="tab:blue", label=f"feasible ({len(feas)})")
    border = df[df["decision"] == "borderline"]
    if len(border):
        ax.scatter(border[x], border[y], s=40, facecolors="none", edgecolors="tab:orange",
                   label=f"borderline: profile ({len(border)})")
    if "in_domain" in df:
        out = df[~df["in_domain"].astype(bool)]
        if len(out):
            ax.scatter(out[x], out[y], s=14, marker="x", c="tab:purple", lw=0.6, alpha=0.6, rasterized=True,
                       label=f"outside the training domain ({len(out)})")
    unver = df[df["decision"] == "unverified"]
    if len(unver):
        ax.scatter(unver[x], unver[y], s=40, marker="s", facecolors="none", edgecolors="tab:brown",
                   label=f"unverified: precision never measured ({len(unver)})")
    front = df[df["pareto"]].sort_values(x)
    if len(front):
        ax.step(front[x], front[y], where="post", c="tab:red", lw=1.2)
        ax.scatter(front[x], front[y], s=28, c="tab:red", marker="D", label=f"Pareto front ({len(front)})")
    for t, limit in result.budget.items():
        if t == axes[0]:
            ax.axvline(limit, ls="--", c="k", lw=1)
            ax.text(limit, 0.98, f" {t} budget", va="top", fontsize=8, transform=ax.get_xaxis_transform())
        elif t == axes[1]:
            ax.axhline(limit, ls="--", c="k", lw=1)
            ax.text(0.99, limit, f"{t} budget ", va="bottom", ha="right", fontsize=8,
                    transform=ax.get_yaxis_transform())
    for a, col in ((ax.set_xscale, x), (ax.set_yscale, y)):
        v = df[col].to_numpy(dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if len(v) and v.max() / v.min() > 30:
            a("log")
    ax.set_xlabel(LABELS.get(axes[0], axes[0]))
    ax.set_ylabel(LABELS.get(axes[1], axes[1]))
    ax.set_title(f"Screening: {len(df)} candidates, objective {result.objective}")
    ax.legend(fontsize=8, loc="best")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
