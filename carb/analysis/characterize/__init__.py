"""Workload characterization (the paper's Section 4), one module per analysis.

Pure functions take a dataset frame (schema of :mod:`carb.data.schema`; only ``status == 'ok'`` rows
are used) and return DataFrames. A target (or SM utilization) that a dataset does not have is reported
with status ``'not measured'`` and NaN numbers, never as 0.

- :mod:`.knobs`: per-knob medians and ranges (Table 3, Figure 1);
- :mod:`.correlations`: feature correlations (Table 4);
- :mod:`.divergence`: energy/latency by batch tier x SM tier (Figure 2);
- :mod:`.efficiency`: energy per GFLOP (Figure 3);
- :mod:`.transfer`: cross-device fits (Figure 4);
- :mod:`.report`: all tables at once, Markdown, headline metrics, the run summary.
"""
from carb.analysis.characterize.common import (
                                               KNOBS_ANALYSED,
                                               NOT_MEASURED,
                                               SM_EDGES,
                                               device_label,
                                               families,
                                               is_measured,
)
from carb.analysis.characterize.correlations import (
                                               feature_correlations,
                                               numeric_features,
)
from carb.analysis.characterize.divergence import divergence, divergence_ratios, sm_tier
from carb.analysis.characterize.efficiency import efficiency
from carb.analysis.characterize.knobs import energy_per_gflop, knob_medians, knob_ranges
from carb.analysis.characterize.report import characterize_tables, to_markdown
from carb.analysis.characterize.transfer import cross_device, cross_device_pairs

__all__ = ["KNOBS_ANALYSED", "NOT_MEASURED", "SM_EDGES", "characterize_tables", "cross_device",
           "cross_device_pairs", "device_label", "divergence", "divergence_ratios", "efficiency",
           "energy_per_gflop", "families", "feature_correlations", "is_measured", "knob_medians",
           "knob_ranges", "numeric_features", "sm_tier", "to_markdown"]
