"""Intervals on small datasets: split-conformal (the calibration share) against cross-conformal (K-fold
out-of-fold log-ratios of every non-test row, :func:`carb.model.intervals.cross_calibrate`), measured on
subsets of a shipped dataset. Prints one row per (rows, seed, split, method): 90 % coverage and median
hi/lo on the test rows; ``pooled`` is the in-domain interval alone, ``product`` adds what screening adds
(the union with the new-architecture intervals for rows of an unseen architecture).

Two splits: ``random`` (15 % of the rows at random are the test rows) and ``leave-arch`` (the rows of
20 % of the architectures, never seen by the model, are). The rest is cut as ``carb-train`` cuts it:
15/85 validation, 10/85 calibration, the remainder training. Run alone (it refits the cascade 11 times
per row of the table, 5 more per ``--mapie`` target):

    python -m scripts.studies.small_intervals --data carb/data/cpu-reference.parquet --rows 100 200 --seeds 0 1
    python -m scripts.studies.small_intervals --data carb/data/h200-reference.parquet --rows 150 \
        --seeds 0 1 2 3 4 --mapie latency_ms        # with MAPIE's CV+ beside (pip install mapie)
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np
import pandas as pd


def cut(df: pd.DataFrame, split: str, seed: int) -> tuple[pd.DataFrame, ...]:
    """``(train, val, cal, test)`` of ``df`` for one split kind (see the module docstring)."""
    from carb.model.domain import architecture_keys

    rng = np.random.default_rng(seed)
    if split == "random":
        test = rng.random(len(df)) < 0.15
    else:
        keys = np.asarray(architecture_keys(df))
        uniq = np.unique(keys)
        test = np.isin(keys, rng.choice(uniq, max(1, round(0.2 * len(uniq))), replace=False))
    rest = np.flatnonzero(~test)
    rng.shuffle(rest)
    n_val, n_cal = round(len(rest) * 0.15 / 0.85), round(len(rest) * 0.10 / 0.85)
    val, cal, train = rest[:n_val], rest[n_val:n_val + n_cal], rest[n_val + n_cal:]
    return tuple(df.iloc[np.sort(i)].reset_index(drop=True) for i in (train, val, cal, np.flatnonzero(test)))


def score(cal: dict[str, Any], model: Any, test: pd.DataFrame, targets: list[str], product: bool) -> dict[str, Any]:
    """Coverage and median hi/lo per target of ``cal`` on ``test`` (``product``: with the new-architecture
    union for unseen architectures, as screening gives it)."""
    from carb.model.intervals import interval, interval_groups, new_architecture_mask, screening_predict

    pred = screening_predict(model, test)
    iv = interval(cal, pred, groups=interval_groups(model, test),
                  new_arch=new_architecture_mask(model, test) if product else None)
    out = {}
    for t in targets:
        if f"lo_{t}" not in iv:
            continue
        m = test[t].to_numpy(float)
        lo, hi = iv[f"lo_{t}"].to_numpy(float), iv[f"hi_{t}"].to_numpy(float)
        ok = np.isfinite(m)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(lo > 0, hi / lo, np.inf)
        out[t] = {"coverage": float(np.mean((lo[ok] <= m[ok]) & (m[ok] <= hi[ok]))),
                  "hi_lo": float(np.median(ratio[ok])), "n": int(ok.sum()),
                  "unbounded": int(iv[f"interval_unbounded_{t}"].to_numpy()[ok].sum())}
    return out


class LogTarget:
    """One target of a cascade as a 1-D scikit-learn regressor of ``log(target)``, predicted as screening
    predicts (for MAPIE, which conformalizes one 1-D target: absolute residuals of the logs are our log-ratios)."""

    def __init__(self, cascade: Any = None, target: str = "latency_ms"):
        self.cascade, self.target = cascade, target

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"cascade": self.cascade, "target": self.target}

    def set_params(self, **params: Any) -> LogTarget:
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> LogTarget:
        import warnings

        from sklearn.base import clone

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            self.model_ = clone(self.cascade).fit(X, pd.DataFrame({self.target: np.exp(np.asarray(y, float))}))
        return self

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        from carb.model.intervals import screening_predict

        return np.log(screening_predict(self.model_, X)[f"pred_{self.target}"].to_numpy(float))


def mapie_cv_plus(cascade: Any, rest: pd.DataFrame, test: pd.DataFrame, targets: list[str], folds: int,
                  seed: int) -> dict[str, dict[str, Any]]:
    """MAPIE's CV+ (``CrossConformalRegressor``, method ``plus``, absolute score on log(target), the same
    seeded folds as :func:`carb.model.intervals.cross_calibrate`) per target, scored on ``test``."""
    from mapie.regression import CrossConformalRegressor
    from sklearn.model_selection import KFold

    out = {}
    for t in targets:
        ok = rest[t].notna().to_numpy() & (rest[t].to_numpy(float) > 0)
        r = rest[ok].reset_index(drop=True)
        m = CrossConformalRegressor(LogTarget(cascade, t), confidence_level=0.9, method="plus",
                                    cv=KFold(folds, shuffle=True, random_state=seed))
        m.fit_conformalize(r, np.log(r[t].to_numpy(float)))
        _, iv = m.predict_interval(test)
        lo, hi = np.exp(iv[:, 0, 0]), np.exp(iv[:, 1, 0])
        y = test[t].to_numpy(float)
        f = np.isfinite(y)
        out[t] = {"coverage": float(np.mean((lo[f] <= y[f]) & (y[f] <= hi[f]))),
                  "hi_lo": float(np.median((hi / lo)[f])), "n": int(f.sum()),
                  "unbounded": int((~np.isfinite(hi[f])).sum())}
    return out


def study(data: str, rows: int, seed: int, split: str, folds: int = 5,
          mapie: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One subset, one split: the main fit, both calibrations (and MAPIE's CV+ for the ``mapie`` targets), scored."""
    from sklearn.base import clone

    from carb.commands.cli import compose, to_dict
    from carb.data.schema import TARGETS
    from carb.model.intervals import architecture_calibration, calibrate, cross_calibrate
    from carb.model.presets import build_cascade, resolve_auto

    full = pd.read_parquet(data)
    df = full.sample(rows, random_state=seed).reset_index(drop=True)
    train, val, cal, test = cut(df, split, seed)
    cfg = compose("train", ["model.n_jobs=1"])
    model_cfg, _ = resolve_auto(to_dict(cfg.model), len(train))
    cascade = build_cascade(model_cfg, to_dict(cfg.features), to_dict(cfg.prior))
    targets = [t for t in TARGETS if t in df.columns and df[t].notna().any()]
    cascade.fit(train, train[targets], val, val[targets])
    targets = list(cascade.targets_)
    rest = pd.concat([train, val, cal], ignore_index=True)
    cals = {"split": calibrate(cascade, cal, cal[targets]),
            "cross": cross_calibrate(lambda: clone(cascade), rest, rest[targets], 0.9, folds, seed)}
    arch = architecture_calibration(lambda: clone(cascade), train, train[targets], 0.9)
    out = []
    meta = {"data": data.rsplit("/", 1)[-1], "rows": rows, "seed": seed, "split": split}
    if mapie:
        for t, r in mapie_cv_plus(cascade, rest, test, [t for t in targets if t in mapie], folds, seed).items():
            out.append({**meta, "method": "mapie-cv+", "interval": "pooled", "target": t, "n_cal": len(rest), **r})
    for method, c in cals.items():
        for t, e in arch.items():
            if isinstance(c.get(t), dict):
                c[t]["new_arch"] = e
        for kind in ("pooled", "product"):
            for t, r in score(c, cascade, test, targets, kind == "product").items():
                n_cal = len(cal) if method == "split" else len(rest)
                out.append({**meta, "method": method, "interval": kind, "target": t, "n_cal": n_cal, **r})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--rows", type=int, nargs="+", default=[100, 200])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--splits", nargs="+", default=["random", "leave-arch"])
    ap.add_argument("--out", default=None, help="write the rows as JSON lines here too")
    ap.add_argument("--mapie", nargs="*", default=(), help="targets to score MAPIE's CV+ on too, same folds "
                    "(pip install mapie; 5 refits per target)")
    a = ap.parse_args(argv)
    rows = []
    for n in a.rows:
        for s in a.seeds:
            for sp in a.splits:
                got = study(a.data, n, s, sp, mapie=tuple(a.mapie))
                rows += got
                if a.out:
                    with open(a.out, "a") as f:
                        f.writelines(json.dumps(r) + "\n" for r in got)
                print(pd.DataFrame(got).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.groupby(["rows", "split", "method", "interval", "target"])[["coverage", "hi_lo", "unbounded"]]
          .median().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
