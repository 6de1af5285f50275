"""Shrinking a stage's learned correction toward its physics prior where the training rows cannot vouch for it.

A physics stage predicts ``prior * exp(r)``, ``r`` the tree ensemble's (and correctors') log-ratio learned on
the training rows. On a network family never measured the trees extrapolate what they learned from other
families, and on the CPU zoo that moves some families away from a prior that was closer (densenet: roofline
13.6 % off, with the correction 32.5 %; swin's memory: liveness 0.9 %, with the correction 11.9 %).

:func:`fit_shrink` chooses, per stage, how far the correction may move a row:
``prediction = prior * exp(s * r)`` with ``s = alpha * min(1, radius / d) ** 2``, ``d`` the row's mean
distance to its ``neighbours`` nearest training rows (1: the nearest) in a standardised description of the
network (:func:`distance_columns`: on zoo rows each operation kind's share of the FLOPs and bytes and the
per-image log work, so a network of a new composition is far whatever its size; otherwise signed ``log1p`` of
the numeric features). ``alpha`` (one per target) and ``radius`` are chosen by grouped cross-validation over
the training rows' groups (``family`` on zoo rows; ``folds: 0``: one fold per group, a nested
leave-one-group-out): each group's log-ratios ``r`` come from an ensemble refitted without that group, its
distances from the other groups' rows, and the pair with the lowest mean (over groups) absolute log error wins;
among pairs within ``tolerance`` of it the one that moves rows least. Rows without groups (ResNet knobs) or with
fewer than ``min_groups`` get no shrink: their predictions are unchanged.
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
DEFAULT_SHRINK: dict[str, Any] = {"enabled": False, "group": "family", "min_groups": 4, "folds": 5,
                                  "alphas": [0.0, 0.25, 0.5, 0.75, 1.0], "radii": [1.0, 1.5, 2.0, 3.0, None],
                                  "tolerance": 0.01, "max_reference_rows": 5000, "neighbours": 1}


def shrink_config(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """:data:`DEFAULT_SHRINK` with ``overrides`` merged in; :class:`ConfigError` names an unknown key."""
    cfg = dict(DEFAULT_SHRINK)
    for k, v in (overrides or {}).items():
        if k not in cfg:
            raise ConfigError(f"model.shrink.{k}: unknown key; allowed: {list(cfg)}")
        cfg[k] = v
    return cfg


#: Zoo columns that grow with the batch (whole batch): described per image.
PER_BATCH = ("flops", "total_activation_MB", "max_activation_MB", "activations", "peak_live_MB", "bytes_read_MB",
             "bytes_written_MB")


def distance_columns(X: pd.DataFrame, features: list[str], zoo: bool) -> list[tuple[str, str]]:
    """The columns the distance reads, each with how: ``share_flops`` / ``share_bytes`` (a kind's share of the
    row's FLOPs / bytes read + written), ``per_image`` (``log1p`` of the value per image), ``log`` (signed
    ``log1p``). Zoo rows (``zoo``): the layer table's static and per-kind columns; else the numeric ``features``."""
    if zoo:
        from carb.design.zoo_features import ZOO_KIND_FEATURES, ZOO_STATIC

        kinds = [(c, "share_flops" if c.startswith("flops_") else "share_bytes") for c in ZOO_KIND_FEATURES]
        static = [(c, "per_image" if c in PER_BATCH else "log") for c in ZOO_STATIC]
        return [(c, m) for c, m in static + kinds if c in X.columns]
    return [(c, "log") for c in features if c in X.columns and pd.api.types.is_numeric_dtype(X[c])]


