"""CARB: predict what a CNN configuration costs on a GPU (energy_J, latency_ms, peak_memory_MB)
before running it there, and screen design spaces against a budget.

Heavy dependencies (torch, mlflow, pynvml) are imported lazily by the modules that need them.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_model"]


def load_model(uri: str, tracking_uri: str | None = None):
    """Load a fitted CARB cascade from an MLflow URI (``models:/name@alias``, ``models:/name/3``,
    ``runs:/<run_id>/model``). See :func:`carb.tracking.load_cascade`."""
    from carb.tracking import load_cascade

    return load_cascade(uri, tracking_uri=tracking_uri)
