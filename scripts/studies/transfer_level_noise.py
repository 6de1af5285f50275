"""Study (k44b, issue 44): the run-to-run noise inside the three CPUs' target-out level band
(``transfer.level_noise``: ``keep`` the pairs' held-out errors as measured, each carrying the noise of the device it
was measured on; ``swap`` that noise taken out per precision in quadrature and the target's own added back,
:func:`carb.model.transfer_prior.held_out_level_band`), judged leave-one-device-out.

From a ``python -m scripts.bench.transfer_pairs --parts-out FILE`` (every pick's fits and held-out errors), the
intervals are rebuilt under each rule (:func:`scripts.bench.transfer_pairs.set_intervals`) and each CPU target's
coverage (latency and memory, K = 10 and the quickstart's K, pooled over its held-out rows and the picks) is read.
Every band already leaves its target device out; the rule has no free parameter. Two readings: per target device
and cell, whether ``swap`` moves coverage closer to the nominal 0.90 than ``keep``; and nested, each target's rule the
one whose mean |coverage - 0.9| over the OTHER two CPUs' cells is the least, the target scored at it.

    python -m scripts.studies.transfer_level_noise --parts-in FILE

Seconds (no fit).
"""
from __future__ import annotations

import argparse
import dataclasses
import warnings

import pandas as pd

RULES = ("keep", "swap")


def coverage_by_rule(parts: list, rules: tuple[str, ...] = RULES) -> pd.DataFrame:
    """Rows (rule, target, k, target_device, coverage, width_median) of the CPU targets at K > 0, pooled over the
    picks, the intervals rebuilt under each ``transfer.level_noise`` of ``rules`` (other rules as configured)."""
    from scripts.bench import transfer_pairs as tp

    tp.interval_rules()
    base = tp.RULES[0]
    every = [q for p in parts for q in p[1]]
    out = []
    for rule in rules:
        tp.RULES[0] = dataclasses.replace(base, level_noise=rule)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = tp.set_intervals(pd.concat([p[0] for p in parts], ignore_index=True), every)
        t = t[(t.model == "calibrated") & (t.k > 0) & t["coverage"].notna() & ~t.target_device.str.contains("RTX")]
        t = t.assign(inside=t["coverage"] * t["n"])
        g = t.groupby(["target", "k", "target_device"])
        cov = (g["inside"].sum() / g["n"].sum()).rename("coverage")
        out.append(pd.concat([cov, g["width"].median().rename("width_median")], axis=1).reset_index()
                   .assign(rule=rule))
    tp.RULES[0] = base
    return pd.concat(out, ignore_index=True)


def verdict(c: pd.DataFrame, nominal: float = 0.9) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(cells, nested)``: per (target, k, device) the coverage under each rule and whether ``swap`` is closer to
    ``nominal`` (``closer`` / ``further`` / ``same`` within 0.0005); per held-out device the rule whose mean
    |coverage - nominal| over the other devices' cells is the least, and the held-out device's cells at it."""
    w = c.pivot_table(index=["target", "k", "target_device"], columns="rule", values="coverage").reset_index()
    d = (w["swap"] - nominal).abs() - (w["keep"] - nominal).abs()
    w["swap_is"] = ["same" if abs(x) < 5e-4 else ("closer" if x < 0 else "further") for x in d]
    c = c.assign(miss=(c.coverage - nominal).abs())
    rows = []
    for dev in c.target_device.unique():
        others = c[c.target_device != dev].groupby("rule")["miss"].mean()
        pick = str(others.idxmin())
        own = c[(c.target_device == dev) & (c.rule == pick)]
        rows.append({"held_out": dev, "chosen": pick, "others_miss": round(float(others.min()), 4),
                     **{f"{'lat' if r.target == 'latency_ms' else 'mem'}_k{r.k}": round(float(r.coverage), 3)
                        for r in own.itertuples()}})
    return w, pd.DataFrame(rows)


def main() -> None:
    """Print each rule's CPU coverage, the per-cell verdict and the nested choice."""
    from pathlib import Path

    import cloudpickle

    from scripts.bench.transfer import markdown

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts-in", required=True, help="a --parts-out file of python -m scripts.bench.transfer_pairs")
    a = ap.parse_args()
    parts = cloudpickle.loads(Path(a.parts_in).read_bytes())
    cells, nested = verdict(coverage_by_rule(parts))
    print(markdown(cells.round(3)))
    print(markdown(nested))
    n = cells["swap_is"].value_counts()
    print(f"level_noise: swap closer to 0.90 in {n.get('closer', 0)} cells, further in {n.get('further', 0)}, "
          f"same in {n.get('same', 0)}; nested " + " ".join(f"{r.held_out}={r.chosen}" for r in nested.itertuples()))


if __name__ == "__main__":
    main()
