"""Figures for the characterization tables of :mod:`carb.commands.characterize` (paper Figures 1-4).

Each function takes the tables (DataFrames) and returns a :class:`matplotlib.figure.Figure`, or None
when there is nothing measured to draw. Figures are built with the object-oriented API (no pyplot
state; PNGs render through the Agg canvas), have axis labels with units, use log scales where the
values span a decade or more, and draw one series per block family (or per SM-utilization tier in
the divergence figure).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from carb.design.identity import DEPTH, STEM, WIDTH

NOT_MEASURED = "not measured"
TARGET_LABELS: dict[str, str] = {
    "energy_J": "energy (J per batch)",
    "latency_ms": "latency (ms per batch)",
    "peak_memory_MB": "peak memory (MB)",
}
KNOB_LABELS: dict[str, str] = {
    DEPTH: "depth (layers)",
    "batch_size": "batch size (images)",
    WIDTH: "width multiplier (x)",
    "input_size": "input size (px, H = W)",
    "precision": "precision",
    STEM: "stem",
}
FAMILY_COLORS: dict[str, str] = {"basic": "#0072B2", "bottleneck": "#D55E00", "all": "#444444",
                                 "other": "#9a9a9a"}
FAMILY_MARKERS: dict[str, str] = {"basic": "o", "bottleneck": "s", "all": "D", "other": "."}
SM_COLORS: dict[str, str] = {"low": "#9ecae1", "mid": "#4292c6", "high": "#08306b",
                             NOT_MEASURED: "#777777"}
_STEM = {True: "ImageNet (7x7/2 + pool)", False: "CIFAR (3x3/1)"}
#: Basic-block depths with the four-stage ImageNet layout (64-512 channels); every other basic depth
#: is a three-stage CIFAR layout (16-64 channels), so their costs do not lie on one curve.
BASIC_FOUR_STAGE_DEPTHS: tuple[int, ...] = (18, 34)


def _depths(ds) -> tuple[str, str]:
    """('Depth 18' | 'Depths 18 and 34', '18' | '18, 34') for the caption and the legend."""
    ds = [f"{d:g}" for d in sorted(ds)]
    return (f"Depth{'s' if len(ds) > 1 else ''} " + " and ".join([", ".join(ds[:-1]), ds[-1]] if len(ds) > 1 else ds),
            ", ".join(ds))


def _basic_layout_note(apart, cifar, bottleneck: bool) -> str:
    """Caption sentence on the basic family's two stage layouts in the depth panel: ``apart`` are the
    four-stage ImageNet depths drawn as separate markers, ``cifar`` the three-stage depths on the line."""
    if len(apart):
        head, _ = _depths(apart)
        verb = "are basic-block networks" if len(apart) > 1 else "is a basic-block network"
        return (f"{head} (triangle{'s' if len(apart) > 1 else ''}) {verb} in four ImageNet stages of 64-512 "
                f"channels; the other basic depths ({', '.join(f'{d:g}' for d in sorted(cifar))}) are three CIFAR "
                "stages of 16-64 channels: a different stage layout, so "
                f"{'they are' if len(apart) > 1 else 'it is'} drawn apart, not on the basic line.")
    four = [d for d in cifar if d in BASIC_FOUR_STAGE_DEPTHS]
    if four and bottleneck:
        head, _ = _depths(four)
        verb = "are basic-block networks" if len(four) > 1 else "is a basic-block network"
        return (f"{head} {verb} (two 3x3 convolutions per block); the deeper networks use bottleneck "
                "blocks (1x1-3x3-1x1), so each block family has its own curve.")
    return ""


def _color(fam: str) -> str:
    return FAMILY_COLORS.get(fam, "#009E73")


def _spans_decade(values: Sequence[float] | np.ndarray) -> bool:
    """True when the positive finite values span a factor of 10 or more."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    return len(v) > 1 and v.max() / v.min() >= 10


def _log(ax, axis: str = "y", base: float = 10, values=None) -> None:
    """Log scale on ``axis`` ('x' or 'y') with plain-number tick labels (1, 10, 100; no 3x10^1);
    ticks at 1-2-5 per decade when ``values`` span at most two and a half decades."""
    getattr(ax, f"set_{axis}scale")("log", base=base)
    a = ax.xaxis if axis == "x" else ax.yaxis
    if base == 10 and values is not None:
        v = np.asarray(values, dtype=float)
        v = v[np.isfinite(v) & (v > 0)]
        if len(v) and np.log10(v.max() / v.min()) <= 2.5:
            a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        elif len(v):
            a.set_minor_locator(NullLocator())   # many decades: minor ticks only clutter (and are slow)
    a.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    a.set_minor_formatter(NullFormatter())