def describe(X: pd.DataFrame, columns: list[tuple[str, str]]) -> np.ndarray:
    """The rows of ``X`` (n) in the distance's space before standardising, (n, len(columns)); NaN -> 0."""
    f = lambda c: pd.to_numeric(X[c], errors="coerce").to_numpy(float) if c in X.columns else np.full(len(X), np.nan)  # noqa: E731
    out = np.empty((len(X), len(columns)))
    for j, (c, how) in enumerate(columns):
        v = f(c)
        if how == "share_flops":
            v = v / f("flops")
        elif how == "share_bytes":
            v = v / (f("bytes_read_MB") + f("bytes_written_MB"))
        elif how == "per_image":
            v = np.log1p(v / f("batch_size"))
        else:
            v = np.sign(v) * np.log1p(np.abs(v))
        out[:, j] = v
    return np.nan_to_num(out, nan=0.0, posinf=0.0, neginf=0.0)


def nearest_distance(Z: np.ndarray, ref: np.ndarray, chunk: int = 512, neighbours: int = 1) -> np.ndarray:
    """Mean Euclidean distance (n,) of each standardised row of ``Z`` (n, k) to its ``neighbours`` nearest rows
    of ``ref`` (m, k; at most m of them; 1: the distance to the nearest row)."""
    out = np.empty(len(Z))
    rr = (ref ** 2).sum(1)
    nn = int(max(1, min(int(neighbours), len(ref))))
    for i in range(0, len(Z), chunk):
        z = Z[i:i + chunk]
        d2 = np.maximum((z ** 2).sum(1)[:, None] + rr[None, :] - 2.0 * z @ ref.T, 0.0)
        near = np.partition(d2, nn - 1, axis=1)[:, :nn] if nn > 1 else d2.min(1, keepdims=True)
        out[i:i + chunk] = np.sqrt(near).mean(1)
    return out


def factors(d: np.ndarray, alpha: float, radius: float | None) -> np.ndarray:
    """Shrink factors ``s`` (n,) in [0, alpha] for distances ``d`` (n,): ``alpha * min(1, radius / d) ** 2``
    (``radius`` None: ``alpha`` everywhere)."""
    if radius is None:
        return np.full(len(d), float(alpha))
    return alpha * np.minimum(1.0, float(radius) / np.maximum(d, 1e-12)) ** 2


@dataclass
class Shrink:
    """A fitted shrink of one stage: ``alpha``, ``radius`` (None: no distance term), the raw ``columns`` it
    measures distance in (:func:`distance_columns`), their training ``mean_`` / ``scale_`` (k,) and the
    standardised reference rows ``ref_`` (m, k), how many ``neighbours`` a distance averages; ``report`` says
    how it was chosen (JSON-able)."""

    alpha: float
    radius: float | None
    columns: list[tuple[str, str]]
    mean_: np.ndarray
    scale_: np.ndarray
    ref_: np.ndarray
    report: dict[str, Any]
    neighbours: int = 1

    def factor(self, X: pd.DataFrame) -> np.ndarray:
        """Shrink factors (n,) of raw rows ``X`` (n): ``alpha`` near the training rows, less far away."""
        Z = (describe(X, self.columns) - self.mean_) / self.scale_
        return factors(nearest_distance(Z, self.ref_, neighbours=self.neighbours), self.alpha, self.radius)

    def apply(self, pred: np.ndarray, prior: np.ndarray, X: pd.DataFrame) -> np.ndarray:
        """``prior * (pred / prior) ** s`` (n,), target units, for raw rows ``X`` (n)."""
        s = self.factor(X)
        return prior * np.exp(s * np.log(np.maximum(pred, 1e-300) / prior))


