"""The domain of validity of a fitted cascade: the knob values and feature ranges it was trained on.

:func:`fit_domain` summarizes a training frame as plain JSON-able data; :func:`check_domain` says, for
each candidate row, whether it lies inside that domain and, if not, why (e.g.
``precision fp16 never measured; batch_size 128 > 16; flops 3.1e+10 > 8.0e+09``). Screening uses it to
flag, drop or keep candidates the model never saw the like of.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from carb.design.arch import to_bool

#: Knobs whose seen values are listed (a value never seen is outside).
CATEGORICAL_KNOBS = ("block", "precision", "early_downsample")
#: Knobs whose [min, max] is kept (a value beyond it is outside).
NUMERIC_KNOBS = ("depth", "width_mult", "input_size", "batch_size")
#: Static features whose [min, max] is kept.
RANGE_FEATURES = ("flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB")


def _category(col: str, values: pd.Series) -> list[Any]:
    """Plain values of a categorical column: bools for ``early_downsample``, strings otherwise."""
    if col == "early_downsample":
        return [to_bool(v) for v in values]
    return [str(v) for v in values]


def fit_domain(X: pd.DataFrame) -> dict[str, Any]:
    """Domain of the rows of ``X`` (n rows, knob and static-feature columns; absent columns skipped).

    Returns ``{"categorical": {knob: [values seen]}, "ranges": {column: [min, max]}, "n_rows": n}``:
    plain lists and floats, JSON-able. Units are the columns' (MB, FLOPs per batch, ...)."""
    cats = {c: sorted(set(_category(c, X[c].dropna())), key=str) for c in CATEGORICAL_KNOBS if c in X}
    ranges = {}
    for c in NUMERIC_KNOBS + RANGE_FEATURES:
        if c in X:
            v = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if len(v):
                ranges[c] = [float(v.min()), float(v.max())]
    return {"categorical": cats, "ranges": ranges, "n_rows": int(len(X))}


def _fmt(col: str, v: float) -> str:
    """A value for a reason: knobs as plain numbers (``128``, ``1.5``), features as ``3.1e+10``."""
    return f"{v:g}" if col in NUMERIC_KNOBS else f"{v:.1e}"


def unseen_mask(domain: dict[str, Any] | None, X: pd.DataFrame, knob: str) -> np.ndarray:
    """Boolean array (n rows): the row's ``knob`` value was never measured (all False without a domain
    or without that knob in it)."""
    seen = (domain or {}).get("categorical", {}).get(knob)
    if seen is None or knob not in X:
        return np.zeros(len(X), dtype=bool)
    ok = set(str(s) for s in seen)
    return ~np.array([str(v) in ok for v in _category(knob, X[knob])], dtype=bool)


def check_domain(domain: dict[str, Any] | None, X: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """``(in_domain, outside)`` for the n rows of ``X``: a bool array (n,) and one reason string per row
    (``""`` when inside; reasons joined by ``"; "``). ``domain=None`` (a model fitted before domains):
    everything is inside."""
    n = len(X)
    parts: list[list[str]] = [[] for _ in range(n)]
    if domain:
        for c in domain.get("categorical", {}):
            bad = unseen_mask(domain, X, c)
            vals = X[c].to_numpy() if c in X else None
            for i in np.flatnonzero(bad):
                parts[i].append(f"{c} {vals[i]} never measured")
        for c, (lo, hi) in domain.get("ranges", {}).items():
            if c not in X:
                continue
            v = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=float)
            for i in np.flatnonzero(v > hi):
                parts[i].append(f"{c} {_fmt(c, v[i])} > {_fmt(c, hi)}")
            for i in np.flatnonzero(v < lo):
                parts[i].append(f"{c} {_fmt(c, v[i])} < {_fmt(c, lo)}")
    outside = ["; ".join(p) for p in parts]
    return np.array([not p for p in parts], dtype=bool), outside
