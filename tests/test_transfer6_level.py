"""Issue 44, K-row bands with three CPUs: no CPU pair avoids both devices of a CPU pair, so the band of a K-row
transfer falls back to the pairs without its *target* device (the source's own pairs). Their held-out error
level is used where it is steadier across them than its ratio to their own K-row intervals (the K rows are the
space's corners: their leave-one-out residuals overstate the held-out error); else the K rows' own interval
stays. Synthetic records made here."""
from __future__ import annotations

import numpy as np
import pytest
from test_transfer5_band import _bare_transfer


def _pair(src: str, dst: str, err_sd: float, loo_sd: float, seed: int, n: int = 400) -> dict:
    """One CPU pair's record: held-out log errors N(0, err_sd) (n,), its 10 K rows' residuals N(0, loo_sd)."""
    rng = np.random.default_rng(seed)
    return {"pair": (src, dst), "kind": "cpu", "err": rng.normal(0.0, err_sd, n),
            "loo": list(rng.normal(0.0, loo_sd, 10)), "precision": None}


def test_target_out_records_keep_the_source_pairs_and_drop_the_target():
    """For A -> C: every pair touching C is out, and A -> C itself; A <-> B (the source's own) stay."""
    from carb.model.transfer_prior import lodo_records, target_out_records

    recs = [{"pair": p} for p in (("A", "B"), ("B", "A"), ("A", "C"), ("C", "A"), ("B", "C"), ("C", "B"))]
    assert [r["pair"] for r in target_out_records(recs, ("A", "C"))] == [("A", "B"), ("B", "A")]
    assert lodo_records(recs, ("A", "C")) == []   # strict leave-one-device-out: nothing among three devices


def test_k10_band_is_the_other_pairs_level_where_the_k_rows_overstate_it():
    """Two pairs without the target err N(0, 0.12) on their held-out rows while their corner K rows err 0.1 and
    0.4 (their ratio to their own intervals differs x4, the level does not): the target's band is the pairs'
    90 % |error| (about 1.645 x 0.12), covering 0.86-0.94 of a new device's rows that err N(0, 0.12), where the
    target's own corner K rows (sd 0.4) gave a Student-t band covering > 0.99 and hi/lo > 3. The old fallback
    (no target_out) kept the K rows' own interval."""
    from carb.model.transfer import interval_entry

    others = [_pair("A", "B", 0.12, 0.10, seed=1), _pair("B", "A", 0.12, 0.40, seed=2)]
    gpu = [{"pair": ("g1", "g2"), "kind": "gpu", "err": np.zeros(20), "scale": 0.03}]
    loo = list(np.random.default_rng(3).normal(0.0, 0.4, 10))
    tr = _bare_transfer(loo, ["fp32"] * 10)
    entry = tr.set_device_band("latency_ms", gpu, 0.0, scaled=True, target_out=others)
    pooled = np.abs(np.concatenate([r["err"] for r in others]))
    assert entry["upper"] == pytest.approx(np.quantile(pooled, 0.9), rel=0.03)
    assert entry["lower"] == pytest.approx(-entry["upper"])
    assert entry["n_devices"] == 2 and "without the target device" in entry["method"]
    assert entry["pivot"]["level_sd"] < entry["pivot"]["ratio_sd"]
    new = np.random.default_rng(4).normal(0.0, 0.12, 4000)
    assert 0.86 <= np.mean(np.abs(new) <= entry["upper"]) <= 0.94
    own = interval_entry(np.asarray(loo), 0.9)
    assert np.mean((new >= own["lower"]) & (new <= own["upper"])) > 0.99 and np.exp(own["upper"] - own["lower"]) > 3


def test_k_rows_keep_their_own_band_where_the_level_varies_more_than_the_ratio():
    """Pairs whose held-out level differs x10 (0.02 against 0.2) while their K rows track it (ratio steady): the
    level says nothing about a new device, so the target keeps its K rows' own interval (0 devices named)."""
    from carb.model.transfer import interval_entry

    others = [_pair("A", "B", 0.02, 0.02, seed=5), _pair("B", "A", 0.2, 0.2, seed=5)]
    loo = list(np.random.default_rng(6).normal(0.0, 0.1, 10))
    tr = _bare_transfer(loo, ["fp32"] * 10)
    entry = tr.set_device_band("latency_ms", [], 0.0, scaled=True, target_out=others)
    own = interval_entry(np.asarray(loo), 0.9)
    assert entry["n_devices"] == 0 and (entry["lower"], entry["upper"]) == pytest.approx((own["lower"], own["upper"]))


