"""The transfer benchmark's K-row figures average over several picks (issue 44, k44): pick 0 is carb-calibrate's
own space-filling pick, the others the same rule on random halves of the target's rows; the benchmark reports
the mean and the picks' spread, and a pair's interval rests only on the other pairs' errors of the same pick."""
from __future__ import annotations

import numpy as np
import pytest
import pandas as pd


def frame(n: int = 60) -> pd.DataFrame:
    """``n`` rows of three precisions on the cost axes space-filling reads (test data only)."""
    rng = np.random.default_rng(1)
    return pd.DataFrame({"flops": rng.uniform(1e6, 1e9, n), "params": rng.uniform(1e4, 1e7, n),
                         "batch_size": rng.choice([1, 8, 32], n), "input_size": rng.choice([32, 64], n),
                         "precision": np.array(["fp32", "bf16", "fp16"])[np.arange(n) % 3]},
                        index=np.arange(100, 100 + n))


def test_pick_zero_is_split_k_and_other_picks_differ_but_keep_the_precision_shares():
    """pick 0 reproduces carb-calibrate's split exactly; picks 1.. are reproducible, differ from each other,
    keep each precision's share of K and hold out every row not picked."""
    from carb.analysis.transfer import pick_split, split_k

    f = frame()
    cal0, rest0 = pick_split(f, 10, 0)
    ref, _ = split_k(f, 10)
    assert list(cal0.index) == list(ref.index)
    seen = {tuple(sorted(cal0.index))}
    for pick in (1, 2, 3):
        cal, rest = pick_split(f, 10, pick, 0.5, 0)
        again, _ = pick_split(f, 10, pick, 0.5, 0)
        assert list(cal.index) == list(again.index)
        assert len(cal) == 10 and len(rest) == len(f) - 10 and not set(cal.index) & set(rest.index)
        assert cal["precision"].value_counts().to_dict() == cal0["precision"].value_counts().to_dict()
        seen.add(tuple(sorted(cal.index)))
    assert len(seen) == 4


def test_average_picks_reports_the_mean_and_the_spread_and_the_headline_names_it():
    """Two picks of one cell at 10 % and 14 %: the table says 12 % with 10-14 beside it, and the headline keeps
    issue 44's keys (the mean) with the picks' range after them."""
    from scripts.bench.transfer_pairs import average_picks, device_table, headline

    recs = []
    for pick, (m10, cov) in enumerate(((10.0, 0.8), (14.0, 1.0))):
        for model, k, mape in (("zero_shot", 0, 20.0), ("calibrated", 10, m10), ("calibrated", 12, m10 - 1)):
            if k == 0 and pick:
                continue
            recs.append({"source": "A", "target_device": "B", "target": "latency_ms", "precision": "fp32",
                         "model": model, "k": k, "pick": pick, "n": 10, "mape_pct": mape, "spearman": 0.9,
                         "coverage": cov, "width": 1.5})
    t = average_picks(pd.DataFrame(recs))
    c = t[(t.k == 10) & (t.model == "calibrated")].iloc[0]
    assert (c["mape_pct"], c["mape_pct_min"], c["mape_pct_max"], c["picks"]) == (12.0, 10.0, 14.0, 2)
    assert abs(c["coverage"] - 0.9) < 1e-12
    d = device_table(t, kq=12).set_index("target_device")
    assert d.loc["B", "k10_range"] == "10.0-14.0" and d.loc["B", "k10_coverage_range"] == "0.80-1.00"
    line = headline(t, kq=12)
    assert "kq_max_mape=11.0 k10_max_mape=12.0" in line and "lodo_coverage_min=0.90" in line
    assert line.endswith("picks=2 kq_max_mape_range=9.0-13.0 k10_max_mape_range=10.0-14.0"), line


def test_benchmark_picks_are_configured():
    """The number of picks is conf/calibrate.yaml's ``benchmark`` (validated by the calibrate schema)."""
    from carb.commands.schema.commands import TransferBenchmark
    from omegaconf import OmegaConf
    from scripts.bench.transfer_pairs import ROOT, pick_settings

    conf = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "calibrate.yaml").benchmark)
    assert pick_settings() == {**TransferBenchmark(**conf).model_dump()}
    assert pick_settings()["picks"] >= 2


def test_a_picks_interval_rests_only_on_the_other_pairs_errors_of_the_same_pick():
    """Pairs A -> B and C -> D, two picks each; C -> D errs 0.05 in pick 0 and 0.5 in pick 1. A -> B's pick-0
    interval is the one it gets with pick 0 alone (C's pick-1 errors never widen it); its pick-1 interval is wider."""
    from test_transfer_prior import calibrated, device, rows

    from carb.model.intervals import screening_predict
    from scripts.bench.transfer_pairs import set_intervals

    base = rows().head(60)

    def pending() -> list[dict]:
        out = []
        for pick in (0, 1):
            for s, d, sd in (("A", "B", 0.05), ("C", "D", 0.05 if pick == 0 else 0.5)):
                tr, rest = calibrated(device(base, 3, 2.0, 0.01), 10)
                p = screening_predict(tr, rest)
                err = np.random.default_rng(pick).normal(0, sd, len(rest))
                out.append({"source": s, "target_device": d, "target": "latency_ms", "k": 10, "pick": pick,
                            "err": err, "precision": np.full(len(rest), "fp32"),
                            "y": p["pred_latency_ms"].to_numpy() * np.exp(err), "pred": p, "model": tr,
                            "loo": tr.transfer_["latency_ms"]["loo"]})
        return out

    def table(pend: list[dict]) -> pd.DataFrame:
        return pd.DataFrame([{"source": q["source"], "target_device": q["target_device"], "target": "latency_ms",
                              "precision": "fp32", "model": "calibrated", "k": 10, "pick": q["pick"]} for q in pend])

    both = pending()
    out = set_intervals(table(both), both, "cpu").set_index(["source", "pick"])
    alone = [q for q in pending() if q["pick"] == 0]
    ref = set_intervals(table(alone), alone, "cpu").set_index(["source", "pick"])
    assert out.loc[("A", 0), "width"] == pytest.approx(ref.loc[("A", 0), "width"])
    assert out.loc[("A", 1), "width"] > 1.5 * out.loc[("A", 0), "width"]
