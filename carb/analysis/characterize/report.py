"""The characterization report: every table of one dataset (and a second device's), Markdown
rendering, headline metrics and the run summary.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.analysis.characterize.common import (
    SM_EDGES,
    device_label,
    is_measured,
    ok_only,
)
from carb.analysis.characterize.correlations import feature_correlations
from carb.analysis.characterize.divergence import divergence, divergence_ratios
from carb.analysis.characterize.efficiency import efficiency
from carb.analysis.characterize.knobs import knob_medians, knob_ranges
from carb.analysis.characterize.transfer import cross_device, cross_device_pairs
from carb.data.repeatability import repeatability_table
from carb.data.schema import TARGETS


def to_markdown(df: pd.DataFrame, digits: int = 4) -> str:
    """A GitHub Markdown table; floats to ``digits`` significant digits, missing values as '—'."""
    def cell(v: Any) -> str:
        if v is None or v is pd.NA:
            return "—"
        if isinstance(v, (float, np.floating)):
            if not np.isfinite(v):
                return "—"
            return f"{float(v):.{digits}g}"
        return str(v).replace("|", "\\|")

    header = "| " + " | ".join(map(str, df.columns)) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([header, sep, *body]) + "\n"


def characterize_tables(df_a: pd.DataFrame, df_b: pd.DataFrame | None = None,
                        sm_edges: Sequence[float] = SM_EDGES, min_pairs: int = 3) -> dict[str, pd.DataFrame]:
    """All tables for one dataset (A) and, when ``df_b`` is given, the cross-device ones (A vs B).

    Keys: knob_medians, knob_ranges, feature_correlations, divergence, divergence_ratios, efficiency,
    repeatability (A's run-to-run latency spread per precision, :func:`carb.data.repeatability.repeatability_table`),
    and with B: cross_device_pairs, cross_device."""
    med = knob_medians(df_a)
    cells = divergence(df_a, sm_edges)
    tables = {"knob_medians": med, "knob_ranges": knob_ranges(df_a, medians=med),
              "feature_correlations": feature_correlations(df_a), "divergence": cells,
              "divergence_ratios": divergence_ratios(cells), "efficiency": efficiency(df_a),
              "repeatability": repeatability_table(df_a)}
    if df_b is not None:
        pairs = cross_device_pairs(df_a, df_b)
        tables["cross_device_pairs"] = pairs
        tables["cross_device"] = cross_device(df_a, df_b, min_pairs=min_pairs, pairs=pairs)
    return tables


def headline_metrics(tables: Mapping[str, pd.DataFrame]) -> dict[str, float]:
    """Headline numbers for MLflow: cross-device fits, the per-knob max/min ratios and the run-to-run latency
    spread per precision (``repeatability.<precision>.spread_median`` / ``spread_p90``, fractions)."""
    out: dict[str, float] = {}
    for r in tables.get("repeatability", pd.DataFrame()).itertuples():
        if r.n_rows:
            out[f"repeatability.{r.precision}.spread_median"] = r.spread_median
            out[f"repeatability.{r.precision}.spread_p90"] = r.spread_p90
    for r in tables.get("cross_device", pd.DataFrame()).itertuples():
        if r.status == "ok":
            for k in ("n", "slope", "intercept", "r2", "spearman", "median_ratio"):
                out[f"cross_device.{r.target}.{k}"] = getattr(r, k)
    for r in tables["knob_ranges"].itertuples():
        if r.status == "ok":
            out[f"knob_ratio.{r.family}.{r.knob}.{r.target}"] = r.ratio
    for r in tables["divergence_ratios"].itertuples():
        if r.status == "ok":
            out[f"divergence.{r.batch_tier}.energy_high_low"] = r.energy_high_low
            out[f"divergence.{r.batch_tier}.latency_high_low"] = r.latency_high_low
    return out


def summary_markdown(label: str, prov: Mapping[str, Any], a: pd.DataFrame, b: pd.DataFrame | None,
             tables: Mapping[str, pd.DataFrame], skipped: Mapping[str, str]) -> str:
    """The run summary (Markdown): datasets, measured targets, skipped figures and the headline tables."""
    ok_a = ok_only(a)
    lines = [f"# carb-characterize: {label}", "",
             f"- dataset A: {device_label(ok_a)}, {len(ok_a)} ok rows (source: {prov.get('data')})"]
    if b is not None:
        lines.append(f"- dataset B: {device_label(ok_only(b))}, {len(ok_only(b))} ok rows")
    meas = [t for t in TARGETS if is_measured(a, t)]
    lines.append(f"- targets measured on A: {', '.join(meas) or 'none'}; "
                 f"not measured: {', '.join(t for t in TARGETS if t not in meas) or 'none'}")
    for name, why in skipped.items():
        lines.append(f"- figure {name}: not drawn ({why})")
    lines.append("")
    for name in ("cross_device", "knob_ranges", "feature_correlations", "divergence_ratios", "efficiency",
                 "repeatability"):
        if name in tables:
            lines += [f"## {name}", "", to_markdown(tables[name]), ""]
    return "\n".join(lines)
