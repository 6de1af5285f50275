"""Study (issue 44): could a K-row transfer on the device probes' zero-shot base estimate its corrections better?

On every ordered pair of the three CPUs (``scripts.bench.transfer_pairs.cpu_devices``), the zero-shot model from
the two device probes (``zero_shot_models``) gives a log error ``e = log(measured / predicted)`` on every target
row. K rows (the benchmark's space-filling pick, then ``--draws`` random draws with the same count per precision)
estimate corrections of ``e``; each is scored on the other rows (latency MAPE %, per precision). Compared:

* offsets per precision: ``current`` (:func:`carb.model.transfer._precision_offsets`, empirical-Bayes shrink,
  what carb-calibrate fits), ``noshrink``, ``shrink1`` / ``shrink3`` / ``shrink5`` (fixed pseudo-rows,
  ``transfer.precision_shrink: <n>``), ``median``;
* ``current`` plus one slope on a row feature (:data:`scripts.bench.transfer_pairs.ERROR_FEATURES`) fitted on
  the K rows' offset residuals (centred per precision), ridge-shrunk toward 0 by ``lam`` (pseudo units of the
  centred feature's sum of squares; ``inf``: no slope);
* ``medoids``: the K rows of each precision nearest the centres of a k-means of its rows on the cost axes
  instead of the greedy maximin pick (offsets ``current``).

Prints per variant the worst cell (pair and precision) of the benchmark's pick and of the mean over draws.
About 3 minutes on 2 cores (fitting the three CPUs' source cascades and the probe zero-shots dominates).

    python -m scripts.studies.transfer_offsets [--k 10] [--draws 60] [--seed 0]
"""
from __future__ import annotations

import argparse
import math
import warnings
from collections.abc import Callable

import numpy as np
import pandas as pd

#: An offset estimator: (K rows' log errors (K,), their precisions (K,)) -> {precision: log offset}.
Estimator = Callable[[np.ndarray, np.ndarray], dict[str, float]]


def _shrunk(shrink: float | str) -> Estimator:
    """Per-precision offsets pulled toward the common one by ``shrink`` pseudo-rows ("auto": empirical Bayes)."""
    from carb.model.transfer import _precision_offsets

    def fit(e: np.ndarray, prec: np.ndarray) -> dict[str, float]:
        return _precision_offsets(e, prec, shrink)[1]
    return fit


def _median(e: np.ndarray, prec: np.ndarray) -> dict[str, float]:
    """Each precision's median log error."""
    return {str(p): float(np.median(e[prec == p])) for p in np.unique(prec)}


ESTIMATORS: dict[str, Estimator] = {"current": _shrunk("auto"), "noshrink": _shrunk(0.0), "shrink1": _shrunk(1.0),
                                    "shrink3": _shrunk(3.0), "shrink5": _shrunk(5.0), "median": _median}


def mape(err: np.ndarray) -> float:
    """Latency MAPE (%) of log errors ``err`` (log measured / predicted)."""
    return 100.0 * float(np.mean(np.abs(np.exp(-np.asarray(err, float)) - 1.0)))


def slope_fit(e: np.ndarray, prec: np.ndarray, x: np.ndarray, lam: float, offsets: dict[str, float]
              ) -> tuple[float, dict[str, float]]:
    """One slope of the K rows' offset residuals ``e - offsets`` on feature ``x`` (K,), centred per precision,
    ridge-shrunk by ``lam`` (added to the centred sum of squares; ``inf``: 0). Returns (slope, per-precision
    centre of ``x``)."""
    centre = {str(p): float(x[prec == p].mean()) for p in np.unique(prec)}
    if not math.isfinite(lam):
        return 0.0, centre
    xc = x - np.array([centre[str(p)] for p in prec])
    r = e - np.array([offsets[str(p)] for p in prec])
    den = float(xc @ xc) + float(lam)
    return (float(xc @ r) / den if den > 1e-12 else 0.0), centre


def score(e: np.ndarray, prec: np.ndarray, picks: np.ndarray, est: Estimator, x: np.ndarray | None = None,
          lam: float = math.inf) -> dict[str, float]:
    """Per precision, the MAPE (%) on the rows not in ``picks`` of ``e`` corrected by ``est``'s offsets fitted
    on ``picks`` (and, with feature ``x``, a slope shrunk by ``lam``: :func:`slope_fit`)."""
    mask = np.zeros(len(e), bool)
    mask[picks] = True
    off = est(e[mask], prec[mask])
    b, centre = slope_fit(e[mask], prec[mask], x[mask], lam, off) if x is not None else (0.0, {})
    out = {}
    for p in np.unique(prec[mask]):
        m = (~mask) & (prec == p)
        if m.sum():
            corr = off[str(p)] + (b * (x[m] - centre[str(p)]) if x is not None else 0.0)
            out[str(p)] = mape(e[m] - corr)
    return out


