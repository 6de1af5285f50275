"""The choices the any-device transfer makes from data (issue 29): the spec weights' form by
leave-one-device-out, the K rows shared out over precisions, and the benchmark's pooled coverage line.
Synthetic devices with known physics only."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.analysis.transfer import space_filling_per_precision, split_k
from carb.design.select import space_filling
from carb.errors import ConfigError
from carb.model.spec_transfer import choose_form, fit_weights, spec_axes
from synthetic import synthetic_dataset


def gpus(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"name": f"G{i}", "fp16_tensor_TFLOPS": float(rng.uniform(50, 500)),
             "memory_bandwidth_GBps": float(rng.uniform(500, 3000)), "power_limit_W": float(rng.uniform(150, 700))}
            for i in range(n)]


def pairs_of(specs: list[dict], truth: np.ndarray, noise: float, seed: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(seed)
    axes = {(a["name"], b["name"]): spec_axes(a, b, "fp16") for a in specs for b in specs if a is not b}
    return axes, {q: float(v @ truth + rng.normal(0, noise)) for q, v in axes.items()}


def test_geometric_weights_sum_to_one_and_free_ones_need_not():
    axes, y = pairs_of(gpus(5, 0), np.array([0.2, 0.5, 0.3]), 0.0, 0)
    A, b = np.array(list(axes.values())), np.array(list(y.values()))
    w = fit_weights(A, b)                                   # geometric by default
    assert np.allclose(list(w.values()), [0.2, 0.5, 0.3], atol=1e-4) and min(w.values()) >= 0
    axes, y = pairs_of(gpus(5, 0), np.array([0.1, 0.2, 0.2]), 0.0, 0)
    A, b = np.array(list(axes.values())), np.array(list(y.values()))
    assert np.allclose(list(fit_weights(A, b, "free").values()), [0.1, 0.2, 0.2])
    assert sum(fit_weights(A, b, "geometric").values()) == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ConfigError, match="allowed"):
        fit_weights(A, b, "cubic")


def test_choose_form_by_leave_one_device_out():
    """Physics on the simplex with noise: geometric (it cannot overfit); a device family whose latency
    scales as half its specs: free; too few pairs for the free form: geometric."""
    form, scores = choose_form(*pairs_of(gpus(5, 1), np.array([0.3, 0.35, 0.35]), 0.05, 1))
    assert form == "geometric" and scores["geometric"] < scores["free"]
    form, scores = choose_form(*pairs_of(gpus(5, 2), np.array([0.1, 0.2, 0.2]), 0.01, 2))
    assert form == "free" and scores["free"] < scores["geometric"]
    assert choose_form(*pairs_of(gpus(3, 3), np.array([0.1, 0.2, 0.2]), 0.0, 3))[0] == "geometric"


def test_k_rows_are_shared_out_over_precisions():
    d = synthetic_dataset(200, seed=5, energy=False)
    d = d[d["status"] == "ok"].reset_index(drop=True)
    counts = d["precision"].value_counts()
    assert len(counts) == 3
    picks = space_filling_per_precision(d, 10)
    got = d.iloc[picks]["precision"].value_counts()
    assert len(set(picks)) == 10 and sorted(got.to_numpy()) == [3, 3, 4]
    assert got[counts.index[0]] == 4                                     # the most numerous gets the extra row
    assert d.iloc[space_filling_per_precision(d, 2)]["precision"].nunique() == 2
    one = d[d["precision"] == counts.index[0]].reset_index(drop=True)
    assert space_filling_per_precision(one, 5) == space_filling(one, 5)
    cal, rest = split_k(d, 10)
    assert len(cal) == 10 and len(rest) == len(d) - 10 and not set(cal.index) & set(rest.index)


def test_pooled_coverage_line_weights_pairs_equally_and_counts_rows():
    from scripts.bench.transfer_pairs import pooled_coverage_line

    rec = lambda s, d, p, n, c: {"source": s, "target_device": d, "target": "latency_ms", "k": 10,  # noqa: E731
                                 "model": "calibrated", "precision": p, "n": n, "coverage": c}
    t = pd.DataFrame([rec("EPYC", "Xeon", "fp32", 90, 1.0), rec("EPYC", "Xeon", "bf16", 10, 0.0),
                      rec("Xeon", "EPYC", "fp32", 100, 0.8), rec("RTX 3090", "RTX 4090", "fp16", 12, 0.75),
                      rec("RTX 4090", "RTX 3090", "fp16", 12, 1.0)])
    line = pooled_coverage_line(t)
    assert line == ("coverage_pooled_k10: cpu=0.85 (pairs=2 rows=200) gpu=0.88 (pairs=2 rows=24) "
                    "all=0.86 (pairs=4 rows=224)")


def test_interval_sweep_counts_one_choice_per_held_out_pair_and_restores_the_settings():
    """--interval-sweep: one option per held-out pair (its own errors in no prior), settings restored."""
    from carb.model import transfer_prior
    from carb.model.intervals import screening_predict
    from scripts.bench.transfer_pairs import PRIOR_ROWS, interval_sweep
    from test_transfer_prior import calibrated, device, rows

    base, pend = rows().head(50), []
    for i, (s, d, sd) in enumerate((("A", "B", 0.05), ("C", "D", 0.1), ("E", "F", 0.2))):
        tr, rest = calibrated(device(base, 3 + i, 2.0, 0.01), 10)
        p = screening_predict(tr, rest)
        err = np.random.default_rng(i).normal(0, sd, len(rest))
        pend.append({"source": s, "target_device": d, "target": "latency_ms", "k": 10, "err": err, "pair": (s, d),
                     "precision": np.full(len(rest), "fp32"), "y": p["pred_latency_ms"].to_numpy() * np.exp(err),
                     "pred": p, "model": tr, "loo": tr.transfer_["latency_ms"]["loo"]})
    table = pd.DataFrame([{"source": q["source"], "target_device": q["target_device"], "target": "latency_ms",
                           "precision": "fp32", "model": "calibrated", "k": 10, "n": len(q["err"])} for q in pend])
    before = transfer_prior.LOO_STAT, PRIOR_ROWS[0]
    counts = interval_sweep([(table, pend)], stats=("median", "mean"), prior_rows=(0, 10))
    assert counts.sum() == 3 and set(counts.index) <= {"median/0", "median/10", "mean/0", "mean/10"}
    assert (transfer_prior.LOO_STAT, PRIOR_ROWS[0]) == before
