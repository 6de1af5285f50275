"""k44: the K > 0 band of a CPU pair among three CPUs where the pairs without its target device find the ratio of
their held-out error to their own K-row interval steadier than the level (``transfer.target_out_fallback``):
``own`` keeps the K rows' own interval (a ratio of 1), ``ratio`` scales it by the ratio those pairs measured.
Synthetic records made here."""
from __future__ import annotations

import numpy as np
import pytest
from test_transfer5_band import _bare_transfer
from test_transfer6_level import _pair


def test_ratio_fallback_scales_the_own_interval_by_the_ratio_the_other_pairs_measured():
    """Pairs whose held-out level differs x10 while their corner K rows err 2x more than their held-out rows (ratio
    steady, about 0.5): ``own`` keeps the target's own K-row interval, which covers > 0.97 of a new device whose
    rows err half as much as its K rows; ``ratio`` halves it and covers 0.85-0.95, and names the 2 devices."""
    from carb.model.transfer import interval_entry
    from carb.model.transfer_prior import configure

    others = [_pair("A", "B", 0.02, 0.04, seed=5, n=2000), _pair("B", "A", 0.2, 0.4, seed=6, n=2000)]
    loo = list(np.random.default_rng(7).normal(0.0, 0.2, 10))
    own = interval_entry(np.asarray(loo), 0.9)
    new = np.random.default_rng(8).normal(0.0, 0.5 * np.std(loo, ddof=1), 4000)   # half its K rows' scatter
    got = {}
    for rule in ("own", "ratio"):
        tr = _bare_transfer(loo, ["fp32"] * 10)
        got[rule] = tr.set_device_band("latency_ms", [], 0.0, scaled=True, target_out=others,
                                       rules=configure(target_out_fallback=rule))
    assert (got["own"]["lower"], got["own"]["upper"]) == pytest.approx((own["lower"], own["upper"]))
    assert got["own"]["n_devices"] == 0
    assert np.mean((new >= own["lower"]) & (new <= own["upper"])) > 0.97
    r = got["ratio"]
    assert r["n_devices"] == 2 and r["pivot"]["ratio_sd"] <= r["pivot"]["level_sd"] and "ratio" in r["method"]
    assert r["upper"] == pytest.approx(-r["lower"]) and r["upper"] < 0.7 * own["upper"]
    assert 0.85 <= np.mean(np.abs(new) <= r["upper"]) <= 0.95


def test_target_out_fallback_is_a_rule_with_one_line_errors():
    """A value outside own / ratio is refused naming the key and the allowed values."""
    from carb.model.transfer_prior import configure

    with pytest.raises(ValueError, match=r"transfer\.target_out_fallback: 'x'; allowed: own, ratio"):
        configure(target_out_fallback="x")