def medoid_picks(frame: pd.DataFrame, k: int, iters: int = 30) -> list[int]:
    """Positions of ``k`` rows of ``frame``, per precision as many as the benchmark's space-filling pick, each
    the row nearest one centre of a k-means (started at the maximin pick) on the standardised cost axes."""
    from carb.analysis.transfer import space_filling_per_precision
    from carb.design.select import AXES, design_matrix, space_filling

    prec = frame["precision"].astype(str).to_numpy()
    base = space_filling_per_precision(frame, k)
    out: list[int] = []
    for p in np.unique(prec):
        n = int((prec[base] == p).sum())
        if not n:
            continue
        pos = np.flatnonzero(prec == p)
        sub = frame.iloc[pos]
        M = design_matrix(sub, AXES)
        M = (M - M.mean(0)) / np.where(M.std(0) > 0, M.std(0), 1.0)
        C = M[space_filling(sub, n)].copy()
        for _ in range(iters):
            lab = np.argmin(((M[:, None, :] - C[None]) ** 2).sum(-1), axis=1)
            C = np.array([M[lab == j].mean(0) if (lab == j).any() else C[j] for j in range(n)])
        chosen: list[int] = []
        for j in range(n):
            d = ((M - C[j]) ** 2).sum(1)
            d[chosen] = np.inf
            chosen.append(int(np.argmin(d)))
        out += [int(pos[i]) for i in chosen]
    return out


def study(errors: dict[tuple[str, str], tuple[pd.DataFrame, np.ndarray]], k: int = 10, draws: int = 60,
          seed: int = 0, lams: tuple[float, ...] = (0.0, 3.0, 10.0)) -> pd.DataFrame:
    """Records (pair, precision, variant, split, draws) of MAPE (%) for every variant (module docstring) on
    ``errors`` ({(source, target): (target rows, zero-shot log errors (n,))}): ``split`` on the benchmark's
    pick, ``draws`` the mean over random picks with its per-precision counts (the same picks for every
    variant)."""
    from carb.analysis.transfer import space_filling_per_precision
    from scripts.bench.transfer_pairs import _feature_matrix

    rng = np.random.default_rng(seed)
    out = []
    for (src, dst), (frame, e) in errors.items():
        prec = frame["precision"].astype(str).to_numpy()
        pick = np.asarray(space_filling_per_precision(frame, k))
        counts = {p: int((prec[pick] == p).sum()) for p in np.unique(prec)}
        rand = [np.concatenate([rng.choice(np.flatnonzero(prec == p), c, replace=False)
                                for p, c in counts.items() if c]) for _ in range(draws)]
        variants: dict[str, Callable[[np.ndarray], dict[str, float]]] = {
            n: (lambda pk, f=f: score(e, prec, pk, f)) for n, f in ESTIMATORS.items()}
        for fname, x in _feature_matrix(frame).items():
            for lam in lams:
                variants[f"slope:{fname}:{lam:g}"] = lambda pk, x=x, lam=lam: score(e, prec, pk, ESTIMATORS["current"],
                                                                                  x, lam)
        for name, fn in variants.items():
            s, r = fn(pick), [fn(pk) for pk in rand]
            for p in s:
                out.append({"pair": f"{src} -> {dst}", "precision": p, "variant": name, "split": s[p],
                            "draws": float(np.mean([d[p] for d in r if p in d])) if r else float("nan")})
        med = score(e, prec, np.asarray(medoid_picks(frame, k)), ESTIMATORS["current"])
        out += [{"pair": f"{src} -> {dst}", "precision": p, "variant": "medoids", "split": v, "draws": float("nan")}
                for p, v in med.items()]
    return pd.DataFrame(out)


def zero_shot_errors() -> dict[tuple[str, str], tuple[pd.DataFrame, np.ndarray]]:
    """Every CPU pair's target rows and the probe zero-shot's latency log errors on them (the benchmark's
    source cascades and :func:`scripts.bench.transfer_pairs.zero_shot_models`)."""
    from carb.model.intervals import screening_predict
    from scripts.bench.transfer import fit_source
    from scripts.bench.transfer_pairs import cpu_devices, zero_shot_models

    devices = cpu_devices()
    models = {n: fit_source(d, [t for t in ("latency_ms", "peak_memory_MB")   # the benchmark's targets
                                if t in d and np.isfinite(d[t].to_numpy(float)).any()])
              for n, d in devices.items()}
    out = {}
    for (s, t), z in zero_shot_models(models, devices).items():
        d = devices[t].reset_index(drop=True)
        p = screening_predict(z, d)["pred_latency_ms"].to_numpy(float)
        out[(s, t)] = (d, np.log(d["latency_ms"].to_numpy(float) / p))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--draws", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = study(zero_shot_errors(), a.k, a.draws, a.seed)
    worst = t.groupby("variant")[["split", "draws"]].max().sort_values("draws")
    print(f"worst pair-and-precision latency MAPE % at K={a.k} (split: the benchmark's pick; draws: mean of "
          f"{a.draws} random picks):")
    print(worst.round(2).to_string())
    base = t[t["variant"] == "current"].set_index(["pair", "precision"])
    for name in ESTIMATORS:
        v = t[t["variant"] == name].set_index(["pair", "precision"])
        print(f"  {name}: cells no worse than current, split {int((v['split'] <= base['split'] + 1e-9).sum())}/"
              f"{len(v)}, draws {int((v['draws'] <= base['draws'] + 1e-9).sum())}/{len(v)}")
    print(t.pivot_table(index=["pair", "precision"], columns="variant", values="draws")
          [list(ESTIMATORS)].round(1).to_string())


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
