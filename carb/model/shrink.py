"""Shrinking a stage's learned correction toward its physics prior where the training rows cannot vouch for it.

A physics stage predicts ``prior * exp(r)``, ``r`` the tree ensemble's (and correctors') log-ratio learned on
the training rows. On a network family never measured the trees extrapolate what they learned from other
families, and on the CPU zoo that moves some families away from a prior that was closer (densenet: roofline
13.6 % off, with the correction 32.5 %; swin's memory: liveness 0.9 %, with the correction 11.9 %).

:func:`fit_shrink` chooses, per stage, how far the correction may move a row:
``prediction = prior * exp(s * r)`` with ``s = alpha * min(1, radius / d) ** 2``, ``d`` the row's distance
to its nearest training row in the stage's standardised design space (signed ``log1p`` of each base column).
``alpha`` (one per target) and ``radius`` are chosen by grouped cross-validation over the training rows'
groups (``family`` on zoo rows): each group's log-ratios ``r`` come from an ensemble refitted without that
group, its distances from the other groups' rows, and the pair with the lowest mean (over groups) absolute
log error wins; among pairs within ``tolerance`` of it the one that moves rows least. Rows without groups
(ResNet knobs) or with fewer than ``min_groups`` get no shrink: their predictions are unchanged.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.model_selection import GroupKFold

from carb.errors import ConfigError

#: Defaults of ``model.shrink`` (conf/model/*.yaml; schema :class:`carb.commands.schema.groups.Shrink`).
DEFAULT_SHRINK: dict[str, Any] = {"enabled": True, "group": "family", "min_groups": 4, "folds": 5,
                                  "alphas": [0.0, 0.25, 0.5, 0.75, 1.0], "radii": [1.0, 1.5, 2.0, 3.0, None],
                                  "tolerance": 0.01, "max_reference_rows": 5000}


def shrink_config(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """:data:`DEFAULT_SHRINK` with ``overrides`` merged in; :class:`ConfigError` names an unknown key."""
    cfg = dict(DEFAULT_SHRINK)
    for k, v in (overrides or {}).items():
        if k not in cfg:
            raise ConfigError(f"model.shrink.{k}: unknown key; allowed: {list(cfg)}")
        cfg[k] = v
    return cfg


def design_space(A: np.ndarray) -> np.ndarray:
    """Signed ``log1p`` of design values (n, k) -> (n, k); NaN -> 0."""
    return np.nan_to_num(np.sign(A) * np.log1p(np.abs(A)))


def nearest_distance(Z: np.ndarray, ref: np.ndarray, chunk: int = 512) -> np.ndarray:
    """Euclidean distance (n,) of each standardised row of ``Z`` (n, k) to its nearest row of ``ref`` (m, k)."""
    out = np.empty(len(Z))
    rr = (ref ** 2).sum(1)
    for i in range(0, len(Z), chunk):
        z = Z[i:i + chunk]
        d2 = (z ** 2).sum(1)[:, None] + rr[None, :] - 2.0 * z @ ref.T
        out[i:i + chunk] = np.sqrt(np.maximum(d2.min(1), 0.0))
    return out


def factors(d: np.ndarray, alpha: float, radius: float | None) -> np.ndarray:
    """Shrink factors ``s`` (n,) in [0, alpha] for distances ``d`` (n,): ``alpha * min(1, radius / d) ** 2``
    (``radius`` None: ``alpha`` everywhere)."""
    if radius is None:
        return np.full(len(d), float(alpha))
    return alpha * np.minimum(1.0, float(radius) / np.maximum(d, 1e-12)) ** 2


@dataclass
class Shrink:
    """A fitted shrink of one stage: ``alpha``, ``radius`` (None: no distance term), the base design
    ``columns`` it measures distance in, their training ``mean_`` / ``scale_`` (k,) and the standardised
    reference rows ``ref_`` (m, k); ``report`` says how it was chosen (JSON-able)."""

    alpha: float
    radius: float | None
    columns: list[str]
    mean_: np.ndarray
    scale_: np.ndarray
    ref_: np.ndarray
    report: dict[str, Any]

    def standardise(self, A: np.ndarray) -> np.ndarray:
        """Design values (n, k) of :attr:`columns` -> the standardised space (n, k)."""
        return (design_space(A) - self.mean_) / self.scale_

    def factor(self, A: np.ndarray) -> np.ndarray:
        """Shrink factors (n,) of design rows ``A`` (n, k): ``alpha`` near the training rows, less far away."""
        return factors(nearest_distance(self.standardise(A), self.ref_), self.alpha, self.radius)

    def apply(self, pred: np.ndarray, prior: np.ndarray, A: np.ndarray) -> np.ndarray:
        """``prior * (pred / prior) ** s`` (n,), target units; ``A``: the rows' design values (n, k)."""
        s = self.factor(A)
        return prior * np.exp(s * np.log(np.maximum(pred, 1e-300) / prior))