def _order(fams) -> list[str]:
    """Families in display order: basic, bottleneck, others alphabetically, 'other' last."""
    fams = list(dict.fromkeys(str(f) for f in fams))
    head = [f for f in ("all", "basic", "bottleneck") if f in fams]
    return head + sorted(f for f in fams if f not in head and f != "other") + (["other"] if "other" in fams else [])


def _spaced_labels(ticks: Sequence[float], min_ratio: float = 1.15) -> list[str]:
    """Tick labels for log-spaced ``ticks``, blank where a tick sits within ``min_ratio`` of the last
    labelled one (18 beside 20, 50 beside 56 would overprint)."""
    out, last = [], None
    for v in ticks:
        keep = last is None or v / last >= min_ratio
        out.append(f"{v:g}" if keep else "")
        last = v if keep else last
    return out


def _caption(fig: Figure, text: str) -> None:
    """A caption under the panels (what is drawn apart, what this device does not measure)."""
    if text:
        fig.supxlabel(text, fontsize=9, color="#444444", wrap=True)


def _note(ax, text: str) -> None:
    """Write a centred note into an empty panel."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=10, color="#555555",
            wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _grid(n: int, ncols: int = 3, size: tuple[float, float] = (4.2, 3.4)) -> tuple[Figure, list]:
    ncols = max(1, min(ncols, n))
    nrows = int(np.ceil(n / ncols))
    fig = Figure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _grouped_bars(ax, categories: Sequence[str], series: Mapping[str, Sequence[float]],
                  colors: Mapping[str, str]) -> None:
    """Bars per category, one bar per series (NaN bars left out)."""
    k = max(1, len(series))
    width = 0.8 / k
    x = np.arange(len(categories))
    for i, (name, vals) in enumerate(series.items()):
        v = np.asarray(vals, dtype=float)
        m = np.isfinite(v)
        ax.bar(x[m] + (i - (k - 1) / 2) * width, v[m], width=width, label=name,
               color=colors.get(name, "#2ca02c"), edgecolor="white", linewidth=0.5)
    ax.set_xticks(x, categories)


def _legend_below(ax, title: str | None = None) -> None:
    """Legend under the axes (bars reach the top of a panel, so a legend inside would hide them)."""
    n = len(ax.get_legend_handles_labels()[0])
    ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2),
              ncol=min(n, 3), title=title, title_fontsize=8)


# --------------------------------------------------------------------------- Figure 1

def knob_figure(medians: pd.DataFrame, target: str, device: str = "") -> Figure | None:
    """Figure 1 style: one panel per knob, median ``target`` per knob value with the IQR band, one
    series per block family. None when the target is not measured or no knob varies."""
    med = medians[(medians["target"] == target) & (medians["status"] == "ok")]
    knobs = [k for k in med["knob"].unique() if med.loc[med["knob"] == k, "value"].nunique() > 1]
    if med.empty or not knobs:
        return None
    fig, axes = _grid(len(knobs))
    notes: list[str] = []
    for ax, knob in zip(axes, knobs):
        sub = med[med["knob"] == knob]
        values = list(dict.fromkeys(sub["value"].tolist()))
        numeric = knob not in ("precision", STEM)
        for fam in _order(sub["family"]):
            g = sub[sub["family"] == fam].dropna(subset=["median"])
            if numeric:
                x = g["value"].astype(float).to_numpy()
            else:
                x = np.array([values.index(v) for v in g["value"]], dtype=float)
            apart = np.zeros(len(g), dtype=bool)
            if knob == DEPTH and fam == "basic":
                # 18/34: four ImageNet stages; drawn apart only beside three-stage CIFAR depths
                apart = np.isin(x, BASIC_FOUR_STAGE_DEPTHS)
                if apart.all():
                    apart[:] = False
                notes.append(_basic_layout_note(x[apart], x[~apart],
                                                bool((sub["family"] == "bottleneck").any())))
            if (~apart).any():
                ax.plot(x[~apart], g["median"].to_numpy()[~apart], marker=FAMILY_MARKERS.get(fam, "o"),
                        color=_color(fam), label=f"{fam} family", linewidth=1.5, markersize=4)
                ax.fill_between(x[~apart], g["q25"].to_numpy()[~apart], g["q75"].to_numpy()[~apart],
                                color=_color(fam), alpha=0.15, linewidth=0)
            if apart.any():
                ax.errorbar(x[apart], g["median"].to_numpy()[apart],
                            yerr=[g["median"].to_numpy()[apart] - g["q25"].to_numpy()[apart],
                                  g["q75"].to_numpy()[apart] - g["median"].to_numpy()[apart]],
                            fmt="^", color=_color(fam), markerfacecolor="white", markersize=6, capsize=3,
                            linewidth=1, label=f"basic, 4 ImageNet stages ({_depths(x[apart])[1]})")
        if not numeric:
            labels = [_STEM.get(v, str(v)) if knob == STEM else str(v) for v in values]
            ax.set_xticks(range(len(values)), labels)
        elif _spans_decade(sub["value"].astype(float)):
            _log(ax, "x", base=2 if knob == "batch_size" else 10)
            ticks = sorted(set(sub["value"].astype(float)))
            ax.set_xticks(ticks, _spaced_labels(ticks), fontsize=8)
        yv = pd.concat([sub["q25"], sub["q75"], sub["median"]])
        if _spans_decade(yv):
            _log(ax, "y", values=yv)
        ax.set_xlabel(KNOB_LABELS.get(knob, knob))
        ax.set_ylabel(f"median {TARGET_LABELS.get(target, target)}")
        ax.grid(True, alpha=0.3, which="major")
    for ax in axes:
        if any(h.get_label().startswith("basic, 4") for h in ax.get_legend_handles_labels()[0]) or ax is axes[0]:
            ax.legend(fontsize=8, frameon=False)
    fig.suptitle(f"{TARGET_LABELS.get(target, target)} per design knob (median, IQR band)"
                 + (f" on {device}" if device else ""))
    _caption(fig, " ".join(dict.fromkeys(n for n in notes if n)))
    return fig


# --------------------------------------------------------------------------- Figure 2

def divergence_figure(cells: pd.DataFrame, ratios: pd.DataFrame, device: str = "") -> Figure | None:
    """Figure 2 style: mean energy and mean latency per batch tier (bars per SM-utilization tier) and
    the high-SM / low-SM ratio per batch tier. Panels whose quantity is not measured say so."""
    if cells.empty or not (np.isfinite(cells["mean_energy_J"]).any() or np.isfinite(cells["mean_latency_ms"]).any()):
        return None
    tiers = list(dict.fromkeys(cells["batch_tier"]))
    bars = [(col, target) for col, target in (("mean_energy_J", "energy_J"), ("mean_latency_ms", "latency_ms"))
            if np.isfinite(cells[col]).any()]
    ok = ratios[np.isfinite(ratios["latency_high_low"]) | np.isfinite(ratios["energy_high_low"])]
    missing = [target for col, target in (("mean_energy_J", "energy_J"), ("mean_latency_ms", "latency_ms"))
               if (col, target) not in bars]
    if ok.empty:
        why = str(ratios["status"].iloc[0]) if len(ratios) else "no rows"
        missing.append(f"the high-SM / low-SM ratio ({why})")
    n = len(bars) + (not ok.empty)
    fig, axes = _grid(n, size=(4.6, 3.8) if n > 1 else (7.0, 4.4))
    for ax, (col, target) in zip(axes, bars):
        series = {}
        for s in dict.fromkeys(cells["sm_tier"]):
            g = cells[cells["sm_tier"] == s].set_index("batch_tier")
            label = f"{s} SM util" if s != NOT_MEASURED else f"all rows (SM util {NOT_MEASURED})"
            series[label] = [g[col].get(t, np.nan) for t in tiers]
        colors = {(f"{s} SM util" if s != NOT_MEASURED else f"all rows (SM util {NOT_MEASURED})"): c
                  for s, c in SM_COLORS.items()}
        _grouped_bars(ax, tiers, series, colors)
        if _spans_decade(cells[col]):
            _log(ax, "y", values=cells[col])
        ax.set_xlabel("batch tier")
        ax.set_ylabel(f"mean {TARGET_LABELS[target]}")
        ax.set_title(f"mean {TARGET_LABELS[target]}", fontsize=10)
        _legend_below(ax)
        ax.grid(True, axis="y", alpha=0.3, which="major")
    if not ok.empty:
        ax = axes[-1]
        x = np.arange(len(ok))
        for col, label, color in (("energy_high_low", "energy", "#D55E00"),
                                  ("latency_high_low", "latency", "#0072B2")):
            v = ok[col].to_numpy(float)
            if np.isfinite(v).any():
                ax.plot(x, v, marker="o", color=color, label=label)
        ax.axhline(1.0, color="#999999", linewidth=0.8, linestyle=":")
        ax.set_xticks(x, ok["batch_tier"])
        rv = np.r_[ok["energy_high_low"], ok["latency_high_low"]]
        if _spans_decade(rv):
            _log(ax, "y", values=rv)
        ax.set_xlabel("batch tier")
        ax.set_ylabel("high-SM / low-SM mean (x)")
        ax.set_title("high-SM / low-SM ratio", fontsize=10)
        ax.legend(fontsize=8, frameon=False)
        ax.grid(True, alpha=0.3, which="major")
    _caption(fig, ("Not measured on this device, so not drawn: " + "; ".join(missing) + ".") if missing else "")
    fig.suptitle("energy-latency divergence by batch tier and SM utilization" + (f" on {device}" if device else ""))
    return fig


# --------------------------------------------------------------------------- Figure 3

def efficiency_figure(eff: pd.DataFrame, device: str = "") -> Figure | None:
    """Figure 3 style: energy per GFLOP by precision (bars per family), by batch tier (bars: all rows
    and per family) and by depth (one line per family). None when energy is not measured."""
    ok = eff[eff["status"] == "ok"]
    if ok.empty:
        return None
    fig, axes = _grid(3, size=(4.4, 3.6))
    ylab = "energy per GFLOP (J/GFLOP, one forward)"
    for ax, view, xlabel in ((axes[0], "precision", "precision"), (axes[1], "batch_tier", "batch tier")):
        sub = ok[ok["view"] == view]
        if sub.empty:
            _note(ax, f"no {view} groups")
            continue
        cats = [str(c) for c in dict.fromkeys(sub["group"])]

        def mean_of(fam: str, c: str, sub: pd.DataFrame = sub) -> float:
            m = (sub["family"] == fam) & (sub["group"].astype(str) == c)
            return float(sub.loc[m, "mean_J_per_GFLOP"].mean())

        series = {("all rows" if fam == "all" else f"{fam} family"): [mean_of(fam, c) for c in cats]
                  for fam in _order(sub["family"])}
        _grouped_bars(ax, cats, series, {**{f"{k} family": c for k, c in FAMILY_COLORS.items()},
                                         "all rows": FAMILY_COLORS["all"]})
        if _spans_decade(sub["mean_J_per_GFLOP"]):
            _log(ax, "y", values=sub["mean_J_per_GFLOP"])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylab)
        _legend_below(ax)
        ax.grid(True, axis="y", alpha=0.3, which="major")
    ax = axes[2]
    sub = ok[ok["view"] == DEPTH]
    if sub.empty:
        _note(ax, "no depth groups")
    else:
        for fam in _order(sub["family"]):
            g = sub[sub["family"] == fam]
            ax.plot(g["group"].astype(float), g["mean_J_per_GFLOP"], marker=FAMILY_MARKERS.get(fam, "o"),
                    color=_color(fam), label=f"{fam} family")
        if _spans_decade(sub["mean_J_per_GFLOP"]):
            _log(ax, "y", values=sub["mean_J_per_GFLOP"])
        ax.set_xlabel(KNOB_LABELS[DEPTH])
        ax.set_ylabel(ylab)
        ax.legend(fontsize=8, frameon=False)
        ax.grid(True, alpha=0.3, which="major")
    fig.suptitle("energy efficiency (mean J/GFLOP)" + (f" on {device}" if device else ""))
    return fig


# --------------------------------------------------------------------------- Figure 4

def cross_device_figure(pairs: pd.DataFrame, fits: pd.DataFrame, dev_a: str, dev_b: str) -> Figure | None:
    """Figure 4 style: per measured target, device B against device A per shared configuration (one
    colour per family), the least-squares line and y = x. Log-log axes where values span a decade
    (the fitted line then shows as a curve). None when no target has a fit."""
    ok = fits[fits["status"] == "ok"]
    if ok.empty:
        return None
    fig, axes = _grid(len(ok), size=(4.6, 4.3))
    for ax, fit in zip(axes, ok.itertuples()):
        t = fit.target
        x, y = pairs[f"{t}_a"].to_numpy(float), pairs[f"{t}_b"].to_numpy(float)
        m = np.isfinite(x) & np.isfinite(y)
        fam = pairs["family"].astype(str).to_numpy()
        for f in _order(fam[m]):
            k = m & (fam == f)
            ax.scatter(x[k], y[k], s=14, alpha=0.75, color=_color(f), zorder=1 if f == "other" else 2,
                       marker=FAMILY_MARKERS.get(f, "o") if f != "other" else "o",
                       label=f"{f} family" if f != "other" else "other (no block family)", edgecolors="none")
        both = np.r_[x[m], y[m]]
        lo, hi = float(both.min()), float(both.max())
        log = _spans_decade(both) and lo > 0
        pad = (hi / lo) ** 0.04 if log else None
        lim = (lo / pad, hi * pad) if log else (lo - 0.04 * (hi - lo), hi + 0.04 * (hi - lo))
        grid = np.geomspace(*lim, 300) if log else np.linspace(*lim, 300)
        ax.plot(grid, grid, linestyle="--", color="#777777", linewidth=1, label="y = x")
        yfit = fit.slope * grid + fit.intercept
        keep = (yfit >= lim[0]) & (yfit <= lim[1])   # the line leaves the panel where it would dive below
        ax.plot(grid[keep], yfit[keep], color="black", linewidth=1.4,
                label=f"fit: y = {fit.slope:.3g}x {'+' if fit.intercept >= 0 else '-'} {abs(fit.intercept):.3g}")
        if log:
            _log(ax, "x", values=both)
            _log(ax, "y", values=both)
        ax.set_xlim(*lim)
        ax.set_ylim(*lim)
        ax.set_xlabel(f"{dev_a}: {TARGET_LABELS.get(t, t)}")
        ax.set_ylabel(f"{dev_b}: {TARGET_LABELS.get(t, t)}")
        ax.set_title(f"{t}: R² = {fit.r2:.3f}, Spearman ρ = {fit.spearman:.3f}, n = {fit.n}", fontsize=9)
        ax.legend(fontsize=8, frameon=False, loc="upper left")
        ax.grid(True, alpha=0.3, which="major")
    missing = [f"{r.target} ({r.status})" for r in fits.itertuples() if r.status != "ok"]
    _caption(fig, ("Not drawn: " + "; ".join(missing) + ".") if missing else "")
    fig.suptitle(f"cross-device transfer: {dev_b} vs {dev_a} (same configurations)")
    return fig


# --------------------------------------------------------------------------- all

def characterize_figures(tables: Mapping[str, pd.DataFrame], dev_a: str = "",
                         dev_b: str | None = None) -> tuple[dict[str, Figure], dict[str, str]]:
    """All figures the tables support: ``knobs_<target>`` per measured target, ``divergence``,
    ``efficiency`` and (with two devices) ``cross_device``. Returns (figures, skipped) where
    ``skipped`` maps a figure name to why it was not drawn."""
    figs: dict[str, Figure] = {}
    skipped: dict[str, str] = {}

    def put(name: str, fig: Figure | None, why: str) -> None:
        if fig is None:
            skipped[name] = why
        else:
            figs[name] = fig

    med = tables["knob_medians"]
    for t in dict.fromkeys(med["target"]) if len(med) else TARGET_LABELS:
        st = med[med["target"] == t]["status"]
        why = f"{t} {NOT_MEASURED}" if len(st) and (st == NOT_MEASURED).all() else "no knob varies"
        put(f"knobs_{t}", knob_figure(med, t, dev_a), why if len(st) else "no block families")
    put("divergence", divergence_figure(tables["divergence"], tables["divergence_ratios"], dev_a),
        "energy_J and latency_ms not measured")
    eff = tables["efficiency"]
    put("efficiency", efficiency_figure(eff, dev_a),
        str(eff["status"].iloc[0]) if len(eff) else "no rows")
    if "cross_device" in tables and dev_b is not None:
        xd = tables["cross_device"]
        put("cross_device", cross_device_figure(tables["cross_device_pairs"], xd, dev_a, dev_b),
            "; ".join(f"{r.target}: {r.status}" for r in xd.itertuples()))
    return figs, skipped


__all__: list[str] = ["characterize_figures", "cross_device_figure", "divergence_figure", "efficiency_figure",
                      "knob_figure"]
