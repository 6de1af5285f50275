"""scripts/studies/outside_check.py: drawing outside-domain screening candidates to measure, and
scoring the model on them (the selection, the reason parsing and the report's arithmetic; the model and
the screen are replaced by test-made frames, the measuring by nothing)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from scripts.studies import outside_check


@pytest.fixture(scope="module")
def oc():
    return outside_check


def test_first_knob_names_the_first_reason(oc):
    assert oc.first_knob("batch_size 128 > 32; flops 1.2e+11 > 8.0e+09") == "batch_size"
    assert oc.first_knob("precision fp16 never measured") == "precision"
    assert oc.first_knob("") == "" and oc.first_knob(None) == ""


def scored_frame(n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    reasons = np.array(["batch_size 128 > 32", "flops 9e+10 > 8.0e+09", "width_mult 2 > 1"])
    return pd.DataFrame({
        "in_domain": np.arange(n) % 4 == 0,
        "outside": reasons[np.arange(n) % 3],
        "precision": np.array(["fp32", "bf16"])[np.arange(n) % 2],
        "pred_latency_ms": rng.uniform(10, 100, n),
        "hi_latency_ms": rng.uniform(10, 200, n),
    })


def test_select_draws_outside_rows_under_the_cap_evenly_and_reproducibly(oc):
    s = scored_frame()
    a = oc.select(s, n=12, max_ms=150.0, seed=3)
    assert len(a) == 12
    assert (~a["in_domain"]).all() and (a["hi_latency_ms"] <= 150.0).all()
    counts = a.groupby(["reason_knob", "precision"]).size()
    assert counts.max() - counts.min() <= 1 and len(counts) == 6
    assert a.equals(oc.select(s, n=12, max_ms=150.0, seed=3))
    assert not a.equals(oc.select(s, n=12, max_ms=150.0, seed=4))
    everything = oc.select(s, n=1000, max_ms=150.0)
    assert len(everything) == int(((~s["in_domain"]) & (s["hi_latency_ms"] <= 150.0)).sum())


def test_report_scores_predictions_intervals_and_b1_per_target_and_reason(oc, monkeypatch):
    n = 8
    measured = pd.DataFrame({"status": ["ok"] * n + ["oom"], "latency_ms": [10.0 * (i + 1) for i in range(n + 1)],
                             "peak_memory_MB": [100.0 + i for i in range(n + 1)],
                             "flops": [1e9 * (i + 1) for i in range(n + 1)]})
    pred = measured.iloc[:n]
    fake = pd.DataFrame({
        "pred_latency_ms": pred["latency_ms"] * 1.1, "lo_latency_ms": pred["latency_ms"] * 0.9,
        "hi_latency_ms": pred["latency_ms"] * np.where(np.arange(n) < 6, 1.3, 0.95),
        "pred_peak_memory_MB": pred["peak_memory_MB"], "lo_peak_memory_MB": pred["peak_memory_MB"] - 1,
        "hi_peak_memory_MB": pred["peak_memory_MB"] + 1,
        "outside": ["batch_size 128 > 32"] * 4 + ["flops 9e+10 > 8e+09"] * 2 + [""] * 2})
    monkeypatch.setattr(oc, "screen_rows", lambda model, configs: fake.copy())
    monkeypatch.setattr(oc, "_configs", lambda rows: list(range(len(rows))))
    overall, by = oc.check_report(None, measured, measured.iloc[:n])
    lat = overall.set_index("target").loc["latency_ms"]
    assert lat["n"] == n and lat["mape"] == pytest.approx(10.0)
    assert lat["coverage"] == pytest.approx(6 / 8)   # the last two rows' upper bound lies below the measurement
    assert lat["spearman"] == pytest.approx(1.0)
    assert lat["b1_r2"] == pytest.approx(1.0)       # latency is exactly linear in FLOPs here
    mem = overall.set_index("target").loc["peak_memory_MB"]
    assert mem["coverage"] == 1.0 and mem["width"] == pytest.approx(np.mean(2 / pred["peak_memory_MB"]))
    g = by[by["target"] == "latency_ms"].set_index("reason")
    assert g.loc["batch_size", "n"] == 4 and g.loc["inside", "n"] == 2 and g.loc["inside", "coverage"] == 0.0


def test_anchors_are_seeded_balanced_and_drift_is_the_ratio_of_common_rows(oc):
    ref = pd.DataFrame({"config_id": [f"c{i}" for i in range(12)], "status": ["ok"] * 11 + ["oom"],
                        "precision": ["fp32", "bf16", "fp16"] * 4, "latency_ms": [10.0 + 10 * i for i in range(12)]})
    a = oc.pick_anchors(ref, n=6, seed=1, min_ms=20.0)
    assert len(a) == 6 and (a["latency_ms"] >= 20.0).all() and (a["status"] == "ok").all()
    assert a["precision"].value_counts().to_dict() == {"fp32": 2, "bf16": 2, "fp16": 2}
    assert a.equals(oc.pick_anchors(ref, n=6, seed=1, min_ms=20.0))
    again = a.assign(latency_ms=a["latency_ms"] * np.array([1.1, 1.2, 1.0, 1.1, 0.9, 1.1]))
    d = oc.drift(ref, pd.concat([again, pd.DataFrame({"config_id": ["new"], "status": ["ok"], "latency_ms": [5.0]})]))
    assert d["n"] == 6 and d["median"] == pytest.approx(1.1) and d["min"] == pytest.approx(0.9)
    assert oc.drift(ref, ref.iloc[:0])["n"] == 0
