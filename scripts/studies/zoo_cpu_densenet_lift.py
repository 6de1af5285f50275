"""Which correction features lift DenseNet's held-out rows on the CPU zoos (issue 43, round zd43).

For each CPU zoo and each held-out family named (default densenet, and googlenet beside it), the registered
cascade fitted on every other family (as :mod:`scripts.studies.zoo_cpu_xeon_families` fits it); on the held-out
rows the latency stage's correction (the log-ratio the trees add to the prior, before correctors and shrink) is
split into per-feature contributions: TreeSHAP of the LightGBM and XGBoost members (``pred_contrib``), Saabas
path contributions of ExtraTrees (the fitted blend is ExtraTrees alone on both CPU zoos), weighted by the blend's
weights. Prints, per family, the mean
correction and the features with the largest mean contribution (log units), and a last line
``densenet_lift: zoo=Z family=F lift=X top=feature:contribution,...``. Accuracy only (no timings).

    PYTHONPATH=$PWD python scripts/studies/zoo_cpu_densenet_lift.py [--zoo zoo-cpu-xeon] [--families densenet]
        [--train-override KEY=VALUE ...] [--top 12] [--drop-feature bytes_concat_MB ...]
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scripts.studies.zoo_cpu_xeon_families import drop_features, make_cascade, zoo_rows  # noqa: E402


def stage_design(model, rows: pd.DataFrame) -> tuple[np.ndarray, list[str], object]:
    """The latency stage's design matrix (n, k) for ``rows``, its column names and the stage, captured from a
    prediction of the fitted cascade ``model``."""
    stage = model.cascade_.stages_["latency_ms"]
    got = {}
    inner = stage.model.predict_matrix

    def capture(M):
        got["M"] = np.asarray(M, float)
        return inner(M)
    stage.model.predict_matrix = capture
    try:
        model.cascade_.predict(rows)
    finally:
        del stage.model.predict_matrix
    return got["M"], list(stage.columns), stage


def tree_paths(forest, M: np.ndarray) -> np.ndarray:
    """Saabas path contributions of a scikit-learn forest (mean over its trees), shape (n, k): for each split a
    row passes, the change of the node value is credited to the split's feature; the row's prediction is the
    forest's mean root value plus the row's sum."""
    out = np.zeros(M.shape)
    for est in forest.estimators_:
        t = est.tree_
        val = t.value[:, 0, 0]
        path = est.decision_path(M.astype(np.float32))
        for i in range(M.shape[0]):
            nodes = path.indices[path.indptr[i]: path.indptr[i + 1]]
            for parent, child in zip(nodes[:-1], nodes[1:]):
                out[i, t.feature[parent]] += val[child] - val[parent]
    return out / len(forest.estimators_)


def contributions(stage, M: np.ndarray, cols: list[str]) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per row and feature, the blend's contribution (log units): TreeSHAP for the LightGBM and XGBoost
    members, Saabas path contributions for ExtraTrees, weighted by the blend weights; and the weights."""
    blend = stage.model
    names = list(blend.members_)
    w = dict(zip(names, np.asarray(blend.weights_, float)))
    total, info = np.zeros(M.shape), {f"w_{k}": float(v) for k, v in w.items()}
    for m in names:
        if w[m] == 0:
            continue
        est = blend.members_[m]
        if m.startswith("lgbm"):
            c = np.asarray(est.booster_.predict(M, pred_contrib=True))[:, : len(cols)]
        elif m.startswith("xgb"):
            import xgboost as xgb
            c = np.asarray(est.get_booster().predict(xgb.DMatrix(M), pred_contribs=True))[:, : len(cols)]
        else:
            c = tree_paths(est, M)
        total += w[m] * c
    return pd.DataFrame(total, columns=cols), info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", action="append", default=None)
    ap.add_argument("--families", nargs="*", default=["densenet", "googlenet"])
    ap.add_argument("--train-override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--drop-feature", action="append", default=[], help="leave a correction feature out (study)")
    args = ap.parse_args()
    drop_features(args.drop_feature)
    pd.set_option("display.width", 200)
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for zoo in args.zoo or ["zoo-cpu-xeon", "zoo-cpu"]:
            rows, make = zoo_rows(zoo), make_cascade(zoo, args.train_override)
            for fam in args.families:
                test = (rows["family"] == fam).to_numpy()
                model = make().fit(rows[~test])
                M, cols, stage = stage_design(model, rows[test])
                c, info = contributions(stage, M, cols)
                mean = c.mean().sort_values(key=np.abs, ascending=False)
                lift = float(np.mean(stage.model.predict_matrix(M)))
                print(f"\n== {zoo} held out {fam}: mean correction {lift:+.3f} (log); "
                      + " ".join(f"{k}={v:.3g}" for k, v in info.items()))
                vals = pd.DataFrame(M, columns=cols)
                tr_M, _, _ = stage_design(model, rows[~test])
                tr = pd.DataFrame(tr_M, columns=cols)
                tab = pd.DataFrame({"contrib": mean.head(args.top),
                                    "family_median": vals[mean.head(args.top).index].median(),
                                    "train_q10": tr[mean.head(args.top).index].quantile(0.1),
                                    "train_q90": tr[mean.head(args.top).index].quantile(0.9)})
                print(tab.to_string(float_format=lambda v: f"{v:.4g}"))
                top = ",".join(f"{k}:{v:+.3f}" for k, v in mean.head(5).items())
                lines.append(f"densenet_lift: zoo={zoo} family={fam} lift={lift:+.3f} top={top}")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
