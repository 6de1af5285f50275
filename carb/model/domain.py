"""The domain of validity of a fitted cascade: the knob values and feature ranges it was trained on.

:func:`fit_domain` summarizes a training frame as plain JSON-able data; :func:`check_domain` says, for
each candidate row, whether it lies inside that domain and, if not, why (e.g.
``precision fp16 never measured; batch_size 128 > 16; flops 3.1e+10 > 8.0e+09``). Screening uses it to
flag, drop or keep candidates the model never saw the like of.

Ranges are kept per precision too: the precision picks the kernels a layer runs (on the CPU reference VM
fp16 takes PyTorch's fallback GEMM, 10-50x slower than fp32), so a candidate is only as well supported as
the rows of its own precision. On the shipped CPU reference every fp16 row has at most 2.4e8 FLOPs
against 8e9 for fp32 and bf16; with global ranges alone 295 fp16 candidates of the screening grid with up to
33x the largest fp16 work were "inside" (reason: ``flops 5.9e+09 > 2.4e+08 for fp16``).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from carb.design import identity
from carb.design.identity import CATEGORICAL_KNOBS, NUMERIC_KNOBS

# Knobs whose seen values are listed (a value never seen is outside; ``family`` is a zoo row's: a family the
# model never saw is outside) and knobs whose [min, max] is kept: :data:`carb.design.identity.CATEGORICAL_KNOBS`,
# :data:`~carb.design.identity.NUMERIC_KNOBS`.

#: Static features whose [min, max] is kept.
RANGE_FEATURES = ("flops", "params", "param_size_MB", "total_activation_MB", "max_activation_MB")
#: The knobs that make a network's structure (an architecture is seen whatever its input size, batch or precision).
ARCH_KNOBS = identity.ARCH_COLUMNS
#: At most this many training batch sizes are kept as monotonicity knots.
MAX_BATCH_KNOTS = 16


def _category(col: str, values: pd.Series) -> list[Any]:
    """Plain values of a categorical column: bools for a boolean identity column (the stem), strings
    otherwise (:func:`carb.design.identity.category_values`)."""
    return identity.category_values(col, values)


def fit_domain(X: pd.DataFrame) -> dict[str, Any]:
    """Domain of the rows of ``X`` (n rows, knob and static-feature columns; absent columns skipped).

    Returns ``{"categorical": {knob: [values seen]}, "ranges": {column: [min, max]}, "n_rows": n,
    "batch_sizes": [distinct batch sizes, see batch_sizes]}``, and ``"by_precision": {precision: {column:
    [min, max]}}`` when the rows hold more than one precision; the cascade adds ``"probed": {target:
    [precisions]}`` when a target's prior can predict unmeasured precisions from a device probe; zoo rows
    (those of a zoo or a combined dataset, :func:`carb.design.identity.row_kinds`) add
    ``"models": {model_name: [input sizes measured]}``:
    plain lists and floats, JSON-able. Units are the columns' (MB, FLOPs per batch, ...)."""
    cats = {c: sorted(set(_category(c, X[c].dropna())), key=str) for c in CATEGORICAL_KNOBS if c in X}
    out = {"categorical": cats, "ranges": _ranges(X), "n_rows": int(len(X))}
    if "batch_size" in X:
        out["batch_sizes"] = batch_sizes(X["batch_size"])
    if "precision" in X and X["precision"].dropna().astype(str).nunique() > 1:
        out["by_precision"] = {str(p): _ranges(g) for p, g in X.groupby(X["precision"].astype(str))}
    if identity.has_resnet_structure(X) or zoo_rows(X):
        out["architectures"] = sorted(set(architecture_keys(X)))
    zoo = identity.row_kinds(X) == identity.ZOO.name   # a zoo or combined dataset's zoo rows
    if zoo.any() and "input_size" in X:   # the networks measured, each with its input sizes (a zoo sanity grid)
        Z = X[zoo]
        sizes = Z.groupby(Z["model_name"].astype(str))["input_size"].agg(lambda v: sorted({int(x) for x in v}))
        out["models"] = {str(m): list(v) for m, v in sizes.items()}
    return out