def test_the_level_band_is_never_narrower_than_the_repeatability_floor_and_needs_two_pairs():
    """A level of 0.016 under a floor of log sd 0.1: the band sits at z x 0.1 (bf16 wider at its own 0.2); with one
    pair there is no spread to compare, so no level band (None)."""
    from carb.model.transfer_prior import configure, held_out_level_band

    z = 1.6448536
    others = [_pair("A", "B", 0.01, 0.01, seed=7), _pair("B", "A", 0.01, 0.3, seed=8)]
    tr = _bare_transfer(list(np.random.default_rng(9).normal(0.0, 0.3, 10)), ["fp32"] * 10)
    floor = {"fp32": 0.1, "bf16": 0.2, "default": 0.1}
    entry = tr.set_device_band("latency_ms", [], floor, scaled=True, target_out=others,
                               rules=configure(level_noise="keep"))
    assert entry["upper"] == pytest.approx(z * 0.1, rel=1e-6) and entry["n_devices"] == 2
    swapped = tr.set_device_band("latency_ms", [], floor, scaled=True, target_out=others,
                                 rules=configure(level_noise="swap"))   # the device's noise added to the level
    assert z * 0.1 < swapped["upper"] < z * 0.1 * 1.02
    assert max(entry["precision_log_ratios"]["bf16"]) == pytest.approx(z * 0.2, rel=1e-5)
    assert held_out_level_band([{**others[0], "own_half": 0.5}], 0.9, "cpu") is None


def test_k0_probe_offset_takes_the_target_as_the_known_devices_mean():
    """Devices whose networks run slower than their probe implies by u = 0, 0.15, -0.05, 0.02 (A, B, C, D), pair
    biases u_target - u_source: the offsets are recovered up to their mean, and B -> D (B slow, like the Xeon)
    is corrected by mean(u_A, u_B, u_C) - u_B from the pairs without D only (D's own pairs are never read: changing
    them changes nothing); its error drops from -0.13 to -0.013. A source outside the known pairs: no correction."""
    from carb.model.transfer_prior import device_offsets, probe_offset_correction

    u = {"A": 0.0, "B": 0.15, "C": -0.05, "D": 0.02}
    biases = {(a, b): u[b] - u[a] for a in u for b in u if a != b}
    got = device_offsets(biases)
    assert {d: got[d] - got["A"] for d in u} == pytest.approx(u) and sum(got.values()) == pytest.approx(0.0, abs=1e-12)
    c = probe_offset_correction(biases, "B", "D")
    assert c == pytest.approx((u["A"] + u["B"] + u["C"]) / 3 - u["B"])
    assert abs((u["D"] - u["B"]) - c) < 0.02 < abs(u["D"] - u["B"])
    moved = {p: (v + 1.0 if "D" in p else v) for p, v in biases.items()}
    assert probe_offset_correction(moved, "B", "D") == pytest.approx(c)
    assert probe_offset_correction({("A", "C"): 0.1}, "B", "D") == 0.0


def test_benchmark_k0_offset_line_reports_the_corrected_worst_cell():
    """The benchmark's study line: three devices' zero-shot errors with a slow source (B), B -> A's error shrinks."""
    from scripts.bench.transfer_pairs import k0_offset_line

    u = {"A": 0.0, "B": 0.15, "C": 0.0}
    rng = np.random.default_rng(0)
    pend = [{"k": 0, "name": "zero_shot", "target": "latency_ms", "pair": (a, b),
             "err": u[b] - u[a] + rng.normal(0, 0.01, 30), "precision": np.full(30, "fp32")}
            for a in u for b in u if a != b]
    line = k0_offset_line(pend)
    new, old = (float(v) for v in __import__("re").search(r"max_mape=([\d.]+) \(was ([\d.]+)\)", line).groups())
    assert line.startswith("k0_offset: ") and new < old and "cells=6" in line
