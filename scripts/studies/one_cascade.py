"""One cascade across network kinds (issue 43 item 3): a cascade fitted on ResNet rows and zoo rows of one
device beside the cascades fitted on each kind alone, scored on each kind's held-out rows.

* ResNet: the test split ``carb-train data.path=<resnet>`` makes (:func:`carb.analysis.training.split_frames`,
  ``conf/split/default.yaml``), on three fits of the same settings (``carb-train``'s model, features and prior
  for the training rows' count): ``resnet`` (its train rows, validated on its val rows: what ``carb-train``
  fits), ``resnet+layer`` (the same rows with the layer-table feature list a combined fit uses: the ResNet
  walk's layer-table features instead of the knobs), ``combined`` (its train rows plus 85 % of the zoo rows,
  validated on its val rows plus the other 15 %).
* Zoo: leave-one-family-out over the zoo's families: ``zoo`` (every other family's rows, as
  ``scripts/bench/zoo.py --part cpu`` fits it) and ``combined`` (the same rows plus every ResNet row). The
  zoo's own ``resnet`` family is where the ResNet knob rows are the same networks: its line is flagged.

MAPE (%) and Spearman per target and kind; per held-out zoo family too. Run alone (it fits the cascade
3 + 2 x families times):

    python -m scripts.studies.one_cascade --resnet carb/data/cpu-amd-zen4.parquet --zoo zoo-cpu \
        [--families resnet mobilenet ...] [--out one_cascade.json]
    python -m scripts.studies.one_cascade --resnet reference --zoo none     # ResNet fits only (another device)

The last line: ``one_cascade: resnet_lat_mape=X combined_lat_mape=X ... zoo_lat_mape=X combined_zoo_lat_mape=X``.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from typing import Any

import numpy as np
import pandas as pd

TARGETS = ("latency_ms", "peak_memory_MB")


def scores(pred: pd.DataFrame, rows: pd.DataFrame) -> dict[str, float]:
    """``{<target>_mape: %, <target>_rho: Spearman}`` of ``pred`` (``pred_<target>``) on ``rows``' measured targets."""
    from scipy.stats import spearmanr

    out: dict[str, float] = {}
    for t in TARGETS:
        if f"pred_{t}" not in pred:
            continue
        y, p = rows[t].to_numpy(float), pred[f"pred_{t}"].to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(p) & (y > 0)
        out[f"{t}_mape"] = float(100 * np.mean(np.abs(p[ok] / y[ok] - 1)))
        out[f"{t}_rho"] = float(spearmanr(p[ok], y[ok])[0]) if ok.sum() > 2 else float("nan")
    return out


def settings(data: str, overrides: list[str]) -> tuple[dict, dict, Any]:
    """``(model, features, prior)`` sections that ``carb-train data.path=<data> <overrides>`` composes."""
    from carb.commands.cli import compose, to_dict

    cfg = compose("train", [f"data.path={data}", *overrides])
    return to_dict(cfg.model), to_dict(cfg.features), to_dict(cfg.prior)


def fit(model: dict, features: dict, prior: Any, train: pd.DataFrame, val: pd.DataFrame | None = None):
    """The cascade ``carb-train`` builds for ``len(train)`` rows, fitted on ``train`` (validated on ``val``,
    else its internal split)."""
    from carb.model.presets import build_cascade, resolve_auto

    cfg, _ = resolve_auto(model, len(train))
    targets = [t for t in TARGETS if t in train.columns and train[t].notna().any()]
    cascade = build_cascade(cfg, features, prior)
    if val is None:
        return cascade.fit(train, train[targets])
    return cascade.fit(train, train[targets], val, val[targets])


def prior_form(cascade: Any, target: str) -> str:
    """The form of ``target``'s physics prior in a fitted cascade (``layers``, ``kinds``, ``aggregate``; "" without)."""
    stage = getattr(cascade, "stages_", {}).get(target)
    return str(getattr(getattr(stage, "prior", None), "form_", ""))


def layer_features(features: dict) -> dict:
    """The layer-table feature list a combined fit uses (:func:`carb.model.encoding.zoo_features`)."""
    from carb.model.encoding import zoo_features

    return {"name": "layer", "columns": zoo_features(features["columns"])}


