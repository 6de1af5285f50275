"""Importers: map third-party benchmark tables onto the columns of :mod:`carb.data.schema` they have.

An importer returns a frame with every schema column (what the source does not report is NaN/NA and
named in ``missing_reason``) plus the source's own identifying columns at the end, with
``device_kind = 'import'``. Such frames feed the analyses of :mod:`carb.commands.characterize` (for example the
cross-device comparison on latency-only data); whether they also pass
:func:`carb.data.schema.validate_dataset` depends on the importer's options (see each module).

Available: :mod:`carb.data.importers.timm` (timm's GPU inference benchmark of the ResNet family).
"""
from __future__ import annotations

from carb.data.importers.timm import (
           TIMM_DATA,
           import_timm,
           load_timm_table,
           timm_combinations,
           timm_config_id,
           timm_overlaps,
           timm_pair,
)

__all__ = ["TIMM_DATA", "import_timm", "load_timm_table", "timm_combinations", "timm_config_id",
           "timm_overlaps", "timm_pair"]
