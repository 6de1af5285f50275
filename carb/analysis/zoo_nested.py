"""Nested choice of a setting of the zoo latency model for each held-out family, on its training families only.

A setting (a CPU term's threshold, whether to take a term at all) chosen on the scored leave-one-family-out
cells makes the reported figure optimistic; :func:`carb.analysis.zoo_eval.nested_margin` chooses the bound's
margin on the *other* families' outer predictions, whose models saw the held-out family. Here the held-out
family f never takes part: each variant (a factory of a model with ``fit(frame)`` and ``predict(frame)``,
e.g. :class:`carb.model.zoo_latency.AdditiveBase` with a set of CPU terms) is scored by a family-disjoint
cross-validation over f's training families (``groups`` folds of whole families), by the mean MAPE of the
scored families (those with at least ``min_models`` models), and f takes the variant scoring lowest
(:func:`nested_choice`); :func:`nested_predictions` then assembles f's outer predictions from that variant's.
Used for timm's CPU file (docs/MODEL.md, round 4: the ``matmul_spill`` threshold).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from carb.errors import DatasetError


def family_folds(families: Sequence[str], groups: int, seed: int = 0) -> dict[str, int]:
    """``{family: fold}`` (folds 0 .. ``groups`` - 1, as even as a shuffle with ``seed`` makes them)."""
    if groups < 2:
        raise DatasetError(f"nested choice: groups={groups} is not allowed; allowed: an integer >= 2")
    fams = sorted(set(families))
    order = np.random.default_rng(seed).permutation(len(fams))
    return {fams[i]: int(k % groups) for k, i in enumerate(order)}


def inner_score(frame: pd.DataFrame, make: Callable[[], object], exclude: str, groups: int = 8, seed: int = 0,
                min_models: int = 5) -> float:
    """Mean family MAPE (0-1) of ``make()``'s family-disjoint cross-validation over ``frame``'s rows of every
    family but ``exclude`` (rows: ``family``, ``model``, ``latency_ms`` and the model's features); only the
    families with at least ``min_models`` models are scored, each once."""
    fam = frame["family"].astype(str).to_numpy()
    keep = fam != exclude
    folds = family_folds(fam[keep], groups, seed)
    fold = np.array([folds.get(f, -1) for f in fam])
    y = pd.to_numeric(frame["latency_ms"], errors="coerce").to_numpy(float)
    pred = np.full(len(frame), np.nan)
    for g in range(groups):
        test = keep & (fold == g)
        if test.any():
            pred[test] = make().fit(frame[keep & ~test]).predict(frame[test])
    n_models = frame[keep].groupby("family")["model"].nunique()
    scored = keep & np.isin(fam, n_models.index[n_models >= min_models]) & np.isfinite(pred)
    if not scored.any():
        raise DatasetError(f"nested choice: no family with >= {min_models} models besides {exclude!r}")
    return float(pd.Series(np.abs(pred[scored] / y[scored] - 1)).groupby(fam[scored]).mean().mean())


def nested_choice(frame: pd.DataFrame, variants: Sequence[Callable[[], object]], families: Sequence[str],
                  groups: int = 8, seed: int = 0, min_models: int = 5) -> dict[str, int]:
    """``{family: index of the chosen variant}`` for each held-out family in ``families``: the variant with the
    lowest :func:`inner_score` on the other families (ties: the first); the family's own rows are not used."""
    if not variants:
        raise DatasetError("nested choice: no variants; allowed: one or more model factories")
    return {f: int(np.argmin([inner_score(frame, make, f, groups, seed, min_models) for make in variants]))
            for f in families}


def nested_predictions(preds: Sequence[pd.DataFrame], chosen: dict[str, int],
                       column: str = "pred_carb") -> pd.DataFrame:
    """The outer leave-one-family-out predictions (``preds``: one frame per variant, same rows in the same
    order, with ``family`` and ``column``) with each family's ``column`` taken from its chosen variant."""
    out = preds[0].copy()
    fam = out["family"].astype(str).to_numpy()
    for f, k in chosen.items():
        at = fam == f
        out.loc[at, column] = preds[k][column].to_numpy(float)[at]
    return out
