"""Benchmark (accuracy, not time): a traced network's activation count against timm's published one, and what it
changes in a zoo latency prediction (zwire2; docs/MODEL.md, "Promote, serve, and timm's activation count").

``--networks`` networks drawn at random (``--seed``) from one device's rows of timm's file, each at its file input
size, batch ``--batch`` and the file's precision, are featured twice by
:class:`carb.model.zoo_predictor.ZooLatencyPredictor` fitted on the whole file (intervals not calibrated): joined
(the published columns, as for a network the file timed) and traced (as for a name the file lacks). The traced
``macts_M_per_image`` is taken two ways: the tracer's own count (``tr_activations``: before zwire2) and timm's
definition (:func:`carb.model.zoo_predictor.timm_activations`: what the traced path uses now). Per way: the ratio
traced / published, the share within 1 %, and the predictions traced against joined (MAPE %, max, share > 5 %).
Last line: ``zoo_activations: device=D networks=N families=F within1_before=X within1_after=X
pred_mape_before=X pred_mape_after=X pred_max_before=X pred_max_after=X``.
Run: ``python scripts/bench/zoo_activations.py --device 'RTX 4090' --networks 200``.
"""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import pandas as pd


def fitted(device: str):
    """``(predictor, rows)``: :class:`ZooLatencyPredictor` with ``conf/zoo_latency/default.yaml``'s settings fitted
    on ``device``'s rows of timm's file, the interval calibration skipped (not used here)."""
    from carb.commands.train import zoo_latency_conf
    from carb.model.zoo_predictor import ZooLatencyPredictor, device_settings, timm_rows

    rows = timm_rows(device)
    conf = zoo_latency_conf()
    model = ZooLatencyPredictor(device_settings(conf, str(rows["device_kind"].iloc[0])), thresholds=conf["cpu_parts"])
    model.calibrate = lambda rows, say=None: None
    return model.fit(rows), rows


def compare(model, rows: pd.DataFrame, n: int, seed: int, batch: int) -> pd.DataFrame:
    """One row per drawn network: ``ratio_before`` / ``ratio_after`` (traced / published activations) and
    ``ape_before`` / ``ape_after`` (% of the traced prediction against the joined one)."""
    nets = rows.drop_duplicates(["model", "input_size"]).sample(n, random_state=seed)
    knobs = pd.DataFrame({"model_name": nets["model_name"].to_numpy(), "input_size": nets["input_size"].to_numpy(),
                          "batch_size": batch, "precision": model.precisions_[0]})
    J, r1 = model.features(knobs)
    T, r2 = model.features(knobs, traced=True)
    ok = (r1 == "") & (r2 == "")
    J, T = J[ok].reset_index(drop=True), T[ok].reset_index(drop=True)
    before = T.assign(macts_M_per_image=T["tr_activations"] / 1e6)
    pub, pj = J["macts_M_per_image"].to_numpy(float), model.predict_latency(J)
    out = pd.DataFrame({"model": J["model_name"], "input_size": J["input_size"], "family": J["family"]})
    for lab, F in (("before", before), ("after", T)):
        out[f"ratio_{lab}"] = F["macts_M_per_image"].to_numpy(float) / pub
        out[f"ape_{lab}"] = np.abs(model.predict_latency(F) / pj - 1) * 100
    return out


def main() -> None:
    """Parse the arguments, compare, print the table of networks outside 1 % and the last line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="RTX 4090")
    ap.add_argument("--networks", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    model, rows = fitted(a.device)
    d = compare(model, rows, a.networks, a.seed, a.batch)
    for lab in ("before", "after"):
        q = np.round(np.quantile(d[f"ratio_{lab}"], [0.05, 0.25, 0.5, 0.95]), 3).tolist()
        print(f"{lab}: traced/published p5 p25 p50 p95 {q}; prediction traced vs joined: MAPE "
              f"{d[f'ape_{lab}'].mean():.2f} %, max {d[f'ape_{lab}'].max():.1f} %, share > 5 % "
              f"{(d[f'ape_{lab}'] > 5).mean():.3f}")
    print(d[(d["ratio_after"] - 1).abs() > 0.01].round(3).to_string())
    w = {lab: int(((d[f"ratio_{lab}"] - 1).abs() <= 0.01).sum()) for lab in ("before", "after")}
    print(f"zoo_activations: device={a.device.replace(' ', '_')} networks={len(d)} families={d['family'].nunique()} "
          f"within1_before={w['before']} within1_after={w['after']} pred_mape_before={d['ape_before'].mean():.3f} "
          f"pred_mape_after={d['ape_after'].mean():.3f} pred_max_before={d['ape_before'].max():.2f} "
          f"pred_max_after={d['ape_after'].max():.2f}")


if __name__ == "__main__":
    main()