def _grouped_ratios(est: Any, model: Any, Zs: np.ndarray, D: pd.DataFrame, cols: list[str],
                    z: np.ndarray, groups: np.ndarray, folds: int, neighbours: int = 1
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-group log-ratios (n,) of the stage's blend (refitted on the other groups, with the fitted
    ``model``'s weights) and each row's distance (n,) to the other groups' rows in the standardised space
    (mean over its ``neighbours`` nearest). ``folds`` 0: one fold per group (leave-one-group-out)."""
    r, d = np.empty(len(z)), np.empty(len(z))
    fold_est = clone(est).set_params(weights=list(model.weights_), log_target=False)
    n_groups = len(np.unique(groups))
    k = n_groups if int(folds) <= 0 else int(min(folds, n_groups))
    for tr, te in GroupKFold(n_splits=k).split(Zs, z, groups):
        fm = clone(fold_est).fit(D.iloc[tr][cols], z[tr])
        r[te] = fm.predict(D.iloc[te][cols])
        d[te] = nearest_distance(Zs[te], Zs[tr], neighbours=neighbours)
    return r, d


def choose(z: np.ndarray, r: np.ndarray, d: np.ndarray, groups: np.ndarray, alphas: list[float],
           radii: list[float | None], tolerance: float) -> tuple[float, float | None, dict[str, Any]]:
    """(alpha, radius, report) by the mean-over-groups absolute log error ``|z - s r|`` (z, r, d, groups: (n,)):
    the smallest alpha whose best radius comes within ``tolerance`` (relative) of the lowest error, with
    that best radius (a radius only where it lowers the error, a weaker correction also where it merely
    does not raise it)."""
    g = pd.Series(groups).astype(str).to_numpy()
    cands = []
    for a in alphas:
        for rad in radii:
            s = factors(d, float(a), None if rad is None else float(rad))
            loss = float(pd.Series(np.abs(z - s * r)).groupby(g).mean().mean())
            cands.append((loss, float(np.mean(s)), float(a), rad))
    best = min(c[0] for c in cands)
    a_min = min(c[2] for c in cands if c[0] <= best * (1.0 + float(tolerance)))
    loss, mean_s, a, rad = min((c for c in cands if c[2] == a_min), key=lambda c: c[0])
    no_shrink = min(c[0] for c in cands if c[2] == max(alphas) and c[3] is None) if None in radii else float("nan")
    return a, (None if rad is None else float(rad)), {
        "alpha": a, "radius": None if rad is None else float(rad), "cv_log_mae": loss, "cv_log_mae_best": best,
        "cv_log_mae_unshrunk": no_shrink, "mean_factor": mean_s}


def fit_shrink(settings: Mapping[str, Any] | None, est: Any, model: Any, D: pd.DataFrame, cols: list[str],
               columns: list[tuple[str, str]], X: pd.DataFrame, z: np.ndarray, measured: np.ndarray,
               random_state: int = 0) -> tuple[Shrink | None, dict[str, Any]]:
    """The stage's :class:`Shrink` (or None) and a report. ``est``/``model``: the stage's unfitted and fitted
    blend; ``D`` (n rows): design frame with ``cols`` (the blend's); ``columns``: the distance's
    (:func:`distance_columns`); ``X``: raw rows (n; the ``group`` column and ``columns``); ``z`` (n,):
    ``log(y / prior)``; ``measured`` (n,) mask."""
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
    S = describe(X.iloc[rows], columns)
    mean, scale = S.mean(0), S.std(0)
    scale = np.where(scale > 0, scale, 1.0)
    Zs = (S - mean) / scale
    Dm = D.iloc[rows].reset_index(drop=True)
    neighbours = int(cfg["neighbours"])
    r, d = _grouped_ratios(est, model, Zs, Dm, cols, z[rows], groups, int(cfg["folds"]), neighbours)
    alpha, radius, report = choose(z[rows], r, d, groups, list(cfg["alphas"]), list(cfg["radii"]),
                                   float(cfg["tolerance"]))
    ref = Zs
    if len(ref) > int(cfg["max_reference_rows"]):
        pick = np.random.default_rng(random_state).choice(len(ref), int(cfg["max_reference_rows"]), replace=False)
        ref = ref[np.sort(pick)]
    report.update(kept=True, groups=n_groups, neighbours=neighbours,
                  reason="grouped cross-validation over the training groups")
    return Shrink(alpha, radius, list(columns), mean, scale, ref, report, neighbours), report