def _grouped_ratios(est: Any, model: Any, A: np.ndarray, Zs: np.ndarray, D: pd.DataFrame, cols: list[str],
                    z: np.ndarray, groups: np.ndarray, folds: int) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-group log-ratios (n,) of the stage's blend (refitted on the other groups, with the fitted
    ``model``'s weights) and each row's distance (n,) to the other groups' rows in the standardised space."""
    r, d = np.empty(len(z)), np.empty(len(z))
    fold_est = clone(est).set_params(weights=list(model.weights_), log_target=False)
    k = int(min(folds, len(np.unique(groups))))
    for tr, te in GroupKFold(n_splits=k).split(A, z, groups):
        fm = clone(fold_est).fit(D.iloc[tr][cols], z[tr])
        r[te] = fm.predict(D.iloc[te][cols])
        d[te] = nearest_distance(Zs[te], Zs[tr])
    return r, d


def choose(z: np.ndarray, r: np.ndarray, d: np.ndarray, groups: np.ndarray, alphas: list[float],
           radii: list[float | None], tolerance: float) -> tuple[float, float | None, dict[str, Any]]:
    """The (alpha, radius) with the lowest mean-over-groups absolute log error ``|z - s r|`` (z, r, d, groups:
    (n,)); among those within ``tolerance`` (relative) of it, the one with the smallest mean factor."""
    g = pd.Series(groups).astype(str).to_numpy()
    cands = []
    for a in alphas:
        for rad in radii:
            s = factors(d, float(a), None if rad is None else float(rad))
            loss = float(pd.Series(np.abs(z - s * r)).groupby(g).mean().mean())
            cands.append((loss, float(np.mean(s)), float(a), rad))
    best = min(c[0] for c in cands)
    ok = [c for c in cands if c[0] <= best * (1.0 + float(tolerance))]
    loss, mean_s, a, rad = min(ok, key=lambda c: (c[1], c[0]))
    no_shrink = min(c[0] for c in cands if c[2] == max(alphas) and c[3] is None) if None in radii else float("nan")
    return a, (None if rad is None else float(rad)), {
        "alpha": a, "radius": None if rad is None else float(rad), "cv_log_mae": loss, "cv_log_mae_best": best,
        "cv_log_mae_unshrunk": no_shrink, "mean_factor": mean_s}


def fit_shrink(settings: Mapping[str, Any] | None, est: Any, model: Any, D: pd.DataFrame, cols: list[str],
               base_cols: list[str], X: pd.DataFrame, z: np.ndarray, measured: np.ndarray,
               random_state: int = 0) -> tuple[Shrink | None, dict[str, Any]]:
    """The stage's :class:`Shrink` (or None) and a report. ``est``/``model``: the stage's unfitted and fitted
    blend; ``D`` (n rows): design frame with ``cols`` (the blend's) and ``base_cols`` (the distance space);
    ``X``: raw rows (the ``group`` column); ``z`` (n,): ``log(y / prior)``; ``measured`` (n,) mask."""
    cfg = shrink_config(settings)
    if not cfg["enabled"]:
        return None, {"kept": False, "reason": "model.shrink.enabled is false"}
    group = str(cfg["group"])
    if group not in X.columns:
        return None, {"kept": False, "reason": f"the rows have no '{group}' column"}
    rows = np.flatnonzero(measured & X[group].notna().to_numpy())
    groups = X[group].astype(str).to_numpy()[rows]
    n_groups = len(np.unique(groups))
    if n_groups < int(cfg["min_groups"]):
        return None, {"kept": False, "reason": f"{n_groups} '{group}' groups < min_groups {cfg['min_groups']}"}
    A = D[base_cols].to_numpy(float)
    S = design_space(A[rows])
    mean, scale = S.mean(0), S.std(0)
    scale = np.where(scale > 0, scale, 1.0)
    Zs = (S - mean) / scale
    Dm = D.iloc[rows].reset_index(drop=True)
    r, d = _grouped_ratios(est, model, A[rows], Zs, Dm, cols, z[rows], groups, int(cfg["folds"]))
    alpha, radius, report = choose(z[rows], r, d, groups, list(cfg["alphas"]), list(cfg["radii"]),
                                   float(cfg["tolerance"]))
    ref = Zs
    if len(ref) > int(cfg["max_reference_rows"]):
        pick = np.random.default_rng(random_state).choice(len(ref), int(cfg["max_reference_rows"]), replace=False)
        ref = ref[np.sort(pick)]
    report.update(kept=True, groups=n_groups, reason="grouped cross-validation over the training groups")
    return Shrink(alpha, radius, list(base_cols), mean, scale, ref, report), report