def predicted_precisions(domain: dict[str, Any] | None) -> list[str]:
    """The precisions a model with this ``domain`` (:func:`fit_domain`, with the cascade's ``probed``) predicts:
    those its rows were measured at and those a target's prior predicts from a device probe, in the
    precision table's order (:data:`carb.design.arch.PRECISIONS`); [] for a model without a domain."""
    from carb.design.arch import PRECISIONS

    if not domain:
        return []
    found = {str(p) for p in (domain.get("categorical") or {}).get("precision", [])}
    found |= {str(p) for ps in (domain.get("probed") or {}).values() for p in ps}
    return sorted(found, key=lambda p: (PRECISIONS.index(p) if p in PRECISIONS else 99, p))


def zoo_rows(X: pd.DataFrame) -> bool:
    """Whether ``X`` holds zoo rows (named networks with their ``family``, no ResNet marker:
    :func:`carb.design.identity.is_zoo`)."""
    return identity.is_zoo(X) and "family" in X


def architecture_keys(X: pd.DataFrame) -> list[str]:
    """One key per row naming its network's structure (:func:`carb.design.identity.architecture_keys`: the
    ResNet identity columns present in ``X``, absent or missing ones as the knob's default,
    ``basic|20|0.5|1.0|None|True``; for zoo rows (:func:`zoo_rows`) the family, ``family:mobilenet``, so that
    architecture folds hold out whole families)."""
    return identity.architecture_keys(X)


def unseen_architecture(domain: dict[str, Any] | None, X: pd.DataFrame) -> np.ndarray:
    """Bool (n,): the row's architecture (:func:`architecture_keys`) is not one the model was trained on;
    all False for a domain that does not list its architectures (fitted before they were kept)."""
    seen = (domain or {}).get("architectures")
    if not seen or not (identity.has_resnet_structure(X) or zoo_rows(X)):
        return np.zeros(len(X), dtype=bool)
    known = set(seen)
    return np.array([k not in known for k in architecture_keys(X)], dtype=bool)


def _ranges(X: pd.DataFrame) -> dict[str, list[float]]:
    """``{column: [min, max]}`` of the numeric knobs and range features of ``X`` (finite values only)."""
    ranges = {}
    for c in NUMERIC_KNOBS + RANGE_FEATURES:
        if c in X:
            v = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if len(v):
                ranges[c] = [float(v.min()), float(v.max())]
    return ranges


def batch_sizes(values: pd.Series, max_knots: int = MAX_BATCH_KNOTS) -> list[float]:
    """The distinct batch sizes of the training rows (sorted), at most ``max_knots`` of them (evenly
    spaced in the sorted distinct values, first and last kept, when there are more): the knots at which screening makes
    predictions monotone in batch size (:mod:`carb.model.monotone`)."""
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    u = np.unique(v[np.isfinite(v) & (v > 0)])
    if len(u) > max_knots:
        u = np.unique(u[np.round(np.linspace(0, len(u) - 1, max_knots)).astype(int)])
    return [float(b) for b in u]


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
    codes, values = pd.factorize(X[knob], use_na_sentinel=False)   # each distinct value checked once
    bad = ~np.array([str(v) in ok for v in _category(knob, pd.Series(values, dtype=object))], dtype=bool)
    return bad[codes] if len(codes) else np.zeros(0, dtype=bool)


def check_domain(domain: dict[str, Any] | None, X: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """``(in_domain, outside)`` for the n rows of ``X``: a bool array (n,) and one reason string per row
    (``""`` when inside; reasons joined by ``"; "``). ``domain=None`` (a model fitted before domains):
    everything is inside."""
    n = len(X)
    parts: dict[int, list[str]] = defaultdict(list)   # never-measured reasons of the rows that have some
    why = _Reasons(n)
    if domain:
        for c in domain.get("categorical", {}):
            bad = unseen_mask(domain, X, c)
            vals = X[c].to_numpy() if c in X else None
            probed = {str(p): sorted(tg for tg, ps in domain.get("probed", {}).items() if p in ps)
                      for ps in domain.get("probed", {}).values() for p in ps} if c == "precision" else {}
            for i in np.flatnonzero(bad):
                how = probed.get(str(vals[i]))
                parts[i].append(f"{c} {vals[i]} never measured" + (f" ({', '.join(how)} from the device probe)" if how else ""))
        for i, p in parts.items():
            why.text[i] = "; ".join(p)
        ranges = domain.get("ranges", {})
        for c, (lo, hi) in ranges.items():
            if c not in X:
                continue
            v = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=float)
            why.add(np.flatnonzero(v > hi), v, lambda x, c=c, hi=hi: f"{c} {_fmt(c, x)} > {_fmt(c, hi)}")
            why.add(np.flatnonzero(v < lo), v, lambda x, c=c, lo=lo: f"{c} {_fmt(c, x)} < {_fmt(c, lo)}")
        _precision_ranges(domain, X, ranges, why)
    return why.text == "", why.text.tolist()


