"""Figure for ``carb-probe``: the rate each probed convolution ran at, per precision and backend.

Plain inputs (a probe table, :data:`carb.data.probes.PROBE_COLUMNS`); matplotlib's object API on the Agg
canvas, no pyplot.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

#: Okabe-Ito colours per precision.
COLOURS = {"fp32": "#009E73", "bf16": "#0072B2", "fp16": "#D55E00"}


def probe_figure(probe: pd.DataFrame, title: str) -> Figure:
    """GMAC/s of each probed convolution (multiply-adds of the call / its time) against its size (MMAC
    per call, log axes), one colour per precision, filled markers for oneDNN and open ones for PyTorch's
    native path; 1200 x 480 px at 120 dpi."""
    from carb.design.shapes import layer_array

    a = layer_array(probe)
    mmac = a[:, 0] * a[:, 1] * a[:, 2] * probe["batch_size"].to_numpy(float) / 1e6
    rate = mmac / probe["time_ms"].to_numpy(float)   # MMAC per ms = GMAC/s
    fig = Figure(figsize=(10, 4), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for p in sorted(probe["precision"].astype(str).unique()):
        for backend, filled in (("Mkldnn", True), ("Slow2d", False)):
            m = ((probe["precision"].astype(str) == p) & (probe["backend"].astype(str) == backend)).to_numpy()
            if not m.any():
                continue
            c = COLOURS.get(p, "#444444")
            ax.scatter(mmac[m], rate[m], s=12, alpha=0.7, color=c if filled else "none", edgecolors=c,
                       label=f"{p}, {'oneDNN' if filled else 'native'} (median {np.median(rate[m]):.1f} GMAC/s)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("MMAC per call")
    ax.set_ylabel("GMAC/s")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    return fig
