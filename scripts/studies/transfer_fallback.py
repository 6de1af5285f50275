"""Study (k44, issue 44): the three CPUs' K > 0 band where the pairs without the target device find the ratio of
their held-out error to their own K-row interval steadier than its level (``transfer.target_out_fallback``: ``own``
keeps the K rows' own interval, ``ratio`` scales it by the ratio those pairs measured), chosen
leave-one-target-device-out.

From a ``python -m scripts.bench.transfer_pairs --parts-out FILE`` (every pick's fits and held-out errors), the
intervals are rebuilt under each rule (:func:`scripts.bench.transfer_pairs.set_intervals`, averaged over the K-row
picks) and each CPU target's coverage at K = 10 (latency and memory, pooled over its held-out rows, mean over the
picks) is read. Each target's rule is the one whose coverage over the OTHER two CPUs is nearest the nominal 0.90
(mean |coverage - 0.9| over their latency and memory), and the target is scored at it: never chosen on the target's
own rows.

    python -m scripts.studies.transfer_fallback --parts-in FILE [--rules own,ratio]

Seconds (no fit).
"""
from __future__ import annotations

import argparse
import warnings

import pandas as pd


def coverage_by_rule(parts: list, rules: list[str]) -> pd.DataFrame:
    """Rows (rule, target_device, k10_coverage, k10_memory_coverage, k10_width_max) of the CPU targets, the
    intervals rebuilt under each ``transfer.target_out_fallback`` of ``rules`` (other rules as configured)."""
    from carb.model import transfer_prior
    from scripts.bench import transfer_pairs as tp

    tp.interval_rules()
    base = tp.RULES[0]
    every = [q for p in parts for q in p[1]]
    out = []
    for rule in rules:
        tp.RULES[0] = transfer_prior.IntervalRules(base.device_widen, base.unmeasured_floor, base.level_by_precision,
                                                   base.zero_shot_target_out, rule, base.level_noise)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = tp.average_picks(tp.set_intervals(pd.concat([p[0] for p in parts], ignore_index=True), every))
        d = tp.device_table(t)
        cpu = d[~d.target_device.str.contains("RTX")]
        out += [{"rule": rule, **r} for r in cpu[["target_device", "k10_coverage", "k10_memory_coverage",
                                                   "k10_width_max", "k10_memory_width_max"]].to_dict("records")]
    tp.RULES[0] = base
    return pd.DataFrame(out)


def nested_choice(c: pd.DataFrame, nominal: float = 0.9) -> pd.DataFrame:
    """Per CPU target: the rule whose mean |coverage - nominal| (latency and memory) over the other targets is the
    least, and the target's coverage at that rule."""
    c = c.assign(miss=((c.k10_coverage - nominal).abs() + (c.k10_memory_coverage - nominal).abs()) / 2)
    rows = []
    for dev in c.target_device.unique():
        others = c[c.target_device != dev].groupby("rule")["miss"].mean()
        pick = str(others.idxmin())
        own = c[(c.target_device == dev) & (c.rule == pick)].iloc[0]
        rows.append({"held_out": dev, "chosen": pick, "others_miss": round(float(others.min()), 3),
                     "k10_coverage": round(float(own.k10_coverage), 3),
                     "k10_memory_coverage": round(float(own.k10_memory_coverage), 3),
                     "k10_width_max": round(float(own.k10_width_max), 2)})
    return pd.DataFrame(rows)


def main() -> None:
    """Print each rule's CPU coverage and the leave-one-target-device-out choice."""
    import cloudpickle
    from pathlib import Path

    from scripts.bench.transfer import markdown

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts-in", required=True, help="a --parts-out file of python -m scripts.bench.transfer_pairs")
    ap.add_argument("--rules", default="own,ratio")
    a = ap.parse_args()
    parts = cloudpickle.loads(Path(a.parts_in).read_bytes())
    c = coverage_by_rule(parts, a.rules.split(","))
    print(markdown(c.round(3)))
    n = nested_choice(c)
    print(markdown(n))
    print("fallback: " + " ".join(f"{r.held_out}={r.chosen}" for r in n.itertuples()))


if __name__ == "__main__":
    main()