class _Reasons:
    """One reason string per row (``""``: none), built a condition at a time: :meth:`add` appends a text to
    the selected rows (``"; "`` between reasons), formatting each distinct value once."""

    def __init__(self, n: int):
        self.text = np.full(n, "", dtype=object)

    def add(self, rows: np.ndarray, values: np.ndarray, fmt: Callable[[float], str]) -> None:
        """Append ``fmt(values[i])`` to each row ``i`` of ``rows`` (``values``: (n,) floats)."""
        if not len(rows):
            return
        bits, inv = np.unique(values[rows].view(np.int64), return_inverse=True)   # distinct values, -0.0 apart
        texts = np.array([fmt(x) for x in bits.view(np.float64)], dtype=object)[inv.ravel()]
        cur = self.text[rows]
        self.text[rows] = np.where(cur == "", texts, cur + "; " + texts)


def _precision_ranges(domain: dict[str, Any], X: pd.DataFrame, ranges: dict[str, Any], why: _Reasons) -> None:
    """Add, to ``why`` (:class:`_Reasons` of the rows of ``X``), the per-precision range reasons of rows
    whose value lies within the global range but outside its own precision's (``flops 5.9e+09 > 2.4e+08
    for fp16``); a precision the domain has no ranges of (never measured) adds none."""
    by = domain.get("by_precision") or {}
    if not by or "precision" not in X:
        return
    prec = X["precision"].astype(str).to_numpy()
    values: dict[str, np.ndarray] = {}   # each column converted once, not once per precision
    for p, pr in by.items():
        rows = prec == p
        if not rows.any():
            continue
        for c, (lo, hi) in pr.items():
            if c not in X or c not in ranges:
                continue
            glo, ghi = ranges[c]
            if c not in values:
                values[c] = pd.to_numeric(X[c], errors="coerce").to_numpy(dtype=float)
            v = values[c]
            why.add(np.flatnonzero(rows & (v > hi) & (v <= ghi)), v,
                    lambda x, c=c, hi=hi, p=p: f"{c} {_fmt(c, x)} > {_fmt(c, hi)} for {p}")
            why.add(np.flatnonzero(rows & (v < lo) & (v >= glo)), v,
                    lambda x, c=c, lo=lo, p=p: f"{c} {_fmt(c, x)} < {_fmt(c, lo)} for {p}")


def reason_counts(outside: Any, top: int = 3) -> list[tuple[str, int]]:
    """The ``top`` most frequent reasons over candidates' ``outside`` strings (as :func:`check_domain`
    writes them), each with the number of candidates it applies to, most frequent first. A range reason
    counts by its bound, not its value (``batch_size 128 > 16`` and ``batch_size 64 > 16`` are both
    ``batch_size > 16``; ``flops 5.9e+09 > 2.4e+08 for fp16`` counts as ``flops > 2.4e+08 for fp16``); a
    never-measured value keeps its value (``precision fp16 never measured``)."""
    from collections import Counter

    c: Counter[str] = Counter()
    for text in outside:
        if not isinstance(text, str) or not text:
            continue
        kinds = set()
        for reason in text.split("; "):
            tok = reason.split(" ")
            if len(tok) in (4, 6) and tok[2] in ("<", ">"):
                kinds.add(" ".join([tok[0], *tok[2:]]))
            else:
                kinds.add(reason)
        c.update(kinds)
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
