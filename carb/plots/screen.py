"""Figures for screening: the Pareto plot (all candidates, feasible ones, the front, budget lines,
out-of-domain candidates).

Built with matplotlib's object API on the Agg canvas (no pyplot, no global backend switch)."""
from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from carb.model.encoding import pred_name

LABELS = {"energy_J_per_image": "predicted energy (J per image)",
          "latency_ms_per_image": "predicted latency (ms per image)",
          "energy_J": "predicted energy (J per batch)", "peak_memory_MB": "predicted peak memory (MB)",
          "latency_ms": "predicted latency (ms per batch)",
          "hj_score": "hj_score (CARB's accuracy-energy score, 0-1)"}


#: Units of the targets, for budget labels.
UNITS = {"energy_J": "J", "peak_memory_MB": "MB", "latency_ms": "ms"}
#: Okabe-Ito colours (distinguishable with the common colour-vision deficiencies), one per decision.
COLOURS = {"accept": "#0072B2", "borderline": "#E69F00", "unverified": "#CC79A7", "reject": "0.72",
           "outside": "#009E73", "front": "#D55E00"}


def pareto_figure(result: Any):
    """Scatter of the whole grid on the two Pareto axes (log scales) coloured by the screening decision,
    with the terminal's words and counts (accept, borderline: profile, unverified, reject), the Pareto
    front (joined as a step line), candidates outside the model's training domain crossed, and each
    budget line labelled with its value and unit outside the plotting area (never over a marker)."""
    df = result.scored
    cols = list(getattr(result, "axis_columns", None) or [pred_name(a) for a in result.axes])
    labels = list(result.axes) if len(result.axes) == 2 else (list(result.axes) * 2)[:2]
    axes = [a.lstrip("-") for a in labels]   # "-top1": top1, maximized
    x, y = (cols + cols)[:2] if len(cols) != 2 else cols
    fig = Figure(figsize=(8, 5.5))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.scatter([], [], s=0, label=f"all candidates ({len(df)})")
    style = {"reject": dict(s=6, rasterized=True), "accept": dict(s=10),
             "borderline": dict(s=40, facecolors="none", edgecolors=COLOURS["borderline"]),
             "unverified": dict(s=40, marker="s", facecolors="none", edgecolors=COLOURS["unverified"])}
    words = {"accept": "accept", "borderline": "borderline: profile",
             "unverified": "unverified: outside the domain or unmeasured",
             "reject": "reject"}
    for d in ("reject", "accept", "borderline", "unverified"):
        sub = df[df["decision"] == d]
        if len(sub):
            kw = dict(style[d])
            if "edgecolors" not in kw:
                kw["c"] = COLOURS[d]
            ax.scatter(sub[x], sub[y], label=f"{words[d]} ({len(sub)})", **kw)
    if "feasible" in df:
        ax.scatter([], [], s=0, label=f"feasible ({int(df['feasible'].sum())}: predictions within budget)")
    unscored = int((~df["stage1_kept"].astype(bool) & df[[x, y]].isna().any(axis=1)).sum()) \
        if "stage1_kept" in df else 0       # two-stage, screen.rescore=top_k: no target prediction outside the top K
    if unscored:
        ax.scatter([], [], s=0, label=f"not drawn ({unscored}): not re-scored by the target model")
    if "in_domain" in df:
        out = df[~df["in_domain"].astype(bool)]
        if len(out):
            ax.scatter(out[x], out[y], s=14, marker="x", c=COLOURS["outside"], lw=0.6, alpha=0.6, rasterized=True,
                       label=f"outside the training domain ({len(out)})")
    front = df[df["pareto"]].sort_values(x)
    if len(front):
        ax.step(front[x], front[y], where="post", c=COLOURS["front"], lw=1.2)
        ax.scatter(front[x], front[y], s=28, c=COLOURS["front"], marker="D", label=f"Pareto front ({len(front)})")
    for t, limit in result.budget.items():
        text = f"budget {limit:g} {UNITS.get(t, '')}".rstrip()
        if t == axes[0]:
            ax.axvline(limit, ls="--", c="k", lw=1)
            ax.text(limit, 1.01, text, va="bottom", ha="center", fontsize=8, clip_on=False,
                    transform=ax.get_xaxis_transform())
        elif t == axes[1]:
            ax.axhline(limit, ls="--", c="k", lw=1)
            ax.text(1.01, limit, text, va="center", ha="left", fontsize=8, clip_on=False,
                    transform=ax.get_yaxis_transform())
    for a, col in ((ax.set_xscale, x), (ax.set_yscale, y)):
        v = df[col].to_numpy(dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if len(v) and v.max() / v.min() > 30 and col != "hj_score":   # a 0-1 score stays linear
            a("log")
    better = [" (higher is better)" if a.startswith("-") else "" for a in labels]
    ax.set_xlabel(LABELS.get(axes[0], axes[0]) + better[0])
    ax.set_ylabel(LABELS.get(axes[1], axes[1]) + better[1])
    ax.set_title(f"Screening: {len(df)} candidates, objective {result.objective}", pad=16)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.12, 1.0), borderaxespad=0.0)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig
