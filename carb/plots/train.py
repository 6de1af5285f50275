"""Training figures for ``carb-train`` (PNG artifacts): predicted vs measured per target, top LightGBM
importances per target, relative residuals by batch tier, and predicted vs measured on each
extrapolation split with B1 beside CARB.

Figures are at least :data:`MIN_WIDTH_PX` pixels wide at the DPI they are saved with, use the
Okabe-Ito colour-blind-safe palette, and name each batch tier's range in the legend.

Figures are built with matplotlib's object API on the Agg canvas (no pyplot, no display, no global
state), so they work headless and in parallel runs. Each function returns a ``Figure``.

Drawing cost: a log axis gets minor ticks at 2 and 5 of each decade (:func:`_log_axes`), not at 2-9 (each tick
is a line and a text object: the ten-panel extrapolation figure built ~850 of them, 0.9 s), and the
extrapolation grid is laid out once from its title lines (:func:`_grid_layout`) instead of by the constrained
layout engine, which measured every tick again (0.7 s). That figure now saves in about 0.6 s, not 1.7 s.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import LogLocator

from carb.analysis.evaluate import regression_metrics
from carb.data.schema import TARGETS
from carb.data.tiers import BATCH_TIERS, batch_tier

_UNITS = {"peak_memory_MB": "MB", "energy_J": "J", "latency_ms": "ms"}
#: Okabe-Ito colours per batch tier (colour-blind safe), and a marker each so print in grey works.
_TIER_COLORS = {"small": "#E69F00", "medium": "#56B4E9", "large": "#009E73", "xlarge": "#0072B2"}
_TIER_MARKERS = {"small": "o", "medium": "s", "large": "^", "xlarge": "D"}
#: Importances: cascade inputs vs upstream stage predictions.
_FEATURE_COLOR, _UPSTREAM_COLOR = "#0072B2", "#CC79A7"
#: Smallest figure width in pixels (at :data:`DPI`).
MIN_WIDTH_PX = 1200
DPI = 120


def _tier_label(name: str) -> str:
    """A batch tier with its range, e.g. ``small (bs 1-4)``, ``xlarge (bs > 128)``."""
    lo = 1
    for tier, hi in BATCH_TIERS:
        if tier == name:
            return f"{name} (bs > {lo - 1})" if hi >= 2**62 else f"{name} (bs {lo}-{hi})"
        lo = hi + 1
    return name


def _figure(n: int, width: float = 4.2, height: float = 4.0) -> tuple[Figure, list]:
    w = max(width * max(n, 1), MIN_WIDTH_PX / DPI)
    fig = Figure(figsize=(w, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, max(n, 1), squeeze=False)[0]
    return fig, list(axes)


def _log_axes(ax) -> None:
    """Both axes of ``ax`` logarithmic, minor ticks at 2 and 5 of each decade."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))


#: Fixed layout of a panel grid, in inches: a title line, the x label with its tick labels, the y label with its
#: tick labels, the figure title (:func:`_grid_layout`).
_TITLE_LINE_IN, _XLABEL_IN, _YLABEL_IN, _SUPTITLE_IN = 0.165, 0.55, 0.75, 0.45


def _grid_layout(fig: Figure, nr: int, nc: int, title_lines: Sequence[int]) -> None:
    """Place an ``nr`` x ``nc`` panel grid of ``fig`` with fixed margins (inches, :data:`_TITLE_LINE_IN` ...):
    ``title_lines[i]`` is the most title lines of a panel in row ``i``."""
    w, h = fig.get_size_inches()
    lines = [int(x) for x in title_lines] or [1]
    top_in = _SUPTITLE_IN + _TITLE_LINE_IN * lines[0] + 0.1
    gap_h = _XLABEL_IN + _TITLE_LINE_IN * max(lines[1:] or [0]) + 0.15
    bottom_in, left_in, right_in, gap_w = _XLABEL_IN, _YLABEL_IN, 0.15, _YLABEL_IN + 0.1
    ax_h = max((h - top_in - bottom_in - gap_h * (nr - 1)) / nr, 0.5)
    ax_w = max((w - left_in - right_in - gap_w * (nc - 1)) / nc, 0.5)
    fig.subplots_adjust(left=left_in / w, right=1 - right_in / w, bottom=bottom_in / h, top=1 - top_in / h,
                        hspace=gap_h / ax_h, wspace=gap_w / ax_w)


def _targets(df: pd.DataFrame, pred: pd.DataFrame, targets: Sequence[str]) -> list[str]:
    return [t for t in targets if f"pred_{t}" in pred.columns and t in df.columns
            and np.isfinite(df[t].to_numpy(float)).any()]


def pred_vs_measured(df: pd.DataFrame, pred: pd.DataFrame, targets: Sequence[str] = TARGETS,
                     title: str = "test split") -> Figure:
    """Log-log scatter of predicted vs measured per target, coloured by batch tier, with y = x and the
    test R^2 / MAE in each panel."""
    ts = _targets(df, pred, targets)
    fig, axes = _figure(len(ts))
    tiers = batch_tier(df["batch_size"].to_numpy())
    for ax, t in zip(axes, ts):
        y, p = df[t].to_numpy(float), pred[f"pred_{t}"].to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(p) & (y > 0) & (p > 0)
        for name, _ in BATCH_TIERS:
            m = ok & (tiers == name)
            if m.any():
                ax.scatter(y[m], p[m], s=12, alpha=0.7, color=_TIER_COLORS[name], marker=_TIER_MARKERS[name],
                           edgecolors="none", label=f"{_tier_label(name)}, n={int(m.sum())}")
        if ok.any():
            lo, hi = float(min(y[ok].min(), p[ok].min())), float(max(y[ok].max(), p[ok].max()))
            ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="y = x")
            _log_axes(ax)
        r = regression_metrics(y, p)
        ax.set_title(f"{t}\nR² = {r['r2']:.4f}, MAE = {r['mae']:.4g} {_UNITS[t]}", fontsize=11)
        ax.set_xlabel(f"measured [{_UNITS[t]}]")
        ax.set_ylabel(f"predicted [{_UNITS[t]}]")
        ax.legend(fontsize=9, loc="upper left", title="batch tier", title_fontsize=9, frameon=False)
        ax.tick_params(labelsize=9)
    if not ts:
        axes[0].text(0.5, 0.5, "no measured target", ha="center", va="center")
    fig.suptitle(f"CARB predicted vs measured ({title})", fontsize=12)
    return fig


def importances_figure(importances: Mapping[str, Sequence[tuple[str, float]]]) -> Figure:
    """Horizontal bars of the top LightGBM split importances per target (output of
    :func:`carb.analysis.evaluate.top_importances`)."""
    ts = [t for t in TARGETS if t in importances]
    fig, axes = _figure(len(ts), width=4.6, height=4.2)
    for ax, t in zip(axes, ts):
        items = list(importances[t])[::-1]
        names = [n for n, _ in items]
        vals = [v for _, v in items]
        colors = [_UPSTREAM_COLOR if n.startswith("pred_") else _FEATURE_COLOR for n in names]
        ax.barh(range(len(vals)), vals, color=colors)
        ax.set_yticks(range(len(vals)), names, fontsize=9)
        ax.set_title(f"{t}: top-{len(vals)} LightGBM splits", fontsize=11)
        ax.set_xlabel("split count")
        ax.set_ylabel("feature")
        ax.tick_params(axis="x", labelsize=9)
    if not ts:
        axes[0].text(0.5, 0.5, "no LightGBM member", ha="center", va="center")
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(color=_FEATURE_COLOR, label="input feature"),
                        Patch(color=_UPSTREAM_COLOR, label="upstream cascade prediction (pred_*)")],
               loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    fig.suptitle("Feature importances per cascade stage", fontsize=12)
    return fig


def residuals_by_tier(df: pd.DataFrame, pred: pd.DataFrame, targets: Sequence[str] = TARGETS) -> Figure:
    """Box plots of the relative residual ``100 * (predicted - measured) / measured`` (%) per batch
    tier, one panel per target."""
    ts = _targets(df, pred, targets)
    fig, axes = _figure(len(ts))
    tiers = batch_tier(df["batch_size"].to_numpy())
    for ax, t in zip(axes, ts):
        y, p = df[t].to_numpy(float), pred[f"pred_{t}"].to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(p) & (y != 0)
        rel = 100.0 * (p - y) / np.where(y == 0, np.nan, y)
        data, labels, colors = [], [], []
        for name, _ in BATCH_TIERS:
            m = ok & (tiers == name)
            if m.any():
                data.append(rel[m])
                labels.append(f"{_tier_label(name).replace(' (', chr(10) + '(')}\nn={int(m.sum())}")
                colors.append(_TIER_COLORS[name])
        if data:
            box = ax.boxplot(data, tick_labels=labels, showfliers=False, patch_artist=True,
                             medianprops={"color": "black"})
            for patch, c in zip(box["boxes"], colors):
                patch.set_facecolor(c)
                patch.set_alpha(0.6)
        ax.axhline(0.0, color="black", lw=0.8)
        ax.tick_params(labelsize=9)
        ax.set_title(f"{t}: relative residual by batch tier", fontsize=11)
        ax.set_ylabel("(pred - meas) / meas [%]")
        ax.set_xlabel("batch tier")
    if not ts:
        axes[0].text(0.5, 0.5, "no measured target", ha="center", va="center")
    return fig


#: Colours of the extrapolation figure: CARB (Okabe-Ito blue) and B1 (grey), markers apart for print.
_CARB_COLOR, _B1_COLOR = "#0072B2", "#999999"


def extrapolation_figure(predictions: Mapping[str, pd.DataFrame], table: pd.DataFrame | None = None,
                         targets: Sequence[str] = TARGETS) -> Figure:
    """Predicted vs measured (log-log) on each extrapolation split's test rows: one row of panels per
    target, one column per split; CARB's screening-mode predictions and B1's (FLOPs-only line) on the
    same rows, y = x, and in each title R^2 of both and, from ``table``
    (:func:`carb.analysis.extrapolation.evaluate_splits`), the interval coverage. ``predictions``:
    ``{split: test rows with the target, pred_<target> and b1_pred_<target> columns}``. B1 predictions
    <= 0 cannot be drawn on a log axis; the legend counts them."""
    splits = [s for s, df in predictions.items() if len(_targets(df, df, targets))]
    ts = [t for t in targets if any(t in _targets(predictions[s], predictions[s], [t]) for s in splits)]
    nr, nc = max(len(ts), 1), max(len(splits), 1)
    fig = Figure(figsize=(max(3.3 * nc, MIN_WIDTH_PX / DPI), 3.2 * nr + 0.6), dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(nr, nc, squeeze=False)
    info = {} if table is None else {(r["split"], r["target"]): r for r in table.to_dict("records")}
    title_lines = [1] * nr
    for i, t in enumerate(ts):
        for j, sp in enumerate(splits):
            ax, df = axes[i][j], predictions[sp]
            if t not in _targets(df, df, [t]):
                ax.set_visible(False)
                continue
            y, p = df[t].to_numpy(float), df[f"pred_{t}"].to_numpy(float)
            b = df[f"b1_pred_{t}"].to_numpy(float) if f"b1_pred_{t}" in df.columns else np.full(len(df), np.nan)
            ok, okb = np.isfinite(y) & (y > 0) & np.isfinite(p) & (p > 0), np.isfinite(y) & (y > 0) & np.isfinite(b)
            hidden = int((okb & (b <= 0)).sum())
            okb &= b > 0
            r, rb = regression_metrics(y, p), regression_metrics(y[np.isfinite(b)], b[np.isfinite(b)])
            label_b = "B1 (FLOPs-only)" + (f"; {hidden} at <= 0 not drawn" if hidden else "")
            ax.scatter(y[okb], b[okb], s=10, marker="x", color=_B1_COLOR, linewidths=0.8, label=label_b)
            ax.scatter(y[ok], p[ok], s=11, marker="o", color=_CARB_COLOR, alpha=0.7, edgecolors="none",
                       label=f"CARB, n={int(ok.sum())}")
            vals = np.concatenate([y[ok], p[ok], b[okb]])
            if len(vals):
                lo, hi = float(vals.min()), float(vals.max())
                ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="y = x")
                _log_axes(ax)
            row = info.get((sp, t), {})
            cov = row.get("interval_coverage")
            lines = [str(row["description"])] if i == 0 and row.get("description") else []
            lines += [f"{sp}: {t}", f"R² CARB {r['r2']:.3f}, B1 {rb['r2']:.3f}"]
            if cov is not None and np.isfinite(cov):
                lines.append(f"share inside CARB's interval {cov:.2f}")
            ax.set_title("\n".join(lines), fontsize=9)
            title_lines[i] = max(title_lines[i], len(lines))
            ax.set_xlabel(f"measured [{_UNITS[t]}]", fontsize=9)
            ax.set_ylabel(f"predicted [{_UNITS[t]}]", fontsize=9)
            ax.tick_params(labelsize=8)
            ax.legend(fontsize=7, loc="upper left", frameon=False)
    if not ts:
        axes[0][0].text(0.5, 0.5, "no extrapolation split", ha="center", va="center")
    fig.suptitle("Extrapolation: trained on the lower range of one knob, scored on the upper "
                 "(screening-mode predictions)", fontsize=12)
    _grid_layout(fig, nr, nc, title_lines)
    return fig


def train_figures(test: pd.DataFrame, pred: pd.DataFrame, imps: dict, targets: list[str],
                  xval: pd.DataFrame | None = None,
                  xval_predictions: Mapping[str, pd.DataFrame] | None = None,
                  only: Sequence[str] | None = None) -> dict[str, Figure]:
    """The figures ``carb-train`` logs, by artifact path: predicted vs measured, importances, residuals
    by batch tier, and with ``xval_predictions`` (each extrapolation split's test rows with predictions;
    ``xval`` its table) the extrapolation figure. ``only``: just these artifact paths (worker processes
    draw one each)."""
    make = {"figures/pred_vs_measured.png": lambda: pred_vs_measured(test, pred, targets),
            "figures/importances.png": lambda: importances_figure(imps),
            "figures/residuals_by_batch_tier.png": lambda: residuals_by_tier(test, pred, targets)}
    if xval_predictions:
        make["figures/extrapolation.png"] = lambda: extrapolation_figure(xval_predictions, xval, targets)
    return {k: f() for k, f in make.items() if only is None or k in only}