def resnet_part(resnet: pd.DataFrame, zoo: pd.DataFrame, sections: tuple, seed: int) -> dict[str, dict]:
    """The three ResNet fits scored on the ResNet test split."""
    from carb.analysis.training import split_frames

    model, features, prior = sections
    train, val, _cal, test = split_frames(resnet, 0, (0.6, 0.15, 0.1, 0.15))
    zval = zoo.sample(frac=0.15, random_state=seed)
    ztrain = zoo.drop(index=zval.index)
    out = {}
    fits = [("resnet", features, train, val), ("resnet+layer", layer_features(features), train, val)]
    if len(zoo):
        fits.append(("combined", features, pd.concat([train, ztrain], ignore_index=True),
                     pd.concat([val, zval], ignore_index=True)))
    for name, feats, tr, va in fits:
        m = fit(model, feats, prior, tr, va)
        out[name] = {"rows": len(tr), "input_kind": m.input_kind_, **scores(m.predict(test), test),
                     "latency_prior": prior_form(m, "latency_ms")}
        print(f"  resnet test ({len(test)} rows), {name}: {out[name]}", file=sys.stderr, flush=True)
    return out


def zoo_part(resnet: pd.DataFrame, zoo: pd.DataFrame, sections: tuple, families: list[str]) -> pd.DataFrame:
    """Leave-one-family-out of the zoo, zoo-only and combined fits: one row per (family, fit)."""
    model, features, prior = sections
    rows = []
    for f in families:
        held = zoo["family"].astype(str) == f
        for name, train in (("zoo", zoo[~held]), ("combined", pd.concat([zoo[~held], resnet], ignore_index=True))):
            m = fit(model, features, prior, train.reset_index(drop=True))
            test = zoo[held].reset_index(drop=True)
            rows.append({"family": f, "fit": name, "rows": int(held.sum()), **scores(m.predict(test), test)})
            print(f"  zoo {f}: {rows[-1]}", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def pooled(table: pd.DataFrame, fit_name: str, target: str) -> tuple[float, float, int, int]:
    """(row-weighted MAPE, worst family's MAPE, families within 20 %, families) of one fit."""
    t = table[table["fit"] == fit_name]
    col = f"{target}_mape"
    return (float(np.average(t[col], weights=t["rows"])), float(t[col].max()), int((t[col] <= 20).sum()), len(t))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--resnet", default="carb/data/cpu-amd-zen4.parquet")
    ap.add_argument("--zoo", default="zoo-cpu", help="the zoo rows of the same device; none: ResNet fits only")
    ap.add_argument("--families", nargs="*", default=None, help="zoo families to hold out (default: all)")
    ap.add_argument("--skip-zoo", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    from carb.analysis.zoo_cpu_eval import usable
    from carb.data.io import load_training_frame

    from carb.errors import CarbError

    try:
        resnet, dev_r = load_training_frame(args.resnet)
        zoo, dev_z = load_training_frame(args.zoo) if args.zoo != "none" else (pd.DataFrame(), "none")
    except CarbError as e:   # a dataset that is not there or not valid: one line, nothing computed
        ap.exit(2, f"one_cascade: {e}\n")
    zoo = usable(zoo).drop(columns=["model"]) if len(zoo) else zoo
    args.skip_zoo |= not len(zoo)
    ids = {str(v) for v in pd.concat([resnet["device_id"], zoo.get("device_id", pd.Series(dtype=str))]).dropna()}
    print(f"ResNet rows {len(resnet)} ({dev_r}), zoo rows {len(zoo)} ({dev_z}), device ids {sorted(ids)}", flush=True)
    sections = settings(args.resnet, [])
    res = resnet_part(resnet, zoo, sections, args.seed)
    print(pd.DataFrame(res).T.to_string(float_format=lambda v: f"{v:.3f}"), flush=True)
    out: dict[str, Any] = {"resnet": res}
    line = {f"{k.replace('+', '_')}_{t[:3]}_mape": v[f"{t}_mape"] for k, v in res.items() for t in TARGETS}
    if not args.skip_zoo:
        fams = args.families or sorted(zoo["family"].astype(str).unique())
        table = zoo_part(resnet, zoo, sections, fams)
        wide = table.pivot(index="family", columns="fit", values=[f"{t}_mape" for t in TARGETS])
        print(wide.round(1).to_string(), flush=True)
        out["zoo"] = table.to_dict(orient="records")
        for name in ("zoo", "combined"):
            for t in TARGETS:
                p, worst, within, n = pooled(table, name, t)
                print(f"{name:9s} {t}: pooled MAPE {p:.1f} %, worst family {worst:.1f} %, within 20 %: {within}/{n}")
                line[f"lofo_{name}_{t[:3]}_mape"] = p
                line[f"lofo_{name}_{t[:3]}_worst"] = worst
    if args.out:
        from carb.files import write_atomic

        text = json.dumps(out, indent=1, default=float)
        write_atomic(args.out, lambda tmp: tmp.write_text(text))
    print("one_cascade: " + " ".join(f"{k}={v:.2f}" for k, v in line.items()))


if __name__ == "__main__":
    main()
