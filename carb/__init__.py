"""CARB: predict what a CNN configuration costs on a GPU (energy_J, latency_ms, peak_memory_MB)
before running it there, and screen design spaces against a budget.

Heavy dependencies (torch, mlflow, pynvml) are imported lazily by the modules that need them.
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "load_model"]


def load_model(uri: str, tracking_uri: str | None = None):
    """Load a fitted CARB model from an MLflow URI (``models:/name@alias``, ``models:/name/3``,
    ``runs:/<run_id>/model``; the commands' default store unless ``tracking_uri``). Returns a
    :class:`carb.analysis.predictor.Predictor`: ``.predict(knobs, budget=...)`` takes configurations (a
    DataFrame of knob columns) and returns predictions, intervals, domain flags and decision inputs in one
    frame; ``.cascade`` is the fitted cascade (:func:`carb.tracking.load_cascade`), whose attributes read
    through. Its prediction frames carry the URI and the resolved registry version in ``attrs``."""
    from carb.analysis.predictor import Predictor
    from carb.tracking import load_cascade, resolve_version

    cascade = load_cascade(uri, tracking_uri=tracking_uri)
    try:
        version = resolve_version(uri).get("version", "")
    except Exception:  # noqa: BLE001 - the model loaded; a version it cannot name is left empty
        version = ""
    return Predictor(cascade, uri, version)
