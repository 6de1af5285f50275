"""Nested leave-family-out choice of a GPU setting of the zoo latency model's additive base, per GPU of timm's files.

Usage::

    python scripts/studies/zoo_gpu_nested.py --variant dw_native=true --variant cuda_layout=true [--groups 8]

Variant 0 is the additive base with ``conf/zoo_latency/default.yaml``'s settings (``input_bytes`` on: the GPU
files' choice); variant 1 the same with every ``--variant KEY=VALUE`` applied. Each held-out family takes the variant
with the lower mean family MAPE in a ``groups``-fold family-disjoint cross-validation of its training families only
(:func:`carb.analysis.zoo_nested.nested_choice`; the held-out family's rows never take part). Prints, per GPU, how
many held-out families keep variant 1, and the leave-one-family-out figures (families within 20 % / mean family MAPE
% / worst family) of variant 0, variant 1 and the nested choice, base alone. Real data: timm's published GPU files
joined to the trace table (``with_trace(..., reparam="published")``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

BASE_KEYS = ("gemm_regimes", "amp_split", "sdpa_math_io", "other_bytes", "dw_nonsquare", "bmm_tiles", "act_fp32",
             "hidden_copies", "dw_native", "gn_reread", "cuda_layout", "conv_tile")


def base_settings(overrides: list[str]) -> dict:
    """The additive base's settings (:class:`carb.model.zoo_latency.AdditiveBase` keywords) from the conf with
    ``overrides`` (checked by ``scripts/bench/zoo.py``'s schema check: a bad key is one line, exit 2)."""
    from zoo import zoo_latency_settings

    s = zoo_latency_settings(overrides, device_kind="gpu")
    out = {k: s[k] for k in BASE_KEYS if k in s}
    out["act_fp32"] = bool(out.get("act_fp32") is True)
    return out | {"input_bytes": True}


class _Base:
    """:class:`carb.model.zoo_latency.AdditiveBase` with ``predict``: ``latency_ms`` per batch (n,)."""

    def __init__(self, **settings):
        from carb.model.zoo_latency import AdditiveBase

        self.base = AdditiveBase(**settings)

    def fit(self, frame: pd.DataFrame) -> _Base:
        """Fit the base on ``frame``'s rows."""
        self.base.fit(frame)
        return self

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """``latency_ms`` per batch (n,): the base's time per image times ``batch_size``."""
        return np.exp(self.base.predict_log(frame)) * frame["batch_size"].to_numpy(float)


def lofo(rows: pd.DataFrame, make) -> pd.DataFrame:
    """Leave-one-family-out predictions (``pred``, ms) of ``make()`` on ``rows``."""
    out = rows[["family", "model", "latency_ms"]].copy()
    out["pred"] = np.nan
    for fam in rows["family"].unique():
        at = (rows["family"] == fam).to_numpy()
        out.loc[at, "pred"] = make().fit(rows[~at]).predict(rows[at])
    return out


def figures(p: pd.DataFrame) -> str:
    """Families within 20 % / mean family MAPE % / worst family (name and MAPE %) of LOFO predictions ``p``."""
    fam = (p["pred"] / p["latency_ms"] - 1).abs().groupby(p["family"]).mean() * 100
    return f"{int((fam <= 20).sum())}/{len(fam)}, {fam.mean():.2f}, {fam.idxmax()} {fam.max():.1f}"


def main() -> None:
    """Print, per GPU, the nested choice between the shipped base and the ``--variant`` one."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--groups", type=int, default=8)
    a = p.parse_args()
    if not a.variant or a.groups < 2:
        print("--variant: at least one KEY=VALUE is needed, --groups >= 2", file=sys.stderr)
        raise SystemExit(2)
    from carb.analysis.zoo_nested import nested_choice, nested_predictions
    from carb.data.importers.timm_zoo import load_zoo_bench, with_census, with_trace
    from carb.model.zoo_latency import gpu_rows

    zoo = with_trace(with_census(load_zoo_bench()), reparam="published")
    zoo = zoo[gpu_rows(zoo) & zoo["tr_flops"].notna()]
    s0, s1 = base_settings([]), base_settings(a.variant)
    makes = [lambda: _Base(**s0), lambda: _Base(**s1)]
    print(f"variant 1: {', '.join(a.variant)}; base settings {s0}", flush=True)
    for dev, rows in zoo.groupby("device_name", sort=True):
        rows = rows.reset_index(drop=True)
        fams = sorted(rows["family"].astype(str).unique())
        chosen = nested_choice(rows, makes, fams, groups=a.groups)
        preds = [lofo(rows, m).rename(columns={"pred": "pred_carb"}) for m in makes]
        nest = nested_predictions(preds, chosen).rename(columns={"pred_carb": "pred"})
        p0, p1 = (q.rename(columns={"pred_carb": "pred"}) for q in preds)
        print(f"{dev}: variant 1 kept for {sum(chosen.values())}/{len(chosen)} held-out families; LOFO base alone "
              f"(within 20 %, mean family MAPE %, worst): shipped {figures(p0)}; variant {figures(p1)}; "
              f"nested {figures(nest)}", flush=True)


if __name__ == "__main__":
    main()
