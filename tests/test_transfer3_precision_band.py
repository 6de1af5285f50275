"""Issue 29, transfer3: the transfer-error prior's band per precision (``PRECISION_BAND`` ``widest``: each
precision the wider of the pooled band and its own errors' band in the table), its use by
:func:`carb.model.intervals.interval`, the benchmark's choice of it leave-one-pair-out and its binomial
``coverage_cells`` line. Synthetic tables and rows only."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.model import transfer_prior
from carb.model.intervals import interval
from carb.model.transfer_prior import LEVELS, prior_entry


def table() -> pd.DataFrame:
    """A CPU table at K = 10: pooled 90 % |log error| 0.2, fp32 0.3 (erred more), fp16 0.1 (erred less)."""
    q90 = {"all": 0.2, "fp32": 0.3, "fp16": 0.1}
    return pd.DataFrame([{"kind": "cpu", "target": "latency_ms", "precision": p, "k": 10, "level": lev,
                          "abs_log_error": v * lev / 0.9, "loo_scale": 0.1, "n_pairs": 1, "n_rows": 100}
                         for p, v in q90.items() for lev in LEVELS])


@pytest.fixture
def band():
    saved = transfer_prior.PRECISION_BAND
    yield transfer_prior
    transfer_prior.PRECISION_BAND = saved


def test_widest_gives_a_precision_the_wider_of_the_pooled_and_its_own_band(band):
    band.PRECISION_BAND = "widest"
    loo = np.full(10, 0.05)                                   # half the table's LOO scale: factor 0.5^(10/20)
    e = prior_entry(table(), "cpu", "latency_ms", loo, 10, 0.9, 10)
    f = e["prior"]["factor"]
    assert f == pytest.approx(0.5 ** 0.5)
    assert e["upper"] == pytest.approx(0.2 * f, rel=0.02)
    assert e["method"].endswith("; fp16, fp32 each at least its own band")
    pred = pd.DataFrame({"pred_latency_ms": np.full(3, 10.0)})
    iv = interval({"latency_ms": e}, pred, precision=np.array(["fp32", "fp16", "bf16"]))
    half = np.log(iv["hi_latency_ms"].to_numpy() / 10.0)
    assert half[0] == pytest.approx(0.3 * f, rel=0.02)       # fp32 erred more elsewhere: its own band
    assert half[1] == pytest.approx(0.2 * f, rel=0.02)       # fp16 erred less: never narrower than pooled
    assert half[2] == pytest.approx(0.2 * f, rel=0.02)       # a precision the table lacks: pooled
    assert np.allclose(iv["lo_latency_ms"].to_numpy() * iv["hi_latency_ms"].to_numpy(), 100.0)   # symmetric in log
    pooled = interval({"latency_ms": e}, pred)               # no precisions given: the pooled band everywhere
    assert np.allclose(np.log(pooled["hi_latency_ms"].to_numpy() / 10.0), 0.2 * f, rtol=0.02)


def test_pooled_band_stores_no_precision_bands(band):
    band.PRECISION_BAND = "pooled"
    e = prior_entry(table(), "cpu", "latency_ms", np.full(10, 0.1), 10, 0.9, 10)
    assert "precision_log_ratios" not in e
    band.PRECISION_BAND = "widest"
    assert set(prior_entry(table(), "cpu", "latency_ms", np.full(10, 0.1), 10, 0.9, 10)["precision_log_ratios"]) \
        == {"fp16", "fp32"}


def test_coverage_cells_line_flags_only_cells_a_binomial_test_rejects():
    from scripts.bench.transfer_pairs import coverage_cells_line

    def rec(s, d, p, n, inside):
        return {"source": s, "target_device": d, "target": "latency_ms", "precision": p, "model": "calibrated",
                "k": 10, "n": n, "coverage": inside / n}

    t = pd.DataFrame([rec("A", "B", "fp32", 89, 72), rec("A", "B", "bf16", 93, 87), rec("G", "H", "fp16", 12, 10),
                      rec("B", "A", "fp16", 147, 147), rec("H", "G", "fp16", 12, 12)])
    line = coverage_cells_line(t)
    assert line.startswith("coverage_cells: n=5 inconsistent=2 (")
    assert "A -> B fp32 72/89 p=0.0076" in line and "B -> A fp16 147/147 p=" in line
    assert "G -> H" not in line and "H -> G" not in line and "bf16" not in line   # 10/12, 12/12, 87/93: consistent
    assert coverage_cells_line(t.iloc[2:3]) == "coverage_cells: n=1 inconsistent=0"


def test_precision_sweep_picks_per_held_out_pair_and_restores_the_band(band):
    """One choice per held-out pair in each scheme; the band that covers a precision erring more elsewhere
    wins where the pooled band under-covers it."""
    from carb.model.intervals import screening_predict
    from scripts.bench.transfer_pairs import precision_sweep
    from test_transfer_prior import calibrated, device, rows

    base, pend = rows().head(60), []
    for i, (s, d) in enumerate((("A", "B"), ("B", "A"), ("C", "D"))):
        tr, rest = calibrated(device(base, 3 + i, 2.0, 0.01), 10)
        p = screening_predict(tr, rest)
        prec = np.where(np.arange(len(rest)) % 2 == 0, "fp32", "bf16")
        err = np.random.default_rng(i).normal(0, 1, len(rest)) * np.where(prec == "fp32", 0.3, 0.03)
        pend.append({"source": s, "target_device": d, "target": "latency_ms", "k": 10, "err": err, "pair": (s, d),
                     "precision": prec, "y": p["pred_latency_ms"].to_numpy() * np.exp(err),
                     "pred": p, "model": tr, "loo": tr.transfer_["latency_ms"]["loo"]})
    table_ = pd.DataFrame([{"source": q["source"], "target_device": q["target_device"], "target": "latency_ms",
                            "precision": pr, "model": "calibrated", "k": 10, "n": int((q["precision"] == pr).sum())}
                           for q in pend for pr in ("fp32", "bf16")])
    band.PRECISION_BAND = "pooled"
    out = precision_sweep([(table_, pend)])
    assert band.PRECISION_BAND == "pooled"
    assert set(out) == {"pair_out", "nested"} and all(c.sum() == 3 for c in out.values())
    assert out["pair_out"].get("widest", 0) >= 2
