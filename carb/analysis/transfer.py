"""How well a few-shot transfer predicts a device's rows it was not fitted on, beside two baselines.

For K rows of the target device picked space-filling per precision (:func:`space_filling_per_precision`) the
transfer (:class:`carb.model.transfer.TransferredCascade`) is fitted and scored on the remaining rows:
Spearman rank correlation (screening ranks), MAPE (%) and R^2 per target, beside (a) the source model
uncalibrated and (b) a FLOPs-only linear fit on the same K rows (B1 of the paper, refitted per device).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from carb.data.schema import TARGETS
from carb.design.select import space_filling
from carb.model.encoding import pred_name


def scores(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """``spearman``, ``mape_pct`` (mean absolute percentage error, %) and ``r2`` of predictions ``p`` of
    measurements ``y`` (n,), over finite positive pairs (NaN when fewer than 2)."""
    from scipy.stats import spearmanr

    ok = np.isfinite(y) & np.isfinite(p) & (y > 0)
    if ok.sum() < 2:
        return {"spearman": float("nan"), "mape_pct": float("nan"), "r2": float("nan"), "n": int(ok.sum())}
    y, p = y[ok], p[ok]
    ss = float(((y - y.mean()) ** 2).sum())
    return {"spearman": float(spearmanr(y, p).statistic), "mape_pct": float(100 * np.mean(np.abs(p / y - 1))),
            "r2": float(1 - ((y - p) ** 2).sum() / ss) if ss > 0 else float("nan"), "n": int(ok.sum())}


def flops_fit(train: pd.DataFrame, target: str) -> Any:
    """A FLOPs-only least-squares line ``target ~ c0 + c1 * flops`` on ``train``; returns ``f(frame) -> (n,)``
    (a constant for fewer than 2 distinct FLOP counts)."""
    x = pd.to_numeric(train["flops"], errors="coerce").to_numpy(float)
    y = pd.to_numeric(train[target], errors="coerce").to_numpy(float)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() >= 2 and np.ptp(x[ok]) > 0:
        c1, c0 = np.polyfit(x[ok], y[ok], 1)
    else:
        c0, c1 = (float(np.nanmean(y)) if ok.any() else float("nan")), 0.0
    return lambda f: c0 + c1 * pd.to_numeric(f["flops"], errors="coerce").to_numpy(float)


def space_filling_per_precision(frame: pd.DataFrame, k: int) -> list[int]:
    """Positions (0-based) of ``k`` rows of ``frame``: shared out over its precisions as evenly as their
    rows allow (round robin, the most numerous precision first), each precision's share picked by greedy
    maximin on the cost axes (:func:`carb.design.select.space_filling`) among its own rows. One precision
    (or no ``precision`` column): exactly :func:`space_filling`. The transfer's per-precision offsets and
    bases need rows of every precision (at least 3 to be checked by leave-one-out); maximin over the cost
    axes alone leaves a precision to chance (Xeon -> EPYC at K = 10: 6 fp32, 3 fp16, 1 bf16)."""
    if "precision" not in frame.columns:
        return space_filling(frame, k)
    prec = frame["precision"].astype(str).to_numpy()
    if pd.Series(prec).nunique() < 2 or not 1 <= int(k) <= len(frame):
        return space_filling(frame, k)
    picks: list[int] = []
    for p, n in precision_shares(prec, k).items():
        if n:
            pos = np.flatnonzero(prec == p)
            picks += [int(pos[i]) for i in space_filling(frame.iloc[pos], n)]
    return picks


def precision_shares(prec: np.ndarray, k: int) -> dict[str, int]:
    """How many of ``k`` rows each precision of ``prec`` ((n,) names) gets: round robin, the most numerous
    precision first, none more than it has (:func:`space_filling_per_precision`'s rule)."""
    counts = pd.Series(prec).value_counts()
    share = dict.fromkeys(counts.index, 0)
    left = min(int(k), len(prec))
    while left:
        for p in counts.index:
            if left and share[p] < counts[p]:
                share[p] += 1
                left -= 1
    return share


def covering_picks(frame: pd.DataFrame, k: int, precisions: Sequence[str], min_each: int = 3,
                   disagreement: np.ndarray | None = None, pool: int = 3) -> list[int]:
    """Positions (0-based) of calibration rows of ``frame`` that cover every precision of ``precisions``
    the frame has: each gets its round-robin share of ``k`` (:func:`space_filling_per_precision`'s rule) but
    at least ``min_each`` rows (so the result may hold more than ``k``); within a precision the rows are the
    space-filling pick (:func:`carb.design.select.space_filling`) among the ``pool`` x share rows where
    ``disagreement`` ((n,), e.g. ``|log|`` of how far the device probes' prediction departs from the
    source's common factor) is largest; without it among all that precision's rows. Issue 44: the K rows of
    the quickstart covered fp32 and bf16 only and made bf16 worse than the zero-shot."""
    prec = frame["precision"].astype(str).to_numpy()
    have = [p for p in dict.fromkeys(map(str, precisions)) if (prec == p).any()]
    if not have:
        return space_filling(frame, min(int(k), len(frame)))
    counts = {p: int((prec == p).sum()) for p in have}
    share = {p: min(int(min_each), counts[p]) for p in have}
    left = max(int(k) - sum(share.values()), 0)
    while left and any(share[p] < counts[p] for p in have):
        for p in sorted(have, key=lambda q: -counts[q]):
            if left and share[p] < counts[p]:
                share[p] += 1
                left -= 1
    picks: list[int] = []
    for p, n in share.items():
        pos = np.flatnonzero(prec == p)
        if disagreement is not None and len(pos) > pool * n:
            d = np.abs(np.asarray(disagreement, float)[pos])
            pos = pos[np.argsort(-np.where(np.isfinite(d), d, -1.0), kind="stable")[:pool * n]]
        picks += [int(pos[i]) for i in space_filling(frame.iloc[pos], n)]
    return picks


def split_k(rows: pd.DataFrame, k: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(calibration rows, held-out rows)``: ``k`` rows picked space-filling per precision
    (:func:`space_filling_per_precision`), and the rest."""
    picks = space_filling_per_precision(rows, k)
    return rows.iloc[picks], rows.drop(index=rows.index[picks])


def pick_split(rows: pd.DataFrame, k: int, pick: int = 0, pool_fraction: float = 0.5, seed: int = 0
               ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(calibration rows, held-out rows)`` of pick number ``pick``: pick 0 is :func:`split_k` (the space-filling
    rows carb-calibrate takes from the whole of ``rows``); pick ``i >= 1`` the same rule
    on a random ``pool_fraction`` of each precision's rows (generator seeded by ``(seed, i)``; each precision's
    share of ``k`` as in pick 0, :func:`precision_shares`), so each pick is another honest K-row calibration with
    the same rows per precision; the held-out rows are all the others. The
    deterministic maximin pick is one draw: a benchmark averages over several (``benchmark.picks`` of
    ``conf/calibrate.yaml``)."""
    if int(pick) == 0:
        return split_k(rows, k)
    rng = np.random.default_rng([int(seed), int(pick)])
    prec = (rows["precision"].astype(str).to_numpy() if "precision" in rows.columns
            else np.full(len(rows), "all"))
    picks: list[int] = []
    for p, n in precision_shares(prec, k).items():
        if n:
            pos = np.flatnonzero(prec == p)
            size = min(len(pos), max(n, int(np.ceil(float(pool_fraction) * len(pos)))))
            pool = np.sort(rng.choice(pos, size=size, replace=False))
            picks += [int(pool[i]) for i in space_filling(rows.iloc[pool], n)]
    return rows.iloc[picks], rows.drop(index=rows.index[picks])


def evaluate_transfer(source: Any, rows: pd.DataFrame, k: int, transfer_kw: dict[str, Any] | None = None,
                      targets: Sequence[str] | None = None, probes: tuple | None = None,
                      spec: tuple | None = None, extra: list | None = None) -> tuple[Any, pd.DataFrame]:
    """Fit the transfer of ``source`` on ``k`` of the target's ``rows`` and score it on the rest.

    ``probes`` / ``spec``: the zero-shot the K rows start from (:meth:`TransferredCascade.fit_probe` /
    :meth:`~TransferredCascade.fit_spec` arguments); ``extra``: other sources' probe zero-shots to the same target
    (:meth:`~TransferredCascade.add_sources`, with ``probes`` only). Returns ``(fitted transfer, table)``; the table has one row per (target, model) with model in
    ``calibrated`` / ``source`` / ``flops_k`` and the :func:`scores` columns (empty when no row is held out)."""
    from carb.model.intervals import screening_predict
    from carb.model.transfer import TransferredCascade

    cal, rest = split_k(rows, k)
    tr = TransferredCascade(source, **(transfer_kw or {}))
    if probes is not None:   # (source probe, target probe, target fingerprint): the base the K rows calibrate
        tr.fit_probe(*probes)
        if extra:
            tr.add_sources(extra)
    elif spec is not None:   # (source spec record, target spec record, weights): a base the K rows may keep
        tr.fit_spec(*spec)
    tr.fit(cal)
    out = []
    if len(rest):
        p_tr, p_src = screening_predict(tr, rest), screening_predict(source, rest)
        for t in targets or [t for t in TARGETS if t in rows.columns]:
            if pred_name(t) not in p_tr or t not in rest or not np.isfinite(rest[t].to_numpy(float)).any():
                continue
            y = rest[t].to_numpy(float)
            for name, p in (("calibrated", p_tr[pred_name(t)].to_numpy(float)),
                            ("source", p_src[pred_name(t)].to_numpy(float)),
                            ("flops_k", flops_fit(cal, t)(rest))):
                out.append({"target": t, "model": name, "k": len(cal), **scores(y, p)})
    return tr, pd.DataFrame(out)
